"""The scripts' entry point: absl's `app.run` with one-line errors for bad input (`cli.run(main)`).

A wrong input (a flag absl refuses, `InputError` or `app.UsageError` anywhere, a ValueError or
OSError inside a `user_input()` block) prints "<script>: error: <message>" and exits 2 without a
traceback (`--verbosity=1` shows it); anything else keeps absl's traceback. A dataclass whose
fields are made with `param` is both a function's arguments and a script's flags
(`define_param_flags`, `param_values`); a field is part of the run identity of the job's outputs
(util/runs.py `identity`) unless marked `result=False`. Light on purpose: standard library and absl.
"""

import contextlib
import csv
import dataclasses
import os
import sys

from absl import app
from absl import flags
from absl import logging

# The flags `define_param_flags` (and `define_escaped_list`) define belong to the script that
# calls them, so that its --helpshort lists them (absl attributes a flag to the module that runs
# DEFINE_*).
flags.disclaim_key_flags()

# The exit status of a wrong input (absl exits with 1 for an uncaught exception).
EXIT_INPUT_ERROR = 2


class InputError(Exception):
  """The user's input is wrong; the message says which file (and line) or flag, and why."""


@contextlib.contextmanager
def user_input():
  """Turns a ValueError or OSError raised in the block into an `InputError`.

  Keep the block to the reading and checking of input, so that a ValueError from a bug in the
  computation after it still shows its traceback.
  """
  try:
    yield
  except InputError:
    raise
  except (ValueError, OSError) as e:
    raise InputError(str(e) or type(e).__name__) from e


def run(main):
  """`app.run(main)`, with every wrong input (see the module docstring) one line and exit 2."""

  def parse(argv):
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:
      _refuse(e)

  def guarded(argv):
    try:
      if len(argv) > 1:
        # A value without its flag (`score.py runs/tta`) would otherwise be dropped silently.
        raise InputError(
          f"unexpected argument {argv[1]!r}: this command takes flags only (--name=value)"
        )
      return main(argv)
    except (InputError, app.UsageError, flags.Error) as e:
      if logging.get_verbosity() >= logging.DEBUG:
        raise
      _refuse(e)

  app.run(guarded, flags_parser=parse)


def _refuse(error):
  """Writes `error` as one line "<script>: error: <message>" and exits with EXIT_INPUT_ERROR."""
  message = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
  if isinstance(error, flags.UnrecognizedFlagError):
    message += " (--helpshort lists the flags)"
  sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {message}\n")
  sys.exit(EXIT_INPUT_ERROR)


def register_choices(name, choices, flag_values=flags.FLAGS):
  """Refuses at parse time a value of list flag `name` that is not one of `choices` (absl's
  enums take one value; a comma-separated list has no enum of its own)."""

  def check(values):
    unknown = [v for v in values or () if v not in choices]
    if unknown:
      raise flags.ValidationError(f"unknown {', '.join(unknown)}; choose from {', '.join(choices)}")
    return True

  flags.register_validator(name, check, flag_values=flag_values)


class EscapedListParser(flags.ListParser):
  """absl's comma-separated list (`a,b` -> ['a', 'b'], `"a,b"` -> ['a,b']) where a backslash
  makes the next character plain: `a\\,b,c` -> ['a,b', 'c'], for names that hold a comma."""

  def parse(self, argument):
    if isinstance(argument, list) or not argument:
      return super().parse(argument)
    try:
      values = next(csv.reader([argument], strict=True, escapechar="\\"))
    except csv.Error as e:
      raise ValueError(f"{argument!r}: not a comma-separated list ({e})") from None
    return [value.strip() for value in values]


def define_escaped_list(name, default, help_text, flag_values=flags.FLAGS):
  """`flags.DEFINE_list` with `EscapedListParser`."""
  flags.DEFINE(
    EscapedListParser(),
    name,
    default,
    help_text,
    flag_values=flag_values,
    serializer=flags.CsvListSerializer(","),
  )


# The `io` marker of a field (`param`, `path_field`) that holds paths a command reads or writes:
# its output paths are kept apart from its input paths (io_utils.check_outputs_apart).
INPUT = "input"
OUTPUT = "output"


def param(
  help_text,
  default=dataclasses.MISSING,
  enum=None,
  flag=None,
  lower_bound=None,
  io=None,
  result=True,
):
  """A dataclass field that is also a command-line flag.

  Args:
    help_text: the flag's help, and the field's description.
    default: the default of both (MISSING: the field is required, the flag defaults to None).
    enum: allowed values: the flag is an enum.
    flag: the flag's name when it differs from the field's (BERT's singular --input_file for
      a field holding several globs).
    lower_bound: the least value of an int or float flag, refused by absl while parsing (a
      float's bound does not refuse nan: the dataclass's own check does, where it matters).
    io: INPUT or OUTPUT for a field holding paths (a path, a list of them, comma-separated
      globs, model specs such as kenlm:PATH or NAME=DIR) the command reads or writes.
    result: False for a field that changes none of the job's results (progress, threads, how
      often it saves, --overwrite): left out of its run identity (util/runs.py `identity`), so
      that a resume may change it. An OUTPUT field is never part of it.
  """
  return dataclasses.field(
    default=default,
    metadata={
      "help": help_text,
      "enum": enum,
      "flag": flag,
      "lower_bound": lower_bound,
      "io": io,
      "result": result,
    },
  )


def path_field(io, flag, default=None, default_factory=dataclasses.MISSING, result=True):
  """A dataclass field that is not made into a flag (the command sets it) but holds the paths of
  flag `flag`, marked INPUT or OUTPUT as `param`'s `io`, and `result` as `param`'s."""
  if default_factory is not dataclasses.MISSING:
    default = dataclasses.MISSING
  return dataclasses.field(
    default=default,
    default_factory=default_factory,
    metadata={"io": io, "flag": flag, "result": result},
  )


def setting(default=None, result=True):
  """A dataclass field that is no flag (a caller sets it), marked `result` as `param`'s."""
  return dataclasses.field(default=default, metadata={"result": result})


def is_result(field):
  """Whether dataclass field `field` is part of the run identity: not OUTPUT, not marked
  `result=False` (an unmarked field is)."""
  return field.metadata.get("result", True) and field.metadata.get("io") != OUTPUT


def flag_name(field):
  """The flag of dataclass field `field` (`param`'s `flag`), else the field's name."""
  return field.metadata.get("flag") or field.name


def io_values(params, io):
  """[(flag name, value)] of the fields of dataclass instance `params` marked `io` (INPUT or
  OUTPUT) whose value is set."""
  return [
    (flag_name(f), getattr(params, f.name))
    for f in dataclasses.fields(params)
    if f.metadata.get("io") == io and getattr(params, f.name) not in (None, "", (), [])
  ]


_DEFINE_BY_TYPE = {
  str: flags.DEFINE_string,
  int: flags.DEFINE_integer,
  float: flags.DEFINE_float,
  bool: flags.DEFINE_boolean,
  list: flags.DEFINE_list,
}


def _param_fields(cls):
  return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def define_param_flags(cls, flag_values=flags.FLAGS):
  """Defines one absl flag per `param` field of dataclass `cls` (in `flag_values`)."""
  for field in _param_fields(cls):
    default = None if field.default is dataclasses.MISSING else field.default
    if isinstance(default, tuple):
      # A list field's default is a tuple (a dataclass refuses a mutable default); absl's
      # list flags take lists.
      default = list(default)
    name, help_text = flag_name(field), field.metadata["help"]
    if field.metadata["enum"]:
      flags.DEFINE_enum(name, default, field.metadata["enum"], help_text, flag_values=flag_values)
    else:
      bound = field.metadata["lower_bound"]
      kwargs = {} if bound is None else {"lower_bound": bound}
      _DEFINE_BY_TYPE[field.type](name, default, help_text, flag_values=flag_values, **kwargs)


def param_values(cls, flag_values):
  """{field name: parsed flag value} of the `param` fields of `cls`."""
  return {f.name: flag_values[flag_name(f)].value for f in _param_fields(cls)}

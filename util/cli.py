"""The scripts' entry point: absl's `app.run` with one-line errors for bad input (`cli.run(main)`).

A wrong input (a flag absl refuses, `InputError` or `app.UsageError` anywhere, a ValueError or
OSError inside a `user_input()` block) prints "<script>: error: <message>" and exits 2 without a
traceback (`--verbosity=1` shows it); anything else keeps absl's traceback. A dataclass whose
fields are made with `param` is both a function's arguments and a script's flags
(`define_param_flags`, `params`); a field is part of the run identity of the job's outputs
(util/runs.py `identity`) unless marked `result=False`. Light on purpose: standard library and absl.
"""

import contextlib
import csv
import dataclasses
import errno
import math
import os
import sys

from absl import app
from absl import flags
from absl import logging

from util import interrupts
from util import startup_log

# The flags `define_param_flags` defines belong to the script that
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
  except (InputError, BrokenPipeError):
    raise  # a closed standard output ends the command as `run` says, whatever block it is in
  except (ValueError, OSError) as e:
    raise InputError(str(e) or type(e).__name__) from e


def run(main):
  """`app.run(main)`, with every wrong input (see the module docstring) one line and exit 2."""

  def parse(argv):
    _stdio_closed()  # before absl, which writes --help there
    try:
      return flags.FLAGS(merge_repeats(argv))
    except (flags.Error, InputError) as e:
      _refuse(e)
    except BrokenPipeError:
      _exit_stdout_closed()

  def guarded(argv):
    # From here a stop is `interrupts.exit_stopped`'s, no longer the start-up's one line.
    startup_log.quiet_stops_end()
    try:
      if len(argv) > 1:
        # A value without its flag (`score.py runs/tta`) would otherwise be dropped silently.
        raise InputError(
          f"unexpected argument {argv[1]!r}: this command takes flags only (--name=value)"
        )
      with interrupts.handling():
        return main(argv)
    except (InputError, app.UsageError, flags.Error) as e:
      if logging.get_verbosity() >= logging.DEBUG:
        raise
      _refuse(e)
    except KeyboardInterrupt as e:
      interrupts.exit_stopped(e)
    except BrokenPipeError:
      _exit_stdout_closed()
    except Exception:  # pylint: disable=broad-except
      # A stop that C code turned into another error is still the stop, not a bug's traceback.
      stop = interrupts.raised()
      if stop is None:
        raise
      interrupts.exit_stopped(stop)

  app.run(guarded, flags_parser=parse)


# The exit status of a command whose standard output was closed (128 + SIGPIPE, a shell's tool's).
EXIT_BROKEN_PIPE = 141


class _ClosedStdout:
  """sys.stdout when file descriptor 1 is closed (`>&-`), where Python's print() to None drops
  the text in silence (ngram.py --score_file's scores, exit 0): a write is a BrokenPipeError."""

  def write(self, text):
    if text:
      raise BrokenPipeError(errno.EBADF, "standard output is closed")

  def flush(self):
    pass

  def fileno(self):
    raise BrokenPipeError(errno.EBADF, "standard output is closed")


def _exit_stdout_closed():
  """Ends a command whose standard output is gone: `| head -1` (the reader ended) or `>&-` (there
  was none): one line, exit EXIT_BROKEN_PIPE."""
  if isinstance(sys.stdout, _ClosedStdout):
    why = "standard output is closed (>&-): nothing written there is kept"
  else:
    # Python's flush at exit would write into the closed pipe again.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    why = "standard output was closed by its reader (a pipe such as | head)"
  sys.stderr.write(f"{os.path.basename(sys.argv[0])}: stopped: {why}\n")
  sys.exit(EXIT_BROKEN_PIPE)


def _stdio_closed():
  """Stands in for a closed stdin (`<&-`: an empty input, as </dev/null) and stdout."""
  if sys.stdin is None:
    sys.stdin = open(os.devnull, encoding="utf-8")  # pylint: disable=consider-using-with
  if sys.stdout is None:
    sys.stdout = _ClosedStdout()


# {alias: flag name} of the aliases `define_param_flags` defined (absl's alias keeps its own name).
_ALIASES = {}


def merge_repeats(argv, flag_values=flags.FLAGS):
  """`argv` with each flag given more than once (or beside its alias, or in a --flagfile) as one: a
  list flag's values joined, a multi flag's kept in order, under the flag's own name. absl keeps
  the last value of a repeated flag in silence; InputError for one that takes a single value (a
  boolean's --name and --noname included: which one was meant, no order can tell)."""
  # A flag in a --flagfile is given as much as one on the command line (absl reads them in place).
  try:
    argv = argv[:1] + flag_values.read_flags_from_files(list(argv[1:]), force_gnu=False)
  except UnicodeDecodeError as e:
    named = [arg.partition("=")[2] for arg in argv[1:] if arg.lstrip("-").startswith("flagfile=")]
    raise InputError(f"--flagfile {', '.join(named)}: not UTF-8 text ({e.reason})") from None
  given = {}  # flag name: [(position in out, value, the argument as given)]
  out, i = list(argv[:1]), 1
  while i < len(argv):
    arg = argv[i]
    if arg == "--":
      out += argv[i:]
      break
    name, eq, value = arg.lstrip("-").partition("=")
    flag = _given_flag(name, flag_values) if arg.startswith("-") and arg != "-" else None
    if flag is not None and flag.boolean:
      # absl's own forms (--name, --noname, --name=false) are kept as given.
      given.setdefault(flag.name, []).append((len(out), None, arg))
      out.append(arg)
      i += 1
      continue
    if flag is None or not (eq or i + 1 < len(argv)):
      out.append(arg)  # absl's own rules: an unknown flag, a flag without its value
      i += 1
      continue
    if not eq:  # --name value
      value, i = argv[i + 1], i + 1
      next_name = value.lstrip("-").partition("=")[0]
      if value.startswith("-") and _given_flag(next_name, flag_values) is not None:
        # absl takes the next argument as the value: `--output_file --overwrite` would write a
        # file named --overwrite and drop the switch, in silence.
        raise InputError(
          f"--{name} has no value: the argument after it, {value}, is a flag of this command "
          f"(give --{name}=VALUE)"
        )
    name = _ALIASES.get(name, flag.name)
    given.setdefault(name, []).append((len(out), value, f"--{name}={value}"))
    out.append(f"--{name}={value}")
    i += 1
  for name, values in given.items():
    if len(values) < 2 or isinstance(flag_values[name], flags.MultiFlag):
      continue
    if flag_values[name].boolean or not isinstance(flag_values[name].parser, flags.ListParser):
      shown = ", ".join(arg for _, _, arg in values)
      raise InputError(f"--{name} is given {len(values)} times ({shown}): it takes one value")
    out[values[0][0]] = f"--{name}={','.join(value for _, value, _ in values)}"
    for position, _, _ in values[1:]:
      out[position] = None
  return [arg for arg in out if arg is not None]


def _given_flag(name, flag_values):
  """The flag that the name `name` of an argument (--name, or --noname of a boolean) sets, its
  alias's target for an alias; None for a name no flag has."""
  if name in flag_values:
    flag = flag_values[name]
  elif name.startswith("no") and name[2:] in flag_values and flag_values[name[2:]].boolean:
    flag = flag_values[name[2:]]
  else:
    return None
  target = _ALIASES.get(flag.name)
  return flag_values[target] if target else flag


def _refuse(error):
  """Writes `error` as one line "<script>: error: <message>" and exits with EXIT_INPUT_ERROR."""
  message = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
  if isinstance(error, flags.UnrecognizedFlagError):
    message += " (--helpshort lists the flags)"
  sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {message}\n")
  sys.exit(EXIT_INPUT_ERROR)


def choices(allowed):
  """A `param` check refusing a value of a list flag that is not one of `allowed` (absl's enums
  take one value; a comma-separated list has no enum of its own)."""

  def check(values):
    unknown = [v for v in values if v not in allowed]
    if unknown:
      raise ValueError(f"unknown {', '.join(unknown)}; choose from {', '.join(allowed)}")

  return check


def positive(value):
  """A `param` check refusing a number that is not finite and > 0 (absl's float bounds include the
  bound and let nan and inf through: a rate of inf trains steps that are not finite)."""
  if not 0 < value < math.inf:
    raise ValueError(f"{value} is not a finite number > 0")


def non_negative(value):
  """A `param` check refusing a number that is not finite and >= 0 (nan, inf, a negative decay)."""
  if not 0 <= value < math.inf:
    raise ValueError(f"{value} is not a finite number >= 0")


def fraction(value):
  """A `param` check refusing a number outside [0, 1] (nan included)."""
  if not 0 <= value <= 1:
    raise ValueError(f"{value} is not a fraction in [0, 1]")


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


# The `io` marker of a field (`param`) that holds paths a command reads or writes:
# its output paths are kept apart from its input paths (io_utils.check_outputs_apart).
INPUT = "input"
OUTPUT = "output"


# The `kind` of a `param` whose flag is not made from the field's type.
MULTI = "multi"  # a repeatable string flag (--name=a --name=b): a list
ESCAPED_LIST = "escaped_list"  # a comma-separated list with backslash escapes (EscapedListParser)
SWITCH = "switch"  # an enum that also takes a boolean's forms (SwitchParser)


class SwitchParser(flags.EnumParser):
  """absl's enum of `enum_values` that also takes a boolean flag's forms, so that a switch can grow
  values and keep its old meaning: a bare `--name` (or true, t, 1) is the first value, `--noname`
  (or false, f, 0) is None."""

  def parse(self, argument):
    text = str(argument).lower()
    if text in ("true", "t", "1"):
      return self.enum_values[0]
    if text in ("false", "f", "0"):
      return None
    return super().parse(argument)


class _SwitchFlag(flags.Flag):
  """A SwitchParser flag: absl treats it as a boolean (a bare `--name`, `--noname`)."""

  def __init__(self, name, default, enum_values, help_text):
    help_text = f"<{'|'.join(enum_values)}>, or a bare --{name} for {enum_values[0]}: {help_text}"
    super().__init__(
      SwitchParser(enum_values), flags.ArgumentSerializer(), name, default, help_text, boolean=True
    )

  def _serialize(self, value):
    return f"--no{self.name}" if value is None else f"--{self.name}={value}"


def param(
  help_text,
  default=dataclasses.MISSING,
  enum=None,
  flag=None,
  lower_bound=None,
  io=None,
  result=True,
  kind=None,
  check=None,
  convert=None,
  alias=None,
  preset=None,
  unused_with=(),
):
  """A dataclass field that is also a command-line flag.

  Args:
    help_text: the flag's help, and the field's description.
    default: the default of both. MISSING: the field is required; its flag defaults to None and
      `params` refuses a run without it ("--NAME is required").
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
    kind: MULTI or ESCAPED_LIST for a list flag of that kind, SWITCH for an `enum` flag that also
      takes a boolean's forms (`SwitchParser`; off is None), or the type of the flag's value
      (str, int, float, bool, list) where it is not the field's (a `convert` makes the field's);
      None: from the field's type. Repeating a flag is a property of its kind: a list flag
      (list, MULTI, ESCAPED_LIST) takes every value; any other refuses a repeat (`merge_repeats`).
    check: function(value) raising ValueError for a value absl should refuse while parsing
      (not called for None).
    convert: function(flag value) -> field value (not called for None); a ValueError is a
      wrong input.
    alias: another name of the flag (an old one).
    preset: {flag name: value} that the flags not given take when this flag is set (true, or
      not empty).
    unused_with: names of flags beside which this one does nothing (run_rescoring.py's --pairs
      of the paper's sets beside --test_file): given with one of them set, `params` refuses it
      rather than drop it in silence.
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
      "kind": kind,
      "check": check,
      "convert": convert,
      "alias": alias,
      "preset": preset,
      "unused_with": tuple(unused_with),
    },
  )


def nested(cls, only=None, defaults=None, result=True, flat=True):
  """A dataclass field holding dataclass `cls`, whose `param` fields are flags of the command
  too (its `FLAG_CHECKS` with them).

  Args:
    cls: the nested dataclass (lm/lm_options.py's LMOptions).
    only: the names of the fields made into flags (default: all); the others keep their default.
    defaults: {field name: value} replacing the field's default, flag or not.
    result: False: no field of it is part of the run identity (as `param`'s).
    flat: its fields are in the run identity as the holder's own; False: under this field's
      name, as {name: value} of its flags (the identity LMOptions had as a dict).
  """
  defaults = dict(defaults or {})
  return dataclasses.field(
    default_factory=lambda: cls(**defaults),
    metadata={
      "nested": cls,
      "only": only,
      "defaults": defaults,
      "result": result,
      "flat": flat,
    },
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
  """[(flag name, value)] of the fields of dataclass instance `params` (and of the dataclasses
  it holds) marked `io` (INPUT or OUTPUT) whose value is set."""
  found = []
  for field in dataclasses.fields(params):
    value = getattr(params, field.name)
    if dataclasses.is_dataclass(value):
      found += io_values(value, io)
    elif field.metadata.get("io") == io and value not in (None, "", (), []):
      found.append((flag_name(field), value))
  return found


_DEFINE_BY_TYPE = {
  str: flags.DEFINE_string,
  int: flags.DEFINE_integer,
  float: flags.DEFINE_float,
  bool: flags.DEFINE_boolean,
  list: flags.DEFINE_list,
}


def _flag_fields(cls, only=None, defaults=None):
  """[(field, its default)] of the fields of `cls` that are flags, nested ones in their place."""
  found = []
  for field in dataclasses.fields(cls):
    if "nested" in field.metadata:
      meta = field.metadata
      found += _flag_fields(meta["nested"], meta["only"], meta["defaults"])
    elif "help" in field.metadata and (only is None or field.name in only):
      default = (defaults or {}).get(field.name, field.default)
      found.append((field, None if default is dataclasses.MISSING else default))
  return found


def _checks(cls):
  """[(flag names, check)] of `cls`'s FLAG_CHECKS and of its nested dataclasses'."""
  found = list(getattr(cls, "FLAG_CHECKS", ()))
  for field in dataclasses.fields(cls):
    if "nested" in field.metadata:
      found += _checks(field.metadata["nested"])
  return found


def _validator(check):
  """An absl validator of `check` (a `param`'s, not called for None; or a FLAG_CHECKS function
  of {flag name: value}): its ValueError refuses the value."""

  def validate(value):
    try:
      if value is not None:
        check(value)
    except ValueError as e:
      raise flags.ValidationError(str(e)) from None
    return True

  return validate


def define_param_flags(cls, flag_values=flags.FLAGS):
  """Defines one absl flag per `param` field of dataclass `cls` and of its `nested` ones (in
  `flag_values`), with their checks."""
  for field, default in _flag_fields(cls):
    if isinstance(default, tuple):
      # A list field's default is a tuple (a dataclass refuses a mutable default); absl's
      # list flags take lists.
      default = list(default)
    meta = field.metadata
    name, help_text = flag_name(field), meta["help"]
    if meta["kind"] == SWITCH:
      flags.DEFINE_flag(_SwitchFlag(name, default, meta["enum"], help_text), flag_values)
    elif meta["enum"]:
      flags.DEFINE_enum(name, default, meta["enum"], help_text, flag_values=flag_values)
    elif meta["kind"] == MULTI:
      flags.DEFINE_multi_string(name, default, help_text, flag_values=flag_values)
    elif meta["kind"] == ESCAPED_LIST:
      flags.DEFINE(
        EscapedListParser(),
        name,
        default,
        help_text,
        flag_values=flag_values,
        serializer=flags.CsvListSerializer(","),
      )
    else:
      bound = meta["lower_bound"]
      kwargs = {} if bound is None else {"lower_bound": bound}
      flag_type = meta["kind"] or field.type
      _DEFINE_BY_TYPE[flag_type](name, default, help_text, flag_values=flag_values, **kwargs)
    if meta["check"]:
      flags.register_validator(name, _validator(meta["check"]), flag_values=flag_values)
    if meta["alias"]:
      flags.DEFINE_alias(meta["alias"], name, flag_values=flag_values)
      _ALIASES[meta["alias"]] = name
  for names, check in _checks(cls):
    if all(name in flag_values for name in names):
      flags.register_multi_flags_validator(list(names), _validator(check), flag_values=flag_values)


def params(cls, flag_values=flags.FLAGS):
  """An instance of dataclass `cls` from the parsed flags `define_param_flags(cls)` defined.

  Fields that are no flag keep their default. A `preset` flag that is set gives the flags not
  given its values.

  Raises:
    InputError: a required flag is not given, a `convert` or the dataclass refuses a value.
  """
  presets = {}
  for field, _ in _flag_fields(cls):
    if field.metadata["preset"] and flag_values[flag_name(field)].value:
      presets.update(field.metadata["preset"])

  def value(field):
    name = flag_name(field)
    if name in presets and not flag_values[name].present:
      return presets[name]
    return flag_values[name].value

  # Every required flag before any value is checked; `--name=` is no value (a list flag's parses
  # as [], a repeatable one's as [""]: run_sts.py --model_dir= ran with no LM into a traceback,
  # --pairs_file= with no set into an empty success).
  for field, _ in _flag_fields(cls):
    name = flag_name(field)
    if field.default is dataclasses.MISSING and value(field) in (None, "", []):
      raise InputError(f"--{name} is required")
    if field.metadata["kind"] == MULTI and "" in (value(field) or ()):
      raise InputError(f"--{name} is given an empty value: give each --{name}=VALUE")
    if flag_values[name].present and value(field) == [] and field.default:
      # run_rescoring.py --settings= rescored no setting and wrote an empty table, exit 0.
      raise InputError(
        f"--{name} is given no value: name at least one, or leave the flag out for its default "
        f"({','.join(str(v) for v in field.default)})"
      )
  for field, _ in _flag_fields(cls):
    name = flag_name(field)
    for other in field.metadata["unused_with"] if flag_values[name].present else ():
      if flag_values[other].value not in (None, "", [], False):
        raise InputError(f"--{name} does nothing with --{other}: leave one of them out")
  with user_input():
    return _build(cls, value, None, {})


def _build(cls, value, only, defaults):
  """`cls` from the flag values (`value(field)`) of its fields that are flags."""
  values = dict(defaults)
  for field in dataclasses.fields(cls):
    meta = field.metadata
    if "nested" in meta:
      values[field.name] = _build(meta["nested"], value, meta["only"], meta["defaults"])
    elif "help" in meta and (only is None or field.name in only):
      given = value(field)
      if given is not None and meta["convert"]:
        given = meta["convert"](given)
      values[field.name] = given
  return cls(**values)

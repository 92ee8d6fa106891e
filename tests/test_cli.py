"""Tests of util/cli.py: a wrong input is one line and exit status 2; a bug keeps its traceback."""

import dataclasses
import os
import re
import subprocess
import sys
import textwrap

from absl import flags
from conftest import HANG_SECONDS
import pytest

from util import cli

SCRIPT = textwrap.dedent(
  """
  import dataclasses
  import sys
  sys.path.insert(0, {root!r})
  from absl import app
  from util import cli

  @dataclasses.dataclass
  class Params:
    model_dir: str = cli.param("A required flag.")
    case: str = cli.param(
      "What main does.", "bug", enum=["input", "raised", "usage", "bug", "print", "read"]
    )
    batch_size: int = cli.param("A bounded flag.", 8, lower_bound=1)
    sets: list = cli.param("Choices.", ("dev",), check=cli.choices(["dev", "test"]))

  cli.define_param_flags(Params)

  def main(argv):
    del argv
    case = cli.params(Params).case
    if case == "input":
      with cli.user_input():
        open("/nonexistent/dev.json")
    if case == "raised":
      raise cli.InputError("dev.json:3: expected a number")
    if case == "usage":
      raise app.UsageError("--merge needs --output_file")
    if case == "print":
      for i in range(100000):
        print(f"record {{i}}")
      return
    if case == "read":
      print(len(sys.stdin.read()), file=sys.stderr)
      return
    raise ValueError("a bug outside any input block")

  cli.run(main)
  """
)


def _run(tmp_path, *args, model_dir="m"):
  """Runs SCRIPT with `args` (and --model_dir, its required flag, unless model_dir is None)."""
  script = tmp_path / "script.py"
  script.write_text(
    SCRIPT.format(root=os.path.dirname(os.path.dirname(os.path.abspath(cli.__file__))))
  )
  required = [] if model_dir is None else [f"--model_dir={model_dir}"]
  return subprocess.run(
    [sys.executable, str(script)] + required + list(args),
    capture_output=True,
    text=True,
    timeout=HANG_SECONDS,
  )


def _assert_one_line(result, *fragments):
  assert result.returncode == cli.EXIT_INPUT_ERROR, result.stderr
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr
  assert result.stderr.startswith("script.py: error: ")
  for fragment in fragments:
    assert fragment in result.stderr


def test_user_input_turns_value_and_os_errors_into_input_errors():
  # Issue 56's fifth round (J9): beam_rescore.py | head -1 was "error: [Errno 32] Broken pipe",
  # exit 2, as if the input were wrong; a closed stdout is `run`'s to end.
  with pytest.raises(BrokenPipeError):
    with cli.user_input():
      raise BrokenPipeError(32, "Broken pipe")
  with pytest.raises(cli.InputError, match="line 3"):
    with cli.user_input():
      raise ValueError("dev.json line 3")
  with pytest.raises(cli.InputError, match="absent.txt"):
    with cli.user_input():
      open("/nonexistent/absent.txt", encoding="utf-8")
  with pytest.raises(KeyError):  # not an input error: left alone
    with cli.user_input():
      raise KeyError("bug")


def test_input_error_is_one_line_and_exit_2(tmp_path):
  for case, text in (
    ("input", "/nonexistent/dev.json"),
    ("raised", "dev.json:3: expected"),
    ("usage", "--merge needs --output_file"),  # absl's UsageError: no usage dump
  ):
    _assert_one_line(_run(tmp_path, f"--case={case}"), text)
  debug = _run(tmp_path, "--case=raised", "--verbosity=1")
  assert "Traceback" in debug.stderr


@pytest.mark.parametrize(
  "args, fragments",
  [
    (["--batch_size=-3"], ["--batch_size=-3", "positive"]),
    (["--batch_size=abc"], ["--batch_size=abc"]),
    (["--case=crash"], ["--case=crash", "input|raised|usage|bug"]),
    (["--sets=dev,train"], ["--sets", "unknown train; choose from dev, test"]),
    (["--bath_size=3"], ["bath_size", "Did you mean: batch_size", "--helpshort"]),
    (["dev.json"], ["unexpected argument 'dev.json'"]),
  ],
)
def test_flag_errors_are_one_line_and_exit_2(tmp_path, args, fragments):
  _assert_one_line(_run(tmp_path, *args), *fragments)


def test_a_missing_required_flag_is_one_line(tmp_path):
  _assert_one_line(_run(tmp_path, model_dir=None), "--model_dir is required")


def _check_order(values):
  if values["low"] is not None and values["high"] is not None and values["low"] > values["high"]:
    raise ValueError("--low is above --high")


@dataclasses.dataclass
class _Inner:
  low: int = cli.param("Low.", None)
  high: int = cli.param("High.", None)
  extra: str = cli.param("Not a flag of _Outer.", "kept")
  paths: list = cli.param("Inputs.", (), io=cli.INPUT)

  FLAG_CHECKS = ((("low", "high"), _check_order),)


@dataclasses.dataclass
class _Outer:
  name: str = cli.param("Required.", alias="old_name")
  counts: dict = cli.param("An int made a dict.", None, kind=int, convert=lambda n: {"count": n})
  options: list = cli.param("Repeatable.", (), kind=cli.MULTI)
  columns: list = cli.param("Escaped.", (), kind=cli.ESCAPED_LIST)
  smoke: bool = cli.param("Presets.", False, preset={"high": 9, "options": ["p"]})
  precision: str = cli.param(
    "A switch grown values.", None, ("bfloat16", "float16"), kind=cli.SWITCH
  )
  inner: _Inner = cli.nested(_Inner, only=("low", "high", "paths"), defaults={"extra": "set"})
  out: str = cli.param("Output.", None, io=cli.OUTPUT)


def _outer(*args):
  values = flags.FlagValues()
  cli.define_param_flags(_Outer, values)
  values(["prog", *args])
  return values


def test_params_build_nested_converted_and_preset_fields():
  values = _outer("--old_name=a", "--counts=3", "--options=x", "--options=y", "--low=2")
  assert "extra" not in values  # not in `only`
  params = cli.params(_Outer, values)
  assert params.name == "a" and params.counts == {"count": 3}
  assert params.options == ["x", "y"] and params.columns == []
  assert params.inner == _Inner(low=2, high=None, extra="set", paths=[])
  # --smoke gives the flags not given its values; one given keeps its own.
  smoke = cli.params(_Outer, _outer("--name=a", "--smoke", "--low=1", "--options=z"))
  assert (smoke.inner.high, smoke.options) == (9, ["z"])
  assert cli.params(_Outer, _outer("--name=a", "--columns=a\\,b,c")).columns == ["a,b", "c"]
  with pytest.raises(flags.IllegalFlagValueError, match="--low is above --high"):
    _outer("--name=a", "--low=3", "--high=2")
  with pytest.raises(cli.InputError, match="--name is required"):
    cli.params(_Outer, _outer())
  with_paths = cli.params(_Outer, _outer("--name=a", "--paths=p,q", "--out=o"))
  assert cli.io_values(with_paths, cli.INPUT) == [("paths", ["p", "q"])]
  assert cli.io_values(with_paths, cli.OUTPUT) == [("out", "o")]


@pytest.mark.parametrize(
  "args, value",
  [
    ((), None),
    # The forms of the boolean it was: bare, --no, true/false, 1/0.
    (("--precision",), "bfloat16"),
    (("--precision", "--low=1"), "bfloat16"),  # a bare switch does not take the next argument
    (("--noprecision",), None),
    (("--precision=true",), "bfloat16"),
    (("--precision=False",), None),
    (("--precision=0",), None),
    (("--precision=float16",), "float16"),
    (("--precision=bfloat16",), "bfloat16"),
  ],
)
def test_a_switch_takes_its_values_and_a_boolean_s_forms(args, value):
  values = _outer("--name=a", *args)
  assert cli.params(_Outer, values).precision == value
  if args:
    assert values["precision"].present
  # Its serialisation parses back to the same value (a flagfile, a re-run).
  assert _outer("--name=a", values["precision"].serialize()).precision == value


def test_a_switch_refuses_other_values():
  with pytest.raises(flags.IllegalFlagValueError, match=re.escape("one of <bfloat16|float16>")):
    _outer("--name=a", "--precision=half")


def test_a_bug_keeps_its_traceback(tmp_path):
  result = _run(tmp_path, "--case=bug")
  assert result.returncode == 1
  assert "Traceback" in result.stderr and "a bug outside any input block" in result.stderr


@pytest.mark.parametrize(
  "text, values",
  [
    ("decoder,ctc", ["decoder", "ctc"]),
    (" decoder , ctc:0.4 ", ["decoder", "ctc:0.4"]),
    ("", []),
    ('"pl_1,1",LM0', ["pl_1,1", "LM0"]),
    # What the escape adds: a backslash makes a comma part of the name.
    ("pl_1\\,1:0.5,LM0", ["pl_1,1:0.5", "LM0"]),
  ],
)
def test_an_escaped_list_is_absl_s_list_with_backslash_escapes(text, values):
  assert cli.EscapedListParser().parse(text) == values
  if "\\" not in text:
    assert flags.ListParser().parse(text) == values
  with pytest.raises(ValueError, match="not a comma-separated list"):
    cli.EscapedListParser().parse("pl_1\\")


def test_a_repeated_flag_takes_every_value_of_a_list_and_is_refused_elsewhere(monkeypatch):
  # Issue 56: absl keeps the last value of a repeated flag in silence (run_sts.py
  # --model_dir=tta=A --model_dir=uni=B used uni alone; --lm beside its alias --model_dir too).
  values = flags.FlagValues()
  flags.DEFINE_list("model_dir", [], "LMs.", flag_values=values)
  flags.DEFINE_alias("lm", "model_dir", flag_values=values)
  flags.DEFINE_multi_string("pairs_file", [], "Sets.", flag_values=values)
  flags.DEFINE_integer("batch_size", 8, "One value.", flag_values=values)
  flags.DEFINE_boolean("overwrite", False, "A switch.", flag_values=values)
  monkeypatch.setitem(cli._ALIASES, "lm", "model_dir")
  argv = cli.merge_repeats(
    ["x", "--model_dir=tta=A", "--lm", "uni=B,C", "--pairs_file=p", "--pairs_file", "q",
     "--overwrite", "--batch_size=4"],
    values,
  )  # fmt: skip
  values(argv)
  assert values.model_dir == ["tta=A", "uni=B", "C"] and values.pairs_file == ["p", "q"]
  assert values.batch_size == 4 and values.overwrite
  with pytest.raises(cli.InputError) as e:
    cli.merge_repeats(["x", "--batch_size=4", "--batch_size", "5"], values)
  assert str(e.value) == (
    "--batch_size is given 2 times (--batch_size=4, --batch_size=5): it takes one value"
  )


@pytest.mark.parametrize(
  "args",
  [
    ["--overwrite", "--nooverwrite"],
    ["--nooverwrite", "--overwrite=true"],
    ["--overwrite", "--overwrite"],
    ["--force", "--nooverwrite"],
  ],
)
def test_a_boolean_given_twice_is_refused(monkeypatch, args):
  # Issue 56's probes (F7): --overwrite --nooverwrite kept the last in silence; a boolean takes
  # one value like any other flag that is no list.
  values = flags.FlagValues()
  flags.DEFINE_boolean("overwrite", False, "A switch.", flag_values=values)
  flags.DEFINE_alias("force", "overwrite", flag_values=values)
  flags.DEFINE_boolean("nocache", False, "A switch whose name starts with no.", flag_values=values)
  monkeypatch.setitem(cli._ALIASES, "force", "overwrite")
  with pytest.raises(cli.InputError) as e:
    cli.merge_repeats(["x", *args], values)
  assert str(e.value) == f"--overwrite is given 2 times ({', '.join(args)}): it takes one value"
  # A flag named no...: its own name, not the negation of another.
  values(cli.merge_repeats(["x", "--nocache", "--overwrite"], values))
  assert values.nocache and values.overwrite


def test_a_flag_in_a_flagfile_repeated_on_the_command_line_is_refused(tmp_path):
  # Issue 56's fifth round (J3): `score.py --flagfile=F --batch_size=3`, F holding --batch_size=2,
  # ran with 3 (absl keeps the last in silence); two values inside one flagfile likewise.
  values = flags.FlagValues()
  flags.DEFINE_integer("batch_size", 8, "One value.", flag_values=values)
  flags.DEFINE_list("sets", [], "A list.", flag_values=values)
  flagfile = tmp_path / "flags.txt"
  flagfile.write_text("# my flags\n--batch_size=2\n--sets=dev\n")
  with pytest.raises(cli.InputError, match=r"--batch_size is given 2 times \(--batch_size=2, "):
    cli.merge_repeats(["x", f"--flagfile={flagfile}", "--batch_size=3"], values)
  # A list flag takes the values of both places; a flagfile's own flags are read as given.
  values(cli.merge_repeats(["x", f"--flagfile={flagfile}", "--sets=test"], values))
  assert values.batch_size == 2 and values.sets == ["dev", "test"]


def test_a_flagfile_that_is_not_utf8_is_one_line_naming_it(tmp_path):
  # Issue 56's fifth round (J4): a UnicodeDecodeError traceback from absl's reading, exit 1.
  flagfile = tmp_path / "flags.txt"
  flagfile.write_bytes(b"--batch_size=2\n--name=\xff\n")
  result = _run(tmp_path, f"--flagfile={flagfile}")
  _assert_one_line(result, f"--flagfile {flagfile}: not UTF-8 text (invalid start byte)")


@pytest.mark.parametrize(
  "redirect, why",
  [
    ("| head -1 > /dev/null", "standard output was closed by its reader (a pipe such as | head)"),
    (">&-", "standard output is closed (>&-): nothing written there is kept"),
    # run_benchmark.py --helpfull >&- was an AttributeError traceback (absl writes the help).
    ("--helpfull >&-", "standard output is closed (>&-): nothing written there is kept"),
  ],
)
def test_a_closed_standard_output_is_one_line_and_exit_141(tmp_path, redirect, why):
  # Issue 56's fifth round (J9): `score.py | head -1` was a BrokenPipeError traceback; with stdout
  # closed (`>&-`), score.py's write was an AttributeError traceback and ngram.py --score_file's
  # print() to None dropped every score, exit 0.
  _run(tmp_path)  # writes script.py
  result = subprocess.run(
    ["bash", "-c", f"'{sys.executable}' script.py --model_dir=m --case=print {redirect}; "
     "echo ${PIPESTATUS[0]} >&2"],
    cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS,
  )  # fmt: skip
  lines = result.stderr.strip().splitlines()
  assert lines == [f"script.py: stopped: {why}", str(cli.EXIT_BROKEN_PIPE)], result.stderr


def test_a_closed_standard_input_reads_as_empty(tmp_path):
  # J9: with stdin closed (`<&-`), ngram.py --score_file=- was an AttributeError traceback.
  _run(tmp_path)
  result = subprocess.run(
    ["bash", "-c", f"'{sys.executable}' script.py --model_dir=m --case=read <&-"],
    cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS,
  )  # fmt: skip
  assert (result.returncode, result.stderr) == (0, "0\n"), result.stderr

"""Tests of util/cli.py: a wrong input is one line and exit status 2; a bug keeps its traceback."""

import os
import subprocess
import sys
import textwrap

import pytest

from util import cli

SCRIPT = textwrap.dedent(
  """
  import sys
  sys.path.insert(0, {root!r})
  from util import cli

  def main(argv):
    if argv[1] == "input":
      with cli.user_input():
        open("/nonexistent/dev.json")
    if argv[1] == "raised":
      raise cli.InputError("dev.json:3: expected a number")
    raise ValueError("a bug outside any input block")

  cli.run(main)
  """
)


def _run(tmp_path, *args):
  script = tmp_path / "script.py"
  script.write_text(
    SCRIPT.format(root=os.path.dirname(os.path.dirname(os.path.abspath(cli.__file__))))
  )
  return subprocess.run(
    [sys.executable, str(script)] + list(args), capture_output=True, text=True, timeout=60
  )


def test_user_input_turns_value_and_os_errors_into_input_errors():
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
  for kind, text in (("input", "/nonexistent/dev.json"), ("raised", "dev.json:3: expected")):
    result = _run(tmp_path, kind)
    assert result.returncode == cli.EXIT_INPUT_ERROR
    assert result.stderr.startswith("script.py: error: ")
    assert text in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
  debug = _run(tmp_path, "raised", "--verbosity=1")
  assert "Traceback" in debug.stderr


def test_a_bug_keeps_its_traceback(tmp_path):
  result = _run(tmp_path, "bug")
  assert result.returncode == 1
  assert "Traceback" in result.stderr and "a bug outside any input block" in result.stderr

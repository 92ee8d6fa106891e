"""Runs a top-level command in the test's own process, as `python SCRIPT ARGS` would run it.

A subprocess pays TensorFlow's import (4-7 s) before the command does anything; most command
tests need the command's behaviour, not a new interpreter. `run` gives what a subprocess gives
(exit status, stdout, stderr) from `define_flags()` and `cli.run(main)` of the imported module:
the same parsing, the same one-line refusals, the same exit status. What only a real process
shows (a signal, a kill, thread pools or logical devices set before TensorFlow starts, the
`if __name__ == "__main__"` lines themselves) stays with `subprocess`: test_user_errors.py starts
every command once that way.

After a run the flags it defined are deleted (two commands define --output_dir) and every other
flag goes back to its default (a run inside a run gives the outer one its flags back as they
were); the log format, the Keras dtype policy, op determinism and the SIGINT/SIGTERM handlers a
run may set are put back.
"""

import contextlib
import importlib
import io
import logging as std_logging
import os
import re
import signal
import subprocess
import sys
import traceback

from absl import app
from absl import flags
from absl import logging
import keras
from tensorflow.python.framework import config as tf_config  # no public getter or switch-off

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS

# The flag names defined before the outermost run started; a run inside a run (reproduce.py's
# stages) sets the outer command's flags aside while it runs, as its own process would not have
# them. absl's --help flags, defined by a process's first app.run, are defined here first so
# that they stay.
app.define_help_flags()
_BASE = []


def _names():
  """The defined flags' names (a short name, absl's --? of --help, goes with its flag)."""
  return {FLAGS[name].name for name in FLAGS}


def run(script, *args, stdin="", env=None, cwd=REPO, status=None):
  """Runs `script` (a command file of the repository, e.g. "score.py") with `args`.

  Args:
    script: the command's file name.
    *args: its command-line arguments.
    stdin: the text on its standard input.
    env: environment variables set for the run (on top of this process's).
    cwd: the working directory of the run.
    status: the exit status it must end with (None: any); the assertion shows its stderr.

  Returns:
    A `subprocess.CompletedProcess` with returncode, stdout and stderr (text).
  """
  module = importlib.import_module(os.path.splitext(script)[0])
  out, err = io.StringIO(), io.StringIO()
  argv = [os.path.join(REPO, script)] + [str(a) for a in args]
  with _isolated(argv, stdin, out, err, env, cwd):
    code = _main(module, err)
  result = subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
  if status is not None:
    assert result.returncode == status, result.stderr[-3000:]
  return result


def _main(module, err):
  """`python SCRIPT` from its `__main__` lines: the exit status, a traceback into `err`."""
  from util import cli  # pylint: disable=g-import-not-at-top

  try:
    module.define_flags()
    cli.run(module.main)
  except SystemExit as e:
    if e.code is None or isinstance(e.code, int):
      return e.code or 0
    err.write(f"{e.code}\n")
    return 1
  except Exception:  # pylint: disable=broad-except
    # What the interpreter does with an uncaught exception: the traceback, status 1.
    err.write(traceback.format_exc())
    return 1
  return 0


@contextlib.contextmanager
def _isolated(argv, stdin, out, err, env, cwd):
  """The process state a run reads or changes, set for it and put back after."""
  saved_argv, saved_cwd = sys.argv, os.getcwd()
  saved_env = dict(os.environ)
  saved_streams = sys.stdin, sys.stdout, sys.stderr
  handler = logging.get_absl_handler().python_handler
  saved_log_stream, saved_log_format = handler.stream, handler.formatter
  saved_root_handlers = list(std_logging.root.handlers)
  from util import interrupts  # pylint: disable=g-import-not-at-top

  saved_signals = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
  saved_policy = keras.mixed_precision.global_policy().name
  saved_determinism = tf_config.is_op_determinism_enabled()
  base = _BASE[0] if _BASE else _names()
  outer = {name: FLAGS[name] for name in _names() - base}
  for name in outer:
    delattr(FLAGS, name)
  _BASE.append(base)
  was_parsed = FLAGS.is_parsed()
  sys.argv = argv
  os.environ.update(env or {})
  os.chdir(cwd)
  sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
  sys.stdout, sys.stderr = out, err
  logging.use_absl_handler()  # what app.run does on a process's first run only
  handler.stream = err
  # absl raises INFO to the default verbosity on a process's first parse only.
  FLAGS.verbosity = 0
  try:
    yield
  finally:
    for name in _names() - base:
      delattr(FLAGS, name)
    FLAGS.unparse_flags()
    for name, flag in outer.items():
      FLAGS[name] = flag
    if was_parsed:
      FLAGS.mark_as_parsed()
    _BASE.pop()
    sys.argv = saved_argv
    os.environ.clear()
    os.environ.update(saved_env)
    os.chdir(saved_cwd)
    sys.stdin, sys.stdout, sys.stderr = saved_streams
    handler.stream = saved_log_stream
    handler.setFormatter(saved_log_format)  # reproduce.py sets its own
    std_logging.root.handlers[:] = saved_root_handlers
    for sig, previous in saved_signals.items():
      signal.signal(sig, previous)
    keras.mixed_precision.set_global_policy(saved_policy)
    if saved_determinism != tf_config.is_op_determinism_enabled():
      (tf_config.enable_op_determinism if saved_determinism else tf_config.disable_op_determinism)()


def one_error_line(result):
  """The single line a refused command writes (TensorFlow's and absl's notes left out)."""
  lines = [
    l
    for l in result.stderr.splitlines()
    if l and not re.match(r"^(WARNING: All log|E0000 |I\d{4} |W\d{4} )", l)
  ]
  assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
  return lines[0]

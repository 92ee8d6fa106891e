"""The reproduction's steps: a command of the repository run as `python <args>`, its output in
logs/<name>.log and its stderr, shortened, on the console; a stage's step skipped when its stamp
says its outputs exist for the same inputs. `run_python` is the seam through which the tests run
the commands in their own process.
"""

import datetime
import os
import re
import subprocess
import sys
import time

from absl import logging

from util import cli
from util import io_utils
from util import machine


def run_stage(work_dir, name, key, outputs, args):
  """Runs step `name` (see run_step) unless its stamp says it is complete.

  Complete: stamps/<name>.json holds this exact `key` and every path of
  `outputs` exists (io_utils.read_stamp). Otherwise `outputs` are removed first.
  """
  stamp = os.path.join(work_dir, "stamps", name + ".json")
  if io_utils.read_stamp(stamp, key, outputs) is not None:
    return
  io_utils.remove_stamp(stamp)
  for path in outputs:  # a rerun starts afresh (run_rescoring.py merges into an existing result)
    if os.path.exists(path):
      os.remove(path)
  run_step(work_dir, name, args)
  io_utils.write_stamp(stamp, key)


# Lines of a step's output that its log keeps but the console does not show: the checkpoint
# writer's timing notes. (TensorFlow's start-up lines never come: each step is a command, which
# holds them back, util/startup_log.py.) Errors and warnings of any other kind still show.
CONSOLE_NOISE = re.compile(r"Sharding callback duration")
# absl's line prefix ("I1124 10:18:18.123456 140213 run_sts.py:97] "): the console keeps its
# level letter for warnings and errors only.
_ABSL_PREFIX = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ")


def console_line(line):
  """How a line of a step's output shows on the console: None to hide it, else the line with
  absl's prefix shortened (the step's log keeps the line as it was)."""
  if CONSOLE_NOISE.search(line):
    return None
  match = _ABSL_PREFIX.match(line)
  if match:
    level = "" if match.group(1) == "I" else f"{match.group(1)} "
    line = level + line[match.end() :]
  return line


def run_step(work_dir, name, args):
  """Runs `python <args>` in the repository; raises with the log's tail on failure.

  All its output goes to logs/<name>.log. Its stderr (progress, warnings, errors) also goes line
  by line to our stderr (see console_line); its stdout (results, which its result files hold
  too, and which the report gathers) does not, so the console stays short.
  """
  log_path = os.path.join(work_dir, "logs", name + ".log")
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  cmd = [sys.executable] + args
  # The whole command line heads the log; the console names the script.
  logging.info("[%s] python %s ... (command and output: %s)", name, args[0], log_path)
  start = time.time()
  with open(log_path, "a", encoding="utf-8") as log:
    log.write(f"\n# {datetime.datetime.now().isoformat()} {' '.join(cmd)}\n")
    log.flush()
    code = run_python(cmd, log, lambda line: _show(name, line))
  if code == cli.EXIT_INPUT_ERROR:  # the step printed its one-line reason above
    raise cli.InputError(f"stage {name} stopped on a wrong input; its log is {log_path}")
  if code != 0:
    with open(log_path, encoding="utf-8") as f:
      tail = "".join(f.readlines()[-30:])
    raise RuntimeError(f"stage {name} failed (exit {code}); log {log_path} ends with:\n{tail}")
  logging.info("[%s] done in %.1f min", name, (time.time() - start) / 60)
  return time.time() - start


def _show(name, line):
  """Writes a line of step `name`'s stderr to the console (see console_line)."""
  shown = console_line(line)
  if shown is not None:
    sys.stderr.write(f"[{name}] {shown}")


def run_python(cmd, log, show):
  """Runs `cmd` in the repository: its stdout into the open file `log`, each stderr line into
  `log` and to `show(line)`; returns its exit status."""
  # The step appends its stdout to the log itself (the file is open for appending).
  proc = subprocess.Popen(cmd, cwd=machine.REPO, stdout=log, stderr=subprocess.PIPE, text=True)
  for line in proc.stderr:
    log.write(line)
    log.flush()
    show(line)
  return proc.wait()

"""Holds TensorFlow's start-up log back: every command imports this module first.

Importing TensorFlow and its first device query write about 7 lines to file descriptor 2 on a
CPU machine (absl's "WARNING: All log messages before absl::InitializeLog() ..." twice, cudart's
"Could not find cuda drivers", `E0000 ... failed call to cuInit`, oneDNN's note), written by C++
before absl's log is set up, so TF_CPP_MIN_LOG_LEVEL=3 does not silence them (TF 2.21). A
one-shot import hook runs TensorFlow's import, wherever it happens (at a command's top, in a
stage or worker that imports it late), and `tf.config.list_physical_devices()` with descriptor 2
pointed at a temporary file, then puts it back: later output is untouched. If the import or the
query raises, what was held is written out before the error. `--verbosity=1` (or more) on the
command line, or the environment variable TTA_SHOW_TF_STARTUP=1, shows the lines as they come.

The query lists physical devices only: threads and logical devices can still be set after it.
A crash inside the import (a CPU without the instructions TensorFlow was built for) ends the
process before anything is written out: faulthandler names the Python line on the real stderr,
and TTA_SHOW_TF_STARTUP=1 shows TensorFlow's own message. Standard library only.
"""

import contextlib
import faulthandler
import importlib.abc
import importlib.util
import os
import signal
import sys
import tempfile
import threading

# Set (to anything but 0): TensorFlow's start-up lines are shown.
SHOW_ENV = "TTA_SHOW_TF_STARTUP"
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The descriptor of the real standard error (another than 2 while `held_stderr` holds 2).
_real_stderr = 2


def shown(argv=None, environ=None):
  """Whether the start-up lines are shown: SHOW_ENV set, or absl's verbosity flag (--verbosity,
  -v; the last one given, as absl reads it) at 1 or more in `argv` (default sys.argv). Read before
  the flags are parsed: the import comes first."""
  environ = os.environ if environ is None else environ
  if environ.get(SHOW_ENV, "0") not in ("", "0"):
    return True
  args = list(sys.argv if argv is None else argv)[1:]
  level = 0
  for i, arg in enumerate(args):
    if arg == "--":
      break
    name, equals, value = arg.partition("=")
    if name.lstrip("-") not in ("verbosity", "v") or not name.startswith("-"):
      continue
    if not equals:
      value = args[i + 1] if i + 1 < len(args) else ""
    with contextlib.suppress(ValueError):
      level = int(value)
  return level >= 1


@contextlib.contextmanager
def held_stderr():
  """Points file descriptor 2 at a temporary file for the block; writes what it held to the real
  one if the block raises, drops it otherwise."""
  sys.stderr.flush()
  real = os.dup(2)
  own_faulthandler = not faulthandler.is_enabled()
  global _real_stderr
  with tempfile.TemporaryFile() as held:
    os.dup2(held.fileno(), 2)
    _real_stderr = real
    if own_faulthandler:
      faulthandler.enable(real)
    try:
      yield
    except BaseException:
      sys.stderr.flush()
      held.seek(0)
      os.write(real, held.read())
      raise
    finally:
      sys.stderr.flush()
      _real_stderr = 2
      if own_faulthandler:
        faulthandler.disable()
      os.dup2(real, 2)
      os.close(real)


class _Loader(importlib.abc.Loader):
  """TensorFlow's own loader, its module run and its devices listed under `held_stderr`."""

  def __init__(self, loader):
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    with held_stderr():
      self._loader.exec_module(module)
      module.config.list_physical_devices()

  def __getattr__(self, name):
    # What else the import system or a resource reader asks of the real loader.
    return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
  """Finds `tensorflow` once (then leaves sys.meta_path) and gives it a `_Loader`."""

  def find_spec(self, name, path=None, target=None):
    if name != "tensorflow":
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(name)  # by the finders after this one
    if spec is not None and spec.loader is not None and not shown():
      spec.loader = _Loader(spec.loader)
    return spec


def _stopped_while_starting(signum, frame):
  """SIGINT before `cli.run` (the imports take seconds): one line and exit 130, where Python
  printed a KeyboardInterrupt traceback from inside TensorFlow's import. Nothing was done yet."""
  del frame
  name = signal.Signals(signum).name
  line = f"{os.path.basename(sys.argv[0])}: stopped by {name} while starting: nothing was done\n"
  os.write(_real_stderr, line.encode())
  os._exit(128 + signum)


def quiet_stops_end():
  """Called by `cli.run` when its own stop handling begins: Python's SIGINT handler again."""
  if signal.getsignal(signal.SIGINT) is _stopped_while_starting:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _is_command(argv0):
  """Whether this process runs one of the repository's commands (not a test runner that imports
  them): sys.argv[0] names a .py file at the repository's top."""
  name = os.path.basename(argv0)
  return name.endswith(".py") and os.path.isfile(os.path.join(_REPO, name))


if "tensorflow" not in sys.modules:
  sys.meta_path.insert(0, _Finder())
if (
  _is_command(sys.argv[0] if sys.argv else "")
  and threading.current_thread() is threading.main_thread()
  and signal.getsignal(signal.SIGINT) is signal.default_int_handler
):
  signal.signal(signal.SIGINT, _stopped_while_starting)

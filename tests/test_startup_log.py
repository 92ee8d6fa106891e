"""util/startup_log.py: a command run as the user runs it prints none of TensorFlow's start-up
lines unless asked (--verbosity=1, TTA_SHOW_TF_STARTUP=1), and an import that fails shows them
with its error. Every command's one refusal line with nothing else (no start-up line) is
tests/test_user_errors.py's; that each command imports the module first, test_command_shape.py's.
"""

import os
import re
import subprocess
import sys

from conftest import HANG_SECONDS
import pytest

from util import startup_log

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# TensorFlow's C++ lines before absl's log is set up: the warning that says so, and lines of
# absl's C++ format with no date (cudart's "Could not find cuda drivers", the cuInit probe).
TF_STARTUP = re.compile(r"^(WARNING: All log messages before absl::InitializeLog|[IWE]0000 )", re.M)


def _score(tmp_path, *flags):
  """score.py on a model dir that does not exist, as a process of its own."""
  return subprocess.run(
    [sys.executable, os.path.join(REPO, "score.py"), f"--model_dir={tmp_path}/absent", *flags],
    capture_output=True,
    text=True,
    cwd=REPO,
    stdin=subprocess.DEVNULL,
    timeout=HANG_SECONDS,
  )


@pytest.mark.slow(seconds=10)
def test_tensorflow_s_start_up_lines_show_only_when_asked(tmp_path):
  # Not asked, the same command prints its refusal line alone: test_user_errors.py's first
  # score.py case, a process of its own with TTA_SHOW_TF_STARTUP=0 (one process each would pay
  # TensorFlow's import twice for one check).
  shown = _score(tmp_path, "--verbosity=1")
  assert TF_STARTUP.search(shown.stderr), shown.stderr[-3000:]
  # --verbosity=1 shows the error's traceback too (util/cli.py); the error is the same.
  assert f"{tmp_path}/absent/config.json not found" in shown.stderr


def test_an_import_of_tensorflow_that_fails_shows_what_it_wrote_and_its_error(tmp_path):
  # A tensorflow package that writes a line (as TF's C++ side does) and then fails to import.
  fake = tmp_path / "tensorflow"
  fake.mkdir()
  (fake / "__init__.py").write_text(
    'import os\nos.write(2, b"a line of the failed import\\n")\n'
    'raise ImportError("this tensorflow cannot load")\n'
  )
  result = subprocess.run(
    [sys.executable, os.path.join(REPO, "score.py"), "--model_dir=m"],
    capture_output=True,
    text=True,
    cwd=REPO,
    env={**os.environ, "PYTHONPATH": str(tmp_path), startup_log.SHOW_ENV: "0"},
    timeout=HANG_SECONDS,
  )
  assert result.returncode == 1
  assert result.stderr.startswith("a line of the failed import\nTraceback"), result.stderr
  assert result.stderr.endswith("ImportError: this tensorflow cannot load\n"), result.stderr


@pytest.mark.parametrize(
  "argv, environ, want",
  [
    ([], {}, False),
    (["--model_dir=m"], {startup_log.SHOW_ENV: "0"}, False),
    ([], {startup_log.SHOW_ENV: "1"}, True),
    (["--verbosity=1"], {}, True),
    (["--verbosity", "2"], {}, True),
    (["-v=1"], {}, True),
    (["-v", "1"], {}, True),
    (["--v=1"], {}, True),
    (["--verbosity=0"], {}, False),
    (["--verbosity=1", "--verbosity=0"], {}, False),  # absl keeps the last
    (["--verbosity=-1"], {}, False),
    (["--verbosity=x"], {}, False),  # absl refuses it; the start-up stays quiet
    (["--input_file=--verbosity=1"], {}, False),
    (["--", "--verbosity=1"], {}, False),
  ],
)
def test_shown_reads_the_verbosity_flag_and_the_environment(argv, environ, want):
  assert startup_log.shown(["score.py", *argv], environ) == want

"""Tests of the suite's own set-up (conftest.py): how it is run and what a missing data set does."""

import os
import subprocess
import sys

import conftest
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pytest_command_runs_from_the_repo_root():
  # -P leaves the current directory off sys.path, as the `pytest` command does (and
  # `python -m pytest` does not); conftest must make the top-level modules importable itself.
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
  proc = subprocess.run(
    [
      sys.executable,
      "-P",
      "-m",
      "pytest",
      "-q",
      "-p",
      "no:cacheprovider",
      "tests/test_progress.py",
    ],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("require", [None, "1"])
def test_missing_data_skips_unless_it_is_required(tmp_path, monkeypatch, require):
  monkeypatch.setenv("TTA_DATA", str(tmp_path))
  if require:
    monkeypatch.setenv("TTA_REQUIRE_DATA", require)
  else:
    monkeypatch.delenv("TTA_REQUIRE_DATA", raising=False)
  outcome = pytest.fail.Exception if require else pytest.skip.Exception
  with pytest.raises(outcome, match="stsb missing under"):
    conftest.data_dir_or_skip("stsb")
  monkeypatch.setenv("TTA_DATA", str(tmp_path / "absent"))
  with pytest.raises(outcome, match="shared data not available"):
    conftest.data_dir_or_skip()
  (tmp_path / "stsb").mkdir()
  monkeypatch.setenv("TTA_DATA", str(tmp_path))
  assert conftest.data_dir_or_skip("stsb") == str(tmp_path)

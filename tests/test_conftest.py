"""Tests of the suite's own set-up (conftest.py): how it is run, what missing data does, and that
the self-unknown check catches a leak."""

import os
import subprocess
import sys

import conftest
from conftest import HANG_SECONDS
import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow(seconds=10)
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
    timeout=HANG_SECONDS,
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


def _context_sums(leak=0.0, mix_rows=0.0):
  """A fake model: output t is the sum of the row's other real tokens, plus `leak` x token t,
  plus `mix_rows` x the batch's total."""

  def run(ids, mask):
    ids = (ids * mask).astype(np.float64)
    totals = ids.sum(1, keepdims=True)
    return {"out": totals - ids + leak * ids + mix_rows * ids.sum()}

  return run


@pytest.mark.parametrize(
  "run, fails",
  [
    (_context_sums(), False),
    (_context_sums(leak=1e-9), True),
    (_context_sums(mix_rows=1e-9), True),
    (lambda ids, mask: {"out": np.zeros(ids.shape)}, True),  # the tokens never arrive
  ],
)
def test_self_unknown_check_fails_on_any_leak(run, fails):
  ids, mask = conftest.padded_batch([5, 3, 1], np.arange(7, 30), np.random.default_rng(0))
  if fails:
    with pytest.raises(AssertionError):
      conftest.assert_self_unknown(run, ids, mask, np.arange(7, 30))
  else:
    conftest.assert_self_unknown(run, ids, mask, np.arange(7, 30))

"""util/interrupts.py: SIGTERM as KeyboardInterrupt, the exit status, held-back signals, and worker
pools that Ctrl-C does not reach (the commands' stops end to end: test_score.py and
test_pretraining_data.py, as subprocesses)."""

import multiprocessing
import signal

import pytest

from util import interrupts


def test_sigterm_raises_interrupted_in_the_block_only():
  before = signal.getsignal(signal.SIGTERM)
  with pytest.raises(interrupts.Interrupted) as stopped:
    with interrupts.handling():
      signal.raise_signal(signal.SIGTERM)
  assert isinstance(stopped.value, KeyboardInterrupt)  # every KeyboardInterrupt cleanup runs
  assert interrupts.status(stopped.value) == 143
  assert interrupts.status(KeyboardInterrupt()) == 130  # Ctrl-C, Python's own
  assert signal.getsignal(signal.SIGTERM) is before


def test_deferred_raises_a_signal_after_the_block_that_must_end():
  ended = False
  with pytest.raises(interrupts.Interrupted) as stopped:
    with interrupts.deferred():
      signal.raise_signal(signal.SIGINT)
      ended = True
  assert ended and interrupts.status(stopped.value) == 130


@pytest.mark.slow(seconds=5)
def test_pool_workers_ignore_ctrl_c_and_end_with_the_block():
  with interrupts.worker_pool(2) as pool:
    assert pool.map(signal.getsignal, [signal.SIGINT] * 2) == [signal.SIG_IGN] * 2
    with pytest.raises(KeyboardInterrupt):
      with interrupts.deferred():
        signal.raise_signal(signal.SIGINT)
  assert not multiprocessing.active_children()

"""Stops by signal, one rule for every command (`cli.run`; docs/DESIGN.md §3.3).

SIGINT (Ctrl-C) raises Python's KeyboardInterrupt; `handling` makes SIGTERM (kill, a scheduler's
stop or preemption) raise `Interrupted`, a KeyboardInterrupt, so that every `finally` and atomic
write unwinds for both. `cli.run` turns either into one line and exit `status` (128 + the signal's
number: 130, 143, the shell's convention). The training loop installs its own handlers while it runs
(pretraining/training_loop.py: save, then exit 75). `worker_pool` starts worker processes that a
Ctrl-C at the terminal (sent to every process of the group) does not reach, so that the parent
alone stops them. Standard library only: spawned workers import it.
"""

import contextlib
import multiprocessing
import os
import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
  """A stop signal (SIGTERM; SIGINT where `deferred` held it back) raised in the main thread."""

  def __init__(self, signum):
    super().__init__(signal.Signals(signum).name)
    self.signum = signum


def signal_number(error):
  """The signal a KeyboardInterrupt stands for (SIGINT unless it is an `Interrupted`)."""
  return getattr(error, "signum", signal.SIGINT)


def status(error):
  """The exit status of a command stopped by KeyboardInterrupt `error`: 128 + its signal."""
  return 128 + signal_number(error)


def exit_stopped(error):
  """Ends a command stopped by KeyboardInterrupt `error`: one line on stderr, exit `status`."""
  name = signal.Signals(signal_number(error)).name
  sys.stderr.write(
    f"{os.path.basename(sys.argv[0])}: stopped by {name}: what it finished is kept; the same "
    "command resumes or redoes the rest\n"
  )
  sys.exit(status(error))


def _raise(signum, frame):
  del frame
  raise Interrupted(signum)


def _main_thread():
  # Python runs signal handlers in the main thread only, and refuses to set them elsewhere.
  return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def handling():
  """SIGTERM raises `Interrupted` in the block (SIGINT keeps Python's KeyboardInterrupt)."""
  if not _main_thread():
    yield
    return
  previous = signal.signal(signal.SIGTERM, _raise)
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def deferred():
  """Holds SIGINT and SIGTERM back while the block runs (a teardown that must end), then raises
  the first that came as `Interrupted` (unless the block raised)."""
  if not _main_thread():
    yield
    return
  received = []
  previous = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in SIGNALS}
  try:
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
  if received:
    raise Interrupted(received[0])


def _start_worker(initializer, initargs):
  """A pool worker's start: SIGINT ignored (a worker the pool starts again later, after one died,
  did not inherit it), SIGTERM (`Pool.terminate`'s, or one sent to every process) an exit that
  unwinds, so that a worker killed while it waits for work releases the queue's lock and the
  parent's terminate cannot hang on it; then `initializer(*initargs)`."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, _exit)
  if initializer is not None:
    initializer(*initargs)


def _exit(signum, frame):
  del frame
  raise SystemExit(128 + signum)


@contextlib.contextmanager
def worker_pool(processes, initializer=None, initargs=()):
  """A `multiprocessing` Pool of `processes` spawned workers (a fresh interpreter each: the parent
  may run TensorFlow's threads, which fork would copy) for the block, stopped at its end however it
  ends.

  The workers ignore SIGINT: a Ctrl-C reaches every process of the terminal's group, and workers
  dying one by one left the parent with KeyboardInterrupt tracebacks and, once, waiting for the
  results of a worker that was gone. The parent alone is stopped, and stops them.
  """
  context = multiprocessing.get_context("spawn")
  # The workers inherit SIG_IGN through exec (a Python handler would be reset): ignored for the
  # few milliseconds the processes take to start.
  previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
  try:
    pool = context.Pool(processes, _start_worker, (initializer, initargs))
  finally:
    if previous is not None:
      signal.signal(signal.SIGINT, previous)
  try:
    yield pool
  finally:
    with deferred():
      pool.terminate()
      pool.join()

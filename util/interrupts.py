"""Stops by signal, one rule for every command (`cli.run`; docs/DESIGN.md §3.3).

`handling` makes SIGINT (Ctrl-C), SIGTERM (kill, a scheduler's stop or preemption) and SIGHUP (the
terminal closed) raise `Interrupted`, a KeyboardInterrupt, so that every `finally` and atomic
write unwinds for each, and notes them (`raised`): C code may hand on another error in place of
the KeyboardInterrupt. `cli.run` turns each into one line and exit `status` (128 + the signal's
number: 130, 143, 129, the shell's convention). The training loop installs its own handlers
while it runs (pretraining/training_loop.py: save, then exit 75). `worker_pool` starts worker
processes that a Ctrl-C at the terminal (sent to every process of the group) does not reach, so
that the parent alone stops them. Standard library only: spawned workers import it.
"""

import collections
import concurrent.futures
import contextlib
import multiprocessing
import os
import signal
import sys
import threading

# SIGHUP's default action ended a command with its lock file and a temporary file left behind.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


# The stop signals `handling` raised in its last block: C code (TensorFlow's tracing) that a
# KeyboardInterrupt reaches may hand on another error in its place (a SystemError, a TypeError).
_raised = []


def _raise(signum, frame):
  del frame
  _raised.append(signum)
  raise Interrupted(signum)


def raised():
  """An `Interrupted` of the first stop signal raised in the last `handling` block, or None."""
  return Interrupted(_raised[0]) if _raised else None


def _main_thread():
  # Python runs signal handlers in the main thread only, and refuses to set them elsewhere.
  return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def handling():
  """SIGNALS (SIGINT, SIGTERM, SIGHUP) raise `Interrupted` in the block (a KeyboardInterrupt, as
  Python's SIGINT does), each noted for `raised`."""
  _raised.clear()
  if not _main_thread():
    yield
    return
  previous = {s: signal.signal(s, _raise) for s in SIGNALS}
  try:
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)


@contextlib.contextmanager
def deferred():
  """Holds SIGNALS back while the block runs (a teardown that must end), then raises
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


class WorkerDied(RuntimeError):
  """A `worker_pool` worker ended without giving its task's result back: killed (the out-of-memory
  killer, a `kill -9`) or crashed."""


def _start_worker(initializer, initargs):
  """A pool worker's start: SIGINT ignored (belt and braces: `_Pool.imap` starts it with SIGINT
  blocked), then `initializer(*initargs)`. SIGTERM keeps its default action, an immediate exit:
  a Python handler runs only between bytecodes, so a SIGTERM that came just before the worker
  blocked on a queue's lock was once lost, and the parent waited on that worker for ever."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  if initializer is not None:
    initializer(*initargs)


@contextlib.contextmanager
def _sigint_blocked():
  """SIGINT held pending (not lost) in this thread for the block: a process started in it
  inherits the mask, so that a Ctrl-C never reaches it, even before its Python has started."""
  if not _main_thread():
    yield
    return
  previous = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
  try:
    yield
  finally:
    signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _Pool:
  """The block's view of a `worker_pool`: `imap`."""

  def __init__(self, executor):
    self._executor = executor

  def imap(self, function, args_iterable, in_flight):
    """function(*args) for each tuple `args` of `args_iterable`, computed in the workers and
    yielded in order, with at most `in_flight` calls submitted and not yet yielded (the parent's
    memory: that many arguments and results). `function` must be importable by the workers (a
    module-level function). WorkerDied as soon as a worker dies; an exception a call raised is
    raised here."""
    pending = collections.deque()
    try:
      for args in args_iterable:
        # The executor starts a worker in `submit` (up to its number of workers). A stop signal
        # waits until the worker is registered (`deferred`): one that came inside `submit`, after
        # the fork and before the executor noted the new process, left a worker no one stopped,
        # blocked for ever on the queue lock of a terminated one (it held the command's stderr
        # open, and a test waiting on that pipe hung CI). The mask is the child's (see
        # `_sigint_blocked`); the deferral is the parent's, since a blocked SIGINT still reaches
        # this process through its other threads.
        with _sigint_blocked(), deferred():
          pending.append(self._executor.submit(function, *args))
        if len(pending) >= in_flight:
          yield pending.popleft().result()
      while pending:
        yield pending.popleft().result()
    except concurrent.futures.process.BrokenProcessPool as e:
      raise WorkerDied(
        f"a worker process running {function.__module__}.{function.__name__} ended abruptly "
        "(killed, e.g. by the out-of-memory killer, or crashed); its work is lost"
      ) from e


@contextlib.contextmanager
def worker_pool(processes, initializer=None, initargs=()):
  """A pool (`_Pool`) of `processes` spawned worker processes (a fresh interpreter each: the
  parent may run TensorFlow's threads, which fork would copy) for the block, gone at its end
  however it ends.

  `concurrent.futures.ProcessPoolExecutor` underneath, not `multiprocessing.Pool`: a worker that
  dies fails the executor's pending calls at once (WorkerDied), where a Pool starts another
  worker and waits for ever on the lost call's result (or, at its end, on a lock the dead worker
  held). A block that ends normally lets the workers exit by themselves (no signal); one that
  raises (Ctrl-C, SIGTERM, an error) terminates them first, since a call may run for minutes.

  The workers never see SIGINT: a Ctrl-C reaches every process of the terminal's group, and
  workers dying one by one left the parent with KeyboardInterrupt tracebacks. The parent alone
  is stopped, and stops them.
  """
  executor = concurrent.futures.ProcessPoolExecutor(
    processes, multiprocessing.get_context("spawn"), _start_worker, (initializer, initargs)
  )
  stopped = True
  try:
    yield _Pool(executor)
    stopped = False
  finally:
    with deferred():
      if stopped:
        # The executor's own processes (Python 3.14's terminate_workers does the same); the
        # executor sees them end and fails what was pending.
        for process in list(executor._processes.values()):  # pylint: disable=protected-access
          process.terminate()
      executor.shutdown(wait=True, cancel_futures=True)

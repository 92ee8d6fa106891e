"""What every training loop shares (pretraining/training.py, finetuning/mwer_training.py).

with training_loop.output_dir_lock(output_dir):      # one run per output dir
  resumed = training_loop.restore(checkpoint, output_dir)  # newest readable, rolled back to
  manager = training_loop.checkpoint_manager(checkpoint, output_dir, keep, step)
  stop = training_loop.StopRequest(); stop.install()   # SIGTERM/SIGINT: save, then return
  ... steps ...; last = training_loop.save(manager, step, last)  # a failed save: one line
# the command exits EXIT_UNFINISHED when a stop came before the last step
"""

import contextlib
import os
import signal
import threading

from absl import logging
import tensorflow as tf

from lm import checkpoints
from util import cli
from util import io_utils

# os.EX_TEMPFAIL (sysexits.h): "try again later", a code schedulers read as requeue. The commands
# exit with it when a stop request ended the run before its last step; the same command resumes.
EXIT_UNFINISHED = 75

LOCK_FILE = "run.lock"


class StopRequest(object):
  """Set by SIGTERM/SIGINT; the loop saves a checkpoint and returns."""

  def __init__(self):
    self.signal = None
    self._previous = {}

  def install(self):
    if threading.current_thread() is not threading.main_thread():
      return
    for signum in (signal.SIGTERM, signal.SIGINT):
      self._previous[signum] = signal.signal(signum, self._handle)

  def _handle(self, signum, frame):
    del frame
    if self.signal is not None and signum == signal.SIGINT:
      raise KeyboardInterrupt  # a second Ctrl-C aborts without saving
    self.signal = signum
    logging.warning("received signal %d: stopping after this loop and saving a checkpoint", signum)

  def uninstall(self):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}


class OutputDirBusy(cli.InputError):
  """Another live training run holds the lock of the output dir (scripts: one line, exit 2)."""


class CheckpointError(cli.InputError):
  """A checkpoint cannot be saved (a full disk), or none of the output dir's can be read."""


@contextlib.contextmanager
def output_dir_lock(output_dir):
  """Holds an exclusive lock on output_dir (an existing local dir) for the `with` body.

  `io_utils.exclusive_lock` on output_dir/run.lock: it holds the owner's pid, host and start
  time for the message a second run gets, and dies with its process.

  Raises:
    OutputDirBusy: another run holds the lock.
  """
  with contextlib.ExitStack() as stack:
    try:
      stack.enter_context(
        io_utils.exclusive_lock(
          output_dir, wait=False, lock_file=os.path.join(output_dir, LOCK_FILE)
        )
      )
    except io_utils.OutputBusy as e:
      raise OutputDirBusy(
        f"--output_dir {output_dir} is in use by another training run ({e.holder}; lock file "
        f"{e.lock_file}): wait for it to end or choose another --output_dir"
      ) from None
    yield


def restore(checkpoint, directory, roll_back=True):
  """Restores `checkpoint` (a tf.train.Checkpoint) from the newest readable checkpoint of
  `directory`.

  One cut short by a full disk or a crash, or corrupt, is skipped with a warning for the one
  saved before it, and the index file is rolled back to that one (`roll_back`: False on the
  workers that do not own `directory`), so that a manager made afterwards does not list it.

  Returns:
    The checkpoint prefix restored, or None when `directory` holds none.

  Raises:
    CheckpointError: there are checkpoints and none can be read (a run never silently starts
      over from step 0).
  """
  path, found = checkpoints.restore_newest_readable(checkpoint, directory)
  if path is None and found:
    raise CheckpointError(
      f"none of the {len(found)} checkpoints in {directory} can be read (the warnings above say "
      "why): move them away to train from step 0"
    )
  if path is not None and path != found[0]:
    logging.warning("resuming from %s, the newest checkpoint that can be read", path)
    if roll_back:
      checkpoints.roll_back_to(directory, path)
  return path


def checkpoint_manager(checkpoint, directory, max_to_keep, step_counter):
  """The `tf.train.CheckpointManager` of a run's ckpt-N (made after `restore`: it reads the index
  file a roll-back rewrites)."""
  return tf.train.CheckpointManager(
    checkpoint,
    directory,
    max_to_keep=max_to_keep,
    step_counter=step_counter,
    checkpoint_name=checkpoints.CHECKPOINT_NAME,
  )


def save(manager, step, last_path):
  """Saves the checkpoint of `step`; returns its prefix.

  Args:
    manager: the run's `checkpoint_manager`.
    step: int, the step it holds.
    last_path: the newest checkpoint saved or resumed from before it (None: none), for the
      message.

  Raises:
    CheckpointError: the save failed (a full disk), in one line saying where a re-run resumes:
      TF removes its temporary files and leaves the index file as it was, so the last whole
      checkpoint stays the latest, and stopping here (exit 2, not 75) is no crash loop.
  """
  try:
    return manager.save(checkpoint_number=step)
  except (tf.errors.OpError, OSError) as e:
    resume = f"resumes from {last_path}" if last_path else "starts from step 0"
    raise CheckpointError(
      f"cannot save the checkpoint of step {step} in {manager.directory}: "
      f"{checkpoints.error_line(e)}; a re-run with the same command {resume}"
    ) from e

"""The one training loop, run by pretraining (training.py) and MWER fine-tuning
(finetuning/mwer_training.py): `output_dir_lock`, `restore`, `run`, `exit_unfinished` (exit 75) for
a run stopped early and `exit_nonfinite` (exit 3) for one stopped by non-finite numbers;
docs/DESIGN.md §3.3.
"""

import contextlib
import os
import re
import signal
import sys
import threading
import time

from absl import logging
import tensorflow as tf

from lm import checkpoints
from util import cli
from util import distribute_utils
from util import interrupts
from util import io_utils

# os.EX_TEMPFAIL (sysexits.h): "try again later", a code schedulers read as requeue. The commands
# exit with it when a stop request ended the run before its last step; the same command resumes.
EXIT_UNFINISHED = 75
# A run ended by non-finite numbers (`NonfiniteSteps`): not 75, since the same command would resume
# from the same checkpoint into the same batches; not 1 or 2 (a crash, a wrong input).
EXIT_NONFINITE = 3
# `run`'s stopped_by after a NonfiniteSteps.
NONFINITE = "non-finite"

LOCK_FILE = "run.lock"


class OutputDirBusy(cli.InputError):
  """Another live training run holds the lock of the output dir (scripts: one line, exit 2)."""


class CheckpointError(cli.InputError):
  """A checkpoint cannot be saved (a full disk), or none of the output dir's can be read."""


class NonfiniteSteps(Exception):
  """Training must not go on: too many steps in a row had a non-finite loss or gradients (raised by
  `run`'s train_steps), or a variable about to be saved is not finite. `run` stops without saving.
  """


class WorkerLost(Exception):
  """Under multi-worker, another worker died (kill -9, a lost host): this one's collectives were
  aborted. The command exits 75 (`exit_unfinished`); every worker restarted resumes the last save.
  """


@contextlib.contextmanager
def output_dir_lock(output_dir):
  """Holds output_dir/run.lock (`io_utils.exclusive_lock`: dies with its process) for the `with`
  body; OutputDirBusy, naming the holder, when another run has it.
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
  """Restores `checkpoint` from the newest readable one in `directory`: its prefix, or None.
  Unreadable ones (full disk, crash) are skipped with a warning and, with roll_back, dropped from
  the index; CheckpointError when none can be read.
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


def run(
  checkpoint,
  directory,
  step,
  total_steps,
  train_steps,
  *,
  resumed,
  keep,
  save_every=(),
  evaluate=None,
  eval_every=0,
  log=None,
  log_every=0,
  steps_per_call=1,
  strategy=None,
  install_signal_handlers=True,
  train_minutes=0.0,
):
  """Trains from step() to total_steps; the last step reached is always saved.

  train_steps(num) runs at most steps_per_call steps, up to the next event: a checkpoint at the
  multiples of save_every, evaluate(step) and log(step, seconds left or None) at those of
  eval_every and log_every and at total_steps. A step it skips (a non-finite loss) does not count:
  the events of a step come once, when it is reached. A stop request (SIGTERM/SIGINT,
  train_minutes, another worker's) ends the loop. A NonfiniteSteps from train_steps, or a variable
  that is not finite when a checkpoint is due, ends it without saving (stopped_by NONFINITE): the
  newest checkpoint stays the last good one. Returns (stopped_by or None, newest checkpoint prefix
  or None); CheckpointError when a save fails, WorkerLost when another worker died.
  """
  manager = tf.train.CheckpointManager(
    checkpoint,
    directory,
    max_to_keep=keep,
    step_counter=None,
    checkpoint_name=checkpoints.CHECKPOINT_NAME,
  )
  last_path, last_saved = resumed, step() if resumed else None
  stop = _Stop(strategy, install_signal_handlers, train_minutes)
  stopped_by = None
  try:
    while step() < total_steps:
      before = step()
      events = [*save_every, log_every, eval_every if evaluate else 0]
      num = min(steps_per_call, total_steps - before, *[_next(before, e) - before for e in events])
      train_steps(int(max(1, num)))
      now = step()
      if now != before:
        if log and (_at(now, log_every) or now >= total_steps):
          log(now, stop.seconds_left())
        if any(_at(now, every) for every in save_every):
          last_path, last_saved = _save(manager, now, last_path, "interval"), now
        if evaluate and _at(now, eval_every):
          evaluate(now)
      stopped_by = stop.reason()
      if stopped_by:
        logging.info("stopping at step %d (%s)", now, stopped_by)
        break
    now = step()
    if last_saved != now:
      last_path = _save(manager, now, last_path, stopped_by or "final")
  except NonfiniteSteps as e:
    resume = f"resumes from {last_path}" if last_path else "starts afresh"
    logging.error("%s: stopped at step %d unsaved; the same command %s", e, step(), resume)
    return NONFINITE, last_path
  except tf.errors.DataLossError as e:
    # A record file damaged past its first record (training_job's check reads that one only).
    found = re.search(r"(?:corrupted|truncated) record at \d+", e.message or "")
    resume = f"resumes from {last_path}" if last_path else "starts afresh"
    raise cli.InputError(
      f"an input record file is damaged ({found.group(0) if found else type(e).__name__}) "
      f"at step {step()}: fix or leave it out; the same command then {resume}"
    ) from None
  except tf.errors.UnavailableError as e:
    if not distribute_utils.is_multi_worker(strategy):
      raise
    # No save: this worker's state may be past the last agreed step, and a save needs them all.
    raise WorkerLost(
      f"another worker is gone (the collectives with it failed: {type(e).__name__}) after step "
      f"{step()}: restart every worker with the same command; it resumes at step {last_saved or 0}"
    ) from e
  finally:
    stop.uninstall()
  if evaluate and now >= total_steps and not stopped_by and not _at(now, eval_every):
    evaluate(now)
  return stopped_by, last_path


def exit_unfinished(why):
  """Ends a command whose run stopped before its last step: exit 75 (`EXIT_UNFINISHED`)."""
  logging.warning(
    "%s: exiting %d so that the run is requeued; the same command resumes it",
    why,
    EXIT_UNFINISHED,
  )
  sys.exit(EXIT_UNFINISHED)


def exit_nonfinite(why):
  """Ends a command whose run stopped on non-finite numbers (`NonfiniteSteps`): exit 3
  (`EXIT_NONFINITE`)."""
  logging.error("%s: exiting %d", why, EXIT_NONFINITE)
  sys.exit(EXIT_NONFINITE)


def _at(step, every):
  return every > 0 and step % every == 0


def _next(step, every):
  return (step // every + 1) * every if every > 0 else float("inf")


def _save(manager, step, last_path, why):
  """Saves step's checkpoint and returns its prefix; CheckpointError (full disk) says where a re-run
  resumes: TF leaves the index as it was, so exit 2 (not 75) is no crash loop. NonfiniteSteps,
  writing nothing, when a variable is not finite.
  """
  bad = nonfinite_variables(manager.checkpoint)
  if bad:
    raise NonfiniteSteps(
      f"{len(bad)} variable(s) of step {step} are not finite ({', '.join(bad[:3])}), so its "
      "checkpoint is not written"
    )
  try:
    path = manager.save(checkpoint_number=step)
  except (tf.errors.OpError, OSError) as e:
    resume = f"resumes from {last_path}" if last_path else "starts from step 0"
    raise CheckpointError(
      f"cannot save the checkpoint of step {step} in {manager.directory}: "
      f"{checkpoints.error_line(e)}; a re-run with the same command {resume}"
    ) from e
  logging.info("saved checkpoint for step %d (%s): %s", step, why, path)
  return path


def nonfinite_variables(checkpoint):
  """The names of the floating-point variables `checkpoint` (a tf.train.Checkpoint) holds that have
  a NaN or inf value."""
  variables = [
    v
    for v in tf.train.TrackableView(checkpoint).descendants()
    if isinstance(v, tf.Variable) and v.dtype.is_floating
  ]
  if not variables:
    return []
  finite = tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in variables]).numpy()
  return [v.name for v, ok in zip(variables, finite) if not ok]


class _Stop(object):
  """A stop signal (interrupts.SIGNALS) or the train_minutes deadline, agreed on by all workers."""

  def __init__(self, strategy, install, train_minutes):
    self.signal = None
    self._previous = {}
    if install and threading.current_thread() is threading.main_thread():
      for signum in interrupts.SIGNALS:
        self._previous[signum] = signal.signal(signum, self._handle)
    self.deadline = time.time() + 60.0 * train_minutes if train_minutes > 0 else None
    self._any_worker = (
      distribute_utils.any_worker_agreement(strategy) if strategy else (lambda flag: flag)
    )

  def _handle(self, signum, frame):
    del frame
    if self.signal is not None and signum == signal.SIGINT:
      raise KeyboardInterrupt  # a second Ctrl-C aborts without saving
    self.signal = signum
    logging.warning("received signal %d: stopping after this loop and saving a checkpoint", signum)

  def seconds_left(self):
    if self.deadline is None:
      return None
    return max(self.deadline - time.time(), 0.0)

  def reason(self):
    """Why to stop now ("signal 15", "train_minutes", "another worker"), or None to go on.
    Every worker must call it at the same step."""
    expired = self.deadline is not None and time.time() >= self.deadline
    if not self._any_worker(self.signal is not None or expired):
      return None
    if self.signal is not None:
      return f"signal {self.signal:d}"
    return "train_minutes" if expired else "another worker"

  def uninstall(self):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}

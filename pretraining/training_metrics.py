"""What a training run reports: TensorBoard scalars, the progress line with ETA, the speed summary.

The sums a train or eval step returns (`METRICS`) are turned here into the loss, accuracy,
steps/s, tokens/s and achieved GFLOP/s (`flops.training_flops`) of each call, log window and run.
"""

from absl import logging
import numpy as np
import tensorflow as tf

from lm import flops
from util import progress

# The per-step global sums a train/eval step returns, in this order.
METRICS = ("loss_sum", "weight_sum", "correct_sum", "ce_sum", "tokens", "positions", "sequences")
# Those of the loss, 0 for a step skipped as non-finite.
LOSS_SUMS = METRICS[:4]
# A train step's: METRICS, then 1 for a step skipped as a float16 loss-scale overflow, or as
# non-finite (a NaN or inf loss or gradient).
SKIPS = ("overflow_steps", "nonfinite_steps")
TRAIN_METRICS = METRICS + SKIPS


def _scalar_metadata():
  # What tensorboard's tf.summary.scalar writes; built from TF's own proto so
  # that logging scalars does not need the tensorboard package installed
  # (only viewing them does).
  # pylint: disable-next=g-import-not-at-top
  from tensorflow.core.framework import summary_pb2

  metadata = summary_pb2.SummaryMetadata()
  metadata.plugin_data.plugin_name = "scalars"
  metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
  return metadata.SerializeToString()


def write_scalar(name, value, step):
  """A TensorBoard scalar into the default summary writer."""
  tf.summary.write(
    name, tf.constant(float(value), tf.float32), step=step, metadata=_scalar_metadata()
  )


def _ratio(numerator, denominator):
  return numerator / max(denominator, 1e-9)


class Throughput(object):
  """Speed and loss sums: per tf.function call, per log window, per run.

  The first call is not timed: it includes tracing.
  """

  def __init__(self, config, use_xla):
    self._config = config
    self._use_xla = use_xla
    self._continuous = config.output_layer == "continuous"
    self._window = np.zeros(len(TRAIN_METRICS))
    self._window_seconds = self._window_steps = 0
    self._timed = {"seconds": 0.0, "steps": 0, "tokens": 0.0, "targets": 0.0, "flops": 0.0}
    self._skipped = dict.fromkeys(SKIPS, 0)
    self._first_call = True

  def flops(self, m):
    """Training FLOPs of the steps summed in m (a dict of METRICS)."""
    # The head runs on the targets only, except under XLA (dense).
    head_tokens = m["positions"] if self._use_xla else m["weight_sum"]
    return flops.training_flops(
      self._config,
      m["tokens"],
      head_tokens,
      _ratio(m["positions"], m["sequences"]),
      self._config.output_layer,
      self._config.target_embedding_size or self._config.hidden_size,
    )

  def add(self, sums, num_steps, seconds, learning_rate):
    """Adds one call's TRAIN_METRICS sums [9]; returns its TensorBoard scalars."""
    m = dict(zip(TRAIN_METRICS, sums))
    for key in SKIPS:
      self._skipped[key] += int(m[key])
    call_flops = self.flops(m)
    if self._first_call:
      self._first_call = False
    else:
      for key, value in (
        ("seconds", seconds),
        ("steps", num_steps),
        ("tokens", m["tokens"]),
        ("targets", m["weight_sum"]),
        ("flops", call_flops),
      ):
        self._timed[key] += value
    self._window += sums
    self._window_seconds += seconds
    self._window_steps += num_steps
    scalars = {
      "loss": _ratio(m["loss_sum"], m["weight_sum"]),
      "learning_rate": learning_rate,
      "steps_per_second": num_steps / seconds,
      "tokens_per_second": m["tokens"] / seconds,
      "target_tokens_per_second": m["weight_sum"] / seconds,
      "gflops_per_second": call_flops / seconds / 1e9,
      **{key: m[key] for key in SKIPS},
    }
    if not self._continuous:
      scalars["accuracy"] = _ratio(m["correct_sum"], m["weight_sum"])
    return scalars

  def log_window(self, step, num_train_steps, learning_rate, elapsed, seconds_left):
    """Logs the progress line of the steps since the last one."""
    w = dict(zip(TRAIN_METRICS, self._window))
    rate = _ratio(self._window_steps, self._window_seconds)
    eta = (num_train_steps - step) / rate if rate else None
    if seconds_left is not None:
      eta = seconds_left if eta is None else min(eta, seconds_left)
    logging.info(
      "step %d/%d loss %.4f%s lr %.3g | %.2f steps/s %.0f tokens/s "
      "%.1f GFLOP/s | elapsed %s ETA %s%s",
      step,
      num_train_steps,
      _ratio(w["loss_sum"], w["weight_sum"]),
      "" if self._continuous else f" acc {_ratio(w['correct_sum'], w['weight_sum']):.3f}",
      learning_rate,
      rate,
      _ratio(w["tokens"], self._window_seconds),
      _ratio(self.flops(w), self._window_seconds) / 1e9,
      progress.format_duration(elapsed),
      progress.format_duration(eta),
      "".join(f" | {int(w[key])} {key.replace('_', ' ')} skipped" for key in SKIPS if w[key]),
    )
    self._window[:] = 0
    self._window_seconds = self._window_steps = 0

  def summary(self):
    """Speed over the timed calls and the steps skipped in all, for train_summary.json."""
    seconds = max(self._timed["seconds"], 1e-9)
    return {
      "timed_steps": self._timed["steps"],
      "steps_per_second": self._timed["steps"] / seconds,
      "tokens_per_second": float(self._timed["tokens"] / seconds),
      "target_tokens_per_second": float(self._timed["targets"] / seconds),
      "gflops_per_second": float(self._timed["flops"] / seconds / 1e9),
      **self._skipped,
    }

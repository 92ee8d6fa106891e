# coding=utf-8
"""The pretraining step of a T-TA, biLM or uniLM under tf.distribute: the train loop and eval
step functions, the run's checkpointed state, its input iterator and per-call bookkeeping.

pretraining/training_job.py runs them (run_pretraining.py's job: params, identity, resume, locks,
report). A custom loop, not `model.fit`: Keras 3 `fit` does not run under
MultiWorkerMirroredStrategy (keras-team/keras#20585). The loop is pretraining/training_loop.py's
(docs/DESIGN.md §3.3).
"""

import contextlib
import dataclasses
import math
import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import modeling
import optimization
from pretraining import losses
from pretraining import training_loop
from pretraining import training_metrics
from pretraining import training_setup
from util import distribute_utils

# --mixed_precision's values (a bare --mixed_precision is the first) and their Keras policies.
PRECISIONS = ("bfloat16", "float16")
_POLICIES = {None: "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def set_precision_policy(mixed_precision):
  """Keras' global policy of --mixed_precision (None, or one of PRECISIONS)."""
  keras.mixed_precision.set_global_policy(_POLICIES[mixed_precision])


# ---------------------------------------------------------- train and eval


def _batch_counts(features):
  mask = tf.cast(features["input_mask"], tf.float32)
  return {
    "tokens": tf.reduce_sum(mask),
    "positions": tf.cast(tf.size(mask), tf.float32),
    "sequences": tf.cast(tf.shape(mask)[0], tf.float32),
  }


def make_train_loop(
  strategy, model, optimizer, use_xla=False, loss_denominator=None, seed=0, distiller=None
):
  """train_loop(iterator, num_steps) -> float32 [num_steps, 9]: each step's global TRAIN_METRICS
  sums. loss_denominator None: each step's global target-weight sum. Dropout draws its masks from
  (seed, step, replica) (`_seeded_dropout`). distiller: a `distillation.Distiller` whose loss
  replaces the plain one.

  A step whose loss or gradients are not finite changes no variable (`apply_gradients_if_finite`)
  and its loss sums are 0, so that every sum stays finite; its row counts it in nonfinite_steps (a
  float16 loss-scale overflow in overflow_steps).
  """
  gather = not (use_xla or isinstance(strategy, tf.distribute.TPUStrategy))
  variables = model.trainable_variables
  loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

  def compute_gradients(features, denominator, teacher_log_probs=None):
    with tf.GradientTape() as tape:
      # One denominator on every replica: the optimizer sums the replicas'
      # gradients, which then equal the gradient of the global-batch loss.
      if distiller is None:
        loss, terms = losses.training_loss(model, features, denominator, gather_targets=gather)
      else:
        loss, terms = distiller.training_loss(model, features, teacher_log_probs, denominator)
      if loss_scaling:
        # float16 gradients that would underflow are scaled up; the optimizer divides them back.
        loss = optimizer.scale_loss(loss)
    return tape.gradient(loss, variables), terms

  if use_xla:
    compute_gradients = tf.function(compute_gradients, jit_compile=True)

  def step_fn(features):
    if loss_denominator is None:
      local_weight = tf.reduce_sum(tf.cast(features["target_weights"], tf.float32))
      global_weight = tf.distribute.get_replica_context().all_reduce(
        tf.distribute.ReduceOp.SUM, local_weight
      )
      denominator = tf.maximum(global_weight, 1e-6)
    else:
      denominator = tf.constant(loss_denominator, tf.float32)
    # The teacher predicts this replica's batch, outside the tape: it is not trained.
    teacher = None if distiller is None else distiller.teacher_log_probs(features)
    grads, terms = compute_gradients(features, denominator, teacher)
    # AdamWeightDecay sums over replicas, clips the global norm to 1.0, then
    # applies the update (optimization.py); we must not clip here as well.
    overflow, nonfinite = optimization.apply_gradients_if_finite(
      optimizer, grads, variables, terms["loss_sum"]
    )
    for name in training_metrics.LOSS_SUMS:
      terms[name] = tf.where(nonfinite, 0.0, terms[name])
    # The flags are the same on every replica, and the rows are summed over them: one counts.
    first = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group == 0, tf.float32)
    terms["overflow_steps"] = first * tf.cast(overflow, tf.float32)
    terms["nonfinite_steps"] = first * tf.cast(nonfinite, tf.float32)
    terms.update(_batch_counts(features))
    return tf.stack([terms[k] for k in training_metrics.TRAIN_METRICS])

  @tf.function
  def train_loop(iterator, num_steps):
    rows = tf.TensorArray(tf.float32, size=num_steps)
    for i in tf.range(num_steps):
      per_replica = strategy.run(
        _seeded_dropout(step_fn, seed),
        args=(next(iterator), tf.identity(optimizer.iterations.value)),
      )
      rows = rows.write(i, distribute_utils.sum_replicas(strategy, per_replica))
    return rows.stack()

  return train_loop


def _seeded_dropout(step_fn, seed):
  """step_fn(features) as a replica function (features, step int64 []) whose dropout masks are
  drawn statelessly from (seed, step, replica) (`modeling.stateless_dropout`).

  TF's stateful dropout keeps its stream position in the traced function, in no checkpoint: a run
  resumed (or stopped and restarted) at any step would draw other masks from there on. Keyed by the
  step the checkpoint holds, every step's masks are the same in every process, so a resume is
  bit-identical wherever the run stopped (docs/DESIGN.md §3.3).
  """

  def replica_fn(features, step):
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    step_seed = tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)])
    with modeling.stateless_dropout(
      tf.random.experimental.stateless_fold_in(step_seed, tf.cast(replica, tf.int64))
    ):
      return step_fn(features)

  return replica_fn


def make_eval_step(strategy, model, use_xla=False, element_spec=None):
  """eval_step(batch) -> float32 [7 + 12]: METRICS, then the continuous head's CE at each of
  LOGIT_SCALES. element_spec makes one trace serve every bucket and partial batch.
  """
  gather = not (use_xla or isinstance(strategy, tf.distribute.TPUStrategy))

  def step_fn(features):
    terms = losses.forward_loss_terms(
      model, features, training=False, gather_targets=gather, with_logits=True
    )
    terms.update(_batch_counts(features))
    by_scale = terms.get("ce_by_scale", tf.zeros([len(losses.LOGIT_SCALES)], tf.float32))
    return tf.concat([tf.stack([terms[k] for k in training_metrics.METRICS]), by_scale], 0)

  @tf.function(
    reduce_retracing=True, input_signature=None if element_spec is None else [element_spec]
  )
  def eval_step(features):
    return distribute_utils.sum_replicas(strategy, strategy.run(step_fn, args=(features,)))

  return eval_step


def evaluate(eval_step, dist_dataset, continuous):
  """Eval metrics over the whole set: loss (mean CE, or cosine distance for a continuous head, per
  target) and perplexity exp(mean CE): the pseudo-perplexity for tta, its one-masking estimate for
  bilm, the ordinary one for unilm. A continuous head also reports best_logit_scale and
  best_scale_perplexity over losses.LOGIT_SCALES.
  """
  totals = np.zeros(len(training_metrics.METRICS) + len(losses.LOGIT_SCALES), np.float64)
  batches = 0
  for features in dist_dataset:
    totals += eval_step(features).numpy()
    batches += 1
  m = dict(zip(training_metrics.METRICS, totals))
  weight = max(m["weight_sum"], 1e-9)
  result = {
    "loss": m["loss_sum"] / weight,
    "accuracy": m["correct_sum"] / weight,
    "perplexity": math.exp(min(m["ce_sum"] / weight, 700.0)),
    "batches": batches,
    "targets": m["weight_sum"],
  }
  if continuous:
    result["cosine_logit_ce"] = m["ce_sum"] / weight
    by_scale = totals[len(training_metrics.METRICS) :] / weight
    best = int(np.argmin(by_scale))
    result["best_logit_scale"] = losses.LOGIT_SCALES[best]
    result["best_scale_perplexity"] = math.exp(min(by_scale[best], 700.0))
  return result


def make_evaluator(strategy, model, data, use_xla, setup, writer, progress):
  """evaluate(step): the eval set of `data` (a `training_setup.DataSpec`: its eval_file or
  synthetic data) into progress.eval_result, a log line and `writer` (output_dir/eval)."""
  dataset_fn = training_setup.make_dataset_fn(data, setup.config, setup.vocab, False)
  element_spec = strategy.distribute_datasets_from_function(dataset_fn).element_spec
  eval_step = make_eval_step(strategy, model, use_xla, element_spec)

  def run(step):
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    result = evaluate(eval_step, dist, setup.config.output_layer == "continuous")
    logging.info(
      "eval at step %d: %s", step, " ".join(f"{k} {v:.4g}" for k, v in sorted(result.items()))
    )
    with writer.as_default():
      for name in ("loss", "perplexity", "accuracy", "cosine_logit_ce"):
        if name in result:
          training_metrics.write_scalar(name, result[name], step)
    progress.eval_result = result

  return run


# -------------------------------------------------------------------- train


@dataclasses.dataclass(frozen=True)
class Schedule:
  """The optimizer of a run (`optimization.create_optimizer`)."""

  # Peak learning rate, reached after the warmup and decayed linearly to 0 at num_train_steps.
  learning_rate: float
  num_train_steps: int
  num_warmup_steps: int
  # Decoupled weight decay (AdamWeightDecay's).
  weight_decay_rate: float
  # float16's dynamic loss scaling (a LossScaleOptimizer).
  loss_scaling: bool = False


@dataclasses.dataclass
class TrainState:
  """The checkpointed objects of a run."""

  model: modeling.TransformerLM
  optimizer: keras.optimizers.Optimizer
  # The input position: global batches consumed (one per step, but kept
  # apart from the step so the data stream is explicit in the checkpoint).
  input_batches: tf.Variable
  checkpoint: tf.train.Checkpoint

  @classmethod
  def create(cls, config, model_type, schedule, strategy):
    """A new model of `model_type` and `config` with the optimizer of `schedule` (a `Schedule`),
    their variables under `strategy`."""
    with strategy.scope():
      model = modeling.build_model(config, model_type)
      optimizer = optimization.create_optimizer(
        schedule.learning_rate,
        schedule.num_train_steps,
        schedule.num_warmup_steps,
        schedule.weight_decay_rate,
        loss_scaling=schedule.loss_scaling,
      )
      optimizer.build(model.trainable_variables)
    input_batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_batches")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, input_batches=input_batches)
    return cls(model, optimizer, input_batches, checkpoint)

  @property
  def step(self):
    return int(self.optimizer.iterations.numpy())

  def learning_rate(self):
    lr = self.optimizer.learning_rate
    return float(lr.numpy()) if hasattr(lr, "numpy") else float(lr)

  def loss_scale(self):
    """{"loss_scale": float16's dynamic loss scale}, or {} without loss scaling."""
    if not isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
      return {}
    return {"loss_scale": float(self.optimizer.dynamic_scale.numpy())}


@dataclasses.dataclass
class NonfiniteGuard:
  """The steps skipped as non-finite in a row (a step applied ends a run of them; a float16
  overflow neither counts nor ends one): `limit` in a row stop the run (`check`)."""

  limit: int
  in_a_row: int = 0

  def check(self, rows, step):
    """Logs the skipped steps of train-loop rows [num, 9] (their last reached `step`);
    training_loop.NonfiniteSteps when `limit` came in a row."""
    overflow, nonfinite = (
      rows[:, training_metrics.TRAIN_METRICS.index(k)] for k in training_metrics.SKIPS
    )
    longest = 0
    for over, bad in zip(overflow, nonfinite):
      self.in_a_row = self.in_a_row + 1 if bad else (self.in_a_row if over else 0)
      longest = max(longest, self.in_a_row)
    if nonfinite.any():
      logging.warning(
        "step %d: %d of the last %d steps skipped, their loss or gradients not finite (NaN/inf); "
        "%d in a row now (--max_nonfinite_steps %d)",
        step,
        int(nonfinite.sum()),
        len(rows),
        self.in_a_row,
        self.limit,
      )
    if longest >= self.limit:
      raise training_loop.NonfiniteSteps(
        f"{longest} steps in a row had a non-finite loss or gradients (--max_nonfinite_steps "
        f"{self.limit})"
      )


@dataclasses.dataclass
class Progress:
  """What a `train` call has done so far: the figures of its summary."""

  start_step: int
  # Global batches (steps) the input skipped: the input position resumed from.
  skip_batches: int
  # The newest checkpoint saved or resumed from (None: none yet).
  last_path: str
  step_losses: list = dataclasses.field(default_factory=list)
  # (global batch, padded length) of each step: the shapes the step function ran on, each a
  # compilation under XLA or on a TPU.
  step_shapes: set = dataclasses.field(default_factory=set)
  stopped_by: str = "num_train_steps"
  eval_result: dict = None
  run_start: float = dataclasses.field(default_factory=time.time)
  nonfinite: NonfiniteGuard = None


@contextlib.contextmanager
def _data_order_seed(seed, init_seed):
  """Builds the training datasets under the global TF seed `seed` (--seed), whatever `init_seed`.

  tf.data folds the global seed into its shuffle seeds, and a resume is exact only under the same
  one; on exit the global seed restarts at init_seed for the dropout of the loop traced next.
  """
  if init_seed is None:
    yield
    return
  tf.random.set_seed(seed)
  try:
    yield
  finally:
    tf.random.set_seed(init_seed)


def training_iterator(data, init_seed, strategy, setup, skip_steps):
  """The distributed iterator over the training batches of `data` (a `training_setup.DataSpec`),
  past those of the first `skip_steps` steps, in the data order of data.seed whatever `init_seed`
  (`_data_order_seed`)."""
  with _data_order_seed(data.seed, init_seed):
    return iter(
      strategy.distribute_datasets_from_function(
        training_setup.make_dataset_fn(data, setup.config, setup.vocab, True, skip_steps)
      )
    )


def run_steps(train_loop, iterator, num, state, meter, writer, progress):
  """Runs `num` steps of `train_loop` on `iterator`: the input position, losses, shapes, meter and
  TensorBoard scalars of `state` and `progress` updated; the non-finite guard checked."""
  t0 = time.time()
  rows = train_loop(iterator, tf.constant(num, tf.int32)).numpy()
  seconds = time.time() - t0
  state.input_batches.assign_add(num)
  skipped = rows[:, training_metrics.TRAIN_METRICS.index("nonfinite_steps")]
  progress.step_losses.extend(
    float("nan") if bad else float(row[0] / max(row[1], 1e-9)) for row, bad in zip(rows, skipped)
  )
  progress.step_shapes.update(_step_shapes(rows))
  scalars = meter.add(rows.sum(0), num, seconds, state.learning_rate())
  scalars.update(state.loss_scale())
  with writer.as_default():
    for name, value in scalars.items():
      training_metrics.write_scalar(name, value, state.step)
  progress.nonfinite.check(rows, state.step)


def _step_shapes(rows):
  """{(sequences, padded length)} of train-loop rows [num, 9]: positions / sequences is the
  length every replica of the step padded to (one bucket per step), else their mean."""
  sequences = rows[:, training_metrics.METRICS.index("sequences")]
  positions = rows[:, training_metrics.METRICS.index("positions")]
  return {(int(b), float(p / max(b, 1.0))) for b, p in zip(sequences, positions)}

# coding=utf-8
"""BERT's optimizer for a TF2 custom training loop (google-research/bert `optimization.py`).

The global-norm clip sits inside the optimizer, after the cross-replica sum, so the training step
must not clip (docs/DESIGN.md §3.2). `apply_gradients_if_finite` is the step's guarded update: a
step with a non-finite loss or gradients changes nothing; under float16 Keras' dynamic loss scaling
(`LossScaleOptimizer`) decides, on every replica's gradients.
"""

import re

import keras
import tensorflow as tf

# BERT's default: LayerNorm scales/offsets and every bias are not decayed. "layer_norm" covers
# Keras-style layer names; matching is `re.search` on the variable path, as in BERT.
DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


def create_optimizer(
  init_lr,
  num_train_steps,
  num_warmup_steps,
  weight_decay_rate=0.01,
  clip_norm=1.0,
  loss_scaling=False,
):
  """BERT's `AdamWeightDecay`, lr a `LinearWarmupLinearDecay` from init_lr; loss_scaling (for
  float16): wrapped in Keras' dynamic loss scaling (`LossScaleOptimizer`). Create it under
  `strategy.scope()`: it makes its slots and updates through that strategy."""
  schedule = LinearWarmupLinearDecay(
    peak_learning_rate=init_lr, num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps
  )
  optimizer = AdamWeightDecay(
    learning_rate=schedule,
    weight_decay_rate=weight_decay_rate,
    beta_1=0.9,
    beta_2=0.999,
    epsilon=1e-6,
    exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
    clip_norm=clip_norm,
  )
  return LossScaleOptimizer(optimizer) if loss_scaling else optimizer


def apply_gradients_if_finite(optimizer, grads, variables, loss):
  """`optimizer.apply(grads, variables)` in a replica context (inside `strategy.run`), skipped when
  the loss or a gradient is not finite on some replica: then no variable, slot or iteration count
  changes, on every replica alike.

  Under a `LossScaleOptimizer` (grads of its scaled loss) the scaler decides, as Keras does: it
  skips a step whose gradients are not finite and halves its scale. Such a step is an overflow
  (the scaler's business) while its loss is finite and its scale above 1; otherwise the loss or the
  unscaled gradients are not finite, as a skip of any other optimizer's.

  Args:
    grads: this replica's gradients of `variables` (AdamWeightDecay sums the replicas').
    loss: float32 [], this replica's loss (unscaled).
  Returns:
    (overflow, nonfinite): bool [] each, the same on every replica, whether the step was skipped
    and why; both false for an applied step.
  """
  loss_finite, grads_finite = tf.unstack(
    _on_every_replica(tf.stack([tf.reduce_all(tf.math.is_finite(loss)), all_finite(grads)]))
  )
  if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
    scale = tf.identity(optimizer.dynamic_scale)  # before a skip halves it
    optimizer.apply(grads, variables)
    skipped = tf.logical_not(grads_finite)
    overflow = skipped & loss_finite & (scale > 1.0)
    return overflow, skipped & tf.logical_not(overflow)
  finite = loss_finite & grads_finite
  _apply_if(finite, optimizer, grads, variables)
  return tf.constant(False), tf.logical_not(finite)


def all_finite(tensors):
  """bool []: every value of `tensors` (tensors or IndexedSlices; None skipped) is finite."""
  return tf.reduce_all(
    [
      tf.reduce_all(tf.math.is_finite(t.values if isinstance(t, tf.IndexedSlices) else t))
      for t in tensors
      if t is not None
    ]
  )


def _on_every_replica(flags):
  """bool [k]: which of `flags` (bool [k], this replica's) hold on every replica (a replica
  context)."""
  failing = tf.cast(tf.logical_not(flags), tf.float32)
  failing = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, failing)
  return tf.equal(failing, 0.0)


def _apply_if(condition, optimizer, grads, variables):
  """optimizer.apply(grads, variables) when `condition` (bool [], the same on every replica), in a
  replica context."""

  def apply(grads):
    optimizer.apply(grads, variables)

  if tf.__internal__.distribute.strategy_supports_no_merge_call():
    tf.cond(condition, lambda: apply(grads), lambda: None)
    return

  # MirroredStrategy refuses a synchronisation point (the optimizer's cross-replica sum) inside a
  # cond of a replica context: the cond goes into the cross-replica context, and the update back
  # into each replica, as Keras' LossScaleOptimizer does.
  def cross_replica(strategy, condition, grads):
    tf.cond(
      strategy.experimental_local_results(condition)[0],
      lambda: strategy.extended.call_for_each_replica(apply, args=(grads,)),
      lambda: None,
    )

  tf.distribute.get_replica_context().merge_call(cross_replica, args=(condition, grads))


@keras.saving.register_keras_serializable(package="tta")
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
  """Keras' dynamic loss scaling (float16), its overflow test over every replica's gradients.

  Keras tests the gradients it is handed, which are this replica's, not yet summed (AdamWeightDecay
  sums them), and under MirroredStrategy applies replica 0's verdict to all: an overflow on
  another replica alone would put inf into the sum every replica applies, and under a strategy
  without merge calls the replicas could disagree on whether to apply at all.
  """

  def check_finite(self, grads):
    return _on_every_replica(all_finite(grads)[tf.newaxis])[0]


@keras.saving.register_keras_serializable(package="tta")
class LinearWarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """BERT's learning-rate schedule: linear warmup, then linear decay to 0.

  With P = peak_learning_rate, W = num_warmup_steps, N = num_train_steps (0 <= W <= N, N > 0):

      lr(step) = P * step / W                  if step < W
      lr(step) = P * (1 - min(step, N) / N)    otherwise

  As BERT's `polynomial_decay(..., power=1)` with warmup, the decay line is anchored at step 0 (at
  step W the rate is P * (1 - W / N), a little below P), and `step` is the iteration count before
  the update, so the first update uses lr = 0 when there is warmup.
  """

  def __init__(self, peak_learning_rate, num_train_steps, num_warmup_steps=0, name=None):
    super().__init__()
    if num_train_steps <= 0:
      raise ValueError(f"num_train_steps must be > 0, got {num_train_steps}")
    if num_warmup_steps < 0 or num_warmup_steps > num_train_steps:
      raise ValueError(
        f"num_warmup_steps must be in [0, num_train_steps={num_train_steps}], "
        f"got {num_warmup_steps}"
      )
    self.peak_learning_rate = float(peak_learning_rate)
    self.num_train_steps = int(num_train_steps)
    self.num_warmup_steps = int(num_warmup_steps)
    self.name = name

  def __call__(self, step):
    """The learning rate at `step` (the optimizer's iteration count), a float32 scalar."""
    with tf.name_scope(self.name or "LinearWarmupLinearDecay"):
      # float32 counts exactly up to 2**24 (16.7M) steps, far beyond any run here.
      step = tf.cast(tf.convert_to_tensor(step), tf.float32)
      peak = tf.constant(self.peak_learning_rate, tf.float32)
      total = tf.constant(float(self.num_train_steps), tf.float32)
      decayed = peak * (1.0 - tf.minimum(step, total) / total)
      if self.num_warmup_steps == 0:
        return decayed
      warmup_steps = tf.constant(float(self.num_warmup_steps), tf.float32)
      warmup = peak * step / warmup_steps
      return tf.where(step < warmup_steps, warmup, decayed)

  def get_config(self):
    return {
      "peak_learning_rate": self.peak_learning_rate,
      "num_train_steps": self.num_train_steps,
      "num_warmup_steps": self.num_warmup_steps,
      "name": self.name,
    }


@keras.saving.register_keras_serializable(package="tta")
class AdamWeightDecay(keras.optimizers.Optimizer):
  """BERT's AdamWeightDecayOptimizer as a Keras 3 optimizer.

  Per variable w with gradient g (summed over replicas, then clipped to the global norm clip_norm):

      m = beta_1 * m + (1 - beta_1) * g
      v = beta_2 * v + (1 - beta_2) * g**2
      w = w - lr * (m / (sqrt(v) + epsilon) + weight_decay_rate * w)   # decay term if decayed

  As BERT's, unlike textbook Adam: no bias correction (BERT's hyper-parameters were tuned without
  it), and decoupled decay that passes through neither m/v nor the clip. A variable whose
  `variable.path` matches a regex of exclude_from_weight_decay (`re.search`) is not decayed.
  Build it under `strategy.scope()` before restoring: a checkpoint holds the iteration count and
  the `adam_m`/`adam_v` slots, so a restored run continues exactly.
  """

  def __init__(
    self,
    learning_rate=0.001,
    weight_decay_rate=0.01,
    beta_1=0.9,
    beta_2=0.999,
    epsilon=1e-6,
    exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
    clip_norm=None,
    name="AdamWeightDecay",
    **kwargs,
  ):
    """Arguments as BERT's (epsilon 1e-6; Keras Adam's is 1e-7). Keras' `weight_decay`, `clipnorm`,
    `global_clipnorm` and `clipvalue` are refused (ValueError): Keras applies them per replica and
    matches decay exclusions on the short `.name`."""
    for key in ("weight_decay", "clipnorm", "global_clipnorm", "clipvalue"):
      if kwargs.get(key) is not None:
        raise ValueError(
          f"AdamWeightDecay: Keras' `{key}` is not supported (got {key}={kwargs[key]!r}); "
          "use `weight_decay_rate`, `exclude_from_weight_decay` and `clip_norm`, which act "
          "on the cross-replica gradient and the variable path"
        )
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    if weight_decay_rate < 0:
      raise ValueError(f"weight_decay_rate must be >= 0, got {weight_decay_rate}")
    if clip_norm is not None and clip_norm <= 0:
      raise ValueError(f"clip_norm must be > 0 or None, got {clip_norm}")
    self.weight_decay_rate = float(weight_decay_rate)
    self.beta_1 = float(beta_1)
    self.beta_2 = float(beta_2)
    self.epsilon = float(epsilon)
    self.exclude_from_weight_decay = (
      tuple(exclude_from_weight_decay) if exclude_from_weight_decay else ()
    )
    self.clip_norm = None if clip_norm is None else float(clip_norm)

  def _do_use_weight_decay(self, variable_name):
    """Whether to decay the variable with this path (BERT's `_do_use_weight_decay`)."""
    if not self.weight_decay_rate:
      return False
    return not any(re.search(pattern, variable_name) for pattern in self.exclude_from_weight_decay)

  def build(self, var_list):
    """Creates the `adam_m`/`adam_v` slots and fixes which variables decay; RuntimeError under
    another strategy than the optimizer's, or inside `strategy.run`."""
    if self.built:
      return
    strategy = tf.distribute.get_strategy()
    if strategy is not self._distribution_strategy:
      raise RuntimeError(
        f"AdamWeightDecay '{self.name}' was created under "
        f"{type(self._distribution_strategy).__name__} but is being built under "
        f"{type(strategy).__name__}; create the optimizer inside `strategy.scope()`"
      )
    if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
      # Keras builds lazily on the first `apply_gradients`; inside `strategy.run` that creates
      # the slots in a replica context, which MirroredStrategy rejects inside a tf.function
      # with an obscure graph error. Say what to do instead.
      raise RuntimeError(
        f"AdamWeightDecay '{self.name}' is being built inside `strategy.run`; call "
        "`optimizer.build(model.trainable_variables)` under `strategy.scope()` before the "
        "first training step"
      )
    super().build(var_list)
    self._adam_m, self._adam_v = self.add_optimizer_variables(var_list, ["adam_m", "adam_v"])
    # A plain Python tuple keyed by the optimizer's variable index: decided here once because
    # inside the update the variable may be a per-replica component without a Keras path.
    self._decay_flags = tuple(
      self._do_use_weight_decay(getattr(v, "path", None) or v.name) for v in var_list
    )

  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    # Keras' `apply` calls this hook (private, keras 3.15) with the gradients of *this replica*,
    # None entries already dropped. Keras' TF version sums them over replicas and then updates;
    # the global clip must sit in between, so we do the sum here ourselves and then update the
    # same way Keras does. Like Keras, this needs a replica context: call `apply_gradients`
    # inside `strategy.run`, or with no strategy (the default replica context; the sum is then
    # the identity). tests/test_optimization.py fails if a Keras upgrade bypasses this hook.
    variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
    grads = list(grads)
    replica_context = tf.distribute.get_replica_context()
    if replica_context is not None:
      grads = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    if self.clip_norm is not None:
      grads, _ = tf.clip_by_global_norm(grads, self.clip_norm)
    # `maybe_merge_call` is a merge call, except for strategies that update in replica context
    # (Mirrored/MultiWorker under XLA on GPUs), where it calls the function directly.
    tf.__internal__.distribute.interim.maybe_merge_call(
      self._update_variables, self._distribution_strategy, grads, variables, learning_rate
    )

  def _update_variables(self, strategy, grads, variables, learning_rate):
    """Applies `update_step` to every variable on every device that holds a copy of it."""
    for grad, variable in zip(grads, variables):
      strategy.extended.update(
        variable,
        lambda var, g, lr: self.update_step(g, var, lr),
        args=(grad, learning_rate),
        group=False,
      )

  def update_step(self, gradient, variable, learning_rate):
    """One update of `variable` (a strategy: this device's copy) by the summed, clipped gradient."""
    index = self._get_variable_index(variable)
    m = self._adam_m[index]
    v = self._adam_v[index]
    dtype = variable.dtype
    if isinstance(gradient, tf.IndexedSlices):
      # BERT's update is dense: every row's moments decay every step, even rows (embeddings)
      # that got no gradient. Densifying keeps that exact behaviour.
      gradient = tf.convert_to_tensor(gradient)
    gradient = tf.cast(gradient, dtype)
    lr = tf.cast(learning_rate, dtype)
    beta_1 = tf.constant(self.beta_1, dtype)
    beta_2 = tf.constant(self.beta_2, dtype)

    next_m = beta_1 * m.value + (1.0 - beta_1) * gradient
    next_v = beta_2 * v.value + (1.0 - beta_2) * tf.square(gradient)
    # No bias correction (see the class docstring): this is the whole Adam direction.
    update = next_m / (tf.sqrt(next_v) + tf.constant(self.epsilon, dtype))
    if self._decay_flags[index]:
      # Decoupled decay of the pre-update weight, scaled by lr together with the Adam term.
      update += tf.constant(self.weight_decay_rate, dtype) * tf.convert_to_tensor(variable)
    self.assign(m, next_m)
    self.assign(v, next_v)
    self.assign_sub(variable, lr * update)

  def get_config(self):
    config = super().get_config()
    config.update(
      {
        "weight_decay_rate": self.weight_decay_rate,
        "beta_1": self.beta_1,
        "beta_2": self.beta_2,
        "epsilon": self.epsilon,
        "exclude_from_weight_decay": list(self.exclude_from_weight_decay),
        "clip_norm": self.clip_norm,
      }
    )
    return config

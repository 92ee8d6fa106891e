"""Tests for optimization.py: BERT's AdamWeightDecay, gradient clipping and LR schedule.

The update is checked against a NumPy transcription of BERT's formulas; the multi-replica
check runs over the 2 logical CPU devices of every test process (conftest.TEST_CPU_DEVICES).
"""

import copy

import keras
import numpy as np
import pytest
import tensorflow as tf

import optimization

BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-6


def _numpy_adam_weight_decay(w, m, v, g, lr, weight_decay_rate, decay):
  """One step of BERT's AdamWeightDecayOptimizer, in float64 NumPy, written from the paper."""
  m = BETA_1 * m + (1.0 - BETA_1) * g
  v = BETA_2 * v + (1.0 - BETA_2) * g * g
  update = m / (np.sqrt(v) + EPSILON)  # no bias correction
  if decay:
    update = update + weight_decay_rate * w  # decoupled: not in m or v
  return w - lr * update, m, v


def _scoped_variable(path, value):
  """A Keras variable whose `.path` is `path` (e.g. "bert/LayerNorm/gamma")."""
  *scopes, name = path.split("/")
  if not scopes:
    return keras.Variable(value, name=name)
  with keras.name_scope(scopes[0]):
    return _scoped_variable("/".join(scopes[1:] + [name]), value)


def test_update_matches_numpy_reference_for_three_steps():
  rng = np.random.default_rng(0)
  lr, weight_decay_rate = 0.01, 0.1
  init = {
    "layer_0/dense/kernel": rng.normal(size=(3, 4)),
    "layer_0/dense/bias": rng.normal(size=(4,)),
  }
  decays = {"layer_0/dense/kernel": True, "layer_0/dense/bias": False}
  variables = {p: _scoped_variable(p, x.astype(np.float32)) for p, x in init.items()}
  optimizer = optimization.AdamWeightDecay(learning_rate=lr, weight_decay_rate=weight_decay_rate)

  ref = {
    p: (x.astype(np.float32).astype(np.float64), np.zeros(x.shape), np.zeros(x.shape))
    for p, x in init.items()
  }
  for _ in range(3):
    grads = {p: rng.normal(size=x.shape).astype(np.float32) for p, x in init.items()}
    optimizer.apply_gradients([(grads[p], variables[p]) for p in init])
    for p in init:
      w, m, v = ref[p]
      ref[p] = _numpy_adam_weight_decay(
        w, m, v, grads[p].astype(np.float64), lr, weight_decay_rate, decays[p]
      )

  assert int(optimizer.iterations.numpy()) == 3
  for p in init:
    w, m, v = ref[p]
    index = optimizer._get_variable_index(variables[p])
    np.testing.assert_allclose(variables[p].numpy(), w, rtol=0, atol=1e-6, err_msg=p)
    np.testing.assert_allclose(optimizer._adam_m[index].numpy(), m, rtol=0, atol=1e-6)
    np.testing.assert_allclose(optimizer._adam_v[index].numpy(), v, rtol=0, atol=1e-6)
  # Independent of the reference: without bias correction the first step of a unit gradient
  # is lr * (1 - beta_1) / (sqrt(1 - beta_2) + epsilon) ~= 3.16 lr (bias-corrected Adam: lr).
  w0 = _scoped_variable("dense/bias", np.zeros((2,), np.float32))
  optimization.AdamWeightDecay(learning_rate=lr).apply_gradients([(tf.ones((2,)), w0)])
  want = -lr * (1.0 - BETA_1) / (np.sqrt(1.0 - BETA_2) + EPSILON)
  np.testing.assert_allclose(w0.numpy(), [want, want], rtol=0, atol=1e-6)


def test_weight_decay_skips_layer_norm_and_bias_by_path():
  lr, weight_decay_rate = 0.1, 0.5
  paths = {
    "bert/encoder/layer_0/attention/output/dense/kernel": True,
    "bert/encoder/layer_0/attention/output/dense/bias": False,
    "bert/encoder/layer_0/attention/output/LayerNorm/gamma": False,
    "bert/encoder/layer_0/attention/output/LayerNorm/beta": False,
    "encoder/layer_norm/gamma": False,
    "cls/predictions/output_bias": False,
  }
  variables = {p: _scoped_variable(p, np.full((2,), 2.0, np.float32)) for p in paths}
  # Keras 3's `.name` is only the last component: matching must use the path.
  assert variables["bert/encoder/layer_0/attention/output/LayerNorm/gamma"].name == "gamma"
  plain = tf.Variable(np.full((2,), 2.0, np.float32), name="dense/bias")  # no .path: uses .name
  optimizer = optimization.AdamWeightDecay(learning_rate=lr, weight_decay_rate=weight_decay_rate)
  # Zero gradients leave m = v = 0, so the Adam term is 0 and only the decay can move w.
  pairs = [(tf.zeros((2,)), variables[p]) for p in paths] + [(tf.zeros((2,)), plain)]
  optimizer.apply_gradients(pairs)

  for p, decayed in paths.items():
    want = 2.0 * (1.0 - lr * weight_decay_rate) if decayed else 2.0
    np.testing.assert_allclose(variables[p].numpy(), [want, want], rtol=1e-7, err_msg=p)
  np.testing.assert_array_equal(plain.numpy(), [2.0, 2.0])


def test_no_exclusions_decays_everything_and_zero_rate_decays_nothing():
  bias = _scoped_variable("dense/bias", np.ones((2,), np.float32))
  optimization.AdamWeightDecay(
    learning_rate=0.1, weight_decay_rate=0.5, exclude_from_weight_decay=None
  ).apply_gradients([(tf.zeros((2,)), bias)])
  np.testing.assert_allclose(bias.numpy(), [0.95, 0.95], rtol=1e-7)
  kernel = _scoped_variable("dense/kernel", np.ones((2,), np.float32))
  optimization.AdamWeightDecay(learning_rate=0.1, weight_decay_rate=0.0).apply_gradients(
    [(tf.zeros((2,)), kernel)]
  )
  np.testing.assert_array_equal(kernel.numpy(), [1.0, 1.0])


def test_schedule_values():
  peak = 1e-4
  schedule = optimization.LinearWarmupLinearDecay(
    peak_learning_rate=peak, num_train_steps=100, num_warmup_steps=10
  )
  expected = {
    0: 0.0,  # the first update of a run has lr 0 (BERT: global_step starts at 0)
    5: 0.5e-4,  # mid-warmup: peak * 5 / 10
    9: 0.9e-4,  # last warmup step
    10: 0.9e-4,  # end of warmup: BERT's decay line, peak * (1 - 10 / 100)
    55: 0.45e-4,  # mid-decay: peak * (1 - 55 / 100)
    100: 0.0,  # end
    150: 0.0,  # past the end: clamped, never negative
  }
  for step, want in expected.items():
    # float32 arithmetic: relative 1e-6.
    assert float(schedule(step)) == pytest.approx(want, rel=1e-6, abs=1e-12), step
    assert float(schedule(tf.constant(step, tf.int64))) == pytest.approx(want, rel=1e-6)
  no_warmup = optimization.LinearWarmupLinearDecay(peak, num_train_steps=100)
  assert float(no_warmup(0)) == pytest.approx(peak)
  assert float(no_warmup(25)) == pytest.approx(0.75e-4)


def test_schedule_config_round_trip():
  schedule = optimization.LinearWarmupLinearDecay(2e-4, 1000, 30, name="lr")
  clone = optimization.LinearWarmupLinearDecay.from_config(schedule.get_config())
  assert clone.get_config() == schedule.get_config()
  revived = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
  assert isinstance(revived, optimization.LinearWarmupLinearDecay)
  for step in (0, 17, 30, 500, 1000):
    assert float(revived(step)) == float(schedule(step))
  with pytest.raises(ValueError, match="num_warmup_steps"):
    optimization.LinearWarmupLinearDecay(1e-4, 10, 11)


def test_optimizer_uses_schedule_at_current_iteration():
  optimizer = optimization.create_optimizer(1e-3, num_train_steps=10, num_warmup_steps=4)
  variable = _scoped_variable("dense/kernel", np.ones((2,), np.float32))
  for step in range(6):
    assert float(optimizer.learning_rate) == pytest.approx(
      float(optimizer._learning_rate(step)), abs=1e-12
    )
    optimizer.apply_gradients([(tf.ones((2,)), variable)])
  assert float(optimizer.learning_rate) == pytest.approx(1e-3 * 0.4)


def test_optimizer_clips_global_norm_before_update():
  # First step: m = (1 - beta_1) * g_clipped, so the slot shows what the update saw.
  a = _scoped_variable("a/kernel", np.zeros((2,), np.float32))
  b = _scoped_variable("b/kernel", np.zeros((1,), np.float32))
  optimizer = optimization.create_optimizer(0.1, num_train_steps=10, num_warmup_steps=0)
  optimizer.apply_gradients([(tf.constant([3.0, 0.0]), a), (tf.constant([4.0]), b)])
  np.testing.assert_allclose(optimizer._adam_m[0].numpy(), [0.06, 0.0], rtol=1e-6)
  np.testing.assert_allclose(optimizer._adam_m[1].numpy(), [0.08], rtol=1e-6)


def _make_run():
  variables = [
    _scoped_variable("layer/dense/kernel", np.full((3, 2), 0.5, np.float32)),
    _scoped_variable("layer/LayerNorm/gamma", np.ones((2,), np.float32)),
  ]
  optimizer = optimization.create_optimizer(0.1, num_train_steps=20, num_warmup_steps=3)
  optimizer.build(variables)
  return variables, optimizer


def test_checkpoint_round_trip_resumes_exactly(tmp_path):
  rng = np.random.default_rng(1)
  grads = [
    [rng.normal(size=s, scale=2.0).astype(np.float32) for s in ((3, 2), (2,))] for _ in range(6)
  ]
  variables, optimizer = _make_run()
  for g in grads[:4]:
    optimizer.apply_gradients(zip(g, variables))
  path = tf.train.Checkpoint(variables=variables, optimizer=optimizer).save(str(tmp_path / "ckpt"))
  for g in grads[4:]:  # 2 more uninterrupted steps
    optimizer.apply_gradients(zip(g, variables))

  for build_first in (True, False):  # restore into a built and into a not-yet-built optimizer
    fresh_vars, fresh_opt = _make_run()
    if not build_first:
      fresh_opt = optimization.create_optimizer(0.1, num_train_steps=20, num_warmup_steps=3)
    status = tf.train.Checkpoint(variables=fresh_vars, optimizer=fresh_opt).restore(path)
    assert int(fresh_opt.iterations.numpy()) == 4
    for g in grads[4:]:
      fresh_opt.apply_gradients(zip(g, fresh_vars))
    status.assert_consumed()
    assert int(fresh_opt.iterations.numpy()) == 6
    for got, want in zip(fresh_vars + fresh_opt.variables, variables + optimizer.variables):
      np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=want.path)


def test_optimizer_config_round_trip_and_rejected_keras_options():
  optimizer = optimization.create_optimizer(3e-4, 100, 10, weight_decay_rate=0.02)
  config = optimizer.get_config()
  clone = optimization.AdamWeightDecay.from_config(copy.deepcopy(config))
  assert clone.get_config() == optimizer.get_config()
  assert isinstance(clone._learning_rate, optimization.LinearWarmupLinearDecay)
  assert clone.clip_norm == 1.0 and clone.weight_decay_rate == 0.02
  for key in ("weight_decay", "global_clipnorm", "clipnorm", "clipvalue"):
    with pytest.raises(ValueError, match=key):
      optimization.AdamWeightDecay(**{key: 1.0})


# ---------------------------------------------------------------------------------------------
# Two replicas vs one device.

_GLOBAL_BATCH = 8


def _mirrored_vs_single_device():
  """Returns max |difference| per variable/slot after 2 steps on 2 replicas vs 1 device."""
  rng = np.random.default_rng(2)
  features = rng.normal(size=(2 * _GLOBAL_BATCH, 4)).astype(np.float32)
  targets = (5.0 * rng.normal(size=(2 * _GLOBAL_BATCH, 3))).astype(np.float32)
  init = [
    rng.normal(size=(4, 3)).astype(np.float32),  # kernel: decayed
    rng.normal(size=(3,)).astype(np.float32),  # bias: not decayed
    np.ones((3,), np.float32),
  ]  # LayerNorm gamma: not decayed
  paths = ["dense/kernel", "dense/bias", "LayerNorm/gamma"]

  def run(strategy):
    with strategy.scope():
      variables = [_scoped_variable(p, x) for p, x in zip(paths, init)]
      optimizer = optimization.create_optimizer(0.1, num_train_steps=10, num_warmup_steps=0)
      optimizer.build(variables)
    data = tf.data.Dataset.from_tensor_slices((features, targets)).batch(_GLOBAL_BATCH)
    iterator = iter(strategy.experimental_distribute_dataset(data))

    @tf.function
    def train_step(batch):
      def step_fn(x, y):
        with tf.GradientTape() as tape:
          pred = (tf.matmul(x, variables[0]) + variables[1]) * variables[2]
          per_example = tf.reduce_sum(tf.square(pred - y), axis=-1)
          loss = tf.reduce_sum(per_example) / _GLOBAL_BATCH  # global-batch scaling
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return tf.linalg.global_norm(grads)

      norms = strategy.run(step_fn, args=batch)
      return strategy.experimental_local_results(norms)

    local_norms = [[float(n) for n in train_step(next(iterator))] for _ in range(2)]
    values = {p: v.numpy() for p, v in zip(paths, variables)}
    values.update({f"slot{i}": s.numpy() for i, s in enumerate(optimizer.variables[2:])})
    return values, int(optimizer.iterations.numpy()), local_norms, strategy.num_replicas_in_sync

  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  single, single_steps, single_norms, _ = run(tf.distribute.get_strategy())
  mirrored, mirrored_steps, mirrored_norms, replicas = run(strategy)

  # Keras' lazy build on the first apply_gradients would happen inside strategy.run: refused.
  with strategy.scope():
    variable = _scoped_variable("dense/kernel", np.ones((2,), np.float32))
    unbuilt = optimization.create_optimizer(0.1, num_train_steps=10, num_warmup_steps=0)
  try:
    strategy.run(lambda: unbuilt.apply_gradients([(tf.ones((2,)), variable)]))
    lazy_build_error = ""
  except RuntimeError as e:
    lazy_build_error = str(e)
  return {
    "lazy_build_error": lazy_build_error,
    "replicas": replicas,
    "iterations": [single_steps, mirrored_steps],
    "first_step_global_norm": single_norms[0][0],
    "per_replica_norms": mirrored_norms[0],
    "max_abs_diff": {k: float(np.abs(single[k] - mirrored[k]).max()) for k in single},
    "max_abs_change": {k: float(np.abs(single[k] - x).max()) for k, x in zip(paths, init)},
  }


def test_mirrored_two_replicas_match_single_device():
  result = _mirrored_vs_single_device()
  assert "optimizer.build" in result["lazy_build_error"], result
  assert result["replicas"] == 2
  assert result["iterations"] == [2, 2]
  # The gradient is large enough that clipping is active, so this also checks that the clip
  # sees the summed gradient, not each replica's half.
  assert result["first_step_global_norm"] > 2.0
  for name, diff in result["max_abs_diff"].items():
    assert diff < 1e-6, (name, result)
  for name, change in result["max_abs_change"].items():
    assert change > 1e-3, (name, result)  # the step did move every variable

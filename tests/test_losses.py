# coding=utf-8
"""The training loss's normalisation (losses.training_loss, --loss_normalization).

The authors' loss (joongbo/tta run_training.py) is a reduce_mean over B x 128 padded
positions with padding weight 0: the sum over real targets divided by a constant.
"""

from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

import modeling
from pretraining import losses
from pretraining import training
from pretraining import training_job

MAX_SEQ_LENGTH = 16  # conftest.TINY's max_position_embeddings
SOS, EOS, MASK = 3, 1, 4


def _model(model_type):
  tf.keras.utils.set_random_seed(7)
  config = tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  return modeling.build_model(config, model_type)


def _padded(sentences, length):
  """int32 ids [B, length] and float32 mask [B, length] of right-padded sentences."""
  ids = np.zeros((len(sentences), length), np.int32)
  for row, sentence in enumerate(sentences):
    ids[row, : len(sentence)] = sentence
  return ids, (ids > 0).astype(np.float32)


def _toy_batch(model_type):
  """Two sentences padded to 8 (< MAX_SEQ_LENGTH) with each objective's targets, by hand."""
  ids, mask = _padded([[SOS, 20, 21, 22, EOS], [SOS, 30, 31, 32, 33, 34, EOS]], 8)
  targets, weights = ids.copy(), mask.copy()
  if model_type == "bilm":
    ids[0, 2], ids[1, 1], ids[1, 4] = MASK, MASK, 50  # a masked and a replaced target
    weights = np.zeros_like(mask)
    weights[0, 2] = weights[1, 1] = weights[1, 4] = 1.0
  elif model_type == "unilm":
    targets = np.roll(ids, -1, axis=1)  # position t predicts token t + 1
    weights = np.roll(mask, -1, axis=1)
    weights[:, -1] = 0.0
  return {"input_ids": ids, "input_mask": mask, "target_ids": targets, "target_weights": weights}


def _numpy_cross_entropy_sum(model, batch):
  """sum over weighted targets of -log p(target), from the model's log_probs, in float64."""
  log_probs = model(batch)["log_probs"].numpy().astype(np.float64)  # [B, T, V]
  picked = np.take_along_axis(log_probs, batch["target_ids"][..., None], axis=-1)[..., 0]
  return float(-np.sum(batch["target_weights"] * picked))


@pytest.mark.parametrize("model_type", ["tta", "bilm", "unilm"])
def test_constant_normalisation_matches_hand_computed_loss(model_type):
  model = _model(model_type)
  batch = _toy_batch(model_type)
  batch_size = batch["input_ids"].shape[0]
  denominator = losses.constant_denominator("constant", batch_size, MAX_SEQ_LENGTH)
  # max_seq_length, not the batch's padded length (8).
  assert denominator == batch_size * MAX_SEQ_LENGTH == 32.0
  loss, terms = losses.training_loss(model, batch, tf.constant(denominator))
  ce_sum = _numpy_cross_entropy_sum(model, batch)
  np.testing.assert_allclose(float(loss), ce_sum / 32.0, rtol=1e-5)
  # per_batch_tokens: the mean over the batch's real targets.
  num_targets = float(np.sum(batch["target_weights"]))
  assert losses.constant_denominator("per_batch_tokens", batch_size, MAX_SEQ_LENGTH) is None
  loss, _ = losses.training_loss(model, batch, tf.constant(num_targets))
  np.testing.assert_allclose(float(loss), ce_sum / num_targets, rtol=1e-5)
  assert float(terms["weight_sum"]) == num_targets


def test_default_is_the_authors_constant():
  assert training_job.JobParams(output_dir="x").loss_normalization == "constant"
  with pytest.raises(ValueError, match="not one of"):
    losses.constant_denominator("mean", 2, 16)


def _train_loop(model, loss_denominator):
  """One make_train_loop of SGD(lr=1) on `model`: its steps of one batch shape share one trace
  (a loop per call traced the training step anew each time)."""
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  optimizer = tf.keras.optimizers.SGD(learning_rate=1.0)
  loop = training.make_train_loop(strategy, model, optimizer, loss_denominator=loss_denominator)
  return strategy, loop


def _sgd_update(model, batch, train_loop):
  """(-1 x the SGD(lr=1) update of one step of `train_loop` (`_train_loop`) from the model's
  current weights, flattened [num_params]; that step's metrics row). The weights are restored
  afterwards: SGD without momentum keeps no state but its step count, so each call is a first
  step."""
  strategy, loop = train_loop
  variables = model.trainable_variables
  before = [v.numpy() for v in variables]
  dataset = tf.data.Dataset.from_tensors(batch).repeat()
  row = loop(iter(strategy.experimental_distribute_dataset(dataset)), tf.constant(1)).numpy()[0]
  gradient = np.concatenate([(b - v.numpy()).ravel() for b, v in zip(before, variables)])
  for v, b in zip(variables, before):
    v.assign(b)
  return gradient, row


def _gradients(model, ids, mask, train_loop):
  """For a 2-sentence tta batch: (the step's gradient, the part row 0's targets add to it,
  the batch's target count, the step's metrics row)."""
  batch = {"input_ids": ids, "input_mask": mask, "target_ids": ids, "target_weights": mask}
  full, row = _sgd_update(model, batch, train_loop)
  without = dict(batch, target_weights=mask * np.array([[0.0], [1.0]], np.float32))
  return full, full - _sgd_update(model, without, train_loop)[0], float(np.sum(mask)), row


@pytest.mark.slow(seconds=25)
def test_a_token_weighs_the_same_in_short_and_long_batches():
  """One sentence adds the same gradient beside a short sentence (batch padded to 8) or a long
  one (padded to 16) under the constant; per_batch_tokens weighs each token 1 / batch tokens."""
  model = _model("tta")
  sentence = [SOS, 20, 21, 22, EOS]
  short = _padded([sentence, [SOS, 40, 41, EOS]], 8)
  long = _padded([sentence, [SOS] + list(range(40, 54)) + [EOS]], MAX_SEQ_LENGTH)
  constant = losses.constant_denominator("constant", 2, MAX_SEQ_LENGTH)
  constant_loop, per_batch_loop = _train_loop(model, constant), _train_loop(model, None)
  full_short, in_short, short_tokens, short_row = _gradients(model, *short, constant_loop)
  full_long, in_long, long_tokens, _ = _gradients(model, *long, constant_loop)
  assert (constant, short_tokens, long_tokens) == (32.0, 9.0, 21.0)
  assert np.max(np.abs(in_short)) > 1e-4  # the sentence does move the weights
  np.testing.assert_allclose(in_short, in_long, rtol=1e-3, atol=1e-7)

  # per_batch_tokens: the whole step is the constant one times 32 / (the batch's tokens), so
  # the sentence adds in_short * 32/9 to the short batch but in_long * 32/21 to the long one.
  per_short, _, _, per_short_row = _gradients(model, *short, per_batch_loop)
  per_long = _gradients(model, *long, per_batch_loop)[0]
  np.testing.assert_allclose(per_short, full_short * 32.0 / 9.0, rtol=1e-3, atol=1e-7)
  np.testing.assert_allclose(per_long, full_long * 32.0 / 21.0, rtol=1e-3, atol=1e-7)
  assert not np.allclose(in_short * 32.0 / 9.0, in_long * 32.0 / 21.0, rtol=0.1, atol=0.0)
  # The logged sums (loss per real target = loss_sum / weight_sum) do not depend on it.
  np.testing.assert_allclose(short_row, per_short_row, rtol=1e-6)

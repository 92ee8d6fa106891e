"""Tests of lm/model_dir.py: model dirs (old and new config.json), the latest
checkpoint, and the TF1 (Google BERT / T-TA) checkpoint files."""

import gc
import json
import logging
import os
import re
import shutil

from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

# Helpers of the modeling tests: the TF1 names are the model's (modeling.py),
# the checkpoint files are lm/model_dir.py's.
from test_modeling import google_bert_arrays
from test_modeling import random_batch
from test_modeling import run

from lm import checkpoints
from lm import model_dir
import modeling
import tokenization


@pytest.fixture(scope="module")
def models():
  """A tiny T-TA, as test_modeling's fixture of the same name builds it."""
  tf.keras.utils.set_random_seed(1)
  return {"tta": modeling.build_model(tiny_config(), "tta")}


def _write_vocab(path):
  tokens = list(tokenization.SPECIAL_TOKENS) + ["the", "cat", "sat"]
  tokenization.write_vocab(tokens + [f"w{i}" for i in range(99 - len(tokens))], str(path))
  return str(path)


# ------------------------------------------------------------ our model dirs


def test_save_and_load_round_trip(tmp_path):
  tf.keras.utils.set_random_seed(4)
  model = modeling.build_model(tiny_config(do_lower_case=False, normalization="librispeech"), "tta")
  vocab = _write_vocab(tmp_path / "source_vocab.txt")
  out = str(tmp_path / "dir")
  prefix = model_dir.save_model_dir(model, vocab, out)
  assert checkpoints.latest_checkpoint(out) == prefix
  loaded, tokenizer = model_dir.load_model_dir(out)
  assert loaded.model_type == "tta"
  assert loaded.config == modeling.TTAConfig.from_dict(
    dict(model.config.to_dict(), model_type="tta")
  )
  assert tokenizer.do_lower_case is False
  assert open(vocab).read() == open(model_dir.vocab_path(out)).read()
  for a, b in zip(model.weights, loaded.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert model_dir.weights_fingerprint(model) == model_dir.weights_fingerprint(loaded)


@pytest.mark.parametrize(
  "old_fields, lower, normalization",
  [
    # Written before the two fields were typed: top-level keys that
    # TTAConfig kept in its untyped `extra`.
    ({"do_lower_case": False, "normalization": "librispeech"}, False, "librispeech"),
    # Older still, or a Google BERT config: neither key.
    ({}, True, "none"),
  ],
)
def test_old_format_config_json_loads(tmp_path, old_fields, lower, normalization):
  tf.keras.utils.set_random_seed(5)
  model = modeling.build_model(tiny_config(), "bilm")
  out = tmp_path / "old"
  out.mkdir()
  tf.train.Checkpoint(model=model).write(str(out / "ckpt-7"))
  _write_vocab(out / "vocab.txt")
  old = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 16,
    "type_vocab_size": 0,
    "initializer_range": 0.02,
    "mask_token_id": 4,
    "model_type": "bilm",
    "output_layer": "softmax",
    "target_embedding_size": None,
    "continuous_logit_scale": 10.0,
    "vocab_file": "vocab.txt",
  }
  old.update(old_fields)
  (out / "config.json").write_text(json.dumps(old, indent=2))
  config = model_dir.read_config(str(out))
  assert config.do_lower_case is lower
  assert config.normalization == normalization
  assert "do_lower_case" not in config.extra
  assert "normalization" not in config.extra
  assert config.extra == {"vocab_file": "vocab.txt"}
  loaded, tokenizer = model_dir.load_model_dir(str(out))
  assert loaded.model_type == "bilm"
  assert tokenizer.do_lower_case is lower
  for a, b in zip(model.weights, loaded.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_latest_checkpoint_from_index_file_or_highest_number(tmp_path):
  model = modeling.build_model(tiny_config(), "tta")
  empty = tmp_path / "empty"
  empty.mkdir()
  assert checkpoints.latest_checkpoint(str(empty)) is None
  assert checkpoints.latest_checkpoint(str(tmp_path / "missing")) is None
  with pytest.raises(FileNotFoundError, match="no checkpoint"):
    checkpoints.resolve_checkpoint(str(empty))
  # No index file: the highest ckpt-N (numerically, not as text).
  bare = tmp_path / "bare"
  for step in (2, 10, 9):
    tf.train.Checkpoint(model=model).write(str(bare / f"ckpt-{step}"))
  assert checkpoints.latest_checkpoint(str(bare)) == str(bare / "ckpt-10")
  # A CheckpointManager's index file names the latest, whatever its number.
  managed = tmp_path / "managed"
  manager = tf.train.CheckpointManager(
    tf.train.Checkpoint(model=model), str(managed), max_to_keep=5, checkpoint_name="ckpt"
  )
  manager.save(checkpoint_number=20)
  manager.save(checkpoint_number=3)
  assert checkpoints.latest_checkpoint(str(managed)) == str(managed / "ckpt-3")
  assert checkpoints.resolve_checkpoint(str(managed)) == str(managed / "ckpt-3")
  prefix = str(managed / "ckpt-20")
  assert checkpoints.resolve_checkpoint(prefix) == prefix


def test_missing_piece_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json"):
    model_dir.load_model_dir(str(tmp_path))
  tiny_config().to_json_file(str(tmp_path / "config.json"))
  with pytest.raises(FileNotFoundError, match="vocab.txt"):
    model_dir.load_model_dir(str(tmp_path))


def _training_checkpoint(tmp_path):
  """A model dir whose ckpt-5 holds the model and Adam's slots, as training writes it."""
  tf.keras.utils.set_random_seed(6)
  model = modeling.build_model(tiny_config(), "tta")
  out = str(tmp_path / "trained")
  model_dir.save_model_dir(model, _write_vocab(tmp_path / "vocab.txt"), out)
  optimizer = tf.keras.optimizers.Adam()
  ids = tf.ones([2, 5], tf.int32)
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model({"input_ids": ids, "input_mask": ids})["sequence_output"])
  grads = tape.gradient(loss, model.trainable_variables)
  optimizer.apply_gradients(
    [(g, v) for g, v in zip(grads, model.trainable_variables) if g is not None]
  )
  tf.train.Checkpoint(model=model, optimizer=optimizer).write(os.path.join(out, "ckpt-5"))
  return out


@pytest.fixture(scope="module")
def training_checkpoint(tmp_path_factory):
  """`_training_checkpoint`, written once for the module."""
  return _training_checkpoint(tmp_path_factory.mktemp("training_checkpoint"))


@pytest.fixture
def trained_copy(training_checkpoint, tmp_path):
  """A copy of the module's `training_checkpoint` model dir the test may change or damage."""
  return shutil.copytree(training_checkpoint, str(tmp_path / "trained"))


class _Records(logging.Handler):
  def __init__(self):
    super().__init__(logging.WARNING)
    self.lines = []

  def emit(self, record):
    self.lines.append(record.getMessage())


@pytest.fixture
def tf_warnings():
  """The messages TF's Python logger emits at WARNING or above during the test."""
  records = _Records()
  tf.get_logger().addHandler(records)
  yield records.lines
  tf.get_logger().removeHandler(records)


def test_training_checkpoint_loads_for_inference_without_slot_warnings(trained_copy, tf_warnings):
  out = trained_copy
  model_dir.load_model_dir(out)
  gc.collect()
  assert tf_warnings == []


def test_config_that_does_not_fit_the_checkpoint_names_file_variable_and_shapes(
  trained_copy, tf_warnings
):
  out = trained_copy
  config = json.loads(open(model_dir.config_path(out)).read())
  config["hidden_size"] = 16
  open(model_dir.config_path(out), "w").write(json.dumps(config))
  with pytest.raises(checkpoints.CheckpointMismatchError) as error:
    model_dir.load_model_dir(out)
  message = str(error.value)
  assert message.startswith(f"{model_dir.config_path(out)} does not match checkpoint")
  assert "position_embeddings has shape (16, 32) in the checkpoint but (16, 16)" in message
  assert "hidden_size=16" in message
  assert len(message.splitlines()) <= 4
  gc.collect()
  assert tf_warnings == []  # no per-slot "could not be found" / "unrestored values" lines


@pytest.mark.parametrize(
  "damage, fault",
  [
    ("truncate data", r"ckpt-5\.data-00000-of-00001 is truncated or corrupt \(Read less bytes"),
    ("corrupt data", r"ckpt-5\.data-00000-of-00001 is truncated or corrupt \("),
    ("truncate index", r"ckpt-5\.index is truncated or corrupt"),
    ("remove data", r"ckpt-5\.data-\* is missing"),
  ],
)
@pytest.mark.slow(seconds=7)
def test_damaged_checkpoint_is_one_line_naming_the_file(trained_copy, damage, fault):
  out = trained_copy
  os.remove(os.path.join(out, "ckpt-0.index"))  # so that ckpt-5 is the latest
  data = os.path.join(out, "ckpt-5.data-00000-of-00001")
  index = os.path.join(out, "ckpt-5.index")
  if damage == "remove data":
    os.remove(data)
  elif damage == "corrupt data":
    with open(data, "r+b") as f:
      f.write(b"\xff" * os.path.getsize(data))  # same size, other bytes
  else:
    path = data if damage == "truncate data" else index
    with open(path, "r+b") as f:
      f.truncate(os.path.getsize(path) // 2)
  with pytest.raises(checkpoints.CheckpointUnreadableError) as error:
    model_dir.load_model_dir(out)
  message = str(error.value)
  assert re.match(rf"checkpoint {re.escape(out)}/ckpt-5 cannot be read: {re.escape(out)}/", message)
  assert re.search(fault, message) and len(message.splitlines()) == 1, message


def test_checkpoints_newest_first_and_roll_back(tmp_path):
  model = modeling.build_model(tiny_config(), "tta")
  bare = tmp_path / "bare"
  for step in (2, 10, 9):
    tf.train.Checkpoint(model=model).write(str(bare / f"ckpt-{step}"))
  assert checkpoints.newest_first(str(bare)) == [str(bare / f"ckpt-{n}") for n in (10, 9, 2)]
  managed = tmp_path / "managed"
  checkpoint = tf.train.Checkpoint(model=model)

  def manager():
    return tf.train.CheckpointManager(checkpoint, str(managed), 3, checkpoint_name="ckpt")

  for step in (5, 10, 15):
    manager().save(checkpoint_number=step)
  assert checkpoints.newest_first(str(managed)) == [str(managed / f"ckpt-{n}") for n in (15, 10, 5)]
  checkpoints.roll_back_to(str(managed), str(managed / "ckpt-5"))
  assert checkpoints.newest_first(str(managed)) == [str(managed / "ckpt-5")]
  # A manager made after the roll-back keeps the re-saved steps as the newest.
  resumed = manager()
  for step in (10, 15, 20):
    resumed.save(checkpoint_number=step)
  assert checkpoints.newest_first(str(managed)) == [
    str(managed / f"ckpt-{n}") for n in (20, 15, 10)
  ]
  assert sorted(p.name for p in managed.glob("*.index")) == [
    f"ckpt-{n}.index" for n in (10, 15, 20)
  ]
  assert "/" not in (managed / "checkpoint").read_text()  # names stay relative


# ------------------------------------------------------- TF1 checkpoint files


def test_saved_tf1_checkpoint_round_trips(tmp_path, models):
  prefix = checkpoints.save_tf1_checkpoint(models["tta"], str(tmp_path / "tta.ckpt"))
  fresh = modeling.build_model(tiny_config(), "tta")
  checkpoints.load_tf1_checkpoint(fresh, prefix)
  ids, mask = random_batch(np.random.default_rng(7), [6, 2])
  a, b = run(models["tta"], ids, mask), run(fresh, ids, mask)
  for key in a:
    np.testing.assert_array_equal(a[key], b[key])


def _authors_tta_variables(config):
  """{name: shape} of every variable the authors' training graph declares.

  Written from joongbo/tta, not from our name mapping: modeling.py BertModel
  (embeddings with one LayerNorm shared by both streams and no token types,
  encoder layer_i, pooler) and run_training.py get_lm_output (cls/predictions;
  the output weights are the word embeddings).
  """
  d, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
  shapes = {
    "bert/embeddings/word_embeddings": [v, d],
    "bert/embeddings/position_embeddings": [config.max_position_embeddings, d],
    "bert/embeddings/LayerNorm/beta": [d],
    "bert/embeddings/LayerNorm/gamma": [d],
    "bert/pooler/dense/kernel": [d, d],
    "bert/pooler/dense/bias": [d],
    "cls/predictions/transform/dense/kernel": [d, d],
    "cls/predictions/transform/dense/bias": [d],
    "cls/predictions/transform/LayerNorm/beta": [d],
    "cls/predictions/transform/LayerNorm/gamma": [d],
    "cls/predictions/output_bias": [v],
  }
  for layer in range(config.num_hidden_layers):
    prefix = f"bert/encoder/layer_{layer}/"
    for dense, (rows, cols) in {
      "attention/self/query": (d, d),
      "attention/self/key": (d, d),
      "attention/self/value": (d, d),
      "attention/output/dense": (d, d),
      "intermediate/dense": (d, i),
      "output/dense": (i, d),
    }.items():
      shapes[prefix + dense + "/kernel"] = [rows, cols]
      shapes[prefix + dense + "/bias"] = [cols]
    for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
      shapes[prefix + norm + "/beta"] = [d]
      shapes[prefix + norm + "/gamma"] = [d]
  return shapes


def test_saved_tf1_checkpoint_has_every_variable_of_the_authors_graph(tmp_path, models):
  config = tiny_config()
  prefix = checkpoints.save_tf1_checkpoint(models["tta"], str(tmp_path / "tta.ckpt"))
  expected = _authors_tta_variables(config)
  assert len(expected) == 11 + 16 * config.num_hidden_layers
  assert dict(tf.train.list_variables(prefix)) == expected

  # The authors' scripts restore with tf.train.Saver() over all their variables.
  with tf.Graph().as_default():
    variables = [tf.compat.v1.get_variable(n, shape) for n, shape in expected.items()]
    with tf.compat.v1.Session() as sess:
      tf.compat.v1.train.Saver().restore(sess, prefix)
      restored = dict(zip(expected, sess.run(variables)))
  np.testing.assert_array_equal(
    restored["bert/embeddings/word_embeddings"], models["tta"].embeddings.word_embeddings.numpy()
  )
  # The pooler is untrained, as in the authors' checkpoints: truncated normal
  # (|x| <= 2 stddev, stddev 0.02 -> about 0.88 * 0.02 after the cut), zero
  # bias, and the same in every file written.
  kernel = restored["bert/pooler/dense/kernel"]
  assert np.abs(kernel).max() <= 2 * config.initializer_range
  assert 0.8 * config.initializer_range < kernel.std() < 0.95 * config.initializer_range
  np.testing.assert_array_equal(restored["bert/pooler/dense/bias"], np.zeros(config.hidden_size))
  again = checkpoints.save_tf1_checkpoint(models["tta"], str(tmp_path / "again.ckpt"))
  np.testing.assert_array_equal(
    tf.train.load_checkpoint(again).get_tensor("bert/pooler/dense/kernel"), kernel
  )

  # Loading it back ignores the pooler, strictly.
  report = checkpoints.load_tf1_checkpoint(modeling.build_model(config, "tta"), prefix)
  assert report["ignored"] == ["bert/pooler/dense/bias", "bert/pooler/dense/kernel"]
  assert report["unexpected"] == []


def test_missing_variable_fails_by_name_and_assigns_nothing(tmp_path):
  config = tiny_config(type_vocab_size=2)
  arrays = google_bert_arrays(config, np.random.default_rng(8))
  del arrays["bert/encoder/layer_1/attention/self/key/bias"]
  prefix = checkpoints.write_tf1_checkpoint(arrays, str(tmp_path / "model.ckpt"))
  model = modeling.build_model(config, "bert")
  before = model.embeddings.word_embeddings.numpy().copy()
  with pytest.raises(checkpoints.CheckpointMismatchError, match="layer_1/attention/self/key/bias"):
    checkpoints.load_tf1_checkpoint(model, prefix)
  np.testing.assert_array_equal(model.embeddings.word_embeddings.numpy(), before)


def test_mis_shaped_variable_fails_by_name(tmp_path):
  config = tiny_config(type_vocab_size=2)
  arrays = google_bert_arrays(config, np.random.default_rng(9))
  arrays["bert/encoder/layer_0/intermediate/dense/kernel"] = np.zeros((32, 36), np.float32)
  prefix = checkpoints.write_tf1_checkpoint(arrays, str(tmp_path / "model.ckpt"))
  with pytest.raises(
    checkpoints.CheckpointMismatchError,
    match=r"layer_0/intermediate/dense/kernel: checkpoint "
    r"\[32, 36\], model \[32, 37\]",
  ):
    checkpoints.load_tf1_checkpoint(modeling.build_model(config, "bert"), prefix)


def test_unexpected_variable_fails_when_strict(tmp_path):
  config = tiny_config()
  arrays = google_bert_arrays(config, np.random.default_rng(10))
  arrays["bert/encoder/layer_2/output/dense/kernel"] = np.zeros((32, 32), np.float32)
  prefix = checkpoints.write_tf1_checkpoint(arrays, str(tmp_path / "model.ckpt"))
  model = modeling.build_model(config, "tta")
  with pytest.raises(
    checkpoints.CheckpointMismatchError,
    match="unexpected in checkpoint: bert/encoder/layer_2/output/dense/kernel",
  ):
    checkpoints.load_tf1_checkpoint(model, prefix)
  report = checkpoints.load_tf1_checkpoint(model, prefix, strict=False)
  assert report["unexpected"] == ["bert/encoder/layer_2/output/dense/kernel"]


def test_tf1_checkpoint_is_told_from_ours(tmp_path, models):
  tf1 = checkpoints.save_tf1_checkpoint(models["tta"], str(tmp_path / "tf1"))
  ours = tf.train.Checkpoint(model=models["tta"]).write(str(tmp_path / "ours" / "ckpt-1"))
  assert checkpoints.is_tf1_checkpoint(tf1)
  assert not checkpoints.is_tf1_checkpoint(ours)
  assert os.path.exists(tf1 + ".index")

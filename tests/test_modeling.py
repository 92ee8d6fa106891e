"""Tests of modeling.py: the T-TA self-unknown property, masks, checkpoints.

The NumPy reference below is written from the papers and BERT's TF1 variable
layout, independently of modeling.py, so agreement checks the architecture
(epsilon, erf-GELU, post-LN, input isolation, DMSA, tied head) and the
variable-name mapping at once.
"""

import json
import math
import os

from conftest import SHARP_ATTENTION
from conftest import TINY
from conftest import assert_self_unknown
from conftest import data_dir_or_skip
from conftest import keras_policy
from conftest import padded_batch
from conftest import tiny_config
import numpy as np
import pytest
from scipy.special import erf
import tensorflow as tf

from lm import checkpoints
import modeling

VOCAB = TINY["vocab_size"]


def random_batch(rng, lengths):
  """ids, mask int32 [B, max(lengths)] of random non-special tokens, padded."""
  return padded_batch(lengths, np.arange(5, VOCAB), rng)


def run(model, ids, mask):
  out = model({"input_ids": tf.constant(ids), "input_mask": tf.constant(mask)}, training=False)
  return {k: v.numpy() for k, v in out.items()}


@pytest.fixture(scope="module")
def models():
  tf.keras.utils.set_random_seed(1)
  config = tiny_config()
  return {t: modeling.build_model(config, t) for t in ("tta", "bilm", "unilm")}


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_tta_output_i_never_sees_token_i(policy):
  """Exact self-unknown of the Keras model, in float32 and under Keras' mixed bfloat16 and float16
  policies (the -1e9 mask added in float32: float16 ends at 65504)."""
  with keras_policy(policy):
    tf.keras.utils.set_random_seed(1)
    model = modeling.build_model(tiny_config(**SHARP_ATTENTION), "tta")
  assert model.encoder_layers[0].query.compute_dtype == policy.replace("mixed_", "")
  # Padding in all rows but the first, and a 1-token row.
  ids, mask = random_batch(np.random.default_rng(0), [9, 6, 1, 3])

  def outputs(ids, mask):
    out = run(model, ids, mask)
    return {k: out[k] for k in ("sequence_output", "log_probs")}

  assert_self_unknown(outputs, ids, mask, np.arange(5, VOCAB))


def test_unilm_output_t_never_sees_later_tokens(models):
  rng = np.random.default_rng(1)
  ids, mask = random_batch(rng, [8, 5])
  base = run(models["unilm"], ids, mask)
  for t in range(7):
    changed = ids.copy()
    changed[:, t + 1 :] = (ids[:, t + 1 :] - 5 + 7) % (VOCAB - 5) + 5
    out = run(models["unilm"], changed, mask)
    diff = np.abs(out["sequence_output"][:, : t + 1] - base["sequence_output"][:, : t + 1]).max()
    assert diff <= 1e-6, (t, diff)
    assert (
      np.abs(out["sequence_output"][0, t + 1 :] - base["sequence_output"][0, t + 1 :]).max() > 1e-4
    )


def test_bilm_every_output_sees_every_token(models):
  rng = np.random.default_rng(2)
  ids, mask = random_batch(rng, [7])
  base = run(models["bilm"], ids, mask)
  for i in range(7):
    changed = ids.copy()
    changed[0, i] = (ids[0, i] - 5 + 3) % (VOCAB - 5) + 5
    out = run(models["bilm"], changed, mask)
    diff = np.abs(out["sequence_output"][0] - base["sequence_output"][0]).max(axis=-1)
    assert diff.min() > 1e-4, (i, diff)


@pytest.mark.parametrize("model_type", ["tta", "bilm", "unilm"])
def test_appending_padding_changes_no_real_output(models, model_type):
  rng = np.random.default_rng(3)
  ids, mask = random_batch(rng, [6, 4])
  padded_ids = np.pad(ids, [(0, 0), (0, 5)])
  padded_ids[:, 6:] = 17  # whatever sits under the padding must not matter
  padded_mask = np.pad(mask, [(0, 0), (0, 5)])
  short = run(models[model_type], ids, mask)
  long = run(models[model_type], padded_ids, padded_mask)
  for key in ("sequence_output", "embedding_output", "log_probs"):
    for b, n in enumerate([6, 4]):
      np.testing.assert_allclose(long[key][b, :n], short[key][b, :n], atol=1e-5, err_msg=key)


@pytest.mark.parametrize("model_type", ["tta", "bilm", "unilm"])
def test_inference_is_deterministic_and_training_uses_dropout(models, model_type):
  rng = np.random.default_rng(4)
  ids, mask = random_batch(rng, [6, 3])
  model = models[model_type]
  first, second = run(model, ids, mask), run(model, ids, mask)
  for key in first:
    np.testing.assert_array_equal(first[key], second[key])
  trained = model({"input_ids": tf.constant(ids), "input_mask": tf.constant(mask)}, training=True)
  assert np.abs(trained["sequence_output"].numpy() - first["sequence_output"]).max() > 1e-3


def test_log_probs_are_normalised(models):
  rng = np.random.default_rng(5)
  ids, mask = random_batch(rng, [5])
  out = run(models["tta"], ids, mask)
  np.testing.assert_allclose(np.exp(out["log_probs"]).sum(-1), 1.0, atol=1e-5)


# -------------------------------------------------------------------- config


def test_config_json_round_trip(tmp_path):
  config = tiny_config(model_type="tta", hidden_dropout_prob=0.2)
  path = str(tmp_path / "config.json")
  config.to_json_file(path)
  again = modeling.TTAConfig.from_json_file(path)
  assert again == config
  assert again.hidden_dropout_prob == 0.2 and again.model_type == "tta"


def test_config_boundary_tokens_round_trip_and_are_absent_when_unset(tmp_path):
  # Unset, the JSON is what it was before the field existed (score-cache identities hash it).
  assert "boundary_tokens" not in tiny_config().to_dict()
  config = tiny_config(boundary_tokens=("[CLS]", "[SEP]"))
  path = str(tmp_path / "config.json")
  config.to_json_file(path)
  assert modeling.TTAConfig.from_json_file(path).boundary_tokens == ["[CLS]", "[SEP]"]


def test_authors_config_loads_and_keeps_extra_keys():
  path = os.path.join(
    data_dir_or_skip("reference-vocab"),
    "reference-vocab",
    "tta-config.layer-3.vocab-lower.sub-32k.json",
  )
  config = modeling.TTAConfig.from_json_file(path)
  assert (
    config.vocab_size,
    config.hidden_size,
    config.num_hidden_layers,
    config.num_attention_heads,
    config.intermediate_size,
    config.max_position_embeddings,
  ) == (29530, 512, 3, 8, 2048, 128)
  assert config.type_vocab_size == 0
  assert config.to_dict()["vocab_file"] == "vocab-lower.sub-32k.txt"


@pytest.mark.parametrize(
  "overrides, message",
  [
    (dict(hidden_size=30), "not a multiple of num_attention_heads"),
    (dict(hidden_act="swish"), "hidden_act"),
    (dict(model_type="gpt"), "model_type"),
    (dict(mask_token_id=VOCAB), "mask_token_id"),
    (dict(boundary_tokens=["[CLS]"]), "boundary_tokens"),
  ],
)
def test_bad_config_is_rejected_by_name(overrides, message):
  with pytest.raises(ValueError, match=message):
    tiny_config(**overrides)


def test_bad_config_file_names_the_file(tmp_path):
  path = tmp_path / "config.json"
  path.write_text('{"vocab_size": 10, "hidden_size": 30}')
  with pytest.raises(ValueError, match="config.json"):
    modeling.TTAConfig.from_json_file(str(path))


def test_a_config_file_that_is_json_but_no_object_names_the_file(tmp_path):
  # Issue 56's fourth round (H1): a config.json holding a JSON list was an AttributeError
  # traceback from every command that loads a model dir.
  path = tmp_path / "config.json"
  path.write_text("[1, 2]")
  with pytest.raises(ValueError, match=r"config.json: bad model config: expected a JSON object"):
    modeling.TTAConfig.from_json_file(str(path))


# ------------------------------------------------- NumPy reference and loads


def google_bert_arrays(config, rng, with_extras=True):
  """Random arrays under Google BERT's TF1 names, as its checkpoints hold."""
  d, f, v = config.hidden_size, config.intermediate_size, config.vocab_size
  arrays = {
    "bert/embeddings/word_embeddings": (v, d),
    "bert/embeddings/position_embeddings": (config.max_position_embeddings, d),
    "bert/embeddings/LayerNorm/gamma": (d,),
    "bert/embeddings/LayerNorm/beta": (d,),
    "cls/predictions/transform/dense/kernel": (d, d),
    "cls/predictions/transform/dense/bias": (d,),
    "cls/predictions/transform/LayerNorm/gamma": (d,),
    "cls/predictions/transform/LayerNorm/beta": (d,),
    "cls/predictions/output_bias": (v,),
  }
  if config.type_vocab_size:
    arrays["bert/embeddings/token_type_embeddings"] = (config.type_vocab_size, d)
  for l in range(config.num_hidden_layers):
    p = f"bert/encoder/layer_{l}/"
    for name in ("query", "key", "value"):
      arrays[p + f"attention/self/{name}/kernel"] = (d, d)
      arrays[p + f"attention/self/{name}/bias"] = (d,)
    arrays[p + "attention/output/dense/kernel"] = (d, d)
    arrays[p + "attention/output/dense/bias"] = (d,)
    arrays[p + "attention/output/LayerNorm/gamma"] = (d,)
    arrays[p + "attention/output/LayerNorm/beta"] = (d,)
    arrays[p + "intermediate/dense/kernel"] = (d, f)
    arrays[p + "intermediate/dense/bias"] = (f,)
    arrays[p + "output/dense/kernel"] = (f, d)
    arrays[p + "output/dense/bias"] = (d,)
    arrays[p + "output/LayerNorm/gamma"] = (d,)
    arrays[p + "output/LayerNorm/beta"] = (d,)
  if with_extras:  # present in real checkpoints, unused by an LM
    arrays["bert/pooler/dense/kernel"] = (d, d)
    arrays["bert/pooler/dense/bias"] = (d,)
    arrays["cls/seq_relationship/output_weights"] = (2, d)
    arrays["cls/seq_relationship/output_bias"] = (2,)
    arrays["bert/embeddings/word_embeddings/adam_m"] = (v, d)
    arrays["global_step"] = ()
  out = {}
  for name, shape in arrays.items():
    if name == "global_step":
      out[name] = np.array(1000, np.int64)
    elif name.endswith("gamma"):
      out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    else:
      out[name] = (0.2 * rng.standard_normal(shape)).astype(np.float32)
  return out


def np_layer_norm(x, gamma, beta):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def np_gelu(x):
  return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def np_softmax(x):
  x = x - x.max(-1, keepdims=True)
  e = np.exp(x)
  return e / e.sum(-1, keepdims=True)


def np_reference(w, config, model_type, ids, mask, segment_ids=None):
  """A from-the-paper NumPy forward pass; returns (sequence, log_probs)."""
  ids = ids.astype(np.int64)
  b, t = ids.shape
  n = config.num_attention_heads
  h = config.hidden_size // n
  emb = w["bert/embeddings/"]
  table = emb("word_embeddings")
  pos = emb("position_embeddings")[:t]
  x = table[ids] + pos
  if config.type_vocab_size:
    seg = np.zeros_like(ids) if segment_ids is None else segment_ids
    x = x + emb("token_type_embeddings")[seg]

  def ln(x, p):
    return np_layer_norm(x, p("gamma"), p("beta"))

  e = ln(x, w["bert/embeddings/LayerNorm/"])
  allowed = np.broadcast_to(mask[:, None, :].astype(bool), (b, t, t)).copy()
  if model_type == "tta":
    allowed &= ~np.eye(t, dtype=bool)
    hidden = ln(table[config.mask_token_id] + pos, w["bert/embeddings/LayerNorm/"])[None].repeat(
      b, 0
    )
  else:
    hidden = e
    if model_type == "unilm":
      allowed &= np.tril(np.ones((t, t), bool))

  def dense(x, p):
    return x @ p("kernel") + p("bias")

  for l in range(config.num_hidden_layers):

    def p(s):
      return w[f"bert/encoder/layer_{l}/{s}/"]

    kv = e if model_type == "tta" else hidden
    q = dense(hidden, p("attention/self/query")).reshape(b, t, n, h)
    k = dense(kv, p("attention/self/key")).reshape(b, t, n, h)
    v = dense(kv, p("attention/self/value")).reshape(b, t, n, h)
    scores = np.einsum("bfnh,btnh->bnft", q, k) / math.sqrt(h)
    scores = np.where(allowed[:, None], scores, -np.inf)
    probs = np.nan_to_num(np_softmax(scores))  # rows with no key -> 0
    ctx = np.einsum("bnft,btnh->bfnh", probs, v).reshape(b, t, n * h)
    a = ln(hidden + dense(ctx, p("attention/output/dense")), p("attention/output/LayerNorm"))
    ffn = dense(np_gelu(dense(a, p("intermediate/dense"))), p("output/dense"))
    hidden = ln(a + ffn, p("output/LayerNorm"))
  z = ln(
    np_gelu(dense(hidden, w["cls/predictions/transform/dense"])),
    w["cls/predictions/transform/LayerNorm"],
  )
  logits = z @ table.T + w["cls/predictions"]("output_bias")
  logits -= logits.max(-1, keepdims=True)
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return hidden, log_probs


class Arrays(dict):
  """arrays["scope/"]("name") -> arrays["scope/name"] (for the reference)."""

  def __getitem__(self, prefix):
    prefix = prefix if prefix.endswith("/") else prefix + "/"
    return lambda name: dict.__getitem__(self, prefix + name).astype(np.float64)


@pytest.mark.parametrize("model_type", ["bert", "tta", "bilm", "unilm"])
def test_tf1_checkpoint_loads_and_matches_reference(tmp_path, model_type):
  type_vocab_size = 2 if model_type == "bert" else 0
  config = tiny_config(type_vocab_size=type_vocab_size)
  rng = np.random.default_rng(6)
  arrays = google_bert_arrays(config, rng)
  prefix = checkpoints.write_tf1_checkpoint(arrays, str(tmp_path / "model.ckpt"))
  model = modeling.build_model(config, model_type)
  report = checkpoints.load_tf1_checkpoint(model, prefix)
  assert len(report["loaded"]) == len(model.trainable_variables)
  assert "bert/pooler/dense/kernel" in report["ignored"]
  assert "global_step" in report["ignored"]
  ids, mask = random_batch(rng, [7, 4])
  inputs = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask)}
  segments = None
  if model_type == "bert":
    segments = np.zeros_like(ids)
    segments[:, 4:] = 1
    inputs["segment_ids"] = tf.constant(segments)
  out = model(inputs, training=False)
  want_seq, want_lp = np_reference(Arrays(arrays), config, model_type, ids, mask, segments)
  for b, n in enumerate([7, 4]):
    np.testing.assert_allclose(
      out["sequence_output"].numpy()[b, :n], want_seq[b, :n], atol=2e-4, rtol=1e-4
    )
    np.testing.assert_allclose(
      out["log_probs"].numpy()[b, :n], want_lp[b, :n], atol=2e-4, rtol=1e-4
    )


def test_bert_without_token_types_is_rejected():
  with pytest.raises(ValueError, match="type_vocab_size"):
    modeling.build_model(tiny_config(), "bert")


@pytest.mark.parametrize("model_type", ["tta", "bilm"])
def test_object_checkpoint_saves_every_variable(tmp_path, model_type):
  """tf.train.Checkpoint(model=...) must hold every weight, blocks included."""
  tf.keras.utils.set_random_seed(12)
  model = modeling.build_model(tiny_config(), model_type)
  path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
  tf.keras.utils.set_random_seed(13)
  fresh = modeling.build_model(tiny_config(), model_type)
  tf.train.Checkpoint(model=fresh).read(path).assert_consumed()
  assert len(fresh.weights) == len(model.tf1_variables())
  for a, b in zip(model.weights, fresh.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_fused_key_value_projection_matches_per_layer_and_stays_self_unknown():
  tf.keras.utils.set_random_seed(5)
  config = modeling.TTAConfig(
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=24,
    max_position_embeddings=16,
    **SHARP_ATTENTION,
  )
  model = modeling.build_model(config, "tta")
  fused = model.fused_key_value_weights()
  assert fused[0].shape == (16, 2 * 3 * 16) and fused[1].shape == (2 * 3 * 16,)
  ids = np.array([[2, 7, 9, 11, 13, 3], [2, 8, 3, 0, 0, 0]], np.int32)
  mask = (ids > 0).astype(np.int32)
  inputs = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask)}
  plain, _ = model.encode(inputs)
  got, _ = model.encode(inputs, fused_key_value=fused)
  np.testing.assert_allclose(got.numpy(), plain.numpy(), atol=1e-5)

  def fused_encode(ids, mask):
    inputs = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask)}
    return {"sequence_output": model.encode(inputs, fused_key_value=fused)[0].numpy()}

  assert_self_unknown(fused_encode, ids, mask, np.arange(5, 40))
  with pytest.raises(ValueError, match="only T-TA"):
    modeling.build_model(config, "bilm").fused_key_value_weights()


# ---------------------------------------------------------- continuous head


def test_continuous_head_logits_and_log_probs():
  config = tiny_config(
    vocab_size=11,
    intermediate_size=64,
    max_position_embeddings=64,
    output_layer="continuous",
    target_embedding_size=6,
    continuous_logit_scale=5.0,
  )
  model = modeling.build_model(config, "tta")
  assert isinstance(model.lm_head, modeling.ContinuousHead)
  table = np.random.RandomState(1).normal(size=(11, 6))
  model.lm_head.set_target_embeddings(table)
  hidden = tf.random.normal([2, 3, 32])
  pred = model.lm_head.predict_vectors(hidden).numpy()
  cos = (pred / np.linalg.norm(pred, axis=-1, keepdims=True)) @ (
    table / np.linalg.norm(table, axis=-1, keepdims=True)
  ).T
  np.testing.assert_allclose(model.lm_head(hidden).numpy(), 5.0 * cos, rtol=1e-4, atol=1e-5)
  ids = tf.constant([[3, 5, 7]])
  out = model({"input_ids": ids, "input_mask": tf.ones_like(ids)})
  np.testing.assert_allclose(np.exp(out["log_probs"].numpy()).sum(-1), 1.0, rtol=1e-5)
  again = modeling.TTAConfig.from_dict(json.loads(config.to_json_string()))
  assert again.output_layer == "continuous" and again == config


# ------------------------------------------------------------------- dropout


def test_stateless_dropout_follows_its_seed():
  model = modeling.build_model(tiny_config(), "tta")
  ids = tf.constant([[3, 5, 7, 9, 11]])
  inputs = {"input_ids": ids, "input_mask": tf.ones_like(ids)}

  def run(seed):
    with modeling.stateless_dropout(tf.constant(seed, tf.int64)):
      return model.encode(inputs, training=True)[0].numpy()

  first = run([1, 2])
  np.testing.assert_array_equal(run([1, 2]), first)
  assert not np.array_equal(run([1, 3]), first)
  assert not np.array_equal(first, model.encode(inputs, training=False)[0].numpy())
  # Outside a block, dropout is TF's stateful one: two calls draw two masks.
  stateful = [model.encode(inputs, training=True)[0].numpy() for _ in range(2)]
  assert not np.array_equal(*stateful)

"""The OpenVINO and ONNX Runtime backends of lm/inference.py against the TensorFlow reference path.

Every kind (tta, bilm, unilm) must give the reference's numbers (log-probs within 1e-4, sentence
vectors within 1e-5) on batches with padding, an empty sentence and an over-long one; on
onnxruntime, tta_word and word-level scoring too. The
bfloat16 backend (CPUs with AMX or AVX512-BF16 only) is held to a looser tolerance. T-TA's exact
self-unknown property through the compiled TF functions (tf, XLA, OpenVINO) is
tests/test_inference.py's; onnx_backend's own graphs are checked here.
"""

from conftest import SHARP_ATTENTION
from conftest import WORDS
from conftest import assert_self_unknown
from conftest import padded_batch
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

from lm import backends
from lm import inference
from lm import onnx_backend
import modeling
import tokenization

MAX_POSITIONS = 16
SENTENCES = [
  "the cat sat on the mat .",
  "a dog ran",
  "",
  # Longer than MAX_POSITIONS - 2 pieces: truncated, and the longest row pads the others.
  " ".join(WORDS[:10] * 2),
  "cats walking far away , the dog ran",
]


def reference_lm(model_type, tokenizer):
  tf.keras.utils.set_random_seed(7)
  config = tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=MAX_POSITIONS)
  return inference.NeuralLM(modeling.build_model(config, model_type), tokenizer)


FLOAT32_BACKENDS = ("openvino", "onnxruntime")


@pytest.fixture(scope="module", params=["tta", "bilm", "unilm"])
def reference(request, tokenizer):
  return reference_lm(request.param, tokenizer)


@pytest.fixture(scope="module", params=FLOAT32_BACKENDS)
def lms(request, reference, tokenizer):
  """(TensorFlow NeuralLM, NeuralLM on a float32 backend) over the same model."""
  return reference, inference.NeuralLM(reference.model, tokenizer, backend=request.param)


@pytest.mark.slow(seconds=15)
def test_scores_equal_the_tensorflow_path(lms):
  reference, lm = lms
  want, got = reference.score(SENTENCES), lm.score(SENTENCES)
  assert [r.truncated for r in got] == [False, False, False, True, False]
  for w, g in zip(want, got):
    assert g.tokens == w.tokens and g.truncated == w.truncated
    np.testing.assert_allclose(g.token_logprobs, w.token_logprobs, rtol=0, atol=1e-4)


@pytest.mark.parametrize("pooling", inference.POOLINGS)
@pytest.mark.slow(seconds=15)
def test_sentence_vectors_equal_the_tensorflow_path(lms, pooling):
  reference, lm = lms
  want = reference.sentence_vectors(SENTENCES, pooling=pooling)
  got = lm.sentence_vectors(SENTENCES, pooling=pooling)
  assert got.shape == want.shape and got.dtype == np.float32
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_one_sentence_calls_equal_batched_ones(lms):
  # Batch-1 calls (the serving case) have no padding; the batched call pads every row.
  _, lm = lms
  batched = lm.score(SENTENCES)
  for sentence, want in zip(SENTENCES, batched):
    got = lm.score([sentence])[0]
    np.testing.assert_allclose(got.token_logprobs, want.token_logprobs, rtol=0, atol=1e-4)


def bf16_or_skip():
  if not backends.openvino_cpu_has_bf16():
    pytest.skip("this CPU has no bfloat16 support (AMX or AVX512-BF16)")


@pytest.mark.parametrize("kind", ["tta", "bilm", "unilm"])
def test_bf16_backend_is_within_its_tolerance(tokenizer, kind):
  bf16_or_skip()
  reference = reference_lm(kind, tokenizer)
  lm = inference.NeuralLM(reference.model, tokenizer, backend="openvino_bf16")
  want, got = reference.score(SENTENCES), lm.score(SENTENCES)
  differences = []
  for w, g in zip(want, got):
    assert g.tokens == w.tokens and g.truncated == w.truncated
    np.testing.assert_allclose(g.token_logprobs, w.token_logprobs, rtol=0, atol=1e-2)
    differences.extend(np.abs(np.subtract(g.token_logprobs, w.token_logprobs)))
  assert max(differences) > 1e-6  # bfloat16 did run: float32 would be closer than this
  vectors = lm.sentence_vectors(SENTENCES)
  np.testing.assert_allclose(vectors, reference.sentence_vectors(SENTENCES), rtol=0, atol=1e-3)
  # Score caches must never serve float32 scores for bfloat16 ones, or the reverse.
  assert inference.describe(lm) != inference.describe(reference)


def test_bf16_backend_needs_a_bf16_cpu(tokenizer, monkeypatch):
  reference = reference_lm("tta", tokenizer)
  monkeypatch.setattr(backends, "openvino_cpu_has_bf16", lambda: False)
  with pytest.raises(ValueError, match="needs a CPU with bfloat16 support"):
    inference.NeuralLM(reference.model, tokenizer, backend="openvino_bf16")


def test_unknown_backend_and_impossible_combinations_are_errors(tokenizer, monkeypatch):
  reference = reference_lm("tta", tokenizer)
  real_find_spec = backends.importlib.util.find_spec
  monkeypatch.setattr(
    backends.importlib.util,
    "find_spec",
    lambda name: None if name == "openvino" else real_find_spec(name),
  )
  with pytest.raises(ImportError, match="needs the openvino package"):
    inference.NeuralLM(reference.model, tokenizer, backend="openvino")
  monkeypatch.setattr(
    backends.importlib.util,
    "find_spec",
    lambda name: None if name == "onnxruntime" else real_find_spec(name),
  )
  with pytest.raises(ImportError, match="needs the onnxruntime package"):
    inference.NeuralLM(reference.model, tokenizer, backend="onnxruntime")
  monkeypatch.undo()
  with pytest.raises(ValueError, match="backend 'onnx' is not one of"):
    inference.NeuralLM(reference.model, tokenizer, backend="onnx")
  with pytest.raises(ValueError, match="no strategy, no jit_compile"):
    inference.NeuralLM(reference.model, tokenizer, backend="openvino", jit_compile=True)


def test_onnxruntime_serves_google_bert_models_and_caches_apart(tokenizer):
  # model_type "bert" is the biLM with a token-type embedding (segment 0 for every input).
  tf.keras.utils.set_random_seed(7)
  config = tiny_config(
    vocab_size=tokenizer.vocab_size, max_position_embeddings=MAX_POSITIONS, type_vocab_size=2
  )
  reference = inference.NeuralLM(modeling.build_model(config, "bert"), tokenizer)
  lm = inference.NeuralLM(reference.model, tokenizer, backend="onnxruntime")
  for w, g in zip(reference.score(SENTENCES), lm.score(SENTENCES)):
    np.testing.assert_allclose(g.token_logprobs, w.token_logprobs, rtol=0, atol=1e-4)
  want, got = reference.sentence_vectors(SENTENCES), lm.sentence_vectors(SENTENCES)
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
  # Its graphs are a second implementation, not a conversion: its scores are cached apart.
  assert inference.describe(lm) != inference.describe(reference)


@pytest.mark.parametrize("change", [{"hidden_act": "relu"}, {"output_layer": "continuous"}])
def test_onnxruntime_refuses_models_it_cannot_build(tokenizer, change):
  config = tiny_config(vocab_size=tokenizer.vocab_size, **change)
  model = modeling.build_model(config, "tta")
  with pytest.raises(ValueError, match="backend 'onnxruntime' builds BERT's softmax head"):
    inference.NeuralLM(model, tokenizer, backend="onnxruntime")


@pytest.mark.parametrize(
  "model_type, scoring", [("tta_word", "word_l2r"), ("tta_word", "piece"), ("tta", "word_l2r")]
)
def test_onnxruntime_word_scoring_equals_the_tensorflow_path(tokenizer, model_type, scoring):
  """Word-level scoring and the kind trained for it (tta_word: word_l2r by default, DMSA for
  "piece", word_l2r vectors) on a padded batch with split words ("cat ##s walk ##ing"); the
  scorings differ there by far more than the tolerance, so a graph with the wrong mask fails."""
  tf.keras.utils.set_random_seed(7)
  config = tiny_config(
    vocab_size=tokenizer.vocab_size, max_position_embeddings=MAX_POSITIONS, **SHARP_ATTENTION
  )
  reference = inference.NeuralLM(modeling.build_model(config, model_type), tokenizer)
  lm = inference.NeuralLM(reference.model, tokenizer, backend="onnxruntime")
  want, got = reference.score(SENTENCES, scoring), lm.score(SENTENCES, scoring)
  other = {"piece": "word_l2r", "word_l2r": "piece"}[scoring]
  split = SENTENCES.index("cats walking far away , the dog ran")
  assert "##ing" in want[split].tokens
  gap = np.subtract(
    want[split].token_logprobs, reference.score(SENTENCES, other)[split].token_logprobs
  )
  assert np.abs(gap).max() > 1e-2
  for w, g in zip(want, got):
    assert g.tokens == w.tokens and g.truncated == w.truncated
    np.testing.assert_allclose(g.token_logprobs, w.token_logprobs, rtol=0, atol=1e-4)
  for pooling in inference.POOLINGS:
    want_vectors = reference.sentence_vectors(SENTENCES, pooling=pooling)
    got_vectors = lm.sentence_vectors(SENTENCES, pooling=pooling)
    np.testing.assert_allclose(got_vectors, want_vectors, rtol=0, atol=1e-5)


def test_onnxruntime_word_l2r_encoder_equals_tensorflow_with_a_one_token_row(tokenizer):
  """tta_word's encoder (word_l2r) on a padded batch whose one-token row has no key to attend
  to: TF's zero context there, and TF's numbers everywhere."""
  tf.keras.utils.set_random_seed(3)
  config = tiny_config(vocab_size=tokenizer.vocab_size, **SHARP_ATTENTION)
  lm = inference.NeuralLM(
    modeling.build_model(config, "tta_word"), tokenizer, backend="onnxruntime"
  )
  spec = tf.TensorSpec([None, None], tf.int32)
  encode = lm.compiled(lm.graph.encode, [spec, spec])
  vocab = tokenizer.vocab
  rows = [["[SOS]", "walk", "##ing", "dog", "##s", "[EOS]"], ["[SOS]"], ["[SOS]", "ran", "[EOS]"]]
  ids, mask = inference.pad_rows([[vocab[t] for t in row] for row in rows], vocab["[PAD]"], 1)
  got, want = encode(ids, mask), lm.graph.encode(ids, mask)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w.numpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["tta", "tta_word", "bilm"])
def test_onnxruntime_above_the_projection_table_limit(tokenizer, monkeypatch, kind):
  # A model whose projection tables would be too large projects its embedding output by matmul.
  monkeypatch.setattr(onnx_backend, "MAX_PROJECTION_TABLE_BYTES", 0)
  reference = reference_lm(kind, tokenizer)
  lm = inference.NeuralLM(reference.model, tokenizer, backend="onnxruntime")
  for w, g in zip(reference.score(SENTENCES), lm.score(SENTENCES)):
    np.testing.assert_allclose(g.token_logprobs, w.token_logprobs, rtol=0, atol=1e-4)
  want, got = reference.sentence_vectors(SENTENCES), lm.sentence_vectors(SENTENCES)
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("tables", [True, False], ids=["projection_tables", "matmul"])
def test_onnxruntime_encoder_is_exactly_self_unknown(tokenizer, monkeypatch, tables):
  """The encoder graph onnx_backend writes (its scoring and pooling graphs share it) never lets
  token i reach output i, in any row of a padded batch, with or without the projection tables;
  its graphs are not TF functions, so test_inference's check of the compiled TF functions does
  not cover them. A one-token input alone gets TF's zero context, whatever the token."""
  if not tables:
    monkeypatch.setattr(onnx_backend, "MAX_PROJECTION_TABLE_BYTES", 0)
  tf.keras.utils.set_random_seed(3)
  config = tiny_config(vocab_size=tokenizer.vocab_size, **SHARP_ATTENTION)
  lm = inference.NeuralLM(modeling.build_model(config, "tta"), tokenizer, backend="onnxruntime")
  spec = tf.TensorSpec([None, None], tf.int32)
  encode = lm.compiled(lm.graph.encode, [spec, spec])
  tokens = np.arange(len(tokenization.SPECIAL_TOKENS), tokenizer.vocab_size)
  ids, mask = padded_batch([9, 6, 1, 3], tokens, np.random.default_rng(3))
  assert_self_unknown(
    lambda x, m: {"sequence_output": np.asarray(encode(x, m)[0])}, ids, mask, tokens
  )
  one = np.ones((1, 1), np.int32)
  alone = [np.asarray(encode(one * token, one)[0]) for token in tokens[:2]]
  np.testing.assert_array_equal(alone[0], alone[1])
  want = lm.graph.encode(one * tokens[0], one)[0].numpy()
  np.testing.assert_allclose(alone[0], want, rtol=0, atol=1e-5)

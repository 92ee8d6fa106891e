"""The OpenVINO backend of inference.py against the TensorFlow reference path.

Every kind (tta, bilm, unilm) must give the reference's numbers (log-probs within 1e-4, sentence
vectors within 1e-5) on batches with padding, an empty sentence and an over-long one, and T-TA
must stay exactly self-unknown when OpenVINO runs its encoder.
"""

from conftest import WORDS
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

import inference
import modeling

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


@pytest.fixture(scope="module", params=["tta", "bilm", "unilm"])
def lms(request, tokenizer):
  """(TensorFlow NeuralLM, OpenVINO NeuralLM) over the same model."""
  reference = reference_lm(request.param, tokenizer)
  return reference, inference.NeuralLM(reference.model, tokenizer, backend="openvino")


def test_scores_equal_the_tensorflow_path(lms):
  reference, openvino = lms
  want, got = reference.score(SENTENCES), openvino.score(SENTENCES)
  assert [r.truncated for r in got] == [False, False, False, True, False]
  for w, g in zip(want, got):
    assert g.tokens == w.tokens and g.truncated == w.truncated
    np.testing.assert_allclose(g.token_logprobs, w.token_logprobs, rtol=0, atol=1e-4)


@pytest.mark.parametrize("pooling", inference.POOLINGS)
def test_sentence_vectors_equal_the_tensorflow_path(lms, pooling):
  reference, openvino = lms
  want = reference.sentence_vectors(SENTENCES, pooling=pooling)
  got = openvino.sentence_vectors(SENTENCES, pooling=pooling)
  assert got.shape == want.shape and got.dtype == np.float32
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_one_sentence_calls_equal_batched_ones(lms):
  # Batch-1 calls (the serving case) have no padding; the batched call pads every row.
  _, openvino = lms
  batched = openvino.score(SENTENCES)
  for sentence, want in zip(SENTENCES, batched):
    got = openvino.score([sentence])[0]
    np.testing.assert_allclose(got.token_logprobs, want.token_logprobs, rtol=0, atol=1e-4)


def test_tta_stays_exactly_self_unknown_under_openvino(tokenizer):
  """Changing token i leaves output i bit for bit as it was, in every row of a padded batch."""
  lm = reference_lm("tta", tokenizer)
  spec = tf.TensorSpec([None, None], tf.int32)
  encode = inference._OpenVINOFunction(lm.graph.encode, [spec, spec])  # pylint: disable=protected-access
  rng = np.random.default_rng(3)
  lengths = np.array([9, 5, 1])
  mask = (np.arange(9)[None] < lengths[:, None]).astype(np.int32)
  ids = np.where(mask > 0, rng.integers(5, tokenizer.vocab_size, mask.shape), 0).astype(np.int32)
  base, _ = encode(ids, mask)
  np.testing.assert_allclose(base, lm.graph.encode(ids, mask)[0].numpy(), rtol=0, atol=1e-5)
  for i in range(9):
    real = mask[:, i] > 0
    changed = ids.copy()
    changed[real, i] = 5 + (ids[real, i] - 5 + 1 + rng.integers(0, 9, real.sum())) % (
      tokenizer.vocab_size - 5
    )
    assert np.all(changed[real, i] != ids[real, i])
    out, _ = encode(changed, mask)
    np.testing.assert_array_equal(out[real, i], base[real, i])
    # The token does reach the other real positions of its row.
    for row in np.flatnonzero(real & (lengths > 1)):
      others = [j for j in range(lengths[row]) if j != i]
      assert np.abs(out[row, others] - base[row, others]).max(axis=-1).min() > 1e-4


def test_unknown_backend_and_impossible_combinations_are_errors(tokenizer, monkeypatch):
  reference = reference_lm("tta", tokenizer)
  real_find_spec = inference.importlib.util.find_spec
  monkeypatch.setattr(
    inference.importlib.util,
    "find_spec",
    lambda name: None if name == "openvino" else real_find_spec(name),
  )
  with pytest.raises(ImportError, match="needs the openvino package"):
    inference.NeuralLM(reference.model, tokenizer, backend="openvino")
  monkeypatch.undo()
  with pytest.raises(ValueError, match="backend 'onnx' is not one of"):
    inference.NeuralLM(reference.model, tokenizer, backend="onnx")
  with pytest.raises(ValueError, match="no strategy, no jit_compile"):
    inference.NeuralLM(reference.model, tokenizer, backend="openvino", jit_compile=True)

"""The exported SavedModel gives the numbers of the Python inference path."""

import json
import os

from conftest import SHARP_ATTENTION
from conftest import WORDS
from conftest import assert_self_unknown
from conftest import padded_batch
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops for loading)

import export_saved_model
import inference
import modeling
import normalization

MAX_SEQ_LENGTH = 12
SENTENCES = [
  "the cat sat on the mat .",
  "",  # no word pieces at all
  "A dog ran",
  "cats walking far away , zebra",  # "zebra" is [UNK]
  # 16 words, more pieces: cut to MAX_SEQ_LENGTH - 2 pieces.
  "the dog , the cat , a mat , the runs walked on the mat far away",
]
# bilm sums over one masked copy per position, batched differently in the
# graph and in inference.py, so it rounds a little further apart.
ATOL = {"tta": 1e-5, "unilm": 1e-5, "bilm": 1e-4}


def export_config(tokenizer, **overrides):
  """The tiny config every exported model here uses."""
  sizes = dict(hidden_size=16, num_attention_heads=2, intermediate_size=24)
  return tiny_config(
    vocab_size=tokenizer.vocab_size, max_position_embeddings=32, **sizes, **overrides
  )


@pytest.fixture(scope="module", params=["tta", "bilm", "unilm"])
def exported(request, tokenizer, tmp_path_factory):
  """(NeuralLM, loaded SavedModel, export dir) for one model type."""
  tf.keras.utils.set_random_seed(5)
  config = export_config(tokenizer)
  model = modeling.build_model(config, request.param)
  # A budget of 40 tokens makes the bilm's in-graph copies run in several
  # chunks (and inference.py in several batches).
  lm = inference.NeuralLM(model, tokenizer, max_seq_length=MAX_SEQ_LENGTH, token_budget=40)
  export_dir = str(tmp_path_factory.mktemp("export") / request.param)
  export_saved_model.export(lm, export_dir)
  return lm, tf.saved_model.load(export_dir), export_dir


def test_score_signature_equals_python_path(exported):
  lm, loaded, _ = exported
  want = lm.score(SENTENCES)
  got = {k: v.numpy() for k, v in loaded.signatures["score"](texts=tf.constant(SENTENCES)).items()}
  atol = ATOL[lm.model_type]
  assert got["token_logprobs"].dtype == np.float32
  assert got["num_tokens"].dtype == np.int32
  for i, result in enumerate(want):
    row = got["token_logprobs"][i]
    scored = row != 0
    # The scored tokens are the ones after [SOS], up to and with [EOS].
    n = result.num_tokens
    assert got["num_tokens"][i] == n
    assert np.flatnonzero(scored).tolist() == list(range(1, n + 1))
    np.testing.assert_allclose(row[1 : n + 1], result.token_logprobs, atol=atol, rtol=0)
    assert got["total"][i] == pytest.approx(result.total, abs=10 * atol)
    assert bool(got["truncated"][i]) == result.truncated
  assert got["truncated"].tolist() == [False, False, False, False, True]
  # The over-long sentence fills max_seq_length exactly: [SOS] 10 pieces
  # [EOS], 11 tokens scored.
  assert got["num_tokens"][4] == MAX_SEQ_LENGTH - 1
  assert got["token_logprobs"].shape == (len(SENTENCES), MAX_SEQ_LENGTH)


@pytest.mark.parametrize("pooling", inference.POOLINGS)
def test_encode_signature_equals_python_path(exported, pooling):
  lm, loaded, _ = exported
  got = loaded.signatures["encode"](texts=tf.constant(SENTENCES))
  want = lm.sentence_vectors(SENTENCES, pooling=pooling, masked=True)
  np.testing.assert_allclose(got[pooling].numpy(), want, atol=ATOL[lm.model_type], rtol=0)
  if pooling in ("context", "embed"):
    assert not np.any(got[pooling].numpy()[1])  # the empty sentence


def test_bilm_exports_the_intact_context_too(exported):
  lm, loaded, _ = exported
  outputs = set(loaded.signatures["encode"].structured_outputs)
  if lm.model_type != "bilm":
    assert outputs == {"context", "embed", "first", "last"}
    return
  assert outputs == {"context", "context_intact", "embed", "first", "last"}
  got = loaded.signatures["encode"](texts=tf.constant(SENTENCES))
  want = lm.sentence_vectors(SENTENCES, pooling="context", masked=False)
  np.testing.assert_allclose(got["context_intact"].numpy(), want, atol=1e-5)


def test_one_sentence_batches_and_export_info(exported):
  lm, loaded, export_dir = exported
  for sentence in SENTENCES[:3]:
    got = loaded.signatures["score"](texts=tf.constant([sentence]))
    want = lm.score([sentence])[0]
    assert float(got["total"][0]) == pytest.approx(want.total, abs=1e-3)
  with open(
    os.path.join(export_dir, export_saved_model.EXTRA_DIR, export_saved_model.EXPORT_INFO)
  ) as f:
    info = json.load(f)
  assert info["model_type"] == lm.model_type
  assert info["max_seq_length"] == MAX_SEQ_LENGTH


def test_tta_export_is_exactly_self_unknown(tokenizer, tmp_path):
  """The SavedModel's `encode`: the "context" of a one-word sentence is the last layer at its
  word, bit for bit the same whatever the word, in every one-word row of a padded batch.

  Text reaches no other position: [SOS]/[EOS] are fixed, and `score` scores each token as its own
  target (tests/test_inference.py checks every position of the graph functions exported here).
  """
  tf.keras.utils.set_random_seed(5)
  model = modeling.build_model(export_config(tokenizer, **SHARP_ATTENTION), "tta")
  export_saved_model.export(inference.NeuralLM(model, tokenizer), str(tmp_path / "tta"))
  encode = tf.saved_model.load(str(tmp_path / "tta")).signatures["encode"]
  words = np.array(tokenizer.convert_tokens_to_ids([w for w in WORDS if not w.startswith("##")]))
  lengths = np.array([7, 3, 5, 3])  # [SOS] words [EOS]: two one-word sentences among longer ones
  ids, mask = padded_batch(lengths, words, np.random.default_rng(0))
  one_word = lengths == 3

  def outputs(ids, mask):
    texts = [" ".join(tokenizer.convert_ids_to_tokens(x[1 : n - 1])) for x, n in zip(ids, lengths)]
    vectors = {k: v.numpy() for k, v in encode(texts=tf.constant(texts)).items()}
    first, context = (
      np.zeros(ids.shape + vectors["first"].shape[-1:], np.float32) for _ in range(2)
    )
    first[:, 0] = vectors["first"]
    context[one_word, 1] = vectors["context"][one_word]
    return {"first": first, "context": context}

  assert_self_unknown(outputs, ids, mask, words, positions=[1])


def test_export_refuses_to_overwrite(exported):
  lm, _, export_dir = exported
  with pytest.raises(FileExistsError, match="--overwrite"):
    export_saved_model.export(lm, export_dir)


def test_empty_batch(exported):
  _, loaded, _ = exported
  texts = tf.constant([], tf.string)
  scores = loaded.signatures["score"](texts=texts)
  assert scores["total"].shape == (0,) and scores["truncated"].shape == (0,)
  vectors = loaded.signatures["encode"](texts=texts)
  assert vectors["context"].shape[0] == 0


def test_raw_texts_with_case_punctuation_and_digits(exported):
  """normalization "none": the signatures take raw `texts`, scored as the
  Python path scores them (case, punctuation and digits included)."""
  lm, loaded, _ = exported
  raw = ["The Cat sat on 2 mats, far away!", "A DOG RAN 3 times."]
  assert list(loaded.signatures["score"].structured_input_signature[1]) == ["texts"]
  got = loaded.signatures["score"](texts=tf.constant(raw))
  for i, result in enumerate(lm.score(raw)):
    assert int(got["num_tokens"][i]) == result.num_tokens
    assert float(got["total"][i]) == pytest.approx(result.total, abs=10 * ATOL[lm.model_type])


# ------------------------------------------- a LibriSpeech-normalized model

RAW = ["The cat sat on the mat.", "A dog ran 3 miles, far away!", "The cats' mat"]


@pytest.fixture(scope="module")
def exported_normalized(tokenizer, tmp_path_factory):
  """(NeuralLM, loaded SavedModel, export dir) of a tta model trained on
  LibriSpeech-normalized text."""
  tf.keras.utils.set_random_seed(6)
  config = export_config(tokenizer, normalization="librispeech")
  lm = inference.NeuralLM(modeling.build_model(config, "tta"), tokenizer, max_seq_length=16)
  assert lm.normalization == "librispeech"
  export_dir = str(tmp_path_factory.mktemp("export") / "normalized")
  export_saved_model.export(lm, export_dir)
  return lm, tf.saved_model.load(export_dir), export_dir


def test_normalized_model_takes_normalized_texts(exported_normalized):
  """The input says what it must hold, and normalized text scores as the
  Python path scores the raw sentence (which it normalizes itself)."""
  lm, loaded, export_dir = exported_normalized
  for name in export_saved_model.SIGNATURES:
    inputs = loaded.signatures[name].structured_input_signature[1]
    assert list(inputs) == ["normalized_texts"], (name, inputs)
  with open(os.path.join(export_dir, "assets.extra", "tta_export.json")) as f:
    assert json.load(f)["input"] == "normalized_texts"
  normalized = [normalization.normalize_librispeech(s) for s in RAW]
  assert normalized[1] == "A DOG RAN THREE MILES FAR AWAY"
  got = loaded.signatures["score"](normalized_texts=tf.constant(normalized))
  for i, result in enumerate(lm.score(RAW)):
    n = result.num_tokens
    assert int(got["num_tokens"][i]) == n
    np.testing.assert_allclose(
      got["token_logprobs"][i, 1 : n + 1], result.token_logprobs, atol=1e-5
    )
  vectors = loaded.signatures["encode"](normalized_texts=tf.constant(normalized))
  np.testing.assert_allclose(
    vectors["context"].numpy(), lm.sentence_vectors(RAW, pooling="context"), atol=1e-5
  )


@pytest.mark.parametrize(
  "text", ["The cat sat on the mat.", "THE CAT SAT ON THE MAT.", "ROOM 101", "THE CAT, THE MAT"]
)
@pytest.mark.parametrize("signature", export_saved_model.SIGNATURES)
def test_normalized_model_rejects_text_that_is_not(exported_normalized, text, signature):
  """Never a silently different score: case, digits or punctuation fail the
  call, naming the rule and the sentence (and only the offending one)."""
  _, loaded, _ = exported_normalized
  batch = tf.constant(["THE CAT'S MAT", text])
  with pytest.raises(tf.errors.InvalidArgumentError) as error:
    loaded.signatures[signature](normalized_texts=batch)
  message = str(error.value)
  assert "no lower-case letters, digits or punctuation other than apostrophes" in message
  assert text in message and "THE CAT'S MAT" not in message

"""Word-level scoring (`scoring="word_l2r"`): each piece given the other words and the earlier
pieces of its own word (Kauf & Ivanova 2023's PLL-word-l2r).

T-TA does it in one pass with the word_l2r attention mask; its property is checked bit for bit
through the compiled graph of every backend, and through onnx_backend's own graphs (written, not
converted) at every output of a padded batch, whose word mask is held equal to modeling's. The
biLM's word-l2r masked copies are checked against copies built and run by hand; the uniLM's
scores are its piece scores.
"""

import importlib.util

from conftest import SHARP_ATTENTION
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

from lm import inference
from lm import onnx_backend
import modeling

SENTENCE = "walking dogs ran far away"
# The onnxruntime backend is opt-in: its tests skip without the package.
needs_onnxruntime = pytest.mark.skipif(
  importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed"
)


def lm_for(model_type, tokenizer, **kwargs):
  tf.keras.utils.set_random_seed(5)
  config = tiny_config(vocab_size=tokenizer.vocab_size, **SHARP_ATTENTION)
  return inference.NeuralLM(modeling.build_model(config, model_type), tokenizer, **kwargs)


def pieces(lm, ids):
  return lm.tokenizer.convert_ids_to_tokens(ids)


def test_word_ids_follow_the_continuation_pieces(tokenizer):
  lm = lm_for("tta", tokenizer)
  (ids,), _ = lm.tokenize([SENTENCE])
  assert pieces(lm, ids) == ["[SOS]", "walk", "##ing", "dog", "##s", "ran", "far", "away", "[EOS]"]
  np.testing.assert_array_equal(lm.graph.word_ids(np.array([ids])), [[1, 2, 2, 3, 3, 4, 5, 6, 7]])


@pytest.mark.parametrize(
  "backend", ["tf", "openvino", pytest.param("onnxruntime", marks=needs_onnxruntime)]
)
@pytest.mark.parametrize("model_type", ["tta", "tta_word"])
@pytest.mark.slow(seconds=20)
def test_tta_word_l2r_is_blind_to_the_piece_and_its_later_pieces(tokenizer, model_type, backend):
  """Through the compiled one-pass graph (words found in the graph from the ids): the score of
  piece i is bit-identical when a later piece of its word changes, and changes when another
  word or an earlier piece of its word changes; for T-TA trained with DMSA and for tta_word."""
  lm = lm_for(model_type, tokenizer, backend=backend)
  (ids,), _ = lm.tokenize([SENTENCE])
  vocab = lm.tokenizer.vocab

  def scores(changed):
    positions = [lm._scored_positions(len(changed))]  # pylint: disable=protected-access
    return lm._one_pass([changed], positions, "word_l2r")[0]  # pylint: disable=protected-access

  base = scores(ids)
  # "walk ##ing" -> "walk ##ed": position 1's query sees neither 1 nor 2.
  later_piece = list(ids)
  later_piece[2] = vocab["##ed"]
  np.testing.assert_array_equal(scores(later_piece)[0], base[0])
  # "dog" -> "cat": another word, seen by position 1.
  other_word = list(ids)
  other_word[3] = vocab["cat"]
  assert scores(other_word)[0] != base[0]
  # Position 2 ("##ing") sees the earlier piece of its word: changing "walk" changes it.
  earlier_piece = list(ids)
  earlier_piece[1] = vocab["run"]
  assert scores(earlier_piece)[1] != base[1]


def test_tta_word_l2r_differs_from_piece_scoring_only_inside_split_words(tokenizer):
  lm = lm_for("tta", tokenizer)
  piece = lm.score([SENTENCE])[0].token_logprobs
  word = lm.score([SENTENCE], scoring="word_l2r")[0].token_logprobs
  # Scored positions 1..8: words of one piece ("ran", "far", "away", [EOS]) see the same keys.
  np.testing.assert_array_equal(word[4:], piece[4:])
  assert not np.array_equal(word[:4], piece[:4])


def test_tta_word_scores_word_l2r_by_default_and_piece_with_dmsa(tokenizer):
  """tta_word's default is the mask it was trained with; "piece" is DMSA, by hand."""
  lm = lm_for("tta_word", tokenizer)
  assert lm.default_scoring == "word_l2r"
  assert inference.describe(lm) == inference.describe(lm, "word_l2r")
  np.testing.assert_array_equal(
    lm.score([SENTENCE])[0].token_logprobs,
    lm.score([SENTENCE], scoring="word_l2r")[0].token_logprobs,
  )
  (ids,), _ = lm.tokenize([SENTENCE])
  inputs = {"input_ids": np.array([ids], np.int32), "input_mask": np.ones((1, len(ids)), np.int32)}
  hidden, _ = lm.model.encode(inputs, attention="dmsa")
  logits = lm.model.lm_head(hidden, lm.model.embeddings.word_embeddings)
  log_probs = tf.nn.log_softmax(logits, axis=-1).numpy()[0]
  want = [log_probs[p, ids[p]] for p in range(1, len(ids))]
  got = lm.score([SENTENCE], scoring="piece")[0].token_logprobs
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_bilm_word_l2r_masks_the_piece_and_the_later_pieces_of_its_word(tokenizer):
  lm = lm_for("bilm", tokenizer)
  (ids,), _ = lm.tokenize([SENTENCE])
  word = lm.graph.word_ids(np.array([ids])).numpy()[0]
  want = []
  for p in range(1, len(ids)):
    copy = np.array([ids])
    copy[0, (word == word[p]) & (np.arange(len(ids)) >= p)] = lm.mask_id
    log_probs = lm.model({"input_ids": copy, "input_mask": np.ones_like(copy)})["log_probs"]
    want.append(log_probs.numpy()[0, p, ids[p]])
  got = lm.score([SENTENCE], scoring="word_l2r")[0].token_logprobs
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
  # "walk" is scored with "##ing" masked too: not its piece score.
  assert abs(got[0] - lm.score([SENTENCE])[0].token_logprobs[0]) > 1e-6


def test_unilm_word_l2r_is_its_piece_scoring(tokenizer):
  lm = lm_for("unilm", tokenizer)
  np.testing.assert_array_equal(
    lm.score([SENTENCE], scoring="word_l2r")[0].token_logprobs,
    lm.score([SENTENCE])[0].token_logprobs,
  )


def test_scoring_is_part_of_the_identity_and_checked(tokenizer):
  lm = lm_for("tta", tokenizer)
  assert inference.describe(lm) == inference.describe(lm, "piece")
  assert inference.describe(lm, "word_l2r")["scoring"] == "word_l2r"
  with pytest.raises(ValueError, match="scoring 'words' is not one of"):
    lm.score([SENTENCE], scoring="words")


def random_word_batch(tokenizer, rng, lengths):
  """ids, mask int32 [B, max(lengths)]: rows of random pieces, about a third of them
  continuations ("##ing"), padded with [PAD]; a row's first token starts a word, as [SOS]."""
  continuation = tokenizer.continuation_flags()
  starts, pieces = np.flatnonzero(~continuation), np.flatnonzero(continuation)
  width = max(lengths)
  ids = np.where(
    rng.random((len(lengths), width)) < 0.35,
    rng.choice(pieces, (len(lengths), width)),
    rng.choice(starts, (len(lengths), width)),
  )
  ids[:, 0] = rng.choice(starts, len(lengths))
  mask = (np.arange(width)[None] < np.array(lengths)[:, None]).astype(np.int32)
  ids[mask == 0] = tokenizer.vocab["[PAD]"]
  return ids.astype(np.int32), mask


@needs_onnxruntime
def test_onnxruntime_word_mask_is_modelings(tokenizer):
  """The bias onnx_backend computes in its graph from the input ids, padding folded in, is what
  modeling adds to the attention scores for the ScoringGraph's words ((1 - mask) * -1e9 of
  `create_attention_mask` with `word_ids` of the continuation flags: `_word_l2r_keys`, the
  rule's owner), a query has a key exactly where that mask has one, and the words it finds are
  `modeling.token_word_ids`'."""
  tf.keras.utils.set_random_seed(5)
  model = modeling.build_model(tiny_config(vocab_size=tokenizer.vocab_size), "tta_word")
  continuation = tokenizer.continuation_flags()
  g = onnx_backend._Graph({})  # pylint: disable=protected-access
  input_ids = g.input("input_ids", np.int32, ["B", "T"])
  input_mask = g.input("input_mask", np.int32, ["B", "T"])
  length = g.op("Slice", g.op("Shape", input_ids), g.ints([1]), g.ints([2]))
  masks = onnx_backend._AttentionMasks(  # pylint: disable=protected-access
    g, model, "word_l2r", continuation, input_ids, input_mask, length
  )
  assert masks.input_mask == ""  # the padding is in the bias
  g.output(masks.pattern, "bias")
  g.output(masks.has_key, "has_key")
  g.output(onnx_backend._word_ids(g, continuation, input_ids), "words")  # pylint: disable=protected-access
  session = g.session(1)
  rng = np.random.default_rng(0)
  keyless = 0
  for lengths in ([9, 6, 1, 3], [12], [1], [5, 5, 2]):
    ids, mask = random_word_batch(tokenizer, rng, lengths)
    bias, has_key, onnx_words = session.run(None, {"input_ids": ids, "input_mask": mask})
    words = modeling.token_word_ids(ids, continuation)
    np.testing.assert_array_equal(onnx_words, words)
    allowed = modeling.create_attention_mask(tf.constant(mask), "word_l2r", words).numpy()
    np.testing.assert_array_equal(bias, (1.0 - allowed) * modeling._MASK_ADDER)  # pylint: disable=protected-access
    np.testing.assert_array_equal(has_key[:, :, 0], allowed[:, 0].max(axis=2))
    keyless += np.sum(has_key == 0)
  assert keyless >= 2  # at least the one-token rows' queries: word_l2r hides their own key


@needs_onnxruntime
@pytest.mark.parametrize("model_type", ["tta", "tta_word"])
def test_onnxruntime_word_l2r_output_is_exactly_blind_to_its_piece_and_later_ones(
  tokenizer, model_type
):
  """Through onnx_backend's word_l2r scoring graph, at every output i of a padded batch of
  sentences with split words: the last layer at i and the log-probabilities it gives fixed
  targets are bit-identical when piece i or a later piece of its word changes, and change when
  an earlier piece of its word or another word changes; rows never mix. A changed piece stays a
  continuation or a word start, so the words stay the same."""
  lm = lm_for(model_type, tokenizer)
  functions = onnx_backend.OnnxFunctions(lm.model, 1, tokenizer.continuation_flags())
  sentences = [SENTENCE, "cats walking , the dog ran", "a dog walked"]
  ids, mask = inference.pad_rows(lm.tokenize(sentences)[0], tokenizer.vocab["[PAD]"], 1)
  words = lm.graph.word_ids(ids).numpy()
  assert any(np.sum(row == w) > 1 for row in words for w in row)  # split words
  read_at = np.flatnonzero(mask)
  targets = np.arange(len(read_at)) % tokenizer.vocab_size  # whatever, the same in every call

  def outputs(x):
    log_probs, hidden = functions.scores("word_l2r", x, mask, read_at, targets)
    out = np.zeros(mask.shape + (hidden.shape[1] + 1,), np.float32)
    out.reshape(-1, out.shape[-1])[read_at] = np.concatenate([hidden, log_probs[:, None]], 1)
    return out  # [B, T, D + 1]: the last layer and log p(target) at every real output

  continuation = tokenizer.continuation_flags()
  base = outputs(ids)
  for row, n in enumerate(mask.sum(axis=1)):
    for j in range(n):
      changed = ids.copy()
      same_kind = np.flatnonzero(continuation == continuation[ids[row, j]])
      changed[row, j] = same_kind[(np.searchsorted(same_kind, ids[row, j]) + 1) % len(same_kind)]
      assert changed[row, j] != ids[row, j]
      out = outputs(changed)
      others = np.arange(len(ids)) != row
      np.testing.assert_array_equal(out[others], base[others])
      for i in range(n):
        if words[row, j] == words[row, i] and j >= i:
          np.testing.assert_array_equal(out[row, i], base[row, i], err_msg=f"{row}, {i}, {j}")
        else:
          assert not np.array_equal(out[row, i], base[row, i]), (row, i, j)

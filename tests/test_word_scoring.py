"""Word-level scoring (`scoring="word_l2r"`): each piece given the other words and the earlier
pieces of its own word (Kauf & Ivanova 2023's PLL-word-l2r).

T-TA does it in one pass with the word_l2r attention mask; its property is checked bit for bit
through the compiled graph of every backend. The biLM's word-l2r masked copies are checked
against copies built and run by hand; the uniLM's scores are its piece scores.
"""

from conftest import SHARP_ATTENTION
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

import backends
import inference
import modeling

SENTENCE = "walking dogs ran far away"


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
  np.testing.assert_array_equal(lm._word_ids(np.array([ids])), [[1, 2, 2, 3, 3, 4, 5, 6, 7]])  # pylint: disable=protected-access


@pytest.mark.parametrize("backend", ["tf", "openvino"])
@pytest.mark.parametrize("model_type", ["tta", "tta_word"])
def test_tta_word_l2r_is_blind_to_the_piece_and_its_later_pieces(tokenizer, model_type, backend):
  """Through the compiled one-pass graph (words found in the graph from the ids): the score of
  piece i is bit-identical when a later piece of its word changes, and changes when another
  word or an earlier piece of its word changes; for T-TA trained with DMSA and for tta_word."""
  lm = lm_for(model_type, tokenizer, backend=backend)
  (ids,), _ = lm.tokenize([SENTENCE])
  vocab = lm.tokenizer.vocab

  def scores(changed):
    return lm._one_pass([changed], "word_l2r")[0]  # pylint: disable=protected-access

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
  word = lm._word_ids(np.array([ids]))[0]  # pylint: disable=protected-access
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


def test_onnxruntime_says_it_has_no_word_l2r_graph(tokenizer):
  if backends.importlib.util.find_spec("onnxruntime") is None:
    pytest.skip("onnxruntime is not installed")
  lm = lm_for("tta", tokenizer, backend="onnxruntime")
  with pytest.raises(ValueError, match="no graph for ScoringGraph.word_l2r_log_probs"):
    lm.score([SENTENCE], scoring="word_l2r")

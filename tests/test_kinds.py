"""The kind table (kinds.py), checked entry by entry against what each trait promises.

Every expectation here is written from the trait's definition (a NumPy mask, a shifted target, a
masked copy run through the model by hand), not from the code under test, so a kind whose entry
and behaviour disagree fails.
"""

import os

from conftest import SHARP_ATTENTION
from conftest import assert_self_unknown
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

import kinds
from lm import inference
import modeling
from pretraining import input_pipeline

ALL_KINDS = list(kinds.KINDS.values())
LENGTHS = (6, 4)  # a padded batch: row 1 has 2 pads


def config_for(kind, **overrides):
  return tiny_config(type_vocab_size=2 if kind.token_types else 0, **overrides)


@pytest.fixture(scope="module")
def models():
  tf.keras.utils.set_random_seed(7)
  return {k.name: modeling.build_model(config_for(k), k.name) for k in ALL_KINDS}


def padded_batch(seed=0):
  """ids, mask int32 [2, 6]: [SOS]=3 ... [EOS]=1 then [PAD]=0."""
  rng = np.random.RandomState(seed)
  width = max(LENGTHS)
  ids = np.zeros((len(LENGTHS), width), np.int32)
  mask = np.zeros_like(ids)
  for row, n in enumerate(LENGTHS):
    ids[row, :n] = [3] + list(rng.randint(10, 99, size=n - 2)) + [1]
    mask[row, :n] = 1
  return ids, mask


# Words of the padded batch's rows: row 0 = [SOS] w1 w2 ##a ##b [EOS], row 1 = [SOS] w1 ##a [EOS].
CONTINUATION = np.array([[0, 0, 0, 1, 1, 0], [0, 0, 1, 0, 0, 0]], np.int32)


def batch_words():
  """int32 [2, 6]: the word of each token of `padded_batch` under CONTINUATION, counted by hand."""
  return np.array([[1, 2, 3, 3, 3, 4], [1, 2, 2, 3, 4, 5]], np.int32)


def expected_mask(pattern, mask):
  """[B, 1, T, T] from the pattern's definition (kinds.ATTENTION_PATTERNS), the words of
  `batch_words` for a word pattern."""
  t = mask.shape[1]
  query, key = np.arange(t)[:, None], np.arange(t)[None, :]
  words = batch_words()
  same_word = words[:, :, None] == words[:, None, :]  # [B, F, T]
  allowed = {
    "dmsa": (query != key)[None],
    "bidirectional": np.ones((1, t, t), bool),
    "causal": (key <= query)[None],
    "word_l2r": ~(same_word & (key >= query)[None]),
  }[pattern]
  return (mask[:, None, None, :].astype(bool) & allowed[:, None]).astype(np.float32)


def model_inputs(kind, ids, mask):
  """The model's input dict for `kind`: with the words of `batch_words` for a word pattern."""
  inputs = {"input_ids": ids, "input_mask": mask}
  if kind.attention in modeling.WORD_PATTERNS:
    inputs["word_ids"] = batch_words()
  return inputs


def test_table_names_match_keys_and_lists_derive_from_it():
  assert all(name == kind.name for name, kind in kinds.KINDS.items())
  assert kinds.MODEL_TYPES == tuple(kinds.KINDS)
  assert set(kinds.PRETRAINABLE) == {k.name for k in ALL_KINDS if k.pretrainable}
  with pytest.raises(ValueError, match="not one of"):
    kinds.get("roberta")
  with pytest.raises(ValueError, match="attention must be one of"):
    kinds.Kind("x", "X", "sideways", False, "one_pass", 0, "self", True, True)


def test_design_doc_table_has_a_row_per_kind_with_its_traits():
  """docs/DESIGN.md §2.4's table: one row per entry of KINDS, in its order, with its traits."""
  path = os.path.join(os.path.dirname(__file__), "..", "docs", "DESIGN.md")
  with open(path, encoding="utf-8") as f:
    section = f.read().split("### 2.4 ")[1].split("\n### ")[0]
  rows = [
    [cell.strip() for cell in line.strip("|").split("|")]
    for line in section.splitlines()
    if line.startswith("| `")
  ]
  got = [
    (
      name.split()[0].strip("`"),
      name.split()[1].strip("()"),
      attention.strip("`"),
      isolation == "yes",
      scoring.strip("`"),
      target.split()[0].strip("`"),
      pretrainable.startswith("yes"),
    )
    for name, attention, isolation, scoring, _, target, _, pretrainable in rows
  ]
  want = [
    (k.name, k.display_name, k.attention, k.input_isolation, k.scoring, k.target, k.pretrainable)
    for k in ALL_KINDS
  ]
  assert got == want


def test_only_a_self_hiding_pattern_makes_an_isolated_kind_score_with_the_scoring_mask():
  """An isolated causal kind sees its own token: scored with DMSA it would read the token it
  predicts (offset 1), so it keeps its own mask in every scoring mode."""
  causal = kinds.Kind("x", "X", "causal", True, "one_pass", 1, "next", False, True)
  assert not causal.self_unknown
  assert [causal.one_pass_attention(s) for s in kinds.SCORINGS] == ["causal", "causal"]
  tta = kinds.get("tta_word")
  assert tta.self_unknown
  assert [tta.one_pass_attention(s) for s in kinds.SCORINGS] == ["dmsa", "word_l2r"]


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.name)
def test_attention_mask_follows_the_pattern(kind):
  _, mask = padded_batch()
  words = tf.constant(batch_words()) if kind.attention in modeling.WORD_PATTERNS else None
  got = modeling.create_attention_mask(tf.constant(mask), kind.attention, words).numpy()
  want = expected_mask(kind.attention, mask)
  # A pattern without position rules may leave the query axis to broadcasting.
  np.testing.assert_array_equal(np.broadcast_to(got, want.shape), want)


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.name)
def test_training_targets_follow_the_target_trait(kind):
  ids, mask = padded_batch()
  special = [0, 1, 2, 3, 4, 5, 6]
  # The continuation pieces of the vocab: those CONTINUATION marks in the batch.
  continuation = np.zeros(99, bool)
  continuation[ids[CONTINUATION > 0]] = True
  ids[(CONTINUATION == 0) & np.isin(ids, np.flatnonzero(continuation))] = 7  # 7 is never drawn
  out = input_pipeline.make_targets(
    {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask)},
    kind.name,
    tf.constant([1, 2]),
    99,
    4,
    special,
    mlm_probability=0.5,
    continuation=continuation,
  )
  out = {k: v.numpy() for k, v in out.items()}
  if kind.attention in modeling.WORD_PATTERNS:
    np.testing.assert_array_equal(out.pop("word_ids"), batch_words())
  assert sorted(out) == ["input_ids", "input_mask", "target_ids", "target_weights"]
  if kind.target == "self":
    np.testing.assert_array_equal(out["input_ids"], ids)
    np.testing.assert_array_equal(out["target_ids"], ids)
    np.testing.assert_array_equal(out["target_weights"], mask)
  elif kind.target == "next":
    np.testing.assert_array_equal(out["input_ids"], ids)
    np.testing.assert_array_equal(out["target_ids"][:, :-1], ids[:, 1:])
    np.testing.assert_array_equal(out["target_weights"][:, :-1], mask[:, 1:])
    assert not out["target_weights"][:, -1].any()
  else:  # mlm: only chosen word pieces are targets, and only there may the input change
    chosen = out["target_weights"] > 0
    assert chosen.any()
    assert not (chosen & ~np.isin(ids, special, invert=True)).any()
    np.testing.assert_array_equal(out["input_ids"][~chosen], ids[~chosen])
    np.testing.assert_array_equal(out["target_ids"][chosen], ids[chosen])


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k.self_unknown], ids=lambda k: k.name)
def test_self_unknown_kinds_are_exactly_self_unknown(kind):
  tf.keras.utils.set_random_seed(3)
  model = modeling.build_model(config_for(kind, **SHARP_ATTENTION), kind.name)
  ids, mask = padded_batch()

  def run(x, m):
    return {"sequence_output": model(model_inputs(kind, x, m))["sequence_output"].numpy()}

  assert_self_unknown(run, ids, mask, tokens=np.arange(10, 99))


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.name)
@pytest.mark.slow(seconds=6)
def test_scoring_rule_reads_what_the_trait_says(kind, tokenizer):
  """NeuralLM.score against the model run by hand: one pass read at t - offset, or one masked
  copy per scored position read at the mask."""
  model = modeling.build_model(config_for(kind, vocab_size=tokenizer.vocab_size), kind.name)
  lm = inference.NeuralLM(model, tokenizer, score_sos=True)
  sentence = "the cat sat on the mat"
  (ids,), _ = lm.tokenize([sentence])
  ids = np.array([ids], np.int32)
  mask = np.ones_like(ids)
  positions = kinds.scored_positions(kind.name, ids.shape[1], score_sos=True)
  assert positions[0] == (0 if kind.scores_sos else 1)
  # The kind's default scoring is its training mask (tta_word: word_l2r), given its words.
  inputs = {"input_ids": ids, "input_mask": mask}
  if kind.attention in modeling.WORD_PATTERNS:
    inputs["word_ids"] = np.cumsum(~tokenizer.continuation_flags()[ids], axis=1).astype(np.int32)
  expected = []
  for p in positions:
    if kind.masked_copies:
      copy = ids.copy()
      copy[0, p] = lm.mask_id
      log_probs = model({"input_ids": copy, "input_mask": mask})["log_probs"].numpy()
      expected.append(log_probs[0, p, ids[0, p]])
    else:
      log_probs = model(inputs)["log_probs"].numpy()
      expected.append(log_probs[0, p - kind.prediction_offset, ids[0, p]])
  got = lm.score([sentence])[0].token_logprobs
  np.testing.assert_allclose(got, expected, atol=1e-5)


def test_word_ids_count_words_and_keep_pieces_together():
  np.testing.assert_array_equal(
    modeling.word_ids(tf.constant(CONTINUATION)).numpy(),
    [[1, 2, 3, 3, 3, 4], [1, 2, 2, 3, 4, 5]],
  )


def test_word_l2r_mask_hides_the_piece_and_the_later_pieces_of_its_word():
  _, mask = padded_batch()
  words = modeling.word_ids(tf.constant(CONTINUATION))
  got = modeling.create_attention_mask(tf.constant(mask), "word_l2r", words).numpy()[:, 0]
  # Row 0, query 3 (the first "##a" of word 3 = positions 2..4): sees 0, 1, 2 and 5, not 3, 4.
  np.testing.assert_array_equal(got[0, 3], [1, 1, 1, 0, 0, 1])
  # Query 2 (the word's first piece) sees no piece of its word; query 4 (its last) sees 2, 3.
  np.testing.assert_array_equal(got[0, 2], [1, 1, 0, 0, 0, 1])
  np.testing.assert_array_equal(got[0, 4], [1, 1, 1, 1, 0, 1])
  # A one-piece word is DMSA; padded keys stay hidden.
  np.testing.assert_array_equal(got[1, 0], [0, 1, 1, 1, 0, 0])
  with pytest.raises(ValueError, match="needs the word ids"):
    modeling.create_attention_mask(tf.constant(mask), "word_l2r")


def test_tta_scored_with_the_word_mask_is_exactly_blind_to_its_piece_and_later_ones(models):
  """Output i is bit-identical when token i or a later piece of its word changes, and changes
  when an earlier piece of its word or another word changes (input isolation makes it exact)."""
  model = models["tta"]
  ids, mask = padded_batch()
  words = modeling.word_ids(tf.constant(CONTINUATION)).numpy()

  def output(x):
    inputs = {"input_ids": x, "input_mask": mask, "word_ids": words}
    return model.encode(inputs, attention="word_l2r")[0].numpy()

  base = output(ids)
  for row, n in enumerate(LENGTHS):
    for i in range(n):
      for j in range(n):
        changed = ids.copy()
        changed[row, j] = 10 + (changed[row, j] - 9) % 89
        out = output(changed)[row, i]
        if words[row, j] == words[row, i] and j >= i:
          np.testing.assert_array_equal(out, base[row, i])
        else:
          assert not np.array_equal(out, base[row, i]), (row, i, j)

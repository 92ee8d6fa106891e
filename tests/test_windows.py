"""Tests of sliding windows over long sentences (lm/windows.py and inference.NeuralLM's
long_inputs="window"), against brute force: each window run through the raw model."""

from unittest import mock

from conftest import SHARP_ATTENTION
from conftest import WORDS
from conftest import assert_self_unknown
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

from evaluation import score_cache
from lm import inference
from lm import windows
import modeling

# max_position_embeddings 16: a window holds 14 pieces, so 24 words take 3 windows.
LONG = " ".join(WORDS[i % 7] for i in range(24))
SHORT = ["the cat sat on the mat .", "a dog ran", ""]


def lm_for(model_type, tokenizer, config_overrides=None, **kwargs):
  tf.keras.utils.set_random_seed(7)
  config = tiny_config(vocab_size=tokenizer.vocab_size, **(config_overrides or {}))
  return inference.NeuralLM(modeling.build_model(config, model_type), tokenizer, **kwargs)


def brute_assignment(num_pieces, capacity, stride, context):
  """The window of each piece by the rule's words: among the windows holding it, the one with
  the most pieces on its nearer side ("both") or its left ("left"), the earlier on a tie."""
  first = windows.starts(num_pieces, capacity, stride)
  out = []
  for i in range(num_pieces):
    best = None
    for k, a in enumerate(first):
      if a <= i < a + capacity:
        room = i - a if context == "left" else min(i - a, a + capacity - 1 - i)
        if best is None or room > best[0]:
          best = (room, k)
    out.append(best[1])
  return out


@pytest.mark.parametrize("context", windows.CONTEXTS)
@pytest.mark.parametrize(
  "num_pieces, capacity, stride",
  [
    (14, 14, 7),  # length = window: one window
    (15, 14, 7),  # window + 1: two, the second moved back to end at the last piece
    (15, 14, 1),
    (40, 14, 1),
    (40, 14, 14),  # stride = window: side by side, the last moved back
    (42, 14, 14),  # side by side exactly
    (1000, 126, 63),
    (1, 1, 1),
    (5, 1, 1),
    (23, 6, 4),
  ],
)
def test_each_piece_goes_to_its_best_window_once(num_pieces, capacity, stride, context):
  first = windows.starts(num_pieces, capacity, stride)
  owner = windows.assign(num_pieces, capacity, stride, context)
  assert owner.tolist() == brute_assignment(num_pieces, capacity, stride, context)
  # Every window is full, starts from the sentence's start and ends at its end, without gaps.
  assert first[0] == 0 and first[-1] + capacity == max(num_pieces, capacity)
  assert all(0 < b - a <= stride for a, b in zip(first, first[1:]))
  # The pieces of one window come before those of the next (NeuralLM concatenates windows).
  assert np.all(np.diff(owner) >= 0)


def test_window_counts_at_the_edges():
  assert windows.starts(14, 14, 7) == [0]
  assert windows.starts(15, 14, 7) == [0, 1]
  assert windows.starts(15, 14, 14) == [0, 1]
  assert windows.starts(16, 14, 1) == [0, 1, 2]
  assert windows.starts(42, 14, 14) == [0, 14, 28]
  assert windows.starts(30, 14, 7) == [0, 7, 14, 16]
  # A bidirectional piece goes to the window whose centre is nearest: window 0 holds 0..13
  # (centre 6.5), window 1 holds 7..20 (centre 13.5): piece 10 is 3.5 from each, the tie goes
  # to the earlier window; piece 11 goes to window 1.
  both = windows.assign(30, 14, 7, "both")
  assert both[10] == 0 and both[11] == 1
  # A left-to-right piece stays in the first window that holds it.
  assert windows.assign(30, 14, 7, "left").tolist() == [0] * 14 + [1] * 7 + [2] * 7 + [3] * 2


def test_split_frames_each_window_and_covers_each_position_once():
  ids = [1] + list(range(100, 130)) + [2]  # [BOS] 30 pieces [EOS]
  positions = list(range(1, 32))  # the pieces and [EOS]
  parts = windows.split(ids, positions, 16, 7)
  assert [offset for _, _, offset in parts] == [0, 7, 14, 16]
  for window, mine, offset in parts:
    assert len(window) == 16 and window[0] == 1 and window[-1] == 2
    assert window[1:-1] == ids[offset + 1 : offset + 15]
    assert all(window[p] == ids[p + offset] for p in mine if 0 < p < 15)
  assert [p + offset for _, mine, offset in parts for p in mine] == positions
  # [EOS] is scored at the end of the last window, the sentence's own end.
  assert parts[-1][1][-1] == 15


@pytest.mark.parametrize(
  "window, stride, flag",
  [(17, None, "--window=17"), (2, None, "--window=2"), (16, 0, "--stride=0"), (16, 15, "--stride")],
)
def test_window_settings_that_cannot_cut_a_sentence_are_refused(tokenizer, window, stride, flag):
  with pytest.raises(ValueError, match=flag):
    lm_for("tta", tokenizer, long_inputs="window", window=window, stride=stride)


@pytest.mark.parametrize("model_type", ["tta", "bilm", "unilm"])
def test_sentences_that_fit_score_exactly_as_truncating(tokenizer, model_type):
  truncating = lm_for(model_type, tokenizer)
  windowed = lm_for(model_type, tokenizer, long_inputs="window")
  for want, got in zip(truncating.score(SHORT), windowed.score(SHORT)):
    np.testing.assert_array_equal(got.token_logprobs, want.token_logprobs)
    assert got.windows == 1 and not got.truncated
  for pooling in inference.POOLINGS:
    np.testing.assert_array_equal(
      windowed.sentence_vectors(SHORT, pooling), truncating.sentence_vectors(SHORT, pooling)
    )
  assert windowed.stats["windowed"] == 0
  # The identity of a truncating LM is the one caches were keyed on before windows existed.
  assert "window" not in inference.describe(truncating)
  assert inference.describe(windowed)["window"] == 16


def window_forward(lm, window):
  out = lm.model(
    {
      "input_ids": tf.constant([window], tf.int32),
      "input_mask": tf.ones([1, len(window)], tf.int32),
    }
  )
  return {k: v.numpy()[0] for k, v in out.items()}


@pytest.mark.parametrize("model_type", ["tta", "bilm", "unilm"])
def test_a_long_sentence_scores_each_piece_once_in_its_window(tokenizer, model_type):
  lm = lm_for(model_type, tokenizer, long_inputs="window", score_sos=True)
  (scored,) = lm.score([LONG])
  ids = [lm.bos_id] + lm.tokenizer.convert_tokens_to_ids(lm.tokenizer.tokenize(LONG)) + [lm.eos_id]
  positions = lm._scored_positions(len(ids))  # pylint: disable=protected-access
  # Every scored token once, in the sentence's order; no window's own boundary token.
  assert scored.tokens == lm.tokenizer.convert_ids_to_tokens([ids[p] for p in positions])
  assert scored.windows == len(windows.starts(24, 14, 7)) == 3 and not scored.truncated
  assert lm.stats["windowed"] == 1
  kind = lm.kind
  want = []
  for window, mine, _ in windows.split(ids, positions, 16, 7, kind.window_context):
    for p in mine:
      if kind.masked_copies:
        masked = list(window)
        masked[p] = lm.mask_id
        want.append(window_forward(lm, masked)["log_probs"][p, window[p]])
      else:
        want.append(window_forward(lm, window)["log_probs"][p - kind.prediction_offset, window[p]])
  np.testing.assert_allclose(scored.token_logprobs, want, atol=1e-5)


@pytest.mark.parametrize("model_type", ["tta", "bilm"])
def test_a_long_sentence_vector_averages_each_piece_from_its_window(tokenizer, model_type):
  lm = lm_for(model_type, tokenizer, long_inputs="window")
  ids = [lm.bos_id] + lm.tokenizer.convert_tokens_to_ids(lm.tokenizer.tokenize(LONG)) + [lm.eos_id]
  parts = windows.split(ids, list(range(1, len(ids) - 1)), 16, 7)
  context, embed = [], []
  for window, mine, _ in parts:
    intact = window_forward(lm, window)
    embed.extend(intact["embedding_output"][mine])
    for p in mine:
      if lm.kind.masked_copies:
        masked = list(window)
        masked[p] = lm.mask_id
        context.append(window_forward(lm, masked)["sequence_output"][p])
      else:
        context.append(intact["sequence_output"][p])
  assert len(context) == len(ids) - 2
  np.testing.assert_allclose(lm.sentence_vectors([LONG])[0], np.mean(context, 0), atol=1e-5)
  np.testing.assert_allclose(lm.sentence_vectors([LONG], "embed")[0], np.mean(embed, 0), atol=1e-5)
  first, last = window_forward(lm, parts[0][0]), window_forward(lm, parts[-1][0])
  np.testing.assert_allclose(
    lm.sentence_vectors([LONG], "first")[0], first["sequence_output"][0], atol=1e-5
  )
  np.testing.assert_allclose(
    lm.sentence_vectors([LONG], "last")[0], last["sequence_output"][-1], atol=1e-5
  )
  # first_last: each piece's average of the first and last blocks, from its window, intact.
  first_last = []
  for window, mine, _ in parts:
    inputs = {"input_ids": tf.constant([window]), "input_mask": tf.ones([1, len(window)], tf.int32)}
    sequence, _, first_block = lm.model.encode(inputs, first_layer=True)
    first_last.extend(((sequence[0].numpy() + first_block[0].numpy()) / 2)[mine])
  np.testing.assert_allclose(
    lm.sentence_vectors([LONG], "first_last")[0], np.mean(first_last, 0), atol=1e-5
  )


def test_windowed_tta_is_exactly_self_unknown_for_every_piece(tokenizer):
  """As test_inference's test of the graph functions, through NeuralLM's windowed scoring of
  long sentences: the encoder sees the sentences with token i changed while the scored targets
  stay the original ones, and the score of token i (in the window that scores it) is bit for
  bit the same; every other window and sentence is unchanged."""
  lm = lm_for("tta", tokenizer, SHARP_ATTENTION, long_inputs="window", score_sos=True, stride=3)
  tokens = np.arange(7, tokenizer.vocab_size)
  rng = np.random.default_rng(5)
  lengths = [35, 29, 17]  # 33, 27, 15 pieces: 8, 6 and 2 windows
  ids = np.zeros((len(lengths), max(lengths)), np.int32)
  mask = (np.arange(max(lengths))[None] < np.array(lengths)[:, None]).astype(np.int32)
  for row, n in enumerate(lengths):
    ids[row, :n] = [lm.bos_id, *rng.choice(tokens, n - 2), lm.eos_id]
  scores = lm._one_pass_function("piece")  # pylint: disable=protected-access
  token_log_probs = lm.graph.token_log_probs

  def run(changed, mask):
    # The windows are built the same for both batches (they depend on the lengths only): the
    # targets are the original windows, fed in the order the scoring calls the graph.
    id_lists = [list(row[:n]) for row, n in zip(ids, lengths)]
    seen_lists = [list(row[:n]) for row, n in zip(changed, lengths)]
    targets = []
    with mock.patch.object(lm, "_one_pass_function", lambda _: record(targets)):
      lm._log_probs(id_lists, positions(id_lists), "piece")  # pylint: disable=protected-access
    with mock.patch.object(lm, "_one_pass_function", lambda _: replay(targets)):
      out = lm._log_probs(seen_lists, positions(seen_lists), "piece")  # pylint: disable=protected-access
    full = np.zeros(ids.shape, np.float32)
    for row, values in enumerate(out):
      full[row, positions(id_lists)[row]] = values
    return {"token_log_probs": full}

  def positions(id_lists):
    return [lm._scored_positions(len(x)) for x in id_lists]  # pylint: disable=protected-access

  def record(targets):
    def call(input_ids, input_mask, score_mask):
      targets.append(input_ids)
      return scores(input_ids, input_mask, score_mask)

    return call

  def replay(targets):
    encode = lm.graph.encode

    def call(seen, input_mask, score_mask):
      scored = targets.pop(0)
      with mock.patch.object(
        lm.graph, "encode", lambda _, m, attention=None: encode(seen, m, attention)
      ):
        return token_log_probs(scored, input_mask, score_mask)

    return call

  assert [lm.num_windows(n) for n in lengths] == [8, 6, 2]
  assert_self_unknown(run, ids, mask, tokens)


def test_a_1000_piece_sentence_builds_masked_copies_within_the_window(tokenizer):
  """The biLM's masked copies are built per window: a 1,000-piece sentence runs batches of at
  most max(token budget, one window's copies) tokens, each copy one window wide, and one copy
  per scored token in all (not 1,001 copies of 1,002 tokens)."""
  lm = lm_for("bilm", tokenizer, long_inputs="window", token_budget=256)
  sentence = " ".join(WORDS[i % 7] for i in range(1000))
  shapes = []
  run = lm._masked_copy_scores  # pylint: disable=protected-access

  def spy(copies, copy_mask, positions, targets):
    shapes.append(copies.shape)
    return run(copies, copy_mask, positions, targets)

  with mock.patch.object(lm, "_masked_copy_scores", spy):
    (scored,) = lm.score([sentence])
  assert scored.num_tokens == 1001 and scored.windows == len(windows.starts(1000, 14, 7))
  assert all(width == 16 for _, width in shapes)
  assert max(rows * width for rows, width in shapes) <= max(256, 14 * 16)
  assert sum(rows for rows, _ in shapes) == 1001
  assert np.all(np.isfinite(scored.token_logprobs))


def test_a_cache_of_truncated_scores_serves_truncation_only(tokenizer, tmp_path):
  """A cache written before windows (payloads [total, tokens, truncated]) is keyed on the
  truncating identity: it still serves --long_inputs=truncate, read as one window each, and a
  windowing LM, under another key, scores its sentences anew."""
  truncating = lm_for("tta", tokenizer)
  windowed = lm_for("tta", tokenizer, long_inputs="window")
  old_id = inference.model_id(inference.describe(truncating))
  new_id = inference.model_id(inference.describe(windowed))
  assert old_id != new_id
  cache = score_cache.ScoreCache(str(tmp_path / "lm_scores.jsonl"))
  cache.put_many(old_id, {LONG: [-1.0, 15, True]})
  served = score_cache.cached_scores(truncating, old_id, [LONG], cache, "tta")
  assert served == {LONG: [-1.0, 15, True]} and score_cache.windows_of(served[LONG]) == 1
  (scored,) = windowed.score([LONG])
  fresh = score_cache.cached_scores(windowed, new_id, [LONG], cache, "tta")
  assert fresh == {LONG: [scored.total, 25, False, 3]}
  assert score_cache.windows_of(fresh[LONG]) == 3


def test_long_sentences_are_warned_of_once_and_counted_once_over_every_chunk(tokenizer, caplog):
  # Issue 57: chunks of 500 logged "31 of 500 sentences are longer ..." per chunk where 1,194 were
  # scored. Here 3 chunks of 2, 3 long sentences in all.
  lm = lm_for("tta", tokenizer, long_inputs="window")
  texts = [f"{LONG} {i}" for i in range(3)] + [f"a dog ran {i}" for i in range(3)]
  with caplog.at_level("WARNING"):
    score_cache.cached_scores(lm, "id", texts, None, "tta", chunk_size=2)
  warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert warnings == [
    "sentences longer than 16 tokens are read in windows (each piece once, in the window where "
    "it has the most context; each flagged in the results)",
    "tta: 3 of the 6 sentences scored are longer than the LM takes (truncated or read in "
    "windows, as flagged in the results)",
  ]

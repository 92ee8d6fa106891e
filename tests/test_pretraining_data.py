# coding=utf-8
"""Tests for create_pretraining_data.py and input_pipeline.py."""

import collections
import glob
import os

import numpy as np
import pytest
import tensorflow as tf

import create_pretraining_data as cpd
import input_pipeline
import tokenization

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Same data root rule as corpus.py: $TTA_DATA, else ../shared/data.
_DATA = os.environ.get("TTA_DATA") or os.path.join(_REPO, "..", "shared",
                                                   "data")
GUTENBERG_TAR = os.path.join(_DATA, "gutenberg-books-subset", "texts.tar.xz")

# Synthetic vocabulary: the authors' special tokens at 0..6, words 7..V-1.
PAD, EOS, UNK, SOS, MASK, CLS, SEP = range(7)
SPECIAL_IDS = list(range(7))
VOCAB_SIZE = 1000


# ----------------------------------------------------------------------------
# create_pretraining_data on a real Gutenberg excerpt
# ----------------------------------------------------------------------------

_GUTENBERG_ARGS = dict(
    vocab_size=1000, max_seq_length=32, num_shards=3, max_books=1,
    # A 2.7k-sentence book: a short binary search keeps the learner at ~2 s.
    vocab_learn_params={"num_iterations": 2, "upper_thresh": 64,
                        "lower_thresh": 2})


@pytest.fixture(scope="module")
def gutenberg(tmp_path_factory):
  """Records from the first Gutenberg book, through corpus.py (child)."""
  if not os.path.exists(GUTENBERG_TAR):
    pytest.skip("no Gutenberg archive at %s" % GUTENBERG_TAR)
  out = str(tmp_path_factory.mktemp("gutenberg_records"))
  stats = cpd.create_pretraining_data(GUTENBERG_TAR, out, **_GUTENBERG_ARGS)
  sentences = [s for _, s in cpd.read_sentence_file(
      os.path.join(out, cpd.CORPUS_SUBDIR, "train.txt"))]
  tokenizer = tokenization.FullTokenizer(os.path.join(out, "vocab.txt"),
                                         do_lower_case=True)
  return out, stats, sentences, tokenizer


def _read_all(pattern):
  return [{k: v.numpy() for k, v in r.items()}
          for r in input_pipeline.read_sentences_dataset(pattern)]


def test_gutenberg_records_match_tokenizer(gutenberg):
  out, stats, sentences, tokenizer = gutenberg
  max_len = _GUTENBERG_ARGS["max_seq_length"]
  assert len(sentences) > 1000
  assert stats["vocab_size"] == len(tokenizer.vocab) <= 1000
  assert list(tokenizer.vocab)[:7] == list(tokenization.SPECIAL_TOKENS)

  records = _read_all(os.path.join(out, "train-*"))
  assert len(records) == len(sentences) == stats["train"]["sentences"]
  assert sorted(os.path.basename(p) for p in glob.glob(
      os.path.join(out, "train-*"))) == [
          "train-0000%d-of-00003.tfrecord" % i for i in range(3)]
  for r in records:
    ids = r["input_ids"]
    assert ids[0] == tokenizer.sos_id and ids[-1] == tokenizer.eos_id
    assert 3 <= len(ids) <= max_len
    assert ids.max() < len(tokenizer.vocab)
    assert r["length"] == len(ids) and (r["input_mask"] == 1).all()
  assert stats["train"]["tokens"] == sum(len(r["input_ids"]) for r in records)

  # The records are exactly the tokenizer's encodings (shuffled); decoding
  # a record's ids gives the sentence's first max_len-2 pieces.
  pieces = tokenizer.tokenize_batch(sentences)
  expected = collections.defaultdict(list)  # ids -> pieces kept
  for sentence_pieces in pieces:
    kept = sentence_pieces[:max_len - 2]
    ids = ([tokenizer.sos_id] + tokenizer.convert_tokens_to_ids(kept) +
           [tokenizer.eos_id])
    expected[tuple(ids)].append(kept)
  got = collections.Counter(tuple(r["input_ids"].tolist()) for r in records)
  assert got == collections.Counter(
      {k: len(v) for k, v in expected.items()})
  for ids in got:
    assert tokenizer.convert_ids_to_tokens(ids[1:-1]) == expected[ids][0]
  # Shuffled: not in corpus order.
  assert list(got)[:50] != list(expected)[:50]

  # Truncation is counted.
  n_pieces = [len(p) for p in pieces]
  truncated = sum(1 for n in n_pieces if n + 2 > max_len)
  assert truncated > 0
  assert stats["train"]["truncated"] == truncated
  assert stats["train"]["lengths"]["max"] == max_len
  assert stats["train"]["untruncated_lengths"]["max"] == max(n_pieces) + 2
  assert 0 <= stats["train"]["unk_rate"] < 0.01
  assert stats["train"]["malformed_lines"] == 0


def test_gutenberg_rerun_skips_and_rebuild_removes_stale_shards(
    gutenberg, tmp_path):
  out, stats, _, _ = gutenberg
  shards = sorted(glob.glob(os.path.join(out, "train-*")))
  mtimes = [os.stat(p).st_mtime_ns for p in shards]
  again = cpd.create_pretraining_data(GUTENBERG_TAR, out, **_GUTENBERG_ARGS)
  assert again["reused"] is True
  assert again["fingerprint"] == stats["fingerprint"]
  assert [os.stat(p).st_mtime_ns for p in shards] == mtimes

  # Other arguments: rebuilt; shards of the old layout are removed so a
  # train-* glob does not mix the two.
  vocab = str(tmp_path / "vocab.txt")
  tf.io.gfile.copy(os.path.join(out, "vocab.txt"), vocab)
  args = dict(_GUTENBERG_ARGS, num_shards=2, vocab_file=vocab,
              vocab_size=None, vocab_learn_params=None)
  rebuilt = cpd.create_pretraining_data(GUTENBERG_TAR, out, **args)
  assert "reused" not in rebuilt
  assert sorted(os.path.basename(p) for p in glob.glob(
      os.path.join(out, "train-*"))) == [
          "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
  assert rebuilt["train"]["sentences"] == stats["train"]["sentences"]
  assert not glob.glob(os.path.join(out, "*.tmp-*"))


def _write_lines(path, lines):
  with open(path, "wb") as f:
    f.write(b"".join(lines))
  return str(path)


def test_malformed_line_raises_with_location_or_is_skipped(gutenberg,
                                                           tmp_path):
  out, _, _, _ = gutenberg
  vocab = os.path.join(out, "vocab.txt")
  bad = _write_lines(tmp_path / "bad.txt", [
      b"A good first sentence.\n", b"   \n", b"Caf\xe9 in Latin-1.\n",
      b"Another good one.\n"])
  with pytest.raises(ValueError, match=r"bad\.txt:3: not valid UTF-8"):
    cpd.create_pretraining_data(bad, str(tmp_path / "strict"),
                                vocab_file=vocab, eval_fraction=0.0)
  stats = cpd.create_pretraining_data(bad, str(tmp_path / "lenient"),
                                      vocab_file=vocab, eval_fraction=0.0,
                                      skip_malformed=True)
  assert stats["train"]["sentences"] == 2
  assert stats["train"]["malformed_lines"] == 1
  assert stats["train"]["malformed_examples"] == [bad + ":3"]
  assert stats["train"]["empty_lines"] == 1
  assert stats["train"]["lines"] == 4


def test_sentence_files_held_out_by_hash_or_eval_file(gutenberg, tmp_path):
  out, _, sentences, _ = gutenberg
  vocab = os.path.join(out, "vocab.txt")
  text = [(s + "\n").encode("utf-8") for s in sentences[:400]]
  train = _write_lines(tmp_path / "train.txt", text)
  stats = cpd.create_pretraining_data(train, str(tmp_path / "a"),
                                      vocab_file=vocab, eval_fraction=0.25,
                                      num_shards=2, num_eval_shards=2)
  n_train, n_eval = stats["train"]["sentences"], stats["eval"]["sentences"]
  assert n_train + n_eval == 400 and 60 < n_eval < 140
  assert len(glob.glob(str(tmp_path / "a" / "eval-*-of-00002.tfrecord"))) == 2
  train_ids = {tuple(r["input_ids"].tolist())
               for r in _read_all(str(tmp_path / "a" / "train-*"))}
  eval_ids = {tuple(r["input_ids"].tolist())
              for r in _read_all(str(tmp_path / "a" / "eval-*"))}
  assert not train_ids & eval_ids

  evalf = _write_lines(tmp_path / "eval.txt", text[:10])
  stats = cpd.create_pretraining_data(train, str(tmp_path / "b"),
                                      vocab_file=vocab, eval_files=evalf)
  assert stats["train"]["sentences"] == 400
  assert stats["eval"]["sentences"] == 10

  with pytest.raises(ValueError, match="normalization"):
    cpd.create_pretraining_data(train, str(tmp_path / "c"), vocab_file=vocab,
                                normalization="librispeech")
  with pytest.raises(ValueError, match="matches no file"):
    cpd.create_pretraining_data(str(tmp_path / "nothing*.txt"),
                                str(tmp_path / "d"), vocab_file=vocab)


# ----------------------------------------------------------------------------
# input_pipeline on synthetic records
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
  """1500 sentences of 5..60 tokens with distinct random words, 3 files."""
  rng = np.random.default_rng(0)
  out = tmp_path_factory.mktemp("synthetic_records")
  sentences = []
  for _ in range(1500):
    n = int(rng.integers(5, 61))
    words = rng.integers(len(SPECIAL_IDS), VOCAB_SIZE, n - 2).tolist()
    sentences.append([SOS] + words + [EOS])
  for i in range(3):
    cpd.write_records(str(out / ("train-%05d-of-00003.tfrecord" % i)),
                      [cpd.make_example(s) for s in sentences[i::3]])
  return str(out / "train-*"), sentences


def _dataset(pattern, model_type, is_training, batch_size=32,
             max_seq_length=64, **kwargs):
  return input_pipeline.make_dataset(
      pattern, batch_size, model_type, max_seq_length, is_training,
      VOCAB_SIZE, MASK, SPECIAL_IDS, **kwargs)


def _batches(ds, n=None):
  ds = ds.take(n) if n is not None else ds
  return [{k: v.numpy() for k, v in b.items()} for b in ds]


def test_bilm_masking_statistics(synthetic):
  pattern, _ = synthetic
  plain = _batches(_dataset(pattern, "tta", False))
  masked = _batches(_dataset(pattern, "bilm", False, seed=7))
  assert len(plain) == len(masked)
  original = np.concatenate([b["input_ids"].ravel() for b in plain])
  inputs = np.concatenate([b["input_ids"].ravel() for b in masked])
  targets = np.concatenate([b["target_ids"].ravel() for b in masked])
  weights = np.concatenate([b["target_weights"].ravel() for b in masked])
  real = np.concatenate([b["input_mask"].ravel() for b in masked]) == 1
  chosen = weights > 0
  special = np.isin(original, SPECIAL_IDS)
  candidates = real & ~special
  assert candidates.sum() > 20000

  np.testing.assert_array_equal(targets, original)
  assert not (chosen & ~candidates).any()  # Never [PAD], [SOS], [EOS].
  assert set(np.unique(weights)) == {0.0, 1.0}
  assert abs(chosen.sum() / candidates.sum() - 0.15) < 0.015
  np.testing.assert_array_equal(inputs[~chosen], original[~chosen])
  to_mask = chosen & (inputs == MASK)
  unchanged = chosen & (inputs == original)
  replaced = chosen & ~to_mask & ~unchanged
  n = chosen.sum()
  assert abs(to_mask.sum() / n - 0.8) < 0.03
  assert abs(unchanged.sum() / n - 0.1) < 0.03
  assert abs(replaced.sum() / n - 0.1) < 0.03
  assert not np.isin(inputs[replaced], SPECIAL_IDS).any()
  assert (inputs < VOCAB_SIZE).all()
  # At least one prediction per sentence.
  for b in masked:
    assert (b["target_weights"].sum(axis=1) >= 1).all()


def test_bilm_masks_change_between_epochs(synthetic):
  pattern, sentences = synthetic
  # 1500 sentences / 32 per batch: 120 batches cover more than two epochs.
  seen = collections.defaultdict(list)
  for b in _batches(_dataset(pattern, "bilm", True, seed=11), 120):
    for ids, mask, w in zip(b["target_ids"], b["input_mask"],
                            b["target_weights"]):
      key = tuple(ids[mask == 1].tolist())
      seen[key].append(tuple(np.flatnonzero(w).tolist()))
  repeated = [masks for masks in seen.values() if len(masks) >= 2]
  assert len(repeated) > 500
  differ = sum(1 for masks in repeated if len(set(masks)) > 1)
  assert differ / len(repeated) > 0.8
  assert set(seen) <= {tuple(s) for s in sentences}


def test_tta_and_unilm_targets(synthetic):
  pattern, _ = synthetic
  for b in _batches(_dataset(pattern, "tta", False)):
    np.testing.assert_array_equal(b["target_ids"], b["input_ids"])
    np.testing.assert_array_equal(b["target_weights"], b["input_mask"])
    assert b["target_weights"].dtype == np.float32
    assert b["input_ids"].dtype == np.int32
  for b in _batches(_dataset(pattern, "unilm", False)):
    ids, mask = b["input_ids"], b["input_mask"]
    np.testing.assert_array_equal(b["target_ids"][:, :-1], ids[:, 1:])
    assert (b["target_ids"][:, -1] == PAD).all()
    np.testing.assert_array_equal(b["target_weights"][:, :-1], mask[:, 1:])
    lengths = mask.sum(axis=1)
    rows = np.arange(len(ids))
    # The weights stop at the last real token ([EOS] predicts nothing); the
    # token before it predicts [EOS].
    assert (b["target_weights"][rows, lengths - 1] == 0).all()
    assert (b["target_weights"][rows, lengths - 2] == 1).all()
    assert (b["target_ids"][rows, lengths - 2] == EOS).all()
    np.testing.assert_array_equal(b["target_weights"].sum(axis=1),
                                  lengths - 1)


def test_bucketing_pads_to_bucket_length_only(synthetic):
  pattern, sentences = synthetic
  buckets = input_pipeline.bucket_lengths(64, [16, 32, 48, 80])
  assert buckets == [16, 32, 48, 64]
  batches = _batches(_dataset(pattern, "tta", False,
                              bucket_boundaries=[16, 32, 48, 80]))
  assert sum(len(b["input_ids"]) for b in batches) == len(sentences)
  widths = collections.Counter()
  for b in batches:
    width = b["input_ids"].shape[1]
    lengths = b["input_mask"].sum(axis=1)
    lower = ([0] + buckets)[buckets.index(width)]
    assert (lengths > lower).all() and (lengths <= width).all()
    widths[width] += 1
  assert set(widths) == set(buckets)
  assert sum(c for w, c in widths.items() if w < 64) > widths[64]
  # Training: every batch has exactly batch_size sentences.
  for b in _batches(_dataset(pattern, "tta", True, seed=1), 30):
    assert b["input_ids"].shape[0] == 32 and b["input_ids"].shape[1] in buckets
  # Records longer than max_seq_length are cut to [SOS] ... [EOS].
  for b in _batches(_dataset(pattern, "tta", False, max_seq_length=20)):
    lengths = b["input_mask"].sum(axis=1)
    assert b["input_ids"].shape[1] <= 20
    assert (b["input_ids"][np.arange(len(lengths)), lengths - 1] == EOS).all()
    assert (b["input_ids"][:, 0] == SOS).all()


def test_skip_batches_resumes_exactly(synthetic):
  pattern, _ = synthetic
  k = 7
  full = _batches(_dataset(pattern, "bilm", True, seed=5), k + 1)
  resumed = _batches(_dataset(pattern, "bilm", True, seed=5,
                              skip_batches=k), 1)[0]
  assert set(resumed) == set(full[k])
  for key in resumed:
    np.testing.assert_array_equal(resumed[key], full[k][key])
  other = _batches(_dataset(pattern, "bilm", True, seed=6), k + 1)[k]
  assert other["input_ids"].shape != full[k]["input_ids"].shape or (
      other["input_ids"] != full[k]["input_ids"]).any()


def test_input_context_shards_are_disjoint(synthetic):
  pattern, sentences = synthetic
  parts = []
  for pipeline_id in range(2):
    context = tf.distribute.InputContext(num_input_pipelines=2,
                                         input_pipeline_id=pipeline_id)
    parts.append([
        tuple(ids[mask == 1].tolist())
        for b in _batches(_dataset(pattern, "tta", False,
                                   input_context=context))
        for ids, mask in zip(b["input_ids"], b["input_mask"])])
  assert not set(parts[0]) & set(parts[1])
  assert sorted(parts[0] + parts[1]) == sorted(tuple(s) for s in sentences)

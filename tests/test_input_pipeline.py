"""Tests for pretraining/input_pipeline.py on synthetic records."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from pretraining import input_pipeline
from pretraining import pretraining_records

# Synthetic vocabulary: the authors' special tokens at 0..6, words 7..V-1.
PAD, EOS, UNK, SOS, MASK, CLS, SEP = range(7)
SPECIAL_IDS = list(range(7))
VOCAB_SIZE = 1000


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
    pretraining_records.write_records(
      str(out / f"train-{i:05d}-of-00003.tfrecord"),
      [pretraining_records.make_example(s) for s in sentences[i::3]],
    )
  return str(out / "train-*"), sentences


def _dataset(pattern, model_type, is_training, batch_size=32, max_seq_length=64, **kwargs):
  return input_pipeline.make_dataset(
    pattern,
    batch_size,
    model_type,
    max_seq_length,
    is_training,
    VOCAB_SIZE,
    MASK,
    SPECIAL_IDS,
    **kwargs,
  )


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
    for ids, mask, w in zip(b["target_ids"], b["input_mask"], b["target_weights"]):
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
    np.testing.assert_array_equal(b["target_weights"].sum(axis=1), lengths - 1)


def test_bucketing_pads_to_bucket_length_only(synthetic):
  pattern, sentences = synthetic
  buckets = input_pipeline.bucket_lengths(64, [16, 32, 48, 80])
  assert buckets == [16, 32, 48, 64]
  batches = _batches(_dataset(pattern, "tta", False, bucket_boundaries=[16, 32, 48, 80]))
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


def test_the_batches_of_a_step_share_a_bucket(synthetic):
  """replicas_per_pipeline=3: each run of 3 consecutive batches (one step's, one per replica) has
  one length; one pass ends with shorter runs only where a bucket runs out."""
  pattern, sentences = synthetic
  train = _batches(_dataset(pattern, "tta", True, seed=1, replicas_per_pipeline=3), 60)
  widths = [b["input_ids"].shape[1] for b in train]
  assert all(len(set(widths[i : i + 3])) == 1 for i in range(0, 60, 3)), widths
  assert len(set(widths)) > 1
  # One replica per pipeline: the stream of before.
  plain = _batches(_dataset(pattern, "tta", True, seed=1), 12)
  same = _batches(_dataset(pattern, "tta", True, seed=1, replicas_per_pipeline=1), 12)
  for a, b in zip(plain, same):
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
  evaluation = _batches(_dataset(pattern, "tta", False, replicas_per_pipeline=3))
  assert sum(len(b["input_ids"]) for b in evaluation) == len(sentences)


def test_pad_to_max_seq_length_is_one_shape(synthetic):
  """Every batch [batch_size, max_seq_length], in eval too (the partial batch dropped)."""
  pattern, sentences = synthetic
  for is_training in (True, False):
    batches = _batches(
      _dataset(pattern, "tta", is_training, seed=1, pad_to_max_seq_length=True), 50
    )
    assert {b["input_ids"].shape for b in batches} == {(32, 64)}
  evaluation = _batches(_dataset(pattern, "tta", False, pad_to_max_seq_length=True))
  assert len(evaluation) == len(sentences) // 32
  with pytest.raises(ValueError, match="bucket_boundaries"):
    _dataset(pattern, "tta", True, pad_to_max_seq_length=True, bucket_boundaries=[16])


def test_skip_batches_resumes_exactly(synthetic):
  pattern, _ = synthetic
  k = 7
  full = _batches(_dataset(pattern, "bilm", True, seed=5), k + 1)
  resumed = _batches(_dataset(pattern, "bilm", True, seed=5, skip_batches=k), 1)[0]
  assert set(resumed) == set(full[k])
  for key in resumed:
    np.testing.assert_array_equal(resumed[key], full[k][key])
  other = _batches(_dataset(pattern, "bilm", True, seed=6), k + 1)[k]
  assert (
    other["input_ids"].shape != full[k]["input_ids"].shape
    or (other["input_ids"] != full[k]["input_ids"]).any()
  )


def test_input_context_shards_are_disjoint(synthetic):
  pattern, sentences = synthetic
  parts = []
  for pipeline_id in range(2):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id)
    parts.append(
      [
        tuple(ids[mask == 1].tolist())
        for b in _batches(_dataset(pattern, "tta", False, input_context=context))
        for ids, mask in zip(b["input_ids"], b["input_mask"])
      ]
    )
  assert not set(parts[0]) & set(parts[1])
  assert sorted(parts[0] + parts[1]) == sorted(tuple(s) for s in sentences)

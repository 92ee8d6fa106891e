# coding=utf-8
"""tf.data: unpadded sentence TFRecords -> length-bucketed batches [B, L] with each kind's targets.

Deterministic for a seed (the biLM's masks are stateless, keyed by batch index: docs/DESIGN.md
§3.2), so a resume rebuilds the stream and skips the consumed batches unparsed; exact only with
the same seed, files, batch size, buckets, input pipelines and global TF seed.
"""

from absl import logging
import numpy as np
import tensorflow as tf

import kinds
import modeling
import tokenization
from util import io_utils

# Bucket lengths (inclusive upper bounds) used when none are given. Sentences
# average ~30 tokens, so most batches pad to 32 or 48 instead of 128.
DEFAULT_BUCKET_BOUNDARIES = (16, 32, 48, 64, 96)

# Records in the training shuffle buffer. The shards are already globally
# shuffled by create_pretraining_data, so this only decorrelates the epochs.
_SHUFFLE_BUFFER = 10000
# Files read concurrently in training.
_CYCLE_LENGTH = 8
# [PAD] is id 0 in the authors' vocab, in every vocab we build and in Google
# BERT's; batches are padded with it.
_PAD_ID = 0


def special_ids_from_vocab(vocab):
  """Sorted ids of the vocab's special tokens: `make_dataset`'s special_ids."""
  return sorted(vocab[t] for t in tokenization.SPECIAL_TOKENS if t in vocab)


def bucket_lengths(max_seq_length, bucket_boundaries=None):
  """Strictly increasing padded lengths ending with max_seq_length; bucket i holds
  lengths[i-1] < n <= lengths[i]. Boundaries >= max_seq_length are dropped.
  """
  if bucket_boundaries is None:
    bucket_boundaries = DEFAULT_BUCKET_BOUNDARIES
  bucket_boundaries = [int(b) for b in bucket_boundaries]
  if any(b <= 0 for b in bucket_boundaries) or any(
    a >= b for a, b in zip(bucket_boundaries, bucket_boundaries[1:])
  ):
    raise ValueError(
      f"bucket_boundaries must be positive and strictly increasing, got {bucket_boundaries}"
    )
  return [b for b in bucket_boundaries if b < max_seq_length] + [max_seq_length]


_IDS_FEATURES = {
  "input_ids": tf.io.RaggedFeature(tf.int64),
  "length": tf.io.FixedLenFeature([], tf.int64),
}
_LENGTH_FEATURE = {"length": tf.io.FixedLenFeature([], tf.int64)}


def _bucket_and_batch(ds, batch_size, lengths, drop_remainder, batches_per_window=1):
  """{serialized: tf.string [B], bucket: int64 []}; only `length` is parsed here, so batches skipped
  on a resume cost no parsing. The batches come in runs of batches_per_window of one bucket (a
  window of that many batches' records), so that the replicas fed by one pipeline, which take
  consecutive batches, get one shape per step (a shorter run only where one pass ends).
  """
  lengths_t = tf.constant(lengths, tf.int64)

  def parse_lengths(serialized):
    n = tf.io.parse_example(serialized, _LENGTH_FEATURE)["length"]  # [512]
    # Bucket i holds lengths[i-1] < min(n, T) <= lengths[i].
    n = tf.minimum(n, lengths_t[-1])
    bucket = tf.reduce_sum(tf.cast(n[:, tf.newaxis] > lengths_t[tf.newaxis], tf.int64), axis=1)
    return {"serialized": serialized, "bucket": bucket}

  ds = (
    ds.batch(512)
    .map(parse_lengths, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    .unbatch()
  )

  def reduce_func(key, window):
    return window.batch(batch_size, drop_remainder=drop_remainder).map(
      lambda f: {"serialized": f["serialized"], "bucket": key}
    )

  return ds.group_by_window(
    key_func=lambda f: f["bucket"],
    reduce_func=reduce_func,
    window_size=batch_size * batches_per_window,
  )


def _parse_batch(serialized, padded_length, vocab_size, static_batch_size=None):
  """{input_ids, input_mask} int32 [B, L]; a record longer than L (built for a larger
  max_seq_length) keeps its first L-1 tokens and its [EOS].
  """
  features = tf.io.parse_example(serialized, _IDS_FEATURES)
  ids = tf.cast(features["input_ids"], tf.int32)  # [B, (n)] ragged
  n = tf.cast(ids.row_lengths(), tf.int32)  # [B]
  # A record whose fields disagree was not written by create_pretraining_data.
  tf.debugging.assert_equal(
    tf.cast(features["length"], tf.int32),
    n,
    message="record: `length` differs from the size of `input_ids`",
  )
  # Catches records built with another (larger) vocab before the model
  # gathers out of range.
  tf.debugging.assert_less(
    tf.reduce_max(ids.flat_values),
    vocab_size,
    message="input_ids >= vocab_size: were the records built with another vocab?",
  )
  shape = tf.stack([ids.nrows(out_type=tf.int32), padded_length])
  input_ids = ids.to_tensor(default_value=_PAD_ID, shape=shape)  # [B, L]
  last = tf.gather(ids.flat_values, ids.row_limits() - 1)  # [B], [EOS]
  columns = tf.range(padded_length)[tf.newaxis]  # [1, L]
  cut = tf.logical_and((n > padded_length)[:, tf.newaxis], columns == padded_length - 1)  # [B, L]
  input_ids = tf.where(cut, last[:, tf.newaxis], input_ids)
  input_mask = tf.sequence_mask(tf.minimum(n, padded_length), padded_length, dtype=tf.int32)
  # Static B where the batch size is fixed (training), as TPUs need.
  input_ids.set_shape([static_batch_size, None])
  input_mask.set_shape([static_batch_size, None])
  return {"input_ids": input_ids, "input_mask": input_mask}


def _is_in(ids, values):
  if not values:
    return tf.zeros_like(ids, tf.bool)
  values = tf.constant(sorted(values), tf.int32)
  return tf.reduce_any(ids[..., tf.newaxis] == values, axis=-1)


def mask_for_mlm(
  input_ids, input_mask, seed, vocab_size, mask_id, special_ids, mlm_probability=0.15
):
  """BERT's MLM corruption, stateless: (masked_ids, target_ids, target_weights) [B, L].

  A sentence with c candidates (real, not special) gets k = floor(p*c + u), u ~ U[0, 1), at least
  one: E[k] = p*c exactly, where BERT's round() biases short sentences. 80/10/10 as BERT.
  """
  seeds = tf.random.experimental.stateless_split(seed, num=5)
  shape = tf.shape(input_ids)
  candidates = tf.logical_and(input_mask > 0, tf.logical_not(_is_in(input_ids, special_ids)))
  num_candidates = tf.reduce_sum(tf.cast(candidates, tf.float32), axis=1)
  u = tf.random.stateless_uniform([shape[0]], seeds[0])
  k = tf.floor(mlm_probability * num_candidates + u)
  k = tf.where(num_candidates > 0, tf.maximum(k, 1.0), 0.0)
  # Choose k candidates uniformly: random scores, non-candidates last, the k
  # smallest scores win (rank = position in the sorted order).
  scores = tf.random.stateless_uniform(shape, seeds[1])
  scores = tf.where(candidates, scores, 2.0)
  ranks = tf.argsort(tf.argsort(scores, axis=1, stable=True), axis=1, stable=True)
  chosen = tf.logical_and(candidates, tf.cast(ranks, tf.float32) < k[:, tf.newaxis])
  action = tf.random.stateless_uniform(shape, seeds[2])
  to_mask = tf.logical_and(chosen, action < 0.8)
  to_random = tf.logical_and(chosen, tf.logical_and(action >= 0.8, action < 0.9))
  excluded = set(special_ids) | {mask_id}
  normal_ids = tf.constant([i for i in range(vocab_size) if i not in excluded], tf.int32)
  random_ids = tf.gather(
    normal_ids,
    tf.random.stateless_uniform(
      shape, seeds[3], minval=0, maxval=tf.size(normal_ids), dtype=tf.int32
    ),
  )
  masked_ids = tf.where(
    to_mask, tf.cast(mask_id, tf.int32), tf.where(to_random, random_ids, input_ids)
  )
  return masked_ids, input_ids, tf.cast(chosen, tf.float32)


def make_targets(
  batch,
  model_type,
  seed,
  vocab_size,
  mask_id,
  special_ids,
  mlm_probability=0.15,
  continuation=None,
):
  """A padded batch -> the model's inputs and targets by the kind's `target` (kinds.TARGETS), and
  word_ids int32 [B, L] for a word attention pattern (from continuation, bool [V]).
  """
  input_ids = batch["input_ids"]
  input_mask = batch["input_mask"]
  kind = kinds.get(model_type)
  target = kind.target
  words = {}
  if kind.attention in modeling.WORD_PATTERNS:
    # From the intact ids: the words of the sentence, not of a corrupted copy.
    words["word_ids"] = modeling.token_word_ids(input_ids, continuation)
  if target == "self":
    # p(x_t | x_\t) at every real token, [SOS] and [EOS] included.
    target_ids = input_ids
    target_weights = tf.cast(input_mask, tf.float32)
  elif target == "mlm":
    input_ids, target_ids, target_weights = mask_for_mlm(
      input_ids, input_mask, seed, vocab_size, mask_id, special_ids, mlm_probability
    )
  else:  # "next"
    # Position t predicts x_{t+1}; the last real token ([EOS]) predicts
    # nothing, [SOS] is never a target.
    pad = tf.zeros_like(input_ids[:, :1])
    target_ids = tf.concat([input_ids[:, 1:], pad], axis=1)
    target_weights = tf.cast(tf.concat([input_mask[:, 1:], pad], axis=1), tf.float32)
  return {
    "input_ids": input_ids,
    "input_mask": input_mask,
    "target_ids": target_ids,
    "target_weights": target_weights,
    **words,
  }


def _check_dataset_args(model_type, batch_size, mask_id, vocab_size, continuation):
  if kinds.get(model_type).attention in modeling.WORD_PATTERNS:
    if continuation is None or len(continuation) != vocab_size:
      raise ValueError(
        f"{model_type} attends by words: make_dataset needs the vocab's continuation flags "
        f"(bool [{vocab_size:d}], tokenization.continuation_flags)"
      )
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size:d}")
  if not 0 <= mask_id < vocab_size:
    raise ValueError(f"mask_id {mask_id:d} is outside the vocabulary [0, {vocab_size:d})")


def _pipeline_seed(seed, is_training):
  if seed is not None:
    return seed
  if not is_training:
    return 0
  seed = int(np.random.SeedSequence().entropy % (2**31 - 1))
  logging.info("input pipeline: no seed given, using %d (pass it to reproduce this stream)", seed)
  return seed


def _pipeline_position(input_context):
  if input_context is None:
    return 1, 0
  return input_context.num_input_pipelines, input_context.input_pipeline_id


def _read_records(files, is_training, seed, num_pipelines, pipeline_id, shuffle_buffer_size):
  """This input pipeline's part of `files`: whole files when there are at least as many files as
  pipelines (no record read only to be thrown away), else every num_pipelines-th record.
  """
  shard_files = num_pipelines > 1 and len(files) >= num_pipelines
  if shard_files:
    files = files[pipeline_id::num_pipelines]
  if is_training:
    ds = tf.data.Dataset.from_tensor_slices(files)
    ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.interleave(
      tf.data.TFRecordDataset,
      cycle_length=min(len(files), _CYCLE_LENGTH),
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True,
    )
  else:
    ds = tf.data.TFRecordDataset(files)
  if num_pipelines > 1 and not shard_files:
    ds = ds.shard(num_pipelines, pipeline_id)
  if is_training:
    ds = ds.shuffle(shuffle_buffer_size, seed=seed)
  return ds


def make_dataset(
  file_pattern,
  batch_size,
  model_type,
  max_seq_length,
  is_training,
  vocab_size,
  mask_id,
  special_ids,
  seed=None,
  mlm_probability=0.15,
  bucket_boundaries=None,
  input_context=None,
  skip_batches=0,
  shuffle_buffer_size=_SHUFFLE_BUFFER,
  continuation=None,
  replicas_per_pipeline=1,
  pad_to_max_seq_length=False,
):
  """dicts of input_ids, input_mask, target_ids int32 [B, L], target_weights float32 [B, L] (and
  `make_targets`' word_ids), L one of `bucket_lengths`, B batch_size (per replica under
  tf.distribute). The replicas_per_pipeline consecutive batches of a step share L.

  Training drops partial batches (static B) and repeats; eval is one pass in file order, masked
  with seed 0 by default so that checkpoints' eval losses compare. pad_to_max_seq_length: one
  shape, [B, max_seq_length], partial batches dropped in eval too (TPUs compile each shape).
  seed None in training draws a logged random one, which a resume with skip_batches cannot repeat.
  ValueError for an unknown model_type, no matching files or bad buckets.
  """
  _check_dataset_args(model_type, batch_size, mask_id, vocab_size, continuation)
  special_ids = sorted(int(i) for i in special_ids)
  if pad_to_max_seq_length and bucket_boundaries:
    raise ValueError("pad_to_max_seq_length leaves no buckets: give no bucket_boundaries")
  lengths = bucket_lengths(max_seq_length, () if pad_to_max_seq_length else bucket_boundaries)
  files = io_utils.expand_globs(file_pattern)
  num_pipelines, pipeline_id = _pipeline_position(input_context)
  seed = _pipeline_seed(seed, is_training)
  ds = _read_records(files, is_training, seed, num_pipelines, pipeline_id, shuffle_buffer_size)
  fixed_batch = is_training or pad_to_max_seq_length
  ds = _bucket_and_batch(ds, batch_size, lengths, fixed_batch, replicas_per_pipeline)

  def targets(batch, batch_seed):
    return make_targets(
      batch, model_type, batch_seed, vocab_size, mask_id, special_ids, mlm_probability, continuation
    )

  static_batch_size = batch_size if fixed_batch else None
  ds = _parse_batches(
    ds, lengths, vocab_size, static_batch_size, (seed, pipeline_id), skip_batches, targets
  )
  return ds.prefetch(tf.data.AUTOTUNE)


def _parse_batches(ds, lengths, vocab_size, static_batch_size, seed_pair, skip_batches, targets):
  """`_bucket_and_batch`'s batches parsed, skipped and given targets(batch, seed int64 [2]), the
  seed from seed_pair and the batch's index.
  """
  lengths_t = tf.constant(lengths, tf.int32)
  base_seed = tf.constant(seed_pair, tf.int64)

  def finish(index, batch):
    batch = _parse_batch(
      batch["serialized"], lengths_t[batch["bucket"]], vocab_size, static_batch_size
    )
    return targets(batch, tf.random.experimental.stateless_fold_in(base_seed, index))

  # The batch index keys the masks: skipping batches does not change the
  # masks of the batches that follow, and every epoch gets new masks.
  ds = ds.enumerate()
  if skip_batches:
    ds = ds.skip(skip_batches)
  return ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

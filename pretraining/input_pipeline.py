# coding=utf-8
"""tf.data input pipeline: unpadded sentence TFRecords -> bucketed batches for every LM objective.

  model_type   input_ids              target_ids           target_weights
  tta          x                      x                    1 at real tokens
  bilm         x with 15% corrupted   x                    1 at chosen tokens
  unilm        x                      x shifted left by 1  1 where x_{t+1} real
  (tta_word is trained like tta, bert like bilm; word_l2r kinds also get word_ids [B, L].)

Every stage is deterministic for a seed (the biLM's masks are stateless, keyed by batch index),
so a resume rebuilds the stream and skips the consumed batches unparsed; exact only with the same
seed, files, batch size, buckets, input pipelines and global TF seed.

Dimensions: B = sentences per batch, L = padded length of the batch (a bucket length), n = one
sentence's length.
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
  """Ids of the special tokens present in a vocab.

  Args:
    vocab: mapping token -> id (e.g. tokenization.load_vocab(path)).

  Returns:
    sorted list of int: ids of [PAD] [EOS] [UNK] [SOS] [MASK] [CLS] [SEP]
    (those the vocab has). Pass it as `special_ids` to `make_dataset`.
  """
  return sorted(vocab[t] for t in tokenization.SPECIAL_TOKENS if t in vocab)


def bucket_lengths(max_seq_length, bucket_boundaries=None):
  """Padded lengths of the length buckets.

  Args:
    max_seq_length: int, the longest sentence (T).
    bucket_boundaries: increasing ints or None (DEFAULT_BUCKET_BOUNDARIES);
      boundaries >= max_seq_length are dropped.

  Returns:
    list of int, strictly increasing, ending with max_seq_length: bucket i
    holds sentences with lengths[i-1] < n <= lengths[i] and pads to lengths[i].

  Raises:
    ValueError: for boundaries that are not positive and increasing.
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


def _bucket_and_batch(ds, batch_size, lengths, drop_remainder):
  """Groups serialized records of similar length into batches.

  Only the `length` feature is parsed here (vectorised, 512 records per
  call); the ids are parsed per batch by `_parse_batch`, after `skip`, so
  that skipped batches (resuming) never pay for parsing their ids.

  Args:
    ds: Dataset of serialized tf.train.Example (tf.string scalars).
    batch_size: sentences per batch (B).
    lengths: bucket lengths from `bucket_lengths`; the last is T.
    drop_remainder: drop partial batches (training: static batch size).

  Returns:
    Dataset of dicts: serialized tf.string [B], bucket int64 [] (index into
    `lengths`).
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
    key_func=lambda f: f["bucket"], reduce_func=reduce_func, window_size=batch_size
  )


def _parse_batch(serialized, padded_length, vocab_size, static_batch_size=None):
  """Parses a batch of records and pads it to its bucket length.

  A record longer than padded_length (only possible in the last bucket,
  padded_length = max_seq_length) keeps its first padded_length-1 tokens and
  its last one ([EOS]) (records built for a larger max_seq_length).

  Args:
    serialized: tf.string Tensor [B].
    padded_length: int Tensor [], L.
    vocab_size: int; every id must be below it.
    static_batch_size: int or None, B when every batch has exactly B rows.

  Returns:
    dict: input_ids int32 [B, L] (padded with [PAD] = 0), input_mask int32
    [B, L].
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
  """bool Tensor like `ids`: whether each id is in the int list `values`."""
  if not values:
    return tf.zeros_like(ids, tf.bool)
  values = tf.constant(sorted(values), tf.int32)
  return tf.reduce_any(ids[..., tf.newaxis] == values, axis=-1)


def mask_for_mlm(
  input_ids, input_mask, seed, vocab_size, mask_id, special_ids, mlm_probability=0.15
):
  """BERT's MLM corruption of a padded batch, with stateless randomness.

  Candidates are real tokens whose id is not in special_ids (so never [PAD],
  [SOS], [EOS], [CLS], [SEP]). Each sentence gets k of its c candidates,
  k = floor(p*c + u) with u ~ U[0, 1) (stochastic rounding, so E[k] = p*c
  exactly rather than BERT's round(), which biases short sentences), and at
  least one when c > 0. Of the chosen: 80% -> [MASK], 10% -> a random
  non-special id, 10% unchanged.

  Args:
    input_ids: int32 Tensor [B, L].
    input_mask: int32 Tensor [B, L], 1 at real tokens.
    seed: int32/int64 Tensor [2], a stateless-random seed.
    vocab_size: int, V.
    mask_id: int, id of [MASK].
    special_ids: list of int never chosen nor drawn as random replacement.
    mlm_probability: float, p.

  Returns:
    (masked_ids, target_ids, target_weights): int32 [B, L], int32 [B, L]
    (the original ids) and float32 [B, L] (1.0 at chosen positions).
  """
  seeds = tf.random.experimental.stateless_split(seed, num=5)
  shape = tf.shape(input_ids)
  candidates = tf.logical_and(input_mask > 0, tf.logical_not(_is_in(input_ids, special_ids)))
  num_candidates = tf.reduce_sum(tf.cast(candidates, tf.float32), axis=1)
  # k = floor(p*c + u), at least 1 where the sentence has a candidate.
  u = tf.random.stateless_uniform([shape[0]], seeds[0])
  k = tf.floor(mlm_probability * num_candidates + u)
  k = tf.where(num_candidates > 0, tf.maximum(k, 1.0), 0.0)
  # Choose k candidates uniformly: random scores, non-candidates last, the k
  # smallest scores win (rank = position in the sorted order).
  scores = tf.random.stateless_uniform(shape, seeds[1])
  scores = tf.where(candidates, scores, 2.0)
  ranks = tf.argsort(tf.argsort(scores, axis=1, stable=True), axis=1, stable=True)
  chosen = tf.logical_and(candidates, tf.cast(ranks, tf.float32) < k[:, tf.newaxis])
  # 80% [MASK], 10% random token, 10% unchanged.
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
  """Turns a padded batch into model inputs and targets.

  Args:
    batch: dict with input_ids, input_mask int32 [B, L].
    model_type: one of kinds.MODEL_TYPES; its training target decides.
    seed: int Tensor [2], stateless seed (used by bilm/bert only).
    vocab_size, mask_id, special_ids, mlm_probability: see `mask_for_mlm`.
    continuation: bool [V], the vocab's continuation pieces
      (`tokenization.continuation_flags`); needed by a kind with a word attention pattern.

  Returns:
    dict: input_ids int32 [B, L], input_mask int32 [B, L],
    target_ids int32 [B, L], target_weights float32 [B, L]; word_ids int32 [B, L] for a kind
    with a word attention pattern.
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
  """Raises ValueError for an argument `make_dataset` cannot work with."""
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
  """The given seed; else a logged random one (training) or 0 (eval)."""
  if seed is not None:
    return seed
  if not is_training:
    return 0
  seed = int(np.random.SeedSequence().entropy % (2**31 - 1))
  logging.info("input pipeline: no seed given, using %d (pass it to reproduce this stream)", seed)
  return seed


def _pipeline_position(input_context):
  """(number of input pipelines, this pipeline's id): (1, 0) without tf.distribute."""
  if input_context is None:
    return 1, 0
  return input_context.num_input_pipelines, input_context.input_pipeline_id


def _read_records(files, is_training, seed, num_pipelines, pipeline_id, shuffle_buffer_size):
  """Serialized records of this input pipeline's part of `files`.

  Training: files shuffled every epoch and repeated forever, read
  _CYCLE_LENGTH at a time, records shuffled in a buffer. Evaluation: one pass
  in file order. With several pipelines, each reads whole files when there
  are enough (no pipeline reads a record it then throws away), else every
  num_pipelines-th record.

  Returns:
    tf.data.Dataset of tf.string scalars.
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
):
  """Builds the training or evaluation input pipeline (its stages: the module docstring).

  Training batches hold exactly batch_size sentences (partial ones are dropped, so shapes are
  static in B). Evaluation is one pass over the files in sorted order, no shuffle; the last batch
  of each bucket may be smaller; biLM masks are still drawn (seed 0 when none is given) so that
  eval losses of different checkpoints compare.

  Args:
    file_pattern: comma-separated globs of TFRecord files (or a list).
    batch_size: sentences per batch yielded by this pipeline (with
      tf.distribute: input_context.get_per_replica_batch_size(global)).
    model_type: one of kinds.MODEL_TYPES.
    max_seq_length: int; longer records are truncated ([SOS] ... [EOS] kept).
    is_training: bool.
    vocab_size: int; ids must be below it (checked).
    mask_id: int, id of [MASK].
    special_ids: list of int (e.g. `special_ids_from_vocab`): never masked,
      never drawn as a random replacement.
    seed: int or None. None in training draws a random seed (logged);
      resuming with skip_batches needs the same fixed seed.
    mlm_probability: float, share of candidate tokens the biLM predicts.
    bucket_boundaries: see `bucket_lengths`.
    input_context: tf.distribute.InputContext or None; with several input pipelines each
      reads a disjoint part (`_read_records`).
    skip_batches: int, batches to drop from the start (resuming; see the
      module docstring for when this is exact).
    shuffle_buffer_size: int, records in the training shuffle buffer.
    continuation: bool [V] (`tokenization.continuation_flags`); needed by a kind with a word
      attention pattern (see `make_targets`).

  Returns:
    tf.data.Dataset of dicts: input_ids, input_mask, target_ids int32 [B, L] and target_weights
    float32 [B, L] (and word_ids int32 [B, L], see `make_targets`), with L one of
    `bucket_lengths(max_seq_length, bucket_boundaries)`.

  Raises:
    ValueError: for an unknown model_type, no matching files, bad buckets.
  """
  _check_dataset_args(model_type, batch_size, mask_id, vocab_size, continuation)
  special_ids = sorted(int(i) for i in special_ids)
  lengths = bucket_lengths(max_seq_length, bucket_boundaries)
  files = io_utils.expand_globs(file_pattern)
  num_pipelines, pipeline_id = _pipeline_position(input_context)
  seed = _pipeline_seed(seed, is_training)
  ds = _read_records(files, is_training, seed, num_pipelines, pipeline_id, shuffle_buffer_size)
  ds = _bucket_and_batch(ds, batch_size, lengths, drop_remainder=is_training)

  def targets(batch, batch_seed):
    return make_targets(
      batch, model_type, batch_seed, vocab_size, mask_id, special_ids, mlm_probability, continuation
    )

  static_batch_size = batch_size if is_training else None
  ds = _parse_batches(
    ds, lengths, vocab_size, static_batch_size, (seed, pipeline_id), skip_batches, targets
  )
  return ds.prefetch(tf.data.AUTOTUNE)


def _parse_batches(ds, lengths, vocab_size, static_batch_size, seed_pair, skip_batches, targets):
  """Parses `_bucket_and_batch`'s batches, skips the first `skip_batches` and adds the targets.

  targets(batch, batch_seed) -> the model's features, batch_seed int64 [2] derived from
  `seed_pair` and the batch's index in the stream.
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

# coding=utf-8
"""The pretraining records: sentences -> ids -> one tf.train.Example each -> shuffled shards.

The format: docs/DESIGN.md §5.2; pretraining/input_pipeline.py reads it back and
pretraining_data.py is the job that writes it.
"""

import concurrent.futures
import os
import random
import re

from absl import logging
import numpy as np
import tensorflow as tf

from util import io_utils
from util import progress

# The splits, in the order that seeds their shuffles (file name prefixes of the shards).
SPLITS = ("train", "eval")

# Shards a previous run may have left behind with another --num_shards.
_SHARD_RE = re.compile(r"^(train|eval)-\d{5}-of-\d{5}\.tfrecord$")
# Sentences per tokenizer call: amortises the graph call, bounds memory.
_TOKENIZE_BATCH = 8192
# Length statistics reported in data_stats.json.
_PERCENTILES = (50, 90, 95, 99)
# Histogram edges (upper bounds, inclusive) matching input_pipeline's default
# buckets, so the stats show how much padding bucketing saves.
_HISTOGRAM_EDGES = (16, 32, 48, 64, 96, 128, 256, 512)


def shard_name(split, index, num_shards):
  """Returns e.g. "train-00003-of-00008.tfrecord"."""
  return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord"


def make_example(ids):
  """Serialized tf.train.Example of one sentence.

  Args:
    ids: list of int, `[SOS] pieces [EOS]` (n ids, unpadded).

  Returns:
    bytes: Example with int64 features input_ids [n], input_mask [n] (ones)
    and length [1] (= n).
  """
  n = len(ids)
  feature = {
    "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
    "input_mask": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * n)),
    "length": tf.train.Feature(int64_list=tf.train.Int64List(value=[n])),
  }
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_records(path, examples):
  """Writes serialized examples to one TFRecord file, atomically.

  Args:
    path: output path.
    examples: iterable of bytes (serialized tf.train.Example).

  Returns:
    int: number of records written.
  """
  count = 0
  with io_utils.atomic_path(path) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for example in examples:
        writer.write(example)
        count += 1
  return count


def _length_stats(lengths):
  """Summary of a list of lengths: mean, percentiles, max, histogram."""
  if not lengths:
    return {"mean": 0.0, "max": 0, "percentiles": {}, "histogram": {}}
  array = np.asarray(lengths, np.int64)
  edges = [e for e in _HISTOGRAM_EDGES if e < array.max()] + [int(array.max())]
  counts = np.bincount(np.searchsorted(edges, array, side="left"), minlength=len(edges))
  lower = [1] + [e + 1 for e in edges[:-1]]
  return {
    "mean": round(float(array.mean()), 3),
    "max": int(array.max()),
    "percentiles": {str(p): float(np.percentile(array, p)) for p in _PERCENTILES},
    "histogram": {f"{lo}-{hi}": int(c) for lo, hi, c in zip(lower, edges, counts)},
  }


def truncate_ids(ids, max_seq_length, seed, sentence):
  """Cuts an over-long sentence to max_seq_length ids as the authors do.

  joongbo/tta create_tfrecords.py (truncate_seq) drops pieces one at a time,
  each from the front or the back with probability 1/2, until
  max_seq_length-2 remain, then wraps them in [SOS] and [EOS]. The same coin
  flips are drawn here from a generator seeded with (seed, sentence), so a cut
  depends on neither the order of the sentences nor the number of workers.

  Args:
    ids: list of int [n], `[SOS] pieces [EOS]`.
    max_seq_length: int >= 3.
    seed: int, --random_seed.
    sentence: str, the sentence the ids encode.

  Returns:
    list of int [min(n, max_seq_length)]: `[SOS] window [EOS]`, the window a
    contiguous run of max_seq_length-2 of the pieces (ids itself if it fits).
  """
  excess = len(ids) - max_seq_length
  if excess <= 0:
    return ids
  # A str seed is hashed with SHA-512: independent of PYTHONHASHSEED.
  rng = random.Random(f"{seed}\ttruncate\t{sentence}")
  front = sum(rng.random() < 0.5 for _ in range(excess))
  return ids[:1] + ids[1 + front : len(ids) - 1 - (excess - front)] + ids[-1:]


def tokenize_sentences(tokenizer, sentences, max_seq_length, seed, what="tokenize"):
  """Tokenizes, truncates and serializes sentences.

  Tokenization of batch i+1 (TF ops, which release the GIL) overlaps with
  truncating and serializing batch i (Python) on a second thread; on two
  cores that hides most of the serialization cost.

  Args:
    tokenizer: tokenization.FullTokenizer.
    sentences: list of str.
    max_seq_length: int >= 3; a longer sentence is cut by `truncate_ids`.
    seed: int, --random_seed; with the sentence it decides each cut.
    what: label for progress logging.

  Returns:
    (examples, stats): list of serialized Examples in input order, and a dict
    with sentences, tokens, pieces, unk_pieces, unk_rate, truncated,
    truncated_pieces, lengths (after truncation) and untruncated_lengths.
  """
  unk_id = tokenizer.unk_id
  examples = []
  lengths = []
  untruncated = []
  unk = 0
  bar = progress.Progress(what, total=len(sentences), unit="sentences")
  batches = [sentences[i : i + _TOKENIZE_BATCH] for i in range(0, len(sentences), _TOKENIZE_BATCH)]
  with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
    pending = batches and pool.submit(tokenizer.encode_batch, batches[0])
    for index in range(len(batches)):
      encoded = pending.result()
      if index + 1 < len(batches):
        pending = pool.submit(tokenizer.encode_batch, batches[index + 1])
      for sentence, ids in zip(batches[index], encoded):
        untruncated.append(len(ids))
        unk += ids.count(unk_id)
        ids = truncate_ids(ids, max_seq_length, seed, sentence)
        lengths.append(len(ids))
        examples.append(make_example(ids))
      bar.update(len(encoded))
  num = len(lengths)
  pieces = sum(untruncated) - 2 * num
  truncated = sum(1 for n in untruncated if n > max_seq_length)
  stats = {
    "sentences": num,
    "tokens": int(sum(lengths)),
    "pieces": int(pieces),
    "unk_pieces": int(unk),
    "unk_rate": round(unk / pieces, 6) if pieces else 0.0,
    "truncated": int(truncated),
    "truncated_fraction": round(truncated / num, 6) if num else 0.0,
    "truncated_pieces": int(sum(untruncated) - sum(lengths)),
    "lengths": _length_stats(lengths),
    "untruncated_lengths": _length_stats(untruncated),
  }
  return examples, stats


def _shard_bounds(num_examples, num_shards):
  """Contiguous [begin, end) ranges of a shuffled list, sizes within 1."""
  edges = [num_examples * i // num_shards for i in range(num_shards + 1)]
  return list(zip(edges[:-1], edges[1:]))


def write_shards(output_dir, split, examples, num_shards, seed):
  """Shuffles examples deterministically and writes them as shards.

  Args:
    output_dir: directory.
    split: "train" or "eval" (file name prefix).
    examples: list of serialized Examples.
    num_shards: number of files.
    seed: int; the permutation is numpy's PCG64 seeded with (seed, split), so
      train and eval get independent orders.

  Returns:
    list of dicts {"file", "records", "bytes"} in shard order.
  """
  split_key = SPLITS.index(split) if split in SPLITS else len(SPLITS)
  order = np.random.default_rng([seed, split_key]).permutation(len(examples))
  files = []
  bar = progress.Progress(f"write {split}", total=len(examples), unit="records")
  for index, (begin, end) in enumerate(_shard_bounds(len(examples), num_shards)):
    name = shard_name(split, index, num_shards)
    path = os.path.join(output_dir, name)
    count = write_records(path, (examples[i] for i in order[begin:end]))
    files.append({"file": name, "records": count, "bytes": tf.io.gfile.stat(path).length})
    bar.update(count)
  return files


def remove_stale_shards(output_dir, files):
  """Removes shards of earlier runs (another --num_shards).

  A glob like train-* would otherwise pick them up with the new ones.
  """
  current = {f["file"] for f in files}
  for name in tf.io.gfile.listdir(output_dir):
    if _SHARD_RE.match(name) and name not in current:
      logging.info("removing stale shard %s", name)
      tf.io.gfile.remove(os.path.join(output_dir, name))

# coding=utf-8
"""The pretraining records: sentences -> ids -> one tf.train.Example each -> shuffled shards.

Format and job: docs/DESIGN.md §3.1, §5.2. `make_block`, one worker's work on one block, needs no
TensorFlow (HF `tokenizers`, the Example encoded here), so a worker starts fast and stays small;
only the parent's `write_records` imports it, for TFRecord's CRC framing.
"""

import collections
import dataclasses
import hashlib
import json
import os
import random
import re
import struct

from absl import logging
import numpy as np

from util import io_utils

# The splits, in the order that seeds their shuffles (file name prefixes of the shards).
SPLITS = ("train", "eval")

# Shards a previous run may have left behind with another --num_shards.
_SHARD_RE = re.compile(r"^(train|eval)-\d{5}-of-\d{5}\.tfrecord$")
# Length statistics reported in data_stats.json.
_PERCENTILES = (50, 90, 95, 99)
# Histogram edges (upper bounds, inclusive) matching input_pipeline's default
# buckets, so the stats show how much padding bucketing saves.
_HISTOGRAM_EDGES = (16, 32, 48, 64, 96, 128, 256, 512)
# A block file is its records, each framed as a little-endian uint32 length and the bytes.
_FRAME = struct.Struct("<I")
BOM = b"\xef\xbb\xbf"
# Sentences per tokenizer call in a worker.
_TOKENIZE_BATCH = 4096


def shard_name(split, index, num_shards):
  return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord"


# ----------------------------------------------------------------------------
# One record
# ----------------------------------------------------------------------------


def _varint(value):
  out = bytearray()
  while value >= 0x80:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


# Varints of the lengths a record's fields can have (a sentence of up to ~4000 ids).
_LENGTHS = [_varint(n) for n in range(1 << 14)]


def _delimited(tag, payload):
  """A length-delimited protobuf field: tag byte, varint length, payload."""
  n = len(payload)
  return tag + (_LENGTHS[n] if n < len(_LENGTHS) else _varint(n)) + payload


def _int64_feature(name, packed):
  """A `features.feature` map entry {name: Int64List}, values packed as varints already."""
  feature = _delimited(b"\x1a", _delimited(b"\n", packed))
  return _delimited(b"\n", _delimited(b"\n", name) + _delimited(b"\x12", feature))


_IDS_KEY = _delimited(b"\n", b"input_ids")
_TAILS = {}  # n -> the input_mask and length entries of an n-id record (they depend on n only)


def make_example(ids, varints=None):
  """A tf.train.Example of n ids (int64 input_ids [n], input_mask [n], length [1]) encoded here, the
  same bytes in every process and without TensorFlow; varints[i]: id i's varint bytes.
  """
  n = len(ids)
  tail = _TAILS.get(n)
  if tail is None:
    tail = _TAILS[n] = _int64_feature(b"input_mask", b"\x01" * n) + _int64_feature(
      b"length", _varint(n)
    )
  packed = b"".join(map(varints.__getitem__, ids)) if varints else b"".join(map(_varint, ids))
  value = _delimited(b"\x12", _delimited(b"\x1a", _delimited(b"\n", packed)))
  return _delimited(b"\n", _delimited(b"\n", _IDS_KEY + value) + tail)


def truncate_ids(ids, max_seq_length, seed, position):
  """Cuts ids ([SOS] pieces [EOS]) to max_seq_length as joongbo/tta create_tfrecords.py does: one
  piece at a time from the front or the back with probability 1/2. The coins are seeded by (seed,
  position), so a cut depends on neither the order nor the workers, and a repeated sentence is cut
  in other places.
  """
  excess = len(ids) - max_seq_length
  if excess <= 0:
    return ids
  # A str seed is hashed with SHA-512: independent of PYTHONHASHSEED.
  rng = random.Random(f"{seed}\ttruncate\t{position}")
  front = sum(rng.random() < 0.5 for _ in range(excess))
  return ids[:1] + ids[1 + front : len(ids) - 1 - (excess - front)] + ids[-1:]


# ----------------------------------------------------------------------------
# Where a record goes: its pile (docs/DESIGN.md §5.2)
# ----------------------------------------------------------------------------
# Every record gets a 64-bit seeded hash of its position in the corpus (file index, line
# number), not of its text, so that repeated sentences spread over the shards. The hash picks
# one of num_shards * piles_per_shard equal key ranges: the shard is the record's range divided
# by piles_per_shard. Records are thus assigned to piles independently and uniformly at random;
# shuffling each pile uniformly (in memory) and concatenating them gives every order of a shard
# the same probability 1/n!: for k piles and one given order, the chance that its first n_1
# records went to pile 1, the next n_2 to pile 2, ... is k^-n, and the shuffles then give it with
# probability prod 1/n_i!; summed over the compositions (n_1..n_k) of n that is
# k^-n * sum n!/prod n_i! / n! = k^-n * k^n / n! = 1/n!. The writer may join consecutive piles of
# a shard into one in-memory shuffle unit when their counts are small; it decides from the counts
# alone, and given the counts the records of each pile are still a uniform random subset
# (exchangeability), so the argument is unchanged.


def position_key(file_index, line):
  return f"{file_index}:{line}"


def pile_of(seed, position, num_piles):
  """The pile in [0, num_piles) of the record at `position` (`position_key`)."""
  digest = hashlib.blake2b(f"{seed}\t{position}".encode(), digest_size=8).digest()
  return (int.from_bytes(digest, "big") * num_piles) >> 64


@dataclasses.dataclass(frozen=True)
class Layout:
  """A split's shards and piles: num_shards * piles_per_shard piles, shard = pile // pps."""

  num_shards: int
  piles_per_shard: int

  @property
  def num_piles(self):
    return self.num_shards * self.piles_per_shard


# ----------------------------------------------------------------------------
# One block of lines (a worker's unit of work)
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Block:
  """Whole lines of one input file: bytes [start, end) of its decompressed text. mode: "hash" (split
  by a seeded hash of the sentence), "train" or "eval".
  """

  index: int
  file_index: int
  path: str
  mode: str
  start: int
  end: int
  first_line: int
  # The parent reads compressed and remote files and hands the worker the bytes.
  worker_reads: bool


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
  """What every block's records depend on besides the block (sent once to each worker)."""

  tokenizer_json: str  # tokenization.host_tokenizer(...).to_str()
  boundary_ids: tuple  # ([SOS] id, [EOS] id)
  unk_id: int
  vocab_size: int
  max_seq_length: int
  seed: int
  eval_fraction: float
  layouts: dict  # split -> Layout
  skip_malformed: bool
  parts_dir: str


_worker = None  # (config, tokenizer, varint table) of this process: `init_worker`


def init_worker(config):
  """Builds this process's tokenizer; the Pool initializer (or the parent with one worker)."""
  global _worker
  # One core per worker: tokenizers' own thread pool would compete with the other workers.
  os.environ["TOKENIZERS_PARALLELISM"] = "false"
  import tokenizers  # pylint: disable=g-import-not-at-top

  tokenizer = tokenizers.Tokenizer.from_str(config.tokenizer_json)
  _worker = (config, tokenizer, [_varint(i) for i in range(config.vocab_size)])


def malformed_error(path, number, raw, error):
  """The one-line refusal of a line that is not UTF-8 (ValueError)."""
  return ValueError(
    f"{path}:{number}: not valid UTF-8 (byte {raw[error.start : error.start + 1]!r} at column "
    f"{error.start + 1}: {error.reason}); expected UTF-8 text, one sentence per line. Fix the "
    "file or pass --skip_malformed to skip and count such lines."
  )


# A block's records and its summary (`block_paths`), as globs.
BLOCK_FILES = ("block-*.rec", "block-*.json")


def block_paths(parts_dir, index):
  """(records, summary) of block `index` in `parts_dir` (the names BLOCK_FILES match)."""
  stem = os.path.join(parts_dir, f"block-{index:07d}")
  return stem + ".rec", stem + ".json"


def read_block_summary(parts_dir, index):
  """The summary of a finished block, or None (missing, unreadable, or its records file is not
  the size it records: a block cut short by a kill is redone)."""
  records, summary = block_paths(parts_dir, index)
  try:
    with io_utils.open_file(summary) as f:
      done = json.load(f)
  except (OSError, ValueError):
    return None
  if io_utils.file_size(records) != done.get("bytes_total"):
    return None
  return done


def _decode_lines(block, data, read):
  """The block's lines as str (None for a malformed line that is skipped); updates `read`."""
  raw_lines = data.split(b"\n")
  if raw_lines and not raw_lines[-1]:
    raw_lines.pop()  # The newline that ends the last line.
  try:
    # One decode of the whole block is far faster than one per line.
    return data.decode("utf-8").split("\n")[: len(raw_lines)]
  except UnicodeDecodeError:
    pass
  lines = []
  for offset, raw in enumerate(raw_lines):
    try:
      lines.append(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
      number = block.first_line + offset
      if not _worker[0].skip_malformed:
        raise malformed_error(block.path, number, raw, e) from None
      read["malformed_lines"] += 1
      if len(read["malformed_examples"]) < 10:
        read["malformed_examples"].append(f"{block.path}:{number}")
      lines.append(None)
  return lines


def read_block(block):
  with open(block.path, "rb") as f:
    f.seek(block.start)
    return f.read(block.end - block.start)


def make_block(block, data=None):
  """Tokenizes, truncates and serializes one block; returns its number of sentences.

  Writes `block_paths`: each split's records sorted by pile (line order within a pile), then,
  atomically and last, the summary (counts and bytes per pile, statistics): a block is done exactly
  when its summary is there. ValueError "path:line: not valid UTF-8 ..." without skip_malformed.
  """
  config, tokenizer, varints = _worker
  if data is None:
    data = read_block(block)
  if block.start == 0 and data.startswith(BOM):
    data = data[len(BOM) :]  # A byte-order mark would glue itself to sentence 1.
  read_split = "eval" if block.mode == "eval" else "train"
  read = {split: _read_counts() for split in SPLITS}
  lines = _decode_lines(block, data, read[read_split])
  del data
  read[read_split]["lines"] += len(lines)
  sentences, numbers, splits = [], [], []
  for offset, line in enumerate(lines):
    if line is None:
      continue
    line = line.strip()
    if not line:
      read[read_split]["empty_lines"] += 1
      continue
    if block.mode == "hash":
      held_out = io_utils.unit_hash(config.seed, line) < config.eval_fraction
      splits.append("eval" if held_out else "train")
    else:
      splits.append(block.mode)
    sentences.append(line)
    numbers.append(block.first_line + offset)
  del lines
  start_id, end_id = config.boundary_ids
  piles = {split: collections.defaultdict(list) for split in SPLITS}
  stats = {split: _record_counts() for split in SPLITS}
  for begin in range(0, len(sentences), _TOKENIZE_BATCH):
    # A batch at a time: an Encoding (offsets, tokens, ...) weighs far more than its ids.
    batch = slice(begin, begin + _TOKENIZE_BATCH)
    encoded = tokenizer.encode_batch_fast(sentences[batch], add_special_tokens=False)
    for number, split, encoding in zip(numbers[batch], splits[batch], encoded):
      pieces = encoding.ids
      ids = [start_id] + pieces + [end_id]
      position = position_key(block.file_index, number)
      cut = truncate_ids(ids, config.max_seq_length, config.seed, position)
      _count(stats[split], ids, cut, pieces.count(config.unk_id), config.max_seq_length)
      pile = pile_of(config.seed, position, config.layouts[split].num_piles)
      piles[split][pile].append(make_example(cut, varints))
    del encoded
  del sentences
  records_path, summary_path = block_paths(config.parts_dir, block.index)
  summary = {"index": block.index, "splits": {}}
  total = 0
  with io_utils.atomic_path(records_path) as tmp, open(tmp, "wb") as f:
    for split in SPLITS:
      counts = np.zeros(config.layouts[split].num_piles, np.int64)
      sizes = np.zeros_like(counts)
      for pile in sorted(piles[split]):
        records = piles[split][pile]
        framed = b"".join(_FRAME.pack(len(r)) + r for r in records)
        f.write(framed)
        counts[pile], sizes[pile] = len(records), len(framed)
      total += int(sizes.sum())
      summary["splits"][split] = {
        "piles": _sparse(counts, sizes),
        "read": read[split],
        "records": stats[split],
      }
  summary["bytes_total"] = total
  io_utils.write_atomically(summary_path, json.dumps(summary) + "\n")
  return sum(stats[s]["sentences"] for s in SPLITS)


def _sparse(counts, sizes):
  """{pile: [records, bytes]} of the non-empty piles (a block touches few of many piles)."""
  return {str(int(p)): [int(counts[p]), int(sizes[p])] for p in np.flatnonzero(counts)}


def pile_tables(summaries, num_blocks, split, num_piles, total):
  """(counts int32 [blocks, piles], offsets int64 [blocks, piles + 1]) of a split, summing its
  counts into `total`; the summaries are read one at a time, so only the tables stay in memory.
  """
  counts = np.zeros((num_blocks, num_piles), np.int32)
  offsets = np.zeros((num_blocks, num_piles + 1), np.int64)
  for row, summary in enumerate(summaries):
    base = 0
    for split_name in SPLITS:
      piles = summary["splits"][split_name]["piles"]
      if split_name == split:
        for pile, (count, size) in piles.items():
          counts[row, int(pile)], offsets[row, int(pile) + 1] = count, size
        for part in ("read", "records"):
          add_counts(total, summary["splits"][split][part])
        break
      base += sum(size for _, size in piles.values())
    offsets[row] = np.cumsum(offsets[row]) + base
  return counts, offsets


def read_records(path, begin, end):
  if end <= begin:
    return []
  with io_utils.open_file(path, "rb") as f:
    f.seek(begin)
    data = f.read(end - begin)
  records, position = [], 0
  while position < len(data):
    (size,) = _FRAME.unpack_from(data, position)
    records.append(data[position + 4 : position + 4 + size])
    position += 4 + size
  return records


# ----------------------------------------------------------------------------
# Statistics (summed over blocks)
# ----------------------------------------------------------------------------


def _read_counts():
  return {"lines": 0, "empty_lines": 0, "malformed_lines": 0, "malformed_examples": []}


def _record_counts():
  return {
    "sentences": 0,
    "tokens": 0,
    "pieces": 0,
    "unk_pieces": 0,
    "truncated": 0,
    "truncated_pieces": 0,
    "lengths": {},  # length -> sentences (after truncation)
    "untruncated_lengths": {},
  }


def _count(stats, ids, cut, unk, max_seq_length):
  stats["sentences"] += 1
  stats["tokens"] += len(cut)
  stats["pieces"] += len(ids) - 2
  stats["unk_pieces"] += unk
  stats["truncated"] += len(ids) > max_seq_length
  stats["truncated_pieces"] += len(ids) - len(cut)
  for key, n in (("lengths", len(cut)), ("untruncated_lengths", len(ids))):
    stats[key][n] = stats[key].get(n, 0) + 1


def add_counts(total, part):
  """Adds a block's counts of one split (`_read_counts` and `_record_counts` fields) to `total`."""
  for key, value in part.items():
    if key == "malformed_examples":
      total.setdefault(key, []).extend(value[: 10 - len(total.get(key, []))])
    elif isinstance(value, dict):
      histogram = total.setdefault(key, {})
      for length, count in value.items():
        histogram[length] = histogram.get(length, 0) + count
    else:
      total[key] = total.get(key, 0) + value


def finish_stats(total):
  """data_stats.json's statistics of a split from its summed counts (`add_counts`)."""
  num, pieces = total.get("sentences", 0), total.get("pieces", 0)
  stats = {k: v for k, v in total.items() if k not in ("lengths", "untruncated_lengths")}
  for key in ("sentences", "tokens", "pieces", "unk_pieces", "truncated", "truncated_pieces"):
    stats.setdefault(key, 0)
  for key, value in _read_counts().items():
    stats.setdefault(key, value)
  stats["unk_rate"] = round(stats["unk_pieces"] / pieces, 6) if pieces else 0.0
  stats["truncated_fraction"] = round(stats["truncated"] / num, 6) if num else 0.0
  for key in ("lengths", "untruncated_lengths"):
    stats[key] = length_stats({int(k): v for k, v in total.get(key, {}).items()})
  return stats


def summary(stats):
  """The one-line report of data_stats.json's contents `stats` (create_pretraining_data.py's,
  beam_data.py's): each split's sentences, tokens, truncated and UNK rate, the seconds, reused."""
  out = {
    split: {k: stats[split][k] for k in ("sentences", "tokens", "truncated", "unk_rate")}
    for split in SPLITS
  }
  out["seconds"] = stats["seconds"]
  out["reused"] = stats.get("reused", False)
  return out


def length_stats(histogram):
  """{mean, max, percentiles (numpy's linear rule), histogram} of {length: count}."""
  if not histogram:
    return {"mean": 0.0, "max": 0, "percentiles": {}, "histogram": {}}
  values = np.array(sorted(histogram), np.int64)
  counts = np.array([histogram[v] for v in values], np.int64)
  num = int(counts.sum())
  ends = np.cumsum(counts)  # order statistics [ends[i-1], ends[i]) have value values[i]

  def order_statistic(k):
    return float(values[np.searchsorted(ends, k, side="right")])

  def percentile(p):
    position = (num - 1) * p / 100
    low = int(np.floor(position))
    high = min(low + 1, num - 1)
    a, b = order_statistic(low), order_statistic(high)
    return a + (position - low) * (b - a)

  top = int(values[-1])
  edges = [e for e in _HISTOGRAM_EDGES if e < top] + [top]
  bins = np.searchsorted(edges, values, side="left")
  binned = np.bincount(bins, weights=counts, minlength=len(edges))
  lower = [1] + [e + 1 for e in edges[:-1]]
  return {
    "mean": round(float((values * counts).sum() / num), 3),
    "max": top,
    "percentiles": {str(p): percentile(p) for p in _PERCENTILES},
    "histogram": {f"{lo}-{hi}": int(c) for lo, hi, c in zip(lower, edges, binned)},
  }


# ----------------------------------------------------------------------------
# Shards
# ----------------------------------------------------------------------------


def write_records(path, examples):
  """Writes serialized examples into one TFRecord file, atomically; returns their count."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  count = 0
  with io_utils.atomic_path(path) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for example in examples:
        writer.write(example)
        count += 1
  return count


def shuffle_units(pile_counts, max_records):
  """[(first pile, end pile)] joining consecutive piles while a unit stays within max_records; from
  the counts only, so the pile comment's argument holds.
  """
  units, begin, size = [], 0, 0
  for pile, count in enumerate(pile_counts):
    if pile > begin and size + count > max_records:
      units.append((begin, pile))
      begin, size = pile, 0
    size += int(count)
  units.append((begin, len(pile_counts)))
  return units


def shard_records(record_files, offsets, counts, layout, shard, seed, split, max_records):
  """Yields one shard's serialized Examples in their final order, one shuffle unit at a time."""
  split_key = SPLITS.index(split)
  first = shard * layout.piles_per_shard
  last = first + layout.piles_per_shard
  for begin, end in shuffle_units(counts[:, first:last].sum(axis=0), max_records):
    # Per pile, the corpus order (block order, line order within a block), whatever the blocks.
    by_pile = [[] for _ in range(begin, end)]
    for row, path in enumerate(record_files):
      block_records = read_records(path, offsets[row, first + begin], offsets[row, first + end])
      position = 0
      for pile in range(begin, end):
        count = counts[row, first + pile]
        by_pile[pile - begin].extend(block_records[position : position + count])
        position += count
    records = [record for pile in by_pile for record in pile]
    del by_pile
    order = np.random.default_rng([seed, split_key, shard, begin]).permutation(len(records))
    for i in order:
      yield records[i]
    del records


def remove_stale_shards(output_dir, files):
  """Removes the shards of another --num_shards, which a glob like train-* would pick up."""
  current = {f["file"] for f in files}
  for name in io_utils.listdir(output_dir):
    if _SHARD_RE.match(name) and name not in current:
      logging.info("removing stale shard %s", name)
      io_utils.remove(os.path.join(output_dir, name))


def piles_per_shard(max_records, num_shards, pile_records):
  """Piles per shard so that a pile holds at most about pile_records / 4 of max_records."""
  return max(1, -(-4 * max_records // (num_shards * pile_records)))

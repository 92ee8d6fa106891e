# coding=utf-8
"""Sentences -> sharded TFRecords for T-TA, biLM and uniLM pretraining.

Pipeline (DESIGN.md section 3):

  --input_file  (glob, comma list)
    -> Gutenberg .tar.xz / raw text: corpus.py (boilerplate, sentence split,
       normalization, dedup, held-out books) -> train.txt / eval.txt
    -> sentence files (one sentence per line): used as they are; held out by a
       seeded hash of the sentence unless --eval_file gives the eval set
    -> vocab: --vocab_file, or WordPiece learned from the TRAINING split only
       (--vocab_size), so no eval text leaks into the vocabulary
    -> tokenize in batches: [SOS] pieces [EOS]; longer sentences keep [SOS],
       the first max_seq_length-2 pieces and [EOS] (the authors' truncation)
    -> deterministic shuffle (--random_seed) -> sharded TFRecords.

Output directory:
  train-00000-of-00008.tfrecord ...   shuffled training sentences
  eval-00000-of-00001.tfrecord        shuffled held-out sentences (if any)
  vocab.txt                           the vocabulary the ids refer to
  data_stats.json                     counts, length statistics, args, files
  corpus/                             corpus.py output (raw inputs only)

One record per sentence (a `tf.train.Example`), UNPADDED, n = its length:
  input_ids   int64 list [n]  [SOS] pieces [EOS]
  input_mask  int64 list [n]  all ones (kept for BERT-style readers)
  length      int64 [1]       n
Padding, length bucketing and the objectives (MLM masking for the biLM,
next-token targets for the uniLM) are applied by input_pipeline.py, so one
data set serves all three model types and the biLM's masks change every epoch.
There is therefore no BERT-style --dupe_factor.

Malformed input: a line that is not valid UTF-8 raises ValueError naming
file:line, unless --skip_malformed, which skips such lines and counts them
(`malformed_lines` in data_stats.json). Empty lines are skipped and counted.

Every file is written to a temporary name and renamed into place;
data_stats.json is written last and records the arguments and a fingerprint
of the inputs, so a rerun with the same arguments finds a complete output and
returns at once (--force rebuilds).

Example:
  python create_pretraining_data.py \
    --input_file=/tmp/tta_corpus_librispeech/train.txt \
    --eval_file=/tmp/tta_corpus_librispeech/eval.txt \
    --vocab_size=8000 --output_dir=/tmp/tta_records_ls8k
"""

import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

import tokenization

# Bumped whenever the record format or the processing changes, so an output
# directory written by an older version is never reused as complete.
FORMAT_VERSION = 1

STATS_FILE = "data_stats.json"
VOCAB_FILE = "vocab.txt"
CORPUS_SUBDIR = "corpus"
SPLITS = ("train", "eval")
INPUT_FORMATS = ("auto", "sentences", "raw")

# Suffixes read as Gutenberg archives by corpus.py (its own _is_tar rule).
_TAR_RE = re.compile(r"\.(tar|tar\.xz|txz|tar\.gz|tgz|tar\.bz2|tbz2)$")
# Shards a previous run may have left behind with another --num_shards.
_SHARD_RE = re.compile(r"^(train|eval)-\d{5}-of-\d{5}\.tfrecord$")
# Sentences per tokenizer call: amortises the graph call, bounds memory.
_TOKENIZE_BATCH = 8192
# Length statistics reported in data_stats.json.
_PERCENTILES = (50, 90, 95, 99)
# Histogram edges (upper bounds, inclusive) matching input_pipeline's default
# buckets, so the stats show how much padding bucketing saves.
_HISTOGRAM_EDGES = (16, 32, 48, 64, 96, 128, 256, 512)
_PROGRESS_SECONDS = 15.0


def shard_name(split, index, num_shards):
  """Returns e.g. "train-00003-of-00008.tfrecord"."""
  return "%s-%05d-of-%05d.tfrecord" % (split, index, num_shards)


def expand_patterns(patterns):
  """Expands a comma-separated list (or list) of globs into sorted paths.

  Args:
    patterns: str ("a/*.txt,b.txt") or list of str.

  Returns:
    list of str: each pattern's matches sorted (local paths made absolute);
    patterns in the given order; duplicates removed (first one kept).

  Raises:
    ValueError: naming a pattern that matches no file.
  """
  if isinstance(patterns, str):
    patterns = patterns.split(",")
  paths = []
  for pattern in (p.strip() for p in patterns):
    if not pattern:
      continue
    matches = sorted(tf.io.gfile.glob(pattern))
    if not matches:
      raise ValueError("input pattern %r matches no file" % pattern)
    # Absolute local paths, so that data_stats.json (and the rerun check)
    # does not depend on the working directory.
    matches = [m if "://" in m else os.path.abspath(m) for m in matches]
    paths.extend(m for m in matches if m not in paths)
  return paths


class SentenceReadStats(object):
  """Counts of what `read_sentence_file` skipped."""

  def __init__(self):
    self.lines = 0
    self.empty_lines = 0
    self.malformed_lines = 0
    self.malformed_examples = []  # "file:line" of the first few, for the log.


def read_sentence_file(path, skip_malformed=False, stats=None):
  """Reads a one-sentence-per-line UTF-8 file.

  Lines are split on "\\n" only (not str.splitlines, which also splits on
  U+2028, \\x0b, ... and would make our line numbers disagree with editors'
  and corpus.py's); a trailing "\\r" and surrounding whitespace are removed.

  Args:
    path: file path (anything tf.io.gfile opens).
    skip_malformed: if True a line that is not valid UTF-8 is skipped and
      counted; if False it raises.
    stats: optional SentenceReadStats, updated in place.

  Returns:
    list of (line_number, sentence) with 1-based line numbers; empty lines
    are left out (and counted in `stats`).

  Raises:
    ValueError: "path:line: not valid UTF-8 ..." for a malformed line when
      skip_malformed is False.
  """
  stats = stats if stats is not None else SentenceReadStats()
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  if data.startswith(b"\xef\xbb\xbf"):
    data = data[3:]  # A byte-order mark would glue itself to sentence 1.
  raw_lines = data.split(b"\n")
  if raw_lines and not raw_lines[-1]:
    raw_lines.pop()  # The newline that ends the last line.
  try:
    # One decode of the whole file is far faster than one per line; the
    # per-line path below only runs when the file has a bad byte.
    lines = data.decode("utf-8").split("\n")[:len(raw_lines)]
  except UnicodeDecodeError:
    lines = []
    for number, raw in enumerate(raw_lines, 1):
      try:
        lines.append(raw.decode("utf-8"))
      except UnicodeDecodeError as e:
        where = "%s:%d" % (path, number)
        if not skip_malformed:
          raise ValueError(
              "%s: not valid UTF-8 (byte %r at column %d: %s); expected UTF-8 "
              "text, one sentence per line. Fix the file or pass "
              "--skip_malformed to skip and count such lines." %
              (where, raw[e.start:e.start + 1], e.start + 1,
               e.reason)) from None
        stats.malformed_lines += 1
        if len(stats.malformed_examples) < 10:
          stats.malformed_examples.append(where)
          logging.warning("%s: not valid UTF-8; line skipped", where)
        lines.append(None)
  result = []
  for number, line in enumerate(lines, 1):
    stats.lines += 1
    if line is None:
      continue
    line = line.strip()
    if not line:
      stats.empty_lines += 1
      continue
    result.append((number, line))
  return result


def _unit_hash(seed, text):
  """Deterministic uniform float in [0, 1) for (seed, text).

  Hashing the sentence (not its position) puts repeated sentences in the same
  split and does not depend on PYTHONHASHSEED or on input order.
  """
  digest = hashlib.blake2b(("%d\t%s" % (seed, text)).encode("utf-8"),
                           digest_size=8).digest()
  return int.from_bytes(digest, "big") / 2.0**64


def _sha256_file(path):
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    while True:
      block = f.read(1 << 22)
      if not block:
        break
      digest.update(block)
  return digest.hexdigest()


def _atomic_write_bytes(path, data):
  """Writes data to path via a temporary file in the same directory + rename."""
  tmp = "%s.tmp-%d" % (path, os.getpid())
  try:
    with tf.io.gfile.GFile(tmp, "wb") as f:
      f.write(data)
    tf.io.gfile.rename(tmp, path, overwrite=True)
  except BaseException:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.remove(tmp)
    raise


def _atomic_write_json(path, obj):
  text = json.dumps(obj, indent=2, sort_keys=True) + "\n"
  _atomic_write_bytes(path, text.encode("utf-8"))


def _write_vocab_file(tokens, path):
  """Writes a vocab atomically with tokenization.write_vocab's validation."""
  local_dir = tempfile.mkdtemp(prefix="tta_vocab_")
  try:
    local = os.path.join(local_dir, VOCAB_FILE)
    tokenization.write_vocab(tokens, local)  # Validates every token.
    with open(local, "rb") as f:
      _atomic_write_bytes(path, f.read())
  finally:
    for name in os.listdir(local_dir):
      os.remove(os.path.join(local_dir, name))
    os.rmdir(local_dir)


class _Progress(object):
  """Logs `what: done/total (rate/s), ETA` at most every _PROGRESS_SECONDS."""

  def __init__(self, what, total, unit="sentences"):
    self.what = what
    self.total = total
    self.unit = unit
    self.start = time.time()
    self.last = self.start

  def update(self, done, force=False):
    now = time.time()
    if not force and now - self.last < _PROGRESS_SECONDS:
      return
    self.last = now
    elapsed = max(now - self.start, 1e-9)
    rate = done / elapsed
    eta = (self.total - done) / rate if rate > 0 else float("inf")
    logging.info("%s: %d/%d %s (%.1f%%), %.0f %s/s, %.0f s elapsed, ETA %.0f s",
                 self.what, done, self.total, self.unit,
                 100.0 * done / max(self.total, 1), rate, self.unit, elapsed,
                 eta)


# ----------------------------------------------------------------------------
# Sentences: corpus.py for raw input, sentence files as they are.
# ----------------------------------------------------------------------------

# corpus.py defines absl flags at import time (--output_dir, --normalization,
# ...) with the same names as ours, so importing it into this process would
# raise DuplicateFlagError. It runs in a child Python instead, through its
# Python API (prepare_corpus), with its progress going to our stderr.
_CORPUS_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from absl import logging
logging.set_verbosity(logging.INFO)
import corpus
corpus.prepare_corpus(**json.loads(sys.argv[2]))
"""


def evenly_spaced(items, max_items):
  """At most max_items of items, evenly spaced and in order (all if None).

  A stride sample rather than a random one: deterministic without a seed,
  and it spans every book of the (book-ordered) training split.
  """
  if max_items is None or len(items) <= max_items:
    return items
  if max_items <= 0:
    raise ValueError("vocab_max_sentences must be positive, got %d" %
                     max_items)
  step = len(items) / max_items
  return [items[int(i * step)] for i in range(max_items)]


def run_corpus(raw_inputs, corpus_dir, normalization, eval_fraction, seed,
               max_books=None, force=False):
  """Runs corpus.prepare_corpus on raw inputs in a child process.

  Args:
    raw_inputs: list of paths (Gutenberg tar archives or raw text files).
    corpus_dir: where corpus.py writes train.txt, eval.txt, stats.json.
    normalization: "none" or "librispeech".
    eval_fraction: share of held-out books (tar) or sentences (text files).
    seed: corpus.py's held-out seed.
    max_books: read only this many books per archive (quick runs, tests).
    force: rebuild even if corpus_dir is complete for these arguments.

  Returns:
    dict: corpus.py's stats.json.

  Raises:
    RuntimeError: if corpus.py fails; its stderr went to ours.
  """
  kwargs = {
      "inputs": list(raw_inputs), "output_dir": corpus_dir,
      "normalization": normalization, "eval_fraction": eval_fraction,
      "seed": seed, "max_books": max_books, "force": force,
      # Plain raw files are prose, not sentence lines (those are read
      # directly, without corpus.py).
      "input_format": "paragraphs",
  }
  repo_dir = os.path.dirname(os.path.abspath(__file__))
  logging.info("corpus.py: %s -> %s", ", ".join(raw_inputs), corpus_dir)
  result = subprocess.run(
      [sys.executable, "-c", _CORPUS_CHILD, repo_dir, json.dumps(kwargs)],
      check=False)
  if result.returncode:
    raise RuntimeError("corpus.prepare_corpus failed (exit status %d) on %s; "
                       "see its log above." % (result.returncode, raw_inputs))
  with open(os.path.join(corpus_dir, "stats.json"), encoding="utf-8") as f:
    return json.load(f)


def _is_raw(path, input_format):
  if input_format == "auto":
    return bool(_TAR_RE.search(path))
  return input_format == "raw"


# ----------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------


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
      "input_mask": tf.train.Feature(
          int64_list=tf.train.Int64List(value=[1] * n)),
      "length": tf.train.Feature(int64_list=tf.train.Int64List(value=[n])),
  }
  return tf.train.Example(
      features=tf.train.Features(feature=feature)).SerializeToString()


def write_records(path, examples):
  """Writes serialized examples to one TFRecord file, atomically.

  Args:
    path: output path.
    examples: iterable of bytes (serialized tf.train.Example).

  Returns:
    int: number of records written.
  """
  tmp = "%s.tmp-%d" % (path, os.getpid())
  count = 0
  try:
    with tf.io.TFRecordWriter(tmp) as writer:
      for example in examples:
        writer.write(example)
        count += 1
    tf.io.gfile.rename(tmp, path, overwrite=True)
  except BaseException:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.remove(tmp)
    raise
  return count


def _length_stats(lengths):
  """Summary of a list of lengths: mean, percentiles, max, histogram."""
  if not lengths:
    return {"mean": 0.0, "max": 0, "percentiles": {}, "histogram": {}}
  array = np.asarray(lengths, np.int64)
  edges = [e for e in _HISTOGRAM_EDGES if e < array.max()] + [int(array.max())]
  counts = np.bincount(np.searchsorted(edges, array, side="left"),
                       minlength=len(edges))
  lower = [1] + [e + 1 for e in edges[:-1]]
  return {
      "mean": round(float(array.mean()), 3),
      "max": int(array.max()),
      "percentiles": {str(p): float(np.percentile(array, p))
                      for p in _PERCENTILES},
      "histogram": {"%d-%d" % (lo, hi): int(c)
                    for lo, hi, c in zip(lower, edges, counts)},
  }


def tokenize_sentences(tokenizer, sentences, max_seq_length, what="tokenize"):
  """Tokenizes, truncates and serializes sentences.

  Tokenization of batch i+1 (TF ops, which release the GIL) overlaps with
  truncating and serializing batch i (Python) on a second thread; on two
  cores that hides most of the serialization cost.

  Args:
    tokenizer: tokenization.FullTokenizer.
    sentences: list of str.
    max_seq_length: int >= 2; a longer sentence keeps [SOS], its first
      max_seq_length-2 pieces and [EOS].
    what: label for progress logging.

  Returns:
    (examples, stats): list of serialized Examples in input order, and a dict
    with sentences, tokens, pieces, unk_pieces, unk_rate, truncated,
    truncated_pieces, lengths (after truncation) and untruncated_lengths.
  """
  keep = max_seq_length - 1  # [SOS] + max_seq_length-2 pieces.
  unk_id = tokenizer.unk_id
  examples = []
  lengths = []
  untruncated = []
  unk = 0
  progress = _Progress(what, len(sentences))
  batches = [sentences[i:i + _TOKENIZE_BATCH]
             for i in range(0, len(sentences), _TOKENIZE_BATCH)]
  with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
    pending = batches and pool.submit(tokenizer.encode_batch, batches[0])
    for index in range(len(batches)):
      encoded = pending.result()
      if index + 1 < len(batches):
        pending = pool.submit(tokenizer.encode_batch, batches[index + 1])
      for ids in encoded:
        n = len(ids)
        untruncated.append(n)
        unk += ids.count(unk_id)
        if n > max_seq_length:
          ids = ids[:keep] + ids[-1:]
          n = max_seq_length
        lengths.append(n)
        examples.append(make_example(ids))
      progress.update(len(examples))
  if sentences:
    progress.update(len(examples), force=True)
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
  progress = _Progress("write %s" % split, len(examples), unit="records")
  done = 0
  for index, (begin, end) in enumerate(_shard_bounds(len(examples),
                                                      num_shards)):
    name = shard_name(split, index, num_shards)
    path = os.path.join(output_dir, name)
    count = write_records(path, (examples[i] for i in order[begin:end]))
    files.append({"file": name, "records": count,
                  "bytes": tf.io.gfile.stat(path).length})
    done += count
    progress.update(done)
  progress.update(done, force=True)
  return files


# ----------------------------------------------------------------------------
# The whole job
# ----------------------------------------------------------------------------


def _find_complete(output_dir, fingerprint):
  """Returns the stats of a complete output with this fingerprint, or None."""
  path = os.path.join(output_dir, STATS_FILE)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path, "r") as f:
      stats = json.load(f)
  except ValueError:
    return None
  if stats.get("fingerprint") != fingerprint:
    return None
  for info in stats.get("files", []) + [{"file": VOCAB_FILE,
                                         "bytes": stats.get("vocab_bytes")}]:
    path = os.path.join(output_dir, info["file"])
    if (not tf.io.gfile.exists(path) or
        tf.io.gfile.stat(path).length != info["bytes"]):
      return None
  return stats


def _boundary_tokens(vocab):
  """[SOS]/[EOS] when the vocab has them, else BERT's [CLS]/[SEP]."""
  if "[SOS]" in vocab and "[EOS]" in vocab:
    return ("[SOS]", "[EOS]")
  if "[CLS]" in vocab and "[SEP]" in vocab:
    logging.warning("the vocab has no [SOS]/[EOS] (a Google BERT vocab?); "
                    "sentences are framed by [CLS] ... [SEP] instead.")
    return ("[CLS]", "[SEP]")
  raise ValueError("the vocab has neither [SOS]/[EOS] nor [CLS]/[SEP] to "
                   "frame a sentence")


def create_pretraining_data(input_files,
                            output_dir,
                            vocab_file=None,
                            vocab_size=None,
                            do_lower_case=True,
                            normalization="none",
                            max_seq_length=128,
                            num_shards=8,
                            num_eval_shards=1,
                            eval_fraction=0.01,
                            eval_files=None,
                            random_seed=12345,
                            input_format="auto",
                            skip_malformed=False,
                            max_books=None,
                            vocab_learn_params=None,
                            vocab_max_sentences=None,
                            force=False):
  """Builds the TFRecord data set; see the module docstring for the layout.

  Args:
    input_files: comma-separated globs (str) or list of globs. Tar archives
      (Gutenberg) go through corpus.py; other files are one sentence per line
      (with input_format="raw" every input goes through corpus.py).
    output_dir: output directory (created).
    vocab_file: an existing vocab; exclusive with vocab_size.
    vocab_size: learn a WordPiece vocab of (at most about) this size from the
      training sentences.
    do_lower_case: lower-case and strip accents in the tokenizer (and when
      learning the vocab).
    normalization: corpus.py normalization for raw inputs ("none" or
      "librispeech"); sentence files must already be normalized.
    max_seq_length: longest record, [SOS] and [EOS] included.
    num_shards: training shards.
    num_eval_shards: eval shards.
    eval_fraction: held-out share: books of a tar (corpus.py), sentences of
      sentence files (by a seeded hash of the sentence). Ignored for
      sentence files when eval_files is given.
    eval_files: comma-separated globs or list: eval sentence files; then
      every sentence file of input_files is training data.
    random_seed: seed of the shuffles and of the held-out choice.
    input_format: "auto" (tar -> corpus.py, else sentences), "sentences" or
      "raw".
    skip_malformed: skip and count non-UTF-8 lines instead of raising.
    max_books: corpus.py reads only this many books per archive.
    vocab_learn_params: dict passed to tokenization.build_vocab's learner,
      e.g. {"lower_thresh": 2} for a tiny corpus.
    vocab_max_sentences: learn the vocab from an evenly spaced sample of at
      most this many training sentences (the learner is pure Python and
      takes ~13 min on the whole 774k-sentence corpus); None: all of them.
    force: rebuild even if a complete output with these arguments exists.

  Returns:
    dict: the contents of data_stats.json, plus "reused": True when an
    existing complete output was returned without work.

  Raises:
    ValueError: for bad arguments (naming the flag) or malformed input
      (naming file:line).
  """
  start = time.time()
  if (vocab_file is None) == (vocab_size is None):
    raise ValueError("give exactly one of --vocab_file and --vocab_size "
                     "(got vocab_file=%r, vocab_size=%r)" % (vocab_file,
                                                              vocab_size))
  if vocab_size is not None and vocab_size <= len(tokenization.SPECIAL_TOKENS):
    raise ValueError("--vocab_size must exceed the %d special tokens, got %d"
                     % (len(tokenization.SPECIAL_TOKENS), vocab_size))
  if max_seq_length < 3:
    raise ValueError("--max_seq_length must be >= 3 ([SOS], one piece, "
                     "[EOS]), got %d" % max_seq_length)
  if num_shards < 1 or num_eval_shards < 1:
    raise ValueError("--num_shards and --num_eval_shards must be >= 1, got "
                     "%d and %d" % (num_shards, num_eval_shards))
  if not 0 <= eval_fraction < 1:
    raise ValueError("--eval_fraction must be in [0, 1), got %r" %
                     eval_fraction)
  if input_format not in INPUT_FORMATS:
    raise ValueError("--input_format must be one of %s, got %r" %
                     (INPUT_FORMATS, input_format))
  inputs = expand_patterns(input_files)
  eval_inputs = expand_patterns(eval_files) if eval_files else []
  raw_inputs = [p for p in inputs if _is_raw(p, input_format)]
  sentence_inputs = [p for p in inputs if not _is_raw(p, input_format)]
  if normalization != "none" and sentence_inputs:
    raise ValueError(
        "--normalization=%s applies to raw inputs (corpus.py) only, but %s "
        "are sentence files, used as they are. Normalize them with corpus.py "
        "(--input_format=lines) or pass --normalization=none." %
        (normalization, ", ".join(sentence_inputs)))
  tf.io.gfile.makedirs(output_dir)

  # 1. Sentence files: corpus.py output for raw inputs, the rest as given.
  corpus_stats = None
  train_sources = list(sentence_inputs)  # Split by hash unless eval_inputs.
  eval_sources = list(eval_inputs)
  fixed_train = []
  if raw_inputs:
    corpus_dir = os.path.join(output_dir, CORPUS_SUBDIR)
    corpus_stats = run_corpus(raw_inputs, corpus_dir, normalization,
                              eval_fraction, random_seed, max_books, force)
    fixed_train.append(os.path.join(corpus_dir, "train.txt"))
    eval_sources.append(os.path.join(corpus_dir, "eval.txt"))
  split_by_hash = not eval_inputs and eval_fraction > 0

  args = {
      "input_files": inputs, "eval_files": eval_inputs,
      "vocab_file": vocab_file and os.path.abspath(vocab_file),
      "vocab_size": vocab_size, "do_lower_case": bool(do_lower_case),
      "normalization": normalization, "max_seq_length": max_seq_length,
      "num_shards": num_shards, "num_eval_shards": num_eval_shards,
      "eval_fraction": eval_fraction, "random_seed": random_seed,
      "input_format": input_format, "skip_malformed": bool(skip_malformed),
      "max_books": max_books, "vocab_learn_params": vocab_learn_params,
      "vocab_max_sentences": vocab_max_sentences,
  }
  # What the records depend on: the arguments, the exact bytes of every
  # sentence file read (corpus.py output included) and of the vocab.
  read_files = sorted(set(train_sources + fixed_train + eval_sources))
  fingerprint_src = {
      "format_version": FORMAT_VERSION, "args": args,
      "files": {p: _sha256_file(p) for p in read_files},
      "vocab_sha256": vocab_file and _sha256_file(vocab_file),
  }
  fingerprint = hashlib.sha256(
      json.dumps(fingerprint_src, sort_keys=True).encode("utf-8")).hexdigest()
  if not force:
    stats = _find_complete(output_dir, fingerprint)
    if stats is not None:
      logging.info("%s already holds a complete output for these arguments "
                   "(%d train, %d eval sentences); nothing to do (--force "
                   "rebuilds).", output_dir, stats["train"]["sentences"],
                   stats["eval"]["sentences"])
      stats["reused"] = True
      return stats
  # From here on the directory is being rewritten: without data_stats.json
  # an interrupted run can never be mistaken for a complete one.
  stats_path = os.path.join(output_dir, STATS_FILE)
  if tf.io.gfile.exists(stats_path):
    tf.io.gfile.remove(stats_path)

  # 2. Read.
  read_start = time.time()
  read_stats = {split: SentenceReadStats() for split in SPLITS}
  sentences = {split: [] for split in SPLITS}
  for path in train_sources:
    for _, sentence in read_sentence_file(path, skip_malformed,
                                          read_stats["train"]):
      if split_by_hash and _unit_hash(random_seed, sentence) < eval_fraction:
        sentences["eval"].append(sentence)
      else:
        sentences["train"].append(sentence)
  for split, paths in (("train", fixed_train), ("eval", eval_sources)):
    for path in paths:
      sentences[split].extend(
          s for _, s in read_sentence_file(path, skip_malformed,
                                           read_stats[split]))
  logging.info("read %d train and %d eval sentences from %d files (%d empty "
               "and %d malformed lines skipped) in %.1f s",
               len(sentences["train"]), len(sentences["eval"]),
               len(read_files),
               sum(s.empty_lines for s in read_stats.values()),
               sum(s.malformed_lines for s in read_stats.values()),
               time.time() - read_start)
  if not sentences["train"]:
    raise ValueError("no training sentences in %s" % (train_sources +
                                                      fixed_train))

  # 3. Vocab: from the training split only, so eval text stays unseen.
  vocab_path = os.path.join(output_dir, VOCAB_FILE)
  vocab_start = time.time()
  if vocab_file is not None:
    tokens = list(tokenization.load_vocab(vocab_file))
  else:
    vocab_sample = evenly_spaced(sentences["train"], vocab_max_sentences)
    logging.info("learning a WordPiece vocab of size %d from %d of %d "
                 "training sentences", vocab_size, len(vocab_sample),
                 len(sentences["train"]))
    tokens = tokenization.build_vocab(vocab_sample, vocab_size,
                                      do_lower_case=do_lower_case,
                                      learn_params=vocab_learn_params)
  _write_vocab_file(tokens, vocab_path)
  vocab_seconds = time.time() - vocab_start
  logging.info("vocab: %d tokens -> %s (%.1f s)", len(tokens), vocab_path,
               vocab_seconds)
  boundary = _boundary_tokens(set(tokens))
  tokenizer = tokenization.FullTokenizer(vocab_path, do_lower_case,
                                         boundary_tokens=boundary)

  # 4. Tokenize, shuffle, write.
  files = []
  split_stats = {}
  tokenize_seconds = 0.0
  for split, shards in (("train", num_shards), ("eval", num_eval_shards)):
    split_start = time.time()
    examples, split_stats[split] = tokenize_sentences(
        tokenizer, sentences[split], max_seq_length, what="tokenize " + split)
    sentences[split] = None  # Free the text before the next split.
    tokenize_seconds += time.time() - split_start
    rs = read_stats[split]
    split_stats[split].update(lines=rs.lines, empty_lines=rs.empty_lines,
                              malformed_lines=rs.malformed_lines,
                              malformed_examples=rs.malformed_examples)
    if not examples:
      logging.warning("no %s sentences; no %s shards written", split, split)
      continue
    t = split_stats[split]
    logging.info("%s: %d sentences, %d tokens, mean length %.1f, %d (%.2f%%) "
                 "truncated to %d, UNK rate %.4f%%", split, t["sentences"],
                 t["tokens"], t["lengths"]["mean"], t["truncated"],
                 100 * t["truncated_fraction"], max_seq_length,
                 100 * t["unk_rate"])
    files.extend(write_shards(output_dir, split, examples, shards,
                              random_seed))
    del examples

  # 5. Remove shards of earlier runs (another --num_shards) that a glob
  # like train-* would otherwise pick up with the new ones.
  current = {f["file"] for f in files}
  for name in tf.io.gfile.listdir(output_dir):
    if _SHARD_RE.match(name) and name not in current:
      logging.info("removing stale shard %s", name)
      tf.io.gfile.remove(os.path.join(output_dir, name))

  elapsed = time.time() - start
  special_ids = {t: tokenizer.vocab[t] for t in tokenization.SPECIAL_TOKENS
                 if t in tokenizer.vocab}
  stats = {
      "format_version": FORMAT_VERSION,
      "fingerprint": fingerprint,
      "args": args,
      "input_sha256": fingerprint_src["files"],
      "vocab_size": len(tokens),
      "vocab_bytes": tf.io.gfile.stat(vocab_path).length,
      "special_ids": special_ids,
      "boundary_tokens": list(boundary),
      "train": split_stats["train"],
      "eval": split_stats["eval"],
      "files": files,
      "corpus": corpus_stats and {k: corpus_stats.get(k) for k in
                                  ("train", "eval", "books", "sentences")},
      "seconds": {"total": round(elapsed, 1), "vocab": round(vocab_seconds, 1),
                  "tokenize": round(tokenize_seconds, 1)},
      "sentences_per_second": round(
          (split_stats["train"]["sentences"] + split_stats["eval"]["sentences"])
          / max(tokenize_seconds, 1e-9), 1),
  }
  _atomic_write_json(stats_path, stats)
  logging.info("wrote %d train + %d eval sentences (%d + %d tokens) in %d "
               "files to %s in %.1f s", stats["train"]["sentences"],
               stats["eval"]["sentences"], stats["train"]["tokens"],
               stats["eval"]["tokens"], len(files), output_dir, elapsed)
  return stats


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (BERT's names where BERT has them).

  Called from __main__ only: corpus.py and other modules define flags with
  the same names at import time, and absl refuses a second definition, so
  this module must stay importable (tests, other scripts) without them.
  """
  flags.DEFINE_string(
      "input_file", None,
      "Comma-separated globs: Gutenberg .tar.xz archives (cleaned by "
      "corpus.py) and/or UTF-8 files with one sentence per line.")
  flags.DEFINE_string("output_dir", None, "Where the TFRecords, vocab.txt "
                      "and data_stats.json go.")
  flags.DEFINE_string("vocab_file", None, "Existing vocab (one token per "
                      "line). Exclusive with --vocab_size.")
  flags.DEFINE_integer("vocab_size", None, "Learn a WordPiece vocab of this "
                       "size from the training split.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents "
                    "(uncased model).")
  flags.DEFINE_enum("normalization", "none", ("none", "librispeech"),
                    "corpus.py normalization of raw inputs.")
  flags.DEFINE_integer("max_seq_length", 128, "Longest sentence in tokens, "
                       "[SOS] and [EOS] included; longer ones are truncated.")
  flags.DEFINE_integer("num_shards", 8, "Number of training shards.")
  flags.DEFINE_integer("num_eval_shards", 1, "Number of eval shards.")
  flags.DEFINE_float("eval_fraction", 0.01, "Held-out share (books for a "
                     "tar archive, sentences for sentence files).")
  flags.DEFINE_string("eval_file", None, "Comma-separated globs of eval "
                      "sentence files; then --input_file sentence files are "
                      "all training data.")
  flags.DEFINE_integer("random_seed", 12345, "Seed of the shuffles and the "
                       "held-out choice.")
  flags.DEFINE_enum("input_format", "auto", INPUT_FORMATS,
                    "auto: tar archives are raw (corpus.py), other files are "
                    "sentences; or force one kind for all inputs.")
  flags.DEFINE_bool("skip_malformed", False, "Skip (and count) lines that "
                    "are not UTF-8 instead of failing with file:line.")
  flags.DEFINE_integer("max_books", None, "corpus.py reads only this many "
                       "books per archive (quick runs).")
  flags.DEFINE_integer("vocab_lower_thresh", None, "Minimum count of a "
                       "learned word piece (the learner's default is 10; "
                       "lower it for tiny corpora).")
  flags.DEFINE_integer("vocab_max_sentences", None, "Learn the vocab from an "
                       "evenly spaced sample of at most this many training "
                       "sentences (default: all).")
  flags.DEFINE_bool("force", False, "Rebuild even if --output_dir is "
                    "complete for these arguments.")


def main(argv):
  del argv  # Unused.
  for name in ("input_file", "output_dir"):
    if not FLAGS[name].value:
      raise app.UsageError("--%s is required" % name)
  learn_params = None
  if FLAGS.vocab_lower_thresh is not None:
    learn_params = {"lower_thresh": FLAGS.vocab_lower_thresh}
  stats = create_pretraining_data(
      FLAGS.input_file, FLAGS.output_dir, vocab_file=FLAGS.vocab_file,
      vocab_size=FLAGS.vocab_size, do_lower_case=FLAGS.do_lower_case,
      normalization=FLAGS.normalization, max_seq_length=FLAGS.max_seq_length,
      num_shards=FLAGS.num_shards, num_eval_shards=FLAGS.num_eval_shards,
      eval_fraction=FLAGS.eval_fraction, eval_files=FLAGS.eval_file,
      random_seed=FLAGS.random_seed, input_format=FLAGS.input_format,
      skip_malformed=FLAGS.skip_malformed, max_books=FLAGS.max_books,
      vocab_learn_params=learn_params,
      vocab_max_sentences=FLAGS.vocab_max_sentences, force=FLAGS.force)
  summary = {split: {k: stats[split][k] for k in
                     ("sentences", "tokens", "truncated", "unk_rate")}
             for split in SPLITS}
  summary["seconds"] = stats["seconds"]
  summary["reused"] = stats.get("reused", False)
  print(json.dumps(summary, indent=2, sort_keys=True))


if __name__ == "__main__":
  define_flags()
  app.run(main)

"""The pretraining data set's library: sentences -> vocab -> blocks of records -> sharded
TFRecords (docs/DESIGN.md §3.1, §5.2); pretraining/data_job.py runs it as a job (params,
identity, parts, merge, resume).

The stages, each on plain arguments: `prepare_sources` (corpus.py on raw inputs), `scan_sources`
(every sentence file scanned and cut into blocks), `make_vocab`, `run_blocks` (the workers write
each block's records), `assemble` (the shards from every block). Memory is bounded by constants,
and the output is the same for any number of workers or blocks. No TensorFlow at import: spawned
workers import this module again.
"""

import contextlib
import dataclasses
import json
import os
import tempfile
import time
from typing import Optional

from absl import logging

from pretraining import pretraining_records
from pretraining import sentence_files
from text import corpus
from util import interrupts
from util import io_utils
from util import progress

# Bumped whenever the record format or the processing changes, so an output
# directory written by an older version is never reused as complete.
# 2: sentence files are held out by io_utils.unit_hash (sha256, as corpus.py)
# instead of a blake2b hash of our own.
# 3: over-long sentences are cut at random from the front or the back (the
# authors' rule, `pretraining_records.truncate_ids`) instead of keeping their first pieces.
# 4: streamed: records go to shards by a seeded hash of their position and are shuffled pile by
# pile (pretraining_records.pile_of); truncation is seeded by the position, not the sentence;
# the vocab learner reads a seeded sample of lines.
FORMAT_VERSION = 4

# The output directory: the records' stats and identity (written by data_job, read by training),
# the vocab, and corpus.py's sentence files of the raw inputs.
STATS_FILE = "data_stats.json"
VOCAB_FILE = "vocab.txt"
CORPUS_SUBDIR = "corpus"
# The shards written so far by `assemble` (its resume), in the directory it is given.
ASSEMBLED_FILE = "assembled.json"
INPUT_FORMATS = ("auto", "sentences", "raw")

# Bytes of (decompressed) text per block: the unit of work of a worker, of a resume and of a
# job's share. Fixed, so that the blocks never depend on the number of workers or jobs (and the
# output does not depend on the blocks at all: see pretraining_records). A worker holds one
# block's text and records, a few times this.
BLOCK_BYTES = 8 << 20
# Records shuffled in memory at once when a shard is assembled (pretraining_records.shuffle_units).
PILE_RECORDS = 1 << 17


def expand_inputs(patterns):
  """`io_utils.expand_globs`, a directory standing for the files under it (sorted, hidden names
  skipped), as Wikipedia extractions ship (`AA/wiki_00`, ...).
  """
  paths = []
  for path in io_utils.expand_globs(patterns):
    if "://" in path or not os.path.isdir(path):
      # Scanned, then read again by the workers (seeking): a pipe would be found empty.
      io_utils.check_input_file(path, read_twice=True)
      paths.append(path)
      continue
    found = []
    for directory, subdirs, names in os.walk(path):
      subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
      found.extend(os.path.join(directory, n) for n in sorted(names) if not n.startswith("."))
    if not found:
      raise ValueError(f"input directory {path} holds no file")
    paths.extend(p for p in found if p not in paths)
  return paths


# ----------------------------------------------------------------------------
# Sources: corpus.py on the raw inputs, then every sentence file scanned (sentence_files)
# ----------------------------------------------------------------------------


def run_corpus(
  raw_inputs, corpus_dir, normalization, eval_fraction, seed, max_books=None, force=False
):
  """corpus.prepare_corpus on raw inputs (Gutenberg archives or raw text) into corpus_dir; returns
  its stats.json. eval_fraction: share of held-out books (archives) or sentences (text files).
  """
  logging.info("corpus.py: %s -> %s", ", ".join(raw_inputs), corpus_dir)
  # Plain raw files are prose, not sentence lines (those are read directly,
  # without corpus.py).
  return corpus.prepare_corpus(
    list(raw_inputs),
    corpus_dir,
    normalization=normalization,
    eval_fraction=eval_fraction,
    seed=seed,
    max_books=max_books,
    force=force,
    input_format="paragraphs",
  )


def _is_raw(path, input_format):
  if input_format == "auto":
    return corpus.is_tar(path)
  return input_format == "raw"


@dataclasses.dataclass
class Sources:
  """The sentence files in processing order with their modes ("hash": split by a seeded hash of each
  sentence; "train" or "eval" as a whole) and whether the user gave them (then a file without a
  sentence is refused); corpus.py's stats.json, or None without raw inputs.
  """

  files: list  # [(path, mode, given)]
  corpus_stats: Optional[dict]

  def paths(self):
    return sorted({path for path, _, _ in self.files})

  def train_paths(self):
    """The files of training sentences (all but the held-out ones), in processing order."""
    return [path for path, mode, _ in self.files if mode != "eval"]


def prepare_sources(
  input_files,
  eval_files,
  output_dir,
  *,
  input_format,
  normalization,
  eval_fraction,
  seed,
  max_books,
  force,
):
  """The `Sources` of expanded `input_files` and `eval_files` (lists of paths), after corpus.py on
  the raw inputs (into output_dir/corpus); sentence files are used as they are. input_format: one
  of INPUT_FORMATS; eval_fraction: the held-out share (books of an archive, sentences of a file
  hashed with `seed`) when no eval file is given."""
  raw = [p for p in input_files if _is_raw(p, input_format)]
  sentence_files = [p for p in input_files if p not in raw]
  if normalization != "none" and sentence_files:
    raise ValueError(
      f"--normalization={normalization} applies to raw inputs "
      f"(corpus.py) only, but {', '.join(sentence_files)} are sentence "
      "files, used as they are. Normalize them with corpus.py "
      "(--input_format=lines) or pass --normalization=none."
    )
  split_by_hash = not eval_files and eval_fraction > 0
  files = [(p, "hash" if split_by_hash else "train", True) for p in sentence_files]
  corpus_stats = None
  if raw:
    corpus_dir = os.path.join(output_dir, CORPUS_SUBDIR)
    corpus_stats = run_corpus(raw, corpus_dir, normalization, eval_fraction, seed, max_books, force)
    files.append((os.path.join(corpus_dir, "train.txt"), "train", False))
    files.append((os.path.join(corpus_dir, "eval.txt"), "eval", False))
  files.extend((p, "eval", True) for p in eval_files)
  return Sources(files, corpus_stats)


def scan_sources(sources, check_utf8):
  """(scans {path: FileScan}, blocks in processing order), every file scanned before any slow work.
  ValueError for a malformed line (with `check_utf8`), a file given without a sentence, or no
  training sentence.
  """
  start = time.time()
  scans = {}
  for path in sources.paths():
    scans[path] = sentence_files.scan_sentence_file(path, BLOCK_BYTES, check_utf8=check_utf8)
  blocks = []
  for file_index, (path, mode, given) in enumerate(sources.files):
    scan = scans[path]
    if given and not scan.has_text:
      raise ValueError(f"{path}: no sentence (the file is empty or holds blank lines only)")
    worker_reads = "://" not in path and sentence_files.compression(path) is None
    for begin, end, first_line in scan.blocks:
      blocks.append(
        pretraining_records.Block(
          len(blocks), file_index, path, mode, begin, end, first_line, worker_reads
        )
      )
  if not any(scans[p].has_text for p in sources.train_paths()):
    raise ValueError(f"no training sentences in {sources.train_paths()}")
  total = sum(os.path.getsize(p) for p in scans if "://" not in p)
  logging.info(
    "scanned %d files (%.1f MB, %d lines) in %.1f s: %d blocks",
    len(scans),
    total / 1e6,
    sum(s.lines for s in scans.values()),
    time.time() - start,
    len(blocks),
  )
  return scans, blocks


def split_layouts(scans, sources, eval_fraction, num_shards, num_eval_shards):
  """Each split's `Layout`: piles per shard from the scan's line counts (a bound of the split's
  records), so a pile holds about PILE_RECORDS / 4 records at most."""
  lines = {mode: 0 for mode in ("hash", "train", "eval")}
  for path, mode, _ in sources.files:
    lines[mode] += scans[path].lines
  # The held-out share of hashed lines is binomial: twice its mean (plus a margin) is a bound
  # that holds but for a vanishing chance, and then a pile is only larger than planned.
  held_out = min(lines["hash"], int(2 * eval_fraction * lines["hash"]) + 1000)
  bounds = {"train": lines["hash"] + lines["train"], "eval": held_out + lines["eval"]}
  found = {}
  for split, shards in (("train", num_shards), ("eval", num_eval_shards)):
    found[split] = pretraining_records.Layout(
      shards, pretraining_records.piles_per_shard(bounds[split], shards, PILE_RECORDS)
    )
  return found


# ----------------------------------------------------------------------------
# Vocab
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class VocabSource:
  """Where the records' vocab comes from (`make_vocab`): a file, or WordPiece learned."""

  # An existing vocab (one token per line), copied as it is; None: learned.
  vocab_file: Optional[str]
  # The learned vocab's size (at most about), with vocab_file None.
  vocab_size: Optional[int]
  # Lower-case and strip accents before learning (an uncased model).
  do_lower_case: bool
  # tokenization.build_vocab's learner options, e.g. {"lower_thresh": 2}; None: its defaults.
  learn_params: Optional[dict]
  # Learn from a seeded sample of about this many training lines; None: all of them.
  max_sentences: Optional[int]


def vocab_sample(blocks, scans, sources, max_sentences, seed, eval_fraction):
  """A seeded sample of the training sentences for the vocab learner (a generator).

  Hash threshold, not a reservoir: each line kept with probability max_sentences / training
  lines, from a generator seeded with the block's position, so it needs no memory and is the same
  in every job. Held-out sentences are left out.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top

  lines = sum(scans[p].lines for p in set(sources.train_paths()))
  rate = 1.0 if max_sentences is None else min(1.0, max_sentences / lines)
  train_blocks = [b for b in blocks if b.mode != "eval"]
  for block, data in sentence_files.block_data(train_blocks, read_all=True):
    if block.start == 0 and data.startswith(pretraining_records.BOM):
      data = data[len(pretraining_records.BOM) :]
    raw_lines = data.split(b"\n")
    keep = np.random.default_rng([seed, block.file_index, block.first_line]).random(len(raw_lines))
    for raw, u in zip(raw_lines, keep):
      if u >= rate:
        continue
      try:
        sentence = raw.decode("utf-8").strip()
      except UnicodeDecodeError:
        continue  # Malformed lines are refused by the scan, or skipped.
      if not sentence:
        continue
      if block.mode == "hash" and io_utils.unit_hash(seed, sentence) < eval_fraction:
        continue
      yield sentence


def make_vocab(source, blocks, scans, sources, vocab_path, seed, eval_fraction):
  """(tokens in id order, seconds) of vocab_path: a copy of `source`'s (`VocabSource`) vocab_file,
  or WordPiece learned on the training split only (held out as `scan_sources`' blocks are, by
  `seed` and `eval_fraction`).
  """
  import tokenization  # pylint: disable=g-import-not-at-top

  start = time.time()
  if source.vocab_file is not None:
    tokens = list(tokenization.load_vocab(source.vocab_file))
  else:
    logging.info(
      "learning a WordPiece vocab of size %d from %s training sentences",
      source.vocab_size,
      "all" if source.max_sentences is None else f"about {source.max_sentences}",
    )
    tokens = tokenization.build_vocab(
      vocab_sample(blocks, scans, sources, source.max_sentences, seed, eval_fraction),
      source.vocab_size,
      do_lower_case=source.do_lower_case,
      learn_params=source.learn_params,
    )
  tokenization.write_vocab(tokens, vocab_path)
  seconds = time.time() - start
  logging.info("vocab: %d tokens -> %s (%.1f s)", len(tokens), vocab_path, seconds)
  return tokens, seconds


def load_vocab(vocab_path):
  """(OrderedDict token -> id, (start token, end token)) of the records' vocab, checked, without a
  graph tokenizer; ValueError for a malformed vocab or one without [UNK] or [PAD].
  """
  import tokenization  # pylint: disable=g-import-not-at-top

  vocab = tokenization.load_vocab(vocab_path)
  for required in ("[UNK]", "[PAD]"):
    if required not in vocab:
      raise ValueError(f"{vocab_path}: the vocab has no {required} token; the tokenizer needs it.")
  boundary = tokenization.boundary_tokens(vocab)
  if boundary != ("[SOS]", "[EOS]"):
    logging.warning(
      "the vocab has no [SOS]/[EOS] (a Google BERT vocab?); "
      "sentences are framed by %s ... %s instead.",
      *boundary,
    )
  return vocab, boundary


# ----------------------------------------------------------------------------
# Blocks: each one's records, written by the workers
# ----------------------------------------------------------------------------


def unfinished_blocks(part_dir, blocks):
  """The blocks of `blocks` whose output in `part_dir` is missing or cut short."""
  return [b for b in blocks if pretraining_records.read_block_summary(part_dir, b.index) is None]


@contextlib.contextmanager
def worker_dir(part_dir):
  """Where the workers write their blocks: `part_dir` itself if it is local; for a remote one a
  local temporary directory whose finished blocks the parent moves into it (`publish_block`): a
  worker is a process of its own, and TensorFlow's ram:// (the tests' bucket) is not shared
  between processes; the workers need no TensorFlow either."""
  if not io_utils.is_remote(part_dir):
    yield part_dir
    return
  with tempfile.TemporaryDirectory(prefix="tta-blocks-") as local_dir:
    yield local_dir


def publish_block(block_dir, part_dir, index):
  """Moves block `index` from `block_dir` into `part_dir` (if they differ): its records, then its
  summary, which marks it done (`pretraining_records.read_block_summary`)."""
  if block_dir == part_dir:
    return
  for local, remote in zip(
    pretraining_records.block_paths(block_dir, index),
    pretraining_records.block_paths(part_dir, index),
  ):
    io_utils.copy_file(local, remote)
    os.remove(local)


def run_blocks(blocks, part_dir, block_dir, config, num_workers):
  """Writes the records of each of `blocks` not yet in `part_dir` (`unfinished_blocks`) with
  `num_workers` processes of `config` (`worker_config`), through `block_dir` (`worker_dir`); returns
  the seconds taken."""
  start = time.time()
  todo = unfinished_blocks(part_dir, blocks)
  logging.info(
    "%d of %d blocks to do (%d done before), %d worker(s)",
    len(todo),
    len(blocks),
    len(blocks) - len(todo),
    num_workers,
  )
  bar = progress.Progress("records", total=len(todo), unit="blocks")
  if num_workers == 1 or len(todo) <= 1:
    pretraining_records.init_worker(config)
    for block, data in sentence_files.block_data(todo, read_all=False):
      pretraining_records.make_block(block, data)
      publish_block(block_dir, part_dir, block.index)
      bar.update(1)
    return time.time() - start
  with interrupts.worker_pool(num_workers, pretraining_records.init_worker, (config,)) as pool:
    # At most two blocks per worker in flight: the parent's memory stays a few blocks.
    made = pool.imap(
      pretraining_records.make_block,
      sentence_files.block_data(todo, read_all=False),
      in_flight=2 * num_workers,
    )
    # Results come in the order of `todo` (block_data's order).
    for block, _ in zip(todo, made):
      publish_block(block_dir, part_dir, block.index)
      bar.update(1)
  return time.time() - start


# ----------------------------------------------------------------------------
# Assembly: the shards from every job's blocks
# ----------------------------------------------------------------------------


def assemble(output_dir, state_dir, located, layouts, seed):
  """Writes into `output_dir` the shards not yet written (per state_dir/ASSEMBLED_FILE) from the
  blocks `located` ([(directory, block index)] in order), laid out by `layouts` ({split: Layout})
  and shuffled with `seed`: (files [{"file", "records", "bytes"}], {split: stats}).

  Memory: one shuffle unit (at most about PILE_RECORDS records) and the pile tables.
  """
  state_path = os.path.join(state_dir, ASSEMBLED_FILE)
  assembled = io_utils.read_json_file(state_path) if io_utils.exists(state_path) else {}
  record_files = [pretraining_records.block_paths(part, index)[0] for part, index in located]
  files, split_stats = [], {}
  for split in pretraining_records.SPLITS:
    layout, total = layouts[split], {}
    counts, offsets = pretraining_records.pile_tables(
      (pretraining_records.read_block_summary(part, index) for part, index in located),
      len(located),
      split,
      layout.num_piles,
      total,
    )
    split_stats[split] = pretraining_records.finish_stats(total)
    if not split_stats[split]["sentences"]:
      logging.warning("no %s sentences; no %s shards written", split, split)
      continue
    bar = progress.Progress(f"write {split}", total=split_stats[split]["sentences"], unit="records")
    for shard in range(layout.num_shards):
      name = pretraining_records.shard_name(split, shard, layout.num_shards)
      path = os.path.join(output_dir, name)
      entry = assembled.get(name)
      if not (entry and io_utils.file_size(path) == entry["bytes"]):
        records = pretraining_records.shard_records(
          record_files, offsets, counts, layout, shard, seed, split, PILE_RECORDS
        )
        count = pretraining_records.write_records(path, records)
        entry = {"file": name, "records": count, "bytes": io_utils.file_size(path)}
        assembled[name] = entry
        io_utils.write_atomically(state_path, json.dumps(assembled, indent=2) + "\n")
      files.append(entry)
      bar.update(entry["records"])
    del counts, offsets
  return files, split_stats


def worker_config(
  vocab_path,
  layouts,
  block_dir,
  *,
  do_lower_case,
  max_seq_length,
  seed,
  eval_fraction,
  skip_malformed,
):
  """The `pretraining_records.WorkerConfig` of the workers that write blocks into `block_dir`."""
  import tokenization  # pylint: disable=g-import-not-at-top

  vocab, boundary = load_vocab(vocab_path)
  return pretraining_records.WorkerConfig(
    tokenizer_json=tokenization.host_tokenizer(vocab, do_lower_case).to_str(),
    boundary_ids=tuple(vocab[t] for t in boundary),
    unk_id=vocab["[UNK]"],
    vocab_size=len(vocab),
    max_seq_length=max_seq_length,
    seed=seed,
    eval_fraction=eval_fraction,
    layouts=layouts,
    skip_malformed=skip_malformed,
    parts_dir=block_dir,
  )

"""The pretraining data set: sentences -> vocab -> sharded TFRecords in one output directory.

The streaming job (scan, vocab, blocks, assembly; docs/DESIGN.md §3.1, §5.2): memory bounded by
constants, and the same output for any number of workers, after a kill and a resume, and from N
merged jobs. No TensorFlow at import: spawned workers import this module again.
"""

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
import time
from typing import Optional

from absl import logging

from pretraining import pretraining_records
from pretraining import sentence_files
from text import corpus
from text import normalization as normalization_lib
from util import cli
from util import interrupts
from util import io_utils
from util import machine
from util import parts
from util import progress
from util import runs

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

STATS_FILE = "data_stats.json"
VOCAB_FILE = "vocab.txt"
CORPUS_SUBDIR = "corpus"
# The unfinished work: one directory per job (blocks' records, vocab), and the assembly's state.
PARTS_SUBDIR = "parts"
INPUT_FORMATS = ("auto", "sentences", "raw")

# Bytes of (decompressed) text per block: the unit of work of a worker, of a resume and of a
# job's share. Fixed, so that the blocks never depend on the number of workers or jobs (and the
# output does not depend on the blocks at all: see pretraining_records). A worker holds one
# block's text and records, a few times this.
BLOCK_BYTES = 8 << 20
# Records shuffled in memory at once when a shard is assembled (pretraining_records.shuffle_units).
PILE_RECORDS = 1 << 17


# ----------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DataParams:
  """What the records depend on: the arguments of `create_pretraining_data` and the command's
  flags (`cli.param`: one statement of each name, default and help), checked on construction.

  Recorded as "args" in data_stats.json and part of the fingerprint: input globs are expanded to
  absolute paths, vocab_file is made absolute.
  """

  input_files: str = cli.param(
    "Comma-separated globs (or a list) of files or directories (every file under them): "
    "Gutenberg .tar.xz archives (cleaned by corpus.py) and/or UTF-8 files with one sentence per "
    "line, plain or .gz/.bz2/.xz (with --input_format=raw every input goes through corpus.py).",
    flag="input_file",
    io=cli.INPUT,
  )
  eval_files: str = cli.param(
    "Comma-separated globs (or a list) of eval sentence files; then --input_file sentence files "
    "are all training data.",
    None,
    flag="eval_file",
    io=cli.INPUT,
  )
  vocab_file: str = cli.param(
    "Existing vocab (one token per line). Exclusive with --vocab_size.", None, io=cli.INPUT
  )
  vocab_size: int = cli.param(
    "Learn a WordPiece vocab of (at most about) this size from the training split.", None
  )
  do_lower_case: bool = cli.param(
    "Lower-case and strip accents in the tokenizer and the vocab learner (uncased model).", True
  )
  normalization: str = cli.param(
    "corpus.py normalization of raw inputs; sentence files must already be normalized.",
    "none",
    normalization_lib.NORMALIZATIONS,
  )
  max_seq_length: int = cli.param(
    "Longest sentence in tokens, [SOS] and [EOS] included; longer ones are truncated.", 128
  )
  num_shards: int = cli.param("Number of training shards.", 8)
  num_eval_shards: int = cli.param("Number of eval shards.", 1)
  eval_fraction: float = cli.param(
    "Held-out share: books of a tar archive (corpus.py), sentences of sentence files (by a "
    "seeded hash of the sentence); ignored for sentence files when --eval_file is given.",
    0.01,
  )
  random_seed: int = cli.param(
    "Seed of the shuffles, the held-out choice and the truncation cuts.", 12345
  )
  input_format: str = cli.param(
    "auto: tar archives are raw (corpus.py), other files are sentences; or force one kind for "
    "all inputs.",
    "auto",
    INPUT_FORMATS,
  )
  skip_malformed: bool = cli.param(
    "Skip (and count) lines that are not UTF-8 instead of failing with file:line.", False
  )
  max_books: int = cli.param("corpus.py reads only this many books per archive (quick runs).", None)
  # tokenization.build_vocab's learner options, e.g. {"lower_thresh": 2} for a tiny corpus.
  vocab_learn_params: Optional[dict] = cli.param(
    "Minimum count of a learned word piece (the learner's default is 10; lower it for tiny "
    "corpora).",
    None,
    flag="vocab_lower_thresh",
    kind=int,
    convert=lambda count: {"lower_thresh": count},
  )
  vocab_max_sentences: int = cli.param(
    "Learn the vocab from a seeded sample of about this many training lines (each line kept "
    "with probability this / the training lines; the learner is slow on a whole corpus); "
    "default: all.",
    None,
  )

  def __post_init__(self):
    """Expands the globs; raises ValueError naming the flag of a bad argument."""
    # Frozen: the canonical forms are set once, here.
    # The globs as given, no field (not in the fingerprint) but for the output check: a directory
    # given is read whole, so an output inside it is refused before the run that writes it, not by
    # the re-run that would read it back (`run`).
    object.__setattr__(
      self, "given_inputs", [("input_file", self.input_files), ("eval_file", self.eval_files)]
    )
    object.__setattr__(self, "input_files", _expand_inputs(self.input_files))
    eval_files = _expand_inputs(self.eval_files) if self.eval_files else []
    object.__setattr__(self, "eval_files", eval_files)
    object.__setattr__(self, "vocab_file", self.vocab_file and io_utils.absolute(self.vocab_file))
    object.__setattr__(self, "do_lower_case", bool(self.do_lower_case))
    object.__setattr__(self, "skip_malformed", bool(self.skip_malformed))
    if (self.vocab_file is None) == (self.vocab_size is None):
      raise ValueError(
        f"give exactly one of --vocab_file and --vocab_size (got "
        f"vocab_file={self.vocab_file!r}, vocab_size={self.vocab_size!r})"
      )
    import tokenization  # pylint: disable=g-import-not-at-top

    num_special = len(tokenization.SPECIAL_TOKENS)
    if self.vocab_size is not None and self.vocab_size <= num_special:
      raise ValueError(
        f"--vocab_size must exceed the {num_special} special tokens, got {self.vocab_size}"
      )
    if self.max_seq_length < 3:
      raise ValueError(
        f"--max_seq_length must be >= 3 ([SOS], one piece, [EOS]), got {self.max_seq_length}"
      )
    if self.num_shards < 1 or self.num_eval_shards < 1:
      raise ValueError(
        "--num_shards and --num_eval_shards must be >= 1, got "
        f"{self.num_shards} and {self.num_eval_shards}"
      )
    if not 0 <= self.eval_fraction < 1:
      raise ValueError(f"--eval_fraction must be in [0, 1), got {self.eval_fraction!r}")
    if self.input_format not in INPUT_FORMATS:
      raise ValueError(f"--input_format must be one of {INPUT_FORMATS}, got {self.input_format!r}")
    if self.vocab_max_sentences is not None and self.vocab_max_sentences <= 0:
      raise ValueError(f"--vocab_max_sentences must be positive, got {self.vocab_max_sentences}")


@dataclasses.dataclass(frozen=True)
class RunParams:
  """How the job runs, not what it makes (none of it changes a byte of the output)."""

  num_workers: int = cli.param(
    "Processes that tokenize and serialize (default: the cores this process may use); the output "
    "is the same for any number.",
    None,
  )
  num_jobs: int = cli.param(
    "Split the work into this many jobs (machines: a Slurm array, indexed jobs), each run with "
    "its --job_id into the same --output_dir; then one run with --merge assembles the shards.",
    1,
  )
  job_id: int = cli.param("This job's part, 0 <= --job_id < --num_jobs.", 0)
  merge: bool = cli.param(
    "Assemble the shards and data_stats.json from the --num_jobs finished parts in --output_dir "
    "(checks that each is present, complete and of this job).",
    False,
  )
  overwrite: bool = cli.param(
    "Remove the unfinished parts of another job in --output_dir and start over.", False
  )

  def __post_init__(self):
    if self.num_workers is not None and self.num_workers < 1:
      raise ValueError(f"--num_workers must be >= 1, got {self.num_workers}")
    if self.num_jobs < 1 or not 0 <= self.job_id < self.num_jobs:
      raise ValueError(
        f"--job_id must be in [0, --num_jobs) and --num_jobs >= 1, got --job_id={self.job_id} "
        f"--num_jobs={self.num_jobs}"
      )
    if self.merge and self.job_id:
      raise ValueError("--merge assembles every job's part: do not give --job_id with it")


def _expand_inputs(patterns):
  """`io_utils.expand_globs`, a directory standing for the files under it (sorted, hidden names
  skipped), as Wikipedia extractions ship (`AA/wiki_00`, ...).
  """
  paths = []
  for path in io_utils.expand_globs(patterns):
    if "://" in path or not os.path.isdir(path):
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
class _Sources:
  """The sentence files in processing order with their modes ("hash": split by a seeded hash of each
  sentence; "train" or "eval" as a whole) and whether the user gave them (then a file without a
  sentence is refused); corpus.py's stats.json, or None without raw inputs.
  """

  files: list  # [(path, mode, given)]
  corpus_stats: Optional[dict]

  def paths(self):
    return sorted({path for path, _, _ in self.files})


def _prepare_sources(args, output_dir, force):
  """The `_Sources`, after corpus.py on the raw inputs; sentence files are used as they are."""
  raw = [p for p in args.input_files if _is_raw(p, args.input_format)]
  sentence_files = [p for p in args.input_files if p not in raw]
  if args.normalization != "none" and sentence_files:
    raise ValueError(
      f"--normalization={args.normalization} applies to raw inputs "
      f"(corpus.py) only, but {', '.join(sentence_files)} are sentence "
      "files, used as they are. Normalize them with corpus.py "
      "(--input_format=lines) or pass --normalization=none."
    )
  split_by_hash = not args.eval_files and args.eval_fraction > 0
  files = [(p, "hash" if split_by_hash else "train", True) for p in sentence_files]
  corpus_stats = None
  if raw:
    corpus_dir = os.path.join(output_dir, CORPUS_SUBDIR)
    corpus_stats = run_corpus(
      raw,
      corpus_dir,
      args.normalization,
      args.eval_fraction,
      args.random_seed,
      args.max_books,
      force,
    )
    files.append((os.path.join(corpus_dir, "train.txt"), "train", False))
    files.append((os.path.join(corpus_dir, "eval.txt"), "eval", False))
  files.extend((p, "eval", True) for p in args.eval_files)
  return _Sources(files, corpus_stats)


def _scan_sources(sources, args):
  """(scans {path: FileScan}, blocks in processing order), every file scanned before any slow work.
  ValueError for a malformed line, a file given without a sentence, or no training sentence.
  """
  start = time.time()
  scans = {}
  for path in sources.paths():
    scans[path] = sentence_files.scan_sentence_file(
      path, BLOCK_BYTES, check_utf8=not args.skip_malformed
    )
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
  if not any(scans[p].has_text for p, mode, _ in sources.files if mode != "eval"):
    raise ValueError(f"no training sentences in {[p for p, m, _ in sources.files if m != 'eval']}")
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


# ----------------------------------------------------------------------------
# Vocab
# ----------------------------------------------------------------------------


def _vocab_sample(blocks, scans, sources, args):
  """A seeded sample of the training sentences for the vocab learner (a generator).

  Hash threshold, not a reservoir: each line kept with probability vocab_max_sentences / training
  lines, from a generator seeded with the block's position, so it needs no memory and is the same
  in every job. Held-out sentences are left out.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top

  train_files = {p for p, mode, _ in sources.files if mode != "eval"}
  lines = sum(scans[p].lines for p in train_files)
  rate = 1.0 if args.vocab_max_sentences is None else min(1.0, args.vocab_max_sentences / lines)
  train_blocks = [b for b in blocks if b.mode != "eval"]
  for block, data in sentence_files.block_data(train_blocks, read_all=True):
    if block.start == 0 and data.startswith(pretraining_records.BOM):
      data = data[len(pretraining_records.BOM) :]
    raw_lines = data.split(b"\n")
    keep = np.random.default_rng([args.random_seed, block.file_index, block.first_line]).random(
      len(raw_lines)
    )
    for raw, u in zip(raw_lines, keep):
      if u >= rate:
        continue
      try:
        sentence = raw.decode("utf-8").strip()
      except UnicodeDecodeError:
        continue  # Malformed lines are refused by the scan, or skipped.
      if not sentence:
        continue
      if block.mode == "hash" and io_utils.unit_hash(args.random_seed, sentence) < (
        args.eval_fraction
      ):
        continue
      yield sentence


def _make_vocab(blocks, scans, sources, vocab_path, args):
  """(tokens in id order, seconds) of vocab.txt: a copy of --vocab_file, or WordPiece learned on the
  training split only.
  """
  import tokenization  # pylint: disable=g-import-not-at-top

  start = time.time()
  if args.vocab_file is not None:
    tokens = list(tokenization.load_vocab(args.vocab_file))
  else:
    logging.info(
      "learning a WordPiece vocab of size %d from %s training sentences",
      args.vocab_size,
      "all" if args.vocab_max_sentences is None else f"about {args.vocab_max_sentences}",
    )
    tokens = tokenization.build_vocab(
      _vocab_sample(blocks, scans, sources, args),
      args.vocab_size,
      do_lower_case=args.do_lower_case,
      learn_params=args.vocab_learn_params,
    )
  tokenization.write_vocab(tokens, vocab_path)
  seconds = time.time() - start
  logging.info("vocab: %d tokens -> %s (%.1f s)", len(tokens), vocab_path, seconds)
  return tokens, seconds


def _load_vocab(vocab_path):
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
# The job: identity, parts, blocks
# ----------------------------------------------------------------------------


def _fingerprint(args, scans):
  """(sha256 hex digest, what it hashes): the arguments, format_version, and the sha256 of every
  sentence file read (corpus.py's output included) and of the vocab.
  """
  input_sha256 = {p: scans[p].sha256 for p in sorted(scans)}
  fingerprint_src = {
    "format_version": FORMAT_VERSION,
    "args": dataclasses.asdict(args),
    "files": input_sha256,
    "vocab_sha256": args.vocab_file and sentence_files.sha256_file(args.vocab_file),
  }
  fingerprint = hashlib.sha256(
    json.dumps(fingerprint_src, sort_keys=True).encode("utf-8")
  ).hexdigest()
  return fingerprint, fingerprint_src


def _part_name(job_id, num_jobs):
  return parts.part_name("job", job_id, num_jobs)


def _job_blocks(blocks, job_id, num_jobs):
  """Job `job_id`'s share: a contiguous run of the blocks (1/num_jobs of them)."""
  mine = parts.part_range(len(blocks), job_id, num_jobs)
  return blocks[mine.start : mine.stop]


def _layouts(args, scans, sources):
  """Each split's `Layout`: piles per shard from the scan's line counts (a bound of the split's
  records), so a pile holds about PILE_RECORDS / 4 records at most."""
  lines = {mode: 0 for mode in ("hash", "train", "eval")}
  for path, mode, _ in sources.files:
    lines[mode] += scans[path].lines
  # The held-out share of hashed lines is binomial: twice its mean (plus a margin) is a bound
  # that holds but for a vanishing chance, and then a pile is only larger than planned.
  held_out = min(lines["hash"], int(2 * args.eval_fraction * lines["hash"]) + 1000)
  bounds = {"train": lines["hash"] + lines["train"], "eval": held_out + lines["eval"]}
  layouts = {}
  for split, shards in (("train", args.num_shards), ("eval", args.num_eval_shards)):
    layouts[split] = pretraining_records.Layout(
      shards, pretraining_records.piles_per_shard(bounds[split], shards, PILE_RECORDS)
    )
  return layouts


def _as_json(value):
  return json.loads(json.dumps(value))


def _parts_of(parts_dir):
  """The job.json identities of the parts in parts_dir; cli.InputError for one that is not JSON."""
  if not io_utils.isdir(parts_dir):
    return []
  identities = []
  for name in io_utils.listdir(parts_dir):
    path = os.path.join(parts_dir, name, "job.json")
    if io_utils.exists(path):
      try:
        identities.append(io_utils.read_json_file(path))
      except ValueError as e:
        raise cli.InputError(f"{e}: {runs.START_OVER}") from None
  return identities


# The files of parts/ (`_make_part`, `_assemble`; atomic writes' temporaries after a kill): the
# parts go by these, so that a file of the user's keeps parts/ (`io_utils.remove_files`).
_PART_FILES = (
  "assembled.json",
  ".job-*.lock",
  *(
    f"job-*/{name}" for name in ("job.json", "done.json", VOCAB_FILE, "block-*.rec", "block-*.json")
  ),
  "job-*/.*.tmp-*",
  ".*.tmp-*",
)


def _remove_parts(parts_dir):
  root, name = os.path.split(parts_dir)
  io_utils.remove_files(root, io_utils.find_files(root, [f"{name}/{f}" for f in _PART_FILES]))


def _check_parts(parts_dir, identity, overwrite, output_dir):
  """Refuses (one line, runs.another_job) unfinished parts of another job in `parts_dir`; with
  `overwrite` removes them instead."""
  for recorded in _parts_of(parts_dir):
    if recorded != _as_json(identity):
      if overwrite:
        logging.info("--overwrite: removing the unfinished parts of another job in %s", parts_dir)
        _remove_parts(parts_dir)
        return
      raise runs.another_job(
        f"--output_dir {output_dir} holds unfinished parts of another job", recorded, identity
      )


def _unfinished(part_dir, blocks):
  """The blocks of `blocks` whose output in `part_dir` is missing or cut short."""
  return [b for b in blocks if pretraining_records.read_block_summary(part_dir, b.index) is None]


@contextlib.contextmanager
def _block_dir(part_dir):
  """Where the workers write their blocks: `part_dir` itself if it is local; for a remote one a
  local temporary directory whose finished blocks the parent moves into it (`publish_block`): a
  worker is a process of its own, and TensorFlow's ram:// (the tests' bucket) is not shared
  between processes; the workers need no TensorFlow either."""
  if not io_utils.is_remote(part_dir):
    yield part_dir
    return
  with tempfile.TemporaryDirectory(prefix="tta-blocks-") as block_dir:
    yield block_dir


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


def _run_blocks(blocks, part_dir, block_dir, config, num_workers):
  start = time.time()
  todo = _unfinished(part_dir, blocks)
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
    pending = []
    # At most two blocks per worker in flight: the parent's memory stays a few blocks.
    for block, data in sentence_files.block_data(todo, read_all=False):
      result = pool.apply_async(pretraining_records.make_block, (block, data))
      pending.append((block.index, result))
      while len(pending) >= 2 * num_workers or (pending and pending[0][1].ready()):
        index, result = pending.pop(0)
        result.get()
        publish_block(block_dir, part_dir, index)
        bar.update(1)
    for index, result in pending:
      result.get()
      publish_block(block_dir, part_dir, index)
      bar.update(1)
  return time.time() - start


# ----------------------------------------------------------------------------
# Assembly: the shards from every job's blocks
# ----------------------------------------------------------------------------


def _read_parts(parts_dir, identity, num_jobs, blocks):
  """Every job's part, checked (present, of this job, complete): ([(part dir, block index)] of all
  blocks in order, the parts' done records, part 0's vocab path). cli.InputError names the part
  missing or unfinished (and the --job_id to run) or of another job.
  """
  located, done_records, vocabs = [], [], []
  for job_id in range(num_jobs):
    part = os.path.join(parts_dir, _part_name(job_id, num_jobs))
    job_file = os.path.join(part, "job.json")
    if not io_utils.exists(job_file):
      raise cli.InputError(
        f"--merge: part {part} is missing: run this command with --job_id={job_id} "
        f"--num_jobs={num_jobs} first"
      )
    recorded = io_utils.read_json_file(job_file)
    if recorded != _as_json(identity):
      raise runs.another_job(f"--merge: {part} holds another job", recorded, identity)
    done_file = os.path.join(part, "done.json")
    mine = _job_blocks(blocks, job_id, num_jobs)
    missing = _unfinished(part, mine)
    if not io_utils.exists(done_file) or missing:
      raise cli.InputError(
        f"--merge: part {part} is not finished ({len(missing)} blocks to do): run (or resume) "
        f"this command with --job_id={job_id} --num_jobs={num_jobs}"
      )
    done_records.append(io_utils.read_json_file(done_file))
    vocabs.append(os.path.join(part, VOCAB_FILE))
    located.extend((part, b.index) for b in mine)
  shas = {sentence_files.sha256_file(v) for v in vocabs}
  if len(shas) != 1:
    raise cli.InputError(f"--merge: the parts' vocabs differ ({', '.join(vocabs)})")
  return located, done_records, vocabs[0]


def _assemble(output_dir, parts_dir, located, layouts, args):
  """Writes the shards not yet written: (files [{"file", "records", "bytes"}], {split: stats}).

  Memory: one shuffle unit (at most about PILE_RECORDS records) and the pile tables.
  """
  state_path = os.path.join(parts_dir, "assembled.json")
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
          record_files, offsets, counts, layout, shard, args.random_seed, split, PILE_RECORDS
        )
        count = pretraining_records.write_records(path, records)
        entry = {"file": name, "records": count, "bytes": io_utils.file_size(path)}
        assembled[name] = entry
        io_utils.write_atomically(state_path, json.dumps(assembled, indent=2) + "\n")
      files.append(entry)
      bar.update(entry["records"])
    del counts, offsets
  return files, split_stats


# ----------------------------------------------------------------------------
# The whole job
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Job:
  """What a run works from (its sentence files, scans and blocks) and what it is: the fingerprint
  of its output, and the identity (job.json) its parts depend on."""

  output_dir: str
  sources: _Sources
  scans: dict
  blocks: list
  layouts: dict
  fingerprint: str
  input_sha256: dict
  identity: dict

  @property
  def stamp_path(self):
    return os.path.join(self.output_dir, STATS_FILE)

  @property
  def parts_dir(self):
    return os.path.join(self.output_dir, PARTS_SUBDIR)


def _build(args, run, output_dir, force, run_blocks):
  start = time.time()
  io_utils.makedirs(output_dir)
  job = _identify(args, run, output_dir, force)
  stats = None if force else _complete_output(job)
  if stats is not None:
    return dict(stats, reused=True)
  _check_parts(job.parts_dir, job.identity, run.overwrite, output_dir)
  # From here on the directory is being rewritten: without its stamp an
  # interrupted run can never be mistaken for a complete one.
  io_utils.remove_stamp(job.stamp_path)
  seconds = None
  if not run.merge:
    part_dir = os.path.join(job.parts_dir, _part_name(run.job_id, run.num_jobs))
    seconds = _make_part(job, args, run, part_dir, run_blocks)
    if run.num_jobs > 1:
      logging.info(
        "part %d of %d done in %s; when every part is, run the same command with --merge",
        run.job_id,
        run.num_jobs,
        part_dir,
      )
      return {
        "part": run.job_id,
        "num_jobs": run.num_jobs,
        "seconds": round(time.time() - start, 1),
      }
  return _merge_parts(job, args, run.num_jobs, seconds, start)


def _identify(args, run, output_dir, force):
  """The `_Job` of these arguments, after corpus.py and the scan of every sentence file."""
  sources = _prepare_sources(args, output_dir, force)
  scans, blocks = _scan_sources(sources, args)
  fingerprint, fingerprint_src = _fingerprint(args, scans)
  layouts = _layouts(args, scans, sources)
  # What the parts depend on, spelled out (a refusal names the first field that differs).
  identity = {
    **fingerprint_src,
    "num_jobs": run.num_jobs,
    "blocks": len(blocks),
    "block_bytes": BLOCK_BYTES,
    "layouts": {s: dataclasses.asdict(layout) for s, layout in layouts.items()},
  }
  return _Job(
    output_dir, sources, scans, blocks, layouts, fingerprint, fingerprint_src["files"], identity
  )


def _complete_output(job):
  """The stamp of a complete output of `job` in its directory (its own parts then removed), or
  None."""
  stats = io_utils.read_stamp(job.stamp_path, job.fingerprint)
  if stats is not None:
    logging.info(
      "%s already holds a complete output for these arguments "
      "(%d train, %d eval sentences); nothing to do (--force "
      "rebuilds).",
      job.output_dir,
      stats["train"]["sentences"],
      stats["eval"]["sentences"],
    )
    recorded = _parts_of(job.parts_dir)
    if recorded and all(p == _as_json(job.identity) for p in recorded):
      _remove_parts(job.parts_dir)  # This job's parts, left by a kill after its stamp was written.
  return stats


def _make_part(job, args, run, part_dir, run_blocks):
  """Makes this run's part in `part_dir` (job.json, vocab, blocks, done.json) unless done:
  (vocab seconds, block seconds). `run_blocks`: `_run_blocks` or another engine's."""
  io_utils.makedirs(part_dir)
  with io_utils.exclusive_lock(part_dir, wait=False):
    io_utils.write_atomically(
      os.path.join(part_dir, "job.json"), json.dumps(job.identity, indent=2) + "\n"
    )
    done_path = os.path.join(part_dir, "done.json")
    mine = _job_blocks(job.blocks, run.job_id, run.num_jobs)
    if io_utils.exists(done_path):
      redo = _unfinished(part_dir, mine)
      if not redo:
        done = io_utils.read_json_file(done_path)
        return done["vocab_seconds"], done["block_seconds"]
      # The marker holds only with every block's output: one lost or cut short since (the merge
      # refuses the part for it and sends the user here) is made again.
      logging.warning(
        "%s: %d blocks of this finished part are missing or cut short: making them again",
        part_dir,
        len(redo),
      )
      io_utils.remove_stamp(done_path)
    vocab_seconds = 0.0
    vocab_path = os.path.join(part_dir, VOCAB_FILE)
    if not io_utils.exists(vocab_path):
      _, vocab_seconds = _make_vocab(job.blocks, job.scans, job.sources, vocab_path, args)
    with _block_dir(part_dir) as block_dir:
      block_seconds = run_blocks(
        mine,
        part_dir,
        block_dir,
        _worker_config(vocab_path, args, job.layouts, block_dir),
        run.num_workers or machine.usable_cores(),
      )
    done = {"vocab_seconds": vocab_seconds, "block_seconds": block_seconds}
    io_utils.write_atomically(done_path, json.dumps(done) + "\n")
  return vocab_seconds, block_seconds


def _merge_parts(job, args, num_jobs, seconds, start):
  """Assembles and stamps the output from the `num_jobs` parts, then removes them: the stamp.
  seconds: (vocab, blocks) of this run's part, or None for the slowest part's."""
  with io_utils.exclusive_lock(job.parts_dir, wait=False):
    located, done_records, part_vocab = _read_parts(
      job.parts_dir, job.identity, num_jobs, job.blocks
    )
    if seconds is None:
      seconds = [max(d[key] for d in done_records) for key in ("vocab_seconds", "block_seconds")]
    files, split_stats = _assemble(job.output_dir, job.parts_dir, located, job.layouts, args)
    if not split_stats["train"]["sentences"]:
      raise ValueError(
        f"no training sentences in {[p for p, m, _ in job.sources.files if m != 'eval']}"
      )
    vocab_path = os.path.join(job.output_dir, VOCAB_FILE)
    io_utils.copy_file(part_vocab, vocab_path)
    pretraining_records.remove_stale_shards(job.output_dir, files)
    stats = _stats(args, job, vocab_path, split_stats, files, seconds, start)
    outputs = [os.path.join(job.output_dir, f["file"]) for f in files] + [vocab_path]
    stats = io_utils.write_stamp(job.stamp_path, job.fingerprint, outputs, stats)
  _remove_parts(job.parts_dir)
  logging.info(
    "wrote %d train + %d eval sentences (%d + %d tokens) in %d files to %s in %.1f s",
    stats["train"]["sentences"],
    stats["eval"]["sentences"],
    stats["train"]["tokens"],
    stats["eval"]["tokens"],
    len(files),
    job.output_dir,
    stats["seconds"]["total"],
  )
  return stats


def _worker_config(vocab_path, args, layouts, part_dir):
  import tokenization  # pylint: disable=g-import-not-at-top

  vocab, boundary = _load_vocab(vocab_path)
  return pretraining_records.WorkerConfig(
    tokenizer_json=tokenization.host_tokenizer(vocab, args.do_lower_case).to_str(),
    boundary_ids=tuple(vocab[t] for t in boundary),
    unk_id=vocab["[UNK]"],
    vocab_size=len(vocab),
    max_seq_length=args.max_seq_length,
    seed=args.random_seed,
    eval_fraction=args.eval_fraction,
    layouts=layouts,
    skip_malformed=args.skip_malformed,
    parts_dir=part_dir,
  )


def _stats(args, job, vocab_path, split_stats, files, seconds, start):
  """data_stats.json's contents; seconds: (vocab, blocks) of the job."""
  import tokenization  # pylint: disable=g-import-not-at-top

  vocab, boundary = _load_vocab(vocab_path)
  corpus_stats = job.sources.corpus_stats
  for split in pretraining_records.SPLITS:
    t = split_stats[split]
    logging.info(
      "%s: %d sentences, %d tokens, mean length %.1f, %d (%.2f%%) truncated to %d, UNK rate %.4f%%",
      split,
      t["sentences"],
      t["tokens"],
      t["lengths"]["mean"],
      t["truncated"],
      100 * t["truncated_fraction"],
      args.max_seq_length,
      100 * t["unk_rate"],
    )
  vocab_seconds, block_seconds = seconds
  num_sentences = sum(split_stats[s]["sentences"] for s in pretraining_records.SPLITS)
  return {
    "format_version": FORMAT_VERSION,
    "fingerprint": job.fingerprint,
    "args": dataclasses.asdict(args),
    "input_sha256": job.input_sha256,
    "vocab_size": len(vocab),
    "special_ids": {t: vocab[t] for t in tokenization.SPECIAL_TOKENS if t in vocab},
    "boundary_tokens": list(boundary),
    "train": split_stats["train"],
    "eval": split_stats["eval"],
    "files": files,
    "corpus": corpus_stats
    and {k: corpus_stats.get(k) for k in ("train", "eval", "books", "sentences")},
    "seconds": {
      "total": round(time.time() - start, 1),
      "vocab": round(vocab_seconds, 1),
      "tokenize": round(block_seconds, 1),
    },
    "sentences_per_second": round(num_sentences / max(block_seconds, 1e-9), 1),
  }


_RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunParams))


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobParams:
  """create_pretraining_data.py's flags: where, and the records' and the run's params."""

  data: DataParams = cli.nested(DataParams)
  run: RunParams = cli.nested(RunParams)
  output_dir: str = cli.param(
    "Where the TFRecords, vocab.txt and data_stats.json go.", io=cli.OUTPUT
  )
  force: bool = cli.param("Rebuild even if --output_dir is complete for these arguments.", False)


def run(job, run_blocks=None):
  """Builds the TFRecord data set of `job` (`JobParams`; layout: docs/DESIGN.md §5.2).

  `run_blocks(blocks, part_dir, block_dir, config, num_workers)` -> seconds makes the blocks'
  files (`pretraining_records.make_block` on each unfinished block); default: this machine's
  worker pool (`_run_blocks`); beam/data_pipeline.py's runs them as an Apache Beam pipeline.

  Returns data_stats.json's contents, with "reused": True when a complete output for the same
  arguments and inputs (its fingerprint) was already there; for one job of several, only {"part",
  "num_jobs", "seconds"}. Raises ValueError for malformed input (file:line); cli.InputError when
  output_dir is, holds or lies inside an input, or for parts missing, unfinished or of another job.
  """
  io_utils.check_outputs_apart(job, inputs=job.data.given_inputs)
  # A run refused for its input (a bad byte, an empty file) leaves no empty --output_dir.
  with io_utils.output_dir(job.output_dir):
    return _build(job.data, job.run, job.output_dir, job.force, run_blocks or _run_blocks)


def create_pretraining_data(input_files, output_dir, force=False, **options):
  """`run` of the job these arguments make: `input_files` (globs) and the other fields of
  `DataParams` and `RunParams` by name; ValueError for a bad argument (naming the flag)."""
  run_params = RunParams(**{k: options.pop(k) for k in _RUN_FIELDS if k in options})
  data = DataParams(input_files=input_files, **options)
  return run(JobParams(output_dir=output_dir, force=force, data=data, run=run_params))

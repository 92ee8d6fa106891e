"""create_pretraining_data.py's job: its params, and the envelope around the pretraining_data
library: the output's identity (fingerprint, data_stats.json), the parts of --num_jobs and their
--merge, resume, locks (docs/DESIGN.md §3.1, §5.2).

One run makes its part (parts/job-I-of-N/: job.json, vocab, blocks, done.json) and, alone or with
--merge, assembles the shards from every part and stamps data_stats.json. No TensorFlow at import:
spawned workers import pretraining_data again.
"""

import dataclasses
import hashlib
import json
import os
import time
from typing import Optional

from absl import logging

from pretraining import pretraining_data
from pretraining import pretraining_records
from pretraining import sentence_files
from text import normalization as normalization_lib
from util import cli
from util import io_utils
from util import machine
from util import parts
from util import runs

# The unfinished work: one directory per job (blocks' records, vocab), and the assembly's state.
PARTS_SUBDIR = "parts"
# A part's identity (the job it belongs to) and its marker of every block done.
JOB_FILE = "job.json"
DONE_FILE = "done.json"


# ----------------------------------------------------------------------------
# Params
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
    "Existing vocab (one token per line). Exclusive with --vocab_size.",
    None,
    io=cli.INPUT,
    check=io_utils.check_input_file,
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
    pretraining_data.INPUT_FORMATS,
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
    object.__setattr__(self, "input_files", pretraining_data.expand_inputs(self.input_files))
    eval_files = pretraining_data.expand_inputs(self.eval_files) if self.eval_files else []
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
    if self.input_format not in pretraining_data.INPUT_FORMATS:
      raise ValueError(
        f"--input_format must be one of {pretraining_data.INPUT_FORMATS}, got {self.input_format!r}"
      )
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


# ----------------------------------------------------------------------------
# Identity and parts
# ----------------------------------------------------------------------------


def _fingerprint(args, scans):
  """(sha256 hex digest, what it hashes): the arguments, format_version, and the sha256 of every
  sentence file read (corpus.py's output included) and of the vocab.
  """
  input_sha256 = {p: scans[p].sha256 for p in sorted(scans)}
  fingerprint_src = {
    "format_version": pretraining_data.FORMAT_VERSION,
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


def _as_json(value):
  return json.loads(json.dumps(value))


def _parts_of(parts_dir):
  """The job.json identities of the parts in parts_dir; cli.InputError for one that is not JSON."""
  if not io_utils.isdir(parts_dir):
    return []
  identities = []
  for name in io_utils.listdir(parts_dir):
    path = os.path.join(parts_dir, name, JOB_FILE)
    if io_utils.exists(path):
      try:
        identities.append(io_utils.read_json_file(path))
      except ValueError as e:
        raise cli.InputError(f"{e}: {runs.START_OVER}") from None
  return identities


# The files of parts/ (`_make_part`, `_assemble`; atomic writes' temporaries after a kill): the
# parts go by these, so that a file of the user's keeps parts/ (`io_utils.remove_files`).
_PART_FILES = (
  pretraining_data.ASSEMBLED_FILE,
  ".job-*.lock",
  *(
    f"job-*/{name}"
    for name in (JOB_FILE, DONE_FILE, pretraining_data.VOCAB_FILE, *pretraining_records.BLOCK_FILES)
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


def _read_parts(parts_dir, identity, num_jobs, blocks):
  """Every job's part, checked (present, of this job, complete): ([(part dir, block index)] of all
  blocks in order, the parts' done records, part 0's vocab path). cli.InputError names the part
  missing or unfinished (and the --job_id to run) or of another job.
  """
  located, done_records, vocabs = [], [], []
  for job_id in range(num_jobs):
    part = os.path.join(parts_dir, _part_name(job_id, num_jobs))
    job_file = os.path.join(part, JOB_FILE)
    if not io_utils.exists(job_file):
      raise cli.InputError(
        f"--merge: part {part} is missing: run this command with --job_id={job_id} "
        f"--num_jobs={num_jobs} first"
      )
    recorded = io_utils.read_json_file(job_file)
    if recorded != _as_json(identity):
      raise runs.another_job(f"--merge: {part} holds another job", recorded, identity)
    done_file = os.path.join(part, DONE_FILE)
    mine = _job_blocks(blocks, job_id, num_jobs)
    missing = pretraining_data.unfinished_blocks(part, mine)
    if not io_utils.exists(done_file) or missing:
      raise cli.InputError(
        f"--merge: part {part} is not finished ({len(missing)} blocks to do): run (or resume) "
        f"this command with --job_id={job_id} --num_jobs={num_jobs}"
      )
    done_records.append(io_utils.read_json_file(done_file))
    vocabs.append(os.path.join(part, pretraining_data.VOCAB_FILE))
    located.extend((part, b.index) for b in mine)
  shas = {sentence_files.sha256_file(v) for v in vocabs}
  if len(shas) != 1:
    raise cli.InputError(f"--merge: the parts' vocabs differ ({', '.join(vocabs)})")
  return located, done_records, vocabs[0]


# ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Job:
  """What a run works from (its sentence files, scans and blocks) and what it is: the fingerprint
  of its output, and the identity (job.json) its parts depend on."""

  output_dir: str
  sources: pretraining_data.Sources
  scans: dict
  blocks: list
  layouts: dict
  fingerprint: str
  input_sha256: dict
  identity: dict

  @property
  def stamp_path(self):
    return os.path.join(self.output_dir, pretraining_data.STATS_FILE)

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
    made = not io_utils.exists(part_dir)
    try:
      seconds = _make_part(job, args, run, part_dir, run_blocks)
    except (ValueError, cli.InputError):
      if made:  # refused (a bad vocab) before a block of its own: its files go, parts/ if emptied
        part = f"{PARTS_SUBDIR}/{os.path.basename(part_dir)}"
        io_utils.remove_files(output_dir, io_utils.find_files(output_dir, [part]))
      raise
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
  sources = pretraining_data.prepare_sources(
    args.input_files,
    args.eval_files,
    output_dir,
    input_format=args.input_format,
    normalization=args.normalization,
    eval_fraction=args.eval_fraction,
    seed=args.random_seed,
    max_books=args.max_books,
    force=force,
  )
  scans, blocks = pretraining_data.scan_sources(sources, check_utf8=not args.skip_malformed)
  fingerprint, fingerprint_src = _fingerprint(args, scans)
  layouts = pretraining_data.split_layouts(
    scans, sources, args.eval_fraction, args.num_shards, args.num_eval_shards
  )
  # What the parts depend on, spelled out (a refusal names the first field that differs).
  identity = {
    **fingerprint_src,
    "num_jobs": run.num_jobs,
    "blocks": len(blocks),
    "block_bytes": pretraining_data.BLOCK_BYTES,
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
  (vocab seconds, block seconds). `run_blocks`: `pretraining_data.run_blocks` or another
  engine's."""
  io_utils.makedirs(part_dir)
  with io_utils.exclusive_lock(part_dir, wait=False):
    io_utils.write_atomically(
      os.path.join(part_dir, JOB_FILE), json.dumps(job.identity, indent=2) + "\n"
    )
    done_path = os.path.join(part_dir, DONE_FILE)
    mine = _job_blocks(job.blocks, run.job_id, run.num_jobs)
    if io_utils.exists(done_path):
      redo = pretraining_data.unfinished_blocks(part_dir, mine)
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
    vocab_path = os.path.join(part_dir, pretraining_data.VOCAB_FILE)
    if not io_utils.exists(vocab_path):
      vocab = pretraining_data.VocabSource(
        args.vocab_file,
        args.vocab_size,
        args.do_lower_case,
        args.vocab_learn_params,
        args.vocab_max_sentences,
      )
      _, vocab_seconds = pretraining_data.make_vocab(
        vocab, job.blocks, job.scans, job.sources, vocab_path, args.random_seed, args.eval_fraction
      )
    with pretraining_data.worker_dir(part_dir) as block_dir:
      block_seconds = run_blocks(
        mine,
        part_dir,
        block_dir,
        pretraining_data.worker_config(
          vocab_path,
          job.layouts,
          block_dir,
          do_lower_case=args.do_lower_case,
          max_seq_length=args.max_seq_length,
          seed=args.random_seed,
          eval_fraction=args.eval_fraction,
          skip_malformed=args.skip_malformed,
        ),
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
    files, split_stats = pretraining_data.assemble(
      job.output_dir, job.parts_dir, located, job.layouts, args.random_seed
    )
    if not split_stats["train"]["sentences"]:
      raise ValueError(f"no training sentences in {job.sources.train_paths()}")
    vocab_path = os.path.join(job.output_dir, pretraining_data.VOCAB_FILE)
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


def _stats(args, job, vocab_path, split_stats, files, seconds, start):
  """data_stats.json's contents; seconds: (vocab, blocks) of the job."""
  import tokenization  # pylint: disable=g-import-not-at-top

  vocab, boundary = pretraining_data.load_vocab(vocab_path)
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
    "format_version": pretraining_data.FORMAT_VERSION,
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


def run(job, run_blocks=pretraining_data.run_blocks):
  """Builds the TFRecord data set of `job` (`JobParams`; layout: docs/DESIGN.md §5.2).

  `run_blocks(blocks, part_dir, block_dir, config, num_workers)` -> seconds makes the blocks'
  files (`pretraining_records.make_block` on each unfinished block); default: this machine's
  worker pool (`pretraining_data.run_blocks`); beam/beam_data_job.py's runs them as an Apache Beam
  pipeline.

  Returns data_stats.json's contents, with "reused": True when a complete output for the same
  arguments and inputs (its fingerprint) was already there; for one job of several, only {"part",
  "num_jobs", "seconds"}. Raises ValueError for malformed input (file:line); cli.InputError when
  output_dir is, holds or lies inside an input, or for parts missing, unfinished or of another job.
  """
  io_utils.check_outputs_apart(job, inputs=job.data.given_inputs)
  # A run refused for its input (a bad byte, an empty file) leaves no empty --output_dir.
  with io_utils.output_dir(job.output_dir):
    return _build(job.data, job.run, job.output_dir, job.force, run_blocks)


def create_pretraining_data(input_files, output_dir, force=False, **options):
  """`run` of the job these arguments make: `input_files` (globs) and the other fields of
  `DataParams` and `RunParams` by name; ValueError for a bad argument (naming the flag)."""
  run_params = RunParams(**{k: options.pop(k) for k in _RUN_FIELDS if k in options})
  data = DataParams(input_files=input_files, **options)
  return run(JobParams(output_dir=output_dir, force=force, data=data, run=run_params))

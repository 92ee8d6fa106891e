"""The pretraining data set: sentences -> vocab -> sharded TFRecords in one output directory.

Raw inputs go through text/corpus.py; sentence files are read as they are and held out by a seeded
hash unless eval files are given. The vocab is given or learned from the training split; the
records are pretraining_records.py's. `create_pretraining_data` skips a directory already complete
for the same arguments and inputs (data_stats.json's fingerprint). Layout: docs/DESIGN.md §5.2.
"""

import dataclasses
import hashlib
import json
import os
import time
from typing import Optional

from absl import logging
import tensorflow as tf

from pretraining import pretraining_records
from text import corpus
from text import normalization as normalization_lib
import tokenization
from util import cli
from util import io_utils

# Bumped whenever the record format or the processing changes, so an output
# directory written by an older version is never reused as complete.
# 2: sentence files are held out by io_utils.unit_hash (sha256, as corpus.py)
# instead of a blake2b hash of our own.
# 3: over-long sentences are cut at random from the front or the back (the
# authors' rule, `pretraining_records.truncate_ids`) instead of keeping their first pieces.
FORMAT_VERSION = 3

STATS_FILE = "data_stats.json"
VOCAB_FILE = "vocab.txt"
CORPUS_SUBDIR = "corpus"
INPUT_FORMATS = ("auto", "sentences", "raw")


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
    "Comma-separated globs (or a list): Gutenberg .tar.xz archives (cleaned by corpus.py) and/or "
    "UTF-8 files with one sentence per line (with --input_format=raw every input goes through "
    "corpus.py).",
    flag="input_file",
  )
  eval_files: str = cli.param(
    "Comma-separated globs (or a list) of eval sentence files; then --input_file sentence files "
    "are all training data.",
    None,
    flag="eval_file",
  )
  vocab_file: str = cli.param(
    "Existing vocab (one token per line). Exclusive with --vocab_size.", None
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
  # tokenization.build_vocab's learner options, e.g. {"lower_thresh": 2} for a tiny corpus
  # (the script's --vocab_lower_thresh).
  vocab_learn_params: Optional[dict] = None
  vocab_max_sentences: int = cli.param(
    "Learn the vocab from an evenly spaced sample of at most this many training sentences (the "
    "learner is pure Python, slow on a whole corpus); default: all.",
    None,
  )

  def __post_init__(self):
    """Expands the globs; raises ValueError naming the flag of a bad argument."""
    # Frozen: the canonical forms are set once, here.
    object.__setattr__(self, "input_files", io_utils.expand_globs(self.input_files))
    eval_files = io_utils.expand_globs(self.eval_files) if self.eval_files else []
    object.__setattr__(self, "eval_files", eval_files)
    object.__setattr__(self, "vocab_file", self.vocab_file and os.path.abspath(self.vocab_file))
    object.__setattr__(self, "do_lower_case", bool(self.do_lower_case))
    object.__setattr__(self, "skip_malformed", bool(self.skip_malformed))
    if (self.vocab_file is None) == (self.vocab_size is None):
      raise ValueError(
        f"give exactly one of --vocab_file and --vocab_size (got "
        f"vocab_file={self.vocab_file!r}, vocab_size={self.vocab_size!r})"
      )
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


# ----------------------------------------------------------------------------
# Sentences: corpus.py for raw input, sentence files as they are.
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class SentenceReadStats:
  """Counts of what `read_sentence_file` skipped."""

  lines: int = 0
  empty_lines: int = 0
  malformed_lines: int = 0
  # "file:line" of the first few, for the log.
  malformed_examples: list = dataclasses.field(default_factory=list)


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
    lines = data.decode("utf-8").split("\n")[: len(raw_lines)]
  except UnicodeDecodeError:
    lines = []
    for number, raw in enumerate(raw_lines, 1):
      try:
        lines.append(raw.decode("utf-8"))
      except UnicodeDecodeError as e:
        where = f"{path}:{number}"
        if not skip_malformed:
          raise ValueError(
            f"{where}: not valid UTF-8 (byte {raw[e.start : e.start + 1]!r} at column "
            f"{e.start + 1}: {e.reason}); expected UTF-8 text, one sentence per line. Fix the "
            "file or pass --skip_malformed to skip and count such lines."
          ) from None
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


def _sha256_file(path):
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    while True:
      block = f.read(1 << 22)
      if not block:
        break
      digest.update(block)
  return digest.hexdigest()


def evenly_spaced(items, max_items):
  """At most max_items of items, evenly spaced and in order (all if None).

  A stride sample rather than a random one: deterministic without a seed,
  and it spans every book of the (book-ordered) training split.
  """
  if max_items is None or len(items) <= max_items:
    return items
  if max_items <= 0:
    raise ValueError(f"vocab_max_sentences must be positive, got {max_items:d}")
  step = len(items) / max_items
  return [items[int(i * step)] for i in range(max_items)]


def run_corpus(
  raw_inputs, corpus_dir, normalization, eval_fraction, seed, max_books=None, force=False
):
  """Runs corpus.prepare_corpus on raw inputs.

  corpus.py spawns its worker processes; each imports the main module, so
  under create_pretraining_data.py a worker loads TensorFlow once before its first book.

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
  """The sentence files of each split.

  Attributes:
    hashed: files split between train and eval by a seeded hash of each
      sentence when split_by_hash, else all training data.
    train: files that are training data as a whole (corpus.py's train.txt).
    eval: files that are eval data as a whole (--eval_file, corpus.py's
      eval.txt).
    split_by_hash: whether `hashed` is split (no --eval_file, eval_fraction
      > 0).
    corpus_stats: corpus.py's stats.json, or None without raw inputs.
  """

  hashed: list
  train: list
  eval: list
  split_by_hash: bool
  corpus_stats: Optional[dict]

  def files(self):
    return sorted(set(self.hashed + self.train + self.eval))


def _prepare_sources(args, output_dir, force):
  """Runs corpus.py on the raw inputs; returns every split's `_Sources`.

  Raises:
    ValueError: for --normalization with sentence files, which are used as
      they are.
  """
  raw = [p for p in args.input_files if _is_raw(p, args.input_format)]
  sentence_files = [p for p in args.input_files if p not in raw]
  if args.normalization != "none" and sentence_files:
    raise ValueError(
      f"--normalization={args.normalization} applies to raw inputs "
      f"(corpus.py) only, but {', '.join(sentence_files)} are sentence "
      "files, used as they are. Normalize them with corpus.py "
      "(--input_format=lines) or pass --normalization=none."
    )
  sources = _Sources(
    hashed=sentence_files,
    train=[],
    eval=list(args.eval_files),
    split_by_hash=not args.eval_files and args.eval_fraction > 0,
    corpus_stats=None,
  )
  if raw:
    corpus_dir = os.path.join(output_dir, CORPUS_SUBDIR)
    sources.corpus_stats = run_corpus(
      raw,
      corpus_dir,
      args.normalization,
      args.eval_fraction,
      args.random_seed,
      args.max_books,
      force,
    )
    sources.train.append(os.path.join(corpus_dir, "train.txt"))
    sources.eval.append(os.path.join(corpus_dir, "eval.txt"))
  return sources


def _fingerprint(args, sources):
  """Hashes what the records depend on.

  That is the arguments and the exact bytes of every sentence file read
  (corpus.py output included) and of the vocab.

  Returns:
    (fingerprint, input_sha256): a sha256 hex digest, and {path: sha256} of
    the sentence files.
  """
  input_sha256 = {p: _sha256_file(p) for p in sources.files()}
  fingerprint_src = {
    "format_version": FORMAT_VERSION,
    "args": dataclasses.asdict(args),
    "files": input_sha256,
    "vocab_sha256": args.vocab_file and _sha256_file(args.vocab_file),
  }
  fingerprint = hashlib.sha256(
    json.dumps(fingerprint_src, sort_keys=True).encode("utf-8")
  ).hexdigest()
  return fingerprint, input_sha256


def _read_splits(sources, args):
  """Reads every sentence file into its split.

  Returns:
    (sentences, read_stats): {split: list of str}, {split: SentenceReadStats}.

  Raises:
    ValueError: if there is no training sentence.
  """
  start = time.time()
  read_stats = {split: SentenceReadStats() for split in pretraining_records.SPLITS}
  sentences = {split: [] for split in pretraining_records.SPLITS}
  for path in sources.hashed:
    for _, sentence in read_sentence_file(path, args.skip_malformed, read_stats["train"]):
      held_out = sources.split_by_hash and (
        io_utils.unit_hash(args.random_seed, sentence) < args.eval_fraction
      )
      sentences["eval" if held_out else "train"].append(sentence)
  for split, paths in (("train", sources.train), ("eval", sources.eval)):
    for path in paths:
      sentences[split].extend(
        s for _, s in read_sentence_file(path, args.skip_malformed, read_stats[split])
      )
  logging.info(
    "read %d train and %d eval sentences from %d files (%d empty "
    "and %d malformed lines skipped) in %.1f s",
    len(sentences["train"]),
    len(sentences["eval"]),
    len(sources.files()),
    sum(s.empty_lines for s in read_stats.values()),
    sum(s.malformed_lines for s in read_stats.values()),
    time.time() - start,
  )
  if not sentences["train"]:
    raise ValueError(f"no training sentences in {sources.hashed + sources.train}")
  return sentences, read_stats


# ----------------------------------------------------------------------------
# Vocab
# ----------------------------------------------------------------------------


def _make_vocab(train_sentences, vocab_path, args):
  """Writes vocab.txt.

  A copy of --vocab_file, or WordPiece learned from the training split only,
  so eval text stays unseen.

  Returns:
    (tokens, seconds): the tokens in id order, and the time taken.
  """
  start = time.time()
  if args.vocab_file is not None:
    tokens = list(tokenization.load_vocab(args.vocab_file))
  else:
    sample = evenly_spaced(train_sentences, args.vocab_max_sentences)
    logging.info(
      "learning a WordPiece vocab of size %d from %d of %d training sentences",
      args.vocab_size,
      len(sample),
      len(train_sentences),
    )
    tokens = tokenization.build_vocab(
      sample,
      args.vocab_size,
      do_lower_case=args.do_lower_case,
      learn_params=args.vocab_learn_params,
    )
  tokenization.write_vocab(tokens, vocab_path)
  seconds = time.time() - start
  logging.info("vocab: %d tokens -> %s (%.1f s)", len(tokens), vocab_path, seconds)
  return tokens, seconds


def _make_tokenizer(tokens, vocab_path, do_lower_case):
  """The records' tokenizer; tokenization.boundary_tokens frames sentences."""
  boundary = tokenization.boundary_tokens(tokens)
  if boundary != ("[SOS]", "[EOS]"):
    logging.warning(
      "the vocab has no [SOS]/[EOS] (a Google BERT vocab?); "
      "sentences are framed by %s ... %s instead.",
      *boundary,
    )
  return tokenization.FullTokenizer(vocab_path, do_lower_case, boundary_tokens=boundary)


# ----------------------------------------------------------------------------
# The whole job
# ----------------------------------------------------------------------------


def _write_splits(tokenizer, sentences, read_stats, output_dir, args):
  """Tokenizes each split and writes its shards; frees each split's text.

  Returns:
    (files, split_stats, seconds): the shards written ({"file", "records",
    "bytes"}), {split: pretraining_records.tokenize_sentences stats + read counts}, and the time
    spent tokenizing.
  """
  files = []
  split_stats = {}
  seconds = 0.0
  shards = {"train": args.num_shards, "eval": args.num_eval_shards}
  for split in pretraining_records.SPLITS:
    start = time.time()
    examples, split_stats[split] = pretraining_records.tokenize_sentences(
      tokenizer,
      sentences[split],
      args.max_seq_length,
      args.random_seed,
      what="tokenize " + split,
    )
    sentences[split] = None  # Free the text before the next split.
    seconds += time.time() - start
    split_stats[split].update(dataclasses.asdict(read_stats[split]))
    if not examples:
      logging.warning("no %s sentences; no %s shards written", split, split)
      continue
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
    files.extend(
      pretraining_records.write_shards(output_dir, split, examples, shards[split], args.random_seed)
    )
    del examples
  return files, split_stats, seconds


def _build(args, output_dir, force):
  """The steps of `create_pretraining_data` once its arguments are checked."""
  start = time.time()
  tf.io.gfile.makedirs(output_dir)
  sources = _prepare_sources(args, output_dir, force)
  fingerprint, input_sha256 = _fingerprint(args, sources)
  stamp_path = os.path.join(output_dir, STATS_FILE)
  stats = None if force else io_utils.read_stamp(stamp_path, fingerprint)
  if stats is not None:
    logging.info(
      "%s already holds a complete output for these arguments "
      "(%d train, %d eval sentences); nothing to do (--force "
      "rebuilds).",
      output_dir,
      stats["train"]["sentences"],
      stats["eval"]["sentences"],
    )
    return dict(stats, reused=True)
  # From here on the directory is being rewritten: without its stamp an
  # interrupted run can never be mistaken for a complete one.
  io_utils.remove_stamp(stamp_path)

  sentences, read_stats = _read_splits(sources, args)
  vocab_path = os.path.join(output_dir, VOCAB_FILE)
  tokens, vocab_seconds = _make_vocab(sentences["train"], vocab_path, args)
  tokenizer = _make_tokenizer(tokens, vocab_path, args.do_lower_case)
  files, split_stats, tokenize_seconds = _write_splits(
    tokenizer, sentences, read_stats, output_dir, args
  )
  pretraining_records.remove_stale_shards(output_dir, files)

  num_sentences = sum(split_stats[s]["sentences"] for s in pretraining_records.SPLITS)
  corpus_stats = sources.corpus_stats
  stats = {
    "format_version": FORMAT_VERSION,
    "fingerprint": fingerprint,
    "args": dataclasses.asdict(args),
    "input_sha256": input_sha256,
    "vocab_size": len(tokens),
    "special_ids": {
      t: tokenizer.vocab[t] for t in tokenization.SPECIAL_TOKENS if t in tokenizer.vocab
    },
    "boundary_tokens": list(tokenizer.boundary_tokens),
    "train": split_stats["train"],
    "eval": split_stats["eval"],
    "files": files,
    "corpus": corpus_stats
    and {k: corpus_stats.get(k) for k in ("train", "eval", "books", "sentences")},
    "seconds": {
      "total": round(time.time() - start, 1),
      "vocab": round(vocab_seconds, 1),
      "tokenize": round(tokenize_seconds, 1),
    },
    "sentences_per_second": round(num_sentences / max(tokenize_seconds, 1e-9), 1),
  }
  outputs = [os.path.join(output_dir, f["file"]) for f in files] + [vocab_path]
  stats = io_utils.write_stamp(stamp_path, fingerprint, outputs, stats)
  logging.info(
    "wrote %d train + %d eval sentences (%d + %d tokens) in %d files to %s in %.1f s",
    stats["train"]["sentences"],
    stats["eval"]["sentences"],
    stats["train"]["tokens"],
    stats["eval"]["tokens"],
    len(files),
    output_dir,
    stats["seconds"]["total"],
  )
  return stats


def create_pretraining_data(input_files, output_dir, force=False, **options):
  """Builds the TFRecord data set (layout: docs/DESIGN.md §5.2).

  Args:
    input_files: comma-separated globs (str) or list of globs; see `DataParams`.
    output_dir: output directory (created).
    force: rebuild even if a complete output with these arguments exists.
    **options: the other fields of `DataParams` (vocab_file or vocab_size, max_seq_length, ...).

  Returns:
    dict: the contents of data_stats.json, plus "reused": True when an
    existing complete output was returned without work.

  Raises:
    ValueError: for bad arguments (naming the flag) or malformed input
      (naming file:line).
  """
  return _build(DataParams(input_files=input_files, **options), output_dir, force)

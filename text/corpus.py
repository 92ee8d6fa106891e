# coding=utf-8
"""Corpus preparation: Gutenberg books (streamed) or text files -> train.txt, eval.txt, stats.json.

Documents go through text_cleaning and normalization, then a global dedup and the held-out
split; stats.json counts every drop by reason and is the stage's stamp. docs/DESIGN.md §3.1.
"""

import collections
import contextlib
import hashlib
import itertools
import os
import re
import tarfile
import time
from typing import Dict
from typing import Iterator
from typing import List
from typing import NamedTuple
from typing import Optional
from typing import Sequence
from typing import Tuple

from absl import logging

from text import normalization as normalization_lib
from text import text_cleaning
from util import interrupts
from util import io_utils
from util import progress
from util import resumable

# Bumped whenever a rule changes the output, so that an existing output directory built by an
# older rule set is not mistaken for a complete, up-to-date one (see `prepare_corpus`).
PIPELINE_VERSION = 1

STATS_FILE = "stats.json"
INPUT_FORMATS = ("lines", "paragraphs")

GUTENBERG_SUBDIR = "gutenberg-books-subset"
GUTENBERG_TAR = "texts.tar.xz"

# Paragraph-level drop reasons, in the order the filter tries them.
PARAGRAPH_REASONS = (
  "boilerplate",
  "toc",
  "footnote",
  "illustration",
  "non_letters",
  "heading",
  "all_caps",
  "empty",
)
# Sentence-level drop reasons, in the order the filter tries them. "digits" only fires with
# normalization="librispeech"; "non_latin" fires in both modes for mostly non-Latin sentences
# (Greek, Cyrillic) and with "librispeech" also for any letter that does not fold to A-Z.
SENTENCE_REASONS = (
  "foreign_script",
  "non_letters",
  "non_latin",
  "all_caps",
  "digits",
  "too_short",
  "too_long",
)


def default_gutenberg_tar(data_dir: Optional[str] = None) -> str:
  return os.path.join(io_utils.data_root(data_dir), GUTENBERG_SUBDIR, GUTENBERG_TAR)


# ---------------------------------------------------------------------------------------------
# Reading: Gutenberg archives (streamed) and plain files
# ---------------------------------------------------------------------------------------------


def _decode(data: bytes) -> str:
  # Some books have CRLF line ends (the data card says LF, 0004.txt is CRLF); every rule below
  # works on "\n" only. "utf-8-sig" drops a BOM; "replace" keeps a stray bad byte from killing a
  # 100 MB run (all files are valid UTF-8 today, so this never fires on the shipped data).
  text = data.decode("utf-8-sig", errors="replace")
  return text.replace("\r\n", "\n").replace("\r", "\n")


def _book_id(member_name: str) -> str:
  return os.path.splitext(os.path.basename(member_name))[0]


def iter_gutenberg_books(tar_path: str) -> Iterator[Tuple[str, str]]:
  """Yields (book_id "0001", decoded text with "\n" line ends) of a Gutenberg tar archive, streaming
  (nothing extracted to disk); ValueError naming it when it cannot be read (damaged, cut short).
  """
  # "r|*" is tarfile's stream mode: members are decompressed in order and never seeked, so a
  # consumer that stops after three books only pays for three books.
  with io_utils.reading(tar_path), tarfile.open(tar_path, mode="r|*") as tar:
    for member in tar:
      if not member.isfile() or not member.name.endswith(".txt"):
        continue
      fileobj = tar.extractfile(member)
      if fileobj is None:
        continue
      yield _book_id(member.name), _decode(fileobj.read())


def list_gutenberg_books(tar_path: str) -> List[Tuple[str, int]]:
  """[(book_id, size in bytes)] in archive order: one decompression pass, for the ETA and to choose
  the held-out books before the main pass; ValueError naming it when it cannot be read.
  """
  books = []
  with io_utils.reading(tar_path), tarfile.open(tar_path, mode="r|*") as tar:
    for member in tar:
      if member.isfile() and member.name.endswith(".txt"):
        books.append((_book_id(member.name), member.size))
  return books


def is_tar(path: str) -> bool:
  """True for a path read as a Gutenberg archive (a tar, compressed or not)."""
  return bool(re.search(r"\.(tar|tar\.xz|txz|tar\.gz|tgz|tar\.bz2|tbz2)$", path))


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------


def _check_formats(normalization: str, input_format: str) -> None:
  if normalization not in normalization_lib.NORMALIZATIONS:
    raise ValueError(
      f"normalization: expected one of {normalization_lib.NORMALIZATIONS}, got {normalization!r}"
    )
  if input_format not in INPUT_FORMATS:
    raise ValueError(f"input_format: expected one of {INPUT_FORMATS}, got {input_format!r}")


def _finish_sentence(
  sentence: str,
  normalization: str,
  min_words: int,
  max_words: int,
  counts: collections.Counter,
  check_caps: bool,
) -> Optional[str]:
  """Filters and normalizes one candidate sentence; counts it; returns the output line or None."""
  counts["sentences/candidates"] += 1
  reason = text_cleaning.sentence_reason(sentence, check_caps=check_caps)
  out = sentence
  if reason is None and normalization == "librispeech":
    try:
      out = normalization_lib.normalize_librispeech(sentence, counts)
    except normalization_lib.NormalizationError as e:
      reason = e.reason
  if reason is None:
    n_words = len(out.split())
    if n_words < min_words:
      reason = "too_short"
    elif n_words > max_words:
      reason = "too_long"
  if reason is not None:
    counts["sentences/dropped/" + reason] += 1
    return None
  return out


def process_document(
  text: str,
  gutenberg: bool = True,
  input_format: str = "paragraphs",
  normalization: str = "none",
  min_words: int = 3,
  max_words: int = 100,
) -> Tuple[List[str], collections.Counter]:
  """(sentences, Counter of "paragraphs/...", "sentences/...", "edits/...") of one document, before
  dedup and split. input_format "lines" (one sentence per line) runs only the sentence filter, and
  without the all-caps check so that upper-case corpora (LibriSpeech-LM) pass.
  """
  _check_formats(normalization, input_format)
  counts = collections.Counter()
  out = []
  if input_format == "lines":
    for line in text.split("\n"):
      if not line.strip():
        continue
      sentence = text_cleaning.clean_paragraph(line, counts)
      kept = _finish_sentence(sentence, normalization, min_words, max_words, counts, False)
      if kept is not None:
        out.append(kept)
    return out, counts

  if text_cleaning.looks_like_html(text):
    text = text_cleaning.html_to_text(text)
    counts["books/html_converted"] += 1
  else:
    text = text_cleaning.unescape_entities(text)
  if gutenberg:
    stripped = text_cleaning.strip_gutenberg_boilerplate(text)
    text = stripped.body
    if stripped.start_marker is None:
      counts["books/missing_start_marker"] += 1
    if stripped.end_marker is None:
      counts["books/missing_end_marker"] += 1
  para_filter = text_cleaning.ParagraphFilter()
  for block in text_cleaning.paragraph_blocks(text):
    counts["paragraphs/candidates"] += 1
    reason = para_filter.reason(block)
    if reason is None:
      cleaned = text_cleaning.clean_paragraph(text_cleaning.unwrap(block), counts)
      if not cleaned:
        reason = "empty"
    if reason is not None:
      counts["paragraphs/dropped/" + reason] += 1
      continue
    counts["paragraphs/kept"] += 1
    for sentence in text_cleaning.split_sentences(cleaned):
      kept = _finish_sentence(sentence, normalization, min_words, max_words, counts, True)
      if kept is not None:
        out.append(kept)
  return out, counts


def _process_job(key, text, kwargs):
  """Pool worker: (key, text, kwargs) -> (key, sentences, counts)."""
  sentences, counts = process_document(text, **kwargs)
  return key, sentences, counts


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------


def choose_eval_books(
  books: Sequence[Tuple[str, int]], eval_fraction: float, seed: int
) -> List[str]:
  """Held-out book ids: a seeded random order of the books, taken until eval_fraction of the bytes;
  at least one when eval_fraction > 0 and there are 2+ books.
  """
  if eval_fraction <= 0 or len(books) < 2:
    return []
  target = eval_fraction * sum(size for _, size in books)
  ordered = sorted(books, key=lambda b: io_utils.unit_hash(seed, "book:" + b[0]))
  # Take every book that still fits under the target, in the seeded order; skipping one that does
  # not fit (rather than stopping) keeps the eval share close to the target.
  chosen, size_sum = [], 0
  for book_id, size in ordered:
    if size_sum + size <= target:
      chosen.append(book_id)
      size_sum += size
  return chosen or [ordered[0][0]]


def _nest(counts: collections.Counter, prefix: str, keys: Sequence[str] = ()) -> Dict[str, int]:
  """{suffix: count} for the keys under `prefix`; every name in `keys` appears, 0 if unseen."""
  nested = {key: 0 for key in keys}
  nested.update((k[len(prefix) :], v) for k, v in counts.items() if k.startswith(prefix))
  return dict(sorted(nested.items()))


def _corpus_args(
  inputs: Sequence[str],
  normalization: str,
  eval_fraction: float,
  seed: int,
  dedup: bool,
  min_words: int,
  max_words: int,
  input_format: str,
  max_books: Optional[int],
) -> dict:
  """`prepare_corpus`'s arguments checked, as stats.json records them; ValueError naming a bad one,
  FileNotFoundError for a missing input.
  """
  _check_formats(normalization, input_format)
  if not inputs:
    raise ValueError("inputs: expected at least one path, got none")
  if not 0 <= eval_fraction < 1:
    raise ValueError(f"eval_fraction: expected 0 <= f < 1, got {eval_fraction}")
  if not 0 <= min_words <= max_words:
    raise ValueError(f"min_words/max_words: expected 0 <= {min_words} <= {max_words}")
  for path in inputs:
    if not os.path.lexists(path):
      raise FileNotFoundError(
        f"input {path!r} not found (pass --input, or --data_dir / "
        "$TTA_DATA for the default archive)"
      )
    # Its size, its first bytes (a tar?), then its text: read more than once.
    io_utils.check_input_file(path, read_twice=True)
    if not is_tar(path):
      # Read whole as text: a .gz's compressed bytes became U+FFFD "sentences".
      resumable.check_plain(path)
  return {
    "inputs": [{"path": os.path.abspath(p), "bytes": os.path.getsize(p)} for p in inputs],
    "normalization": normalization,
    "eval_fraction": eval_fraction,
    "seed": seed,
    "dedup": dedup,
    "min_words": min_words,
    "max_words": max_words,
    "input_format": input_format,
    "max_books": max_books,
    "pipeline_version": PIPELINE_VERSION,
  }


class _Source(NamedTuple):
  """One input: items are [(book_id, bytes)] of a tar's books read, or [(path, bytes)] of a plain
  file; eval_ids are chosen among ALL of a tar's books, before max_books.
  """

  path: str
  is_tar: bool
  items: List[Tuple[str, int]]
  eval_ids: frozenset


def _list_sources(
  inputs: Sequence[str], eval_fraction: float, seed: int, max_books: Optional[int]
) -> List[_Source]:
  """Lists every input; costs one decompression pass per tar (sizes for the ETA, held-out books)."""
  sources = []
  for path in inputs:
    if is_tar(path):
      books = list_gutenberg_books(path)
      eval_ids = frozenset(choose_eval_books(books, eval_fraction, seed))
      sources.append(_Source(path, True, books[:max_books], eval_ids))
    else:
      sources.append(_Source(path, False, [(path, os.path.getsize(path))], frozenset()))
  return sources


def _jobs(sources: Sequence[_Source], doc_kwargs: dict, input_format: str):
  """Yields the pool jobs (key, text, kwargs): one per book or plain file, in input order."""
  for source in sources:
    if source.is_tar:
      kwargs = dict(doc_kwargs, gutenberg=True, input_format="paragraphs")
      # zip stops reading the stream after the last book wanted (max_books).
      for _, (book_id, text) in zip(source.items, iter_gutenberg_books(source.path)):
        yield (source.path, book_id), text, kwargs
    else:
      with open(source.path, "rb") as f:
        text = _decode(f.read())
      yield (source.path, None), text, dict(doc_kwargs, gutenberg=False, input_format=input_format)


@contextlib.contextmanager
def _mapper(num_workers: int):
  """A `starmap`: in this process for one worker, else in a pool with two documents per worker
  in flight (the parent's memory: a few books)."""
  if num_workers <= 1:
    yield itertools.starmap
    return
  with interrupts.worker_pool(num_workers) as pool:
    yield lambda function, jobs: pool.imap(function, jobs, in_flight=2 * num_workers)


class _Collector:
  """Merges the per-document results, in input order, into `prepare_corpus`'s deduped splits."""

  def __init__(
    self,
    files: Dict[str, object],
    sources: Sequence[_Source],
    dedup: bool,
    eval_fraction: float,
    seed: int,
  ):
    self._files = files
    self._eval_books = {(s.path, b) for s in sources if s.is_tar for b in s.eval_ids}
    self._dedup = dedup
    self._eval_fraction = eval_fraction
    self._seed = seed
    self._seen = set()
    self.counts = collections.Counter()
    self.missing = {"start": [], "end": []}
    self.eval_ids = []
    self.sentences = collections.Counter()  # per split
    self.words = collections.Counter()  # per split

  def add(
    self,
    path: str,
    book_id: Optional[str],
    sentences: Sequence[str],
    doc_counts: collections.Counter,
  ) -> None:
    """Adds one document's sentences (book_id None for a plain file)."""
    self.counts.update(doc_counts)
    if book_id is not None:
      self._count_book(book_id, doc_counts)
    is_eval_book = (path, book_id) in self._eval_books
    if is_eval_book:
      self.eval_ids.append(book_id)
    for sentence in sentences:
      if self._is_duplicate(sentence):
        continue
      if book_id is not None:
        split = "eval" if is_eval_book else "train"
      else:
        held_out = io_utils.unit_hash(self._seed, "line:" + sentence) < self._eval_fraction
        split = "eval" if held_out else "train"
      self._files[split].write(sentence + "\n")
      self.sentences[split] += 1
      self.words[split] += len(sentence.split())

  def _count_book(self, book_id: str, doc_counts: collections.Counter) -> None:
    self.counts["books/total"] += 1
    if doc_counts["books/missing_start_marker"]:
      self.missing["start"].append(book_id)
      logging.warning(
        "corpus: %s: no Gutenberg START marker; header kept (the boilerplate "
        "filter still drops licence paragraphs)",
        book_id,
      )
    if doc_counts["books/missing_end_marker"]:
      self.missing["end"].append(book_id)
      logging.warning("corpus: %s: no Gutenberg END marker; footer kept", book_id)

  def _is_duplicate(self, sentence: str) -> bool:
    if not self._dedup:
      return False
    digest = hashlib.blake2b(sentence.encode("utf-8"), digest_size=8).digest()
    if digest in self._seen:
      self.counts["sentences/duplicates"] += 1
      return True
    self._seen.add(digest)
    return False


def _log_corpus_progress(bar, docs, total_docs, log_every, collector):
  """Every `log_every` documents (and after the last): MB done with rate and ETA (books differ in
  size by 100x: bytes predict the time left, documents do not) and the counts.
  """
  if docs % log_every and docs != total_docs:
    return
  bar.log(
    f"{docs}/{total_docs} documents, {sum(collector.sentences.values())} sentences kept, "
    f"{collector.counts['sentences/duplicates']} duplicates"
  )


def _corpus_stats(args: dict, collector: _Collector, elapsed: float) -> dict:
  """The stats.json record: every candidate accounted for as kept or dropped (with its reason)."""
  counts, sentences, words = collector.counts, collector.sentences, collector.words
  kept = sum(sentences.values())
  total_words = sum(words.values())
  return {
    "args": args,
    "books": {
      "total": counts["books/total"],
      "eval": len(collector.eval_ids),
      "eval_ids": sorted(collector.eval_ids),
      "missing_start_marker": sorted(collector.missing["start"]),
      "missing_end_marker": sorted(collector.missing["end"]),
    },
    "paragraphs": {
      "candidates": counts["paragraphs/candidates"],
      "kept": counts["paragraphs/kept"],
      "dropped": _nest(counts, "paragraphs/dropped/", PARAGRAPH_REASONS),
    },
    "sentences": {
      "candidates": counts["sentences/candidates"],
      "kept": kept,
      "dropped": _nest(counts, "sentences/dropped/", SENTENCE_REASONS),
      "duplicates": counts["sentences/duplicates"],
    },
    "edits": _nest(counts, "edits/"),
    "train": {"sentences": sentences["train"], "words": words["train"]},
    "eval": {"sentences": sentences["eval"], "words": words["eval"]},
    "words": total_words,
    "mean_words_per_sentence": round(total_words / kept, 3) if kept else 0.0,
    "elapsed_s": round(elapsed, 1),
  }


def _collect(
  args: dict, sources: Sequence[_Source], paths: Dict[str, str], num_workers: int, log_every: int
) -> _Collector:
  """Runs every document through `process_document` in num_workers processes (1: in-process) and
  writes the kept sentences to paths {split: path}, atomically; returns the collector.
  """
  doc_kwargs = {key: args[key] for key in ("normalization", "min_words", "max_words")}
  with contextlib.ExitStack() as stack:
    files = {
      split: stack.enter_context(io_utils.atomic_open(path)) for split, path in paths.items()
    }
    collector = _Collector(files, sources, args["dedup"], args["eval_fraction"], args["seed"])
    sizes = {(s.path, key if s.is_tar else None): size for s in sources for key, size in s.items}
    total_docs = sum(len(s.items) for s in sources)
    bar = progress.Progress("corpus", total=sum(sizes.values()) / 1e6, unit="MB")
    results = stack.enter_context(_mapper(num_workers))(
      _process_job, _jobs(sources, doc_kwargs, args["input_format"])
    )
    for docs, ((path, book_id), sentences, doc_counts) in enumerate(results, 1):
      collector.add(path, book_id, sentences, doc_counts)
      bar.done += sizes[(path, book_id)] / 1e6
      _log_corpus_progress(bar, docs, total_docs, log_every, collector)
    if not sum(collector.sentences.values()):
      # Raised in the block: the files it made are taken back (an empty corpus is no success).
      raise ValueError(
        f"{', '.join(s.path for s in sources)}: no sentence kept of "
        f"{collector.counts['sentences/candidates']} candidate(s) (--min_words="
        f"{args['min_words']}, --max_words={args['max_words']}, --input_format="
        f"{args['input_format']})"
      )
  return collector


def prepare_corpus(
  inputs: Sequence[str],
  output_dir: str,
  normalization: str = "none",
  eval_fraction: float = 0.01,
  seed: int = 12345,
  dedup: bool = True,
  min_words: int = 3,
  max_words: int = 100,
  input_format: str = "lines",
  num_workers: Optional[int] = None,
  log_every: int = 20,
  max_books: Optional[int] = None,
  force: bool = False,
) -> dict:
  """Builds train.txt, eval.txt and stats.json in `output_dir`; returns the stats.

  A tar is a Gutenberg archive, anything else a text file in input_format. Lines keep the input
  order. A tar holds out whole BOOKS (`choose_eval_books`: eval sentences are no near-duplicates of
  train ones), a plain file each sentence by a seeded hash; dedup is global and exact. stats.json,
  the stamp, makes a complete output for the same arguments reused unless force.
  """
  args = _corpus_args(
    inputs, normalization, eval_fraction, seed, dedup, min_words, max_words, input_format, max_books
  )
  io_utils.makedirs(output_dir)
  stamp_path = os.path.join(output_dir, STATS_FILE)
  stats = None if force else io_utils.read_stamp(stamp_path, args)
  if stats is not None:
    logging.info(
      "corpus: %s is complete for these arguments; skipping (force=True rebuilds)", output_dir
    )
    return stats
  io_utils.remove_stamp(stamp_path)

  start_time = time.time()
  sources = _list_sources(inputs, eval_fraction, seed, max_books)
  paths = {split: os.path.join(output_dir, split + ".txt") for split in ("train", "eval")}
  collector = _collect(args, sources, paths, num_workers or os.cpu_count() or 1, log_every)
  stats = _corpus_stats(args, collector, time.time() - start_time)
  stats = io_utils.write_stamp(stamp_path, args, outputs=paths.values(), record=stats)
  logging.info(
    "corpus: wrote %s: %d sentences (%d train, %d eval), %d words, %.1f s",
    output_dir,
    stats["sentences"]["kept"],
    stats["train"]["sentences"],
    stats["eval"]["sentences"],
    stats["words"],
    stats["elapsed_s"],
  )
  return stats

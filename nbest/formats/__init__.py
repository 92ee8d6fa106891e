"""N-best lists in the formats ASR and MT toolkits write: `read_nbest`, `write_rescored`, writers.

The contract every reader keeps (docs/DESIGN.md §5.3):
  - list[NBestList], one per utterance, `hyps` in the file's rank order, `refs` [] when there are
    none (a blind test set); either every list has references or none.
  - `scores` are named first-pass scores in natural log, higher is better, converted once in the
    reader (a Kaldi cost c -> -c; fairseq's base 2 times ln 2); the names are
    `FORMATS[fmt].scores`, the same for every hypothesis of a file; what a file cannot give is
    absent.
  - bad input raises ValueError starting `file:line:`; a file whose last line has no newline is
    refused as cut short.
Each format is one module here that registers itself; its reader's docstring gives the file's
rules and their sources.
"""

import dataclasses
import importlib
import inspect
import json
import numbers
import pkgutil
import re
from typing import Callable

from nbest import text_files
from util import io_utils


@dataclasses.dataclass(frozen=True)
class Format:
  """One N-best format.

  Attributes:
    read: (path, refs_path=None, **options) -> (list[NBestList], {key: 'file:line'}); a reader
      of the shared data's sets also takes `data_dir` (a set name in the data root) and `select`
      (`types.list_selection`: only those lists are parsed) from `read_set`.
    write: (lists with the features as scores, source_path, out_path, feature names) -> None;
      a writer of a line-based format also takes `kept` (see `write_rescored`) and the reader's
      options it needs.
    path: str, what `path` (and `out_path`) is.
    refs: str, what `refs_path` is.
    options: str, the format options of `read_nbest`.
    scores: str, the score names the reader gives.
    features: str, how `write_rescored` writes a feature.
    aligned_refs: bool, references are line-aligned files (several: several references per
      segment), read by the reader itself; else keyed files (`<utt> <words>`).
    directory: bool, the rescored output is a directory (replaced as a whole), not a file.
    refs_in_file: bool, the input itself can hold the lists' references, so a set is read
      without a reference file (MWER's sets are, keyed by utterance: formats with this and not
      `aligned_refs`).
    paper_table: bool, ASR files of this format with references feed the paper's table too
      (run_rescoring.py --dev_file/--test_file: the first-pass settings of nbest/settings.py).
  """

  read: Callable
  write: Callable
  path: str
  refs: str
  options: str
  scores: str
  features: str
  aligned_refs: bool = False
  directory: bool = False
  refs_in_file: bool = False
  paper_table: bool = False


_JSON_KEY_RE = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*:')


def _first_lines(path, keys):
  """{key: 'file:line'} of the first line that starts with each key: a TSV row `key<TAB>...`
  or a JSON member `"key": ...`."""
  wanted, found = set(keys), {}
  for lineno, line in enumerate(text_files.split_lines(text_files.read_text_file(path)), 1):
    candidates = [line.split("\t", 1)[0]]
    match = _JSON_KEY_RE.match(line)
    if match:
      try:
        candidates.append(json.loads(match.group(1)))
      except ValueError:
        pass  # not a JSON string after all: the TSV candidate stays
    for key in candidates:
      if key in wanted:
        found.setdefault(key, f"{path}:{lineno}")
  return {key: found.get(key, f"{path}:1") for key in keys}


def with_refs_file(reader):
  """A reader of lists that may carry references; `refs_path` adds them to a blind set."""

  def read(path, refs_path=None):
    lists = reader(path)
    wheres = _first_lines(path, [n.key for n in lists]) if refs_path is not None else {}
    if refs_path is not None:
      if lists[0].refs:
        raise ValueError(f"{wheres[lists[0].key]}: the lists have references already")
      refs = text_files.read_keyed_refs(refs_path)
      text_files.attach_refs(lists, wheres, refs, refs_path)
    return lists, wheres

  return read


SCORE_NOTE = "natural log, higher is better"

# name -> Format, in the order the format modules registered (alphabetical by module).
FORMATS = {}


def register(name, fmt):
  """Adds a format under `name` (a format module calls this when it is imported)."""
  if name in FORMATS:
    raise ValueError(f"N-best format {name!r} registered twice")
  FORMATS[name] = fmt


def _format(fmt):
  if fmt not in FORMATS:
    raise ValueError(f"unknown N-best format {fmt!r}; one of {', '.join(FORMATS)}")
  return FORMATS[fmt]


# What `read_set` gives a reader that takes it, besides the user's format options.
_CONTEXT = ("path", "refs_path", "data_dir", "select")


def _read(fmt, path, refs_path, format_options, **context):
  """(lists, wheres) of `FORMATS[fmt].read`, the options checked; `context` (data_dir, select)
  goes to a reader that takes it."""
  reader = _format(fmt).read
  parameters = inspect.signature(reader).parameters
  accepted = [n for n in parameters if n not in _CONTEXT]
  unknown = sorted(set(format_options) - set(accepted))
  if unknown:
    raise ValueError(
      f"--format_option {unknown[0]}: not an option of the {fmt} format; it takes "
      f"{', '.join(accepted) or 'none'}"
    )
  taken = {k: v for k, v in context.items() if k in parameters and v is not None}
  return reader(path, refs_path=refs_path, **format_options, **taken)


def read_nbest(fmt, path, refs_path=None, **format_options):
  """Reads N-best lists in a toolkit's format (the contract is in this module's docstring).

  Args:
    fmt: str, a key of FORMATS.
    path: str, the input (`FORMATS[fmt].path`).
    refs_path: str or None, the references (`FORMATS[fmt].refs`); None: only what the file has.
    **format_options: the format's options (`FORMATS[fmt].options`).

  Returns:
    list[NBestList].

  Raises:
    ValueError: an unknown format, or bad input; the message names `file:line`.
  """
  lists, _ = _read(fmt, path, refs_path, format_options)
  return lists


def read_set(fmt, path, refs_paths=(), options=None, data_dir=None, select=None):
  """The lists of one set with their references: the one reader of rescoring and MWER.

  Args:
    fmt: str, a key of FORMATS.
    path: str, the input (`FORMATS[fmt].path`; the espnet format: also a set name).
    refs_paths: sequence of str, the reference files (`FORMATS[fmt].refs`), maybe none; several
      give several references per list: line-aligned files for a format with `aligned_refs`,
      else keyed Kaldi text files after the first (each with every key).
    options: dict or None, the format's options (`FORMATS[fmt].options`).
    data_dir: str or None, the data root, for a set name.
    select: None, or `types.list_selection`'s function: a reader that takes it parses only those
      lists; the others give every list (the caller cuts them).

  Returns:
    (list[NBestList], int): the lists, and how many line-aligned references have no list (ids
    the toolkit left out: `text_files.add_aligned_refs`; 0 for the other kinds).

  Raises:
    ValueError: as `read_nbest`, and a list without a reference or a keyed reference without a
      list; `file:line`.
  """
  refs_paths, options = list(refs_paths), options or {}
  context = {"data_dir": data_dir, "select": select}
  if _format(fmt).aligned_refs and refs_paths:
    lists, wheres = _read(fmt, path, None, options, **context)
    return lists, text_files.add_aligned_refs(lists, wheres, refs_paths)
  lists, _ = _read(fmt, path, refs_paths[0] if refs_paths else None, options, **context)
  for extra in refs_paths[1:]:
    refs = text_files.read_keyed_refs(extra)
    for lst in lists:
      if lst.key not in refs:
        raise ValueError(f"{extra}:1: no reference for {lst.key!r}")
      lst.refs.append(refs[lst.key][0][0])
    keys = {lst.key for lst in lists}
    for key, (_, where) in refs.items():
      if key not in keys:
        raise ValueError(f"{where}: reference for {key!r}, which has no hypotheses")
  return lists, 0


def write_rescored(fmt, lists, source_path, out_path, features, kept=None, **format_options):
  """Writes the lists in their input format with each feature added as a named score.

  Reading `out_path` back with the same format (and options; nemo: `columns` naming the new
  columns) gives the lists with the features among their scores (fairseq's up to rounding).
  Written atomically: a failure leaves no partial output.

  Args:
    fmt: str, a key of FORMATS: the format the lists were read in.
    lists: list[NBestList], as `read_nbest(fmt, source_path, ...)` returned them (same order),
      or the ones of them at `kept`.
    source_path: str, the file they were read from: the line-based formats (nemo, fairseq,
      moses) copy its lines of `lists` and add to them; the others write from the lists.
    out_path: str, the output file, or directory (kaldi, espnet2, espnet: replaced as a whole).
    features: dict[str, list[list[float]]], name -> values [len(lists)][len(hyps)], natural log,
      higher is better (a writer converts them as its format needs: `FORMATS[fmt].features`).
    kept: increasing ints or None, the indices of `lists` among the lists read (None: all).
    **format_options: the options the lists were read with; a writer takes those it needs.

  Raises:
    ValueError: a bad or already used feature name, values not aligned with the lists, lists
      that do not come from `source_path`, lists the format cannot hold.
  """
  keys = [n.key for n in lists]
  if len(set(keys)) != len(keys):
    raise ValueError(f"{out_path}: the lists repeat a key")
  if kept is not None:
    kept = list(kept)
    if len(kept) != len(lists) or any(
      isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0 for i in kept
    ):
      raise ValueError(f"kept: {len(lists)} indices of the lists read expected, found {kept}")
    if any(a >= b for a, b in zip(kept, kept[1:])):
      raise ValueError(f"kept: indices must increase (the lists in their source's order): {kept}")
  rescored = text_files.add_features(lists, features)
  write = _format(fmt).write
  # The writers of whole lists need neither the cut nor the reader's options.
  taken = inspect.signature(write).parameters
  options = {k: v for k, v in dict(format_options, kept=kept).items() if k in taken}
  write(rescored, source_path, out_path, list(features), **options)


def _chosen(lists, choice):
  if len(choice) != len(lists):
    raise ValueError(f"choice has {len(choice)} entries for {len(lists)} lists")
  for nbest, index in zip(lists, choice):
    valid = isinstance(index, numbers.Integral) and not isinstance(index, bool)
    if not valid or not 0 <= index < len(nbest.hyps):
      raise ValueError(f"choice {index!r} is not a hypothesis of {nbest.key!r}")
    yield text_files.check_key(nbest.key), text_files.check_text(nbest.hyps[index].text, "text")


def write_kaldi_text(lists, choice, path):
  """Writes the chosen hypotheses as a Kaldi `text` file (`<utt> <words>`), atomically.

  Args:
    lists: list[NBestList].
    choice: sequence of int, the index (0-based) of the chosen hypothesis of each list.
    path: str, the output file.
  """
  lines = [f"{key} {text}".rstrip(" ") for key, text in _chosen(lists, choice)]
  io_utils.write_atomically(path, text_files.lines_text(lines))


def write_trn(lists, choice, path):
  """Writes the chosen hypotheses as an sclite trn file (`<words> (<utt>)`), atomically.

  Args: as `write_kaldi_text`.
  """
  lines = []
  for key, text in _chosen(lists, choice):
    if "(" in key or ")" in key:
      raise ValueError(f"cannot write the key {key!r} to a trn file: parentheses")
    lines.append(f"{text} ({key})".lstrip(" "))
  io_utils.write_atomically(path, text_files.lines_text(lines))


# Every module of this package is a format that registers itself.
for _module in pkgutil.iter_modules(__path__):
  importlib.import_module(f"{__name__}.{_module.name}")

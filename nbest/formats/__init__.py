"""N-best lists in the formats ASR and MT toolkits write: `read_nbest`, `write_rescored`,
`export` (whole lists into a toolkit's layout, convert_nbest.py), writers.

Every reader keeps the contract of docs/DESIGN.md §5.3 (scores in natural log, higher is better;
bad input is a ValueError starting `file:line:`); each format is one module here that registers
itself, its reader's docstring naming the toolkit source of each rule: `kaldi`, `espnet2`, `nemo`,
`fairseq`, `moses`, `sockeye`, `espnet` (the shared data's layout), `mlm_json` (mlm-scoring's
JSON), `tsv`.
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
class Export:
  """How whole lists are written from nothing in a format, with their references, into a directory
  (convert_nbest.py); `write_rescored` instead writes back lists read from a file.

  Attributes:
    write: (lists, out_dir) -> {reader option: value} that reads them back (e.g. nbest=30); writes
      the lists at `lists` and their references at `refs` (when the lists have references, or
      always when the file carries the keys); ValueError for lists the format cannot hold.
    lists: the lists' path in the directory; `{width}` stands for the hypotheses per list.
    refs: the references' path in the directory; None: they are in the lists' file.
  """

  write: Callable
  lists: str
  refs: str = None

  def paths(self, lists):
    """(lists path, refs path or None) relative to the directory, for `lists`."""
    return self.lists.format(width=len(lists[0].hyps) if lists else 0), self.refs


@dataclasses.dataclass(frozen=True)
class Format:
  """One N-best format; its str fields (path, refs, options, scores, features) describe it in words.

  Attributes:
    read: (path, refs_path=None, **options) -> (list[NBestList], {key: 'file:line'}); may also
      take `data_dir` and `select` from `read_set`.
    write: (lists with the features as scores, source_path, out_path, feature names) -> None;
      may also take `kept` and the reader's options.
    aligned_refs: references are line-aligned files read by the reader itself; else keyed files.
    directory: the rescored output is a directory, replaced as a whole.
    refs_in_file: the input can hold its own references (with not `aligned_refs`: MWER's formats).
    paper_table: ASR files of this format feed run_rescoring.py's --dev_file/--test_file table.
    export: how convert_nbest.py writes lists in this format; None: it does not.
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
  export: Export = None


_JSON_KEY_RE = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*:')


def _first_lines(path, keys):
  """{key: 'file:line'} of each key's first TSV row `key<TAB>...` or JSON member `"key": ...`."""
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
  """(lists, wheres) of `FORMATS[fmt].read`; `context` goes only to a reader that takes it."""
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
  """list[NBestList] of `path` in format `fmt` (a key of FORMATS), with `refs_path`'s references;
  ValueError for an unknown format or option too."""
  lists, _ = _read(fmt, path, refs_path, format_options)
  return lists


def read_set(fmt, path, refs_paths=(), options=None, data_dir=None, select=None):
  """(lists, how many line-aligned references have no list) of one set: the one reader of
  rescoring and MWER. Several `refs_paths` give several references per list (keyed files must
  each hold every key); `data_dir` is for a set name as `path`; `select` only cuts what a reader
  that takes it parses, the caller cuts the others' lists."""
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
  """Writes the lists atomically in their input format, each feature added as a named score.

  Reading `out_path` back with the same format and options (nemo: `columns` naming the new
  columns) gives the features among the scores (fairseq's up to rounding).

  Args:
    lists: list[NBestList] as `read_nbest(fmt, source_path, ...)` gave them, or those at `kept`;
      the line-based formats copy their lines from `source_path`.
    features: {name: [len(lists)][len(hyps)] float}, natural log, higher is better.
    kept: increasing indices of `lists` among the lists read; None: all.
    **format_options: the options the lists were read with.
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


def exportable():
  """The names of the formats convert_nbest.py writes, in registry order."""
  return tuple(name for name, fmt in FORMATS.items() if fmt.export is not None)


def write_kaldi_text(lists, choice, path):
  """Writes hypothesis `choice[i]` (0-based) of each list as a Kaldi `text` file, atomically."""
  lines = [f"{key} {text}".rstrip(" ") for key, text in _chosen(lists, choice)]
  io_utils.write_atomically(path, text_files.lines_text(lines))


def write_trn(lists, choice, path):
  """Writes hypothesis `choice[i]` of each list as an sclite trn file, atomically."""
  lines = []
  for key, text in _chosen(lists, choice):
    if "(" in key or ")" in key:
      raise ValueError(f"cannot write the key {key!r} to a trn file: parentheses")
    lines.append(f"{text} ({key})".lstrip(" "))
  io_utils.write_atomically(path, text_files.lines_text(lines))


# Every module of this package is a format that registers itself.
for _module in pkgutil.iter_modules(__path__):
  importlib.import_module(f"{__name__}.{_module.name}")

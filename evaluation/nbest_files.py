"""The text files behind the N-best formats: lines, keyed files, references, features, outputs.

One owner for the rules every toolkit reader and writer of evaluation/nbest_formats.py shares:
  read_text             a file's UTF-8 text; a last line without its newline is a truncated file
  read_keyed_refs       references from a Kaldi `text` file (`<utt> <words>`, also ESPnet's
                        `data/<set>/text`)
  read_aligned_refs     references one per line, line i for segment i-1 (MT), one file per
                        reference set
  attach_refs           references joined to the lists by key, both ways checked
  add_features          copies of the lists with the new features as named scores, checked
  kept_indices          which of a source's lists a writer writes back (a cut set: --max_lists)
  write_files           a set of output files (a directory) written atomically

Errors are ValueError naming `file:line`, as in evaluation/nbest_io.py, whose parsing helpers
(numbers, keyed lines, the reference policy) these build on.
"""

import dataclasses
import math
import os
import re
import shutil

from evaluation import nbest_io
from util import io_utils

# Feature and score names go into file names (Kaldi `<name>.cost`), Moses `NAME=` labels, TSV
# headers and JSON fields: no white space, '=', '|', '/' or tab in any of them.
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
# Names the formats give to other fields: a JSON hypothesis' "text", TSV's key/rank/ref/text.
_RESERVED = ("text", "ref", "key", "rank")


def read_text(path):
  """The text of a UTF-8 file that ends with a newline, or is empty (a last line without one is
  a file cut short: nbest_io._check_final_newline).

  Raises:
    ValueError: bytes that are not UTF-8, or a last line without newline; `file:line`.
  """
  text = nbest_io._read_text_file(path)
  nbest_io._check_final_newline(path, text)
  return text


def read_lines(path):
  """`read_text` split into lines (see nbest_io._split_lines)."""
  return nbest_io._split_lines(read_text(path))


def check_name(name, where, what="score"):
  """Returns `name` if it can name a score in every format, else raises ValueError."""
  if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
    raise ValueError(
      f"{where}: {what} name {name!r} must be a letter or '_' followed by letters, digits, "
      "'_', '.' or '-'"
    )
  return name


def read_keyed_refs(path):
  """Reads a Kaldi `text` file of references.

  Format (Kaldi data dirs, ESPnet2's `data/<set>/text`): `<utt> <words>` per line, the key ending
  at the first space or tab.

  Returns:
    dict[str, tuple[list[str], str]], utt -> ([reference], 'file:line').

  Raises:
    ValueError: a malformed line, a repeated key, a blank reference; `file:line`.
  """
  keyed = nbest_io._parse_espnet_keyed(path, read_text(path), nbest_io._check_reference)
  return {key: ([ref], where) for key, (ref, where) in keyed.items()}


def read_aligned_refs(paths):
  """Reads line-aligned references: line i of each file is a reference of segment i - 1.

  Args:
    paths: str or sequence of str, one file per reference set (several for multi-reference
      BLEU), all with the same number of lines.

  Returns:
    dict[str, tuple[list[str], str]], segment id ("0", "1", ...) -> (references, 'file:line').

  Raises:
    ValueError: a blank reference, files of different lengths, no lines; `file:line`.
  """
  paths = [paths] if isinstance(paths, str) else list(paths)
  if not paths:
    raise ValueError("no reference files given")
  columns = []
  for path in paths:
    lines = read_lines(path)
    if not lines:
      raise ValueError(f"{path}:1: no references")
    if columns and len(lines) != len(columns[0]):
      raise ValueError(
        f"{path}:{min(len(lines), len(columns[0])) + 1}: {len(lines)} lines, but {paths[0]} "
        f"has {len(columns[0])} (reference files must be line-aligned)"
      )
    columns.append(
      [nbest_io._check_reference(line, f"{path}:{n}") for n, line in enumerate(lines, 1)]
    )
  return {
    str(i): ([column[i] for column in columns], f"{paths[0]}:{i + 1}")
    for i in range(len(columns[0]))
  }


def attach_refs(lists, wheres, refs, refs_path):
  """Sets each list's references from `refs`, requiring the same keys on both sides.

  Args:
    lists: list[NBestList], modified in place (their refs must be empty).
    wheres: dict[str, str], key -> 'file:line' of the list's first hypothesis.
    refs: dict[str, tuple[list[str], str]], key -> (references, 'file:line').
    refs_path: str or sequence of str, the reference file(s), for messages.

  Raises:
    ValueError: a list without a reference, or a reference without a list; `file:line`.
  """
  for nbest in lists:
    if nbest.key not in refs:
      raise ValueError(f"{wheres[nbest.key]}: {nbest.key!r} has no reference in {refs_path}")
    nbest.refs = list(refs[nbest.key][0])
  keys = {nbest.key for nbest in lists}
  for key, (_, where) in refs.items():
    if key not in keys:
      raise ValueError(f"{where}: reference for {key!r}, which has no hypotheses")


def add_features(lists, features):
  """Copies of the lists with the new features added to each hypothesis' scores.

  Args:
    lists: list[NBestList], the lists as read (left unchanged).
    features: dict[str, list[list[float]]], name -> values [len(lists)][len(hyps)].

  Returns:
    list[NBestList], new lists whose hypotheses carry the features as named scores.

  Raises:
    ValueError: a bad, reserved (text, ref, key, rank) or already used name, values not aligned
      with the lists, a value that is not a finite number.
  """
  used = {name for nbest in lists for hyp in nbest.hyps for name in hyp.scores}
  for name, values in features.items():
    check_name(name, "features", "feature")
    if name in _RESERVED:
      raise ValueError(f"features: {name!r} names another field in some formats")
    if name in used:
      raise ValueError(f"features: {name!r} is already a score of the lists")
    if len(values) != len(lists) or any(
      len(row) != len(nbest.hyps) for row, nbest in zip(values, lists)
    ):
      raise ValueError(f"features: {name!r} is not aligned with the lists and hypotheses")
    for row, nbest in zip(values, lists):
      for value in row:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
          raise ValueError(f"features: {name!r} of {nbest.key!r}: {value!r} is not a number")
        if not math.isfinite(value):
          raise ValueError(f"features: {name!r} of {nbest.key!r}: {value!r} is not finite")
  out = []
  for i, nbest in enumerate(lists):
    hyps = [
      dataclasses.replace(
        hyp, scores={**hyp.scores, **{n: float(v[i][j]) for n, v in features.items()}}
      )
      for j, hyp in enumerate(nbest.hyps)
    ]
    out.append(nbest_io.NBestList(key=nbest.key, refs=list(nbest.refs), hyps=hyps))
  return out


def kept_indices(count, kept, source_path):
  """The indices of the source's lists to write: all `count`, or `kept` (increasing indices of
  the lists as read, what --max_lists / --sample_lists keep).

  Raises:
    ValueError: an index past the source's lists (the lists were not read from it).
  """
  if kept is None:
    return list(range(count))
  if kept and kept[-1] >= count:
    raise ValueError(
      f"{source_path}: has {count} lists, no list {kept[-1] + 1} (not read from this file)"
    )
  return list(kept)


def score_names(lists, label):
  """The score names every hypothesis of `lists` carries, in first-seen order.

  Raises:
    ValueError: hypotheses carry different names (a writer would drop or invent scores).
  """
  names = list(lists[0].hyps[0].scores) if lists and lists[0].hyps else []
  for nbest in lists:
    for hyp in nbest.hyps:
      if set(hyp.scores) != set(names):
        raise ValueError(
          f"{label}: {nbest.key!r} has scores {sorted(hyp.scores)}, others {sorted(names)}"
        )
  return names


def check_text(text, what):
  """Refuses a text that would break a line-based file (a newline inside it)."""
  if "\n" in text or "\r" in text:
    raise ValueError(f"cannot write {what} {text!r}: newline inside")
  return text


def check_key(key):
  """Refuses a key a Kaldi-style `<key> <value>` line cannot hold."""
  if not key or any(c in key for c in " \t\n\r"):
    raise ValueError(f"cannot write the key {key!r}: empty or with white space")
  return key


def write_files(out_dir, files, owned):
  """Writes a directory of text files atomically: built aside, then renamed over `out_dir`.

  Args:
    out_dir: str, the directory; an existing one is replaced as a whole (no stale file of an
      earlier run stays beside the new ones), but only if it holds nothing but `owned` files.
    files: dict[str, str], path relative to out_dir -> text.
    owned: (relative path) -> bool, whether a file is of the kind this writer writes.

  Raises:
    ValueError: `out_dir` holds a file this writer would not write (the source, or other data).
  """
  out_dir = os.path.abspath(out_dir)
  if os.path.isdir(out_dir):
    for directory, _, names in sorted(os.walk(out_dir)):
      for name in sorted(names):
        rel = os.path.relpath(os.path.join(directory, name), out_dir).replace(os.sep, "/")
        if not owned(rel):
          raise ValueError(
            f"{out_dir}: holds {rel}, which is not an output of this writer: refusing to replace "
            "it (give a new directory)"
          )
  parent = os.path.dirname(out_dir)
  tmp = io_utils.make_temp_dir(parent, "." + os.path.basename(out_dir) + ".")
  try:
    for rel, text in files.items():
      full = os.path.join(tmp, rel)
      os.makedirs(os.path.dirname(full), exist_ok=True)
      with open(full, "w", encoding="utf-8") as f:
        f.write(text)
    if os.path.isdir(out_dir):
      shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def lines_text(lines):
  """Lines joined into a file's text, each ending with a newline."""
  return "".join(line + "\n" for line in lines)

"""The text-file rules several N-best readers and writers share (public: any format module
may use them): lines, numbers, keyed files, references, feature names, outputs."""

import dataclasses
import math
import os
import re

from absl import logging

from nbest import types
from util import io_utils

# A plain decimal number; float() alone would also accept "nan", "inf" and "1_0".
_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_KEYED_RE = re.compile(r"([^ \t]+)(?:[ \t](.*))?", re.DOTALL)


def check_final_newline(label, text):
  """Refuses a text whose last line has no newline: the tools behind every line-based file read
  here end each line with one, so such a file was cut short (a full disk, a killed job), and its
  last value may be cut too and still parse."""
  if text and not text.endswith("\n"):
    raise ValueError(
      f"{label}:{text.count(chr(10)) + 1}: the last line has no newline (a truncated file?)"
    )


def split_lines(text):
  """Splits on '\\n' only (str.splitlines would also split on \\x1c, \\u2028, ... inside text).

  A final newline does not start an empty line; a trailing '\\r' (CRLF files) is removed.
  """
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def parse_number(value, where, what):
  """Returns a finite float from a decimal string or a JSON number, else raises ValueError."""
  if isinstance(value, bool):  # bool is an int subclass; true/false is never a score
    raise ValueError(f"{where}: {what}: expected a number, found {value!r}")
  if isinstance(value, (int, float)):
    number = float(value)
  elif isinstance(value, str) and _NUMBER_RE.fullmatch(value.strip()):
    number = float(value.strip())
  else:
    raise ValueError(f"{where}: {what}: expected a number, found {value!r}")
  if not math.isfinite(number):
    raise ValueError(f"{where}: {what}: expected a finite number, found {value!r}")
  return number


def parse_tensor_float(value, where, what):
  """Parses ESPnet's `tensor(-1.25)` (its str() of a torch scalar; `tensor(-1.25,
  device='cuda:0')` when decoded on a GPU), a bare number string, or a JSON number."""
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    number = float(value)
  elif isinstance(value, str):
    tensor = value.startswith("tensor(") and value.endswith(")")
    inner = value[7:-1].split(",", 1)[0] if tensor else value
    try:
      # float() also takes "1_0"; "nan"/"inf" fail the finiteness check below.
      number = math.nan if "_" in inner else float(inner)
    except ValueError:
      number = math.nan
  else:
    number = math.nan
  if not math.isfinite(number):
    raise ValueError(
      f"{where}: {what}: expected a finite number or tensor(<number>), found {value!r}"
    )
  return number


def check_reference(text, where):
  text = text.strip()
  if not text:
    raise ValueError(f"{where}: blank reference (WER/BLEU would be undefined)")
  return text


def read_text_file(path):
  """The UTF-8 text of a file, without a byte-order mark (Windows editors write one; it is no
  part of the first key or word); bytes that are not UTF-8 raise ValueError naming `file:line`."""
  with open(path, "rb") as f:
    data = f.read()
  try:
    return data.decode("utf-8").removeprefix("\ufeff")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise ValueError(
      f"{path}:{line}: not UTF-8 ({e.reason} at byte {e.start}: {data[e.start : e.end]!r})"
    ) from None


def line_key(line):
  """The key of a `<key> <value>` line, None for a line without one."""
  match = _KEYED_RE.match(line)
  return match and match.group(1)


def parse_keyed(label, text, parse_value, keys=None):
  """Parses `<utt_id> <value>` lines into {utt_id: (value, 'label:line')}.

  The key ends at the first space or tab (Kaldi's text archives and data dirs; ESPnet's
  DatadirWriter writes `key value`); a line that starts with white space has no key. With
  `keys` (a set), the lines of other keys are skipped unparsed.
  """
  check_final_newline(label, text)
  out = {}
  for lineno, line in enumerate(split_lines(text), 1):
    # A line without a key is not skipped: the parse below names it.
    if keys is not None and (key := line_key(line)) is not None and key not in keys:
      continue
    where = f"{label}:{lineno}"
    match = _KEYED_RE.fullmatch(line)
    if not match:
      raise ValueError(f"{where}: expected '<utt_id> <value>', found {line!r}")
    key, rest = match.group(1), match.group(2) or ""
    if key in out:
      raise ValueError(f"{where}: utterance {key!r} repeated (first at {out[key][1]})")
    out[key] = (parse_value(rest, where), where)
  return out


def keyed_text(rest, where):
  del where  # every text is legal, including the empty one (everything deleted)
  return rest.strip()


def check_same_keys(a, a_label, b, b_label):
  for key, (_, where) in a.items():
    if key not in b:
      raise ValueError(f"{where}: utterance {key!r} is missing from {b_label}")
  for key, (_, where) in b.items():
    if key not in a:
      raise ValueError(f"{where}: utterance {key!r} is missing from {a_label}")


def collect_ranks(ranks, key):
  hyps = []
  for rank, by_key in enumerate(ranks, 1):
    if key in by_key:
      if len(hyps) != rank - 1:
        raise ValueError(
          f"{by_key[key][1]}: utterance {key!r} appears at rank {rank} "
          f"but not at rank {len(hyps) + 1}"
        )
      hyps.append(by_key[key][0])
  return hyps


# Feature and score names go into file names (Kaldi `<name>.cost`), Moses `NAME=` labels, TSV
# headers and JSON fields: no white space, '=', '|', '/' or tab in any of them.
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
# Names the formats give to other fields: a JSON hypothesis' "text", TSV's key/rank/ref/text.
_RESERVED = ("text", "ref", "key", "rank")


def read_text(path):
  """The text of a UTF-8 file that ends with a newline, or is empty (a last line without one is
  a file cut short: check_final_newline).

  Raises:
    ValueError: bytes that are not UTF-8, or a last line without newline; `file:line`.
  """
  text = read_text_file(path)
  check_final_newline(path, text)
  return text


def read_lines(path):
  """`read_text` split into lines (see split_lines)."""
  return split_lines(read_text(path))


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
  keyed = parse_keyed(path, read_text(path), check_reference)
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
    columns.append([check_reference(line, f"{path}:{n}") for n, line in enumerate(lines, 1)])
  return {
    str(i): ([column[i] for column in columns], f"{paths[0]}:{i + 1}")
    for i in range(len(columns[0]))
  }


def attach_refs(lists, wheres, refs, refs_path, partial=False):
  """Sets each list's references from `refs`, requiring a reference for every list.

  Args:
    lists: list[NBestList], modified in place (their refs must be empty).
    wheres: dict[str, str], key -> 'file:line' of the list's first hypothesis.
    refs: dict[str, tuple[list[str], str]], key -> (references, 'file:line').
    refs_path: str or sequence of str, the reference file(s), for messages.
    partial: bool, references without a list are allowed (else refused).

  Returns:
    list[str], the keys of the references without a list, in `refs`' order.

  Raises:
    ValueError: a list without a reference, or (not `partial`) a reference without a list;
      `file:line`.
  """
  for nbest in lists:
    if nbest.key not in refs:
      raise ValueError(f"{wheres[nbest.key]}: {nbest.key!r} has no reference in {refs_path}")
    nbest.refs = list(refs[nbest.key][0])
  keys = {nbest.key for nbest in lists}
  unmatched = [key for key in refs if key not in keys]
  if unmatched and not partial:
    key = unmatched[0]
    raise ValueError(f"{refs[key][1]}: reference for {key!r}, which has no hypotheses")
  return unmatched


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
    out.append(types.NBestList(key=nbest.key, refs=list(nbest.refs), hyps=hyps))
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
  with io_utils.atomic_dir(out_dir) as tmp:
    for rel, text in files.items():
      full = os.path.join(tmp, rel)
      os.makedirs(os.path.dirname(full), exist_ok=True)
      with open(full, "w", encoding="utf-8") as f:
        f.write(text)


def lines_text(lines):
  """Lines joined into a file's text, each ending with a newline."""
  return "".join(line + "\n" for line in lines)


def attach_keyed_refs(lists, wheres, refs_path):
  if refs_path is not None:
    attach_refs(lists, wheres, read_keyed_refs(refs_path), refs_path)
  return lists, wheres


def attach_aligned_refs(lists, wheres, refs_path):
  """A reader's `add_aligned_refs` (when `refs_path` is given): returns (lists, wheres)."""
  if refs_path is not None:
    add_aligned_refs(lists, wheres, refs_path)
  return lists, wheres


def add_aligned_refs(lists, wheres, refs_path):
  """Sets the lists' references from line-aligned files (`read_aligned_refs`), replacing any.

  Such files are the test set's own, one line per input; a toolkit may leave an input out
  (fairseq-generate skips one too long for the model, --skip-invalid-size-inputs-valid-test),
  which the user cannot mend in the references. So the lists present are scored against their
  lines and a reference without a list is counted and logged, not refused; a list without a
  reference line is refused.

  Args:
    lists: list[NBestList], keyed "0", "1", ... (the line from 0), modified in place.
    wheres: dict[str, str], key -> 'file:line' of the list.
    refs_path: str or sequence of str, the reference file(s).

  Returns:
    int, the number of references without a list.
  """
  for nbest in lists:
    nbest.refs = []
  refs = read_aligned_refs(refs_path)
  unmatched = attach_refs(lists, wheres, refs, refs_path, partial=True)
  if unmatched:
    lines = ", ".join(refs[key][1].rsplit(":", 1)[1] for key in unmatched[:5])
    logging.warning(
      "%s: %d of the %d references have no hypotheses (line %s%s: inputs the toolkit left out, "
      "as fairseq's --skip-invalid-size-inputs-valid-test does); the metrics are of the %d "
      "lists present",
      refs_path if isinstance(refs_path, str) else refs_path[0],
      len(unmatched),
      len(refs),
      lines,
      ", ..." if len(unmatched) > 5 else "",
      len(lists),
    )
  return len(unmatched)


def check_nbest_option(nbest):
  if nbest is not None and (isinstance(nbest, bool) or not isinstance(nbest, int) or nbest < 1):
    raise ValueError(f"nbest must be a positive integer, found {nbest!r}")


def check_source(lists, allowed, source_path, wheres):
  """The lists to write are the ones read from `source_path`.

  Args:
    lists: list[NBestList], the lists to write.
    allowed: dict[str, list[tuple[str, ...]]], key -> per hypothesis the texts it may have.
    source_path: str, for messages.
    wheres: dict[str, str], key -> 'file:line' in the source.
  """
  if [n.key for n in lists] != list(allowed):
    raise ValueError(f"{source_path}: its segments are not the lists' (not read from this file)")
  for nbest in lists:
    texts = allowed[nbest.key]
    if len(nbest.hyps) != len(texts):
      raise ValueError(
        f"{wheres[nbest.key]}: {nbest.key!r} has {len(texts)} hypotheses here, "
        f"{len(nbest.hyps)} in the lists (not read from this file)"
      )
    for j, hyp in enumerate(nbest.hyps):
      if hyp.text not in texts[j]:
        raise ValueError(
          f"{wheres[nbest.key]}: hypothesis {j + 1} of {nbest.key!r} is not {hyp.text!r} "
          "(the lists were not read from this file)"
        )

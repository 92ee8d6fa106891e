"""The text-file rules the N-best formats share: lines, numbers, keyed files, references, names."""

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
  """Refuses a text whose last line has no newline: every toolkit here ends its lines with one, so
  the file was cut short and its last value may be cut too and still parse."""
  if text and not text.endswith("\n"):
    raise ValueError(
      f"{label}:{text.count(chr(10)) + 1}: the last line has no newline (a truncated file?)"
    )


def split_lines(text):
  """Splits on '\\n' only (str.splitlines also splits on \\x1c, \\u2028); drops a final '\\r'."""
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def parse_number(value, where, what):
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
  """Parses ESPnet's str() of a torch scalar, `tensor(-1.25)` or `tensor(-1.25, device='cuda:0')`,
  a bare number string, or a JSON number."""
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
  """The UTF-8 text of a file without a byte-order mark (Windows editors write one)."""
  with io_utils.open_file(path, "rb") as f:
    data = f.read()
  try:
    return data.decode("utf-8").removeprefix("\ufeff")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise ValueError(
      f"{path}:{line}: not UTF-8 ({e.reason} at byte {e.start}: {data[e.start : e.end]!r})"
    ) from None


def line_key(line):
  match = _KEYED_RE.match(line)
  return match and match.group(1)


def parse_keyed(label, text, parse_value, keys=None):
  """{utt_id: (value, 'label:line')} of Kaldi-style `<utt_id> <value>` lines (the key ends at the
  first space or tab); with `keys`, the lines of other keys are skipped unparsed."""
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
  """`read_text_file`, refused when cut short (`check_final_newline`)."""
  text = read_text_file(path)
  check_final_newline(path, text)
  return text


def read_lines(path):
  return split_lines(read_text(path))


def check_name(name, where, what="score"):
  if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
    raise ValueError(
      f"{where}: {what} name {name!r} must be a letter or '_' followed by letters, digits, "
      "'_', '.' or '-'"
    )
  return name


def read_keyed_refs(path):
  """{utt: ([reference], 'file:line')} of a Kaldi `text` file (`<utt> <words>` lines)."""
  keyed = parse_keyed(path, read_text(path), check_reference)
  return {key: ([ref], where) for key, (ref, where) in keyed.items()}


def read_aligned_refs(paths):
  """{segment id "0", "1", ...: (references, 'file:line')} of line-aligned files, one file per
  reference set (several for multi-reference BLEU)."""
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
  """Sets each list's references (in place) from `refs`, {key: (references, 'file:line')};
  returns the keys of references without a list, refused unless `partial`."""
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
  """Copies of `lists`, each hypothesis with `features` ({name: [list][hyp]}) among its scores."""
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
  """The indices of the source's lists to write: all `count`, or `kept` (`write_rescored`'s)."""
  if kept is None:
    return list(range(count))
  if kept and kept[-1] >= count:
    raise ValueError(
      f"{source_path}: has {count} lists, no list {kept[-1] + 1} (not read from this file)"
    )
  return list(kept)


def score_names(lists, label):
  """The score names every hypothesis carries; different names raise (a writer would drop some)."""
  names = list(lists[0].hyps[0].scores) if lists and lists[0].hyps else []
  for nbest in lists:
    for hyp in nbest.hyps:
      if set(hyp.scores) != set(names):
        raise ValueError(
          f"{label}: {nbest.key!r} has scores {sorted(hyp.scores)}, others {sorted(names)}"
        )
  return names


def check_text(text, what):
  if "\n" in text or "\r" in text:
    raise ValueError(f"cannot write {what} {text!r}: newline inside")
  return text


def check_key(key):
  if not key or any(c in key for c in " \t\n\r"):
    raise ValueError(f"cannot write the key {key!r}: empty or with white space")
  return key


def write_refs(lists, path, keyed=True):
  """Writes the lists' references, one per list, atomically: a Kaldi `text` file (`<key> <ref>`)
  or, not `keyed`, a line-aligned one (line i + 1: list i); nothing when no list has one. Returns
  whether it wrote; ValueError for a list with several."""
  if not any(nbest.refs for nbest in lists):
    return False
  lines = []
  for nbest in lists:
    if len(nbest.refs) != 1:
      raise ValueError(
        f"{path}: one reference per list is written, {nbest.key!r} has {len(nbest.refs)}"
      )
    ref = check_text(nbest.refs[0], "reference")
    lines.append(f"{check_key(nbest.key)} {ref}" if keyed else ref)
  io_utils.write_atomically(path, lines_text(lines))
  return True


def beam_width(lists, why):
  """The one number of hypotheses of every list; ValueError naming a list that differs and `why`
  the format needs it."""
  width = len(lists[0].hyps)
  for nbest in lists:
    if len(nbest.hyps) != width:
      raise ValueError(
        f"list {nbest.key!r} has {len(nbest.hyps)} hypotheses, {lists[0].key!r} {width}: {why}"
      )
  return width


def required_score(lists, name, fmt):
  """Score names of the lists (`score_names`), refused in one line when `name` is not among them."""
  names = score_names(lists, fmt)
  if name not in names:
    raise ValueError(
      f"{fmt}: the format needs a {name!r} score per hypothesis; the lists have {names}"
    )
  return names


def write_files(out_dir, files, owned):
  """Writes {relative path: text} as `out_dir`, atomically, replacing an existing `out_dir` as a
  whole (no stale file stays) only when `owned(relative path)` holds for each of its files."""
  out_dir = io_utils.absolute(out_dir)
  if io_utils.isdir(out_dir):
    for directory, _, names in sorted(io_utils.walk(out_dir)):
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
  return "".join(line + "\n" for line in lines)


def attach_keyed_refs(lists, wheres, refs_path):
  if refs_path is not None:
    attach_refs(lists, wheres, read_keyed_refs(refs_path), refs_path)
  return lists, wheres


def attach_aligned_refs(lists, wheres, refs_path):
  if refs_path is not None:
    add_aligned_refs(lists, wheres, refs_path)
  return lists, wheres


def add_aligned_refs(lists, wheres, refs_path):
  """Sets the lists' (keyed "0", "1", ...) references from line-aligned files, in place; returns
  how many references have no list: logged, not refused, since a toolkit may leave an input out
  (fairseq skips too-long ones) and the user cannot mend the test set's lines."""
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
  """Refuses lists not read from `source_path`; `allowed`: {key: [texts hypothesis j may have]}."""
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

"""mlm-scoring's N-best JSON ("json")."""

import json
import math
import os
import re

from nbest import formats
from nbest import text_files
from nbest import types
from util import io_utils

_HYP_KEY_RE = re.compile(r"hyp_([0-9]{1,9})")


class _JsonProblem(Exception):
  """A bad value in an N-best JSON; located in the raw text only when it is reported."""

  def __init__(self, message, field=None):
    super().__init__(message)
    self.field = field


def _json_key_offsets(raw, key):
  """Offsets of every `"key":` in raw JSON text (json.load keeps no positions)."""
  offsets = []
  for encoded in {json.dumps(key, ensure_ascii=False), json.dumps(key)}:
    offsets.extend(m.start() for m in re.finditer(re.escape(encoded) + r"\s*:", raw))
  return sorted(offsets)


def _json_line(raw, key, field=None):
  """1-based line of utterance `key` (or of its `field` when given); 1 when not found."""
  offsets = _json_key_offsets(raw, key)
  if not offsets:
    return 1
  position = offsets[0]
  if field is not None:
    later = [o for o in _json_key_offsets(raw, field) if o > position]
    position = later[0] if later else position
  return raw.count("\n", 0, position) + 1


def _reject_duplicate_keys(pairs):
  keys = [k for k, _ in pairs]
  for k in keys:
    if keys.count(k) > 1:
      raise _JsonProblem(f"key {k!r} appears twice in one object", field=k)
  return dict(pairs)


def read_json_nbest(path):
  """Reads the mlm-scoring / Shin et al. (2019) N-best JSON, in file order.

  `{"<utt>": {"ref": "<reference>", "hyp_1": {"score": <float>, "text": "<hyp>"}, ...}}`:
  hypotheses in the order of their number, not the file's; "score" (the first pass's) and any
  other numeric field are scores; texts are stripped (the files start them with a space).
  """
  raw = text_files.read_text_file(path)
  try:
    data = json.loads(raw, object_pairs_hook=_reject_duplicate_keys)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
  except (RecursionError, ValueError) as e:  # too deep, or an integer of over 4300 digits
    raise ValueError(f"{path}:1: invalid JSON: {type(e).__name__}: {e}") from None
  except _JsonProblem as problem:
    offsets = _json_key_offsets(raw, problem.field)
    line = raw.count("\n", 0, offsets[1]) + 1 if len(offsets) > 1 else 1
    raise ValueError(f"{path}:{line}: {problem}") from None
  if not isinstance(data, dict) or not data:
    raise ValueError(f"{path}:1: expected a non-empty object {{utt: {{...}}}}")
  lists = []
  for key, entry in data.items():
    try:
      lists.append(_json_entry(key, entry))
      if bool(lists[-1].refs) != bool(lists[0].refs):
        raise _JsonProblem(
          f"has {'a' if lists[-1].refs else 'no'} 'ref' but {lists[0].key!r} has "
          f"{'one' if lists[0].refs else 'none'} (references go with every list or none)"
        )
    except _JsonProblem as problem:
      line = _json_line(raw, key, problem.field)
      raise ValueError(f"{path}:{line}: utterance {key!r}: {problem}") from None
  return lists


def _json_entry(key, entry):
  if not isinstance(entry, dict):
    raise _JsonProblem(f"expected an object, found {entry!r}")
  refs = []
  if "ref" in entry:
    if not isinstance(entry["ref"], str):
      raise _JsonProblem("non-string 'ref'", field="ref")
    if not entry["ref"].strip():
      raise _JsonProblem("blank reference (WER/BLEU would be undefined)", field="ref")
    _check_encodable(entry["ref"], "ref")
    refs = [entry["ref"].strip()]
  numbered = {}
  for field, value in entry.items():
    if field == "ref":
      continue
    match = _HYP_KEY_RE.fullmatch(field)
    if not match:
      raise _JsonProblem(f"unknown field {field!r}", field=field)
    numbered[int(match.group(1))] = _json_hyp(field, value)
  if not numbered:
    raise _JsonProblem("no hyp_<n> entries")
  if sorted(numbered) != list(range(1, len(numbered) + 1)):
    raise _JsonProblem(f"hypotheses must be hyp_1..hyp_N, found numbers {sorted(numbered)}")
  hyps = [numbered[n] for n in range(1, len(numbered) + 1)]
  return types.NBestList(key=key, refs=refs, hyps=hyps)


def _check_encodable(text, field):
  """Rejects a lone surrogate ("\\ud83d"): valid JSON but no character, no file can take it."""
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as e:
    raise _JsonProblem(
      f"{field}: {e.object[e.start : e.end]!r} at character {e.start} is a lone UTF-16 "
      "surrogate (half of an escaped pair such as \\ud83d\\ude00), not a character",
      field=field,
    ) from None


def _json_hyp(field, value):
  if not isinstance(value, dict):
    raise _JsonProblem(f"{field}: expected an object, found {value!r}", field=field)
  for name in ("text", "score"):
    if name not in value:
      raise _JsonProblem(f"{field}: missing {name!r}", field=field)
  if not isinstance(value["text"], str):
    raise _JsonProblem(f"{field}: 'text' is not a string: {value['text']!r}", field=field)
  _check_encodable(value["text"], field)
  scores = {}
  for name, v in value.items():
    if name == "text":
      continue
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
      raise _JsonProblem(f"{field}: {name!r} is not a finite number: {v!r}", field=field)
    scores[name] = float(v)
  return types.Hypothesis(text=value["text"].strip(), scores=scores)


def _write_json(lists, source_path, out_path, feature_names):
  del source_path, feature_names  # every score is a field
  names = text_files.score_names(lists, out_path)
  if "score" not in names:
    raise ValueError(f"{out_path}: the json format needs a 'score' per hypothesis")
  data = {}
  for nbest in lists:
    if len(nbest.refs) > 1:
      raise ValueError(f"{out_path}: the json format holds one reference, {nbest.key!r} has more")
    entry = {"ref": nbest.refs[0]} if nbest.refs else {}
    for rank, hyp in enumerate(nbest.hyps, 1):
      entry[f"hyp_{rank}"] = {"text": hyp.text, **hyp.scores}
    data[nbest.key] = entry
  io_utils.write_atomically(out_path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def _export_json(lists, out_dir):
  _write_json(lists, None, os.path.join(out_dir, "nbest.json"), ())
  return {}


formats.register(
  "json",
  formats.Format(
    read=formats.with_refs_file(read_json_nbest),
    write=_write_json,
    path="mlm-scoring's N-best JSON",
    refs="a Kaldi text file, for a file without 'ref' fields",
    options="none",
    scores="'score' and every other number field, as written",
    features="a field of each hypothesis",
    refs_in_file=True,
    paper_table=True,
    export=formats.Export(_export_json, "nbest.json"),
  ),
)

"""N-best lists and MT candidates from files: the readers (and a TSV writer) of evaluation data.

Readers (each returns list[NBestList], hypotheses in first-pass rank order):
  read_espnet_nbest   ESPnet2 `raw_hypotheses/<N>best_recog/{text,score,scores}` + `ref_wer.trn`,
                      from the shipped tar.xz or an unpacked decode directory.
  read_json_nbest     mlm-scoring / Shin et al. `{utt: {"ref": str, "hyp_1": {...}, ...}}`.
  read_tsv_nbest      a plain TSV format defined in its docstring.
  read_wmt_candidates WMT21 de-en: 19 system outputs per segment, 2 references, no scores.

Text policy shared by all readers: surrounding whitespace of every text is stripped; an empty
hypothesis is legal (an ASR system may delete everything, an MT system may output nothing) and is
kept; a blank reference is an error, because it leaves WER undefined for that utterance.
Malformed input raises ValueError naming `file:line` (`archive:member:line` inside a tar).
Reranking and metrics are evaluation/nbest.py's; the LM score cache is evaluation/score_cache.py's.
"""

import dataclasses
import glob
import json
import math
import os
import re
import tarfile

from util import io_utils

ESPNET_DIR = "asr-librispeech-espnet2-30best"
ESPNET_SETS = ("dev_clean", "dev_other", "test_clean", "test_other")
WMT_DIR = "nmt-wmt21-deen-multisystem"

# ESPnet2 decoding weights of this data set (README.upstream.md): ctc_weight 0.4 splits the
# acoustic part into 0.6 decoder + 0.4 CTC, and the Transformer LM was fused with weight 0.6.
AM_WEIGHTS = {"decoder": 0.6, "ctc": 0.4}
FULL_WEIGHTS = {"decoder": 0.6, "ctc": 0.4, "lm": 0.6}

# A plain decimal number; float() alone would also accept "nan", "inf" and "1_0".
_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_ESPNET_MEMBER_RE = re.compile(r"raw_hypotheses/(\d+)best_recog/(text|score|scores)")
_TRN_RE = re.compile(r"(.*?)[ \t]*\(([^()\s]+)\)")
_HYP_KEY_RE = re.compile(r"hyp_([0-9]{1,9})")
_KEYED_RE = re.compile(r"([^ \t]+)(?:[ \t](.*))?", re.DOTALL)


@dataclasses.dataclass
class Hypothesis:
  """One candidate of an N-best list.

  Attributes:
    text: str, the hypothesis (may be empty).
    scores: dict[str, float], first-pass scores by name ("decoder", "ctc", "lm", "score", ...).
    system: str, the system that produced it for multi-system lists, else "".
  """

  text: str
  scores: dict = dataclasses.field(default_factory=dict)
  system: str = ""


@dataclasses.dataclass
class NBestList:
  """The candidates for one utterance or segment.

  Attributes:
    key: str, utterance or segment id.
    refs: list[str], one reference (ASR) or several (MT).
    hyps: list[Hypothesis], in first-pass rank order (rank 1 first).
  """

  key: str
  refs: list
  hyps: list


# ---------------------------------------------------------------------------------------------
# Small parsing helpers shared by the readers.


def _check_final_newline(label, text):
  """Refuses a text whose last line has no newline: the tools behind every line-based file read
  here end each line with one, so such a file was cut short (a full disk, a killed job), and its
  last value may be cut too and still parse."""
  if text and not text.endswith("\n"):
    raise ValueError(
      f"{label}:{text.count(chr(10)) + 1}: the last line has no newline (a truncated file?)"
    )


def _split_lines(text):
  """Splits on '\\n' only (str.splitlines would also split on \\x1c, \\u2028, ... inside text).

  A final newline does not start an empty line; a trailing '\\r' (CRLF files) is removed.
  """
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def _parse_number(value, where, what):
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


def _parse_espnet_float(value, where, what):
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


def _check_reference(text, where):
  text = text.strip()
  if not text:
    raise ValueError(f"{where}: blank reference (WER/BLEU would be undefined)")
  return text


def _read_text_file(path):
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


# ---------------------------------------------------------------------------------------------
# ESPnet2 N-best directories / archives.


def espnet_set_path(path_or_set_name, data_dir):
  """The archive or directory of an ESPnet set: the path itself, or a set name's archive in the
  data root (FileNotFoundError naming both when neither)."""
  if os.path.exists(path_or_set_name):
    return path_or_set_name
  name = path_or_set_name.replace("-", "_")
  if name not in ESPNET_SETS:
    raise FileNotFoundError(
      f"{path_or_set_name!r} is neither an existing path nor one of {ESPNET_SETS}"
    )
  return os.path.join(io_utils.data_root(data_dir), ESPNET_DIR, name + ".tar.xz")


def _load_espnet_files(path):
  """Reads the files of one ESPnet decode set.

  Args:
    path: str, a `.tar`/`.tar.xz` holding `<set>/raw_hypotheses/...`, or an unpacked set
      directory (the one that holds `raw_hypotheses/` and `references/`).

  Returns:
    dict[str, tuple[str, str]], name relative to the set root -> (label for errors, text).
  """
  files = {}
  if os.path.isdir(path):
    for full in glob.glob(os.path.join(path, "**", "*"), recursive=True):
      if os.path.isfile(full):
        files[os.path.relpath(full, path).replace(os.sep, "/")] = (full, _read_text_file(full))
    return files
  roots = set()
  with tarfile.open(path, "r:*") as tar:
    # Members are read in archive order: seeking backwards in an xz stream re-decompresses it.
    for member in tar:
      if not member.isfile():
        continue
      root, sep, rel = member.name.partition("raw_hypotheses/")
      if not sep:
        root, sep, rel = member.name.partition("references/")
      if not sep:
        continue  # utt2spk and friends are not needed
      roots.add(root)
      text = tar.extractfile(member).read().decode("utf-8")
      files[member.name[len(root) :]] = (f"{path}:{member.name}", text)
  if len(roots) > 1:
    raise ValueError(f"{path}: expected one decode set, found several roots {sorted(roots)}")
  return files


def _line_key(line):
  """The key of a `<key> <value>` line, None for a line without one."""
  match = _KEYED_RE.match(line)
  return match and match.group(1)


def _parse_espnet_keyed(label, text, parse_value, keys=None):
  """Parses `<utt_id> <value>` lines into {utt_id: (value, 'label:line')}.

  The key ends at the first space or tab (Kaldi's text archives and data dirs; ESPnet's
  DatadirWriter writes `key value`); a line that starts with white space has no key. With
  `keys` (a set), the lines of other keys are skipped unparsed.
  """
  _check_final_newline(label, text)
  out = {}
  for lineno, line in enumerate(_split_lines(text), 1):
    # A line without a key is not skipped: the parse below names it.
    if keys is not None and (key := _line_key(line)) is not None and key not in keys:
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


def _espnet_text(rest, where):
  del where  # every text is legal, including the empty one (everything deleted)
  return rest.strip()


def _espnet_score(rest, where):
  return _parse_espnet_float(rest, where, "score")


def _espnet_scores(rest, where):
  try:
    raw = json.loads(rest)
  except json.JSONDecodeError as e:
    raise ValueError(f"{where}: scores are not a JSON object ({e.msg}): {rest!r}") from None
  if not isinstance(raw, dict):
    raise ValueError(f"{where}: scores are not a JSON object: {rest!r}")
  for name in AM_WEIGHTS:
    if name not in raw:
      raise ValueError(f"{where}: scores lack the {name!r} field: {rest!r}")
  return {
    name: _parse_espnet_float(value, where, f"scores[{name!r}]") for name, value in raw.items()
  }


def _parse_trn(label, text):
  """Parses sclite trn lines `TEXT<TAB>(id)` into [(id, text, 'label:line')]."""
  _check_final_newline(label, text)
  out = []
  for lineno, line in enumerate(_split_lines(text), 1):
    where = f"{label}:{lineno}"
    match = _TRN_RE.fullmatch(line)
    if not match:
      raise ValueError(f"{where}: expected 'TEXT<TAB>(id)', found {line!r}")
    out.append((match.group(2), _check_reference(match.group(1), where), where))
  return out


def _match_trn_id(trn_id, keys):
  """Maps a trn id to an utterance key.

  sclite ids carry the speaker in front (`1272-128104-1272-128104-0000` for the utterance
  `1272-128104-0000`), so the key is the longest dash-separated suffix that is a known key.
  """
  parts = trn_id.split("-")
  for start in range(len(parts)):
    candidate = "-".join(parts[start:])
    if candidate in keys:
      return candidate
  return None


def read_espnet_nbest(path_or_set_name, data_dir=None, select=None):
  """Reads an ESPnet2 N-best decode set with its references.

  Layout (inside the archive under `<set>/`, or in a directory): for N = 1..R,
  `raw_hypotheses/<N>best_recog/text` (`<utt> <HYP>`, the hypothesis may be empty),
  `.../scores` (`<utt> {"decoder": "tensor(x)", "ctc": "tensor(y)", "lm": "tensor(z)"}`),
  optionally `.../score` (`<utt> tensor(s)`, the total beam score), and
  `references/ref_wer.trn` (`REF<TAB>(<spk>-<chapter>-<utt>)`).

  Scores exposed per hypothesis: every field of `scores` ("decoder", "ctc", "lm") and, when the
  `score` files exist, "score" = the full beam score. In the shipped LibriSpeech sets the full
  score is 0.6*decoder + 0.4*ctc + 0.6*lm up to the 4-decimal rounding of the files (|diff| <=
  2.4e-4), and the ranks are sorted by it (descending, ties keep the beam's order); see
  `s2s_score`.

  Args:
    path_or_set_name: str, a `.tar.xz` / set directory, or a set name (`dev_clean`, `test-other`)
      looked up in `<data_dir>/asr-librispeech-espnet2-30best/`.
    data_dir: str or None, the data root (see `io_utils.data_root`), used with a set name only.
    select: None for every list, or a function (the set's list count) -> the indices, in
      reference-file order, of the lists to read (`nbest.list_selection`): only their lines are
      parsed and checked, so a few lists of a large set read in a fraction of the time.

  Returns:
    list[NBestList], in reference-file order, each with one reference and the hypotheses of
    ranks 1..n (n may be smaller for an utterance missing from the deeper rank files).

  Raises:
    ValueError: a malformed line, a missing field, a non-number score, key mismatch between the
      text/score/scores files or with the references, a rank gap, or an utterance without
      hypotheses; the message names `archive:member:line`.
  """
  path = espnet_set_path(path_or_set_name, data_dir)
  files = _load_espnet_files(path)
  trn_name = "references/ref_wer.trn"
  if trn_name not in files:
    raise ValueError(f"{path}: no {trn_name}")
  by_rank = {}
  for name in files:
    match = _ESPNET_MEMBER_RE.fullmatch(name)
    if match:
      by_rank.setdefault(int(match.group(1)), set()).add(match.group(2))
  if not by_rank:
    raise ValueError(f"{path}: no raw_hypotheses/<N>best_recog/ files")
  if sorted(by_rank) != list(range(1, len(by_rank) + 1)):
    raise ValueError(f"{path}: ranks must be 1..R without gaps, found {sorted(by_rank)}")
  has_total = any("score" in kinds for kinds in by_rank.values())
  references = _parse_trn(*files[trn_name])
  keys = None
  if select is not None:
    # Rank 1 holds every utterance with hypotheses: its keys map the reference ids.
    known = {_line_key(l) for l in _split_lines(files["raw_hypotheses/1best_recog/text"][1])}
    references = [references[i] for i in select(len(references))]
    keys = {_match_trn_id(trn_id, known) for trn_id, _, _ in references} - {None}

  ranks = []  # one {utt: (Hypothesis, location)} per rank
  for rank in range(1, len(by_rank) + 1):
    ranks.append(_read_espnet_rank(path, files, rank, has_total, keys))

  first_seen = {}
  for hyps in ranks:
    for key, (_, where) in hyps.items():
      first_seen.setdefault(key, where)
  lists, refs_seen = [], {}
  for trn_id, ref, where in references:
    key = _match_trn_id(trn_id, first_seen)
    if key is None:
      raise ValueError(
        f"{where}: reference id {trn_id!r} matches no hypothesis utterance "
        "(an utterance without hypotheses)"
      )
    if key in refs_seen:
      raise ValueError(f"{where}: second reference for {key!r} (first at {refs_seen[key]})")
    refs_seen[key] = where
    lists.append(NBestList(key=key, refs=[ref], hyps=_collect_ranks(ranks, key)))
  for key, where in first_seen.items():
    if key not in refs_seen:
      raise ValueError(f"{where}: utterance {key!r} has no reference in {files[trn_name][0]}")
  return lists


def _read_espnet_rank(path, files, rank, has_total, keys=None):
  """Returns {utt: (Hypothesis, 'label:line')} for one rank (the utterances of `keys`, a set, or
  every one), checking its files agree."""
  prefix = f"raw_hypotheses/{rank}best_recog/"
  needed = ("text", "scores", "score") if has_total else ("text", "scores")
  parsers = {"text": _espnet_text, "scores": _espnet_scores, "score": _espnet_score}
  parsed = {}
  for kind in needed:
    if prefix + kind not in files:
      raise ValueError(f"{path}: missing {prefix + kind} (other ranks have it)")
    parsed[kind] = _parse_espnet_keyed(*files[prefix + kind], parsers[kind], keys)
  for kind in needed[1:]:
    _check_same_keys(
      parsed["text"], files[prefix + "text"][0], parsed[kind], files[prefix + kind][0]
    )
  out = {}
  for key, (text, where) in parsed["text"].items():
    scores = dict(parsed["scores"][key][0])
    if has_total:
      scores["score"] = parsed["score"][key][0]
    out[key] = (Hypothesis(text=text, scores=scores), where)
  return out


def _check_same_keys(a, a_label, b, b_label):
  for key, (_, where) in a.items():
    if key not in b:
      raise ValueError(f"{where}: utterance {key!r} is missing from {b_label}")
  for key, (_, where) in b.items():
    if key not in a:
      raise ValueError(f"{where}: utterance {key!r} is missing from {a_label}")


def _collect_ranks(ranks, key):
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


# ---------------------------------------------------------------------------------------------
# mlm-scoring / Shin et al. JSON.


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
  """Reads the mlm-scoring / Shin et al. (2019) N-best JSON.

  Format: `{"<utt>": {"ref": "<reference>", "hyp_1": {"score": <float>, "text": "<hyp>"}, ...,
  "hyp_N": {...}}}`. Hypotheses are ordered by their number (1..N without gaps), not by file
  order. "score" is the first-pass seq2seq score and becomes scores["score"] (so setting "full"
  in `s2s_score` uses it); any other numeric field of a hypothesis (e.g. a rescoring result) is
  kept under its own name. Texts are stripped (the files write hypotheses with a leading space).
  "ref" may be left out of every utterance (a blind test set: refs == []), not of some.

  Args:
    path: str, the JSON file.

  Returns:
    list[NBestList], in file order, one reference each (or none in a blind set).

  Raises:
    ValueError: invalid JSON, a repeated key, a missing "text"/"score", a "ref" in some
      utterances only, a non-number score, a blank reference, an unknown field, a
      hypothesis-number gap, or no hypotheses; `file:line`.
  """
  raw = _read_text_file(path)
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
  return NBestList(key=key, refs=refs, hyps=hyps)


def _check_encodable(text, field):
  """Rejects a lone surrogate ("\\ud83d", half of a UTF-16 pair): it is valid JSON but no
  character, so no tokenizer, LM or cache file can take it."""
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
  return Hypothesis(text=value["text"].strip(), scores=scores)


# ---------------------------------------------------------------------------------------------
# Plain TSV.


def read_tsv_nbest(path):
  """Reads N-best lists from a plain TSV file.

  Format (UTF-8, tab-separated, no quoting, tabs never inside a field, no blank lines):
    optional header `#key<TAB>rank<TAB><name_1>...<TAB><name_k><TAB>text` naming the k score
      columns (k may be 0); without a header the columns are key, rank, score, text (k=1);
    reference rows  `<key><TAB>ref<TAB><reference text>` (one or more per key; several refs
      serve multi-reference BLEU; a file without any ref row is a blind set, refs == []);
    hypothesis rows `<key><TAB><rank><TAB><score_1>...<TAB><score_k><TAB><text>`, rank = 1, 2, ...
      in order for each key; the text may be empty (the line then ends with a tab).
  Rows of different keys may interleave; lists come out in order of each key's first row.
  A single score named "score" is what setting "full" of `s2s_score` uses.

  Args:
    path: str, the TSV file.

  Returns:
    list[NBestList].

  Raises:
    ValueError: wrong column count, a non-number score, a bad rank or rank gap, a blank
      reference or line, a last line without newline (a truncated file), a key with hypotheses
      but no reference while others have one, or a key with references but no hypotheses;
      `file:line`.
  """
  text = _read_text_file(path)
  _check_final_newline(path, text)
  lines = _split_lines(text)
  score_names = ["score"]
  first = 1
  if lines and lines[0].startswith("#"):
    score_names = _parse_tsv_header(lines[0], f"{path}:1")
    first = 2
  refs, hyps, where_first = {}, {}, {}
  for lineno, line in enumerate(lines[first - 1 :], first):
    where = f"{path}:{lineno}"
    fields = line.split("\t")
    if not fields[0].strip():
      raise ValueError(f"{where}: expected '<key><TAB>...', found {line!r}")
    key = fields[0]
    where_first.setdefault(key, where)
    if len(fields) >= 2 and fields[1] == "ref":
      if len(fields) != 3:
        raise ValueError(f"{where}: a ref row has 3 fields (key, ref, text), found {len(fields)}")
      refs.setdefault(key, []).append(_check_reference(fields[2], where))
      continue
    hyps.setdefault(key, [])
    hyps[key].append(_parse_tsv_hyp(fields, score_names, len(hyps[key]) + 1, where))
  if not where_first:
    raise ValueError(f"{path}:1: no rows")
  lists = []
  for key, where in where_first.items():
    if key not in hyps:
      raise ValueError(f"{where}: key {key!r} has references but no hypotheses")
    if refs and key not in refs:
      raise ValueError(f"{where}: key {key!r} has hypotheses but no reference")
    lists.append(NBestList(key=key, refs=refs.get(key, []), hyps=hyps[key]))
  return lists


def _parse_tsv_header(line, where):
  names = line[1:].split("\t")
  if len(names) < 3 or names[:2] != ["key", "rank"] or names[-1] != "text":
    raise ValueError(
      f"{where}: header must be '#key<TAB>rank<TAB>[scores...]<TAB>text', found {line!r}"
    )
  score_names = names[2:-1]
  if len(set(score_names)) != len(score_names) or not all(score_names):
    raise ValueError(f"{where}: score column names must be distinct and non-empty: {line!r}")
  return score_names


def _parse_tsv_hyp(fields, score_names, expected_rank, where):
  if len(fields) != len(score_names) + 3:
    raise ValueError(
      f"{where}: a hypothesis row has {len(score_names) + 3} fields "
      f"(key, rank, {', '.join(score_names + ['text'])}), found {len(fields)}"
    )
  if fields[1] != str(expected_rank):
    raise ValueError(
      f"{where}: expected rank {expected_rank} for key {fields[0]!r} "
      f"(or 'ref'), found {fields[1]!r}"
    )
  scores = {
    name: _parse_number(value, where, name) for name, value in zip(score_names, fields[2:-1])
  }
  return Hypothesis(text=fields[-1].strip(), scores=scores)


def write_tsv_nbest(lists, path, score_names=("score",)):
  """Writes lists in the `read_tsv_nbest` format (header, then each key's refs and hypotheses),
  atomically.

  Args:
    lists: list[NBestList]; texts must not contain tabs or newlines.
    path: str, output file.
    score_names: sequence of str, the scores written per hypothesis (each must be present).
  """
  rows = ["#" + "\t".join(["key", "rank", *score_names, "text"])]
  for nbest in lists:
    rows.extend(f"{nbest.key}\tref\t{ref}" for ref in nbest.refs)
    for rank, hyp in enumerate(nbest.hyps, 1):
      scores = [repr(float(hyp.scores[name])) for name in score_names]
      rows.append("\t".join([nbest.key, str(rank), *scores, hyp.text]))
  for row in rows:
    if "\n" in row or "\r" in row or row.count("\t") > len(score_names) + 2:
      raise ValueError(f"cannot write {row!r} to TSV: tab or newline inside a field")
  io_utils.write_atomically(path, "\n".join(rows) + "\n")


# ---------------------------------------------------------------------------------------------
# WMT21 multi-system candidates.


def read_wmt_candidates(data_dir=None, pair="de-en", testset="newstest2021"):
  """Reads the WMT21 system outputs as candidate lists (no model scores).

  Args:
    data_dir: str or None, the data root (see `io_utils.data_root`).
    pair: str, language pair in the file names.
    testset: str, test set in the file names.

  Returns:
    list[NBestList], one per segment, key = 1-based segment number as a string, refs = the
    references in file-name order (A, B), hyps = one per system in sorted file-name order with
    `system` set and empty `scores`.

  Raises:
    ValueError: files of different line counts, a blank reference, no systems; `file:line`.
  """
  root = os.path.join(io_utils.data_root(data_dir), WMT_DIR)
  ref_paths = sorted(glob.glob(os.path.join(root, "references", f"{testset}.{pair}.ref.*")))
  hyp_paths = sorted(glob.glob(os.path.join(root, "system-outputs", f"{testset}.{pair}.hyp.*")))
  if not ref_paths or not hyp_paths:
    raise ValueError(
      f"{root}: expected references/{testset}.{pair}.ref.* and "
      f"system-outputs/{testset}.{pair}.hyp.*, found {len(ref_paths)} and "
      f"{len(hyp_paths)} files"
    )
  ref_columns = [
    [
      _check_reference(line, f"{path}:{n}")
      for n, line in enumerate(_split_lines(_read_text_file(path)), 1)
    ]
    for path in ref_paths
  ]
  hyp_columns = [
    [line.strip() for line in _split_lines(_read_text_file(path))] for path in hyp_paths
  ]
  n_segments = len(ref_columns[0])
  if n_segments == 0:
    raise ValueError(f"{ref_paths[0]}:1: no segments")
  for path, column in zip(ref_paths + hyp_paths, ref_columns + hyp_columns):
    if len(column) != n_segments:
      raise ValueError(
        f"{path}:{min(len(column), n_segments) + 1}: {len(column)} lines, "
        f"but {ref_paths[0]} has {n_segments} (files must be line-aligned)"
      )
  prefix = f"{testset}.{pair}.hyp."
  systems = [os.path.basename(path)[len(prefix) :].rsplit(".", 1)[0] for path in hyp_paths]
  return [
    NBestList(
      key=str(i + 1),
      refs=[column[i] for column in ref_columns],
      hyps=[Hypothesis(text=column[i], system=name) for name, column in zip(systems, hyp_columns)],
    )
    for i in range(n_segments)
  ]

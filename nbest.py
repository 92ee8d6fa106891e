"""N-best lists, WER/BLEU, pseudo-perplexity and the λ sweep: the model-free half of evaluation.

Everything here works on plain text and floats; the LM scores come from elsewhere (inference.py)
as a list of lists of floats aligned with the hypotheses, and are kept in a `ScoreCache` so that
a λ sweep never recomputes them.

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

Reranking: score = (1-λ)·s2s + λ·lm, λ tuned on dev over a grid, ties -> smallest λ.
"""

import dataclasses
import glob
import json
import math
import os
import re
import statistics
import tarfile

import jiwer
import numpy as np
import sacrebleu

import io_utils

ESPNET_DIR = "asr-librispeech-espnet2-30best"
ESPNET_SETS = ("dev_clean", "dev_other", "test_clean", "test_other")
WMT_DIR = "nmt-wmt21-deen-multisystem"

# ESPnet2 decoding weights of this data set (README.upstream.md): ctc_weight 0.4 splits the
# acoustic part into 0.6 decoder + 0.4 CTC, and the Transformer LM was fused with weight 0.6.
AM_WEIGHTS = {"decoder": 0.6, "ctc": 0.4}
FULL_WEIGHTS = {"decoder": 0.6, "ctc": 0.4, "lm": 0.6}

SETTINGS = ("am", "full", None)
METRICS = ("wer", "bleu")
DEFAULT_GRID = tuple(round(0.05 * i, 2) for i in range(21))

# A plain decimal number; float() alone would also accept "nan", "inf" and "1_0".
_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_ESPNET_MEMBER_RE = re.compile(r"raw_hypotheses/(\d+)best_recog/(text|score|scores)")
_TRN_RE = re.compile(r"(.*?)[ \t]*\(([^()\s]+)\)")
_HYP_KEY_RE = re.compile(r"hyp_(\d+)")


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


@dataclasses.dataclass
class WerDetails:
  """Corpus WER and its edit counts (jiwer's alignment)."""

  wer: float  # percent
  substitutions: int
  deletions: int
  insertions: int
  hits: int

  @property
  def ref_words(self):
    return self.substitutions + self.deletions + self.hits


@dataclasses.dataclass
class SweepResult:
  """Outcome of `sweep_lambda`.

  Attributes:
    metric: str, "wer" (lower is better) or "bleu" (higher is better).
    curve: list[tuple[float, float]], (λ, metric value) for every grid point, in grid order.
    best_lam: float, the best λ; among equal values the smallest λ, i.e. the one that departs
      least from the first pass.
    best_value: float, the metric at best_lam.
  """

  metric: str
  curve: list
  best_lam: float
  best_value: float


# ---------------------------------------------------------------------------------------------
# Small parsing helpers shared by the readers.


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
    number = float(value)
  else:
    raise ValueError(f"{where}: {what}: expected a number, found {value!r}")
  if not math.isfinite(number):
    raise ValueError(f"{where}: {what}: expected a finite number, found {value!r}")
  return number


def _parse_espnet_float(value, where, what):
  """Parses ESPnet's `tensor(-1.25)` (its str() of a torch scalar), a bare number string, or a
  JSON number."""
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    number = float(value)
  elif isinstance(value, str):
    inner = value[7:-1] if value.startswith("tensor(") and value.endswith(")") else value
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
  with open(path, encoding="utf-8") as f:
    return f.read()


# ---------------------------------------------------------------------------------------------
# ESPnet2 N-best directories / archives.


def _espnet_set_path(path_or_set_name, data_dir):
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


def _parse_espnet_keyed(label, text, parse_value):
  """Parses `<utt_id> <value>` lines into {utt_id: (value, 'label:line')}."""
  out = {}
  for lineno, line in enumerate(_split_lines(text), 1):
    where = f"{label}:{lineno}"
    key, _, rest = line.partition(" ")
    if not key or key != key.strip():
      raise ValueError(f"{where}: expected '<utt_id> <value>', found {line!r}")
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


def read_espnet_nbest(path_or_set_name, data_dir=None):
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

  Returns:
    list[NBestList], in reference-file order, each with one reference and the hypotheses of
    ranks 1..n (n may be smaller for an utterance missing from the deeper rank files).

  Raises:
    ValueError: a malformed line, a missing field, a non-number score, key mismatch between the
      text/score/scores files or with the references, a rank gap, or an utterance without
      hypotheses; the message names `archive:member:line`.
  """
  path = _espnet_set_path(path_or_set_name, data_dir)
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

  ranks = []  # one {utt: (Hypothesis, location)} per rank
  for rank in range(1, len(by_rank) + 1):
    ranks.append(_read_espnet_rank(path, files, rank, has_total))

  first_seen = {}
  for hyps in ranks:
    for key, (_, where) in hyps.items():
      first_seen.setdefault(key, where)
  lists, refs_seen = [], {}
  for trn_id, ref, where in _parse_trn(*files[trn_name]):
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


def _read_espnet_rank(path, files, rank, has_total):
  """Returns {utt: (Hypothesis, 'label:line')} for one rank, checking its files agree."""
  prefix = f"raw_hypotheses/{rank}best_recog/"
  needed = ("text", "scores", "score") if has_total else ("text", "scores")
  parsers = {"text": _espnet_text, "scores": _espnet_scores, "score": _espnet_score}
  parsed = {}
  for kind in needed:
    if prefix + kind not in files:
      raise ValueError(f"{path}: missing {prefix + kind} (other ranks have it)")
    parsed[kind] = _parse_espnet_keyed(*files[prefix + kind], parsers[kind])
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

  Args:
    path: str, the JSON file.

  Returns:
    list[NBestList], in file order, one reference each.

  Raises:
    ValueError: invalid JSON, a repeated key, a missing "ref"/"text"/"score", a non-number
      score, a blank reference, an unknown field, a hypothesis-number gap, or no hypotheses;
      `file:line`.
  """
  raw = _read_text_file(path)
  try:
    data = json.loads(raw, object_pairs_hook=_reject_duplicate_keys)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
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
    except _JsonProblem as problem:
      line = _json_line(raw, key, problem.field)
      raise ValueError(f"{path}:{line}: utterance {key!r}: {problem}") from None
  return lists


def _json_entry(key, entry):
  if not isinstance(entry, dict):
    raise _JsonProblem(f"expected an object, found {entry!r}")
  if not isinstance(entry.get("ref"), str):
    raise _JsonProblem("missing or non-string 'ref'", field="ref" if "ref" in entry else None)
  if not entry["ref"].strip():
    raise _JsonProblem("blank reference (WER/BLEU would be undefined)", field="ref")
  _check_encodable(entry["ref"], "ref")
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
  return NBestList(key=key, refs=[entry["ref"].strip()], hyps=hyps)


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
      serve multi-reference BLEU);
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
      reference or line, or a key with hypotheses but no reference (or the reverse); `file:line`.
  """
  lines = _split_lines(_read_text_file(path))
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
    if key not in refs:
      raise ValueError(f"{where}: key {key!r} has hypotheses but no reference")
    lists.append(NBestList(key=key, refs=refs[key], hyps=hyps[key]))
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
  """Writes lists in the `read_tsv_nbest` format (header, then each key's refs and hypotheses).

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
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(rows) + "\n")


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


# ---------------------------------------------------------------------------------------------
# Scores, metrics, reranking.


def sample_lists(lists, n, seed):
  """A seeded random sample of n lists (all of them when n >= len), in their original order.

  The same (lists, n, seed) give the same sample in every run and for every LM, so LMs scored
  on it are compared on the same utterances (paired).
  """
  if n >= len(lists):
    return list(lists)
  keep = np.random.default_rng(seed).choice(len(lists), size=n, replace=False)
  return [lists[i] for i in sorted(keep)]


def s2s_score(hyp, setting):
  """The first-pass score a reranker interpolates with.

  Args:
    hyp: Hypothesis.
    setting: "am" -> 0.6*decoder + 0.4*ctc, the ESPnet score with no LM in the first pass;
      "full" -> scores["score"], the full beam score. For the ESPnet2 lists that is
      0.6*decoder + 0.4*ctc + 0.6*lm (shallow fusion with a Transformer LM, the paper's
      Seq2SeqASR setting); the files round it to 4 decimals, so it equals the weighted sum of
      the rounded parts only to within 2.4e-4. The stored value is used because it is what the
      beam ranked by. For JSON/TSV lists "full" is the list's own score.
      None -> 0.0 (lists with no first-pass score, e.g. WMT candidates; only λ=1 is meaningful).

  Returns:
    float.

  Raises:
    ValueError: unknown setting, or the hypothesis lacks the scores it needs.
  """
  if setting is None:
    return 0.0
  if setting == "am":
    missing = [name for name in AM_WEIGHTS if name not in hyp.scores]
    if missing:
      raise ValueError(
        f"setting 'am' needs scores {list(AM_WEIGHTS)}; hypothesis "
        f"{hyp.text!r} has {sorted(hyp.scores)}"
      )
    return sum(weight * hyp.scores[name] for name, weight in AM_WEIGHTS.items())
  if setting == "full":
    if "score" not in hyp.scores:
      raise ValueError(
        f"setting 'full' needs score 'score'; hypothesis {hyp.text!r} has {sorted(hyp.scores)}"
      )
    return hyp.scores["score"]
  raise ValueError(f"unknown setting {setting!r}; expected one of {SETTINGS}")


def wer_details(refs, hyps):
  """Corpus WER with jiwer (case-sensitive, whitespace tokens; callers normalise text).

  Args:
    refs: list[str], references.
    hyps: list[str], hypotheses aligned with refs (may be empty strings).

  Returns:
    WerDetails, with wer in percent = 100 * (S + D + I) / (S + D + H).
  """
  if len(refs) != len(hyps) or not refs:
    raise ValueError(
      f"need equally many refs and hyps (at least one), got {len(refs)} and {len(hyps)}"
    )
  out = jiwer.process_words(list(refs), list(hyps))
  return WerDetails(
    wer=100.0 * out.wer,
    substitutions=out.substitutions,
    deletions=out.deletions,
    insertions=out.insertions,
    hits=out.hits,
  )


def corpus_wer(refs, hyps):
  """Corpus WER in percent (see `wer_details`)."""
  return wer_details(refs, hyps).wer


def corpus_bleu(refs_list, hyps):
  """Corpus BLEU with sacrebleu's defaults (13a tokenisation, mixed case, exp smoothing).

  Args:
    refs_list: list[list[str]], the references of each segment (as in NBestList.refs); every
      segment needs the same number of references.
    hyps: list[str], one hypothesis per segment.

  Returns:
    float, BLEU in [0, 100].
  """
  if len(refs_list) != len(hyps) or not hyps:
    raise ValueError(
      f"need equally many reference sets and hyps (at least one), got "
      f"{len(refs_list)} and {len(hyps)}"
    )
  n_refs = {len(refs) for refs in refs_list}
  if len(n_refs) != 1 or 0 in n_refs:
    raise ValueError(
      f"every segment needs the same, non-zero number of references; found counts {sorted(n_refs)}"
    )
  # sacrebleu wants one stream per reference index: [[ref_a of seg 1, ...], [ref_b ...]].
  streams = [list(stream) for stream in zip(*refs_list)]
  return sacrebleu.corpus_bleu(list(hyps), streams).score


def evaluate(lists, choice, metric):
  """Scores one choice of hypothesis per list.

  Args:
    lists: list[NBestList].
    choice: list[int], index into lists[i].hyps.
    metric: "wer" (needs exactly one reference per list) or "bleu".

  Returns:
    float, WER or BLEU in percent.
  """
  if len(choice) != len(lists):
    raise ValueError(f"{len(choice)} choices for {len(lists)} lists")
  hyps = [nbest.hyps[i].text for nbest, i in zip(lists, choice)]
  if metric == "wer":
    for nbest in lists:
      if len(nbest.refs) != 1:
        raise ValueError(f"WER needs one reference, list {nbest.key!r} has {len(nbest.refs)}")
    return corpus_wer([nbest.refs[0] for nbest in lists], hyps)
  if metric == "bleu":
    return corpus_bleu([nbest.refs for nbest in lists], hyps)
  raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")


def _argmax(values):
  """Index of the largest value; the first one on ties, i.e. the better first-pass rank."""
  best = 0
  for i in range(1, len(values)):
    if values[i] > values[best]:
      best = i
  return best


def _s2s_table(lists, setting):
  return [[s2s_score(hyp, setting) for hyp in nbest.hyps] for nbest in lists]


def _check_lm_scores(lists, lm_scores):
  if len(lm_scores) != len(lists):
    raise ValueError(f"lm_scores has {len(lm_scores)} entries for {len(lists)} lists")
  for nbest, scores in zip(lists, lm_scores):
    if len(scores) != len(nbest.hyps):
      raise ValueError(
        f"list {nbest.key!r}: {len(scores)} LM scores for {len(nbest.hyps)} hypotheses"
      )
    for score in scores:
      # NaN would make every comparison false and silently pick rank 1.
      if not math.isfinite(score):
        raise ValueError(f"list {nbest.key!r}: LM score {score!r} is not finite")


def _choose(s2s, lm_scores, lam):
  if lm_scores is None:
    return [_argmax(row) for row in s2s]
  return [
    _argmax([(1.0 - lam) * s + lam * lm for s, lm in zip(s_row, lm_row)])
    for s_row, lm_row in zip(s2s, lm_scores)
  ]


def rerank(lists, lm_scores, lam, setting="full"):
  """Picks the hypothesis with the best (1-λ)·s2s + λ·lm in each list.

  λ=0 returns exactly the first-pass choice (argmax of the s2s score, ties -> better rank).
  The ESPnet lists are sorted by their full score, so λ=0 with "full" always picks rank 1.

  Args:
    lists: list[NBestList].
    lm_scores: list[list[float]] aligned with lists[i].hyps, or None for the first pass
      (then lam must be 0).
    lam: float in [0, 1].
    setting: see `s2s_score`.

  Returns:
    list[int], the chosen index into lists[i].hyps.
  """
  if not 0.0 <= lam <= 1.0:
    raise ValueError(f"λ must lie in [0, 1], got {lam}")
  if lm_scores is None and lam != 0.0:
    raise ValueError("lm_scores=None only makes sense with λ=0 (the first pass)")
  if lm_scores is not None:
    _check_lm_scores(lists, lm_scores)
  return _choose(_s2s_table(lists, setting), lm_scores, lam)


def sweep_lambda(dev_lists, dev_lm, metric, setting="full", grid=DEFAULT_GRID):
  """Evaluates reranking at every λ of a grid and picks the best.

  Args:
    dev_lists: list[NBestList].
    dev_lm: list[list[float]], LM scores aligned with the hypotheses.
    metric: "wer" (minimised) or "bleu" (maximised).
    setting: see `s2s_score`.
    grid: sequence of float in [0, 1]; default 0, 0.05, ..., 1.

  Returns:
    SweepResult; ties go to the smallest λ (closest to the first pass).
  """
  if metric not in METRICS:
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
  if not grid:
    raise ValueError("empty λ grid")
  _check_lm_scores(dev_lists, dev_lm)
  s2s = _s2s_table(dev_lists, setting)
  curve = []
  for lam in grid:
    if not 0.0 <= lam <= 1.0:
      raise ValueError(f"λ must lie in [0, 1], got {lam}")
    curve.append((lam, evaluate(dev_lists, _choose(s2s, dev_lm, lam), metric)))
  sign = 1.0 if metric == "wer" else -1.0
  best_lam, best_value = min(curve, key=lambda point: (sign * point[1], point[0]))
  return SweepResult(metric=metric, curve=curve, best_lam=best_lam, best_value=best_value)


def _sentence_errors(refs, hyps):
  """Per-sentence S + D + I from one jiwer alignment of all pairs."""
  out = jiwer.process_words(refs, hyps)
  errors = []
  for chunks in out.alignments:
    count = 0
    for chunk in chunks:
      if chunk.type in ("substitute", "delete"):
        count += chunk.ref_end_idx - chunk.ref_start_idx
      elif chunk.type == "insert":
        count += chunk.hyp_end_idx - chunk.hyp_start_idx
    errors.append(count)
  return errors


def utterance_errors(lists, choice):
  """Per-utterance word errors of one choice, for paired significance tests.

  Args:
    lists: list[NBestList], each with one reference.
    choice: list[int], index into lists[i].hyps.

  Returns:
    tuple (list[int], list[int]): S + D + I of each chosen hypothesis, and the words of each
    reference; their sums give `evaluate(lists, choice, "wer")`.
  """
  refs = [nbest.refs[0] for nbest in lists]
  hyps = [nbest.hyps[i].text for nbest, i in zip(lists, choice)]
  return _sentence_errors(refs, hyps), [len(ref.split()) for ref in refs]


def oracle(lists, metric="wer"):
  """The best choice per list given the references.

  For WER the choice minimises each utterance's edit errors, which gives the exact corpus
  oracle (corpus WER is total errors / total reference words). For BLEU, which does not add
  over sentences, it maximises sentence BLEU (sacrebleu, effective order): the usual
  approximation of the oracle. Ties go to the better first-pass rank.

  Args:
    lists: list[NBestList].
    metric: "wer" or "bleu".

  Returns:
    tuple (float, list[int]): the corpus metric of the oracle choice, and the choice.
  """
  if metric == "wer":
    pairs = [(nbest.refs[0], hyp.text) for nbest in lists for hyp in nbest.hyps]
    errors = iter(_sentence_errors([r for r, _ in pairs], [h for _, h in pairs]))
    choice = [_argmax([-next(errors) for _ in nbest.hyps]) for nbest in lists]
  elif metric == "bleu":
    bleu = sacrebleu.metrics.BLEU(effective_order=True)
    choice = [
      _argmax([bleu.sentence_score(hyp.text, nbest.refs).score for hyp in nbest.hyps])
      for nbest in lists
    ]
  else:
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
  return evaluate(lists, choice, metric), choice


# ---------------------------------------------------------------------------------------------
# Pseudo-perplexity (paper Table 7).


def pseudo_perplexity(token_logprob_sums, token_counts):
  """Per-sentence (pseudo-)perplexity exp(-sum / count).

  Args:
    token_logprob_sums: list[float], natural-log probability summed over each sentence's scored
      tokens (PLL for T-TA/biLM, the chain-rule log-likelihood for uniLM).
    token_counts: list[int], the number of scored tokens per sentence (> 0).

  Returns:
    list[float]; inf where the exponent overflows.
  """
  if len(token_logprob_sums) != len(token_counts):
    raise ValueError(f"{len(token_logprob_sums)} sums for {len(token_counts)} counts")
  out = []
  for i, (total, count) in enumerate(zip(token_logprob_sums, token_counts)):
    if count <= 0:
      raise ValueError(f"sentence {i}: token count must be positive, got {count}")
    if not math.isfinite(total):
      raise ValueError(f"sentence {i}: log-prob sum {total!r} is not finite")
    try:
      out.append(math.exp(-total / count))
    except OverflowError:
      out.append(math.inf)
  return out


def pppl_summary(token_logprob_sums, token_counts):
  """Mean and median of the per-sentence (pseudo-)perplexities, as in the paper's Table 7.

  Returns:
    dict with "mean" (PPLa), "median" (PPLm), and "corpus" = exp(-Σsum / Σcount), the
    token-weighted value used by Salazar et al. (2020).
  """
  values = pseudo_perplexity(token_logprob_sums, token_counts)
  if not values:
    raise ValueError("no sentences")
  exponent = -sum(token_logprob_sums) / sum(token_counts)
  corpus = math.exp(exponent) if exponent < 709.0 else math.inf
  return {"mean": statistics.fmean(values), "median": statistics.median(values), "corpus": corpus}


# ---------------------------------------------------------------------------------------------
# Score cache.


class ScoreCache:
  """Append-only JSON-lines cache of LM scores keyed by (model_id, text).

  Each line is `{"model": str, "text": str, "value": <JSON payload>}` (e.g. per-token
  log-probs and their sum). `put_many` appends all its lines with one write, then flushes and
  fsyncs, so an interrupted run keeps every batch it finished; a last line cut off by a crash
  is dropped (and trimmed from the file) on the next open. The last write of a key wins.
  One writer at a time. `model_id` is short (`inference.model_id`); `register` writes what each
  one stands for to a readable side file, `<path without .jsonl>.models.json`.
  """

  def __init__(self, path):
    """Opens (or starts) the cache at `path`; a missing file is an empty cache."""
    self.path = path
    self._data = {}
    if os.path.exists(path):
      self._load()

  def _load(self):
    with open(self.path, "rb") as f:
      raw = f.read()
    lines = raw.split(b"\n")
    if lines[-1]:
      # No final newline: the previous run died inside a write; keep everything before it.
      lines.pop()
      with open(self.path, "r+b") as f:
        f.truncate(len(raw) - len(raw.split(b"\n")[-1]))
    else:
      lines.pop()
    for lineno, line in enumerate(lines, 1):
      where = f"{self.path}:{lineno}"
      try:
        record = json.loads(line.decode("utf-8"))
      except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where}: not a JSON cache record ({e})") from None
      if (
        not isinstance(record, dict)
        or not isinstance(record.get("model"), str)
        or not isinstance(record.get("text"), str)
        or "value" not in record
      ):
        raise ValueError(f"{where}: expected {{'model': str, 'text': str, 'value': ...}}")
      self._data[(record["model"], record["text"])] = record["value"]

  @property
  def models_path(self):
    """The side file {model_id: identity} (see `register`)."""
    return os.path.splitext(self.path)[0] + ".models.json"

  def register(self, model_id, identity):
    """Records the full identity behind `model_id` in `models_path` (atomically)."""
    models = {}
    if os.path.exists(self.models_path):
      with open(self.models_path, encoding="utf-8") as f:
        try:
          models = json.load(f)
        except json.JSONDecodeError as e:
          raise ValueError(f"{self.models_path}:{e.lineno}: invalid JSON: {e.msg}") from None
    if models.get(model_id) != identity:
      models[model_id] = identity
      io_utils.write_atomically(self.models_path, json.dumps(models, indent=2, sort_keys=True))

  def __len__(self):
    return len(self._data)

  def __contains__(self, key):
    return key in self._data

  def get_many(self, model_id, texts):
    """Returns {text: payload} for the texts of `model_id` that are cached (others omitted)."""
    return {text: self._data[(model_id, text)] for text in texts if (model_id, text) in self._data}

  def put_many(self, model_id, items):
    """Stores payloads and makes them durable before returning.

    Args:
      model_id: str, identifies the model and its scoring options (the caller's choice).
      items: dict[str, payload] or iterable of (text, payload); payloads must be JSON-able.
    """
    pairs = list(items.items()) if isinstance(items, dict) else list(items)
    if not pairs:
      return
    # Every line is encoded before anything is written, so no text can cut a write short.
    data = b"".join(_cache_line(model_id, text, value) for text, value in pairs)
    directory = os.path.dirname(os.path.abspath(self.path))
    os.makedirs(directory, exist_ok=True)
    with open(self.path, "ab") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    for text, value in pairs:
      # Keep what a reload would return (e.g. tuples become lists).
      self._data[(model_id, text)] = json.loads(json.dumps(value))


def _cache_line(model_id, text, value):
  """One ScoreCache record as UTF-8 bytes with a final newline.

  Readable UTF-8 where possible; a text that UTF-8 cannot encode (a lone surrogate) is written
  with JSON escapes instead, which read back as the same str.
  """
  record = {"model": model_id, "text": text, "value": value}
  try:
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
  except UnicodeEncodeError:
    return (json.dumps(record) + "\n").encode("ascii")

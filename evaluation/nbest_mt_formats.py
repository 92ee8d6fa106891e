"""N-best lists of the MT toolkits: fairseq-generate output, Moses and Marian n-best lists.

Each format has a reader `read_<format>(path, refs_path=None, **options)` returning
(lists, wheres) and a writer `write_<format>(lists, source_path, out_path, feature_names)`;
evaluation/nbest_formats.py dispatches to them and documents the contract. Scores come out in
natural log, higher is better (fairseq's base-2 scores are multiplied by ln 2); references are
line-aligned files (`nbest_files.read_aligned_refs`), segment i on line i + 1. Each reader's
docstring names the rules of its file and where they come from.
"""

import dataclasses
import itertools
import math
import re

from absl import logging

from evaluation import nbest_files
from evaluation import nbest_io
from util import io_utils

_SEGMENT_RE = re.compile(r"[0-9]{1,9}")


def _attach_aligned_refs(lists, wheres, refs_path):
  if refs_path is not None:
    for nbest in lists:
      nbest.refs = []
    nbest_files.attach_refs(lists, wheres, nbest_files.read_aligned_refs(refs_path), refs_path)
  return lists, wheres


def _check_nbest_option(nbest):
  if nbest is not None and (isinstance(nbest, bool) or not isinstance(nbest, int) or nbest < 1):
    raise ValueError(f"nbest must be a positive integer, found {nbest!r}")


def _check_source(lists, allowed, source_path, wheres):
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


# ---------------------------------------------------------------------------------------------
# fairseq-generate.

_FAIRSEQ_KINDS = "STHDPAIEF"
_FAIRSEQ_RECORD_RE = re.compile(r"[A-Z]-[0-9]")
_FAIRSEQ_LINE_RE = re.compile(r"([A-Z])-([0-9]{1,9})(_[0-9]{1,9})?\t(.*)", re.DOTALL)
_FAIRSEQ_RESERVED = ("score", "logprob")
# generate.py's log lines: the note printed since 660d69f (2020-01-13), when its scores became
# base 2, and the closing summary every version prints.
_FAIRSEQ_BASE2_NOTE = "hypothesis and token scores are output in base 2"
_FAIRSEQ_SUMMARY_RE = re.compile(r"\bTranslated [0-9,]+ sentences")
# generate.py prints each P- value with 4 decimals.
_FAIRSEQ_P_ROUNDING = 5e-5


def _fairseq_log_e(log_base):
  """ln(base) of a `log_base` option (2 or "e"): what a fairseq score is multiplied by."""
  if log_base in (2, "2"):
    return math.log(2)
  if log_base == "e":
    return 1.0
  raise ValueError(f"log_base must be 2 or e, found {log_base!r}")


@dataclasses.dataclass
class _FairseqHyp:
  score: float  # as written: base 2 (or e)
  text: str  # the H- line's text
  where: str
  last: int  # index of its last line (H-, D-, P-, A-, I-, E- or F-)
  detok: str = None
  positional: list = None
  features: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _FairseqSample:
  where: str  # its first line
  source: bool = False
  target: str = None
  hyps: list = dataclasses.field(default_factory=list)
  lines: list = dataclasses.field(default_factory=list)  # indices of its record lines


def _fairseq_attached(kind, rest, hyp, where):
  """Reads a D-, P- or F- line into the hypothesis it follows (A-, I-, E- are kept as text)."""
  if kind == "D":
    fields = rest.split("\t", 1)
    if hyp.detok is not None or len(fields) != 2:
      raise ValueError(f"{where}: expected one 'D-<id><TAB><score><TAB><text>' after {hyp.where}")
    nbest_io._parse_number(fields[0], where, "score")
    hyp.detok = fields[1].strip()
  elif kind == "P":
    if hyp.positional is not None or not rest.split():
      raise ValueError(f"{where}: expected one 'P-<id><TAB><scores>' after {hyp.where}")
    hyp.positional = [nbest_io._parse_number(v, where, "positional score") for v in rest.split()]
  elif kind == "F":
    fields = rest.split("\t")
    name = nbest_files.check_name(fields[0], where, "feature")
    if len(fields) != 2 or name in hyp.features or name in _FAIRSEQ_RESERVED:
      raise ValueError(f"{where}: expected one 'F-<id><TAB><new name><TAB><value>', found {rest!r}")
    hyp.features[name] = nbest_io._parse_number(fields[1], where, name)


def _parse_fairseq(path, lines):
  """{sample id: _FairseqSample} of a fairseq-generate output."""
  samples = {}
  for index, line in enumerate(lines):
    if not _FAIRSEQ_RECORD_RE.match(line) or line[0] not in _FAIRSEQ_KINDS:
      continue  # logging lines and the closing "Generate ... BLEU" line share the stream
    where = f"{path}:{index + 1}"
    match = _FAIRSEQ_LINE_RE.fullmatch(line)
    if not match or (match.group(3) and match.group(1) != "E"):
      raise ValueError(f"{where}: expected '<type>-<id><TAB>...', found {line!r}")
    kind, sample_id, _, rest = match.groups()
    sample = samples.setdefault(int(sample_id), _FairseqSample(where))
    sample.lines.append(index)
    if kind == "S":
      if sample.source:
        raise ValueError(f"{where}: a second S- line for id {sample_id}")
      sample.source = True
    elif kind == "T":
      if sample.target is not None:
        raise ValueError(f"{where}: a second T- line for id {sample_id}")
      sample.target = nbest_io._check_reference(rest, where)
    elif kind == "H":
      fields = rest.split("\t", 1)
      if len(fields) != 2:
        raise ValueError(f"{where}: expected 'H-<id><TAB><score><TAB><text>', found {line!r}")
      score = nbest_io._parse_number(fields[0], where, "score")
      sample.hyps.append(_FairseqHyp(score, fields[1].strip(), where, index))
    elif not sample.hyps:
      raise ValueError(f"{where}: a {kind}- line before any H- line of id {sample_id}")
    else:
      _fairseq_attached(kind, rest, sample.hyps[-1], where)
      sample.hyps[-1].last = index
  if not samples:
    raise ValueError(f"{path}:1: no fairseq-generate records (S-, T-, H- lines)")
  return samples


def _check_fairseq_hyps(samples, nbest, use_detok):
  """Every sample has its H- lines, every hypothesis the same kinds of attached lines."""
  expected = nbest or max(len(s.hyps) for s in samples.values())
  hyps = [hyp for s in samples.values() for hyp in s.hyps]
  has_positional = any(hyp.positional is not None for hyp in hyps)
  features = sorted(hyps[0].features) if hyps else []
  for sample_id, sample in samples.items():
    if not sample.hyps or len(sample.hyps) != expected:
      raise ValueError(
        f"{sample.where}: id {sample_id} has {len(sample.hyps)} H- lines, expected {expected} "
        "(a missing H- line?)"
      )
    for hyp in sample.hyps:
      if use_detok and hyp.detok is None:
        raise ValueError(f"{hyp.where}: an H- line without its D- line (others have one)")
      if has_positional and hyp.positional is None:
        raise ValueError(f"{hyp.where}: an H- line without its P- line (others have one)")
      if sorted(hyp.features) != features:
        raise ValueError(f"{hyp.where}: F- features {sorted(hyp.features)}, others {features}")
  return has_positional


def _fairseq_lists(path, lines, detok, nbest, log_base):
  """(lists, wheres, samples) of a fairseq-generate output, lists in id order."""
  _check_nbest_option(nbest)
  to_e = _fairseq_log_e(log_base)
  samples = _parse_fairseq(path, lines)
  use_detok = detok and any(h.detok is not None for s in samples.values() for h in s.hyps)
  has_positional = _check_fairseq_hyps(samples, nbest, use_detok)
  has_target = any(s.target is not None for s in samples.values())
  lists, wheres = [], {}
  for sample_id in sorted(samples):
    sample = samples[sample_id]
    if has_target and sample.target is None:
      raise ValueError(f"{sample.where}: id {sample_id} has no T- line (others have one)")
    hyps = []
    for hyp in sample.hyps:
      scores = {"score": hyp.score * to_e}
      if has_positional:
        scores["logprob"] = math.fsum(hyp.positional) * to_e
      scores.update({name: value * to_e for name, value in hyp.features.items()})
      hyps.append(nbest_io.Hypothesis(text=hyp.detok if use_detok else hyp.text, scores=scores))
    key = str(sample_id)
    lists.append(nbest_io.NBestList(key, [sample.target] if has_target else [], hyps))
    wheres[key] = sample.where
  return lists, wheres, samples


# When a fairseq file's scores are implausible in the base read: H- is the sum of the P- values
# over (length + 1) ** lenpen (fairseq/sequence_generator.py) in either base, so H- against P-
# cannot tell the base. What can: generate.py's log (the base-2 note; or its closing summary
# without the note, a natural-log run before 660d69f), and the P- values as the model's token
# log-probs: a sample's distinct hypotheses hold at most probability 1 together, so base ** (sum
# of P-, less its rounding) summed over them above 1 means the base read is too small (a
# natural-log file read as base 2; an LM fused with a negative weight would do it too).
def _fairseq_base_doubt(lines, samples, log_base):
  """Why the file's scores do not look like log-probs in `log_base` (see above), or None."""
  note = any(_FAIRSEQ_BASE2_NOTE in line for line in lines)
  if log_base == "e" and note:
    return f"its log says {_FAIRSEQ_BASE2_NOTE!r}"
  if log_base != "e" and not note and any(_FAIRSEQ_SUMMARY_RE.search(l) for l in lines):
    return "its log has generate.py's summary without the base-2 note (fairseq before 2020-01-13)"
  to_e = _fairseq_log_e(log_base)
  for sample_id in sorted(samples):
    sums = {}  # by text: a sampling run may give one hypothesis twice
    for hyp in samples[sample_id].hyps:
      if hyp.positional is not None:
        low = math.fsum(hyp.positional) - _FAIRSEQ_P_ROUNDING * len(hyp.positional)
        sums.setdefault(hyp.text, low)
    mass = math.fsum(math.exp(low * to_e) for low in sums.values())
    if mass > 1:
      return f"the hypotheses of id {sample_id} would together have probability {mass:.3g} > 1"
  return None


def read_fairseq(path, refs_path=None, detok=True, nbest=None, log_base=2):
  """Reads `fairseq-generate --nbest N` output.

  Sources: fairseq_cli/generate.py prints, per sample id (its line in the test set), `S-<id>`
  (source) and `T-<id>` (target) lines, then per hypothesis, best first, `H-<id><TAB><score>
  <TAB><text>` (tokenized, BPE removed), `D-<id><TAB><score><TAB><text>` (detokenized),
  `P-<id><TAB><positional scores>` (one per token and EOS, 4 decimals), and `A-`, `I-`, `E-<id>
  _<step>` lines on request; since its commit 660d69f (2020-01-13) the scores are divided by
  ln 2 ("NOTE: hypothesis and token scores are output in base 2"), before they were natural
  log; its log lines and the closing "Generate ... BLEU" line go to the same stream.
  fairseq/sequence_generator.py's hypothesis score is the sum of the token log-probs divided by
  (length + 1) ** lenpen unless --unnormalized.

  Conversions (each once, here): "score" = H score * ln(base), natural log, still
  length-normalised as fairseq made it; "logprob" = sum of the P- values * ln(base), the
  unnormalised log p(hyp | src) with EOS (rounded: the P- values have 4 decimals), present when
  the file has P- lines. Lines `F-<id><TAB><name><TAB><value>` after a hypothesis are the
  features `write_fairseq` appends (in the file's base), read as score `name` * ln(base). Other
  lines (logs) are skipped. A file whose scores look like another base's is read as asked, with
  one warning (`_fairseq_base_doubt`).

  Args:
    path: str, the generate output.
    refs_path: str, sequence of str or None: line-aligned references (line i + 1 for id i),
      used instead of the T- lines; without it the T- lines are the references (if any).
    detok: bool, the text is the D- line's (when the file has D- lines); False: the H- line's.
    nbest: int or None, the number of hypotheses per sample (default: the largest found).
    log_base: 2 or "e", the base of the file's scores ("e": fairseq before 660d69f).

  Returns:
    (list[NBestList], dict[str, str]): lists in id order, keys "0", "1", ...; key ->
    'file:line' of the sample's first line.

  Raises:
    ValueError: a malformed record, a sample with no or fewer H- lines than the others, an H-
      line without the D-/P-/F- lines the others have, a D-/P- line before any H- line, T-
      lines for some samples only, references not matching; `file:line`.
  """
  lines = nbest_files.read_lines(path)
  lists, wheres, samples = _fairseq_lists(path, lines, detok, nbest, log_base)
  doubt = _fairseq_base_doubt(lines, samples, log_base)
  if doubt:
    logging.warning("%s: read as base-%s log-probs (log_base), but %s", path, log_base, doubt)
  return _attach_aligned_refs(lists, wheres, refs_path)


def write_fairseq(lists, source_path, out_path, feature_names, kept=None, log_base=2):
  """Writes `source_path` again with, after each hypothesis' lines, one line per new feature,
  `F-<id><TAB><name><TAB><value>`, the value in the file's `log_base` as its other scores
  (fairseq's own consumers select lines by their H-/D-/P- prefix and pass over the new one).
  With `kept`, the records of the other samples are left out (the log lines stay)."""
  lines = nbest_files.read_lines(source_path)
  _, wheres, samples = _fairseq_lists(source_path, lines, True, None, log_base)
  to_e = _fairseq_log_e(log_base)
  ids = sorted(samples)
  chosen = [ids[i] for i in nbest_files.kept_indices(len(ids), kept, source_path)]
  allowed = {str(i): [(h.text, h.detok) for h in samples[i].hyps] for i in chosen}
  _check_source(lists, allowed, source_path, wheres)
  left_out = {index for i in set(ids) - set(chosen) for index in samples[i].lines}
  after = {}
  for nbest in lists:
    for hyp, source in zip(nbest.hyps, samples[int(nbest.key)].hyps):
      after[source.last] = [
        f"F-{nbest.key}\t{name}\t{hyp.scores[name] / to_e!r}" for name in feature_names
      ]
  out = []
  for index, line in enumerate(lines):
    if index not in left_out:
      out.append(line)
      out.extend(after.get(index, []))
  io_utils.write_atomically(out_path, nbest_files.lines_text(out))


# ---------------------------------------------------------------------------------------------
# Moses / Marian n-best lists.


# Marian's `--word-scores` field (src/translator/output_printer.h: " ||| WordScores=" and the
# score of each word).
_MARIAN_WORD_SCORES = "WordScores="


def _is_label(token):
  """A feature label: `Name=` (`Name=v` as Marian writes it), or pre-2013 Moses' `name:`."""
  return "=" in token or token.endswith(":")


def _moses_features(field, where, arity):
  """{name: value} of a feature field `Name= v1 v2 Name2= v3` (also `Name=v`, as Marian writes
  `F0=<score>`, and Moses' older `name: v1 v2`) whose first token is a label; a label with
  several values gives `Name_0`, `Name_1`, ...; `arity` records each label's number of values
  across the file."""
  groups = []
  for token in field.split():
    if _is_label(token):
      name, _, value = token.rpartition("=") if "=" in token else (token[:-1], ":", "")
      if not name or any(label == name for label, _ in groups):
        raise ValueError(f"{where}: a feature label {token!r} that is empty or repeated")
      groups.append((name, []))
      token = value
      if not token:
        continue
    groups[-1][1].append(nbest_io._parse_number(token, where, groups[-1][0]))
  features = {}
  for name, values in groups:
    if len(values) != arity.setdefault(name, len(values)) or not values:
      raise ValueError(
        f"{where}: feature {name}= has {len(values)} values, expected {arity[name] or 'some'}"
      )
    names = [name] if len(values) == 1 else [f"{name}_{i}" for i in range(len(values))]
    for n, value in zip(names, values):
      if n in features or n == "score":
        raise ValueError(f"{where}: feature {n!r} twice (or named like the total, 'score')")
      features[n] = value
  return features


def _parse_moses_line(line, where, arity):
  """(segment id, Hypothesis, index of the feature field) of one n-best line."""
  fields = line.split("|||")
  segment = fields[0].strip()
  if len(fields) < 4 or not _SEGMENT_RE.fullmatch(segment):
    raise ValueError(
      f"{where}: expected 'id ||| hypothesis ||| features ||| total', found {line!r}"
    )
  # Moses: id ||| text ||| features ||| total [||| alignment]; Marian puts its alignment and
  # word-score fields before the features: the feature field is the first other field that
  # starts with a label.
  for index in range(2, len(fields) - 1):
    tokens = fields[index].split()
    if tokens and tokens[0].startswith(_MARIAN_WORD_SCORES):
      # Per-word scores, not a feature to weigh; kept in the line as written.
      for token in [tokens[0][len(_MARIAN_WORD_SCORES) :], *tokens[1:]]:
        if token:
          nbest_io._parse_number(token, where, "WordScores")
    elif tokens and _is_label(tokens[0]):
      break
  else:
    raise ValueError(
      f"{where}: no feature field: expected labelled values 'Name= v ...' (Moses' default; "
      "'name: v ...' before 2013) followed by the total"
    )
  scores = _moses_features(fields[index], where, arity)
  scores["score"] = nbest_io._parse_number(fields[index + 1], where, "total")
  return str(int(segment)), nbest_io.Hypothesis(text=fields[1].strip(), scores=scores), index


def _moses_lists(path, lines):
  """(lists, wheres, feature field index per line) of a Moses/Marian n-best list."""
  lists, wheres, field_index, arity = [], {}, [], {}
  for lineno, line in enumerate(lines, 1):
    where = f"{path}:{lineno}"
    segment, hyp, index = _parse_moses_line(line, where, arity)
    field_index.append(index)
    if not lists or lists[-1].key != segment:
      if segment in wheres:
        raise ValueError(
          f"{where}: segment {segment} again after segment {lists[-1].key} (its lines start at "
          f"{wheres[segment]}; the lines of a segment come together)"
        )
      wheres[segment] = where
      lists.append(nbest_io.NBestList(segment, [], []))
    lists[-1].hyps.append(hyp)
  if not lists:
    raise ValueError(f"{path}:1: no hypotheses")
  # Moses prints a sparse feature only where it is not zero (BaseManager::OutputFeatureScores).
  names = list(dict.fromkeys(n for nbest in lists for h in nbest.hyps for n in h.scores))
  for nbest in lists:
    for hyp in nbest.hyps:
      hyp.scores = {name: hyp.scores.get(name, 0.0) for name in names}
  return lists, wheres, field_index


def read_moses(path, refs_path=None, nbest=None):
  """Reads a Moses or Marian n-best list.

  Sources: the Moses manual, "Generating n-Best Lists" (statmt.org/moses/?n=Advanced.Search):
  `id ||| output ||| unweighted component scores ||| weighted overall score` per line, best
  first, ids from 0; moses/BaseManager.cpp OutputFeatureScores labels each dense feature
  function once, `Name= v1 v2 ...`, and each non-zero sparse feature `name= v`; with
  -include-alignment-in-n-best an alignment field follows the total. Marian
  (src/translator/output_printer.h): `id ||| translation [||| alignment] [||| WordScores= w1
  w2 ...] ||| F0= v F1= v ... ||| total`, `F0=<score>` when there is no breakdown; the word
  scores (--word-scores) are not read as features and are written back as they are. The
  features are Moses' log-linear
  features (natural-log model scores, penalties as counts), taken as written: the total is their
  weighted sum, higher is better, read as "score". A label with several values gives `Name_0`,
  `Name_1`, ...; a sparse feature absent from a line is 0. Moses before 2013 labelled its features
  `name:` (`d: v ... lm: v tm: v ... w: v`, its MERT example): read alike.

  Args:
    path: str, the n-best list.
    refs_path: str, sequence of str or None, line-aligned references (line i + 1 for segment
      i), one file per reference set.
    nbest: int or None, the number of hypotheses of every segment (Moses writes fewer when the
      search finds fewer distinct ones; give it to check that none was lost).

  Returns:
    (list[NBestList], dict[str, str]): lists in file order, keys the segment ids; key ->
    'file:line' of its first line.

  Raises:
    ValueError: a line without its fields, a non-number value, a label with a varying number of
      values, a segment whose lines are apart, a segment with other than `nbest` hypotheses,
      references not matching; `file:line`.
  """
  _check_nbest_option(nbest)
  lists, wheres, _ = _moses_lists(path, nbest_files.read_lines(path))
  for n in lists:
    if nbest is not None and len(n.hyps) != nbest:
      raise ValueError(
        f"{wheres[n.key]}: segment {n.key} has {len(n.hyps)} hypotheses, not {nbest}"
      )
  return _attach_aligned_refs(lists, wheres, refs_path)


def write_moses(lists, source_path, out_path, feature_names, kept=None):
  """Writes the lines of `source_path` of the lists (those at `kept`, else all) with each new
  feature appended to the feature field of each line as `NAME= value`; the total is left as it
  is (the feature has no weight yet)."""
  lines = nbest_files.read_lines(source_path)
  source_lists, wheres, field_index = _moses_lists(source_path, lines)
  # A segment's lines come together (_moses_lists), so its first line is the count before it.
  starts = list(itertools.accumulate((len(n.hyps) for n in source_lists), initial=0))
  chosen = nbest_files.kept_indices(len(source_lists), kept, source_path)
  allowed = {source_lists[i].key: [(h.text,) for h in source_lists[i].hyps] for i in chosen}
  _check_source(lists, allowed, source_path, wheres)
  out = []
  for i, nbest in zip(chosen, lists):
    for number, hyp in enumerate(nbest.hyps, starts[i]):
      fields = lines[number].split("|||")
      added = "".join(f" {name}= {hyp.scores[name]!r}" for name in feature_names)
      index = field_index[number]
      fields[index] = fields[index].rstrip() + added + " "
      out.append("|||".join(fields))
  io_utils.write_atomically(out_path, nbest_files.lines_text(out))

"""fairseq-generate output ("fairseq")."""

import dataclasses
import math
import os
import re

from absl import logging

from nbest import formats
from nbest import text_files
from nbest import types
from util import io_utils

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
    text_files.parse_number(fields[0], where, "score")
    hyp.detok = fields[1].strip()
  elif kind == "P":
    if hyp.positional is not None or not rest.split():
      raise ValueError(f"{where}: expected one 'P-<id><TAB><scores>' after {hyp.where}")
    hyp.positional = [text_files.parse_number(v, where, "positional score") for v in rest.split()]
  elif kind == "F":
    fields = rest.split("\t")
    name = text_files.check_name(fields[0], where, "feature")
    if len(fields) != 2 or name in hyp.features or name in _FAIRSEQ_RESERVED:
      raise ValueError(f"{where}: expected one 'F-<id><TAB><new name><TAB><value>', found {rest!r}")
    hyp.features[name] = text_files.parse_number(fields[1], where, name)


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
      sample.target = text_files.check_reference(rest, where)
    elif kind == "H":
      fields = rest.split("\t", 1)
      if len(fields) != 2:
        raise ValueError(f"{where}: expected 'H-<id><TAB><score><TAB><text>', found {line!r}")
      score = text_files.parse_number(fields[0], where, "score")
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
  text_files.check_nbest_option(nbest)
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
      hyps.append(types.Hypothesis(text=hyp.detok if use_detok else hyp.text, scores=scores))
    key = str(sample_id)
    lists.append(types.NBestList(key, [sample.target] if has_target else [], hyps))
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

  Sources: fairseq_cli/generate.py prints per sample id (its test-set line) `S-`, `T-`, then per
  hypothesis best first `H-<id><TAB><score><TAB><text>`, `D-` (detokenized), `P-` (a log-prob per
  token and EOS, 4 decimals), interleaved with its log lines; since 660d69f (2020-01-13) in base
  2, before in natural log. The H- score is the token log-probs' sum over (length + 1) ** lenpen
  (fairseq/sequence_generator.py).

  Scores, times ln(base): "score" (H-, still length-normalised), "logprob" (the P- sum, log
  p(hyp | src) with EOS, rounded) when there are P- lines, and `name` of `write_fairseq`'s
  `F-<id><TAB><name><TAB><value>` lines. Keys "0", "1", ... are the sample ids.

  Args:
    refs_path: line-aligned references, used instead of the T- lines.
    detok: the text is the D- line's where there are D- lines.
    log_base: 2 or "e" (before 660d69f); a file that looks like the other base is read as
      asked, with one warning.
  """
  lines = text_files.read_lines(path)
  lists, wheres, samples = _fairseq_lists(path, lines, detok, nbest, log_base)
  doubt = _fairseq_base_doubt(lines, samples, log_base)
  if doubt:
    logging.warning("%s: read as base-%s log-probs (log_base), but %s", path, log_base, doubt)
  return text_files.attach_aligned_refs(lists, wheres, refs_path)


def write_fairseq(lists, source_path, out_path, feature_names, kept=None, log_base=2):
  """Writes `source_path` again with an `F-<id><TAB><name><TAB><value>` line per feature after
  each hypothesis, in the file's `log_base` (fairseq's consumers select lines by prefix and pass
  over it); with `kept`, other samples' records are left out, log lines kept."""
  lines = text_files.read_lines(source_path)
  _, wheres, samples = _fairseq_lists(source_path, lines, True, None, log_base)
  to_e = _fairseq_log_e(log_base)
  ids = sorted(samples)
  chosen = [ids[i] for i in text_files.kept_indices(len(ids), kept, source_path)]
  allowed = {str(i): [(h.text, h.detok) for h in samples[i].hyps] for i in chosen}
  text_files.check_source(lists, allowed, source_path, wheres)
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
  io_utils.write_atomically(out_path, text_files.lines_text(out))


def export_fairseq(lists, out_dir, log_base=2):
  """What `fairseq-generate --nbest N` prints of the lists, in base 2: per sample a T- line (the
  reference), per hypothesis an H- line ('score'), a P- line holding the sum of its token scores
  when the lists have 'logprob', and an F- line per other score; and the references line-aligned."""
  names = text_files.required_score(lists, "score", "fairseq")
  width = text_files.beam_width(lists, "fairseq-generate prints N hypotheses per sample")
  to_e = _fairseq_log_e(log_base)
  lines = []
  for i, nbest in enumerate(lists):
    if len(nbest.refs) > 1:
      raise ValueError(
        f"fairseq: list {nbest.key!r} has {len(nbest.refs)} references, T- holds one"
      )
    lines += [f"T-{i}\t{text_files.check_text(ref, 'reference')}" for ref in nbest.refs]
    for hyp in nbest.hyps:
      lines.append(
        f"H-{i}\t{hyp.scores['score'] / to_e!r}\t{text_files.check_text(hyp.text, 'hypothesis')}"
      )
      if "logprob" in names:
        lines.append(f"P-{i}\t{hyp.scores['logprob'] / to_e!r}")
      lines += [
        f"F-{i}\t{text_files.check_name(name, 'fairseq')}\t{hyp.scores[name] / to_e!r}"
        for name in names
        if name not in _FAIRSEQ_RESERVED
      ]
  io_utils.write_atomically(
    os.path.join(out_dir, "generate-test.txt"), text_files.lines_text(lines)
  )
  text_files.write_refs(lists, os.path.join(out_dir, "refs.txt"), keyed=False)
  return {"nbest": width}


formats.register(
  "fairseq",
  formats.Format(
    read=read_fairseq,
    write=write_fairseq,
    path="fairseq-generate's output",
    refs="line-aligned reference file(s), line i + 1 for id i (default: the T- lines)",
    options="detok=bool, nbest=int, log_base=2|e (default 2; e: fairseq before 2020-01-13)",
    scores=f"'score' (H-, length-normalised), 'logprob' (sum of P-) ({formats.SCORE_NOTE})",
    features="a line `F-<id><TAB><name><TAB><value in log_base>` after the hypothesis' lines",
    aligned_refs=True,
    refs_in_file=True,
    export=formats.Export(export_fairseq, "generate-test.txt", "refs.txt"),
  ),
)

"""Moses and Marian n-best lists ("moses")."""

import itertools
import os
import re

from nbest import formats
from nbest import text_files
from nbest import types
from util import io_utils

_SEGMENT_RE = re.compile(r"[0-9]{1,9}")
# Marian's `--word-scores` field (src/translator/output_printer.h: " ||| WordScores=" and the
# score of each word).
_MARIAN_WORD_SCORES = "WordScores="


def _is_label(token):
  """A feature label: `Name=` (`Name=v` as Marian writes it), or pre-2013 Moses' `name:`."""
  return "=" in token or token.endswith(":")


def _moses_features(field, where, arity):
  """{name: value} of a feature field `Name= v1 v2 Name2= v3` (`Name_0`, `Name_1` for a label of
  several values); `arity` records each label's number of values across the file."""
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
    groups[-1][1].append(text_files.parse_number(token, where, groups[-1][0]))
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
          text_files.parse_number(token, where, "WordScores")
    elif tokens and _is_label(tokens[0]):
      break
  else:
    raise ValueError(
      f"{where}: no feature field: expected labelled values 'Name= v ...' (Moses' default; "
      "'name: v ...' before 2013) followed by the total"
    )
  scores = _moses_features(fields[index], where, arity)
  scores["score"] = text_files.parse_number(fields[index + 1], where, "total")
  return str(int(segment)), types.Hypothesis(text=fields[1].strip(), scores=scores), index


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
      lists.append(types.NBestList(segment, [], []))
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

  Sources: the Moses manual, "Generating n-Best Lists": `id ||| output ||| features ||| total`,
  best first, ids from 0; moses/BaseManager.cpp OutputFeatureScores labels each dense feature
  once (`Name= v1 v2`) and each non-zero sparse one (`name= v`, absent: 0); an alignment field
  may follow. Marian (src/translator/output_printer.h): `id ||| text [||| alignment] [|||
  WordScores= ...] ||| F0= v ... ||| total`. Moses before 2013 wrote `name:` labels, read alike.
  The features are taken as written (log-linear: natural-log model scores, penalties as
  counts); the total, their weighted sum, is "score".

  Args:
    nbest: hypotheses of every segment, to check none was lost (Moses writes fewer when the
      search finds fewer distinct ones).
  """
  text_files.check_nbest_option(nbest)
  lists, wheres, _ = _moses_lists(path, text_files.read_lines(path))
  for n in lists:
    if nbest is not None and len(n.hyps) != nbest:
      raise ValueError(
        f"{wheres[n.key]}: segment {n.key} has {len(n.hyps)} hypotheses, not {nbest}"
      )
  return text_files.attach_aligned_refs(lists, wheres, refs_path)


def write_moses(lists, source_path, out_path, feature_names, kept=None):
  """Writes the source's lines of the lists with each feature appended to the feature field as
  `NAME= value`; the total stays (the feature has no weight yet)."""
  lines = text_files.read_lines(source_path)
  source_lists, wheres, field_index = _moses_lists(source_path, lines)
  # A segment's lines come together (_moses_lists), so its first line is the count before it.
  starts = list(itertools.accumulate((len(n.hyps) for n in source_lists), initial=0))
  chosen = text_files.kept_indices(len(source_lists), kept, source_path)
  allowed = {source_lists[i].key: [(h.text,) for h in source_lists[i].hyps] for i in chosen}
  text_files.check_source(lists, allowed, source_path, wheres)
  out = []
  for i, nbest in zip(chosen, lists):
    for number, hyp in enumerate(nbest.hyps, starts[i]):
      fields = lines[number].split("|||")
      added = "".join(f" {name}= {hyp.scores[name]!r}" for name in feature_names)
      index = field_index[number]
      fields[index] = fields[index].rstrip() + added + " "
      out.append("|||".join(fields))
  io_utils.write_atomically(out_path, text_files.lines_text(out))


def export_moses(lists, out_dir):
  """Moses' n-best lines `id ||| text ||| Name= v ... ||| total`: every score a dense feature but
  'score', the total; and the references line-aligned."""
  names = text_files.required_score(lists, "score", "moses")
  features = [text_files.check_name(name, "moses") for name in names if name != "score"]
  if not features:
    raise ValueError(
      "moses: the format needs a feature besides the total 'score'; the lists have none"
    )
  lines = []
  for i, nbest in enumerate(lists):
    for hyp in nbest.hyps:
      text = text_files.check_text(hyp.text, "hypothesis")
      if "|||" in text:
        raise ValueError(
          f"cannot write the hypothesis {text!r} of {nbest.key!r} to Moses: '|||' inside"
        )
      feats = " ".join(f"{name}= {hyp.scores[name]!r}" for name in features)
      lines.append(f"{i} ||| {text} ||| {feats} ||| {hyp.scores['score']!r}")
  io_utils.write_atomically(os.path.join(out_dir, "nbest.txt"), text_files.lines_text(lines))
  text_files.write_refs(lists, os.path.join(out_dir, "refs.txt"), keyed=False)
  return {}


formats.register(
  "moses",
  formats.Format(
    read=read_moses,
    write=write_moses,
    path="a Moses or Marian n-best list",
    refs="line-aligned reference file(s), line i + 1 for segment i",
    options="nbest=int",
    scores="each labelled feature as written, and the total as 'score'",
    features="`NAME= value` appended to the feature field (the total unchanged)",
    aligned_refs=True,
    export=formats.Export(export_moses, "nbest.txt", "refs.txt"),
  ),
)

"""Kaldi N-best lists ("kaldi"): lattice-to-nbest | nbest-to-linear output and its cost archives."""

import os
import re

from nbest import formats
from nbest import text_files
from nbest import types

_KALDI_KEY_RE = re.compile(r"(.+)-([1-9][0-9]{0,8})", re.DOTALL)
_COST_SUFFIX = ".cost"
_WORD_ID_RE = re.compile(r"[0-9]+")


def _group_ranks(items, label):
  """(lists in order of first appearance, {utt: 'file:line'}) of [(utt, rank, Hypothesis, where)];
  an utterance's ranks must be 1..n."""
  by_utt, wheres = {}, {}
  for utt, rank, hyp, where in items:
    wheres.setdefault(utt, where)
    by_utt.setdefault(utt, {})[rank] = (hyp, where)
  lists = []
  for utt, ranks in by_utt.items():
    for expected, rank in enumerate(sorted(ranks), 1):
      if rank != expected:
        raise ValueError(f"{ranks[rank][1]}: {utt!r} has rank {rank} but no rank {expected}")
    lists.append(types.NBestList(utt, [], [ranks[r][0] for r in sorted(ranks)]))
  if not lists:
    raise ValueError(f"{label}:1: no hypotheses")
  return lists, wheres


def _kaldi_cost(rest, where):
  return text_files.parse_number(rest.strip(), where, "cost")


def _kaldi_paths(path, costs):
  if os.path.isdir(path):
    text_path = os.path.join(path, "text")
    found = {
      name[: -len(_COST_SUFFIX)]: os.path.join(path, name)
      for name in sorted(os.listdir(path))
      if name.endswith(_COST_SUFFIX)
    }
  else:
    text_path, found = path, {}
  found.update(costs or {})
  for name, cost_path in found.items():
    text_files.check_name(name, cost_path, "cost")
  return text_path, found


def read_kaldi(path, refs_path=None, costs=None):
  """Reads `lattice-to-nbest | nbest-to-linear` output, its words mapped by utils/int2sym.pl.

  Keys are `<utt>-<n>`, n = 1, 2, ... best first (src/latbin/lattice-to-nbest.cc), the utterance
  id may hold dashes; nbest-to-linear writes each path's LM and acoustic costs unscaled
  (src/latbin/nbest-to-linear.cc, Value1 and Value2), -ln p as OpenFst's tropical weights.

  Args:
    path: the transcriptions, or a directory of `text` and `<name>.cost` archives (score `name`).
    costs: {score name: cost archive}, added to (and over) a directory's archives.
  """
  text_path, cost_paths = _kaldi_paths(path, costs)
  texts = text_files.parse_keyed(text_path, text_files.read_text(text_path), text_files.keyed_text)
  _check_words(texts, text_path)
  scores = {key: {} for key in texts}
  for name, cost_path in cost_paths.items():
    parsed = text_files.parse_keyed(cost_path, text_files.read_text(cost_path), _kaldi_cost)
    text_files.check_same_keys(texts, text_path, parsed, cost_path)
    for key, (cost, _) in parsed.items():
      scores[key][name] = -cost  # a cost is -ln p
  items = []
  for key, (text, where) in texts.items():
    match = _KALDI_KEY_RE.fullmatch(key)
    if not match:
      raise ValueError(f"{where}: expected a key '<utt>-<n>' with n = 1, 2, ..., found {key!r}")
    hyp = types.Hypothesis(text=text, scores=scores[key])
    items.append((match.group(1), int(match.group(2)), hyp, where))
  lists, wheres = _group_ranks(items, text_path)
  return text_files.attach_keyed_refs(lists, wheres, refs_path)


def _check_words(texts, text_path):
  """Refuses word ids (before int2sym.pl): a file, not a hypothesis, of integers only, so that
  "call 911" passes; a task whose every hypothesis is numerals is refused too."""
  words = [text.split() for text, _ in texts.values()]
  if any(words) and all(_WORD_ID_RE.fullmatch(w) for hyp in words for w in hyp):
    raise ValueError(
      f"{text_path}:1: every hypothesis is integers: word ids, not words; map them with "
      "`utils/int2sym.pl -f 2- <lang>/words.txt` (the words.txt of the decoding graph) first"
    )


def write_kaldi(lists, source_path, out_path, feature_names):
  """Writes the directory `read_kaldi` reads, a `<name>.cost` archive per score; no references."""
  del source_path, feature_names  # every score, old and new, is a cost archive of the same form
  names = text_files.score_names(lists, out_path)
  for name in names:
    text_files.check_name(name, out_path)
  text, costs = [], {name: [] for name in names}
  for nbest in lists:
    for rank, hyp in enumerate(nbest.hyps, 1):
      key = f"{text_files.check_key(nbest.key)}-{rank}"
      text.append(f"{key} {text_files.check_text(hyp.text, 'hypothesis')}")
      for name in names:
        costs[name].append(f"{key} {-hyp.scores[name]!r}")
  files = {"text": text_files.lines_text(text)}
  files.update({name + _COST_SUFFIX: text_files.lines_text(c) for name, c in costs.items()})
  text_files.write_files(out_path, files, lambda rel: rel == "text" or rel.endswith(_COST_SUFFIX))


def _export_kaldi(lists, out_dir):
  """The directory `nbest/` of `write_kaldi` and data/<set>/text's `ref_text`."""
  write_kaldi(lists, None, os.path.join(out_dir, "nbest"), ())
  text_files.write_refs(lists, os.path.join(out_dir, "ref_text"))
  return {}


formats.register(
  "kaldi",
  formats.Format(
    read=read_kaldi,
    write=write_kaldi,
    path="the transcriptions `<utt>-<n> words` (int2sym'd nbest-to-linear output), or a "
    "directory of `text` and `<name>.cost` archives",
    refs="a Kaldi text file `<utt> <words>` (data/<set>/text)",
    options="costs={name: cost archive}",
    scores=f"one per cost archive, -cost ({formats.SCORE_NOTE})",
    features="a cost archive `<name>.cost` (`<utt>-<n> <-value>`) in the output directory",
    directory=True,
    export=formats.Export(_export_kaldi, "nbest", "ref_text"),
  ),
)

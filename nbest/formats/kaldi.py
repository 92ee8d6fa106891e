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
  """Groups hypotheses by utterance: items [(utt, rank, Hypothesis, where)] in file order.

  Returns:
    (list[NBestList], dict[str, str]): the lists in order of first appearance, hypotheses in
    rank order, and utt -> 'file:line' of its first line.

  Raises:
    ValueError: ranks of an utterance that are not 1..n; `file:line`.
  """
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
  """Reads Kaldi N-best lists: a transcription file and cost archives, keyed `<utt>-<n>`.

  Made by `lattice-to-nbest --n=N ark:lat ark:- | nbest-to-linear ark:- ark:/dev/null
  ark,t:words.int ark,t:lm.cost ark,t:ac.cost`, then `utils/int2sym.pl -f 2- words.txt` for
  the words (as egs/wsj/s5/steps/rnnlmrescore.sh does). Rules and their sources:
  - keys are `<utt>-<n>`, n = 1, 2, ... in best-first order (src/latbin/lattice-to-nbest.cc:
    "the keys of the n-best are utt_id-1, utt_id-2, ..."); the utterance id may hold dashes;
  - a text archive line is `<key> <value>` (Kaldi's `ark,t`): the transcription `<key> w1 w2 ...`
    (may be empty), a cost `<key> <float>`;
  - nbest-to-linear writes the LM (graph) cost and the acoustic cost of each path
    (src/latbin/nbest-to-linear.cc: weight Value1 and Value2), unscaled: lattice-to-nbest undoes
    its --acoustic-scale/--lm-scale before writing. Costs are -ln p (OpenFst's tropical weights),
    so each becomes the score -cost, natural log, higher is better.

  Args:
    path: str, the transcription file (costs then come from `costs` only), or a directory
      holding `text` (the transcriptions) and `<name>.cost` archives (the layout `write_kaldi`
      writes), each read as score `name`.
    refs_path: str or None, a Kaldi `text` file of references, `<utt> <words>`.
    costs: dict[str, str] or None, score name -> cost archive (e.g. {"acoustic": "ac.cost",
      "lm": "lm.cost"}); added to a directory's `.cost` files (same name: this one).

  Returns:
    (list[NBestList], dict[str, str]): lists in order of first appearance; utt -> 'file:line'.

  Raises:
    ValueError: a malformed key or line, a rank gap, a key of the transcriptions missing from a
      cost archive or the reverse, a non-number cost, references not matching, transcriptions
      in word ids (every hypothesis integers only: before int2sym.pl); `file:line`.
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
  """Refuses transcriptions still in word ids (nbest-to-linear writes ids; utils/int2sym.pl
  makes them words): every hypothesis of the file is integer tokens only, one at least not empty.
  The rule is the file's, not a hypothesis', so transcripts with numbers ("call 911") pass; a
  task whose every hypothesis is numerals alone is refused too."""
  words = [text.split() for text, _ in texts.values()]
  if any(words) and all(_WORD_ID_RE.fullmatch(w) for hyp in words for w in hyp):
    raise ValueError(
      f"{text_path}:1: every hypothesis is integers: word ids, not words; map them with "
      "`utils/int2sym.pl -f 2- <lang>/words.txt` (the words.txt of the decoding graph) first"
    )


def write_kaldi(lists, source_path, out_path, feature_names):
  """Writes the directory `read_kaldi` reads: `text`, and `<name>.cost` (cost = -score) for every
  score of the lists, the new features included; the references are not written (they live in
  the data dir's `text`)."""
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
  ),
)

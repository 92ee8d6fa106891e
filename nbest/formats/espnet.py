"""The shared data's ESPnet layout ("espnet"): a LibriSpeech decode set as its archive holds it."""

import glob
import json
import os
import re
import tarfile

from nbest import formats
from nbest import shared_data
from nbest import text_files
from nbest import types
from util import io_utils

_ESPNET_MEMBER_RE = re.compile(r"raw_hypotheses/(\d+)best_recog/(text|score|scores)")
_TRN_RE = re.compile(r"(.*?)[ \t]*\(([^()\s]+)\)")

# Fields every hypothesis' `scores` JSON has ("lm" too when an LM was fused).
_REQUIRED_SCORES = ("decoder", "ctc")


def _load_espnet_files(path):
  """{name relative to the set root: (label for errors, text)} of a `.tar`/`.tar.xz` holding
  `<set>/raw_hypotheses/...`, or of the unpacked set directory."""
  files = {}
  if os.path.isdir(path):
    for full in glob.glob(os.path.join(path, "**", "*"), recursive=True):
      if os.path.isfile(full):
        files[os.path.relpath(full, path).replace(os.sep, "/")] = (
          full,
          text_files.read_text_file(full),
        )
    return files
  roots = set()
  # A truncated or damaged archive was an EOFError traceback: one line naming it.
  with io_utils.reading(path), tarfile.open(path, "r:*") as tar:
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


def _espnet_score(rest, where):
  return text_files.parse_tensor_float(rest, where, "score")


def _espnet_scores(rest, where):
  try:
    raw = json.loads(rest)
  except json.JSONDecodeError as e:
    raise ValueError(f"{where}: scores are not a JSON object ({e.msg}): {rest!r}") from None
  if not isinstance(raw, dict):
    raise ValueError(f"{where}: scores are not a JSON object: {rest!r}")
  for name in _REQUIRED_SCORES:
    if name not in raw:
      raise ValueError(f"{where}: scores lack the {name!r} field: {rest!r}")
  return {
    name: text_files.parse_tensor_float(value, where, f"scores[{name!r}]")
    for name, value in raw.items()
  }


def _parse_trn(label, text):
  """Parses sclite trn lines `TEXT<TAB>(id)` into [(id, text, 'label:line')]."""
  text_files.check_final_newline(label, text)
  out = []
  for lineno, line in enumerate(text_files.split_lines(text), 1):
    where = f"{label}:{lineno}"
    match = _TRN_RE.fullmatch(line)
    if not match:
      raise ValueError(f"{where}: expected 'TEXT<TAB>(id)', found {line!r}")
    out.append((match.group(2), text_files.check_reference(match.group(1), where), where))
  return out


def _match_trn_id(trn_id, keys):
  """The longest dash-separated suffix of a trn id that is a known key: sclite ids carry the
  speaker in front (`1272-128104-1272-128104-0000` for `1272-128104-0000`)."""
  parts = trn_id.split("-")
  for start in range(len(parts)):
    candidate = "-".join(parts[start:])
    if candidate in keys:
      return candidate
  return None


def read_espnet_nbest(path_or_set_name, data_dir=None, select=None):
  """Reads an ESPnet2 N-best decode set with its references, in reference-file order.

  Layout (under `<set>/` in the archive, or a directory): `raw_hypotheses/<N>best_recog/text`
  (`<utt> <HYP>`), `.../scores` (`<utt> {"decoder": "tensor(x)", "ctc": ..., "lm": ...}`), maybe
  `.../score` (the beam's total, "score", which orders the ranks), `references/ref_wer.trn`. An
  utterance may be missing from the deeper ranks. Errors name `archive:member:line`.

  Args:
    path_or_set_name: a `.tar.xz`, a set directory, or a set name (`dev_clean`, `test-other`)
      in `<data_dir>/asr-librispeech-espnet2-30best/`.
    select: `types.list_selection`'s function: only those lists' lines are parsed, so a few
      lists of a large set read in a fraction of the time.
  """
  path = shared_data.espnet_set_path(path_or_set_name, data_dir)
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
    known = {
      text_files.line_key(l)
      for l in text_files.split_lines(files["raw_hypotheses/1best_recog/text"][1])
    }
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
    lists.append(types.NBestList(key=key, refs=[ref], hyps=text_files.collect_ranks(ranks, key)))
  for key, where in first_seen.items():
    if key not in refs_seen:
      raise ValueError(f"{where}: utterance {key!r} has no reference in {files[trn_name][0]}")
  return lists


def _read_espnet_rank(path, files, rank, has_total, keys=None):
  """{utt: (Hypothesis, 'label:line')} of one rank, for `keys` (None: every one)."""
  prefix = f"raw_hypotheses/{rank}best_recog/"
  needed = ("text", "scores", "score") if has_total else ("text", "scores")
  parsers = {"text": text_files.keyed_text, "scores": _espnet_scores, "score": _espnet_score}
  parsed = {}
  for kind in needed:
    if prefix + kind not in files:
      raise ValueError(f"{path}: missing {prefix + kind} (other ranks have it)")
    parsed[kind] = text_files.parse_keyed(*files[prefix + kind], parsers[kind], keys)
  for kind in needed[1:]:
    text_files.check_same_keys(
      parsed["text"], files[prefix + "text"][0], parsed[kind], files[prefix + kind][0]
    )
  out = {}
  for key, (text, where) in parsed["text"].items():
    scores = dict(parsed["scores"][key][0])
    if has_total:
      scores["score"] = parsed["score"][key][0]
    out[key] = (types.Hypothesis(text=text, scores=scores), where)
  return out


_ESPNET_OUTPUT_RE = re.compile(r"raw_hypotheses/[1-9][0-9]*best_recog/(text|score|scores)")


def _read_espnet(path, refs_path=None, data_dir=None, select=None):
  if refs_path is not None:
    raise ValueError(f"{refs_path}: the espnet layout holds its references (ref_wer.trn)")
  return read_espnet_nbest(path, data_dir, select), {}


def _write_espnet(lists, source_path, out_path, feature_names):
  del source_path, feature_names  # every score but "score" is a field of `scores`
  names = [n for n in text_files.score_names(lists, out_path) if n != "score"]
  if not set(_REQUIRED_SCORES) <= set(names):
    raise ValueError(f"{out_path}: the espnet layout needs the scores {list(_REQUIRED_SCORES)}")
  has_total = any("score" in h.scores for n in lists for h in n.hyps)
  files, trn = {}, []
  for nbest in lists:
    if len(nbest.refs) != 1:
      raise ValueError(f"{out_path}: the espnet layout needs one reference, {nbest.key!r} has not")
    key = text_files.check_key(nbest.key)
    trn.append(f"{text_files.check_text(nbest.refs[0], 'reference')}\t({key})")
    for rank, hyp in enumerate(nbest.hyps, 1):
      prefix = f"raw_hypotheses/{rank}best_recog/"
      files.setdefault(prefix + "text", []).append(
        f"{key} {text_files.check_text(hyp.text, 'hypothesis')}"
      )
      scores = json.dumps({name: hyp.scores[name] for name in names})
      files.setdefault(prefix + "scores", []).append(f"{key} {scores}")
      if has_total:
        files.setdefault(prefix + "score", []).append(f"{key} {hyp.scores['score']!r}")
  files["references/ref_wer.trn"] = trn
  text_files.write_files(
    out_path,
    {rel: text_files.lines_text(l) for rel, l in files.items()},
    lambda rel: rel == "references/ref_wer.trn" or _ESPNET_OUTPUT_RE.fullmatch(rel) is not None,
  )


def _export_espnet(lists, out_dir):
  _write_espnet(lists, None, os.path.join(out_dir, "set"), ())
  return {}


formats.register(
  "espnet",
  formats.Format(
    read=_read_espnet,
    write=_write_espnet,
    path="a set of the shared data (.tar.xz, unpacked dir, or set name)",
    refs="none (references/ref_wer.trn is part of the layout)",
    options="none",
    scores=f"'decoder', 'ctc', 'lm', 'score' ({formats.SCORE_NOTE})",
    features="a field of the `scores` JSON, in an unpacked directory",
    directory=True,
    refs_in_file=True,
    export=formats.Export(_export_espnet, "set"),
  ),
)

"""ESPnet2 decode directories ("espnet2")."""

import os
import re

from nbest import formats
from nbest import text_files
from nbest import types

_RANK_DIR_RE = re.compile(r"([1-9][0-9]{0,8})best_recog")
_JOB_DIR_RE = re.compile(r"output\.([1-9][0-9]{0,8})")
_SCORE_SUFFIX = ".score"


def _numbered_dirs(parent, pattern):
  """[(number, path)] of the subdirectories of `parent` whose names match `pattern`, sorted."""
  if not os.path.isdir(parent):
    return []
  found = []
  for name in os.listdir(parent):
    match = pattern.fullmatch(name)
    if match and os.path.isdir(os.path.join(parent, name)):
      found.append((int(match.group(1)), os.path.join(parent, name)))
  return sorted(found)


def _espnet2_roots(path):
  """The directories holding `<N>best_recog/`: each job's `logdir/output.<J>/`, else `path`."""
  jobs = _numbered_dirs(os.path.join(path, "logdir"), _JOB_DIR_RE)
  roots = [job for _, job in jobs if _numbered_dirs(job, _RANK_DIR_RE)] or [path]
  if not _numbered_dirs(roots[0], _RANK_DIR_RE):
    raise ValueError(
      f"{path}: no <N>best_recog/ directories in {path}/logdir/output.<J>/ nor in {path}/ "
      "(asr.sh merges only the 1-best into the decode dir itself)"
    )
  return roots


def _espnet2_value(name):
  def parse(rest, where):
    return text_files.parse_tensor_float(rest.strip(), where, name)

  return parse


def _read_espnet2_rank(directory):
  """Returns ({utt: (Hypothesis, where)}, sorted score names) of one `<N>best_recog/`."""
  text_path = os.path.join(directory, "text")
  if not os.path.isfile(text_path):
    raise ValueError(f"{directory}: no text file (ESPnet writes it when the model has a tokenizer)")
  texts = text_files.parse_keyed(text_path, text_files.read_text(text_path), text_files.keyed_text)
  files = {"score": "score"} if os.path.isfile(os.path.join(directory, "score")) else {}
  for name in sorted(os.listdir(directory)):
    if name.endswith(_SCORE_SUFFIX):
      files[text_files.check_name(name[: -len(_SCORE_SUFFIX)], directory)] = name
  scores = {key: {} for key in texts}
  for name, file_name in files.items():
    file_path = os.path.join(directory, file_name)
    parsed = text_files.parse_keyed(
      file_path, text_files.read_text(file_path), _espnet2_value(name)
    )
    text_files.check_same_keys(texts, text_path, parsed, file_path)
    for key, (value, _) in parsed.items():
      scores[key][name] = value
  hyps = {
    key: (types.Hypothesis(text=text, scores=scores[key]), where)
    for key, (text, where) in texts.items()
  }
  return hyps, sorted(files)


def read_espnet2(path, refs_path=None):
  """Reads the N-best lists of an ESPnet2 decode directory, in key order (as asr.sh sorts).

  Sources: espnet2/bin/asr_inference.py writes `<output_dir>/<n>best_recog/{text,score,...}`,
  `<utt> <value>` lines, the score `str(hyp.score)` (`tensor(-12.3)`), the beam's weighted sum
  of decoder, CTC, LM and length bonus, read as "score"; the parts are not written.
  egs2/TEMPLATE/asr1/asr.sh runs it per job into `logdir/output.<J>/` and merges only
  `1best_recog`, so the lists are merged from every job (an utterance in two is an error), or
  read from `path/<n>best_recog/` itself. `write_espnet2`'s `<name>.score` files are score `name`.
  """
  ranks, names = [], None
  roots = _espnet2_roots(path)
  for root in roots:
    rank_dirs = _numbered_dirs(root, _RANK_DIR_RE)
    if [rank for rank, _ in rank_dirs] != list(range(1, len(rank_dirs) + 1)):
      raise ValueError(f"{root}: ranks must be 1..R without gaps, found {rank_dirs}")
    for rank, directory in rank_dirs:
      hyps, dir_names = _read_espnet2_rank(directory)
      if names is not None and dir_names != names[0]:
        raise ValueError(f"{directory}: score files {dir_names}, but {names[1]} has {names[0]}")
      names = names or (dir_names, directory)
      ranks.extend({} for _ in range(rank - len(ranks)))
      for key, (hyp, where) in hyps.items():
        if key in ranks[rank - 1]:
          raise ValueError(f"{where}: {key!r} was also decoded in {ranks[rank - 1][key][1]}")
        ranks[rank - 1][key] = (hyp, where)
  wheres = {}
  for by_key in ranks:
    for key, (_, where) in by_key.items():
      wheres.setdefault(key, where)
  if not wheres:
    raise ValueError(f"{os.path.join(roots[0], '1best_recog', 'text')}:1: no hypotheses")
  lists = [types.NBestList(key, [], text_files.collect_ranks(ranks, key)) for key in sorted(wheres)]
  return text_files.attach_keyed_refs(lists, wheres, refs_path)


def write_espnet2(lists, source_path, out_path, feature_names):
  """Writes `<out_path>/<n>best_recog/{text,score,<name>.score}` in key order; no `token` files
  (the lists do not carry the model's units)."""
  del source_path, feature_names  # every score is a keyed file of the same form
  names = text_files.score_names(lists, out_path)
  for name in names:
    text_files.check_name(name, out_path)
  files = {}
  for nbest in sorted(lists, key=lambda n: n.key):
    key = text_files.check_key(nbest.key)
    for rank, hyp in enumerate(nbest.hyps, 1):
      prefix = f"{rank}best_recog/"
      text = text_files.check_text(hyp.text, "hypothesis")
      files.setdefault(prefix + "text", []).append(f"{key} {text}")
      for name in names:
        file_name = name if name == "score" else name + _SCORE_SUFFIX
        files.setdefault(prefix + file_name, []).append(f"{key} {hyp.scores[name]!r}")
  text_files.write_files(
    out_path,
    {rel: text_files.lines_text(l) for rel, l in files.items()},
    _espnet2_output,
  )


def _espnet2_output(rel):
  """Whether `rel` is a file `write_espnet2` writes (what it may replace)."""
  parts = rel.split("/")
  return (
    len(parts) == 2
    and _RANK_DIR_RE.fullmatch(parts[0]) is not None
    and (parts[1] in ("text", "score") or parts[1].endswith(_SCORE_SUFFIX))
  )


def _export_espnet2(lists, out_dir):
  """The decode dir's `<n>best_recog/` of `write_espnet2` and data/<set>/text."""
  write_espnet2(lists, None, os.path.join(out_dir, "decode_test"), ())
  text_files.write_refs(lists, os.path.join(out_dir, "data", "text"))
  return {}


formats.register(
  "espnet2",
  formats.Format(
    read=read_espnet2,
    write=write_espnet2,
    path="the decode dir (its logdir/output.<J>/<n>best_recog/), or a dir of <n>best_recog/",
    refs="data/<set>/text (`<utt> <words>`)",
    options="none",
    scores=f"'score', the beam search's total ({formats.SCORE_NOTE})",
    features="a keyed file `<n>best_recog/<name>.score` beside `score`",
    directory=True,
    export=formats.Export(_export_espnet2, "decode_test", "data/text"),
  ),
)

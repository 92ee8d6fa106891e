"""N-best lists of the ASR toolkits: Kaldi, ESPnet2 decode directories, NeMo beam files.

Each format has a reader `read_<format>(path, refs_path=None, **options)` returning
(lists, wheres) and a writer `write_<format>(lists, source_path, out_path, feature_names)`;
evaluation/nbest_formats.py dispatches to them (`read_nbest`, `write_rescored`) and documents the
contract. Scores come out in natural log, higher is better (a Kaldi cost is -ln p, so its score is
-cost); the rules of each file, and where they come from, are in each reader's docstring.
"""

import json
import os
import re

from evaluation import nbest_files
from evaluation import nbest_io
from util import io_utils

_KALDI_KEY_RE = re.compile(r"(.+)-([1-9][0-9]{0,8})", re.DOTALL)
_RANK_DIR_RE = re.compile(r"([1-9][0-9]{0,8})best_recog")
_JOB_DIR_RE = re.compile(r"output\.([1-9][0-9]{0,8})")
_COST_SUFFIX = ".cost"
_SCORE_SUFFIX = ".score"


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
    lists.append(nbest_io.NBestList(utt, [], [ranks[r][0] for r in sorted(ranks)]))
  if not lists:
    raise ValueError(f"{label}:1: no hypotheses")
  return lists, wheres


def _attach_keyed_refs(lists, wheres, refs_path):
  if refs_path is not None:
    nbest_files.attach_refs(lists, wheres, nbest_files.read_keyed_refs(refs_path), refs_path)
  return lists, wheres


# ---------------------------------------------------------------------------------------------
# Kaldi: lattice-to-nbest | nbest-to-linear.


def _kaldi_cost(rest, where):
  return nbest_io._parse_number(rest.strip(), where, "cost")


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
    nbest_files.check_name(name, cost_path, "cost")
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
      cost archive or the reverse, a non-number cost, references not matching; `file:line`.
  """
  text_path, cost_paths = _kaldi_paths(path, costs)
  texts = nbest_io._parse_espnet_keyed(
    text_path, nbest_files.read_text(text_path), nbest_io._espnet_text
  )
  scores = {key: {} for key in texts}
  for name, cost_path in cost_paths.items():
    parsed = nbest_io._parse_espnet_keyed(cost_path, nbest_files.read_text(cost_path), _kaldi_cost)
    nbest_io._check_same_keys(texts, text_path, parsed, cost_path)
    for key, (cost, _) in parsed.items():
      scores[key][name] = -cost  # a cost is -ln p
  items = []
  for key, (text, where) in texts.items():
    match = _KALDI_KEY_RE.fullmatch(key)
    if not match:
      raise ValueError(f"{where}: expected a key '<utt>-<n>' with n = 1, 2, ..., found {key!r}")
    hyp = nbest_io.Hypothesis(text=text, scores=scores[key])
    items.append((match.group(1), int(match.group(2)), hyp, where))
  lists, wheres = _group_ranks(items, text_path)
  return _attach_keyed_refs(lists, wheres, refs_path)


def write_kaldi(lists, source_path, out_path, feature_names):
  """Writes the directory `read_kaldi` reads: `text`, and `<name>.cost` (cost = -score) for every
  score of the lists, the new features included; the references are not written (they live in
  the data dir's `text`)."""
  del source_path, feature_names  # every score, old and new, is a cost archive of the same form
  names = nbest_files.score_names(lists, out_path)
  for name in names:
    nbest_files.check_name(name, out_path)
  text, costs = [], {name: [] for name in names}
  for nbest in lists:
    for rank, hyp in enumerate(nbest.hyps, 1):
      key = f"{nbest_files.check_key(nbest.key)}-{rank}"
      text.append(f"{key} {nbest_files.check_text(hyp.text, 'hypothesis')}")
      for name in names:
        costs[name].append(f"{key} {-hyp.scores[name]!r}")
  files = {"text": nbest_files.lines_text(text)}
  files.update({name + _COST_SUFFIX: nbest_files.lines_text(c) for name, c in costs.items()})
  nbest_files.write_files(out_path, files, lambda rel: rel == "text" or rel.endswith(_COST_SUFFIX))


# ---------------------------------------------------------------------------------------------
# ESPnet2 decode directories.


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
    return nbest_io._parse_espnet_float(rest.strip(), where, name)

  return parse


def _read_espnet2_rank(directory):
  """Returns ({utt: (Hypothesis, where)}, sorted score names) of one `<N>best_recog/`."""
  text_path = os.path.join(directory, "text")
  if not os.path.isfile(text_path):
    raise ValueError(f"{directory}: no text file (ESPnet writes it when the model has a tokenizer)")
  texts = nbest_io._parse_espnet_keyed(
    text_path, nbest_files.read_text(text_path), nbest_io._espnet_text
  )
  files = {"score": "score"} if os.path.isfile(os.path.join(directory, "score")) else {}
  for name in sorted(os.listdir(directory)):
    if name.endswith(_SCORE_SUFFIX):
      files[nbest_files.check_name(name[: -len(_SCORE_SUFFIX)], directory)] = name
  scores = {key: {} for key in texts}
  for name, file_name in files.items():
    file_path = os.path.join(directory, file_name)
    parsed = nbest_io._parse_espnet_keyed(
      file_path, nbest_files.read_text(file_path), _espnet2_value(name)
    )
    nbest_io._check_same_keys(texts, text_path, parsed, file_path)
    for key, (value, _) in parsed.items():
      scores[key][name] = value
  hyps = {
    key: (nbest_io.Hypothesis(text=text, scores=scores[key]), where)
    for key, (text, where) in texts.items()
  }
  return hyps, sorted(files)


def read_espnet2(path, refs_path=None):
  """Reads the N-best lists of an ESPnet2 decode directory.

  Layout and sources:
  - espnet2/bin/asr_inference.py writes, for n = 1..nbest, `<output_dir>/<n>best_recog/` with
    `token`, `token_int`, `score` and (when the model has a tokenizer) `text`, one
    `<utt> <value>` line per utterance (espnet2/fileio/datadir_writer.py); the score is
    `str(hyp.score)`, e.g. `tensor(-12.3)`: the beam search's weighted sum of the decoder,
    CTC, LM and length-bonus scores, natural log, higher is better, read as "score";
  - egs2/TEMPLATE/asr1/asr.sh runs it per job with `--output_dir <decode_dir>/logdir/output.JOB`
    and merges only `1best_recog` into the decode dir, so the N-best lists are read from every
    `logdir/output.<J>/<n>best_recog/`, merged over J (an utterance decoded by two jobs is an
    error); a directory holding `<n>best_recog/` itself (inference run by hand, or what
    `write_espnet2` writes) is read the same way;
  - the per-component scores are not written by ESPnet: absent here. Files `<name>.score` beside
    `score` (what `write_espnet2` adds for rescoring features) are read as score `name`.

  Args:
    path: str, the decode directory.
    refs_path: str or None, the references `data/<set>/text` (`<utt> <words>`).

  Returns:
    (list[NBestList], dict[str, str]): lists in key order (as asr.sh sorts its merged files),
    hypotheses in rank order (an utterance may have fewer than nbest); utt -> 'file:line'.

  Raises:
    ValueError: no `<n>best_recog/`, a missing `text`, a malformed line, keys of `text` and
      `score` that differ, a rank gap, an utterance in two jobs, rank directories with different
      score files, references not matching; `file:line`.
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
  lists = [
    nbest_io.NBestList(key, [], nbest_io._collect_ranks(ranks, key)) for key in sorted(wheres)
  ]
  return _attach_keyed_refs(lists, wheres, refs_path)


def write_espnet2(lists, source_path, out_path, feature_names):
  """Writes `<out_path>/<n>best_recog/{text,score,<name>.score}`, the layout `read_espnet2`
  reads: "score" in ESPnet's own file, every other score (the new features) in `<name>.score`;
  lines in key order. ESPnet's `token`/`token_int` are not written (they hold the model's units,
  which the lists do not carry)."""
  del source_path, feature_names  # every score is a keyed file of the same form
  names = nbest_files.score_names(lists, out_path)
  for name in names:
    nbest_files.check_name(name, out_path)
  files = {}
  for nbest in sorted(lists, key=lambda n: n.key):
    key = nbest_files.check_key(nbest.key)
    for rank, hyp in enumerate(nbest.hyps, 1):
      prefix = f"{rank}best_recog/"
      text = nbest_files.check_text(hyp.text, "hypothesis")
      files.setdefault(prefix + "text", []).append(f"{key} {text}")
      for name in names:
        file_name = name if name == "score" else name + _SCORE_SUFFIX
        files.setdefault(prefix + file_name, []).append(f"{key} {hyp.scores[name]!r}")
  nbest_files.write_files(
    out_path,
    {rel: nbest_files.lines_text(l) for rel, l in files.items()},
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


# ---------------------------------------------------------------------------------------------
# NeMo beam files.


def _read_manifest(path):
  """[(key, refs, where)] of a NeMo manifest; key = the audio file's name without extension."""
  entries, seen = [], {}
  for lineno, line in enumerate(nbest_files.read_lines(path), 1):
    where = f"{path}:{lineno}"
    try:
      item = json.loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer of over 4300 digits
      item = None
    audio = item.get("audio_filepath") if isinstance(item, dict) else None
    if not isinstance(audio, str) or not audio.strip():
      raise ValueError(f"{where}: expected a JSON object with an 'audio_filepath', found {line!r}")
    key = os.path.splitext(os.path.basename(audio.strip()))[0]
    if not key:
      raise ValueError(f"{where}: audio_filepath {audio!r} has no file name to key the utterance")
    if key in seen:
      raise ValueError(f"{where}: key {key!r} (the audio file's name) also at {seen[key]}")
    seen[key] = where
    refs = []
    if "text" in item:
      if not isinstance(item["text"], str):
        raise ValueError(f"{where}: 'text' is not a string: {item['text']!r}")
      refs = [nbest_io._check_reference(item["text"], where)]
    if entries and bool(refs) != bool(entries[0][1]):
      raise ValueError(f"{where}: 'text' in some entries only (references go with all or none)")
    entries.append((key, refs, where))
  if not entries:
    raise ValueError(f"{path}:1: no utterances")
  return entries


# The beam width in the name eval_beamsearch_ngram gives its file:
# preds_out_width{beam_width}_alpha{alpha}_beta{beta}.tsv.
_NEMO_WIDTH_RE = re.compile(r"(?:^|_)width(\d+)(?:_|\.|$)")


def _nemo_beam(path, n_rows, beam_size, entries):
  """The number of rows per utterance: `beam_size`, else the width in NeMo's file name; checked
  against the rows and the manifest.

  The file has no keys, and NeMo writes one row per candidate its decoder returned, so a beam
  that is not full makes the file shorter; rows are only split into beams of a known width that
  fill the file exactly, never by dividing the rows by the manifest's utterances.
  """
  if beam_size is not None and (isinstance(beam_size, bool) or not isinstance(beam_size, int)):
    raise ValueError(f"beam_size must be a positive integer, found {beam_size!r}")
  if beam_size is not None and beam_size < 1:
    raise ValueError(f"beam_size must be a positive integer, found {beam_size!r}")
  source = "beam_size"
  if beam_size is None:
    match = _NEMO_WIDTH_RE.search(os.path.basename(path))
    if match is None or int(match.group(1)) < 1:
      raise ValueError(
        f"{path}: nemo needs the beam width to split its rows into utterances: NeMo's file name "
        "carries it (preds_out_width<W>_alpha<A>_beta<B>.tsv), else give "
        "--format_option=beam_size=W"
      )
    beam_size, source = int(match.group(1)), "the width in the file name"
  utterances = len(entries) if entries is not None else None
  if n_rows % beam_size or (utterances is not None and n_rows != beam_size * utterances):
    expected = "a multiple of" if utterances is None else f"{utterances} utterances x"
    raise ValueError(
      f"{path}:{n_rows}: {n_rows} rows, not {expected} {source} {beam_size}"
      + (f" = {beam_size * utterances}" if utterances is not None else "")
      + ": NeMo writes fewer rows when a beam is not full, and a file without keys cannot be "
      "split then (decode with full beams, or convert the lists to the json format with keys)"
    )
  return beam_size


def _nemo_row(line, where, columns):
  fields = line.split("\t")
  if len(fields) != len(columns) + 1:
    raise ValueError(
      f"{where}: expected {len(columns) + 1} tab-separated fields (text, {', '.join(columns)}), "
      f"found {len(fields)}: {line!r}"
    )
  scores = {
    name: nbest_io._parse_number(value, where, name) for name, value in zip(columns, fields[1:])
  }
  return nbest_io.Hypothesis(text=fields[0].strip(), scores=scores)


def read_nemo(path, refs_path=None, beam_size=None, columns=("score",)):
  """Reads a NeMo beam file: `<text><TAB><score>` rows, beam_size rows per utterance.

  Sources: scripts/asr_language_modeling/ngram_lm/eval_beamsearch_ngram(_ctc).py writes, for each
  utterance of the manifest in manifest order, its beam's candidates best first as
  `'{}\\t{}\\n'.format(text, score)`; scripts/asr_language_modeling/neural_rescorer/
  eval_neural_rescorer.py reads that file back with `--beam_size` and `--eval_manifest`, takes
  row i as a candidate of utterance i // beam_size, treats the score as a natural-log score
  where higher is better (`am + alpha * lm + beta * len`, best = max) and writes its output in
  the same two-column form; the score is the beam's (scripts/asr_language_modeling/ngram_lm/
  decoders/decoder_utils.cpp get_beam_search_result: each prefix's fused log-prob score, the
  candidates sorted by it, highest first). The manifest is JSON lines with `audio_filepath` and
  `text` (the eval script's `--input_manifest`).

  Args:
    path: str, the beam file.
    refs_path: str or None, the manifest (JSON lines): the keys (each `audio_filepath`'s file
      name without extension) and, where every entry has `text`, the references.
    beam_size: int or None, rows per utterance; at least one of it and the manifest.
    columns: sequence of str, the names of the score columns after the text: ("score",) for
      NeMo's own files; ("score", "tta") for what `write_nemo` writes with a feature "tta".

  Returns:
    (list[NBestList], dict[str, str]): lists in manifest order (keys "0", "1", ... without a
    manifest); key -> 'file:line'.

  Raises:
    ValueError: a row without its columns, a non-number score, rows that are not a multiple of
      the beam size or do not match the manifest, a malformed manifest line; `file:line`.
  """
  columns = [nbest_files.check_name(c, "columns", "column") for c in columns]
  if not columns or len(set(columns)) != len(columns):
    raise ValueError(f"columns must be distinct score names, found {columns}")
  rows = [
    _nemo_row(line, f"{path}:{n}", columns)
    for n, line in enumerate(nbest_files.read_lines(path), 1)
  ]
  if not rows:
    raise ValueError(f"{path}:1: no rows")
  entries = _read_manifest(refs_path) if refs_path is not None else None
  beam = _nemo_beam(path, len(rows), beam_size, entries)
  entries = entries or [(str(i), [], None) for i in range(len(rows) // beam)]
  lists, wheres = [], {}
  for i, (key, refs, _) in enumerate(entries):
    lists.append(nbest_io.NBestList(key, refs, rows[i * beam : (i + 1) * beam]))
    wheres[key] = f"{path}:{i * beam + 1}"
  return lists, wheres


def write_nemo(lists, source_path, out_path, feature_names, kept=None):
  """Writes the rows of the beam file `source_path` of the lists (those at `kept`, else all)
  with one column per new feature appended to each row (read it back with
  `columns=("score", *feature_names)`)."""
  lines = nbest_files.read_lines(source_path)
  # read_nemo splits the rows into beams of one width; list i holds rows i*W .. (i+1)*W - 1.
  width = max(len(lists[0].hyps), 1) if lists else 1
  if (
    any(len(nbest.hyps) != width for nbest in lists)
    or len(lines) % width
    or (kept is None and len(lines) != width * len(lists))
  ):
    hyps = sum(len(nbest.hyps) for nbest in lists)
    raise ValueError(
      f"{source_path}: {len(lines)} rows, but the lists have {hyps} hypotheses"
      + (f" in beams of {width}" if kept is not None else "")
      + " (not read from this file)"
    )
  out = []
  for i, nbest in zip(nbest_files.kept_indices(len(lines) // width, kept, source_path), lists):
    for lineno, hyp in enumerate(nbest.hyps, i * width + 1):
      line = lines[lineno - 1]
      if line.split("\t", 1)[0].strip() != hyp.text:
        raise ValueError(
          f"{source_path}:{lineno}: row {line!r} is not the hypothesis {hyp.text!r} of the "
          "lists (they were not read from this file)"
        )
      out.append(line + "".join(f"\t{hyp.scores[name]!r}" for name in feature_names))
  io_utils.write_atomically(out_path, nbest_files.lines_text(out))

"""NeMo's beam files ("nemo"): eval_beamsearch_ngram's beams TSV and its manifest."""

import json
import os
import re

from nbest import formats
from nbest import text_files
from nbest import types
from util import io_utils


def _read_manifest(path):
  """[(key, refs, where)] of a NeMo manifest; key = the audio file's name without extension."""
  entries, seen = [], {}
  for lineno, line in enumerate(text_files.read_lines(path), 1):
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
      refs = [text_files.check_reference(item["text"], where)]
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
  """Rows per utterance: `beam_size`, else the width in NeMo's file name, checked against the
  rows and the manifest. Never the rows over the manifest's utterances: NeMo writes only the
  candidates its decoder returned, so a beam that is not full makes the file shorter.
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
    name: text_files.parse_number(value, where, name) for name, value in zip(columns, fields[1:])
  }
  return types.Hypothesis(text=fields[0].strip(), scores=scores)


def read_nemo(path, refs_path=None, beam_size=None, columns=("score",)):
  """Reads a NeMo beam file: `<text><TAB><score>` rows, `beam_size` rows per utterance.

  Sources (scripts/asr_language_modeling/): ngram_lm/eval_beamsearch_ngram(_ctc).py writes each
  manifest utterance's candidates best first as `'{}\\t{}\\n'.format(text, score)`, the score the
  beam's fused log-prob (ngram_lm/decoders/decoder_utils.cpp); neural_rescorer/
  eval_neural_rescorer.py reads row i as utterance i // beam_size, higher is better.

  Args:
    refs_path: the manifest (JSON lines): keys from `audio_filepath`'s file name without
      extension, references from `text` where every entry has one.
    beam_size: rows per utterance; this or the manifest is needed.
    columns: names of the score columns after the text, ("score", *features) for `write_nemo`'s.
  """
  columns = [text_files.check_name(c, "columns", "column") for c in columns]
  if not columns or len(set(columns)) != len(columns):
    raise ValueError(f"columns must be distinct score names, found {columns}")
  rows = [
    _nemo_row(line, f"{path}:{n}", columns) for n, line in enumerate(text_files.read_lines(path), 1)
  ]
  if not rows:
    raise ValueError(f"{path}:1: no rows")
  entries = _read_manifest(refs_path) if refs_path is not None else None
  beam = _nemo_beam(path, len(rows), beam_size, entries)
  entries = entries or [(str(i), [], None) for i in range(len(rows) // beam)]
  lists, wheres = [], {}
  for i, (key, refs, _) in enumerate(entries):
    lists.append(types.NBestList(key, refs, rows[i * beam : (i + 1) * beam]))
    wheres[key] = f"{path}:{i * beam + 1}"
  return lists, wheres


def write_nemo(lists, source_path, out_path, feature_names, kept=None):
  """Writes the source's rows of the lists with a column per feature appended to each row."""
  lines = text_files.read_lines(source_path)
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
  for i, nbest in zip(text_files.kept_indices(len(lines) // width, kept, source_path), lists):
    for lineno, hyp in enumerate(nbest.hyps, i * width + 1):
      line = lines[lineno - 1]
      if line.split("\t", 1)[0].strip() != hyp.text:
        raise ValueError(
          f"{source_path}:{lineno}: row {line!r} is not the hypothesis {hyp.text!r} of the "
          "lists (they were not read from this file)"
        )
      out.append(line + "".join(f"\t{hyp.scores[name]!r}" for name in feature_names))
  io_utils.write_atomically(out_path, text_files.lines_text(out))


def export_nemo(lists, out_dir):
  """The beams file eval_beamsearch_ngram writes, `text<TAB>score` rows, named with its width as
  NeMo names it, and a manifest whose audio files are named by the keys (with the references)."""
  text_files.required_score(lists, "score", "nemo")
  width = text_files.beam_width(
    lists, "NeMo's beams file has no keys, so every beam must be full (or use another format)"
  )
  rows = [
    f"{text_files.check_text(hyp.text, 'hypothesis')}\t{hyp.scores['score']!r}"
    for nbest in lists
    for hyp in nbest.hyps
  ]
  for row in rows:
    if row.count("\t") != 1:
      raise ValueError(f"cannot write the nemo row {row!r}: a tab inside the text")
  manifest = []
  for nbest in lists:
    if "/" in text_files.check_key(nbest.key) or len(nbest.refs) > 1:
      raise ValueError(f"nemo: list {nbest.key!r} has a '/' in its key or several references")
    entry = {"audio_filepath": f"{nbest.key}.flac"}
    entry.update({"text": nbest.refs[0]} if nbest.refs else {})
    manifest.append(json.dumps(entry, ensure_ascii=False))
  io_utils.write_atomically(
    os.path.join(out_dir, f"preds_out_width{width}.tsv"), text_files.lines_text(rows)
  )
  io_utils.write_atomically(os.path.join(out_dir, "manifest.json"), text_files.lines_text(manifest))
  return {}


formats.register(
  "nemo",
  formats.Format(
    read=read_nemo,
    write=write_nemo,
    path="the beams TSV of eval_beamsearch_ngram (`text<TAB>score`)",
    refs="the manifest (JSON lines, audio_filepath and text): keys, references",
    options="beam_size=int, columns=('score', ...)",
    scores=f"'score' (and the `columns` named) ({formats.SCORE_NOTE})",
    features="a new last column (read back with columns=('score', ..., name))",
    export=formats.Export(export_nemo, "preds_out_width{width}.tsv", "manifest.json"),
  ),
)

"""N-best lists in the formats ASR and MT toolkits write: one entry point to read, and writers.

  lists = nbest_formats.read_nbest("kaldi", "exp/nbest", refs_path="data/test/text")
  nbest_formats.write_rescored("kaldi", lists, "exp/nbest", "exp/rescored", {"tta": values})
  nbest_formats.write_kaldi_text(lists, choice, "exp/rescored/1best.text")
  nbest_formats.write_trn(lists, choice, "exp/rescored/hyp.trn")

The contract (what every format's reader gives, whatever the file):
  - list[NBestList] (evaluation/nbest_io.py): one per utterance or segment, `key` a string,
    `hyps` in the file's rank order (rank 1 first), `refs` the references, or [] when the file
    and `refs_path` give none (a blind test set). Either every list has references or none.
  - each Hypothesis' `scores` are named first-pass scores in natural log, higher is better,
    converted once in the reader: a cost c (-ln p: Kaldi) becomes -c; base 2 (fairseq, unless
    its log_base option says e) is multiplied by ln 2. Which names a format gives is in
    `FORMATS[fmt].scores`; every hypothesis of a file has the same names. What a file cannot
    give is absent (ESPnet2 writes no per-component scores; Kaldi no total).
  - bad input raises ValueError whose message starts with `file:line:` (cli.user_input turns it
    into one line and exit status 2): a malformed line, a hypothesis missing from a cost or
    score file, rows that do not fill the beams, a missing H- line, references that do not match
    the lists one to one. A file cut short is refused: its last line must end with a newline.

Formats (`FORMATS`; the rules of each file and their sources are in its reader's docstring):
  kaldi    evaluation/nbest_asr_formats.py read_kaldi    `<utt>-<n> words` + cost archives
  espnet2  evaluation/nbest_asr_formats.py read_espnet2  an ESPnet2 decode dir
  nemo     evaluation/nbest_asr_formats.py read_nemo     eval_beamsearch_ngram's beams TSV
  fairseq  evaluation/nbest_mt_formats.py read_fairseq   fairseq-generate --nbest output
  moses    evaluation/nbest_mt_formats.py read_moses     Moses / Marian n-best lists
  espnet   evaluation/nbest_io.py read_espnet_nbest      the shared LibriSpeech data's layout
  json     evaluation/nbest_io.py read_json_nbest        mlm-scoring's N-best JSON
  tsv      evaluation/nbest_io.py read_tsv_nbest         this repo's plain TSV
"""

import dataclasses
import inspect
import json
import numbers
import re
from typing import Callable

from evaluation import nbest_asr_formats
from evaluation import nbest_files
from evaluation import nbest_io
from evaluation import nbest_mt_formats
from util import io_utils


@dataclasses.dataclass(frozen=True)
class Format:
  """One N-best format.

  Attributes:
    read: (path, refs_path=None, **options) -> (list[NBestList], {key: 'file:line'}).
    write: (lists with the features as scores, source_path, out_path, feature names) -> None;
      a writer of a line-based format also takes `kept` (see `write_rescored`) and the reader's
      options it needs.
    path: str, what `path` (and `out_path`) is.
    refs: str, what `refs_path` is.
    options: str, the format options of `read_nbest`.
    scores: str, the score names the reader gives.
    features: str, how `write_rescored` writes a feature.
  """

  read: Callable
  write: Callable
  path: str
  refs: str
  options: str
  scores: str
  features: str


# ---------------------------------------------------------------------------------------------
# Today's formats (evaluation/nbest_io.py), behind the same contract.


_ESPNET_OUTPUT_RE = re.compile(r"raw_hypotheses/[1-9][0-9]*best_recog/(text|score|scores)")
_JSON_KEY_RE = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*:')


def _first_lines(path, keys):
  """{key: 'file:line'} of the first line that starts with each key: a TSV row `key<TAB>...`
  or a JSON member `"key": ...`."""
  wanted, found = set(keys), {}
  for lineno, line in enumerate(nbest_io._split_lines(nbest_io._read_text_file(path)), 1):
    candidates = [line.split("\t", 1)[0]]
    match = _JSON_KEY_RE.match(line)
    if match:
      try:
        candidates.append(json.loads(match.group(1)))
      except ValueError:
        pass  # not a JSON string after all: the TSV candidate stays
    for key in candidates:
      if key in wanted:
        found.setdefault(key, f"{path}:{lineno}")
  return {key: found.get(key, f"{path}:1") for key in keys}


def _with_refs_file(reader):
  """A reader of lists that may carry references; `refs_path` adds them to a blind set."""

  def read(path, refs_path=None):
    lists = reader(path)
    wheres = _first_lines(path, [n.key for n in lists]) if refs_path is not None else {}
    if refs_path is not None:
      if lists[0].refs:
        raise ValueError(f"{wheres[lists[0].key]}: the lists have references already")
      refs = nbest_files.read_keyed_refs(refs_path)
      nbest_files.attach_refs(lists, wheres, refs, refs_path)
    return lists, wheres

  return read


def _read_espnet(path, refs_path=None):
  if refs_path is not None:
    raise ValueError(f"{refs_path}: the espnet layout holds its references (ref_wer.trn)")
  return nbest_io.read_espnet_nbest(path), {}


def _write_json(lists, source_path, out_path, feature_names):
  """mlm-scoring's JSON with each feature as a field of each hypothesis."""
  del source_path, feature_names  # every score is a field
  names = nbest_files.score_names(lists, out_path)
  if "score" not in names:
    raise ValueError(f"{out_path}: the json format needs a 'score' per hypothesis")
  data = {}
  for nbest in lists:
    if len(nbest.refs) > 1:
      raise ValueError(f"{out_path}: the json format holds one reference, {nbest.key!r} has more")
    entry = {"ref": nbest.refs[0]} if nbest.refs else {}
    for rank, hyp in enumerate(nbest.hyps, 1):
      entry[f"hyp_{rank}"] = {"text": hyp.text, **hyp.scores}
    data[nbest.key] = entry
  io_utils.write_atomically(out_path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def _write_tsv(lists, source_path, out_path, feature_names):
  """The TSV with one more score column per feature."""
  del source_path, feature_names  # every score is a column
  nbest_io.write_tsv_nbest(lists, out_path, score_names=nbest_files.score_names(lists, out_path))


def _write_espnet(lists, source_path, out_path, feature_names):
  """The shared data's layout, unpacked: each feature a field of the `scores` JSON."""
  del source_path, feature_names  # every score but "score" is a field of `scores`
  names = [n for n in nbest_files.score_names(lists, out_path) if n != "score"]
  if not set(nbest_io.AM_WEIGHTS) <= set(names):
    raise ValueError(
      f"{out_path}: the espnet layout needs the scores {sorted(nbest_io.AM_WEIGHTS)}"
    )
  has_total = any("score" in h.scores for n in lists for h in n.hyps)
  files, trn = {}, []
  for nbest in lists:
    if len(nbest.refs) != 1:
      raise ValueError(f"{out_path}: the espnet layout needs one reference, {nbest.key!r} has not")
    key = nbest_files.check_key(nbest.key)
    trn.append(f"{nbest_files.check_text(nbest.refs[0], 'reference')}\t({key})")
    for rank, hyp in enumerate(nbest.hyps, 1):
      prefix = f"raw_hypotheses/{rank}best_recog/"
      files.setdefault(prefix + "text", []).append(
        f"{key} {nbest_files.check_text(hyp.text, 'hypothesis')}"
      )
      scores = json.dumps({name: hyp.scores[name] for name in names})
      files.setdefault(prefix + "scores", []).append(f"{key} {scores}")
      if has_total:
        files.setdefault(prefix + "score", []).append(f"{key} {hyp.scores['score']!r}")
  files["references/ref_wer.trn"] = trn
  nbest_files.write_files(
    out_path,
    {rel: nbest_files.lines_text(l) for rel, l in files.items()},
    lambda rel: rel == "references/ref_wer.trn" or _ESPNET_OUTPUT_RE.fullmatch(rel) is not None,
  )


_SCORE_NOTE = "natural log, higher is better"

FORMATS = {
  "kaldi": Format(
    read=nbest_asr_formats.read_kaldi,
    write=nbest_asr_formats.write_kaldi,
    path="the transcriptions `<utt>-<n> words` (int2sym'd nbest-to-linear output), or a "
    "directory of `text` and `<name>.cost` archives",
    refs="a Kaldi text file `<utt> <words>` (data/<set>/text)",
    options="costs={name: cost archive}",
    scores=f"one per cost archive, -cost ({_SCORE_NOTE})",
    features="a cost archive `<name>.cost` (`<utt>-<n> <-value>`) in the output directory",
  ),
  "espnet2": Format(
    read=nbest_asr_formats.read_espnet2,
    write=nbest_asr_formats.write_espnet2,
    path="the decode dir (its logdir/output.<J>/<n>best_recog/), or a dir of <n>best_recog/",
    refs="data/<set>/text (`<utt> <words>`)",
    options="none",
    scores=f"'score', the beam search's total ({_SCORE_NOTE})",
    features="a keyed file `<n>best_recog/<name>.score` beside `score`",
  ),
  "nemo": Format(
    read=nbest_asr_formats.read_nemo,
    write=nbest_asr_formats.write_nemo,
    path="the beams TSV of eval_beamsearch_ngram (`text<TAB>score`)",
    refs="the manifest (JSON lines, audio_filepath and text): keys, references",
    options="beam_size=int, columns=('score', ...)",
    scores=f"'score' (and the `columns` named) ({_SCORE_NOTE})",
    features="a new last column (read back with columns=('score', ..., name))",
  ),
  "fairseq": Format(
    read=nbest_mt_formats.read_fairseq,
    write=nbest_mt_formats.write_fairseq,
    path="fairseq-generate's output",
    refs="line-aligned reference file(s), line i + 1 for id i (default: the T- lines)",
    options="detok=bool, nbest=int, log_base=2|e (default 2; e: fairseq before 2020-01-13)",
    scores=f"'score' (H-, length-normalised), 'logprob' (sum of P-) ({_SCORE_NOTE})",
    features="a line `F-<id><TAB><name><TAB><value in log_base>` after the hypothesis' lines",
  ),
  "moses": Format(
    read=nbest_mt_formats.read_moses,
    write=nbest_mt_formats.write_moses,
    path="a Moses or Marian n-best list",
    refs="line-aligned reference file(s), line i + 1 for segment i",
    options="nbest=int",
    scores="each labelled feature as written, and the total as 'score'",
    features="`NAME= value` appended to the feature field (the total unchanged)",
  ),
  "espnet": Format(
    read=_read_espnet,
    write=_write_espnet,
    path="a set of the shared data (.tar.xz, unpacked dir, or set name)",
    refs="none (references/ref_wer.trn is part of the layout)",
    options="none",
    scores=f"'decoder', 'ctc', 'lm', 'score' ({_SCORE_NOTE})",
    features="a field of the `scores` JSON, in an unpacked directory",
  ),
  "json": Format(
    read=_with_refs_file(nbest_io.read_json_nbest),
    write=_write_json,
    path="mlm-scoring's N-best JSON",
    refs="a Kaldi text file, for a file without 'ref' fields",
    options="none",
    scores="'score' and every other number field, as written",
    features="a field of each hypothesis",
  ),
  "tsv": Format(
    read=_with_refs_file(nbest_io.read_tsv_nbest),
    write=_write_tsv,
    path="the TSV of nbest_io.read_tsv_nbest",
    refs="a Kaldi text file, for a file without ref rows",
    options="none",
    scores="the header's score columns, as written",
    features="a new score column",
  ),
}


def _format(fmt):
  if fmt not in FORMATS:
    raise ValueError(f"unknown N-best format {fmt!r}; one of {', '.join(FORMATS)}")
  return FORMATS[fmt]


def read_nbest(fmt, path, refs_path=None, **format_options):
  """Reads N-best lists in a toolkit's format (the contract is in this module's docstring).

  Args:
    fmt: str, a key of FORMATS.
    path: str, the input (`FORMATS[fmt].path`).
    refs_path: str or None, the references (`FORMATS[fmt].refs`); None: only what the file has.
    **format_options: the format's options (`FORMATS[fmt].options`).

  Returns:
    list[NBestList].

  Raises:
    ValueError: an unknown format, or bad input; the message names `file:line`.
  """
  reader = _format(fmt).read
  accepted = [n for n in inspect.signature(reader).parameters if n not in ("path", "refs_path")]
  unknown = sorted(set(format_options) - set(accepted))
  if unknown:
    raise ValueError(
      f"--format_option {unknown[0]}: not an option of the {fmt} format; it takes "
      f"{', '.join(accepted) or 'none'}"
    )
  lists, _ = reader(path, refs_path=refs_path, **format_options)
  return lists


def write_rescored(fmt, lists, source_path, out_path, features, kept=None, **format_options):
  """Writes the lists in their input format with each feature added as a named score.

  Reading `out_path` back with the same format (and options; nemo: `columns` naming the new
  columns) gives the lists with the features among their scores (fairseq's up to rounding).
  Written atomically: a failure leaves no partial output.

  Args:
    fmt: str, a key of FORMATS: the format the lists were read in.
    lists: list[NBestList], as `read_nbest(fmt, source_path, ...)` returned them (same order),
      or the ones of them at `kept`.
    source_path: str, the file they were read from: the line-based formats (nemo, fairseq,
      moses) copy its lines of `lists` and add to them; the others write from the lists.
    out_path: str, the output file, or directory (kaldi, espnet2, espnet: replaced as a whole).
    features: dict[str, list[list[float]]], name -> values [len(lists)][len(hyps)], natural log,
      higher is better (a writer converts them as its format needs: `FORMATS[fmt].features`).
    kept: increasing ints or None, the indices of `lists` among the lists read (None: all).
    **format_options: the options the lists were read with; a writer takes those it needs.

  Raises:
    ValueError: a bad or already used feature name, values not aligned with the lists, lists
      that do not come from `source_path`, lists the format cannot hold.
  """
  keys = [n.key for n in lists]
  if len(set(keys)) != len(keys):
    raise ValueError(f"{out_path}: the lists repeat a key")
  if kept is not None:
    kept = list(kept)
    if len(kept) != len(lists) or any(
      isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0 for i in kept
    ):
      raise ValueError(f"kept: {len(lists)} indices of the lists read expected, found {kept}")
    if any(a >= b for a, b in zip(kept, kept[1:])):
      raise ValueError(f"kept: indices must increase (the lists in their source's order): {kept}")
  rescored = nbest_files.add_features(lists, features)
  write = _format(fmt).write
  # The writers of whole lists need neither the cut nor the reader's options.
  taken = inspect.signature(write).parameters
  options = {k: v for k, v in dict(format_options, kept=kept).items() if k in taken}
  write(rescored, source_path, out_path, list(features), **options)


def _chosen(lists, choice):
  if len(choice) != len(lists):
    raise ValueError(f"choice has {len(choice)} entries for {len(lists)} lists")
  for nbest, index in zip(lists, choice):
    valid = isinstance(index, numbers.Integral) and not isinstance(index, bool)
    if not valid or not 0 <= index < len(nbest.hyps):
      raise ValueError(f"choice {index!r} is not a hypothesis of {nbest.key!r}")
    yield nbest_files.check_key(nbest.key), nbest_files.check_text(nbest.hyps[index].text, "text")


def write_kaldi_text(lists, choice, path):
  """Writes the chosen hypotheses as a Kaldi `text` file (`<utt> <words>`), atomically.

  Args:
    lists: list[NBestList].
    choice: sequence of int, the index (0-based) of the chosen hypothesis of each list.
    path: str, the output file.
  """
  lines = [f"{key} {text}".rstrip(" ") for key, text in _chosen(lists, choice)]
  io_utils.write_atomically(path, nbest_files.lines_text(lines))


def write_trn(lists, choice, path):
  """Writes the chosen hypotheses as an sclite trn file (`<words> (<utt>)`), atomically.

  Args: as `write_kaldi_text`.
  """
  lines = []
  for key, text in _chosen(lists, choice):
    if "(" in key or ")" in key:
      raise ValueError(f"cannot write the key {key!r} to a trn file: parentheses")
    lines.append(f"{text} ({key})".lstrip(" "))
  io_utils.write_atomically(path, nbest_files.lines_text(lines))

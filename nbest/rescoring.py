"""Rescoring your own N-best files: read a set in any format (nbest/formats), tune or load the
combination's weights (nbest/combination.py), and write each set's rescored lists, 1-best (Kaldi
`text`, sclite `hyp.trn`) and metrics (when it has references)."""

import dataclasses
import json
import math
import os

from evaluation import metrics
from nbest import combination
from nbest import formats
from nbest import text_files
from nbest import tuning
from util import io_utils

# Formats whose rescored output is a directory (write_rescored replaces it as a whole).
_DIRECTORY_FORMATS = ("kaldi", "espnet2", "espnet")
# Formats that read several line-aligned reference files themselves.
_ALIGNED_REFS = ("fairseq", "moses", "sockeye")


def parse_option(text):
  """A `--format_option` KEY=VALUE: VALUE as JSON when it parses (4, true, {"a": "f"}), else
  the string; ValueError for text without '='."""
  key, sep, value = text.partition("=")
  if not sep or not key:
    raise ValueError(f"--format_option={text!r}: expected KEY=VALUE")
  try:
    parsed = json.loads(value)
  except ValueError:
    parsed = value
  if key == "columns" and isinstance(parsed, list):
    parsed = tuple(parsed)
  return key, parsed


def read_set(fmt, path, refs_paths, options):
  """Lists of one set: `refs_paths` (list of str, maybe empty) are its reference files; several
  give several references per segment (line-aligned for the formats of _ALIGNED_REFS, else keyed
  Kaldi text files, each with every key)."""
  if fmt in _ALIGNED_REFS and refs_paths:
    return formats.read_nbest(fmt, path, refs_path=list(refs_paths), **options)
  lists = formats.read_nbest(fmt, path, refs_paths[0] if refs_paths else None, **options)
  for extra in refs_paths[1:]:
    refs = text_files.read_keyed_refs(extra)
    for lst in lists:
      if lst.key not in refs:
        raise ValueError(f"{extra}:1: no reference for {lst.key!r}")
      lst.refs.append(refs[lst.key][0][0])
    keys = {lst.key for lst in lists}
    for key, (_, where) in refs.items():
      if key not in keys:
        raise ValueError(f"{where}: reference for {key!r}, which has no hypotheses")
  return lists


def initial_weights(lists, lm_names, first_pass):
  """The combination's weights before tuning: the LMs at 0, no length bonus.

  Args:
    lists: list[NBestList].
    lm_names: list[str].
    first_pass: list of 'NAME' or 'NAME:WEIGHT' (weight 1 if left out), or empty: the column
      'score' if the lists have it, else every column at weight 1.

  Raises:
    ValueError: a malformed entry.
  """
  if not first_pass:
    names = sorted(lists[0].hyps[0].scores) if lists and lists[0].hyps else []
    first_pass = ["score"] if "score" in names else names
  weights = {}
  for entry in first_pass:
    name, sep, value = entry.partition(":")
    try:
      weights[name] = float(value) if sep else 1.0
    except ValueError:
      weights[name] = math.nan
    if not name or not math.isfinite(weights[name]):
      raise ValueError(f"--first_pass={entry!r}: expected NAME or NAME:WEIGHT (a finite number)")
  return combination.Weights(weights, {m: 0.0 for m in lm_names})


def tune(dev_lists, dev_tables, weights, metric, negative_lms=False):
  """Weights tuned on dev: the λ grid, then Powell from its best (LM weights >= 0 unless
  `negative_lms`).

  Returns:
    (Weights, dict): the weights and how they were found (JSON-able).
  """
  objective = tuning.Objective(dev_lists, metric)
  first = objective.value(combination.choose(dev_tables, weights.vector()))
  start, start_value = tuning.grid_start(objective, dev_tables, weights)
  tuned, value = tuning.optimise(objective, dev_tables, start, negative_lms=negative_lms)
  info = {
    "metric": metric,
    "dev_lists": len(dev_lists),
    "negative_lm_weights_allowed": negative_lms,
    "dev_first_pass": first,
    "grid_start": {"weights": start.to_dict(), "dev": start_value},
    "dev": value,
    "toolkit_weights": tuned.toolkit_weights(),
  }
  return tuned, info


def set_metrics(lists, choice, metric, cer):
  """The set's metrics of `choice`, or None without references."""
  if not lists or not lists[0].refs:
    return None
  if metric == "wer":
    return metrics.wer_report(lists, choice, cer)
  return metrics.mt_report(lists, choice)


def write_outputs(
  fmt, lists, source_path, out_dir, features, choice, refs_from_files, kept=None, options=None
):
  """Writes the rescored lists (input format, each LM a feature), `text` and `hyp.trn` into
  `out_dir`; returns {what: path}. With `refs_from_files` the references came from files of
  their own, and the rescored lists are written without them, as their source was. `kept` and
  `options` are `formats.write_rescored`'s (the lists' indices in the file, the reader's
  options)."""
  os.makedirs(out_dir, exist_ok=True)
  if refs_from_files:
    lists = [dataclasses.replace(lst, refs=[]) for lst in lists]
  name = "nbest" if fmt in _DIRECTORY_FORMATS else os.path.basename(source_path.rstrip("/"))
  paths = {
    "rescored": os.path.join(out_dir, name),
    "text": os.path.join(out_dir, "text"),
    "trn": os.path.join(out_dir, "hyp.trn"),
  }
  formats.write_rescored(
    fmt, lists, source_path, paths["rescored"], features, kept, **(options or {})
  )
  formats.write_kaldi_text(lists, choice, paths["text"])
  formats.write_trn(lists, choice, paths["trn"])
  return paths


def write_report(path, report):
  io_utils.write_atomically(path, json.dumps(report, indent=2) + "\n")

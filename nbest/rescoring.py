"""Rescoring your own N-best files: tune or load the combination's weights, then write each set's
rescored lists, 1-best (Kaldi `text`, sclite `hyp.trn`) and metrics."""

import dataclasses
import json
import math
import os

from evaluation import metrics
from nbest import combination
from nbest import formats
from nbest import tuning
from util import io_utils


def parse_option(text):
  """(key, value) of a `--format_option` KEY=VALUE, the value as JSON where it parses."""
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


def lm_table(lists, scores, sentence_score="sum"):
  """[list][hyp] LM sentence scores: the token log-probs' sum or mean (`sentence_score`)."""

  def value(text):
    total, count = scores[text][:2]
    return total / max(count, 1) if sentence_score == "mean" else total

  return [[value(h.text) for h in lst.hyps] for lst in lists]


def initial_weights(lists, lm_names, first_pass):
  """The weights before tuning, LMs and length at 0; `first_pass` ['NAME[:WEIGHT]'] (weight 1),
  empty: 'score' if the lists have it, else every column."""
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
  """(Weights, how they were found) tuned on dev: the λ grid, then Powell from its best."""
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
  """Writes the rescored lists (each LM a feature), `text` and `hyp.trn` into `out_dir`; returns
  {what: path}. References read from files of their own are not written into the lists."""
  io_utils.makedirs(out_dir)
  if refs_from_files:
    lists = [dataclasses.replace(lst, refs=[]) for lst in lists]
  paths = {
    what: os.path.join(out_dir, name) for what, name in output_names(fmt, source_path).items()
  }
  formats.write_rescored(
    fmt, lists, source_path, paths["rescored"], features, kept, **(options or {})
  )
  formats.write_kaldi_text(lists, choice, paths["text"])
  formats.write_trn(lists, choice, paths["trn"])
  return paths


def output_names(fmt, source_path):
  """{what: file name} of the outputs `write_outputs` writes into a set's folder for the lists at
  `source_path` (the rescored lists a folder of their own in a directory format)."""
  name = "nbest" if formats.FORMATS[fmt].directory else os.path.basename(source_path.rstrip("/"))
  return {"rescored": name, "text": "text", "trn": "hyp.trn"}


def output_files(fmt, source_path):
  """The files (names, globs) `write_outputs` writes into a set's folder (runs.Record)."""
  names = output_names(fmt, source_path)
  files = [names["text"], names["trn"], names["rescored"]]
  if formats.FORMATS[fmt].directory:
    files[-1] += "/*"  # the format's writer replaces its folder whole (text_files.write_files)
  return files


def write_report(path, report):
  io_utils.write_atomically(path, json.dumps(report, indent=2) + "\n")


def check_tuning_input(sets, names, weights_file, first_pass, dev_file):
  """Before any scoring, ValueError naming the file or flag unless the weights can be had (from
  `weights_file`, matching the LMs and --first_pass, or tuned on a dev set with references) and
  fit every hypothesis of every set."""
  if weights_file:
    weights = combination.load_weights(weights_file)
    if set(weights.lms) != set(names):
      raise ValueError(
        f"{weights_file}:1: weights for the LMs {sorted(weights.lms)}, but --model_dir names "
        f"{sorted(names)}"
      )
    asked = [entry.partition(":")[0] for entry in first_pass]
    if asked and set(asked) != set(weights.first_pass):
      raise ValueError(
        f"--first_pass names {sorted(asked)}, but {weights_file} weighs the first-pass "
        f"columns {sorted(weights.first_pass)} (leave --first_pass out to use the file's)"
      )
  else:
    if not sets["dev"][0].refs:
      raise ValueError(f"{dev_file}:1: no references to tune the weights on (--dev_refs)")
    weights = initial_weights(sets["dev"], names, first_pass)
  clash = sorted(set(names) & {*weights.first_pass, combination.LENGTH})
  if clash:
    raise ValueError(f"--model_dir: the LM name {clash[0]!r} is a first-pass column's; rename it")
  for set_name, lists in sets.items():
    for lst in lists:
      for hyp in lst.hyps:
        missing = sorted(set(weights.first_pass) - set(hyp.scores))
        if missing:
          source = weights_file or "--first_pass"
          hint = "; a comma in a name is written \\," if any("," in n for n in hyp.scores) else ""
          raise ValueError(
            f"{source}: the first-pass column {missing[0]!r} is not in the {set_name} lists "
            f"(list {lst.key!r} has {sorted(hyp.scores)}{hint})"
          )


@dataclasses.dataclass(frozen=True)
class OwnFiles:
  """What `rescore_own_files` writes and how it weighs: run_rescoring.py's flags of the same
  names (nbest/rescoring_job.py's `own_files` makes it)."""

  output_dir: str  # <set>/ with each set's outputs, weights.json, rescoring_report.json
  format: str  # the lists' format (nbest/formats/), which their outputs keep
  format_options: dict  # the format reader's and writer's options (--format_option)
  sources: dict  # {"dev"/"test": (the lists' file or dir, [reference files])}
  sentence_score: str = "sum"  # "sum" or "mean" of an LM's token log-probs
  cer: bool = False  # the character error rate too
  weights_file: str | None = None  # weights applied as they are; None: tuned on dev
  first_pass: tuple = ()  # 'NAME[:WEIGHT]' first-pass columns (`initial_weights`)
  allow_negative_weights: bool = False  # the dev search may give an LM a negative weight


def combination_weights(own, sets, lm_tables, metric):
  """The combination's weights of `own` (`OwnFiles`): its weights_file's, or tuned on dev (saved
  as weights.json)."""
  if own.weights_file:
    weights = combination.load_weights(own.weights_file)
    return weights, {"weights_file": os.path.abspath(own.weights_file)}
  weights = initial_weights(sets["dev"], list(lm_tables["dev"]), own.first_pass)
  dev_tables = combination.tables(sets["dev"], weights, lm_tables["dev"])
  weights, info = tune(
    sets["dev"], dev_tables, weights, metric, negative_lms=own.allow_negative_weights
  )
  print(f"weights tuned on {len(sets['dev'])} dev lists")
  combination.save_weights(os.path.join(own.output_dir, "weights.json"), weights, info)
  return weights, info


def format_metrics(values):
  if values is None:
    return "no references"
  if "wer" in values:
    line = (
      f"WER {values['wer']:.2f} (S {values['substitutions']}, D {values['deletions']}, "
      f"I {values['insertions']}, {values['reference_words']} words)"
    )
    return line + (f" CER {values['cer']:.2f}" if "cer" in values else "")
  return (
    f"BLEU {values['bleu']:.2f} ({values['bleu_signature']}) "
    f"chrF {values['chrf']:.2f} ({values['chrf_signature']})"
  )


def rescore_own_files(own, sets, kept, lm_scores, metric, unmatched):
  """--test_file runs of `own` (`OwnFiles`): each set's outputs in <output_dir>/<set>/, and
  rescoring_report.json."""
  lm_tables = {
    n: {m: lm_table(l, s, own.sentence_score) for m, s in lm_scores.items()}
    for n, l in sets.items()
  }
  weights, info = combination_weights(own, sets, lm_tables, metric)
  report = {"weights": weights.to_dict(), "tuning": info, "sets": {}}
  for name, lists in sets.items():
    tables = combination.tables(lists, weights, lm_tables[name])
    choice = combination.choose(tables, weights.vector())
    first = combination.choose(tables, weights.first_pass_only().vector())
    out_dir = os.path.join(own.output_dir, name)
    source, refs = own.sources[name]
    paths = write_outputs(
      own.format,
      lists,
      source,
      out_dir,
      lm_tables[name],
      choice,
      bool(refs),
      kept[name],
      own.format_options,
    )
    entry = {
      "lists": len(lists),
      "references_without_hypotheses": unmatched[name],
      "outputs": paths,
      "first_pass": set_metrics(lists, first, metric, own.cer),
      "rescored": set_metrics(lists, choice, metric, own.cer),
      "oracle": metrics.oracle(lists, metric)[0] if lists[0].refs else None,
    }
    report["sets"][name] = entry
    print(f"{name}: first pass {format_metrics(entry['first_pass'])}")
    print(f"{name}: rescored {format_metrics(entry['rescored'])}")
  print(f"weights: {json.dumps(report['weights'])}")
  if weights.toolkit_weights():
    print(f"as NeMo/ESPnet weights: {json.dumps(weights.toolkit_weights())}")
  write_report(os.path.join(own.output_dir, "rescoring_report.json"), report)

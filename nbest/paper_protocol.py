"""The paper's reranking protocol (Tables 1, 2 and 7, docs/DESIGN.md §4.2): λ of (1-λ)·first pass
+ λ·LM chosen on dev, applied to test; one row per LM in <output_dir>/rescoring_results.json/.md."""

import dataclasses
import json
import os

from absl import logging

from evaluation import metrics
from evaluation import score_cache
from evaluation import significance
from lm import inference
from nbest import combination
from nbest import rescoring
from nbest import settings
from nbest import tuning
from util import cli
from util import io_utils


def perplexity(lists, scores):
  """(Pseudo-)perplexity of the LM on the references of `lists`."""
  refs = [r for lst in lists for r in lst.refs]
  return metrics.pppl_summary([scores[r][0] for r in refs], [scores[r][1] for r in refs])


def check_settings(sets, table_runs):
  """Before any scoring, ValueError unless each --settings first pass has the scores it combines
  ("am" needs decoder and ctc scores, which mlm-scoring JSON lacks)."""
  for dev, test, names in table_runs:
    for setting in names:
      for name in (dev, test):
        if setting and name:
          try:
            settings.first_pass_weights(setting, sets[name][0].hyps[0].scores)
          except ValueError as e:
            raise ValueError(f"--settings={setting}: {e}") from None


def wer_significance(test, first_choice, choice, bootstrap):
  """Per-utterance errors of the reranked choice (kept so that reproduce.py can pair two LMs run
  apart) and its paired bootstrap (resamples, seed) vs the first pass, None under 2 utterances."""
  first_errors, reference_words = metrics.utterance_errors(test, first_choice)
  errors, _ = metrics.utterance_errors(test, choice)
  comparison = None
  if len(test) >= 2:
    resamples, seed = bootstrap
    comparison = significance.compare_error_rates(
      errors, first_errors, reference_words, num_resamples=resamples, seed=seed
    )
  return {
    "errors": errors,
    "first_pass_errors": first_errors,
    "reference_words": reference_words,
    # WER points of the LM minus the first pass (negative: fewer errors), 95% CI, p.
    "vs_first_pass": comparison and dataclasses.asdict(comparison),
  }


def rerank_pair(
  dev, test, lm_dev, lm_test, setting, metric, bootstrap=(significance.DEFAULT_RESAMPLES, 0)
):
  """The result dict of λ tuned on dev (if any) and applied to test."""
  first_choice = combination.rerank(test, None, 0.0, setting)
  result = {
    "setting": setting,
    "first_pass": metrics.evaluate(test, first_choice, metric),
    "oracle": metrics.oracle(test, metric)[0],
  }
  if dev is None:  # no first-pass scores: LM-only selection
    lam, curve = 1.0, None
  else:
    sweep = tuning.sweep_lambda(dev, lm_dev, metric, setting, tuning.DEFAULT_GRID)
    lam, curve = sweep.best_lam, sweep.curve
    result["dev_first_pass"] = sweep.curve[0][1]
    result["dev_best"] = sweep.best_value
  result["lambda"] = lam
  result["dev_curve"] = curve
  choice = combination.rerank(test, lm_test, lam, setting)
  result["reranked"] = metrics.evaluate(test, choice, metric)
  if metric == "wer":
    result.update(wer_significance(test, first_choice, choice, bootstrap))
  return result


def format_comparison(comparison):
  """ "-0.42 [-0.80, -0.05], p 0.03" for a significance.Comparison dict; "-" for None."""
  if not comparison:
    return "-"
  c = comparison
  p = significance.format_p(c["p_value"])
  return f"{c['difference']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}], p {p}"


def markdown(rows, metric):
  lines = [
    "| LM | set | setting | λ (dev) | first pass | reranked | oracle | PPPL mean / median "
    "| reranked - first pass [95% CI], p |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for row in rows:
    for r in row["results"]:
      p = row["perplexity"][r["test"]]
      lines.append(
        f"| {row['lm']} | {r['test']} | {r['setting'] or 'LM only'} | {r['lambda']:.2f} | "
        f"{r['first_pass']:.2f} | {r['reranked']:.2f} | {r['oracle']:.2f} | "
        f"{p['mean']:.1f} / {p['median']:.1f} | {format_comparison(r.get('vs_first_pass'))} |"
      )
  better = "lower is better" if metric == "wer" else "higher is better"
  table = "\n".join(lines)
  for key, how in (("windowed", "read in sliding windows"), ("truncated", "truncated to fit")):
    long = [f"{row['lm']} {row[key]}" for row in rows if row.get(key)]
    if long:
      table += f"\n\nSentences longer than the LM takes, {how}: " + ", ".join(long)
  return f"{metric.upper()} ({better})\n\n{table}\n"


def merge_rows(earlier, rows, path):
  """`earlier` rows with this run's `rows`, each LM replacing its own rows only, so LMs run one at
  a time into one --output_dir add up to one table; cli.InputError for another evaluation's."""
  key = rows[0]["evaluation"] if rows else None
  for row in earlier:
    if row.get("evaluation") != key:
      raise cli.InputError(
        f"{path} holds results of another evaluation ({row.get('evaluation')}, this run: {key}); "
        "use another --output_dir or remove the file"
      )
  names = {row["lm"] for row in rows}
  return [row for row in earlier if row["lm"] not in names] + rows


def write_results(output_dir, rows, metric):
  """Merges `rows` into --output_dir's results under a lock (two runs finishing at once would
  lose rows); returns the merged rows."""
  path = os.path.join(output_dir, "rescoring_results.json")
  with io_utils.exclusive_lock(path):
    earlier = []
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        try:
          earlier = json.load(f)
        except json.JSONDecodeError as e:
          raise cli.InputError(f"{path}:{e.lineno}: not JSON ({e.msg}); remove it") from None
    rows = merge_rows(earlier, rows, path)
    io_utils.write_atomically(path, json.dumps(rows, indent=2))
    io_utils.write_atomically(
      os.path.join(output_dir, "rescoring_results.md"), markdown(rows, metric)
    )
  return rows


@dataclasses.dataclass(frozen=True)
class RowSettings:
  """What every LM's row of one run shares (`rescore_with`): run_rescoring.py's flags of the same
  names, made by nbest/rescoring_job.py's `row_settings`."""

  evaluation: dict  # what the rows of one rescoring_results.json share (the job's `evaluation_key`)
  scoring: str | None = None  # the LMs' scoring (--scoring); None: each kind's own
  sentence_score: str = "sum"  # "sum" or "mean" of an LM's token log-probs
  bootstrap: tuple = (
    significance.DEFAULT_RESAMPLES,
    0,
  )  # (resamples, seed) of the paired bootstrap


def rescore_with(row_settings, name, lm, lm_id, texts, scores, sets, table_runs, metric):
  """One LM's row under `row_settings` (`RowSettings`): its perplexities and reranking results on
  every pair and setting; `scores` are cached_scores' of `texts` (with their scoring time as
  "seconds")."""
  row = {
    "lm": name,
    # Short; cache/lm_scores.models.json says what it stands for (score_cache.ScoreCache.register).
    "lm_id": lm_id,
    "scoring": inference.scoring_of(lm, row_settings.scoring),
    "evaluation": row_settings.evaluation,
    "scoring_seconds": scores["seconds"],
    "truncated": sum(scores["texts"][t][2] for t in texts),
    # Sentences longer than the LM takes, read in sliding windows (--long_inputs=window).
    "windowed": sum(score_cache.windows_of(scores["texts"][t]) > 1 for t in texts),
    "results": [],
    "perplexity": {n: perplexity(l, scores["texts"]) for n, l in sets.items()},
  }
  for dev, test, names in table_runs:
    for setting in names:
      result = rerank_pair(
        sets.get(dev),
        sets[test],
        rescoring.lm_table(sets[dev], scores["texts"], row_settings.sentence_score)
        if dev
        else None,
        rescoring.lm_table(sets[test], scores["texts"], row_settings.sentence_score),
        setting,
        metric,
        row_settings.bootstrap,
      )
      result.update(dev=dev, test=test)
      logging.info(
        "%s %s %s: λ=%.2f %s %.2f -> %.2f (oracle %.2f)",
        name,
        test,
        setting or "LM only",
        result["lambda"],
        metric,
        result["first_pass"],
        result["reranked"],
        result["oracle"],
      )
      row["results"].append(result)
  return row

"""N-best reranking with any LM kind (paper Tables 1, 2 and 7), and of your own N-best files.

Your own files (--test_file, any format of evaluation/nbest_formats.py): the combination of
evaluation/combination.py (first-pass columns, several LMs, a length bonus) is tuned on
--dev_file (λ grid, then Powell) or loaded from --weights_file, and each set's rescored lists,
1-best (`text`, `hyp.trn`) and metrics go to --output_dir/<set>/ (README "Rescore your own
N-best lists"). json/tsv dev and test files with references also get the paper's table below.

The paper's tables: score = (1-λ)·s2s + λ·lm, with λ chosen on a dev set over 0, 0.05, ..., 1 and
applied to its test set. Reports WER (ASR) or BLEU (NMT) of the first pass,
after reranking, and of the oracle, the per-λ dev curve, and the
(pseudo-)perplexity of each LM on the references (mean and median over
sentences, paper Table 7). For WER, each result keeps the per-utterance errors of the
chosen hypotheses and a seeded paired bootstrap (evaluation/significance.py) of the LM vs the first
pass.

LM scores are cached per LM (score_cache.ScoreCache under --output_dir/cache), so a
re-run, a new setting or an interrupted run never recomputes a sentence.
Results merge by LM name into --output_dir/rescoring_results.json and .md, so
LMs run one at a time into one directory add up to one table. One at a time:
a run holds the cache's lock while it scores, and a second run into the same
--output_dir exits 2 naming the first (pid, host, start).

Examples:
  # LibriSpeech ESPnet2 30-best, both first-pass settings:
  python run_rescoring.py --model_dir=tta=runs/tta,kenlm:runs/lm.bin \
      --task=asr --output_dir=results/asr
  # WMT21 de-en candidates, LM-only selection:
  python run_rescoring.py --model_dir=runs/tta --task=nmt --output_dir=results/nmt
  # Your own lists (mlm-scoring JSON or TSV):
  python run_rescoring.py --model_dir=runs/tta --task=asr --format=json \
      --dev_file=dev.json --test_file=test.json --settings=full --output_dir=results/own
  # Kaldi lists, KenLM and T-TA, tuned on dev, then a blind test set with the saved weights:
  python run_rescoring.py --format=kaldi --model_dir=ngram=kenlm:lm.bin,tta=runs/tta \
      --dev_file=dev/nbest --dev_refs=data/dev/text --test_file=test/nbest --output_dir=out
  python run_rescoring.py --format=kaldi --model_dir=ngram=kenlm:lm.bin,tta=runs/tta \
      --test_file=eval/nbest --weights_file=out/weights.json --output_dir=out_eval
"""

import contextlib
import dataclasses
import json
import os
import time

from absl import flags
from absl import logging

from evaluation import combination
from evaluation import nbest
from evaluation import nbest_formats
from evaluation import nbest_io
from evaluation import rescore_files
from evaluation import score_cache
from evaluation import significance
from lm import inference
from lm import lm_flags
from util import cli
from util import io_utils

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (called from __main__ only: a module that imports this
  one, or a test, gets its functions without its flags)."""
  lm_flags.define_model_dir(several=True, required=True)
  # The name this command had for --model_dir before every command took --model_dir.
  flags.DEFINE_alias("lm", "model_dir")
  lm_flags.define_scoring_flags()
  lm_flags.define_long_input_flags()
  flags.DEFINE_enum(
    "task",
    "asr",
    ["asr", "nmt"],
    "asr: WER on ESPnet2 LibriSpeech (or --format files); nmt: BLEU on WMT21 de-en.",
  )
  flags.DEFINE_list(
    "pairs",
    ["dev_clean:test_clean", "dev_other:test_other"],
    "ASR dev:test set pairs (λ tuned on dev, applied to test).",
  )
  flags.register_validator(
    "pairs",
    lambda pairs: all(len(p.split(":")) == 2 and all(p.split(":")) for p in pairs),
    "expected DEV:TEST set pairs, e.g. dev_clean:test_clean",
  )
  flags.DEFINE_list(
    "settings",
    ["am", "full"],
    "ASR first-pass scores: am = "
    "0.6 decoder + 0.4 ctc (no LM); full = the beam score with "
    "the Transformer LM fused in (the paper's Seq2SeqASR).",
  )
  cli.register_choices("settings", [s for s in nbest.SETTINGS if s])
  flags.DEFINE_enum(
    "format",
    "espnet",
    list(nbest_formats.FORMATS),
    "N-best format of --dev_file/--test_file (evaluation/nbest_formats.py).",
  )
  flags.DEFINE_string("dev_file", None, "Dev N-best file or dir (with references: weights tuned).")
  flags.DEFINE_string("test_file", None, "Test N-best file or dir (references optional).")
  flags.DEFINE_list("dev_refs", [], "Reference file(s) of --dev_file (several: multi-reference).")
  flags.DEFINE_list("test_refs", [], "Reference file(s) of --test_file (none: a blind set).")
  flags.DEFINE_multi_string(
    "format_option", [], "KEY=VALUE option of the format's reader (VALUE as JSON if it parses)."
  )
  flags.DEFINE_string(
    "weights_file",
    None,
    "Combination weights to apply (the weights.json of an earlier run); no tuning on dev then.",
  )
  cli.define_escaped_list(
    "first_pass",
    [],
    "First-pass score columns NAME[:WEIGHT] of the combination, separated by commas; a comma in "
    "a NAME is written \\, (e.g. Moses' sparse feature pl_1,1: --first_pass='pl_1\\,1,LM0'). "
    "Default 'score' if the lists have it, else every column.",
  )
  flags.DEFINE_bool(
    "allow_negative_weights",
    False,
    "Let the search on dev give an LM a negative weight (by default LM weights stay >= 0: a "
    "negative one rewards what the LM finds unlikely, which a small dev set can favour by chance).",
  )
  flags.DEFINE_bool("cer", False, "Report the character error rate too (ASR files).")
  flags.DEFINE_enum(
    "sentence_score",
    "sum",
    ["sum", "mean"],
    "LM sentence score: sum of token log-probs, or their mean.",
  )
  io_utils.define_data_dir_flag()
  flags.DEFINE_string(
    "output_dir", None, "Results (rescoring_results.json, .md) and the score cache."
  )
  flags.DEFINE_integer(
    "max_lists",
    None,
    "Use only the first N lists of each set (quick runs). With --test_file, the rescored lists, "
    "1-best files and metrics then hold those lists only (a line-based file: their lines, in "
    "the input's order).",
    lower_bound=0,
  )
  flags.DEFINE_integer(
    "sample_lists",
    None,
    "Use a seeded random sample of N lists of each set (after --max_lists), the same for every "
    "LM and run: paired comparisons at a fraction of the cost. Outputs as for --max_lists.",
    lower_bound=0,
  )
  flags.DEFINE_integer("sample_seed", 0, "Seed of --sample_lists.")
  flags.DEFINE_integer(
    "chunk_size",
    500,
    "Sentences scored between cache writes; progress lines (rate, ETA) at most every 10 s.",
    lower_bound=1,
  )
  lm_flags.define_throughput_flags()
  flags.DEFINE_integer(
    "bootstrap_resamples",
    significance.DEFAULT_RESAMPLES,
    "Paired bootstrap resamples (over utterances) for each LM's WER vs the first pass.",
    lower_bound=1,
  )
  flags.DEFINE_integer("bootstrap_seed", 0, "Seed of the paired bootstrap resampler.")
  flags.register_multi_flags_validator(
    ["format", "dev_file", "test_file", "weights_file"], _check_file_flags
  )


_GRID = nbest.DEFAULT_GRID


def lm_table(lists, scores):
  """LM sentence scores aligned with each list's hypotheses."""

  def value(text):
    total, count = scores[text][:2]
    return total / max(count, 1) if FLAGS.sentence_score == "mean" else total

  return [[value(h.text) for h in lst.hyps] for lst in lists]


def perplexity(lists, scores):
  """(Pseudo-)perplexity of the LM on the references of `lists`."""
  refs = [r for lst in lists for r in lst.refs]
  return nbest.pppl_summary([scores[r][0] for r in refs], [scores[r][1] for r in refs])


def format_options():
  """{KEY: VALUE} of --format_option."""
  return dict(rescore_files.parse_option(o) for o in FLAGS.format_option)


def read_sets():
  """{set name: list of NBestList} and the (dev, test, settings) of the paper's table to run
  (none for --test_file sets without references, or rescored with --weights_file)."""
  if FLAGS.test_file is not None:
    options = format_options()
    sets = {}
    for name, path, refs in (
      ("dev", FLAGS.dev_file, FLAGS.dev_refs),
      ("test", FLAGS.test_file, FLAGS.test_refs),
    ):
      if path is not None:
        sets[name] = rescore_files.read_set(FLAGS.format, path, refs, options)
    table = (
      FLAGS.task == "asr"
      and FLAGS.format in ("json", "tsv")
      and "dev" in sets
      and not FLAGS.weights_file
      and all(lists[0].refs for lists in sets.values())
    )
    if not FLAGS.output_dir and not table:
      raise ValueError("--output_dir is needed: the rescored lists and 1-best files go there")
    names = [name for name, _ in lm_flags.named_specs(FLAGS.model_dir)]
    check_tuning_input(sets, names, FLAGS.weights_file, FLAGS.first_pass, FLAGS.dev_file)
    return sets, [("dev", "test", FLAGS.settings)] if table else []
  if FLAGS.task == "nmt":
    return {"wmt21": nbest_io.read_wmt_candidates(FLAGS.data_dir)}, [(None, "wmt21", [None])]
  pairs = [p.split(":") for p in FLAGS.pairs]
  names = sorted({n for p in pairs for n in p})
  # Only the lists of --max_lists / --sample_lists are parsed (read_lists cuts the others alike).
  select = nbest.list_selection(FLAGS.max_lists, FLAGS.sample_lists, FLAGS.sample_seed)
  sets = {n: nbest_io.read_espnet_nbest(n, FLAGS.data_dir, select) for n in names}
  return sets, [(dev, test, FLAGS.settings) for dev, test in pairs]


def check_settings(sets, runs):
  """Before any scoring, that each --settings first pass has the scores it combines ("am" needs
  decoder and ctc scores, which mlm-scoring JSON files lack); ValueError naming what is missing."""
  for dev, test, settings in runs:
    for setting in settings:
      for name in (dev, test):
        if setting and name:
          try:
            nbest.s2s_score(sets[name][0].hyps[0], setting)
          except ValueError as e:
            raise ValueError(f"--settings={setting}: {e}") from None


def wer_significance(test, first_choice, choice, bootstrap):
  """Per-utterance errors of the reranked choice and its paired bootstrap vs the first pass.

  The error lists are kept in the results so that reproduce.py can compare two LMs (run in
  separate invocations) on the same utterances. `bootstrap` is (resamples, seed). The
  comparison is None with fewer than 2 utterances (nothing to resample).
  """
  first_errors, reference_words = nbest.utterance_errors(test, first_choice)
  errors, _ = nbest.utterance_errors(test, choice)
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
  """Tunes λ on dev (if any), applies it to test; returns a result dict.

  For WER it adds `wer_significance` (`bootstrap` is its (resamples, seed)).
  """
  first_choice = nbest.rerank(test, None, 0.0, setting)
  result = {
    "setting": setting,
    "first_pass": nbest.evaluate(test, first_choice, metric),
    "oracle": nbest.oracle(test, metric)[0],
  }
  if dev is None:  # no first-pass scores: LM-only selection
    lam, curve = 1.0, None
  else:
    sweep = nbest.sweep_lambda(dev, lm_dev, metric, setting, _GRID)
    lam, curve = sweep.best_lam, sweep.curve
    result["dev_first_pass"] = sweep.curve[0][1]
    result["dev_best"] = sweep.best_value
  result["lambda"] = lam
  result["dev_curve"] = curve
  choice = nbest.rerank(test, lm_test, lam, setting)
  result["reranked"] = nbest.evaluate(test, choice, metric)
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
  long = [f"{row['lm']} {row['windowed']}" for row in rows if row.get("windowed")]
  if long:
    table += "\n\nSentences longer than the LM takes, read in sliding windows: " + ", ".join(long)
  return f"{metric.upper()} ({better})\n\n{table}\n"


def evaluation_key():
  """What the rows of one rescoring_results.json must share to sit in one table."""
  if FLAGS.task == "nmt":
    data = {"sets": ["wmt21"]}
  elif FLAGS.test_file is None:
    data = {"pairs": FLAGS.pairs}
  else:
    data = {
      "dev_file": os.path.abspath(FLAGS.dev_file),
      "test_file": os.path.abspath(FLAGS.test_file),
    }
  return dict(
    data,
    task=FLAGS.task,
    format=FLAGS.format,
    max_lists=FLAGS.max_lists,
    sample_lists=FLAGS.sample_lists,
    sample_seed=FLAGS.sample_seed if FLAGS.sample_lists else None,
  )


def merge_rows(earlier, rows, path):
  """`earlier` rows (of a results file) with this run's `rows`: a later run's LM replaces its own
  rows only, so LMs run one at a time into one --output_dir add up to one table.

  Raises:
    cli.InputError: the earlier rows are of another evaluation (task, sets, --max_lists).
  """
  key = rows[0]["evaluation"] if rows else None
  for row in earlier:
    if row.get("evaluation") != key:
      raise cli.InputError(
        f"{path} holds results of another evaluation ({row.get('evaluation')}, this run: {key}); "
        "use another --output_dir or remove the file"
      )
  names = {row["lm"] for row in rows}
  return [row for row in earlier if row["lm"] not in names] + rows


def write_results(rows, metric):
  """Merges `rows` into rescoring_results.json and .md of --output_dir (see merge_rows).

  Under a lock, so that two runs finishing at once cannot lose each other's rows; each file is
  replaced atomically. Returns the merged rows.
  """
  path = os.path.join(FLAGS.output_dir, "rescoring_results.json")
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
      os.path.join(FLAGS.output_dir, "rescoring_results.md"), markdown(rows, metric)
    )
  return rows


def rescore_with(name, lm, lm_id, texts, scores, sets, runs, metric):
  """One LM's row: its perplexities and reranking results on every pair and setting; `scores`
  are cached_scores' of `texts` (with their scoring time as "seconds")."""
  row = {
    "lm": name,
    # Short; cache/lm_scores.models.json says what it stands for (score_cache.ScoreCache.register).
    "lm_id": lm_id,
    "scoring": inference.scoring_of(lm, FLAGS.scoring),
    "evaluation": evaluation_key(),
    "scoring_seconds": scores["seconds"],
    "truncated": sum(scores["texts"][t][2] for t in texts),
    # Sentences longer than the LM takes, read in sliding windows (--long_inputs=window).
    "windowed": sum(score_cache.windows_of(scores["texts"][t]) > 1 for t in texts),
    "results": [],
    "perplexity": {n: perplexity(l, scores["texts"]) for n, l in sets.items()},
  }
  for dev, test, settings in runs:
    for setting in settings:
      result = rerank_pair(
        sets.get(dev),
        sets[test],
        lm_table(sets[dev], scores["texts"]) if dev else None,
        lm_table(sets[test], scores["texts"]),
        setting,
        metric,
        (FLAGS.bootstrap_resamples, FLAGS.bootstrap_seed),
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


def check_tuning_input(sets, names, weights_file, first_pass, dev_file):
  """Before any scoring: the combination's weights can be had and fit the lists and LMs.

  `weights_file` (--weights_file) names the LMs `names` (of --model_dir) and the `first_pass`
  columns (--first_pass), when given; or the dev set (read from `dev_file`) has references to tune
  on; every first-pass column is in every hypothesis of every set; no LM is named like a
  first-pass column.

  Raises:
    ValueError: naming the file or flag.
  """
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
    weights = rescore_files.initial_weights(sets["dev"], names, first_pass)
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


def combination_weights(sets, lm_tables, metric):
  """The combination's weights: --weights_file's, or tuned on dev (saved as weights.json)."""
  if FLAGS.weights_file:
    weights = combination.load_weights(FLAGS.weights_file)
    return weights, {"weights_file": os.path.abspath(FLAGS.weights_file)}
  weights = rescore_files.initial_weights(sets["dev"], list(lm_tables["dev"]), FLAGS.first_pass)
  dev_tables = combination.tables(sets["dev"], weights, lm_tables["dev"])
  weights, info = rescore_files.tune(
    sets["dev"], dev_tables, weights, metric, negative_lms=FLAGS.allow_negative_weights
  )
  print(f"weights tuned on {len(sets['dev'])} dev lists")
  combination.save_weights(os.path.join(FLAGS.output_dir, "weights.json"), weights, info)
  return weights, info


def format_metrics(values):
  """One line of a set's metrics (WER with S/D/I, or BLEU and chrF with their signatures)."""
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


def rescore_own_files(sets, kept, lm_scores, metric):
  """--test_file runs: the combination's weights, and for each set its rescored lists, 1-best
  files and metrics in --output_dir/<set>/, summed up in --output_dir/rescoring_report.json;
  `kept` gives each set's lists' indices in its file (read_lists)."""
  lm_tables = {n: {m: lm_table(l, s) for m, s in lm_scores.items()} for n, l in sets.items()}
  weights, info = combination_weights(sets, lm_tables, metric)
  report = {"weights": rescore_files.dataclass_dict(weights), "tuning": info, "sets": {}}
  sources = {"dev": (FLAGS.dev_file, FLAGS.dev_refs), "test": (FLAGS.test_file, FLAGS.test_refs)}
  for name, lists in sets.items():
    tables = combination.tables(lists, weights, lm_tables[name])
    choice = combination.choose(tables, weights.vector())
    first = combination.choose(tables, weights.first_pass_only().vector())
    out_dir = os.path.join(FLAGS.output_dir, name)
    source, refs = sources[name]
    paths = rescore_files.write_outputs(
      FLAGS.format,
      lists,
      source,
      out_dir,
      lm_tables[name],
      choice,
      bool(refs),
      kept[name],
      format_options(),
    )
    entry = {
      "lists": len(lists),
      "outputs": paths,
      "first_pass": rescore_files.metrics(lists, first, metric, FLAGS.cer),
      "rescored": rescore_files.metrics(lists, choice, metric, FLAGS.cer),
      "oracle": nbest.oracle(lists, metric)[0] if lists[0].refs else None,
    }
    report["sets"][name] = entry
    print(f"{name}: first pass {format_metrics(entry['first_pass'])}")
    print(f"{name}: rescored {format_metrics(entry['rescored'])}")
  print(f"weights: {json.dumps(report['weights'])}")
  if weights.toolkit_weights():
    print(f"as NeMo/ESPnet weights: {json.dumps(weights.toolkit_weights())}")
  rescore_files.write_report(os.path.join(FLAGS.output_dir, "rescoring_report.json"), report)


def main(argv):
  del argv
  # What is cheap first: the LMs are there, before the lists are read; the lists are read and
  # checked before anything is written into --output_dir.
  with cli.user_input():
    if FLAGS.output_dir:
      io_utils.check_output_path(FLAGS.output_dir, "output_dir")
    for _, spec in lm_flags.named_specs(FLAGS.model_dir):
      inference.check_spec(spec)
  metric = "bleu" if FLAGS.task == "nmt" else "wer"
  sets, runs, kept = read_lists()
  with contextlib.ExitStack() as stack:
    cache = None
    if FLAGS.output_dir:
      # The cache has one writer: a second run into --output_dir exits 2 naming this one.
      path = os.path.join(FLAGS.output_dir, "cache", "lm_scores.jsonl")
      stack.enter_context(io_utils.exclusive_lock(path, wait=False))
      with cli.user_input():  # a damaged cache: one line, before any LM is loaded
        cache = score_cache.ScoreCache(path)
    rows, all_scores = rescore_all(cache, sets, runs, metric)
  if runs:
    print(markdown(rows, metric))
    if FLAGS.output_dir:
      write_results(rows, metric)
  if FLAGS.test_file is not None and FLAGS.output_dir:
    with cli.user_input():
      rescore_own_files(sets, kept, all_scores, metric)


def read_lists():
  """The sets ({name: [NBestList]}, cut by --max_lists / --sample_lists), the paper-protocol
  runs, checked, and {name: the indices of the set's lists among those read}."""
  with cli.user_input():
    sets, runs = read_sets()
    check_settings(sets, runs)
  select = nbest.list_selection(FLAGS.max_lists, FLAGS.sample_lists, FLAGS.sample_seed)
  kept = {name: [int(i) for i in select(len(lists))] for name, lists in sets.items()}
  sets = {name: [lists[i] for i in kept[name]] for name, lists in sets.items()}
  for name, lists in sets.items():
    logging.info("%s: %d lists, %d hypotheses", name, len(lists), sum(len(l.hyps) for l in lists))
  return sets, runs, kept


def rescore_all(cache, sets, runs, metric):
  """Scores the lists with each --model_dir LM: (the row of each LM with a paper-protocol run
  (`rescore_with`), {LM name: scores of the texts})."""
  texts = sorted(
    {
      t
      for lists in sets.values()
      for l in lists
      for t in [h.text for h in l.hyps] + (l.refs if runs else [])
    }
  )
  rows, all_scores = [], {}
  for name, spec in lm_flags.named_specs(FLAGS.model_dir):
    with cli.user_input():
      lm = inference.load_lm(spec, **lm_flags.load_options(FLAGS))
    identity = inference.describe(lm, FLAGS.scoring)
    lm_id = inference.model_id(identity)
    if cache is not None:
      cache.register(lm_id, identity)
    start = time.time()
    scores = {
      "texts": score_cache.cached_scores(
        lm, lm_id, texts, cache, name, FLAGS.chunk_size, FLAGS.scoring
      )
    }
    scores["seconds"] = time.time() - start
    all_scores[name] = scores["texts"]
    if runs:
      rows.append(rescore_with(name, lm, lm_id, texts, scores, sets, runs, metric))
  return rows, all_scores


def _check_file_flags(values):
  """--test_file (any format) needs --dev_file (to tune on) or --weights_file; --dev_file alone
  is refused."""
  if values["dev_file"] and not values["test_file"]:
    raise flags.ValidationError("--dev_file needs --test_file")
  if values["test_file"] and not (values["dev_file"] or values["weights_file"]):
    raise flags.ValidationError(
      f"--format={values['format']} needs --dev_file and --test_file (or --weights_file)"
    )
  return True


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""Every confidence interval the reports print, against an interval computed here independently.

Each test draws synthetic data, takes the interval from the code a report prints it with, and
computes another one here: a percentile bootstrap written in this file with its own resampling
(another generator and seed, more resamples), scipy.stats.bootstrap where the code resamples by
hand (SentEval's aggregates), an analytic interval where the sampling distribution is known
(Fisher's z for a bivariate normal), or the coverage of a known true value over many datasets.
The estimate must lie inside the interval and its ends must agree with the independent ones
within TOLERANCE of the independent width. The code's 1,000 resamples put each percentile within
about 0.09 standard deviations of the statistic of the exact bootstrap's, about 2 % of a 95 %
interval's width, so 10 % is four of those errors; and it tells the level apart: a normal
statistic's 90 % and 99 % intervals are 0.84 and 1.31 times as wide as its 95 % one.
"""

import re

import numpy as np
import pytest
from scipy import stats

from evaluation import comparisons
from evaluation import pair_similarity
from evaluation import significance
from evaluation import sts_job
from finetuning import mwer_report
from nbest import combination
from nbest import paper_protocol
from nbest import types

TOLERANCE = 0.1
# Resamples of the intervals under test (the reports' default is 1,000) and of those made here.
RESAMPLES = 4000
REFERENCE_RESAMPLES = 5000
# Printed cells round to 2 decimals.
PRINTED = 0.005
NUMBER = r"[-+]?\d+\.\d+"


def assert_interval(value, low, high, want, tolerance=TOLERANCE, rounding=0.0):
  """`value` lies in [low, high], whose ends are those of `want` (low, high) within `tolerance`
  of want's width (plus the `rounding` of printed numbers)."""
  want_low, want_high = want
  width = want_high - want_low
  assert width > 0
  assert low - rounding <= value <= high + rounding
  slack = tolerance * width + rounding
  assert abs((high - low) - width) <= slack, (low, high, want)
  assert abs(low - want_low) <= slack and abs(high - want_high) <= slack, (low, high, want)


def percentile_interval(draws, level):
  """The percentile interval of bootstrap `draws` float [R] at `level`."""
  tail = (1 - level) / 2
  low, high = np.quantile(draws, [tail, 1 - tail])
  return float(low), float(high)


def paired_bootstrap(statistic, samples, level=0.95, seed=2024):
  """Percentile interval of `statistic` over units resampled with replacement, every sample
  (float [n] each) on the same draw; `statistic` maps float [R, n] arrays to float [R]."""
  samples = [np.asarray(s, np.float64) for s in samples]
  rows = np.random.default_rng(seed).integers(
    0, len(samples[0]), (REFERENCE_RESAMPLES, len(samples[0]))
  )
  return percentile_interval(statistic(*(s[rows] for s in samples)), level)


def wer_difference(errors_a, errors_b, lengths):
  """Corpus WER x 100 of A minus B along the last axis."""
  return 100 * (errors_a.sum(-1) - errors_b.sum(-1)) / lengths.sum(-1)


def pearson(x, y):
  """Pearson r x 100 along the last axis: the mean product of z-scores."""

  def z(v):
    return (v - v.mean(-1, keepdims=True)) / v.std(-1, keepdims=True)

  return 100 * (z(x) * z(y)).mean(-1)


def spearman(x, y):
  return pearson(stats.rankdata(x, axis=-1), stats.rankdata(y, axis=-1))


def pearson_difference(a, b, gold):
  return pearson(a, gold) - pearson(b, gold)


def errors_of_two_systems(seed, units=300):
  """Word errors of two systems on `units` utterances of 5-24 words, B a little worse."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(5, 25, units)
  return rng.binomial(lengths, 0.12), rng.binomial(lengths, 0.15), lengths


def correlated(rng, units, rho):
  """`units` draws of a bivariate normal with correlation `rho`: (x float [n], y float [n])."""
  x, noise = rng.standard_normal((2, units))
  return x, rho * x + np.sqrt(1 - rho**2) * noise


def numbers(text):
  return [float(v) for v in re.findall(NUMBER, text)]


# ------------------------------------------------------------------------- WER differences


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_wer_difference_interval_is_the_paired_bootstrap_at_its_level(level):
  a, b, lengths = errors_of_two_systems(0)
  got = significance.compare_error_rates(
    a, b, lengths, num_resamples=RESAMPLES, confidence=level, seed=1
  )
  assert got.difference == pytest.approx(wer_difference(a, b, lengths))
  assert_interval(
    got.difference, got.low, got.high, paired_bootstrap(wer_difference, (a, b, lengths), level)
  )


def test_wer_difference_interval_covers_the_true_difference_95_times_in_100():
  """One-word utterances, A wrong with probability 0.3 and B with 0.2: the true difference is
  10 WER points. Over 200 datasets of 100 utterances a 95 % interval misses it 10 times on
  average (binomial sd 3); a 90 % interval would miss 20, a 99 % interval 2."""
  rng = np.random.default_rng(7)
  missed, widths = 0, []
  for seed in range(200):
    a, b = rng.random((2, 100)) < [[0.3], [0.2]]
    got = significance.compare_error_rates(a, b, np.ones(100), seed=seed)
    missed += not got.low <= 10.0 <= got.high
    widths.append(got.high - got.low)
  assert 4 <= missed <= 17
  # The normal interval of a difference of two independent proportions.
  analytic = 2 * 1.96 * 100 * np.sqrt((0.3 * 0.7 + 0.2 * 0.8) / 100)
  assert np.mean(widths) == pytest.approx(analytic, rel=TOLERANCE)


def _nbest_lists(errors_first, errors_chosen, lengths):
  """N-best lists whose hypothesis 0 makes `errors_first` substitutions and hypothesis 1
  `errors_chosen`, against a reference of `lengths` words."""

  def hypothesis(errors, length):
    return types.Hypothesis(" ".join(["x"] * errors + ["w"] * (length - errors)))

  return [
    types.NBestList(str(i), [" ".join(["w"] * n)], [hypothesis(f, n), hypothesis(c, n)])
    for i, (f, c, n) in enumerate(zip(errors_first, errors_chosen, lengths))
  ]


def test_rescoring_report_prints_the_interval_of_the_reranked_minus_the_first_pass():
  chosen, first, lengths = errors_of_two_systems(1)
  lists = _nbest_lists(first, chosen, lengths)
  result = paper_protocol.wer_significance(
    lists, [0] * len(lists), [1] * len(lists), (RESAMPLES, 3)
  )
  assert result["errors"] == list(chosen) and result["first_pass_errors"] == list(first)
  difference, low, high, _ = numbers(paper_protocol.format_comparison(result["vs_first_pass"]))
  want = paired_bootstrap(wer_difference, (chosen, first, lengths))
  assert_interval(difference, low, high, want, rounding=PRINTED)
  assert difference == pytest.approx(wer_difference(chosen, first, lengths), abs=PRINTED)


def test_reproduction_report_prints_the_interval_of_one_lm_minus_another():
  mine, theirs, lengths = errors_of_two_systems(2)

  def row(lm, errors):
    result = {"test": "test_clean", "setting": "full", "errors": [int(e) for e in errors]}
    return {"lm": lm, "results": [dict(result, reference_words=[int(n) for n in lengths])]}

  (comparison,) = comparisons.asr_comparisons([row("T-TA", mine), row("biLM", theirs)])
  line = comparisons.comparison_table([comparison], ["test", "setting"]).splitlines()[2]
  difference, low, high, _ = numbers(line)
  want = paired_bootstrap(wer_difference, (mine, theirs, lengths))
  assert_interval(difference, low, high, want, rounding=PRINTED)


def test_mwer_report_prints_the_interval_of_each_system_minus_another():
  """run_mwer.py's table (`mwer_report.evaluate_set` and `markdown`): lists whose hypothesis k
  is the choice of system k, (a) first pass, (b) interpolation, (c) weights only, (d) MWER."""
  rng = np.random.default_rng(4)
  lengths = rng.integers(5, 25, 200)
  errors = rng.binomial(lengths, [[0.15], [0.14], [0.13], [0.11]])  # [system, utterance]
  lists, frozen, trained = [], {}, {}
  for i, n in enumerate(lengths):
    hyps = []
    for k in range(4):
      # A word of its own keeps each text apart (the LM scores are looked up by text).
      text = " ".join([f"u{i}h{k}"] + ["x"] * errors[k, i] + ["w"] * (n - errors[k, i]))
      hyps.append(types.Hypothesis(text, {"decoder": -k, "ctc": -k}))
      frozen[text] = {1: 1.0, 2: -1.0}.get(k, 0.0)  # (b) takes its best, (c) its worst
      trained[text] = float(k == 3)
    lists.append(types.NBestList(str(i), [" ".join([f"u{i}h0"] + ["w"] * n)], hyps))
  # The reference's first word: right in hypothesis 0 only.
  errors[1:] += 1
  lengths = lengths + 1
  first_pass = {"decoder": 0.0, "ctc": 0.0}
  systems = mwer_report.SettingSystems(
    "am",
    1.0,
    combination.Weights(first_pass, {combination.MWER_LM: -1.0}),
    combination.Weights(first_pass, {combination.MWER_LM: 1.0}),
  )
  row = mwer_report.evaluate_set("test", lists, systems, frozen, trained, (RESAMPLES, 6))
  index = {s: k for k, s in enumerate(mwer_report.SYSTEMS)}
  assert [row["wer"][s] for s in mwer_report.SYSTEMS] == pytest.approx(
    list(100 * errors.sum(1) / lengths.sum())
  )
  cells = mwer_report.markdown([row], {}, {}).splitlines()[4].split(" | ")[-4:]
  for cell, (system, baseline) in zip(
    cells,
    [
      ("mwer", "first_pass"),
      ("mwer", "interpolation"),
      ("mwer", "combination"),
      ("combination", "first_pass"),
    ],
  ):
    difference, low, high, _ = numbers(cell)
    want = paired_bootstrap(
      wer_difference, (errors[index[system]], errors[index[baseline]], lengths)
    )
    assert_interval(difference, low, high, want, rounding=PRINTED)


# ------------------------------------------------------------------ correlations of one set


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_pearson_interval_is_the_paired_bootstrap_and_fishers_at_its_level(level):
  x, y = correlated(np.random.default_rng(3), 400, 0.6)
  got = significance.pearson_interval(x, y, num_resamples=RESAMPLES, confidence=level, seed=4)
  assert got.value == pytest.approx(100 * stats.pearsonr(x, y).statistic)
  assert_interval(got.value, got.low, got.high, paired_bootstrap(pearson, (x, y), level))
  # A bivariate normal's r: atanh(r) is about normal with variance 1 / (n - 3).
  half = stats.norm.ppf((1 + level) / 2) / np.sqrt(len(x) - 3)
  fisher = 100 * np.tanh(np.arctanh(got.value / 100) + np.array([-half, half]))
  assert_interval(got.value, got.low, got.high, fisher, tolerance=0.15)


def test_pearson_interval_covers_the_true_correlation_95_times_in_100():
  rng = np.random.default_rng(5)
  missed = 0
  for seed in range(200):
    x, y = correlated(rng, 150, 0.5)
    got = significance.pearson_interval(x, y, seed=seed)
    missed += not got.low <= 50.0 <= got.high
  assert 4 <= missed <= 18


def test_sts_table_prints_the_95_interval_of_each_sets_pearson():
  """run_sts.py's table of the paper's sets (`sts_job.markdown_table`, cells of
  `pair_similarity.correlations`)."""
  gold, cosines = correlated(np.random.default_rng(6), 300, 0.7)
  result = pair_similarity.correlations(cosines, gold, (RESAMPLES, 8))
  row = {"model": "tta", "representation": "context", "cosines": {"stsb_dev": cosines}}
  row.update(gold={"stsb_dev": gold}, **{k: {"stsb_dev": v} for k, v in result.items()})
  cell = sts_job.markdown_table([row], ["stsb_dev"]).splitlines()[2].split(" | ")[-1]
  value, low, high, rho = numbers(cell)
  assert_interval(value, low, high, paired_bootstrap(pearson, (cosines, gold)), rounding=PRINTED)
  assert rho == pytest.approx(100 * stats.spearmanr(cosines, gold).statistic, abs=PRINTED)


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_pearson_difference_interval_is_the_paired_bootstrap_at_its_level(level):
  rng = np.random.default_rng(9)
  gold = rng.standard_normal(300)
  a, b = gold + rng.normal(0, [[0.8], [1.0]], (2, 300))
  got = significance.compare_pearson(a, b, gold, num_resamples=RESAMPLES, confidence=level, seed=2)
  assert got.difference == pytest.approx(pearson_difference(a, b, gold))
  want = paired_bootstrap(pearson_difference, (a, b, gold), level)
  assert_interval(got.difference, got.low, got.high, want)


# --------------------------------------------------------------- SentEval's aggregates


def subsets(seed, sizes=(40, 70, 100), rhos=(0.3, 0.6, 0.8)):
  """Cosines and gold scores of subsets of `sizes` pairs correlated by `rhos`, each subset's
  gold scores offset so that "all" differs from "mean"."""
  rng = np.random.default_rng(seed)
  pairs = [correlated(rng, n, rho) for n, rho in zip(sizes, rhos)]
  return [c for _, c in pairs], [g + 2 * i for i, (g, _) in enumerate(pairs)]


def stratified_bootstrap(cosines, gold, level=0.95):
  """{aggregate: [(low, high) of Pearson, of Spearman]} by scipy.stats.bootstrap, each subset's
  pairs resampled within it (unpaired samples: scipy resamples each on its own)."""
  cosines = [np.asarray(c) for c in cosines]
  gold = [np.asarray(g) for g in gold]
  sizes = [len(g) for g in gold]

  def aggregates(*picks, axis=-1):
    c = [x[i] for x, i in zip(cosines, picks)]
    g = [x[i] for x, i in zip(gold, picks)]
    per_subset = np.array([[pearson(*p), spearman(*p)] for p in zip(c, g)])  # [S, 2, R]
    joined = np.concatenate(c, -1), np.concatenate(g, -1)
    return {
      "all": np.array([pearson(*joined), spearman(*joined)]),
      "mean": per_subset.mean(0),
      "wmean": (per_subset * np.reshape(sizes, (-1, 1, 1))).sum(0) / sum(sizes),
    }

  def statistic(*picks, axis=-1):
    values = aggregates(*picks)
    return np.concatenate([values[name] for name in significance.AGGREGATES])  # [6, R]

  result = stats.bootstrap(
    [np.arange(n) for n in sizes],
    statistic,
    vectorized=True,
    paired=False,
    n_resamples=REFERENCE_RESAMPLES,
    confidence_level=level,
    method="percentile",
    random_state=np.random.default_rng(99),
  )
  low, high = result.confidence_interval  # [6] each
  ends = list(zip(low, high))
  return {name: ends[2 * i : 2 * i + 2] for i, name in enumerate(significance.AGGREGATES)}


def assert_aggregates(got, want, rounding=0.0):
  for name in significance.AGGREGATES:
    for value, (low, high), interval in zip(got[name]["scores"], got[name]["ci"], want[name]):
      assert_interval(value, low, high, interval, rounding=rounding)


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_subset_aggregates_are_scipys_stratified_bootstrap_at_their_level(level):
  cosines, gold = subsets(10)
  got = significance.subset_aggregates(
    cosines, gold, num_resamples=RESAMPLES, confidence=level, seed=1
  )
  assert_aggregates(got, stratified_bootstrap(cosines, gold, level))


def test_senteval_aggregates_of_result_rows_have_95_intervals_around_their_scores():
  """pair_similarity.senteval_aggregates, as run_sts.py --pairs_file=senteval:DIR calls it."""
  cosines, gold = subsets(11)
  names = ["STS12/a", "STS12/b", "STS12/c"]
  row = {"cosines": dict(zip(names, cosines)), "gold": dict(zip(names, gold))}
  (entry,) = pair_similarity.senteval_aggregates([row], names, (RESAMPLES, 5))
  assert entry["pairs"] == 210
  assert_aggregates(entry, stratified_bootstrap(cosines, gold))


@pytest.mark.slow(seconds=3)
def test_pairs_report_prints_the_intervals_of_every_aggregate_and_comparison():
  """sts_job.pairs_report, the pairs_results.md and .json of run_sts.py: each SentEval subset's
  Pearson, the task's all / mean / wmean (Spearman [CI] (Pearson [CI])), and tta minus bilm."""
  cosines, gold = subsets(12)
  names = ["STS12/a", "STS12/b", "STS12/c"]
  rng = np.random.default_rng(13)
  other = [c + rng.normal(0, 0.5, len(c)) for c in cosines]
  rows = []
  for model, columns in (("tta", cosines), ("bilm", other)):
    row = {"model": model, "representation": "context", "cosines": {}, "gold": {}, "all": {}}
    row.update(scores={}, pearson_ci={})
    for name, c, g in zip(names, columns, gold):
      result = pair_similarity.correlations(c, g, (RESAMPLES, 5))
      row["cosines"][name], row["gold"][name] = c, g
      row["scores"][name], row["pearson_ci"][name] = result["scores"], result["pearson_ci"]
    rows.append(row)

  class Source:
    path = "pairs.tsv"

  groups = [("STS12", [(name, Source) for name in names])]
  counts = {name: (len(g), len(g)) for name, g in zip(names, gold)}
  results, table = sts_job.pairs_report(
    rows,
    groups,
    counts,
    ["tta", "bilm"],
    dict.fromkeys(names, 0),
    {name: {} for name in names},
    (RESAMPLES, 5),
    [],
  )
  lines = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()}
  for row, columns, cell in zip(rows, (cosines, other), (2, 3)):
    for name, c, g in zip(names, columns, gold):
      value, low, high, _ = numbers(lines[name].split(" | ")[cell])
      assert_interval(value, low, high, paired_bootstrap(pearson, (c, g)), rounding=PRINTED)
    want = stratified_bootstrap(columns, gold)
    reported = next(r for r in results["rows"] if r["model"] == row["model"])
    assert_aggregates(reported["all"]["STS12"], want)
    for name in significance.AGGREGATES:
      spearman_value, s_low, s_high, pearson_value, p_low, p_high = numbers(
        lines[f"STS12/{name}"].split(" | ")[cell]
      )
      assert_interval(pearson_value, p_low, p_high, want[name][0], rounding=PRINTED)
      assert_interval(spearman_value, s_low, s_high, want[name][1], rounding=PRINTED)
  # The comparisons use the run's resamples and seed, as the aggregates do.
  first = results["comparisons"][0]
  again = significance.compare_pearson(
    cosines[0], other[0], gold[0], num_resamples=RESAMPLES, seed=5
  )
  assert (first["set"], first["low"], first["high"]) == (names[0], again.low, again.high)
  comparison_lines = [line for line in table.splitlines() if line.startswith("| tta - bilm")]
  assert len(comparison_lines) == len(names)
  for name, line, c, o, g in zip(names, comparison_lines, cosines, other, gold):
    assert f"| {name} |" in line
    difference, low, high, _ = numbers(line)
    want = paired_bootstrap(pearson_difference, (c, o, g))
    assert_interval(difference, low, high, want, rounding=PRINTED)

"""Paired bootstrap over utterances or sentence pairs for WER and STS (Koehn 2004).

Percentile intervals, not BCa: BCa is undefined for two identical systems, which must read "no
difference". p = 2 min(P(d* <= 0), P(d* >= 0)), capped at 1. The resampling options are
keyword-only: a (resamples, seed) pair spread into them would make the seed the level.
"""

import dataclasses

import numpy as np
from scipy import stats

DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95


def format_p(p_value):
  """ "0.030"; "< 0.001" for p = 0, which means under one in n_resamples (>= 1,000)."""
  return "< 0.001" if p_value < 0.0005 else f"{p_value:.3f}"


@dataclasses.dataclass
class Comparison:
  """A statistic of system A minus B on all units, its interval, two-sided p and units."""

  difference: float
  low: float
  high: float
  p_value: float
  num_units: int


@dataclasses.dataclass
class Interval:
  """A statistic with its bootstrap confidence interval."""

  value: float
  low: float
  high: float


def _bootstrap(samples, statistic, num_resamples, confidence, seed):
  """scipy's paired percentile bootstrap; returns (result, distribution)."""
  result = stats.bootstrap(
    samples,
    statistic,
    paired=True,
    vectorized=True,
    n_resamples=num_resamples,
    confidence_level=confidence,
    method="percentile",
    random_state=np.random.default_rng(seed),
  )
  return result, np.asarray(result.bootstrap_distribution)


def _two_sided_p(distribution):
  below = np.mean(distribution <= 0)
  above = np.mean(distribution >= 0)
  return float(min(1.0, 2.0 * min(below, above)))


def _check_paired(*arrays):
  lengths = {len(a) for a in arrays}
  if len(lengths) != 1:
    raise ValueError(f"paired samples must have one length, got {sorted(lengths)}")
  if lengths == {0}:
    raise ValueError("no units to resample")
  if lengths == {1}:
    raise ValueError("one unit cannot be resampled: need at least 2")


def _interval(values, ci):
  low, high = ci.confidence_interval
  # A constant statistic gives a zero-width interval (scipy may return nan for it).
  if not np.isfinite(low) or not np.isfinite(high):
    low = high = values
  return float(low), float(high)


def compare_error_rates(
  errors_a,
  errors_b,
  reference_lengths,
  *,
  num_resamples=DEFAULT_RESAMPLES,
  confidence=DEFAULT_CONFIDENCE,
  seed=0,
):
  """`Comparison` of corpus WER x 100, A minus B (negative: A makes fewer errors), from int [U]
  errors (S + D + I) of each utterance's chosen hypothesis and words of its reference."""
  errors_a, errors_b, lengths = (
    np.asarray(x, np.float64) for x in (errors_a, errors_b, reference_lengths)
  )
  _check_paired(errors_a, errors_b, lengths)

  def wer_difference(a, b, n, axis=-1):
    return 100.0 * (a.sum(axis) - b.sum(axis)) / n.sum(axis)

  observed = float(wer_difference(errors_a, errors_b, lengths))
  result, distribution = _bootstrap(
    (errors_a, errors_b, lengths), wer_difference, num_resamples, confidence, seed
  )
  low, high = _interval(observed, result)
  return Comparison(observed, low, high, _two_sided_p(distribution), len(lengths))


def _pearson(x, y, axis=-1):
  """Pearson r x 100 along `axis` (vectorised over resamples); 0 for a constant input."""
  x = x - x.mean(axis, keepdims=True)
  y = y - y.mean(axis, keepdims=True)
  denominator = np.sqrt((x * x).sum(axis) * (y * y).sum(axis))
  with np.errstate(invalid="ignore", divide="ignore"):
    r = np.where(denominator > 0, (x * y).sum(axis) / denominator, 0.0)
  return 100.0 * r


def pearson_interval(
  predicted, gold, *, num_resamples=DEFAULT_RESAMPLES, confidence=DEFAULT_CONFIDENCE, seed=0
):
  """`Interval` of Pearson r x 100 of `predicted` float [P] against `gold` float [P]."""
  predicted, gold = np.asarray(predicted, np.float64), np.asarray(gold, np.float64)
  _check_paired(predicted, gold)
  result, _ = _bootstrap((predicted, gold), _pearson, num_resamples, confidence, seed)
  value = float(_pearson(predicted, gold))
  low, high = _interval(value, result)
  return Interval(value, low, high)


# SentEval's aggregations of an STS task's subsets (senteval/sts.py): "all", Pearson and Spearman
# over the concatenation of the subsets' pairs (the figure SimCSE and SBERT print), "mean" and
# "wmean", the mean and the pair-weighted mean of the subsets' correlations (BERT-flow's).
AGGREGATES = ("all", "mean", "wmean")
# Resamples drawn at a time: [chunk, pairs] index arrays (STS12-16's largest task: 3,750 pairs).
_AGGREGATE_CHUNK = 100


def _spearman(x, y, axis=-1):
  """Spearman rho x 100 along `axis`: the Pearson of the ranks (ties get their mean rank)."""
  return _pearson(stats.rankdata(x, axis=axis), stats.rankdata(y, axis=axis), axis)


def _aggregates(predicted, gold):
  """{`AGGREGATES`: float [..., 2] (Pearson, Spearman) x 100} of lists over the subsets of
  float [..., n_s] (leading axes: resamples)."""
  per_subset = np.stack(
    [np.stack([_pearson(p, g), _spearman(p, g)], -1) for p, g in zip(predicted, gold)]
  )  # [S, ..., 2]
  joined = np.concatenate(predicted, -1), np.concatenate(gold, -1)
  return {
    "all": np.stack([_pearson(*joined), _spearman(*joined)], -1),
    "mean": per_subset.mean(0),
    "wmean": np.average(per_subset, axis=0, weights=[p.shape[-1] for p in predicted]),
  }


def subset_aggregates(
  predicted, gold, *, num_resamples=DEFAULT_RESAMPLES, confidence=DEFAULT_CONFIDENCE, seed=0
):
  """{aggregate: {"scores": [Pearson, Spearman], "ci": [[low, high] of each]}} x 100 of a task's
  subsets (`predicted`, `gold`: lists of float [n_s]).

  Stratified: each resample draws every subset's pairs from that subset, so each keeps its size
  and weight ("mean" needs a correlation of each); all three are read off the same draws.
  """
  predicted = [np.asarray(p, np.float64) for p in predicted]
  gold = [np.asarray(g, np.float64) for g in gold]
  for p, g in zip(predicted, gold, strict=True):
    _check_paired(p, g)
  observed = _aggregates(predicted, gold)
  rng = np.random.default_rng(seed)
  draws = {name: [] for name in AGGREGATES}
  for begin in range(0, num_resamples, _AGGREGATE_CHUNK):
    size = min(_AGGREGATE_CHUNK, num_resamples - begin)
    picks = [rng.integers(0, len(p), (size, len(p))) for p in predicted]  # [size, n_s] each
    sample = _aggregates(
      [p[i] for p, i in zip(predicted, picks)], [g[i] for g, i in zip(gold, picks)]
    )
    for name in AGGREGATES:
      draws[name].append(sample[name])
  tail = 100 * (1 - confidence) / 2
  out = {}
  for name in AGGREGATES:
    low, high = np.percentile(np.concatenate(draws[name]), [tail, 100 - tail], axis=0)  # [2] each
    out[name] = {
      "scores": [float(v) for v in observed[name]],
      "ci": [[float(low[k]), float(high[k])] for k in range(2)],
    }
  return out


def compare_pearson(
  predicted_a,
  predicted_b,
  gold,
  *,
  num_resamples=DEFAULT_RESAMPLES,
  confidence=DEFAULT_CONFIDENCE,
  seed=0,
):
  """`Comparison` of Pearson x 100, A minus B (positive: A correlates better), on the same P
  pairs (float [P] each)."""
  a, b, gold = (np.asarray(x, np.float64) for x in (predicted_a, predicted_b, gold))
  _check_paired(a, b, gold)

  def pearson_difference(x, y, g, axis=-1):
    return _pearson(x, g, axis) - _pearson(y, g, axis)

  observed = float(pearson_difference(a, b, gold))
  result, distribution = _bootstrap(
    (a, b, gold), pearson_difference, num_resamples, confidence, seed
  )
  low, high = _interval(observed, result)
  return Comparison(observed, low, high, _two_sided_p(distribution), len(gold))


def significant_in_every_seed(intervals):
  """reproduce.py --seeds' rule: True when the CI of the difference excludes 0 on the same side
  for every seed (`intervals`: (low, high) per seed, None where one lacks it: False).

  A paired bootstrap resamples the test units of ONE trained model per side: it says nothing of
  how far another training run moves the difference.
  """
  if not intervals:
    raise ValueError("no seed to judge")
  if any(interval is None for interval in intervals):
    return False
  return all(low > 0 for low, _ in intervals) or all(high < 0 for _, high in intervals)

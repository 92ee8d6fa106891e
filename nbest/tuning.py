"""Every search of the combination's weights on dev: the paper's λ grid, then Powell's search
(MERT-style: the dev metric is piecewise constant in the weights, so the search keeps the best
point it evaluated and never ends worse than the grid's best)."""

import dataclasses

import numpy as np
import scipy.optimize

from evaluation import metrics
from nbest import combination


class Objective:
  """The dev metric of a choice as a loss; WER's per-hypothesis errors are counted once."""

  def __init__(self, lists, metric):
    self.lists, self.metric = lists, metric
    if metric == "wer":
      pairs = [(lst.refs[0], h.text) for lst in lists for h in lst.hyps]
      flat = iter(metrics.sentence_errors([r for r, _ in pairs], [h for _, h in pairs]))
      self.errors = [[next(flat) for _ in lst.hyps] for lst in lists]
      self.words = sum(len(lst.refs[0].split()) for lst in lists)

  def value(self, choice):
    """WER or BLEU of `choice`, percent."""
    if self.metric == "wer":
      return 100.0 * sum(e[c] for e, c in zip(self.errors, choice)) / max(self.words, 1)
    return metrics.evaluate(self.lists, choice, self.metric)

  def loss(self, choice):
    return self.value(choice) if self.metric == "wer" else -self.value(choice)


DEFAULT_GRID = tuple(round(0.05 * i, 2) for i in range(21))


@dataclasses.dataclass
class SweepResult:
  """`curve`: [(λ, metric)] in grid order; `best_lam` the smallest λ of the best value."""

  metric: str
  curve: list
  best_lam: float
  best_value: float


def _lambda_grid(value, metric, feature_tables, weights, grid):
  """The one λ grid: (1-λ)·(first pass at `weights`) + λ·(their first LM), other LMs and the
  length at 0; returns (SweepResult, the best point's float64 vector)."""
  if not grid:
    raise ValueError("empty λ grid")
  base = weights.vector()
  k = len(weights.first_pass)
  curve, vectors = [], {}
  for lam in grid:
    if not 0.0 <= lam <= 1.0:
      raise ValueError(f"λ must lie in [0, 1], got {lam}")
    vector = np.zeros_like(base)
    vector[:k] = (1.0 - lam) * base[:k]
    vector[k] = lam
    vectors.setdefault(lam, vector)
    curve.append((lam, value(combination.choose(feature_tables, vector))))
  sign = 1.0 if metric == "wer" else -1.0
  best_lam, best_value = min(curve, key=lambda point: (sign * point[1], point[0]))
  return SweepResult(metric, curve, best_lam, best_value), vectors[best_lam]


def sweep_lambda(dev_lists, dev_lm, metric, setting="full", grid=DEFAULT_GRID):
  """The paper's protocol: SweepResult of (1-λ)·first pass + λ·LM over `grid` on dev;
  `dev_lm` is [list][hyp]."""
  if metric not in metrics.METRICS:
    raise ValueError(f"unknown metric {metric!r}; expected one of {metrics.METRICS}")
  combination.check_lm_scores(dev_lists, dev_lm)
  first_pass, feature_tables = combination.interpolation_tables(dev_lists, dev_lm, setting)
  weights = combination.Weights.interpolation(first_pass, 0.0)
  sweep, _ = _lambda_grid(
    lambda choice: metrics.evaluate(dev_lists, choice, metric),
    metric,
    feature_tables,
    weights,
    grid,
  )
  return sweep


def grid_start(objective, feature_tables, weights, grid=DEFAULT_GRID):
  """(Weights, dev metric) of the best point of `sweep_lambda`'s grid: `optimise`'s start."""
  sweep, vector = _lambda_grid(objective.value, objective.metric, feature_tables, weights, grid)
  return weights.with_vector(vector), sweep.best_value


def optimise(objective, feature_tables, start, max_evaluations=2000, negative_lms=False):
  """(Weights, dev metric) of the best point Powell's search from `start` evaluated.

  LM weights stay >= 0 unless `negative_lms`: a negative one rewards what the LM finds unlikely,
  which a small dev set can favour by chance.
  """
  x0 = start.vector()
  best = [objective.loss(combination.choose(feature_tables, x0)), x0]

  def loss(vector):
    value = objective.loss(combination.choose(feature_tables, vector))
    if value < best[0]:
      best[:] = [value, np.array(vector, np.float64)]
    return value

  k, m = len(start.first_pass), len(start.lms)
  lm_bound = (None, None) if negative_lms else (0.0, None)
  bounds = [(None, None)] * k + [lm_bound] * m + [(None, None)]
  scipy.optimize.minimize(
    loss,
    x0,
    method="Powell",
    bounds=bounds,
    options={"maxfev": max_evaluations, "xtol": 1e-3, "ftol": 1e-9},
  )
  return start.with_vector(best[1]), objective.value(combination.choose(feature_tables, best[1]))

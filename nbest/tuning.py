"""Tuning the combination's weights on dev: the paper's λ grid, then Powell's search
(MERT-style: the dev metric itself is the objective, a piecewise constant function of the
weights, so the search keeps the best point it ever evaluated and never ends worse than the
grid's best)."""

import numpy as np
import scipy.optimize

from evaluation import metrics
from nbest import combination


class Objective:
  """The dev metric as a loss (lower is better) of a choice; WER from per-hypothesis error
  counts computed once with jiwer (corpus WER = Σ errors / Σ reference words), BLEU by sacrebleu
  on each call."""

  def __init__(self, lists, metric):
    self.lists, self.metric = lists, metric
    if metric == "wer":
      pairs = [(lst.refs[0], h.text) for lst in lists for h in lst.hyps]
      flat = iter(metrics.sentence_errors([r for r, _ in pairs], [h for _, h in pairs]))
      self.errors = [[next(flat) for _ in lst.hyps] for lst in lists]
      self.words = sum(len(lst.refs[0].split()) for lst in lists)

  def value(self, choice):
    """The metric (WER or BLEU, percent) of `choice`."""
    if self.metric == "wer":
      return 100.0 * sum(e[c] for e, c in zip(self.errors, choice)) / max(self.words, 1)
    return metrics.evaluate(self.lists, choice, self.metric)

  def loss(self, choice):
    return self.value(choice) if self.metric == "wer" else -self.value(choice)


def grid_start(objective, feature_tables, weights, grid=combination.DEFAULT_GRID):
  """The λ grid of the paper's protocol: (1-λ)·(first pass at `weights`) + λ·first LM.

  Returns:
    (Weights, float): the best grid point (smallest λ on ties) and its dev metric.
  """
  base = weights.vector()
  k = len(weights.first_pass)
  best = None
  for lam in grid:
    vector = np.zeros_like(base)
    vector[:k] = (1.0 - lam) * base[:k]
    vector[k] = lam
    loss = objective.loss(combination.choose(feature_tables, vector))
    if best is None or loss < best[0]:
      best = (loss, vector)
  start = weights.with_vector(best[1])
  return start, objective.value(combination.choose(feature_tables, best[1]))


def optimise(objective, feature_tables, start, max_evaluations=2000, negative_lms=False):
  """Powell's search of the weights from `start`, over the dev metric.

  An LM weight stays >= 0 unless `negative_lms`: a negative one rewards what the LM finds
  unlikely, which a small dev set can favour by chance (the first-pass and length weights are
  free).

  Returns:
    (Weights, float): the best weights evaluated (`start` unless one was strictly better) and
    their dev metric.
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

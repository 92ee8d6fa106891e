"""The log-linear combination of N-best rescoring, its weights tuned on dev, and its metrics.

  s(h) = Σ_k w_k·first_pass_k(h) + Σ_m λ_m·LM_m(h) + β·|h|

over any first-pass score columns k (natural log, higher is better, as nbest_formats reads
them), several LMs m and a bonus β per word of h. The weights are tuned on a dev set with
references: first the paper's one-LM λ grid, (1-λ)·first pass + λ·LM_1, then scipy's Powell
search over every weight (MERT-style: the dev metric itself is the objective, a piecewise
constant function of the weights, so the search keeps the best point it ever evaluated and never
ends worse than the grid's best). Ties in a list go to the better first-pass rank.

Tables: for each list a float64 array [num_hyps, num_features], the features in the order
first-pass columns, LMs, length (`feature_names`).
"""

import dataclasses
import json

import jiwer
import numpy as np
import sacrebleu
import scipy.optimize

from evaluation import nbest
from util import io_utils

LENGTH = "length"


@dataclasses.dataclass
class Weights:
  """Weights of the combination.

  Attributes:
    first_pass: dict[str, float], score column -> w_k.
    lms: dict[str, float], LM name -> λ_m.
    length: float, β, added per word of the hypothesis.
  """

  first_pass: dict
  lms: dict
  length: float = 0.0

  def vector(self):
    """float64 [num_features], in `feature_names` order."""
    return np.array([*self.first_pass.values(), *self.lms.values(), self.length], np.float64)

  def with_vector(self, vector):
    """A copy with the weights of `vector` (in `feature_names` order)."""
    values = [float(v) for v in vector]
    k = len(self.first_pass)
    return Weights(
      dict(zip(self.first_pass, values[:k])),
      dict(zip(self.lms, values[k:-1])),
      values[-1],
    )

  def first_pass_only(self):
    """A copy without the LMs and the length bonus: the first pass's own choice."""
    return Weights(dict(self.first_pass), {m: 0.0 for m in self.lms}, 0.0)

  def toolkit_weights(self):
    """NeMo/ESPnet's (α, β) when one first-pass score meets one LM: with the first pass's
    weight scaled to 1, α = λ/w (= λ/(1-λ) on the grid) and β per word; else None."""
    if len(self.first_pass) != 1 or len(self.lms) != 1:
      return None
    (w,) = self.first_pass.values()
    (lam,) = self.lms.values()
    if w <= 0:
      return None
    return {"alpha": lam / w, "beta": self.length / w}


def feature_names(weights):
  return [*weights.first_pass, *weights.lms, LENGTH]


def save_weights(path, weights, info):
  """Writes the weights (and `info`, a JSON-able dict of how they were found) atomically."""
  data = dict(info, first_pass=weights.first_pass, lms=weights.lms, length=weights.length)
  io_utils.write_atomically(path, json.dumps(data, indent=2) + "\n")


def load_weights(path):
  """Weights from `save_weights`' file; ValueError naming `path:1` if it is not one, or if a
  weight is not a finite number (JSON's NaN and Infinity, a quoted number, true/false)."""
  data = io_utils.read_json_file(path)
  try:
    first, lms, length = data["first_pass"], data["lms"], data["length"]
    parsed = Weights(
      {str(k): _finite(v, f"first_pass.{k}") for k, v in first.items()},
      {str(k): _finite(v, f"lms.{k}") for k, v in lms.items()},
      _finite(length, "length"),
    )
  except (KeyError, TypeError, AttributeError) as e:
    raise ValueError(f"{path}:1: not a weights file (first_pass, lms, length): {e!r}") from None
  except ValueError as e:
    raise ValueError(f"{path}:1: {e}") from None
  return parsed


def _finite(value, name):
  """`value` as a float if it is a finite JSON number; ValueError naming the weight otherwise."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
    raise ValueError(f"weight {name} must be a finite number, found {json.dumps(value)}")
  return float(value)


def tables(lists, weights, lm_scores):
  """Feature tables of `lists` (see the module docstring).

  Args:
    lists: list[NBestList].
    weights: Weights, naming the columns and LMs.
    lm_scores: dict[str, list[list[float]]], LM name -> scores aligned with the hypotheses.

  Raises:
    ValueError: a hypothesis without a first-pass column, or an LM without scores.
  """
  for name in weights.lms:
    if name not in lm_scores:
      raise ValueError(f"no scores of the LM {name!r} (LMs given: {sorted(lm_scores)})")
  out = []
  for i, lst in enumerate(lists):
    rows = []
    for j, hyp in enumerate(lst.hyps):
      missing = [k for k in weights.first_pass if k not in hyp.scores]
      if missing:
        raise ValueError(
          f"list {lst.key!r}: no first-pass score {missing} (it has {sorted(hyp.scores)})"
        )
      rows.append(
        [hyp.scores[k] for k in weights.first_pass]
        + [lm_scores[m][i][j] for m in weights.lms]
        + [len(hyp.text.split())]
      )
    out.append(np.array(rows, np.float64).reshape(len(lst.hyps), -1))
  return out


def choose(feature_tables, vector):
  """list[int], the best hypothesis of each list under the weights `vector` (first on ties)."""
  return [int(np.argmax(t @ vector)) for t in feature_tables]


class Objective:
  """The dev metric as a loss (lower is better) of a choice; WER from per-hypothesis error
  counts computed once with jiwer (corpus WER = Σ errors / Σ reference words), BLEU by sacrebleu
  on each call."""

  def __init__(self, lists, metric):
    self.lists, self.metric = lists, metric
    if metric == "wer":
      pairs = [(lst.refs[0], h.text) for lst in lists for h in lst.hyps]
      flat = iter(nbest._sentence_errors([r for r, _ in pairs], [h for _, h in pairs]))
      self.errors = [[next(flat) for _ in lst.hyps] for lst in lists]
      self.words = sum(len(lst.refs[0].split()) for lst in lists)

  def value(self, choice):
    """The metric (WER or BLEU, percent) of `choice`."""
    if self.metric == "wer":
      return 100.0 * sum(e[c] for e, c in zip(self.errors, choice)) / max(self.words, 1)
    return nbest.evaluate(self.lists, choice, self.metric)

  def loss(self, choice):
    return self.value(choice) if self.metric == "wer" else -self.value(choice)


def grid_start(objective, feature_tables, weights, grid=nbest.DEFAULT_GRID):
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
    loss = objective.loss(choose(feature_tables, vector))
    if best is None or loss < best[0]:
      best = (loss, vector)
  start = weights.with_vector(best[1])
  return start, objective.value(choose(feature_tables, best[1]))


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
  best = [objective.loss(choose(feature_tables, x0)), x0]

  def loss(vector):
    value = objective.loss(choose(feature_tables, vector))
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
  return start.with_vector(best[1]), objective.value(choose(feature_tables, best[1]))


def wer_report(lists, choice, cer=False):
  """WER (jiwer) of `choice` with its substitution, deletion and insertion counts; CER too.

  Returns:
    dict: wer (percent), substitutions, deletions, insertions, reference_words, [cer].
  """
  refs = [lst.refs[0] for lst in lists]
  hyps = [lst.hyps[c].text for lst, c in zip(lists, choice)]
  details = nbest.wer_details(refs, hyps)
  report = {
    "wer": details.wer,
    "substitutions": details.substitutions,
    "deletions": details.deletions,
    "insertions": details.insertions,
    "reference_words": details.ref_words,
  }
  if cer:
    report["cer"] = 100.0 * jiwer.cer(refs, hyps)
  return report


def mt_report(lists, choice):
  """Corpus BLEU and chrF (sacrebleu, every reference of each segment) with their signatures.

  Returns:
    dict: bleu, bleu_signature, chrf, chrf_signature.
  """
  counts = {len(lst.refs) for lst in lists}
  if len(counts) != 1:
    raise ValueError(f"every segment needs as many references; found counts {sorted(counts)}")
  hyps = [lst.hyps[c].text for lst, c in zip(lists, choice)]
  streams = [list(s) for s in zip(*[lst.refs for lst in lists])]
  bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
  return {
    "bleu": bleu.corpus_score(hyps, streams).score,
    "bleu_signature": str(bleu.get_signature()),
    "chrf": chrf.corpus_score(hyps, streams).score,
    "chrf_signature": str(chrf.get_signature()),
  }

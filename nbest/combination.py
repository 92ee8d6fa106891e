"""The one combination of N-best rescoring, its weights file, and the paper's λ interpolation.

  s(h) = Σ_k w_k·first_pass_k(h) + Σ_m λ_m·LM_m(h) + β·|h|   (|h| in words; ties -> better rank)

A list's table is float64 [num_hyps, num_features], columns in `feature_names` order (first-pass
scores, LMs, length). The searches of the weights are nbest/tuning.py's.
"""

import dataclasses
import json
import math

import numpy as np

from nbest import settings
from util import io_utils

LENGTH = "length"
# The weights file; the unversioned files of run_rescoring and run_mwer still read.
WEIGHTS_FORMAT = "tta-nbest-weights"
WEIGHTS_VERSION = 2
# The LM of an MWER-trained rescorer (run_mwer.py's mwer_weights.json): rescore with it as
# `--model_dir=mwer=<its model dir>`.
MWER_LM = "mwer"
# The LM of the paper's interpolation (`rerank`, `tuning.sweep_lambda`).
_LM = "lm_score"


@dataclasses.dataclass
class Weights:
  """w_k ({score: w}), λ_m ({LM name: λ}) and β of s(h)."""

  first_pass: dict
  lms: dict
  length: float = 0.0

  @classmethod
  def interpolation(cls, first_pass, lam, lm=_LM):
    """(1-λ)·first pass + λ·LM, the paper's rule."""
    return cls({k: (1.0 - lam) * w for k, w in first_pass.items()}, {lm: float(lam)}, 0.0)

  def vector(self):
    """float64 [num_features], in `feature_names` order."""
    return np.array([*self.first_pass.values(), *self.lms.values(), self.length], np.float64)

  def with_vector(self, vector):
    values = [float(v) for v in vector]
    k = len(self.first_pass)
    return Weights(
      dict(zip(self.first_pass, values[:k])),
      dict(zip(self.lms, values[k:-1])),
      values[-1],
    )

  def aligned(self, names):
    """A copy with the first-pass weights in the order of `names` (a table's columns)."""
    if sorted(names) != sorted(self.first_pass):
      raise ValueError(
        f"the weights combine first-pass scores {list(self.first_pass)}, the lists have "
        f"{list(names)}"
      )
    return Weights({n: self.first_pass[n] for n in names}, dict(self.lms), self.length)

  def first_pass_only(self):
    return Weights(dict(self.first_pass), {m: 0.0 for m in self.lms}, 0.0)

  def toolkit_weights(self):
    """NeMo/ESPnet's {alpha, beta} (first-pass weight scaled to 1) for one score and one LM."""
    if len(self.first_pass) != 1 or len(self.lms) != 1:
      return None
    (w,) = self.first_pass.values()
    (lam,) = self.lms.values()
    if w <= 0:
      return None
    return {"alpha": lam / w, "beta": self.length / w}

  def to_dict(self):
    return {
      "first_pass": {k: float(v) for k, v in self.first_pass.items()},
      "lms": {k: float(v) for k, v in self.lms.items()},
      "length": float(self.length),
    }


def feature_names(weights):
  return [*weights.first_pass, *weights.lms, LENGTH]


def save_weights(path, weights, info):
  """Writes the weights and `info` (JSON-able: how they were found) atomically."""
  data = {"format": WEIGHTS_FORMAT, "version": WEIGHTS_VERSION, **weights.to_dict(), **info}
  io_utils.write_atomically(path, json.dumps(data, indent=2) + "\n")


def load_weights(path):
  """Weights of a weights file; ValueError naming `path:1` for another file or version, or a
  weight that is not a finite JSON number."""
  data = io_utils.read_json_file(path)
  version = data.get("version") if isinstance(data, dict) else None
  if version is not None and (data.get("format") != WEIGHTS_FORMAT or version != WEIGHTS_VERSION):
    raise ValueError(
      f"{path}:1: a weights file of format {data.get('format')!r} version {version!r}; this tta "
      f"reads {WEIGHTS_FORMAT!r} version {WEIGHTS_VERSION} and the files before versions"
    )
  try:
    if version is None and "first_pass_weights" in data:  # run_mwer's first files
      first, lms, length = (
        data["first_pass_weights"],
        {MWER_LM: data["lm_weight"]},
        data["length_weight"],
      )
    else:
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
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
    raise ValueError(f"weight {name} must be a finite number, found {json.dumps(value)}")
  return float(value)


def stack(first_pass, lms, length):
  """Feature rows float64 [..., K, F + M + 1] of first-pass scores [..., K, F], LM scores
  [..., K, M] and lengths in words [..., K]."""
  length = np.asarray(length, np.float64)[..., None]
  return np.concatenate(
    [np.asarray(first_pass, np.float64), np.asarray(lms, np.float64), length], -1
  )


def tables(lists, weights, lm_scores):
  """A table per list, for `weights`' columns; `lm_scores`: {LM name: [list][hyp] float}."""
  for name in weights.lms:
    if name not in lm_scores:
      raise ValueError(f"no scores of the LM {name!r} (LMs given: {sorted(lm_scores)})")
  out = []
  for i, lst in enumerate(lists):
    first_pass = []
    for hyp in lst.hyps:
      missing = [k for k in weights.first_pass if k not in hyp.scores]
      if missing:
        raise ValueError(
          f"list {lst.key!r}: no first-pass score {missing} (it has {sorted(hyp.scores)})"
        )
      first_pass.append([hyp.scores[k] for k in weights.first_pass])
    k = len(lst.hyps)
    out.append(
      stack(
        np.reshape(first_pass, (k, len(weights.first_pass))),
        np.reshape([lm_scores[m][i] for m in weights.lms], (len(weights.lms), k)).T,
        [len(hyp.text.split()) for hyp in lst.hyps],
      )
    )
  return out


def scores(table, vector):
  """float64 [..., K]: s(h) of feature rows [..., K, F + M + 1] under `vector` [F + M + 1]."""
  return np.asarray(table, np.float64) @ np.asarray(vector, np.float64)


def choose(feature_tables, vector):
  """list[int], the best hypothesis of each table (first on ties)."""
  return [int(np.argmax(scores(t, vector))) for t in feature_tables]


def check_lm_scores(lists, lm_scores):
  if len(lm_scores) != len(lists):
    raise ValueError(f"lm_scores has {len(lm_scores)} entries for {len(lists)} lists")
  for nbest, values in zip(lists, lm_scores):
    if len(values) != len(nbest.hyps):
      raise ValueError(
        f"list {nbest.key!r}: {len(values)} LM scores for {len(nbest.hyps)} hypotheses"
      )
    for score in values:
      # NaN would make every comparison false and silently pick rank 1.
      if not math.isfinite(score):
        raise ValueError(f"list {nbest.key!r}: LM score {score!r} is not finite")


def interpolation_tables(lists, lm_scores, setting):
  """(the setting's first-pass weights, feature tables with the LM as `_LM`)."""
  if not lists:
    return {}, []
  first_pass = settings.first_pass_weights(setting, lists[0].hyps[0].scores)
  if lm_scores is None:
    lm_scores = [[0.0] * len(nbest.hyps) for nbest in lists]
  weights = Weights.interpolation(first_pass, 0.0)
  return first_pass, tables(lists, weights, {_LM: lm_scores})


def rerank(lists, lm_scores, lam, setting="full"):
  """list[int], each list's best hypothesis under (1-λ)·first pass + λ·LM.

  λ=0 is exactly the first pass's choice. `lm_scores` is [list][hyp] or None (λ=0 only);
  `setting` None ranks by the LM alone.
  """
  if not 0.0 <= lam <= 1.0:
    raise ValueError(f"λ must lie in [0, 1], got {lam}")
  if lm_scores is None and lam != 0.0:
    raise ValueError("lm_scores=None only makes sense with λ=0 (the first pass)")
  if lm_scores is not None:
    check_lm_scores(lists, lm_scores)
  first_pass, feature_tables = interpolation_tables(lists, lm_scores, setting)
  return choose(feature_tables, Weights.interpolation(first_pass, lam).vector())

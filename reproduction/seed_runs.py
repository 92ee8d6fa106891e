"""The seeds of reproduce.py --seeds (docs/results.md): where each one trains and evaluates, and
its comparisons side by side. Seed 1 is the one-seed run, in the work dir itself, so a one-seed
work dir extends to more seeds without redoing any of its stages; seed k > 1 is in seed<k>/. The
report keeps seed 1's results where a one-seed report has them, further seeds' in
report["seed_runs"].
"""

import dataclasses
import os

import numpy as np

from evaluation import significance

# The stages each seed k > 1 runs after its training: every evaluation that compares models (the
# learning curves are seed 1's only).
EVALUATIONS = ("sts", "asr_paired", "asr_word", "asr", "nmt")
# The report's lists of paired comparisons (evaluation/comparisons.py).
COMPARISONS = (
  "asr_comparisons",
  "asr_paired_comparisons",
  "asr_word_comparisons",
  "sts_comparisons",
)
# The fields of a comparison dict that are its statistics; the others say what it compares.
_STATISTICS = frozenset(f.name for f in dataclasses.fields(significance.Comparison))


def seed_dir(work_dir, seed):
  """Where seed `seed` (1, 2, ...) trains and evaluates: the work dir itself, or seed<k>/ in it."""
  return work_dir if seed == 1 else os.path.join(work_dir, f"seed{seed:d}")


def stage_name(name, seed):
  """The console name of stage `name` of seed `seed` > 1: "seed2/sts"."""
  return f"seed{seed:d}/{name}"


class SeedStages(object):
  """A job's `progress.Stages` as the stages of seed `seed` > 1 see it (names `stage_name`)."""

  def __init__(self, stages, seed):
    self._stages, self._seed = stages, seed

  def start(self, name):
    return self._stages.start(stage_name(name, self._seed))


def init_seed_flags(seed):
  """run_pretraining.py's seed flags of seed `seed`: none for seed 1 (its default seeds, as a
  one-seed run trains), --init_seed=k for seed k."""
  return [] if seed == 1 else [f"--init_seed={seed:d}"]


def seed_count(report):
  """How many seeds the report's models were trained with."""
  return 1 + len(report.get("seed_runs", ()))


def per_seed(report, key):
  """[report[key] of seed 1, that of seed 2, ...] (None where a seed lacks it)."""
  return [report.get(key)] + [run.get(key) for run in report.get("seed_runs", ())]


def _what(comparison):
  """What a comparison dict compares (a, b, set or test, ...), as a hashable key."""
  return tuple(sorted((k, v) for k, v in comparison.items() if k not in _STATISTICS))


def combine_comparisons(runs):
  """The comparison dicts of the seeds' `runs` (a list or None per seed) side by side, in order
  of first appearance: what they compare, "difference" (mean over the seeds that have it),
  "seeds" (per seed: difference, low, high, p_value, or None) and "every_seed"."""
  found = {}
  for i, comparisons in enumerate(runs):
    for c in comparisons or ():
      found.setdefault(_what(c), [None] * len(runs))[i] = c
  out = []
  for what, seeds in found.items():
    present = [c for c in seeds if c is not None]
    out.append(
      dict(
        what,
        difference=float(np.mean([c["difference"] for c in present])),
        seeds=[
          None if c is None else {k: c[k] for k in ("difference", "low", "high", "p_value")}
          for c in seeds
        ],
        every_seed=significance.significant_in_every_seed(
          [None if c is None else (c["low"], c["high"]) for c in seeds]
        ),
      )
    )
  return out


def seed_comparisons(report):
  """{key of `COMPARISONS`: `combine_comparisons` over the report's seeds} for the keys any seed
  has."""
  return {
    key: combine_comparisons(per_seed(report, key))
    for key in COMPARISONS
    if any(per_seed(report, key))
  }

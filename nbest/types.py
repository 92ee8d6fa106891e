"""N-best lists as data: a hypothesis, a list, and the selection of the lists a run uses."""

import dataclasses

import numpy as np


@dataclasses.dataclass
class Hypothesis:
  """One candidate: `text` (may be empty), {name: first-pass score}, and its system if several."""

  text: str
  scores: dict = dataclasses.field(default_factory=dict)
  system: str = ""


@dataclasses.dataclass
class NBestList:
  """The candidates for one utterance or segment, `hyps` in first-pass rank order; `refs` may
  hold several references (MT) or none."""

  key: str
  refs: list
  hyps: list


def sample_lists(lists, n, seed):
  """A seeded sample of n lists in their order: the same for every LM, so comparisons pair."""
  return [lists[i] for i in _sample_indices(len(lists), n, seed)]


def _sample_indices(count, n, seed):
  if n >= count:
    return list(range(count))
  return sorted(np.random.default_rng(seed).choice(count, size=n, replace=False))


def list_selection(max_lists=None, sample_lists=None, seed=0):
  """A reader's `select`, (list count) -> indices: the first `max_lists` (0: all), then
  `sample_lists` of those, the same sample as `sample_lists` gives of the lists read whole."""

  def select(count):
    count = min(count, max_lists) if max_lists else count
    return _sample_indices(count, sample_lists, seed) if sample_lists else list(range(count))

  return select

"""N-best lists as data: a hypothesis, a list, and the selection of the lists a run uses."""

import dataclasses

import numpy as np


@dataclasses.dataclass
class Hypothesis:
  """One candidate of an N-best list.

  Attributes:
    text: str, the hypothesis (may be empty).
    scores: dict[str, float], first-pass scores by name ("decoder", "ctc", "lm", "score", ...).
    system: str, the system that produced it for multi-system lists, else "".
  """

  text: str
  scores: dict = dataclasses.field(default_factory=dict)
  system: str = ""


@dataclasses.dataclass
class NBestList:
  """The candidates for one utterance or segment.

  Attributes:
    key: str, utterance or segment id.
    refs: list[str], one reference (ASR) or several (MT).
    hyps: list[Hypothesis], in first-pass rank order (rank 1 first).
  """

  key: str
  refs: list
  hyps: list


def sample_lists(lists, n, seed):
  """A seeded random sample of n lists (all of them when n >= len), in their original order.

  The same (lists, n, seed) give the same sample in every run and for every LM, so LMs scored
  on it are compared on the same utterances (paired).
  """
  return [lists[i] for i in _sample_indices(len(lists), n, seed)]


def _sample_indices(count, n, seed):
  if n >= count:
    return list(range(count))
  return sorted(np.random.default_rng(seed).choice(count, size=n, replace=False))


def list_selection(max_lists=None, sample_lists=None, seed=0):
  """The lists a run uses, as a reader's `select`: (list count) -> their indices, in order.

  The first `max_lists` (None or 0: all), then a seeded sample of `sample_lists` of those
  (`sample_lists` above: the same sample as cutting and sampling the lists read whole).
  """

  def select(count):
    count = min(count, max_lists) if max_lists else count
    return _sample_indices(count, sample_lists, seed) if sample_lists else list(range(count))

  return select

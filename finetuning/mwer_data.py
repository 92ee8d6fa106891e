"""N-best lists as MWER training data (`PreparedList`), the held-out split by speaker and the
batch order (docs/DESIGN.md §4.5)."""

import dataclasses
import math

import numpy as np

from evaluation import metrics
from util import io_utils

# ------------------------------------------------------------------- split


def speaker(key):
  """The speaker of a LibriSpeech utterance id "speaker-chapter-utterance"."""
  return key.split("-", 1)[0]


def split_by_speaker(lists, heldout_fraction, seed):
  """(train, heldout) lists in input order, a speaker held out by a hash of (seed, speaker), so
  its side does not depend on the other lists; ValueError when a side is empty or no training
  list has two hypotheses."""
  if not 0.0 < heldout_fraction < 1.0:
    raise ValueError(f"the held-out fraction must lie in (0, 1), got {heldout_fraction}")
  held = {
    s: io_utils.unit_hash(seed, f"speaker:{s}") < heldout_fraction
    for s in {speaker(l.key) for l in lists}
  }
  train = [l for l in lists if not held[speaker(l.key)]]
  heldout = [l for l in lists if held[speaker(l.key)]]
  if not train or not heldout:
    raise ValueError(
      f"holding out {heldout_fraction:g} of the {len(held)} speakers with seed {seed} leaves "
      f"{len(train)} training and {len(heldout)} held-out lists; change the fraction or the seed"
    )
  if all(len(l.hyps) < 2 for l in train):
    # Its expected errors cannot change: the MWER loss is 0 at every step and a run "trains" on.
    raise ValueError(
      f"each of the {len(train)} training lists holds one hypothesis: MWER learns from the "
      "differences between a list's hypotheses; give lists of 2 or more"
    )
  return train, heldout


# ------------------------------------------------------------------ lists


@dataclasses.dataclass
class PreparedList:
  """One N-best list of K hypotheses with F first-pass scores.

  Attributes:
    ids: [K] lists of `[BOS] pieces [EOS]` ids; `reference_ids` the reference's.
    features: float64 [K, F], the first-pass scores in `feature_names` order.
    words: float64 [K], words per hypothesis.
    errors: float64 [K], word errors (S + D + I) against the reference.
  """

  key: str
  texts: list
  ids: list
  feature_names: tuple
  features: np.ndarray
  words: np.ndarray
  errors: np.ndarray
  reference_ids: list
  reference_words: int


def prepare(lists, tokenize, feature_names, hyps_per_list=None):
  """(list[PreparedList] of the first `hyps_per_list` hypotheses, number of texts truncated).

  `tokenize` is `inference.NeuralLM.tokenize` (the ids the LM scores), or None to leave the ids
  empty for LM scores from elsewhere.
  """
  top = [dataclasses.replace(l, hyps=l.hyps[:hyps_per_list]) for l in lists]
  errors = metrics.hypothesis_errors(top)
  texts = [h.text for l in top for h in l.hyps] + [l.refs[0] for l in top]
  ids, truncated = tokenize(texts) if tokenize else ([[]] * len(texts), [False] * len(texts))
  references = iter(ids[len(texts) - len(top) :])
  ids = iter(ids)
  prepared = []
  for nbest_list, list_errors in zip(top, errors):
    prepared.append(
      PreparedList(
        key=nbest_list.key,
        texts=[h.text for h in nbest_list.hyps],
        ids=[next(ids) for _ in nbest_list.hyps],
        feature_names=tuple(feature_names),
        features=np.array(
          [[h.scores[name] for name in feature_names] for h in nbest_list.hyps], np.float64
        ).reshape(len(nbest_list.hyps), len(feature_names)),
        words=np.array([len(h.text.split()) for h in nbest_list.hyps], np.float64),
        errors=np.array(list_errors, np.float64),
        reference_ids=next(references),
        reference_words=len(nbest_list.refs[0].split()),
      )
    )
  return prepared, int(sum(truncated))


def padded(prepared):
  """float32 features [L, K_max, F], words, errors and valid (1 at real hypotheses) [L, K_max]."""
  width = max((len(p.texts) for p in prepared), default=0)
  num_features = prepared[0].features.shape[1] if prepared else 0
  out = {
    "features": np.zeros((len(prepared), width, num_features), np.float32),
    "words": np.zeros((len(prepared), width), np.float32),
    "errors": np.zeros((len(prepared), width), np.float32),
    "valid": np.zeros((len(prepared), width), np.float32),
  }
  for row, p in enumerate(prepared):
    k = len(p.texts)
    out["features"][row, :k] = p.features
    out["words"][row, :k] = p.words
    out["errors"][row, :k] = p.errors
    out["valid"][row, :k] = 1.0
  return out


# ------------------------------------------------------------ batch order


def steps_per_epoch(num_lists, lists_per_batch):
  return math.ceil(num_lists / lists_per_batch)


def batch_indices(num_lists, lists_per_batch, seed, step):
  """The list indices of global step `step`: a function of (seed, step) alone, so a resumed run
  sees the batches an uninterrupted one would."""
  per_epoch = steps_per_epoch(num_lists, lists_per_batch)
  epoch, within = divmod(step, per_epoch)
  order = np.random.default_rng([seed, epoch]).permutation(num_lists)
  return order[within * lists_per_batch : (within + 1) * lists_per_batch]

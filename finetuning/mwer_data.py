"""N-best lists as MWER training data (`PreparedList`: ids, first-pass scores, lengths, errors).

Hypotheses are tokenized as `inference.NeuralLM` scores them; training uses the top
`hyps_per_list`, evaluation the whole list. The held-out part is chosen by LibriSpeech speaker
(`split_by_speaker`); an epoch's batch order is a function of (seed, step) (`batch_indices`), so
a resumed run sees the batches an uninterrupted one would.
"""

import dataclasses
import math

import numpy as np

from evaluation import metrics
from util import io_utils

# ------------------------------------------------------------------- split


def speaker(key):
  """The speaker of a LibriSpeech utterance id "speaker-chapter-utterance" (the first field; a
  key without dashes is its own speaker)."""
  return key.split("-", 1)[0]


def split_by_speaker(lists, heldout_fraction, seed):
  """Splits lists into (train, heldout) by speaker, deterministically.

  A speaker is held out when `io_utils.unit_hash(seed, speaker)` < heldout_fraction: the same
  (speaker, seed) always lands on the same side, whatever the other lists or their order.

  Args:
    lists: list[NBestList].
    heldout_fraction: float in (0, 1), the expected share of speakers held out.
    seed: int.

  Returns:
    (train, heldout): lists of NBestList, each in input order.

  Raises:
    ValueError: a fraction out of range, or a split that leaves either side empty.
  """
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
  return train, heldout


# ------------------------------------------------------------------ lists


@dataclasses.dataclass
class PreparedList:
  """One N-best list as the rescorer trains and evaluates on it (K hypotheses, F first-pass
  scores).

  Attributes:
    key: the utterance id.
    texts: list[str] [K], the hypotheses.
    ids: list[list[int]] [K], `[BOS] pieces [EOS]` of each hypothesis.
    feature_names: tuple of the F first-pass score names.
    features: float64 [K, F], the first-pass scores, in the order of feature_names.
    words: float64 [K], words of each hypothesis.
    errors: float64 [K], word errors (S + D + I) against the reference.
    reference_ids: list[int], `[BOS] pieces [EOS]` of the reference.
    reference_words: int.
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
  """Prepares lists for training or evaluation.

  Args:
    lists: list[NBestList] with one reference each.
    tokenize: list of str -> (id lists `[BOS] pieces [EOS]`, truncated flags), e.g.
      `inference.NeuralLM.tokenize` (the model's normalisation and framing); None for lists
      whose LM scores come from elsewhere (ids are then left empty).
    feature_names: the first-pass scores to keep (`settings.first_pass_weights`).
    hyps_per_list: keep the first K hypotheses of each list (first-pass rank order); None: all.

  Returns:
    (list[PreparedList], number of truncated hypotheses and references).
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
  """The lists' per-hypothesis arrays padded to [L, K_max].

  Returns:
    dict of float32 arrays: features [L, K, F], words, errors and valid [L, K] (1 at real
    hypotheses, 0 at padding).
  """
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
  """Steps of one pass over `num_lists` lists; the last batch of an epoch may be smaller."""
  return math.ceil(num_lists / lists_per_batch)


def batch_indices(num_lists, lists_per_batch, seed, step):
  """The lists of global step `step` (counted from 0 over all epochs).

  Epoch e visits the lists in the order of a permutation seeded by (seed, e), so every step's
  batch is a function of (seed, step) alone: a resumed run continues with the same batches.

  Returns:
    int array of list indices.
  """
  per_epoch = steps_per_epoch(num_lists, lists_per_batch)
  epoch, within = divmod(step, per_epoch)
  order = np.random.default_rng([seed, epoch]).permutation(num_lists)
  return order[within * lists_per_batch : (within + 1) * lists_per_batch]

"""Whitening of sentence vectors (BERT-whitening, Su et al. 2021), fitted without labels.

`fit` takes the mean mu and the SVD U diag(s) U^T of the vectors' covariance, and the transform
maps x to (x - mu) U[:, :k] diag(s[:k])^-1/2: zero mean, identity covariance on the vectors it
was fitted on, the k directions of largest variance kept. Cosines of whitened vectors no longer
see the few directions every vector shares (anisotropy), which is what lifts BERT's STS scores.
A file of transforms (`save`, `load`: .npz, one per named column, e.g. "tta context") lets a
transform fitted on one text (a task's sentences, a corpus) whiten another.
"""

import dataclasses
import hashlib

import numpy as np

from util import io_utils

# Singular values of the covariance below this fraction of the largest are taken as zero: a
# direction the vectors do not span cannot be scaled to unit variance.
RANK_TOLERANCE = 1e-10


@dataclasses.dataclass
class Whitening:
  """x -> (x - mean) @ kernel.

  Attributes:
    mean: float64 [D].
    kernel: float64 [D, K], U[:, :K] diag(s[:K])^-1/2.
  """

  mean: np.ndarray
  kernel: np.ndarray

  @property
  def dims(self):
    """(D, K): the vectors it takes and gives."""
    return self.kernel.shape

  def apply(self, vectors):
    """float [N, D] -> float64 [N, K]."""
    return (np.asarray(vectors, np.float64) - self.mean) @ self.kernel

  def digest(self):
    """A short hash of the transform's numbers, for a run's identity."""
    h = hashlib.sha256(self.mean.tobytes())
    h.update(self.kernel.tobytes())
    return h.hexdigest()[:16]


def fit(vectors, dim):
  """The whitening of `vectors` (float [N, D]) to `dim` dimensions.

  Raises:
    ValueError: dim not in 1 .. D, fewer than 2 vectors, or vectors spanning fewer than `dim`
      directions (constant vectors span none).
  """
  vectors = np.asarray(vectors, np.float64)
  size = vectors.shape[1]
  if not 1 <= dim <= size:
    raise ValueError(f"{dim} dimensions asked of {size}-dimensional vectors (1 .. {size})")
  if len(vectors) < 2:
    raise ValueError(f"{len(vectors)} vector(s): a covariance needs at least 2")
  mean = vectors.mean(0)
  u, s, _ = np.linalg.svd(np.cov(vectors, rowvar=False), hermitian=True)
  rank = int(np.sum(s > RANK_TOLERANCE * max(s[0], np.finfo(np.float64).tiny)))
  if rank < dim:
    why = {
      0: " (they are all equal)",
      # (x - beta) / gamma of a LayerNorm's output sums to 0, and so does a mean of such.
      size - 1: f" (a LayerNorm's outputs, and their means, span at most {size - 1})",
    }
    raise ValueError(
      f"the {len(vectors)} vectors span {rank} direction(s), fewer than the {dim} asked for"
      + why.get(rank, "")
    )
  return Whitening(mean, u[:, :dim] / np.sqrt(s[:dim]))


def save(path, transforms):
  """Writes {name: Whitening} to the .npz `path`."""
  names = list(transforms)
  arrays = {"names": np.array(names, dtype=str)}
  for i, name in enumerate(names):
    arrays[f"mean_{i:d}"] = transforms[name].mean
    arrays[f"kernel_{i:d}"] = transforms[name].kernel
  with io_utils.atomic_open(path, "wb") as f:
    np.savez(f, **arrays)


def load(path):
  """{name: Whitening} of a `save`d .npz.

  Raises:
    ValueError: not a file of transforms; OSError: unreadable.
  """
  try:
    with np.load(path, allow_pickle=False) as data:
      return {
        str(name): Whitening(data[f"mean_{i:d}"], data[f"kernel_{i:d}"])
        for i, name in enumerate(data["names"])
      }
  except (KeyError, ValueError) as e:
    raise ValueError(f"{path}: not a file of whitening transforms ({e})") from None

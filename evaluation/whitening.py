"""BERT-whitening (Su et al. 2021): x -> (x - mu) U[:, :k] diag(s[:k])^-1/2, with mu the mean and
U diag(s) U^T the SVD of the vectors' covariance, fitted without labels. Cosines of whitened
vectors no longer see the few directions every vector shares (anisotropy)."""

import dataclasses
import hashlib
import io
import json
import zipfile
import zlib

import numpy as np

from lm import inference
from util import io_utils

# The fields of an LM's identity (`inference.describe`) that make the space its vectors are in: a
# transform fitted in one space means nothing in another. Left out are what changes only which
# tokens a score sums, how an over-long input is cut or windowed (a few vectors, not the space),
# and float rounding (backend, precision): under those a transform still fits.
MODEL_FIELDS = (
  "kind",
  "config",
  "weights_sha256",
  "vocab_sha256",
  "do_lower_case",
  "normalization",
  "normalization_rules",
  "boundary_tokens",
)

# Singular values of the covariance below this fraction of the largest are taken as zero: a
# direction the vectors do not span cannot be scaled to unit variance.
RANK_TOLERANCE = 1e-10


@dataclasses.dataclass
class Whitening:
  """x -> (x - mean) @ kernel: mean float64 [D], kernel float64 [D, K]; `fitted_for`:
  {"model": `model_identity`, "representation": str}, None for no model's vectors (unsavable)."""

  mean: np.ndarray
  kernel: np.ndarray
  fitted_for: dict = None

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


def model_identity(lm):
  """The part of `inference.describe(lm)` a transform of its vectors depends on (MODEL_FIELDS)."""
  described = inference.describe(lm)
  return {key: described[key] for key in MODEL_FIELDS if key in described}


def fit(vectors, dim, fitted_for=None):
  """The whitening of `vectors` float [N, D] to `dim` dimensions; ValueError when dim is not in
  1 .. D or the vectors (at least 2) span fewer than `dim` directions."""
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
  return Whitening(mean, u[:, :dim] / np.sqrt(s[:dim]), fitted_for)


def check_fitted_for(transform, fitted_for):
  """Raises ValueError naming every field that differs between what `transform` was fitted for
  and `fitted_for` (the model and representation it is to whiten), in one line."""
  have, want = transform.fitted_for, fitted_for
  differ = []
  if have["representation"] != want["representation"]:
    differ.append(f"representation {have['representation']!r}, not {want['representation']!r}")
  model, this = have["model"], want["model"]
  for key in sorted(set(model) | set(this)):
    if model.get(key) == this.get(key):
      continue
    if key == "config" and isinstance(model.get(key), dict):
      ours = this.get(key) or {}
      differ += [
        f"config {k} {model[key].get(k)!r}, not {ours.get(k)!r}"
        for k in sorted(set(model[key]) | set(ours))
        if model[key].get(k) != ours.get(k)
      ]
    else:
      differ.append(f"{key} {_short(model.get(key))}, not {_short(this.get(key))}")
  if differ:
    raise ValueError("fitted for another model or representation: " + "; ".join(differ))


def _short(value):
  """A field's value for a message: a sha256 cut to 12 hex digits."""
  return value[:12] if isinstance(value, str) and len(value) == 64 else repr(value)


def save(path, transforms):
  """Writes {name: Whitening} (each with its `fitted_for`) to the .npz `path`."""
  names = list(transforms)
  arrays = {"names": np.array(names, dtype=str)}
  for i, name in enumerate(names):
    if transforms[name].fitted_for is None:
      raise ValueError(f"{name!r}: a transform saved must say what it was fitted for")
    arrays[f"mean_{i:d}"] = transforms[name].mean
    arrays[f"kernel_{i:d}"] = transforms[name].kernel
    arrays[f"fitted_for_{i:d}"] = np.array(json.dumps(transforms[name].fitted_for, sort_keys=True))
  buffer = io.BytesIO()  # a zip writer tells and seeks: a bucket's files do neither
  np.savez(buffer, **arrays)
  with io_utils.atomic_open(path, "wb") as f:
    f.write(buffer.getvalue())


class BadTransformsError(ValueError):
  """A file of transforms that is not one, or is not fit to use: one line naming it."""


def load(path):
  """{name: Whitening} of a `save`d .npz, each checked (`_check`); one without what it was fitted
  for is refused, not trusted. BadTransformsError: one line naming `path`; OSError: unreadable.
  """
  with io_utils.open_file(path, "rb") as f:
    return _load(path, f)


def _load(path, f):
  """`load` of the open file `f` (local or remote, seekable)."""
  # np.load reads what is not a zip as a .npy or a pickle, and says so: a truncated .npz (its
  # directory is at the end) is told apart first.
  if not zipfile.is_zipfile(f):
    raise BadTransformsError(
      f"{path}: not a file of whitening transforms (no .npz: truncated, or another kind of file)"
    )
  f.seek(0)
  try:
    with np.load(f, allow_pickle=False) as data:
      names = data["names"]
      if names.ndim != 1 or names.dtype.kind != "U":
        raise BadTransformsError(f"{path}: its names are {names.dtype} {names.shape}, not str")
      out = {}
      for i, name in enumerate(names.tolist()):
        if f"fitted_for_{i:d}" not in data.files:
          raise BadTransformsError(
            f"{path}: {name!r} does not record the model it was fitted for (a file from before "
            "transforms did); fit it again: run_sts.py --whiten=DIM, its whitening/ dir"
          )
        fitted_for = json.loads(str(data[f"fitted_for_{i:d}"]))
        transform = Whitening(data[f"mean_{i:d}"], data[f"kernel_{i:d}"], fitted_for)
        _check(transform, f"{path}: {name!r}")
        out[name] = transform
      return out
  except BadTransformsError:
    raise
  except (KeyError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    # A damaged member fails to parse, or its CRC to match.
    raise BadTransformsError(
      f"{path}: not a file of whitening transforms ({e or type(e).__name__})"
    ) from None


def _check(transform, where):
  """BadTransformsError naming `where` unless shapes, numbers and `fitted_for` make a transform."""
  mean, kernel, fitted_for = transform.mean, transform.kernel, transform.fitted_for
  if (
    not isinstance(fitted_for, dict)
    or not isinstance(fitted_for.get("model"), dict)
    or not isinstance(fitted_for.get("representation"), str)
  ):
    raise BadTransformsError(f"{where}: what it was fitted for is not {{model, representation}}")
  for part, value in (("mean", mean), ("kernel", kernel)):
    if value.dtype.kind != "f":
      raise BadTransformsError(f"{where}: its {part} is {value.dtype}, not float")
  if mean.ndim != 1 or kernel.ndim != 2 or not 1 <= kernel.shape[1] <= kernel.shape[0]:
    raise BadTransformsError(
      f"{where}: a mean of shape {mean.shape} and a kernel of {kernel.shape}; a "
      "transform has a mean [D] and a kernel [D, K], 1 <= K <= D"
    )
  if mean.shape[0] != kernel.shape[0]:
    raise BadTransformsError(
      f"{where}: its mean has {mean.shape[0]} dimensions but its kernel takes {kernel.shape[0]}"
    )
  for part, value in (("mean", mean), ("kernel", kernel)):
    bad = int(value.size - np.count_nonzero(np.isfinite(value)))
    if bad:
      raise BadTransformsError(
        f"{where}: its {part} holds {bad} NaN or infinite value(s); fit it again"
      )

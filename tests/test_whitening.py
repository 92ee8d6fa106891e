"""evaluation/whitening.py on vectors whose covariance is known by construction."""

import numpy as np
import pytest

from evaluation import whitening

SCALES = np.array([5.0, 3.0, 2.0, 1.0, 0.5, 0.25])


def known_vectors(n=200, seed=0):
  """(vectors [n, 6], mean [6], axes [6, 6]): centred columns made orthonormal, so the sample
  covariance is exactly axes diag(SCALES^2) axes^T, axes a random rotation."""
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, len(SCALES)))
  q, _ = np.linalg.qr(z - z.mean(0))  # orthonormal columns, each summing to 0
  axes, _ = np.linalg.qr(rng.normal(size=(len(SCALES), len(SCALES))))
  mean = rng.normal(size=len(SCALES)) * 10
  return np.sqrt(n - 1) * q * SCALES @ axes.T + mean, mean, axes


def test_whitened_vectors_have_zero_mean_and_identity_covariance():
  vectors, mean, axes = known_vectors()
  np.testing.assert_allclose(np.cov(vectors, rowvar=False), axes * SCALES**2 @ axes.T, atol=1e-9)
  transform = whitening.fit(vectors, len(SCALES))
  np.testing.assert_allclose(transform.mean, mean, atol=1e-9)
  white = transform.apply(vectors)
  np.testing.assert_allclose(white.mean(0), 0, atol=1e-9)
  np.testing.assert_allclose(np.cov(white, rowvar=False), np.eye(len(SCALES)), atol=1e-9)


def test_truncation_keeps_the_directions_of_largest_variance():
  vectors, _, axes = known_vectors()
  transform = whitening.fit(vectors, 2)
  assert transform.dims == (6, 2)
  # Column k is the k-th largest axis scaled by 1 / its standard deviation (up to its sign).
  for k in range(2):
    column = transform.kernel[:, k]
    sign = np.sign(column @ axes[:, k])
    np.testing.assert_allclose(column, sign * axes[:, k] / SCALES[k], atol=1e-9)
  np.testing.assert_allclose(np.cov(transform.apply(vectors), rowvar=False), np.eye(2), atol=1e-9)


def test_save_and_load_give_the_same_transforms(tmp_path):
  vectors, _, _ = known_vectors()
  transforms = {"tta context": whitening.fit(vectors, 3), "bilm embed": whitening.fit(vectors, 2)}
  path = tmp_path / "whitening.npz"
  whitening.save(str(path), transforms)
  loaded = whitening.load(str(path))
  assert list(loaded) == list(transforms)
  for name, transform in transforms.items():
    np.testing.assert_array_equal(loaded[name].kernel, transform.kernel)
    np.testing.assert_array_equal(loaded[name].mean, transform.mean)
    assert loaded[name].digest() == transform.digest()


@pytest.mark.parametrize(
  "vectors,dim,message",
  [
    (np.ones((10, 4)), 2, "span 0 direction"),
    (np.eye(4)[:3], 3, "span 2 direction"),  # 3 points span a plane
    (np.eye(4), 5, "5 dimensions asked of 4-dimensional"),
    # Rows summing to 0, as a LayerNorm's normalised outputs: 3 directions of 4.
    (np.eye(4)[[0, 1, 2, 3, 0]] - 0.25, 4, "span at most 3"),
    (np.eye(4)[:1], 1, "at least 2"),
  ],
)
def test_unfit_vectors_are_refused(vectors, dim, message):
  with pytest.raises(ValueError, match=message):
    whitening.fit(vectors, dim)

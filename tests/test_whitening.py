"""evaluation/whitening.py on vectors whose covariance is known by construction; its files of
transforms, checked (finite, shapes, the model they were fitted for) when run_sts.py loads one."""

import re

import commands
from conftest import PAIRS
from conftest import WORDS
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

from evaluation import whitening
from lm import model_dir
import modeling
import tokenization

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
  model = {"kind": "tta", "weights_sha256": "0" * 64}
  transforms = {
    "tta context": whitening.fit(vectors, 3, {"model": model, "representation": "context"}),
    "bilm embed": whitening.fit(vectors, 2, {"model": model, "representation": "embed"}),
  }
  path = tmp_path / "whitening.npz"
  whitening.save(str(path), transforms)
  loaded = whitening.load(str(path))
  assert list(loaded) == list(transforms)
  for name, transform in transforms.items():
    np.testing.assert_array_equal(loaded[name].kernel, transform.kernel)
    np.testing.assert_array_equal(loaded[name].mean, transform.mean)
    assert loaded[name].digest() == transform.digest()
    assert loaded[name].fitted_for == transform.fitted_for


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


# ------------------------------------------------------------------ files of transforms, checked


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
  """(model dirs {"a", "b"}: two tiny T-TA of one vocab, a pairs file, the whitening/mine.npz
  that run_sts.py --whiten=4 fitted for "a" named tta)."""
  root = tmp_path_factory.mktemp("whiten")
  vocab = root / "vocab.txt"
  tokens = list(tokenization.SPECIAL_TOKENS) + list(WORDS)
  vocab.write_text("\n".join(tokens) + "\n")
  dirs = {}
  for seed, name in ((3, "a"), (4, "b")):
    tf.keras.utils.set_random_seed(seed)
    dirs[name] = str(root / name)
    model = modeling.build_model(tiny_config(vocab_size=len(tokens)), "tta")
    model_dir.save_model_dir(model, str(vocab), dirs[name])
  pairs = root / "mine.tsv"
  pairs.write_text("".join(f"{a}\t{b}\t{g}\n" for a, b, g in PAIRS))
  run_sts(dirs["a"], pairs, root / "fit", "--whiten=4", status=0)
  return dirs, pairs, root / "fit" / "whitening" / "mine.npz"


def run_sts(model, pairs, out, *flags, status=None):
  return commands.run(
    "run_sts.py",
    f"--model_dir=tta={model}",
    f"--pairs_file={pairs}",
    "--representations=context",
    f"--output_dir={out}",
    *flags,
    status=status,
  )


@pytest.mark.slow(seconds=2)
def test_a_transform_fitted_for_another_model_of_the_same_name_is_refused(fitted, tmp_path):
  dirs, pairs, npz = fitted
  out = tmp_path / "out"
  line = commands.one_error_line(run_sts(dirs["b"], pairs, out, f"--whiten_load={npz}"))
  assert "'tta context' was fitted for another model" in line and "weights_sha256" in line, line
  assert not (out / "pairs").exists() and not (out / "pairs_results.json").exists()
  # The model it was fitted for takes it.
  run_sts(dirs["a"], pairs, tmp_path / "same", f"--whiten_load={npz}", status=0)


def doctored(path, out, edit):
  """A copy of the .npz `path` at `out` with its arrays changed by `edit` (a function of the
  {key: array} dict)."""
  with np.load(path, allow_pickle=False) as data:
    arrays = {key: data[key] for key in data.files}
  edit(arrays)
  np.savez(out, **arrays)
  return out


def with_value(key, index, value):
  def edit(arrays):
    arrays[key] = arrays[key].copy()
    arrays[key][index] = value

  return edit


@pytest.mark.parametrize(
  "damage, edit, named",
  [
    ("nan", with_value("kernel_0", (3, 1), np.nan), "its kernel holds 1 NaN or infinite"),
    ("inf", with_value("mean_0", 5, np.inf), "its mean holds 1 NaN or infinite"),
    (
      "shapes",
      lambda a: a.update(mean_0=np.concatenate([a["mean_0"], [0.0]])),
      "its mean has 33 dimensions but its kernel takes 32",
    ),
    (
      "old",
      lambda a: [a.pop(k) for k in list(a) if not re.match(r"^(names|mean_\d+|kernel_\d+)$", k)],
      "does not record the model it was fitted for",
    ),
    ("truncated", None, "not a file of whitening transforms"),
  ],
)
def test_a_damaged_file_of_transforms_is_one_line_before_any_output(
  fitted, tmp_path, damage, edit, named
):
  dirs, pairs, npz = fitted
  path = tmp_path / f"{damage}.npz"
  if edit is None:
    path.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
  else:
    doctored(npz, path, edit)
  out = tmp_path / "out"
  line = commands.one_error_line(run_sts(dirs["a"], pairs, out, f"--whiten_load={path}"))
  assert str(path) in line and named in line, line
  assert not out.exists()


def test_check_fitted_for_names_every_field_that_differs():
  model = {
    "kind": "tta",
    "config": {"hidden_size": 32, "vocab_size": 99},
    "weights_sha256": "a" * 64,
  }
  transform = whitening.Whitening(
    np.zeros(2), np.eye(2), {"model": model, "representation": "context"}
  )
  whitening.check_fitted_for(transform, {"model": dict(model), "representation": "context"})
  other = dict(model, config={"hidden_size": 64, "vocab_size": 99}, weights_sha256="b" * 64)
  with pytest.raises(ValueError) as error:
    whitening.check_fitted_for(transform, {"model": other, "representation": "embed"})
  assert str(error.value) == (
    "fitted for another model or representation: representation 'context', not 'embed'; "
    "config hidden_size 32, not 64; weights_sha256 aaaaaaaaaaaa, not bbbbbbbbbbbb"
  )

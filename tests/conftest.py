"""Makes the flat top-level modules importable and keeps TF quiet."""

import os
import sys

import pytest

import modeling

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


# BERT's test habit: a tiny config that builds and runs in milliseconds. Tests
# override what their case needs (a vocab size, a layer count).
TINY = dict(
  vocab_size=99,
  hidden_size=32,
  num_hidden_layers=2,
  num_attention_heads=4,
  intermediate_size=37,
  max_position_embeddings=16,
)


def tiny_config(**overrides):
  """A `modeling.TTAConfig` of TINY updated with `overrides`."""
  return modeling.TTAConfig(**dict(TINY, **overrides))


# Words and pieces of the tiny vocabulary the inference and export tests share: enough for
# sentences with continuation pieces ("walk ##ing"), punctuation and an unknown word.
WORDS = (
  "the",
  "cat",
  "sat",
  "on",
  "mat",
  "a",
  "dog",
  "ran",
  "far",
  "away",
  "##s",
  "##ed",
  "run",
  "walk",
  "##ing",
  ".",
  ",",
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  """A lower-casing `FullTokenizer` of the special tokens followed by WORDS."""
  import tokenization  # pylint: disable=g-import-not-at-top

  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(WORDS)) + "\n")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


def data_dir_or_skip(subdir=""):
  """The shared data root, or a skip naming what is missing."""
  import io_utils  # pylint: disable=g-import-not-at-top

  try:
    root = io_utils.data_root()
  except FileNotFoundError as e:
    pytest.skip(f"shared data not available: {e}")
  if not os.path.isdir(os.path.join(root, subdir)):
    pytest.skip(f"shared data folder {subdir} missing under {root}")
  return root

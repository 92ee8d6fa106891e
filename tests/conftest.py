"""Makes the flat top-level modules importable and keeps TF quiet."""
import os
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def data_dir_or_skip(subdir=""):
  """The shared data root, or a skip naming what is missing."""
  import nbest  # pylint: disable=g-import-not-at-top
  try:
    root = nbest.default_data_dir()
  except FileNotFoundError as e:
    pytest.skip(f"shared data not available: {e}")
  if not os.path.isdir(os.path.join(root, subdir)):
    pytest.skip(f"shared data folder {subdir} missing under {root}")
  return root

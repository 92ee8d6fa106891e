"""The shared data's N-best sets: the LibriSpeech ESPnet sets' paths, the WMT21 candidates."""

import glob
import os

from nbest import text_files
from nbest import types
from util import io_utils

ESPNET_DIR = "asr-librispeech-espnet2-30best"
ESPNET_SETS = ("dev_clean", "dev_other", "test_clean", "test_other")
WMT_DIR = "nmt-wmt21-deen-multisystem"


def espnet_set_path(path_or_set_name, data_dir):
  """An existing path, or a set name's archive in the data root; else FileNotFoundError."""
  if os.path.exists(path_or_set_name):
    return path_or_set_name
  name = path_or_set_name.replace("-", "_")
  if name not in ESPNET_SETS:
    raise FileNotFoundError(
      f"{path_or_set_name!r} is neither an existing path nor one of {ESPNET_SETS}"
    )
  return os.path.join(io_utils.data_root(data_dir), ESPNET_DIR, name + ".tar.xz")


def read_wmt_candidates(data_dir=None, pair="de-en", testset="newstest2021"):
  """The WMT21 system outputs as one list per segment (key "1", "2", ...): references and
  systems in file-name order, no scores."""
  root = os.path.join(io_utils.data_root(data_dir), WMT_DIR)
  ref_paths = sorted(glob.glob(os.path.join(root, "references", f"{testset}.{pair}.ref.*")))
  hyp_paths = sorted(glob.glob(os.path.join(root, "system-outputs", f"{testset}.{pair}.hyp.*")))
  if not ref_paths or not hyp_paths:
    raise ValueError(
      f"{root}: expected references/{testset}.{pair}.ref.* and "
      f"system-outputs/{testset}.{pair}.hyp.*, found {len(ref_paths)} and "
      f"{len(hyp_paths)} files"
    )
  ref_columns = [
    [
      text_files.check_reference(line, f"{path}:{n}")
      for n, line in enumerate(text_files.split_lines(text_files.read_text_file(path)), 1)
    ]
    for path in ref_paths
  ]
  hyp_columns = [
    [line.strip() for line in text_files.split_lines(text_files.read_text_file(path))]
    for path in hyp_paths
  ]
  n_segments = len(ref_columns[0])
  if n_segments == 0:
    raise ValueError(f"{ref_paths[0]}:1: no segments")
  for path, column in zip(ref_paths + hyp_paths, ref_columns + hyp_columns):
    if len(column) != n_segments:
      raise ValueError(
        f"{path}:{min(len(column), n_segments) + 1}: {len(column)} lines, "
        f"but {ref_paths[0]} has {n_segments} (files must be line-aligned)"
      )
  prefix = f"{testset}.{pair}.hyp."
  systems = [os.path.basename(path)[len(prefix) :].rsplit(".", 1)[0] for path in hyp_paths]
  return [
    types.NBestList(
      key=str(i + 1),
      refs=[column[i] for column in ref_columns],
      hyps=[
        types.Hypothesis(text=column[i], system=name) for name, column in zip(systems, hyp_columns)
      ],
    )
    for i in range(n_segments)
  ]

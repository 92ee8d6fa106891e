"""Throughput of `score.py` (sentences/s) for T-TA, biLM and uniLM, per setup (docs/runtime.md).

Random paper-size model dirs score the first --max_lists LibriSpeech test_clean lists as a user
runs score.py (a fresh process: "wall" includes TF's start-up, "scoring" does not); medians of
--runs. Setups: tf, tf_mirrored_x2 (two logical CPU devices: the replica path's overhead, not a
speed-up), openvino, openvino_bf16, onnxruntime.

  python scripts/score_throughput.py --models=tta --runs=1 --setups=tf,openvino
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

import kinds  # noqa: E402
from util import io_utils  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("models", list(kinds.PRETRAINABLE), "Model types to time.")
flags.DEFINE_integer("max_lists", 20, "test_clean 30-best lists to score (20 lists = 600 lines).")
flags.DEFINE_integer("runs", 3, "Timed runs per cell (median reported).")
flags.DEFINE_integer("batch_size", 256, "score.py --batch_size.")
io_utils.define_data_dir_flag()

SETUPS = {
  "tf": [],
  "tf_mirrored_x2": ["--strategy=mirrored", "--num_cpu_devices=2"],
  "openvino": ["--backend=openvino"],
  "openvino_bf16": ["--backend=openvino_bf16"],
  "onnxruntime": ["--backend=onnxruntime"],
}
flags.DEFINE_list(
  "setups",
  None,
  f"Setups to time, of {list(SETUPS)} (default: all; openvino_bf16 only on a CPU with bf16).",
)


def write_inputs(work, data_dir):
  """The hypotheses of the first lists of test_clean, one per line; returns the path."""
  from nbest.formats import espnet  # pylint: disable=g-import-not-at-top

  lists = espnet.read_espnet_nbest("test_clean", data_dir)[: FLAGS.max_lists]
  path = os.path.join(work, "sentences.txt")
  with open(path, "w", encoding="utf-8") as f:
    for nbest_list in lists:
      f.writelines(h.text + "\n" for h in nbest_list.hyps)
  return path


def write_model_dirs(work, data_dir):
  """Random paper-size model dirs, one per --models entry."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from lm import model_dir  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top

  vocab = os.path.join(data_dir, "reference-vocab", "tta-vocab-lower.sub-32k.txt")
  with open(vocab, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  dirs = {}
  for model_type in FLAGS.models:
    tf.keras.utils.set_random_seed(0)
    config = modeling.TTAConfig(vocab_size=vocab_size)
    dirs[model_type] = os.path.join(work, model_type)
    model_dir.save_model_dir(modeling.build_model(config, model_type), vocab, dirs[model_type])
  return dirs


def time_run(model_path, inputs, output, extra):
  """Seconds of one score.py process (wall, start-up included)."""
  command = [
    sys.executable,
    os.path.join(_REPO, "score.py"),
    f"--model_dir={model_path}",
    f"--input_file={inputs}",
    f"--output_file={output}",
    f"--batch_size={FLAGS.batch_size}",
    *extra,
  ]
  start = time.perf_counter()
  result = subprocess.run(command, capture_output=True, text=True)
  seconds = time.perf_counter() - start
  if result.returncode:
    raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
  os.remove(output)
  return seconds


def startup_seconds(model_path, work, extra):
  """Seconds of a score.py process given one empty line: start-up, model load, no scoring."""
  empty = os.path.join(work, "empty.txt")
  with open(empty, "w") as f:
    f.write("\n")
  return statistics.median(
    time_run(model_path, empty, os.path.join(work, "out.jsonl"), extra) for _ in range(FLAGS.runs)
  )


def chosen_setups():
  """--setups (checked), or every setup this CPU can run."""
  from lm import backends  # pylint: disable=g-import-not-at-top

  if FLAGS.setups:
    unknown = sorted(set(FLAGS.setups) - set(SETUPS))
    if unknown:
      raise app.UsageError(f"--setups: {unknown} not among {list(SETUPS)}")
    return {name: SETUPS[name] for name in FLAGS.setups}
  names = [n for n in SETUPS if n != "openvino_bf16" or backends.openvino_cpu_has_bf16()]
  return {name: SETUPS[name] for name in names}


def main(argv):
  del argv
  setups = chosen_setups()
  data_dir = io_utils.data_root(FLAGS.data_dir)
  with tempfile.TemporaryDirectory() as work:
    inputs = write_inputs(work, data_dir)
    with open(inputs, encoding="utf-8") as f:
      lines = sum(1 for _ in f)
    dirs = write_model_dirs(work, data_dir)
    print(
      f"CPU: {machine.cpu_model()}; commit {machine.git_commit()}; {lines} test_clean hypotheses"
    )
    print("| model | setup | wall s | start-up s | sentences/s (scoring) |")
    print("|---|---|---:|---:|---:|")
    for model_type, path in dirs.items():
      for setup, extra in setups.items():
        startup = startup_seconds(path, work, extra)
        out = os.path.join(work, "out.jsonl")
        wall = statistics.median(time_run(path, inputs, out, extra) for _ in range(FLAGS.runs))
        rate = lines / max(wall - startup, 1e-9)
        print(f"| {model_type} | {setup} | {wall:.1f} | {startup:.1f} | {rate:.1f} |", flush=True)


if __name__ == "__main__":
  app.run(main)

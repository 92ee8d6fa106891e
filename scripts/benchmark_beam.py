"""Hypotheses per second of one score.py process against beam_score.py on the Beam DirectRunner
with --workers processes (issue 54 item 7), on the hypotheses of a shared ESPnet N-best set.

Each command is a fresh process timed whole, as a user runs it, and again on a one-line input:
its start-up (Python, TensorFlow, Beam's workers, the model; a Beam worker pays them once each),
which the rate "after start-up" leaves out. Both write the same file, checked byte for byte.
Results to --output_dir/results.{json,md} with the CPU, load and commit. A model: --model_dir,
else a random paper-size T-TA (3 x 512, the reference 32k vocab): a trained one's rate is the
same.

  source scripts/setup_beam.sh
  python scripts/benchmark_beam.py                  # all of test_clean: 78.6k hypotheses
  python scripts/benchmark_beam.py --max_lists=3    # a smoke run
"""

import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from util import io_utils  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "The LM (any --model_dir of score.py); default: random.")
flags.DEFINE_string(
  "test_set", "test_clean", "Shared ESPnet N-best set whose hypotheses are scored."
)
flags.DEFINE_integer("max_lists", 0, "Only the first N lists (0: all).", lower_bound=0)
flags.DEFINE_integer("workers", 2, "DirectRunner worker processes.", lower_bound=1)
flags.DEFINE_integer("num_shards", 16, "beam_score.py --num_shards.", lower_bound=1)
flags.DEFINE_integer("batch_size", 256, "--batch_size of both commands.", lower_bound=1)
flags.DEFINE_string(
  "output_dir", os.path.join(_REPO, "runs", "benchmark_beam"), "Where the results go."
)
io_utils.define_data_dir_flag()


def write_hypotheses(path, data_dir):
  """Every hypothesis of the chosen lists, one per line; returns their number."""
  from nbest.formats import espnet  # pylint: disable=g-import-not-at-top

  lists = espnet.read_espnet_nbest(FLAGS.test_set, data_dir)
  lists = lists[: FLAGS.max_lists] if FLAGS.max_lists else lists
  with open(path, "w", encoding="utf-8") as f:
    for nbest_list in lists:
      f.writelines(h.text + "\n" for h in nbest_list.hyps)
  return sum(len(l.hyps) for l in lists), len(lists)


def random_tta(path, data_dir):
  """A random paper-size T-TA model dir over the reference vocab."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from lm import model_dir  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top

  vocab = os.path.join(data_dir, "reference-vocab", "tta-vocab-lower.sub-32k.txt")
  with open(vocab, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  tf.keras.utils.set_random_seed(0)
  config = modeling.TTAConfig(vocab_size=vocab_size)
  model_dir.save_model_dir(modeling.build_model(config, "tta"), vocab, path)
  return path


def time_command(script, args, log_path):
  """Wall seconds of `python script args`; RuntimeError naming its log when it fails."""
  start = time.perf_counter()
  with open(log_path, "w", encoding="utf-8") as log:
    result = subprocess.run(
      [sys.executable, os.path.join(_REPO, script), *args],
      cwd=_REPO,
      stdout=log,
      stderr=subprocess.STDOUT,
      check=False,
    )
  seconds = time.perf_counter() - start
  if result.returncode:
    raise RuntimeError(f"{script} failed (exit {result.returncode}); its output: {log_path}")
  return seconds


def main(argv):
  del argv
  try:
    import apache_beam  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    raise app.UsageError("Apache Beam is not installed: source scripts/setup_beam.sh") from None
  data_dir = io_utils.data_root(FLAGS.data_dir)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  with tempfile.TemporaryDirectory() as work:
    inputs = os.path.join(work, "hypotheses.txt")
    hypotheses, num_lists = write_hypotheses(inputs, data_dir)
    model = FLAGS.model_dir or random_tta(os.path.join(work, "tta"), data_dir)
    empty = os.path.join(work, "one_line.txt")
    with open(empty, "w", encoding="utf-8") as f:
      f.write("a\n")
    load_before = machine.load_average()
    seconds, startup = {}, {}
    for name, script, extra in (
      ("score", "score.py", []),
      (
        "beam",
        "beam_score.py",
        [
          f"--num_shards={FLAGS.num_shards}",
          f"--direct_num_workers={FLAGS.workers}",
          "--direct_running_mode=multi_processing",
        ],
      ),
    ):
      common = [f"--model_dir={model}", f"--batch_size={FLAGS.batch_size}", *extra]
      # Start-up: the same command on a one-line input (Python, TensorFlow, Beam, the model).
      out = os.path.join(work, f"{name}_startup.jsonl")
      startup[name] = time_command(
        script,
        [*common, f"--input_file={empty}", f"--output_file={out}"],
        os.path.join(FLAGS.output_dir, f"{name}_startup.log"),
      )
      out = os.path.join(work, f"{name}.jsonl")
      seconds[name] = time_command(
        script,
        [*common, f"--input_file={inputs}", f"--output_file={out}"],
        os.path.join(FLAGS.output_dir, f"{name}.log"),
      )
    same = filecmp.cmp(
      os.path.join(work, "score.jsonl"), os.path.join(work, "beam.jsonl"), shallow=False
    )
  results = {
    "cpu": machine.cpu_and_cores(),
    "commit": machine.git_commit(),
    "load_average": [load_before, machine.load_average()],
    "test_set": FLAGS.test_set,
    "lists": num_lists,
    "hypotheses": hypotheses,
    "model_dir": FLAGS.model_dir or "random paper-size T-TA",
    "workers": FLAGS.workers,
    "num_shards": FLAGS.num_shards,
    "batch_size": FLAGS.batch_size,
    "seconds": {k: round(v, 1) for k, v in seconds.items()},
    "startup_seconds": {k: round(v, 1) for k, v in startup.items()},
    "hypotheses_per_second": {k: round(hypotheses / v, 1) for k, v in seconds.items()},
    # The rate once started: what N machines multiply (None: the run was no longer than its
    # start-up, as on a few lists of a busy machine).
    "scoring_hypotheses_per_second": {
      k: round(hypotheses / (seconds[k] - startup[k]), 1) if seconds[k] > startup[k] else None
      for k in seconds
    },
    "same_output": same,
  }
  rates, scoring = results["hypotheses_per_second"], results["scoring_hypotheses_per_second"]
  table = "\n".join(
    [
      f"{hypotheses} hypotheses of {num_lists} {FLAGS.test_set} lists; {results['cpu']}; commit "
      f"{results['commit']}; load {load_before} -> {results['load_average'][1]}",
      "",
      "| run | wall s | start-up s | hypotheses/s (wall) | hypotheses/s (after start-up) |",
      "|---|---:|---:|---:|---:|",
      *(
        f"| {label} | {seconds[k]:.1f} | {startup[k]:.1f} | {rates[k]:.1f} | "
        f"{'n/a' if scoring[k] is None else f'{scoring[k]:.1f}'} |"
        for k, label in (
          ("score", "score.py, one process"),
          ("beam", f"beam_score.py, DirectRunner x{FLAGS.workers} processes"),
        )
      ),
      "",
      f"Outputs byte-identical: {same}.",
    ]
  )
  with open(os.path.join(FLAGS.output_dir, "results.json"), "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2)
  with open(os.path.join(FLAGS.output_dir, "results.md"), "w", encoding="utf-8") as f:
    f.write(table + "\n")
  print(table)
  if not same:
    raise SystemExit("beam_score.py's output differs from score.py's")


if __name__ == "__main__":
  app.run(main)

"""Per-step time of length-bucketed against fixed-length (--pad_to_max_seq_length) batches.

Trains the same model on the same records twice under --strategy=mirrored over --num_cpu_devices
logical CPU devices, with run_pretraining.py's own loop (`training_job.train`, one step per
tf.function call, no checkpoint but the last, no eval): once with length buckets (every replica of
a step gets one bucket: docs/DESIGN.md §3.2), once with every batch padded to --max_seq_length.
Prints per mode the median and mean milliseconds per step (each step's time from the run's
TensorBoard scalars; the first call, which traces, is left out; under --use_xla the first step of
each new shape includes its compilation, which the mean keeps and the median drops), real (unpadded)
tokens/s and the distinct (global batch, padded length) shapes the steps ran on, with the CPU and
commit. A benchmark, not a test: run it on a quiet machine.

  python create_pretraining_data.py ... --output_dir=records   # any records dir
  python scripts/benchmark_step_shapes.py --input_file='records/train-*.tfrecord' --steps=200
"""

import glob
import os
import sys
import tempfile

from absl import flags
import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from util import cli  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string(
  "input_file", None, "Glob of training TFRecords (create_pretraining_data.py).", required=True
)
flags.DEFINE_string("vocab_file", None, "The records' vocab (default: the vocab.txt beside them).")
flags.DEFINE_enum("model_type", "tta", ["tta", "bilm", "unilm"], "Which LM trains.")
flags.DEFINE_list(
  "size", ["2", "128", "2", "512"], "layers,hidden,heads,ffn of the model (tiny to small)."
)
flags.DEFINE_integer("train_batch_size", 32, "Global batch (split over the devices).")
flags.DEFINE_integer("max_seq_length", 128, "The fixed mode's length and the longest bucket.")
flags.DEFINE_list("bucket_boundaries", None, "The bucketed mode's (default: the pipeline's).")
flags.DEFINE_integer("steps", 100, "Steps timed per mode (after the first, tracing, one).")
flags.DEFINE_integer("num_cpu_devices", 2, "Logical CPU devices mirrored over.")
flags.DEFINE_bool("use_xla", False, "jit_compile the step: each new shape is a compilation.")

MODES = ("bucketed", "fixed")


def integers(name):
  """The integers of the list flag `name` (cli.InputError naming it otherwise)."""
  try:
    return [int(v) for v in FLAGS[name].value or ()]
  except ValueError:
    raise cli.InputError(
      f"--{name}: expected integers, got {','.join(FLAGS[name].value)}"
    ) from None


def mode_params(mode, output_dir):
  """run_pretraining.py's JobParams of `mode` (one of MODES), writing into output_dir."""
  from pretraining import training_job  # pylint: disable=g-import-not-at-top

  layers, hidden, heads, ffn = integers("size")
  return training_job.JobParams(
    output_dir=output_dir,
    model_type=FLAGS.model_type,
    input_file=FLAGS.input_file,
    vocab_file=FLAGS.vocab_file,
    config_overrides={
      "num_hidden_layers": layers,
      "hidden_size": hidden,
      "num_attention_heads": heads,
      "intermediate_size": ffn,
      "max_position_embeddings": max(FLAGS.max_seq_length, 64),
    },
    train_batch_size=FLAGS.train_batch_size,
    max_seq_length=FLAGS.max_seq_length,
    bucket_boundaries=((integers("bucket_boundaries") or None) if mode == "bucketed" else None),
    pad_to_max_seq_length=mode == "fixed",
    num_train_steps=FLAGS.steps + 1,
    num_warmup_steps=0,
    save_checkpoints_steps=0,
    log_every_steps=0,
    steps_per_loop=1,
    strategy="mirrored",
    num_cpu_devices=FLAGS.num_cpu_devices,
    use_xla=FLAGS.use_xla,
    seed=0,
    install_signal_handlers=False,
  )


def step_seconds(output_dir):
  """Each step's seconds but the first's, from the run's TensorBoard scalar steps_per_second."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  by_step = {}
  for path in glob.glob(os.path.join(output_dir, "train", "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == "steps_per_second":
          by_step[event.step] = 1.0 / float(tf.make_ndarray(value.tensor))
  return [seconds for step, seconds in sorted(by_step.items()) if step > 1]


def run_mode(mode, strategy, work):
  """Trains `mode` in a fresh dir of `work`; returns its figures."""
  from pretraining import training_job  # pylint: disable=g-import-not-at-top

  output_dir = os.path.join(work, mode)
  summary = training_job.train(mode_params(mode, output_dir), strategy)
  seconds = step_seconds(output_dir)
  return {
    "ms_per_step_median": 1000.0 * float(np.median(seconds)),
    "ms_per_step_mean": 1000.0 * float(np.mean(seconds)),
    "tokens_per_second": summary["tokens_per_second"],
    "distinct_shapes": summary["step_shapes"],
    "timed_steps": len(seconds),
  }


def main(argv):
  del argv
  if len(FLAGS.size) != 4:
    raise cli.InputError(f"--size: expected layers,hidden,heads,ffn, got {','.join(FLAGS.size)}")
  if FLAGS.steps < 2 or FLAGS.num_cpu_devices < 2:
    raise cli.InputError("--steps and --num_cpu_devices must be at least 2")
  # Logical devices are made before TensorFlow's first op.
  from pretraining import training_job  # pylint: disable=g-import-not-at-top
  from util import distribute_utils  # pylint: disable=g-import-not-at-top

  strategy = distribute_utils.get_strategy("mirrored", num_cpu_devices=FLAGS.num_cpu_devices)
  with cli.user_input():
    training_job.check_data(mode_params("bucketed", ""))
  with tempfile.TemporaryDirectory() as work:
    figures = {mode: run_mode(mode, strategy, work) for mode in MODES}
  print(f"CPU: {machine.cpu_and_cores()}; commit {machine.git_commit()}")
  print(
    f"{FLAGS.model_type} {'x'.join(FLAGS.size)} (layers x hidden x heads x ffn), global batch "
    f"{FLAGS.train_batch_size} over {FLAGS.num_cpu_devices} logical CPU devices, max_seq_length "
    f"{FLAGS.max_seq_length}{', XLA' if FLAGS.use_xla else ''}; {FLAGS.steps} steps timed per mode"
  )
  print(f"{'mode':<10} {'ms/step median':>15} {'ms/step mean':>13} {'tokens/s':>10} {'shapes':>7}")
  for mode, f in figures.items():
    print(
      f"{mode:<10} {f['ms_per_step_median']:>15.1f} {f['ms_per_step_mean']:>13.1f} "
      f"{f['tokens_per_second']:>10,.0f} {f['distinct_shapes']:>7d}"
    )


if __name__ == "__main__":
  cli.run(main)

"""Eval loss, perplexity and accuracy against training step for several run_pretraining.py runs,
read from each run's TensorBoard eval events (`OUTPUT_DIR/eval/events.out.tfevents.*`): a
Markdown table on stdout and, with --plot, eval loss against step (one line per run, runs of one
group in one colour, e.g. the seeds of warm and scratch). A reporting tool for studies such as
docs/warm_start.md; it trains nothing.

  python scripts/eval_curves.py --run=warm/s1=runs/tta_warm_s1 --run=warm/s2=runs/tta_warm_s2 \\
    --run=scratch/s1=runs/tta_scratch_s1 --plot=docs/warm_start.png
"""

import glob
import os
import sys

from absl import flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from util import cli  # noqa: E402
from util import startup_log  # noqa: E402,F401  (held back: TensorFlow's start-up lines)

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("run", [], "GROUP/LABEL=OUTPUT_DIR of a run_pretraining.py run.")
flags.DEFINE_string("plot", None, "Write eval loss against step to this PNG.")
flags.DEFINE_string("title", "eval loss against training step", "The plot's title.")

METRICS = ("loss", "perplexity", "accuracy")


def eval_history(output_dir):
  """{step: {metric: value}} of a run's eval events; the last event of a step wins (a resumed
  run that evaluated a step again)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  paths = sorted(glob.glob(os.path.join(output_dir, "eval", "events.out.tfevents.*")))
  if not paths:
    raise cli.InputError(
      f"--run: no eval events in {output_dir}/eval (run with --eval_every_steps)"
    )
  history = {}
  for path in paths:
    # Events read as records: summary_iterator is deprecated and warns.
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        if value.tag in METRICS:
          history.setdefault(event.step, {})[value.tag] = float(tf.make_ndarray(value.tensor))
  return history


def parse_run(spec):
  """ "warm/s1=DIR" -> ("warm", "s1", DIR)."""
  name, sep, output_dir = spec.partition("=")
  group, _, label = name.partition("/")
  if not sep or not group or not output_dir:
    raise cli.InputError(f"--run: expected GROUP/LABEL=OUTPUT_DIR, got {spec!r}")
  return group, label or group, output_dir


def table(runs):
  """Markdown rows: one per (run, evaluated step)."""
  lines = ["| run | step | eval loss | perplexity | accuracy |", "|---|---:|---:|---:|---:|"]
  for (group, label, _), history in runs:
    for step, m in sorted(history.items()):
      lines.append(
        f"| {group} {label} | {step} | {m['loss']:.3f} | {m['perplexity']:.1f} "
        f"| {m['accuracy']:.3f} |"
      )
  return "\n".join(lines)


def plot(runs, path, title):
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  groups = sorted({group for (group, _, _), _ in runs})
  colours = {group: f"C{i}" for i, group in enumerate(groups)}
  fig, ax = plt.subplots(figsize=(6, 4))
  for (group, label, _), history in runs:
    steps = sorted(history)
    ax.plot(
      steps,
      [history[s]["loss"] for s in steps],
      "o-",
      color=colours[group],
      label=f"{group} {label}",
    )
  ax.set_xlabel("training step")
  ax.set_ylabel("eval loss (nats per token)")
  ax.set_title(title)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)


def main(argv):
  del argv
  if not FLAGS.run:
    raise cli.InputError("--run: give at least one GROUP/LABEL=OUTPUT_DIR")
  specs = [parse_run(spec) for spec in FLAGS.run]
  runs = [(spec, eval_history(spec[2])) for spec in specs]
  print(table(runs))
  if FLAGS.plot:
    plot(runs, FLAGS.plot, FLAGS.title)
    print(f"plot: {FLAGS.plot}")


if __name__ == "__main__":
  cli.run(main)

# coding=utf-8
"""Pretrains a T-TA, biLM or uniLM: flags -> `training_job.JobParams` -> `training_job.run`.

Each flag is a `JobParams` field (the model-size flags and --config_json override config
fields). pretraining/training_job.py owns the run, checkpoints, resume and signals; the manual and
exit codes: README "Pretrain"; the design: docs/DESIGN.md §3.

  python run_pretraining.py --model_type=tta --input_file='data/train-*.tfrecord' \\
    --vocab_file=data/vocab.txt --output_dir=runs/tta --num_train_steps=100000
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
import os

# Before TensorFlow starts: its default CPU allocator hands every large
# buffer (a [2048, 30000] logits tensor is 245 MB) back to the OS and takes
# it again, page-faulting on each step; the BFC pool keeps them (the speed-up
# measured: docs/DESIGN.md §6).
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags

from pretraining import training_job
from pretraining import training_loop
from util import cli


def define_flags(flag_values=flags.FLAGS):
  """Defines the command-line flags (BERT's names where BERT has them), in `flag_values`."""
  cli.define_param_flags(training_job.JobParams, flag_values)


def main(argv):
  del argv
  # cli.run prints a cli.InputError (a bad flag; training_loop.OutputDirBusy) as one line.
  try:
    summary = training_job.run(cli.params(training_job.JobParams))
  except training_loop.WorkerLost as e:
    training_loop.exit_unfinished(str(e))
  if summary["stopped_by"] == training_loop.NONFINITE:
    last = summary["checkpoint"]
    training_loop.exit_nonfinite(
      f"stopped at step {summary['final_step']} by non-finite losses or gradients; "
      + (f"the last good checkpoint is {last}" if last else "no checkpoint was saved")
    )
  if not summary["finished"]:
    training_loop.exit_unfinished(
      f"stopped by {summary['stopped_by']} at step {summary['final_step']} before --num_train_steps"
    )


if __name__ == "__main__":
  define_flags()
  cli.run(main)

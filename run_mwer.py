"""Discriminative (MWER) training of a neural LM as an N-best rescorer, and its evaluation.

finetuning/mwer_job.py runs the job; the method: docs/DESIGN.md §4.5; the manual, outputs and
exit codes: docs/manual.md "Discriminative rescoring (MWER)".

  python run_mwer.py --init_model=runs/reproduce/full/models/tta --output_dir=runs/mwer
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
import os

# As run_pretraining.py: keep large buffers (the vocabulary logits) in TF's pool between steps.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

# pylint: disable=g-import-not-at-top,wrong-import-position
from finetuning import mwer_job
from pretraining import training_loop
from util import cli


def define_flags():
  cli.define_param_flags(mwer_job.JobParams)


def main(argv):
  del argv
  if not mwer_job.run(cli.params(mwer_job.JobParams)):
    training_loop.exit_unfinished("stopped by a signal before the last step")


if __name__ == "__main__":
  define_flags()
  cli.run(main)

# coding=utf-8
"""Discriminative (MWER) training of a neural LM as an N-best rescorer, and its evaluation.

finetuning/mwer_job.py runs the job; the method: docs/DESIGN.md §4.5; the manual, outputs and
exit codes: README "Discriminative rescoring (MWER)".

  python run_mwer.py --init_model=runs/reproduce/full/models/tta --output_dir=runs/mwer
"""

import os

# As run_pretraining.py: keep large buffers (the vocabulary logits) in TF's pool between steps.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

# pylint: disable=g-import-not-at-top,wrong-import-position
import dataclasses

from absl import flags
from absl import logging

from finetuning import mwer_job
from finetuning import mwer_training
from lm import inference
from lm import lm_flags
from pretraining import training_loop
from util import cli
from util import io_utils

FLAGS = flags.FLAGS


def define_flags():
  cli.define_param_flags(mwer_job.JobParams)
  cli.define_param_flags(mwer_training.MwerParams)
  io_utils.define_data_dir_flag()
  lm_flags.define_throughput_flags()


def params_from_flags():
  """`mwer_job.JobParams` from the parsed flags."""
  for name in ("init_model", "output_dir"):
    if not FLAGS[name].value:
      raise cli.InputError(f"--{name} is required")
  # The flags (the params check their values), the output and the model, before anything is
  # written into --output_dir.
  with cli.user_input():
    params = mwer_job.JobParams(
      **cli.param_values(mwer_job.JobParams, FLAGS),
      data_dir=FLAGS.data_dir,
      mwer=mwer_training.MwerParams(**cli.param_values(mwer_training.MwerParams, FLAGS)),
      lm_options=lm_flags.load_options(FLAGS),
    )
    io_utils.check_outputs_apart(params)
    io_utils.check_output_path(params.output_dir, "output_dir")
    inference.check_spec(FLAGS.init_model)
  return params


def main(argv):
  del argv
  params = params_from_flags()
  logging.info("MWER job: %s", dataclasses.asdict(params))
  if not mwer_job.run(params):
    training_loop.exit_unfinished("stopped by a signal before the last step")


if __name__ == "__main__":
  define_flags()
  cli.run(main)

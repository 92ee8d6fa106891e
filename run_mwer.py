# coding=utf-8
"""Discriminative (MWER) training of a neural LM as an N-best rescorer, and its evaluation.

The rescorer scores a hypothesis h of an N-best list as

    s(h) = sum_k w_k * first_pass_k(h) + λ * LM(h) + β * |h|     (|h| in words)

and MWER training (Prabhavalkar et al. 2018) minimises the expected word errors under the
softmax of s over each list, with gradients reaching the LM's weights and w, λ, β
(finetuning/mwer.py). T-TA scores a hypothesis in one forward pass, so its MWER epoch costs
about what scoring the lists costs; the biLM's pseudo-log-likelihood needs a pass per token
inside the loss (scripts/benchmark_mwer.py measures both).

The job (finetuning/mwer_job.py): trains on --train_sets only (dev_clean + dev_other), holds out
a share of their speakers to select the checkpoint and the regulariser weight, and evaluates on
the whole --test_sets only at the end, against (a) the first pass, (b) the usual interpolation
with the starting LM (λ on dev), (c) the combination weights alone learned by MWER with the LM
frozen, for each --settings, with paired bootstrap CIs (<output_dir>/results.md and .json). The
trained model is <output_dir>/<setting>/model, a model dir that run_rescoring.py and score.py
load like any other; its config.json records how it was trained ("training") and
mwer_weights.json beside it holds the learned combination weights.

Example (the full-mode T-TA of the reproduction as the starting point):
  python run_mwer.py --init_model=runs/reproduce/full/models/tta --output_dir=runs/mwer

Every stage resumes: the same command after an interruption continues where it stopped (LM
scores cached, training runs from their last checkpoint, with the same next batches and the
same weights as an uninterrupted run). Only the same job resumes: another --init_model, list
or setting that changes a result (a learning rate, --lists_per_batch, ...) is refused in one
line naming it, and --overwrite starts over (<output_dir>/run.json records the job). Exit
codes: 0 done; 75 (EX_TEMPFAIL) when SIGTERM/SIGINT stopped a training run after saving a
checkpoint (the same command resumes it); 2 with one line on stderr for a wrong input (a missing
model or data set, a bad flag, an output dir in use or not writable, or holding another job).
"""

import os

# As run_pretraining.py: keep large buffers (the vocabulary logits) in TF's pool between steps.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

# pylint: disable=g-import-not-at-top,wrong-import-position
import dataclasses
import sys

from absl import flags
from absl import logging

from finetuning import mwer_job
from finetuning import mwer_training
from lm import inference
from lm import lm_flags
from util import cli
from util import io_utils
from util import training_loop

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
    io_utils.check_output_path(params.output_dir, "output_dir")
    inference.check_spec(FLAGS.init_model)
  return params


def main(argv):
  del argv
  params = params_from_flags()
  logging.info("MWER job: %s", dataclasses.asdict(params))
  if not mwer_job.run(params):
    logging.warning(
      "stopped by a signal before the last step: exiting %d; the same command resumes",
      training_loop.EXIT_UNFINISHED,
    )
    sys.exit(training_loop.EXIT_UNFINISHED)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""Unsupervised semantic textual similarity (paper Tables 3 and 4), and of your own sentence pairs.

evaluation/sts_job.py runs it; the manual: docs/manual.md "Sentence similarity".

  python run_sts.py --model_dir=runs/tta,runs/bilm,runs/unilm --output_dir=results/sts
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from evaluation import sts_job
from util import cli


def define_flags():
  cli.define_param_flags(sts_job.JobParams)


def main(argv):
  del argv
  sts_job.run(cli.params(sts_job.JobParams))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

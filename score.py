"""Scores sentences with any LM: one sentence per line in, one JSON record per line out.

lm/scoring_job.py runs it; records, resume and shards: docs/manual.md "Scoring sentences".

  echo "the cat sat on the mat" | python score.py --model_dir=runs/tta
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from lm import scoring_job
from util import cli


def define_flags():
  cli.define_param_flags(scoring_job.JobParams)


def main(argv):
  del argv
  scoring_job.run(cli.params(scoring_job.JobParams))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

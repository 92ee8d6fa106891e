"""Reproduces the paper's evaluation at CPU scale, as one resumable job.

Trains T-TA, T-TA-w, biLM, uniLM and a KenLM 5-gram on the same text, evaluates them and writes
report.md and report.json in --work_dir (its job: reproduction/reproduction_job.py,
which runs reproduction/stages.py; docs/results.md).

  python reproduce.py --mode=quick      # minutes: tiny config, data slices
  python reproduce.py --mode=full --budget_minutes=40
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
import logging as std_logging
import sys

from absl import logging

from reproduction import reproduction_job
from util import cli


def define_flags():
  cli.define_param_flags(reproduction_job.JobParams)


def main(argv):
  del argv
  params = cli.params(reproduction_job.JobParams)
  # The job's own lines: time, level, message (absl's prefix adds thread id and source line).
  logging.get_absl_handler().setFormatter(
    std_logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
  )
  report_file, summary, elapsed = reproduction_job.run(params, " ".join(["python"] + sys.argv))
  print(summary, end="")
  logging.info("report: %s (%s in this run)", report_file, elapsed)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""Reproduces the paper's evaluation at CPU scale, as one resumable job.

Trains T-TA, T-TA-w, biLM, uniLM and a KenLM 5-gram on the same text, evaluates them and writes
report.md and report.json in --work_dir (reproduction/stages.py; docs/results.md).

  python reproduce.py --mode=quick      # minutes: tiny config, data slices
  python reproduce.py --mode=full --budget_minutes=40
"""

import logging as std_logging
import sys

from absl import flags
from absl import logging

from reproduction import modes
from reproduction import stages
from util import cli
from util import io_utils

FLAGS = flags.FLAGS


def define_flags():
  cli.define_param_flags(modes.Params)
  io_utils.define_data_dir_flag()


def params_from_flags():
  """`modes.Params` from the parsed flags (cli.InputError for an unknown --models)."""
  return modes.Params(
    **cli.param_values(modes.Params, FLAGS),
    data_dir=FLAGS.data_dir,
    command=" ".join(["python"] + sys.argv),
  )


def main(argv):
  del argv
  params = params_from_flags()
  # The job's own lines: time, level, message (absl's prefix adds thread id and source line).
  logging.get_absl_handler().setFormatter(
    std_logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
  )
  report_file, text, elapsed = stages.run(params)
  print(text)
  logging.info("report: %s (%s in this run)", report_file, elapsed)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

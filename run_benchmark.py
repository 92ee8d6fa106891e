"""Runtime of T-TA, biLM and uniLM against sentence length (paper §5.2, Fig. 4).

Its job is reproduction/benchmark_job.py; reproduction/benchmark.py measures,
reproduction/benchmark_report.py writes benchmark.json, benchmark.md and latency.png.
What is timed and how: docs/runtime.md.

  python run_benchmark.py --output_dir=results/benchmark
  python run_benchmark.py --quick --output_dir=/tmp/bench      # smoke run
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
import os
import sys

from reproduction import benchmark_job
from util import cli


def define_flags():
  cli.define_param_flags(benchmark_job.JobParams)


def main(argv):
  del argv
  command = " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])
  benchmark_job.run(cli.params(benchmark_job.JobParams), command)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""run_benchmark.py's job: `JobParams` (its flags), then `run(params, command)`: the matmul peak
alone (--peak_only), or every measurement of `benchmark.measure`, printed and written into
--output_dir by `benchmark_report`. What is timed and how: docs/runtime.md.
"""

import dataclasses
import json
import os

from absl import logging

from lm import lm_options as lm_options_lib
from reproduction import benchmark
from reproduction import benchmark_report
from util import cli
from util import io_utils
from util import machine
from util import runs

# --quick: a smoke run's values of the flags not given explicitly.
QUICK = {
  "lengths": ["5", "20"],
  "runs": 10,
  "warmup": 2,
  "hidden_size": 64,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "intermediate_size": 256,
  "max_lists": 2,
  "matmul_runs": 3,
}
# The flags benchmark.json records (after --quick).
RECORDED_FLAGS = (
  "model_dir",
  "models",
  "lengths",
  "tasks",
  "runs",
  "rounds",
  "warmup",
  "nbest_set",
  "max_lists",
  "token_budget",
  "quick",
  "seed",
  "jit_compile",
  "backends",
  "peers",
)
# What a run writes into --output_dir (runs.Record), beside run.json; --peak_only benchmark.json.
OUTPUTS = ("benchmark.json", "benchmark.md", "latency.png")


@dataclasses.dataclass
class JobParams:
  """run_benchmark.py's flags (one `cli.param` field each; the two role dataclasses' flat):
  what is measured (`benchmark.MeasureParams`), the peak (`benchmark.PeakParams`), where the
  results go."""

  measure: benchmark.MeasureParams = cli.nested(benchmark.MeasureParams)
  peak: benchmark.PeakParams = cli.nested(benchmark.PeakParams)
  output_dir: str = cli.param(
    "Where to write benchmark.json, benchmark.md and latency.png (and run.json): a new or empty "
    "folder, or one of an earlier run (--overwrite).",
    None,
    io=cli.OUTPUT,
  )
  overwrite: bool = cli.param(
    "Replace the outputs of an earlier run in --output_dir (those its run.json records; nothing "
    "else there) instead of refusing them: a measurement is not resumed.",
    False,
    result=False,
  )
  quick: bool = cli.param(
    "Smoke run: lengths 5,20, 10 runs, 2 warm-up runs, a tiny "
    "config (2 layers x 64, 4 heads, FFN 256), 2 N-best lists, "
    "3 matmul runs. Flags given explicitly still win.",
    False,
    preset=QUICK,
  )


def run(job, command):
  """The matmul peak alone (--peak_only), or every measurement, printed
  and written into --output_dir. `command` is the command line, recorded."""
  params, peak = job.measure, job.peak
  io_utils.check_outputs_apart(job)
  record = output_record(job)
  # Before anything else touches TF: the thread pools are fixed at start-up.
  threads = machine.pin_threads(params.intra_op, params.inter_op)
  if peak.peak_only:
    result = benchmark.peak_only(peak, threads)
    for line in result["matmul_peak"]:
      print(f"{line['dtype']} {line['shape']}: {line['gflops']:.1f} GFLOP/s")
    if record:
      start(record)
      io_utils.write_atomically(
        os.path.join(job.output_dir, "benchmark.json"), json.dumps(result, indent=2) + "\n"
      )
    return
  from lm import inference  # pylint: disable=g-import-not-at-top

  # What is cheap first: the models are there, before the matmul peak is measured.
  with cli.user_input():
    for _, spec in lm_options_lib.model_specs(params.model_dir or []):
      inference.check_spec(spec)
  recorded = dict(dataclasses.asdict(params), quick=job.quick)
  facts = {"flags": {name: recorded[name] for name in RECORDED_FLAGS}, "command": command}
  result = benchmark.measure(params, peak, threads, facts)
  report = benchmark_report.markdown_report(result)
  print(report)
  for line in benchmark_report.headline_lines(result):
    print(line)
  if record:
    start(record)
    benchmark_report.write_outputs(result, report, job.output_dir)
    logging.info("wrote benchmark.json, benchmark.md and latency.png to %s", job.output_dir)


def output_record(job):
  """The `runs.Record` of --output_dir (None without one), checked before any measurement: a
  folder of the user's, or an earlier run's outputs without --overwrite, is refused in one line."""
  if not job.output_dir:
    return None
  io_utils.check_output_path(job.output_dir, "output_dir")
  identity = runs.identity("run_benchmark.py", job)
  return runs.Record(job.output_dir, identity, OUTPUTS, job.overwrite, resumes=False)


def start(record):
  """Makes the output dir and records the run in it (with --overwrite, after removing the earlier
  run's outputs): once the measurements are done, so that a stop keeps the earlier results."""
  io_utils.makedirs(record.output_dir)
  record.start()

"""Runtime of T-TA, biLM and uniLM against sentence length (paper §5.2, Fig. 4).

reproduction/benchmark.py measures, reproduction/benchmark_report.py writes benchmark.json,
benchmark.md and latency.png. What is timed and how: docs/runtime.md.

  python run_benchmark.py --output_dir=results/benchmark
  python run_benchmark.py --quick --output_dir=/tmp/bench      # smoke run
"""

import dataclasses
import json
import os
import sys

from absl import flags
from absl import logging

import kinds
from lm import backends
from lm import flops
from lm import lm_flags
from reproduction import benchmark
from reproduction import benchmark_report
from util import cli
from util import io_utils
from util import machine

FLAGS = flags.FLAGS

# --quick: a smoke run's values of the flags not given explicitly.
_QUICK = {
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


def define_measure_flags(flag_values=flags.FLAGS):
  """The flags of `benchmark.MeasureParams`, --model_dir and --token_budget, with their checks
  (scripts/profile_onnxruntime.py takes them too)."""
  lm_flags.define_model_dir(
    several=True,
    kenlm=False,
    required=False,
    default="random models of --models with the size flags below",
    flag_values=flag_values,
  )
  cli.define_param_flags(benchmark.MeasureParams, flag_values)
  lm_flags.define_throughput_flags(backend=False, flag_values=flag_values)
  flags.register_validator(
    "lengths",
    lambda lengths: bool(lengths) and all(n.isdigit() and int(n) > 0 for n in lengths),
    "expected positive word counts, e.g. 5,10,20",
    flag_values=flag_values,
  )
  cli.register_choices("models", kinds.MODEL_TYPES, flag_values)
  cli.register_choices("tasks", flops.TASKS, flag_values)
  cli.register_choices("backends", backends.BACKENDS, flag_values)


def define_flags():
  """Defines the command-line flags (called from __main__ only, so that tests can import this
  module beside other scripts with the same flag names)."""
  define_measure_flags()
  cli.define_param_flags(benchmark.PeakParams)
  flags.register_validator("matmul_shapes", _check_shapes)
  io_utils.define_data_dir_flag()
  flags.DEFINE_string(
    "output_dir", None, "Where to write benchmark.json, benchmark.md and latency.png."
  )
  flags.DEFINE_bool(
    "quick",
    False,
    "Smoke run: lengths 5,20, 10 runs, 2 warm-up runs, a tiny "
    "config (2 layers x 64, 4 heads, FFN 256), 2 N-best lists, "
    "3 matmul runs. Flags given explicitly still win.",
  )


def _check_shapes(specs):
  """The --matmul_shapes validator."""
  try:
    benchmark.parse_shapes(specs)
  except ValueError as e:
    raise flags.ValidationError(str(e)) from None
  return True


def measure_params(flag_values, overrides=None):
  """`benchmark.MeasureParams` of the flags `define_measure_flags` defined; `overrides`
  ({field: value}) win."""
  fv, overrides = flag_values, overrides or {}
  values = cli.param_values(benchmark.MeasureParams, fv)
  return benchmark.MeasureParams(
    **{n: overrides.get(n, v) for n, v in values.items()},
    model_dir=fv.model_dir,
    token_budget=fv.token_budget,
    data_dir=fv.data_dir,
  )


def params_from_flags(flag_values):
  """(`benchmark.MeasureParams`, `benchmark.PeakParams`) of the parsed flags, with --quick's."""
  fv = flag_values
  smoke = {n: v for n, v in _QUICK.items() if fv.quick and not fv[n].present}
  peak = cli.param_values(benchmark.PeakParams, fv)
  return measure_params(fv, smoke), benchmark.PeakParams(
    **{n: smoke.get(n, v) for n, v in peak.items()}
  )


def main(argv):
  del argv
  params, peak = params_from_flags(FLAGS)
  io_utils.check_outputs_apart(params, outputs=[("output_dir", FLAGS.output_dir)])
  if FLAGS.output_dir:
    io_utils.check_output_path(FLAGS.output_dir, "output_dir")
  # Before anything else touches TF: the thread pools are fixed at start-up.
  threads = machine.pin_threads(params.intra_op, params.inter_op)
  if peak.peak_only:
    result = benchmark.peak_only(peak, threads)
    for record in result["matmul_peak"]:
      print(f"{record['dtype']} {record['shape']}: {record['gflops']:.1f} GFLOP/s")
    if FLAGS.output_dir:
      os.makedirs(FLAGS.output_dir, exist_ok=True)
      io_utils.write_atomically(
        os.path.join(FLAGS.output_dir, "benchmark.json"), json.dumps(result, indent=2) + "\n"
      )
    return
  from lm import inference  # pylint: disable=g-import-not-at-top

  # What is cheap first: the models are there, before the matmul peak is measured.
  with cli.user_input():
    for _, spec in lm_flags.model_specs(params.model_dir or []):
      inference.check_spec(spec)
  recorded = dict(dataclasses.asdict(params), quick=FLAGS.quick)
  facts = {
    "flags": {name: recorded[name] for name in RECORDED_FLAGS},
    "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
  }
  result = benchmark.measure(params, peak, threads, facts)
  report = benchmark_report.markdown_report(result)
  print(report)
  for line in benchmark_report.headline_lines(result):
    print(line)
  if FLAGS.output_dir:
    benchmark_report.write_outputs(result, report, FLAGS.output_dir)
    logging.info("wrote benchmark.json, benchmark.md and latency.png to %s", FLAGS.output_dir)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

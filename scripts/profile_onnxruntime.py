"""Where the time of one sentence goes on ONNX Runtime: T-TA's graphs vs a fused HF BERT, per op.

The engines are run_benchmark.py's (a random T-TA on backend "onnxruntime" and the
bert@onnxruntime peer, same size and vocab). Per task and --lengths: the public call and the
bare `session.run` of each are timed in turns (medians of --runs); a profiled second session of
the same graph sums ORT's kernel events per op type after the warm-up runs (times truncated to
whole us). Outputs in --output_dir: profile.md, profile.json and ORT's raw traces/*.json.

  nice python scripts/profile_onnxruntime.py                      # paper size, 20 words
  nice python scripts/profile_onnxruntime.py --lengths=5,20,40 --tasks=rerank
Needs onnxruntime and onnx; the peer requirements-peers.txt (--peers= profiles ours alone).
"""

import bisect
import contextlib
import dataclasses
import importlib.metadata
import inspect
import json
import os
import shutil
import statistics
import sys
import time
from typing import Callable
from unittest import mock

from absl import app
from absl import flags
from absl import logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lm import stage_clock  # noqa: E402
from reproduction import benchmark  # noqa: E402
from reproduction import peers as peers_lib  # noqa: E402
from util import cli  # noqa: E402
from util import io_utils  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
TASKS = ("sts", "rerank")
# run_benchmark's flags this script gives other defaults.
_DEFAULTS = {
  "models": ["tta"],
  "backends": ["onnxruntime"],
  "peers": ["bert@onnxruntime"],
  "lengths": ["20"],
  "runs": 200,
  "warmup": 20,
}
# The SessionOptions a profiling twin copies from the timed session (all but the profiling and
# the optimized-model output), and the config entries it copies where the session has them.
_OPTION_FIELDS = (
  "intra_op_num_threads",
  "inter_op_num_threads",
  "execution_mode",
  "execution_order",
  "graph_optimization_level",
  "enable_cpu_mem_arena",
  "enable_mem_pattern",
  "enable_mem_reuse",
  "use_deterministic_compute",
  "use_per_session_threads",
  "log_severity_level",
)
_CONFIG_KEYS = (
  "session.intra_op.allow_spinning",
  "session.inter_op.allow_spinning",
  "session.force_spinning_stop",
  "session.dynamic_block_base",
  "session.intra_op_thread_affinities",
  "session.set_denormal_as_zero",
  "session.disable_prepacking",
  "session.use_env_allocators",
)
_KERNEL_SUFFIX = "_kernel_time"


def define_flags():
  """run_benchmark's model and timing flags (same names and meanings), with this script's
  defaults, and --output_dir (called from __main__ only, so that tests can import this module)."""
  cli.define_param_flags(benchmark.MeasureParams)
  flags.DEFINE_string(
    "output_dir", "runs/profile_onnxruntime", "Where to write profile.md, profile.json, traces/."
  )
  flags.DEFINE_bool(
    "keep_traces",
    True,
    "Keep ORT's raw traces in <output_dir>/traces (~70 KB per run at paper size); else each is "
    "deleted once aggregated.",
  )
  for name, value in _DEFAULTS.items():
    FLAGS.set_default(name, value)


# ------------------------------------------------------------------ engines


@dataclasses.dataclass
class Engine(object):
  """One model on ONNX Runtime ("tta@onnxruntime"): `call` (task, sentence) -> the zero-argument
  public call, lapping `clock`; `graphs` () -> [(InferenceSession, its serialized model)] built
  so far; `description` JSON-ready."""

  name: str
  tasks: tuple
  call: Callable
  clock: object
  graphs: Callable
  description: object


def model_bytes(session):
  """The serialized model an InferenceSession was made from (ORT keeps the bytes or the path)."""
  if session._model_bytes is not None:  # pylint: disable=protected-access
    return session._model_bytes  # pylint: disable=protected-access
  with open(session._model_path, "rb") as f:  # pylint: disable=protected-access
    return f.read()


def our_engine(name, lm):
  """The Engine of a `NeuralLM(backend="onnxruntime")`: its sessions are those of its
  `onnx_backend.OnnxFunctions`, built at their first call."""
  functions = lm._onnx  # pylint: disable=protected-access

  def graphs():
    sessions = functions._sessions.values()  # pylint: disable=protected-access
    return [(session, model_bytes(session)) for session, _, _ in sessions]

  def call(task, sentence):
    return benchmark.task_call(lm, task, sentence)

  return Engine(name, TASKS, call, lm.clock, graphs, _describe(lm))


def _describe(lm):
  c = lm.model.config
  return (
    f"{lm.model_type} {c.num_hidden_layers} x {c.hidden_size}, {c.num_attention_heads} heads, "
    f"FFN {c.intermediate_size}, vocab {c.vocab_size}, onnx_backend's graphs"
  )


def closure_session(function):
  """The one onnxruntime.InferenceSession a function's closure holds (peers' run functions)."""
  import onnxruntime  # pylint: disable=g-import-not-at-top

  found = [
    value
    for value in inspect.getclosurevars(function).nonlocals.values()
    if isinstance(value, onnxruntime.InferenceSession)
  ]
  if len(found) != 1:
    raise ValueError(f"{function} holds {len(found)} InferenceSessions, not one")
  return found[0]


def peer_engines(build):
  """Engines of the ONNX Runtime peers `build()` makes (a dict name -> peer).

  The peers write their fused models to a temporary directory that is gone once they are built;
  each model is read while it is there, from the session `peers._onnxruntime_function` opens.
  """
  graphs = []
  original = peers_lib._onnxruntime_function  # pylint: disable=protected-access

  def recording(*args, **kwargs):
    run, fused = original(*args, **kwargs)
    session = closure_session(run)
    graphs.append((session, model_bytes(session)))
    return run, fused

  with mock.patch.object(peers_lib, "_onnxruntime_function", recording):
    built = build()
  engines = {}
  for name, peer in built.items():
    if peer.backend != "onnxruntime":
      raise ValueError(f"peer {name} does not run on ONNX Runtime")
    sessions = [closure_session(run) for run in peer._run.values()]  # pylint: disable=protected-access
    mine = [(s, m) for s, m in graphs if any(s is t for t in sessions)]
    engines[name] = Engine(
      name, peer.tasks, peer.call, peer.clock, lambda mine=mine: mine, peer.describe()
    )
  return engines


@contextlib.contextmanager
def recording_runs(sessions):
  """Within the block, every `session.run` of `sessions` appends (session, a copy of its feed
  dict) to the list yielded; the feeds' arrays are the call's own."""
  records = []
  sessions = list({id(s): s for s in sessions}.values())

  def recorder(session):
    run = session.run

    def recorded(output_names, input_feed, *args, **kwargs):
      records.append((session, dict(input_feed)))
      return run(output_names, input_feed, *args, **kwargs)

    return recorded

  for session in sessions:
    session.run = recorder(session)
  try:
    yield records
  finally:
    for session in sessions:
      del session.run  # the class's method again


@dataclasses.dataclass
class Graph(object):
  """The one graph run of an engine's call: its session, model and the call's exact feeds."""

  session: object
  model: bytes
  feeds: dict


def graph_of(engine, call):
  """Runs `call` (already warmed up: its session built) recording the engine's sessions; the
  one `session.run` it makes as a Graph (ValueError if it makes none or several)."""
  graphs = engine.graphs()
  with recording_runs([s for s, _ in graphs]) as records:
    call()
  if len(records) != 1:
    raise ValueError(f"{engine.name}: one call ran {len(records)} session.run, not one")
  session, feeds = records[0]
  model = next(m for s, m in graphs if s is session)
  return Graph(session, model, feeds)


def session_options(session):
  """The JSON-ready options of a session: `_OPTION_FIELDS` and the `_CONFIG_KEYS` it has."""
  options = session.get_session_options()
  out = {name: str(getattr(options, name)) for name in _OPTION_FIELDS}
  out["config"] = {}
  for key in _CONFIG_KEYS:
    try:
      out["config"][key] = options.get_session_config_entry(key)
    except RuntimeError:  # not set: ORT's default
      pass
  return out


def profiling_twin(session, model, prefix):
  """A second session of `model` with `session`'s options and providers, profiling into
  `prefix`_<date>.json."""
  import onnxruntime  # pylint: disable=g-import-not-at-top

  live = session.get_session_options()
  options = onnxruntime.SessionOptions()
  for name in _OPTION_FIELDS:
    setattr(options, name, getattr(live, name))
  for key, value in session_options(session)["config"].items():
    options.add_session_config_entry(key, value)
  options.enable_profiling = True
  options.profile_file_prefix = prefix
  return onnxruntime.InferenceSession(model, options, providers=session.get_providers())


# ------------------------------------------------------------------ the trace


def aggregate(events, warmup):
  """Per-op and per-run sums of the kernel `events` of an ORT trace after `warmup` runs.

  Returns:
    dict with
      runs: the number of timed runs;
      model_run_us, kernel_us, nodes: per timed run (in run order), the model_run span, the
        sum of its kernel times and its number of kernel events;
      ops: per op type (args.op_name), slowest first: total_us (over the timed runs), mean_us
        (total / runs), median_us (the median over runs of the op's time in a run),
        nodes_per_call and share (of the kernel total);
      top_nodes: the 15 slowest nodes: node, op, mean_us, share, and shapes (their inputs').

  Raises:
    ValueError: if the trace has no timed run, or a kernel event after the warm-up lies outside
      every timed run.
  """
  runs = sorted(
    (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
    key=lambda e: e["ts"],
  )
  timed = runs[warmup:]
  n = len(timed)
  if not n:
    raise ValueError(f"the trace has {len(runs)} runs, none after {warmup} warm-up runs")
  # Kernel events are written when a kernel ends, model_run's when the run ends: the warm-up's
  # kernels are those starting before the last warm-up run ends.
  after = runs[warmup - 1]["ts"] + runs[warmup - 1]["dur"] if warmup else float("-inf")
  starts = [r["ts"] for r in timed]
  kernel_us, nodes = [0] * n, [0] * n
  ops, by_node = {}, {}  # op -> (per-run us, count); node -> (op, us, shapes)
  for e in events:
    if e.get("cat") != "Node" or not e.get("name", "").endswith(_KERNEL_SUFFIX):
      continue
    if e["ts"] < after:
      continue
    run = bisect.bisect_right(starts, e["ts"]) - 1
    if run < 0 or e["ts"] + e["dur"] > timed[run]["ts"] + timed[run]["dur"]:
      raise ValueError(f"kernel event {e['name']} at {e['ts']} us is outside every timed run")
    op = e["args"]["op_name"]
    kernel_us[run] += e["dur"]
    nodes[run] += 1
    per_run, count = ops.setdefault(op, ([0] * n, [0]))
    per_run[run] += e["dur"]
    count[0] += 1
    node = e["name"][: -len(_KERNEL_SUFFIX)]
    _, total, shapes = by_node.get(node, (op, 0, _shapes(e["args"])))
    by_node[node] = op, total + e["dur"], shapes
  kernel_total = sum(kernel_us) or 1
  return {
    "runs": n,
    "model_run_us": [r["dur"] for r in timed],
    "kernel_us": kernel_us,
    "nodes": nodes,
    "ops": sorted(
      (
        {
          "op": op,
          "total_us": sum(per_run),
          "mean_us": sum(per_run) / n,
          "median_us": statistics.median(per_run),
          "nodes_per_call": count / n,
          "share": sum(per_run) / kernel_total,
        }
        for op, (per_run, (count,)) in ops.items()
      ),
      key=lambda o: -o["total_us"],
    ),
    "top_nodes": [
      {"node": node, "op": op, "mean_us": total / n, "share": total / kernel_total, "shapes": s}
      for node, (op, total, s) in sorted(by_node.items(), key=lambda item: -item[1][1])[:15]
    ],
  }


def _shapes(args):
  """A kernel event's input shapes, "float[24,29530] int64[1]"."""
  return " ".join(
    f"{dtype}[{','.join(str(d) for d in dims)}]"
    for shape in args.get("input_type_shape", [])
    for dtype, dims in shape.items()
  )


# ------------------------------------------------------------------ measuring


def _median_us(seconds):
  return statistics.median(seconds) * 1e6


def _mean_us(seconds):
  return statistics.fmean(seconds) * 1e6


def profile_runs(twins, runs, warmup, rounds):
  """{name: wall seconds [runs] of `session.run`} of `twins` ({name: (session, feeds)}), after
  `warmup` runs, in `rounds` rotating turns as benchmark.time_cell but with no untimed call per
  turn: the trace must hold warmup + runs runs exactly."""
  for session, feeds in twins.values():
    for _ in range(warmup):
      session.run(None, feeds)
  names = list(twins)
  seconds = {name: [] for name in names}
  rounds = max(1, min(rounds, runs))
  for r in range(rounds):
    share = runs // rounds + (r < runs % rounds)
    for name in names[r % len(names) :] + names[: r % len(names)]:
      session, feeds = twins[name]
      for _ in range(share):
        start = time.perf_counter()
        session.run(None, feeds)
        seconds[name].append(time.perf_counter() - start)
  return seconds


def _feeds_record(feeds):
  return {name: f"{a.dtype}{list(a.shape)}" for name, a in feeds.items()}


def profile_cell(engines, task, text, runs, warmup, rounds, trace_dir, label, keep_traces=True):
  """Times and profiles every engine of `task` on one sentence; returns the cell's record.

  The traces are written to `trace_dir` as <label>_<engine>.json (deleted unless keep_traces).
  """
  engines = [e for e in engines if task in e.tasks]
  calls = {e.name: e.call(task, text) for e in engines}
  graphs = {}
  for e in engines:
    calls[e.name]()  # builds our session of the task at its first call
    graphs[e.name] = graph_of(e, calls[e.name])
  timed = {}
  for e in engines:
    graph = graphs[e.name]
    timed[e.name] = (calls[e.name], e.clock)
    timed[f"{e.name} session.run"] = (
      lambda g=graph: g.session.run(None, g.feeds),
      stage_clock.StageClock(),
    )
  load_before = machine.load_average()
  timings = benchmark.time_cell(timed, runs, warmup, rounds)
  twins = {}
  for e in engines:
    graph = graphs[e.name]
    prefix = os.path.join(trace_dir, f"{label}_{e.name.replace('@', '_')}")
    twins[e.name] = (profiling_twin(graph.session, graph.model, prefix), graph.feeds)
  profiled = profile_runs(twins, runs, warmup, rounds)
  record = {"task": task, "engines": {}, "load_avg_1m": [load_before, machine.load_average()]}
  for e in engines:
    session = twins[e.name][0]
    trace = session.end_profiling()
    path = os.path.join(trace_dir, f"{label}_{e.name.replace('@', '_')}.json")
    shutil.move(trace, path)
    with open(path, encoding="utf-8") as f:
      profile = aggregate(json.load(f), warmup)
    if not keep_traces:
      os.remove(path)
    call_seconds, stages = timings[e.name]
    record["engines"][e.name] = {
      "feeds": _feeds_record(graphs[e.name].feeds),
      "session_options": session_options(graphs[e.name].session),
      "trace": os.path.relpath(path, os.path.dirname(trace_dir)) if keep_traces else None,
      "call_median_us": _median_us(call_seconds),
      "call_mean_us": _mean_us(call_seconds),
      "call_stages_median_us": {s: _median_us(v) for s, v in stages.items()},
      "session_run_median_us": _median_us(timings[f"{e.name} session.run"][0]),
      "session_run_mean_us": _mean_us(timings[f"{e.name} session.run"][0]),
      "profiled_session_run_median_us": _median_us(profiled[e.name]),
      "profiled_session_run_mean_us": _mean_us(profiled[e.name]),
      "model_run_median_us": statistics.median(profile["model_run_us"]),
      "model_run_mean_us": statistics.fmean(profile["model_run_us"]),
      "kernel_median_us": statistics.median(profile["kernel_us"]),
      "kernel_mean_us": statistics.fmean(profile["kernel_us"]),
      "nodes_per_call": statistics.fmean(profile["nodes"]),
      **profile,
    }
  return record


# ------------------------------------------------------------------ the report


def _table(header, rows):
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
  lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return lines


def _us(value):
  return "" if value is None else f"{value:,.1f}"


def per_call_table(record):
  """Per-call breakdown, median / mean us of each engine (the markdown lines)."""
  names = list(record["engines"])
  rows = []

  def row(label, key, note=""):
    cells = []
    for name in names:
      r = record["engines"][name]
      median, mean = r.get(f"{key}_median_us"), r.get(f"{key}_mean_us")
      cells.append(f"{_us(median)} / {_us(mean)}")
    rows.append([label, *cells, note])

  row("public call (wall)", "call", "time_cell turns")
  for stage in stage_clock.StageClock.STAGES:
    rows.append(
      [
        f"- {stage}",
        *(f"{_us(record['engines'][n]['call_stages_median_us'][stage])} / -" for n in names),
        "median of the call's stage clock",
      ]
    )
  row("bare session.run (wall)", "session_run", "same feeds, same turns")
  row("profiled session.run (wall)", "profiled_session_run", "profiling session")
  row("model_run span (trace)", "model_run", "inside ORT's run")
  row("kernel time sum (trace)", "kernel", "sum of the kernel events")
  gaps = [
    ("outside kernels, inside model_run", "model_run", "kernel"),
    ("outside model_run, inside session.run", "profiled_session_run", "model_run"),
    ("outside session.run, inside the call", "call", "session_run"),
  ]
  for label, outer, inner in gaps:
    cells = []
    for name in names:
      r = record["engines"][name]
      cells.append(
        f"{_us(r[f'{outer}_median_us'] - r[f'{inner}_median_us'])} / "
        f"{_us(r[f'{outer}_mean_us'] - r[f'{inner}_mean_us'])}"
      )
    rows.append([label, *cells, "difference of the two rows"])
  rows.append(
    ["nodes run per call", *(f"{record['engines'][n]['nodes_per_call']:g}" for n in names), ""]
  )
  return _table(["per call, us (median / mean)", *names, ""], rows)


def per_op_table(record):
  """Op types side by side: mean and median us per call, nodes per call, share of the kernel
  total (the markdown lines)."""
  names = list(record["engines"])
  ops = {}
  for name in names:
    for op in record["engines"][name]["ops"]:
      ops.setdefault(op["op"], {})[name] = op
  order = sorted(ops, key=lambda op: -max(o["mean_us"] for o in ops[op].values()))
  header = ["op type"]
  for name in names:
    header += [f"{name} us/call", "median", "nodes", "share"]
  rows = []
  for op in order:
    cells = [op]
    for name in names:
      o = ops[op].get(name)
      if o is None:
        cells += ["", "", "", ""]
      else:
        share = f"{100 * o['share']:.1f}%"
        cells += [_us(o["mean_us"]), _us(o["median_us"]), f"{o['nodes_per_call']:g}", share]
    rows.append(cells)
  totals = ["kernel total"]
  for name in names:
    r = record["engines"][name]
    totals += [
      _us(r["kernel_mean_us"]),
      _us(r["kernel_median_us"]),
      f"{r['nodes_per_call']:g}",
      "100%",
    ]
  rows.append(totals)
  return _table(header, rows)


def top_nodes_table(record, count=8):
  """The `count` slowest nodes of each engine (the markdown lines)."""
  lines = []
  for name, r in record["engines"].items():
    rows = [
      [n["node"], n["op"], _us(n["mean_us"]), f"{100 * n['share']:.1f}%", n["shapes"]]
      for n in r["top_nodes"][:count]
    ]
    header = ["node", "op", "us/call", "share", "input shapes"]
    lines += [f"Slowest nodes of {name}:", ""] + _table(header, rows) + [""]
  return lines


def markdown_report(result):
  env = result["environment"]
  lines = [
    "# ONNX Runtime per-op profile, one sentence",
    "",
    f"{env['cpu']}; {env['cores_usable']} usable cores; TF/ORT intra-op threads "
    f"{env['intra_op_threads']}; onnxruntime {env['onnxruntime']}; commit {env['commit']}; "
    f"{result['flags']['runs']} runs after {result['flags']['warmup']} warm-up runs; "
    f"load {result['load_avg_1m']}.",
    "",
  ]
  for name, description in result["engines"].items():
    if isinstance(description, dict):  # a peer's describe()
      description = "; ".join(
        f"{k}: {v}" for k, v in description.items() if k not in ("versus", "backend", "tasks")
      )
    lines.append(f"- {name}: {description}")
  lines.append("")
  for record in result["cells"]:
    lines += [
      f'## {record["task"]}, {record["words"]} words: "{record["sentence"]}"',
      "",
    ]
    for name, r in record["engines"].items():
      options = r["session_options"]
      lines.append(
        f"- {name}: feeds {r['feeds']}; intra-op threads {options['intra_op_num_threads']}, "
        f"config {options['config']}"
      )
    lines.append("")
    lines += per_call_table(record) + [""] + per_op_table(record) + [""] + top_nodes_table(record)
  return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ main


def _version(package):
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return None


def check_flags():
  """Validates the flags; returns the sorted lengths."""
  for task in FLAGS.tasks:
    if task not in TASKS:
      raise app.UsageError(f"--tasks: {task!r} is not one of {TASKS}")
  if FLAGS.backends != ["onnxruntime"]:
    raise app.UsageError("--backends: this script profiles ONNX Runtime only (onnxruntime)")
  unknown = [p for p in FLAGS.peers if not p.endswith("@onnxruntime")]
  if unknown:
    raise app.UsageError(f"--peers: {unknown} do not run on ONNX Runtime")
  lengths = sorted({int(n) for n in FLAGS.lengths})
  if not lengths or lengths[0] < 1:
    raise app.UsageError("--lengths must be positive word counts")
  if FLAGS.runs < 1 or FLAGS.warmup < 0:
    raise app.UsageError("--runs must be >= 1 and --warmup >= 0")
  return lengths


def main(argv):
  del argv
  lengths = check_flags()
  threads = machine.pin_threads(FLAGS.intra_op, FLAGS.inter_op)
  params = cli.params(benchmark.MeasureParams)
  lms = benchmark.build_lms(params)
  engines = [our_engine(name, lm) for name, lm in lms.items()]
  if FLAGS.peers:
    engines += peer_engines(lambda: benchmark.build_peers(lms, threads, params)).values()
  sentences = benchmark.sentences_of_lengths(benchmark.stsb_sentences(FLAGS.data_dir), lengths)
  result = {
    "environment": dict(
      machine.environment(threads),
      commit=machine.git_commit(),
      **{p: _version(p) for p in ("onnxruntime", "onnx", "torch", "transformers")},
    ),
    "flags": {
      n: FLAGS[n].value
      for n in ("models", "model_dir", "peers", "lengths", "tasks", "runs", "warmup", "rounds")
    },
    "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
    "engines": {e.name: e.description for e in engines},
    "load_avg_1m": [machine.load_average()],
    "cells": [],
  }
  trace_dir = os.path.join(FLAGS.output_dir, "traces")
  os.makedirs(trace_dir, exist_ok=True)
  for task in FLAGS.tasks:
    for words, (text, origin) in sorted(sentences.items()):
      logging.info("%s, %d words: %s", task, words, text)
      record = profile_cell(
        engines,
        task,
        text,
        FLAGS.runs,
        FLAGS.warmup,
        FLAGS.rounds,
        trace_dir,
        f"{task}_{words}w",
        FLAGS.keep_traces,
      )
      record.update(words=words, sentence=text, origin=origin)
      result["cells"].append(record)
  if not FLAGS.keep_traces and not os.listdir(trace_dir):
    os.rmdir(trace_dir)
  result["load_avg_1m"].append(machine.load_average())
  report = markdown_report(result)
  print(report)
  io_utils.write_atomically(os.path.join(FLAGS.output_dir, "profile.md"), report)
  io_utils.write_atomically(
    os.path.join(FLAGS.output_dir, "profile.json"), json.dumps(result, indent=2) + "\n"
  )
  logging.info("wrote profile.md and profile.json to %s", FLAGS.output_dir)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

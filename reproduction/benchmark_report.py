"""The runtime benchmark's report: headline ratios, peer ratios, FLOP floors and the files.

Turns reproduction/benchmark.py's `result` dict into benchmark.md (`markdown_report`),
latency.png (`plot`) and benchmark.json, each written atomically (`write_outputs`).
"""

import io
import json
import os

from lm import backends
from lm import flops
from util import io_utils

# Short task names used in the plot legend, as in the paper's Figure 4.
TASK_LABELS = {"sts": "sts", "rerank": "rrk"}
# The paper's CPU figures (i7-6850K, TF 1.12) at 20 words.
PAPER_RATIO_20 = {"sts": 12.7, "rerank": 6.35}
PAPER_TTA_STS_MS_20 = 9.85
HEADLINE_WORDS = 20
# The paper's headline speed ratio: the masked-copies baseline over T-TA.
HEADLINE_SLOW, HEADLINE_FAST = "bilm", "tta"


# ------------------------------------------------------------- headline


def best_paths(records, task):
  """{model_type: {words: the record of the fastest backend}} of one task: each model on its
  best path, so no ratio is made by slowing a model."""
  best = {}
  for r in records:
    if r["task"] != task:
      continue
    cells = best.setdefault(r["model_type"], {})
    if r["words"] not in cells or r["median_ms"] < cells[r["words"]]["median_ms"]:
      cells[r["words"]] = r
  return best


def headline(records, words=HEADLINE_WORDS, slow=HEADLINE_SLOW, fast=HEADLINE_FAST):
  """{task: {"words", "ratio", slow/fast + "_ms" and "_backend"}}: slow/fast median latency at
  `words` (nearest length), each model on its fastest backend; tasks missing either left out."""
  out = {}
  for task in flops.TASKS:
    by_model = best_paths(records, task)
    if slow not in by_model or fast not in by_model:
      continue
    common = sorted(set(by_model[slow]) & set(by_model[fast]), key=lambda n: (abs(n - words), n))
    if not common:
      continue
    n = common[0]
    a, b = by_model[slow][n]["median_ms"], by_model[fast][n]["median_ms"]
    out[task] = {
      "words": n,
      "ratio": a / b,
      slow + "_ms": a,
      fast + "_ms": b,
      slow + "_backend": by_model[slow][n].get("backend", "tf"),
      fast + "_backend": by_model[fast][n].get("backend", "tf"),
      "paper_ratio": PAPER_RATIO_20[task],
    }
  return out


def peer_ratios(records, peer_records):
  """Peer time / ours (>= 1: ours is faster) of each peer cell, ours the model kind it stands
  beside (`versus`) on its fastest backend at the same task and length, where it was timed."""
  best = {task: best_paths(records, task) for task in flops.TASKS}
  out = []
  for p in peer_records:
    ours = best[p["task"]].get(p["versus"], {}).get(p["words"])
    if ours is None:
      continue
    out.append(
      {
        "task": p["task"],
        "words": p["words"],
        "peer": p["model"],
        "versus": p["versus"],
        "peer_ms": p["median_ms"],
        "ours_ms": ours["median_ms"],
        "ours_model": ours["model"],
        "ratio": p["median_ms"] / ours["median_ms"],
      }
    )
  return out


def _float32(records):
  """The records of float32 backends: the peak and the weight bytes are float32 figures, so a
  bfloat16 backend gets no floors (its own would need its own peak and half the bytes)."""
  return [r for r in records if backends.backend_dtype(r.get("backend", "tf")) == "float32"]


def add_flop_floors(headlines, records, throughput, peaks, bandwidth=None):
  """Adds FLOP floors, in place: to every latency record, to T-TA in each headline, and the
  fraction of the peak to every throughput record.

  With the measured memory `bandwidth` (GB/s), also memory_floor_ms: the call's weight bytes
  (`flops.call_weight_bytes`) streamed once at that rate, the limit of a batch-1 call whose
  weights live in memory rather than in the caches.

  floor_ms: the call's FLOPs at the best measured matmul rate (a large square matmul), the
  limit no batch-1 call reaches; vs_floor = median latency / floor_ms. In the headline also
  floor_ms_shape: at the rate of the measured FFN-like shape ([M, 512] x [512, 2048]) whose M
  is nearest the sentence's tokens, the limit of a batch-1 call whose matmuls all have ~T
  rows; vs_floor_shape = latency / it.
  """
  if not peaks:
    return
  best = max(p["gflops"] for p in peaks)
  for r in _float32(records):
    r["floor_ms"] = r["flops"] / (best * 1e9) * 1e3
    r["vs_floor"] = r["median_ms"] / r["floor_ms"]
    if bandwidth and "weight_bytes" in r:
      r["memory_floor_ms"] = r["weight_bytes"] / (bandwidth * 1e9) * 1e3
  for r in _float32(throughput):
    r["of_peak"] = r["gflops_per_s"] / best
  ffn_like = [p for p in peaks if p["n"] != max(q["n"] for q in peaks) or len(peaks) == 1]
  for task, h in headlines.items():
    record = best_paths(records, task)[HEADLINE_FAST][h["words"]]
    if "floor_ms" not in record:
      continue
    nearest_m = min(ffn_like, key=lambda p: (abs(p["m"] - record["tokens"]), -p["gflops"]))["m"]
    shape_rate = max(p["gflops"] for p in ffn_like if p["m"] == nearest_m)
    h["tta_mflop"] = record["flops"] / 1e6
    h["floor_ms"] = record["floor_ms"]
    h["floor_ms_shape"] = record["flops"] / (shape_rate * 1e9) * 1e3
    h["shape_m"] = nearest_m
    h["vs_floor"] = h["tta_ms"] / h["floor_ms"]
    h["vs_floor_shape"] = h["tta_ms"] / h["floor_ms_shape"]
    if "memory_floor_ms" in record:
      h["memory_floor_ms"] = record["memory_floor_ms"]
      h["weight_mb"] = record["weight_bytes"] / 1e6


def headline_lines(result):
  """One "HEADLINE <task>: ..." line per task, for the run's stdout."""
  load = result["load_avg_1m"]
  return [
    f"HEADLINE {task}: biLM/T-TA = {h['ratio']:.1f}x at {h['words']:d} words (biLM "
    f"{h['bilm_ms']:.2f} ms on {h.get('bilm_backend', 'tf')}, T-TA {h['tta_ms']:.2f} ms on "
    f"{h.get('tta_backend', 'tf')}"
    + (f", {h['vs_floor']:.2f}x its FLOP floor" if "vs_floor" in h else "")
    + f"; paper CPU {h['paper_ratio']:.2f}x, T-TA {PAPER_TTA_STS_MS_20:.2f} ms for sts); "
    f"load {load['start']}-{load['end']}"
    for task, h in result["headline"].items()
  ] + [
    f"PEER {r['task']} at {r['words']:d} words: {r['peer']} {r['peer_ms']:.2f} ms / "
    f"{r['ours_model']} {r['ours_ms']:.2f} ms = {r['ratio']:.2f}x (peer time / ours)"
    for r in result.get("peer_ratios", [])
  ]


# ------------------------------------------------------------- markdown


def markdown_report(result):
  """The tables of benchmark.md."""
  lines = ["# Runtime benchmark", "", _environment_line(result), ""]
  lines += _latency_tables(result["latency"])
  lines += _details_table(result["latency"])
  lines += _headline_section(result["headline"])
  lines += _peers_section(result)
  lines += _throughput_table(result["throughput"])
  lines += _peer_throughput_table(result["throughput"], result.get("peer_throughput", []))
  lines += _matmul_table(result["matmul_peak"])
  if result.get("memory_bandwidth"):
    bw = result["memory_bandwidth"]
    lines += [
      f"Memory read bandwidth (in-graph sum over {bw['bytes'] / 2**20:.0f} MB): "
      f"{bw['gb_per_s']:.1f} GB/s.",
      "",
    ]
  return "\n".join(lines)


def _environment_line(result):
  env = result["environment"]
  load = result["load_avg_1m"]
  return (
    f"CPU: {env['cpu']}, {env['cores_usable']:d} usable cores; threads intra-op "
    f"{env['intra_op_threads']:d}, inter-op {env['inter_op_threads']:d}; TensorFlow "
    f"{env['tensorflow']}, Keras {env['keras']}. Load average (1 min) at start "
    f"{load['start']}, end {load['end']}."
  )


def _model_names(records):
  """Model (row) names in the order they were first timed."""
  return list(dict.fromkeys(r["model"] for r in records))


def _latency_tables(records):
  """Per task: median ms per length (rows) and model (columns)."""
  names = _model_names(records)
  slow, fast = HEADLINE_SLOW, HEADLINE_FAST
  lines = []
  for task in flops.TASKS:
    rows = [r for r in records if r["task"] == task]
    if not rows:
      continue
    lines += [
      f"## {task}: median latency per sentence, ms (batch 1)",
      "",
      "| words | tokens | " + " | ".join(names) + f" | {slow}/{fast} (fastest of each) | load |",
      "|---:|---:|" + "---:|" * len(names) + "---:|---|",
    ]
    for words in sorted({r["words"] for r in rows}):
      cell = {r["model"]: r for r in rows if r["words"] == words}
      first = next(iter(cell.values()))
      fastest = {kind: cells[words] for kind, cells in best_paths(rows, task).items()}
      ratio = ""
      if slow in fastest and fast in fastest:
        ratio = f"{fastest[slow]['median_ms'] / fastest[fast]['median_ms']:.1f}x"
      medians = " | ".join(f"{cell[n]['median_ms']:.2f}" if n in cell else "-" for n in names)
      load_start, load_end = first["load_avg_1m"]
      lines.append(
        f"| {words:d} | {first['tokens']:d} | {medians} | {ratio} | {load_start}-{load_end} |"
      )
    lines.append("")
  return lines


def _ms(value):
  return "-" if value is None else f"{value:.2f}"


def _details_table(records):
  """Every record: latency, its breakdown by stage (medians, ms), encoder alone, FLOP floor."""
  lines = [
    "## Details: where a call's time goes",
    "",
    "Stages (median ms): norm = text normalization, tok = tokenization, batch = batching and "
    "padding, graph = the model (encoder + head/pooling), conv = results to Python; encoder = "
    "the encoder alone on the same input (tta/unilm). floor = the call's FLOPs at the best "
    "matmul rate of the run; memory floor = its weight bytes read once at the measured memory "
    "bandwidth. Both are float32 figures, so bfloat16 backends have none.",
    "",
    "| task | model | words | tokens | median ms | p10 | p90 | norm | tok | batch | graph | conv "
    "| encoder | MFLOP | floor ms | x floor | memory floor ms | load |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
  ]
  for r in records:
    stages = r.get("stages_ms") or {}
    breakdown = " | ".join(
      _ms(stages.get(s))
      for s in ("normalization", "tokenization", "batching", "graph", "conversion")
    )
    load_start, load_end = r["load_avg_1m"]
    floor = r.get("floor_ms")
    lines.append(
      f"| {r['task']} | {r['model']} | {r['words']:d} | {r['tokens']:d} | "
      f"{r['median_ms']:.2f} | {r['p10_ms']:.2f} | {r['p90_ms']:.2f} | {breakdown} | "
      f"{_ms(r.get('encoder_ms'))} | {r['flops'] / 1e6:.1f} | {_ms(floor)} | "
      f"{'-' if floor is None else format(r['vs_floor'], '.2f')} | "
      f"{_ms(r.get('memory_floor_ms'))} | {load_start}-{load_end} |"
    )
  lines.append("")
  return lines


def _headline_section(headlines):
  if not headlines:
    return []
  lines = ["## Headline", ""]
  for task, h in headlines.items():
    lines.append(
      f"- {task} at {h['words']:d} words, each model on its fastest backend: biLM "
      f"{h['bilm_ms']:.2f} ms ({h.get('bilm_backend', 'tf')}) / T-TA {h['tta_ms']:.2f} ms "
      f"({h.get('tta_backend', 'tf')}) = {h['ratio']:.1f}x (paper, CPU: {h['paper_ratio']:.2f}x)"
    )
    if "floor_ms" in h:
      lines.append(
        f"  - T-TA {h['tta_mflop']:.1f} MFLOP: FLOP floor {h['floor_ms']:.2f} ms at the best "
        f"matmul rate (latency {h['vs_floor']:.2f}x it), {h['floor_ms_shape']:.2f} ms at the "
        f"rate of a [{h['shape_m']:d}, 512] x [512, 2048] matmul ({h['vs_floor_shape']:.2f}x)"
      )
    if "memory_floor_ms" in h:
      lines.append(
        f"  - its {h['weight_mb']:.0f} MB of weights read once at the measured memory bandwidth: "
        f"{h['memory_floor_ms']:.2f} ms"
      )
  lines.append("")
  return lines


def _peers_section(result):
  """Peer time / ours per cell, the peers' stages, versions and ONNX Runtime's fusions."""
  if not result.get("peer_latency"):
    return []
  described = result["peers"]
  lines = [
    "## Peers: the same calls by what a user would run instead (same turns, same sentences)",
    "",
    "Versions: " + ", ".join(f"{k} {v}" for k, v in described["versions"].items()) + ".",
  ]
  for name, peer in described["peers"].items():
    for graph, fused in peer.get("fused_operators", {}).items():
      lines.append(
        f"{name} {graph} graph, fused by ONNX Runtime's optimizer: "
        + ", ".join(f"{op} {n}" for op, n in fused.items())
      )
  lines += [
    "",
    "ours = the model the peer stands beside on its fastest backend; ratio = peer time / ours "
    "(>= 1: ours is faster). tok and graph: the peer's tokenization and model stages (median "
    "ms; minicons' whole call is its graph).",
    "",
    "| task | words | tokens | peer | median ms | p10 | p90 | tok | graph | ours | ours ms "
    "| peer / ours |",
    "|---|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|",
  ]
  ratios = {(r["task"], r["words"], r["peer"]): r for r in result.get("peer_ratios", [])}
  for p in result["peer_latency"]:
    r = ratios.get((p["task"], p["words"], p["model"]))
    stages = p["stages_ms"]
    ours = f"{r['ours_model']} | {r['ours_ms']:.2f} | {r['ratio']:.2f}x" if r else "- | - | -"
    lines.append(
      f"| {p['task']} | {p['words']:d} | {p['tokens']:d} | {p['model']} | {p['median_ms']:.2f} | "
      f"{p['p10_ms']:.2f} | {p['p90_ms']:.2f} | {stages['tokenization']:.2f} | "
      f"{stages['graph']:.2f} | {ours} |"
    )
  lines.append("")
  return lines


def _throughput_table(records):
  if not records:
    return []
  lines = [
    f"## Throughput: batched scoring of {records[0]['source']}",
    "",
    "| model | sentences | tokens | seconds | sentences/s | tokens/s | GFLOP/s | of peak | load |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---|",
  ]
  for r in records:
    load_start, load_end = r["load_avg_1m"]
    of_peak = f"{100 * r['of_peak']:.0f}%" if "of_peak" in r else "-"
    lines.append(
      f"| {r['model']} | {r['sentences']:d} | {r['tokens']:d} | {r['seconds']:.2f} | "
      f"{r['sentences_per_s']:.1f} | {r['tokens_per_s']:.0f} | {r['gflops_per_s']:.2f} | "
      f"{of_peak} | {load_start}-{load_end} |"
    )
  lines.append("")
  return lines


def _peer_throughput_table(records, peer_records):
  """Batched rerank by a peer against the fastest of the kind it stands beside."""
  if not peer_records:
    return []
  lines = [
    "Peers, batched the same way (`inference.budget_batches`, the same token budget), ratio = "
    "ours / peer sentences/s (>= 1: ours is faster):",
    "",
    "| peer | sentences/s | ours | sentences/s | ours / peer | load |",
    "|---|---:|---|---:|---:|---|",
  ]
  for p in peer_records:
    mine = [r for r in records if r.get("model_type") == p["versus"]]
    if not mine:
      continue
    best = max(mine, key=lambda r: r["sentences_per_s"])
    load_start, load_end = p["load_avg_1m"]
    lines.append(
      f"| {p['model']} | {p['sentences_per_s']:.1f} | {best['model']} | "
      f"{best['sentences_per_s']:.1f} | {best['sentences_per_s'] / p['sentences_per_s']:.2f}x | "
      f"{load_start}-{load_end} |"
    )
  return lines + [""]


def _matmul_table(peaks):
  if not peaks:
    return []
  lines = [
    "## float32 matmul peak (tf.function)",
    "",
    "| when | shape | median ms | GFLOP/s | load |",
    "|---|---|---:|---:|---:|",
  ]
  for r in peaks:
    lines.append(
      f"| {r['when']} | {r['shape']} | {r['median_ms']:.3f} | {r['gflops']:.1f} | "
      f"{r['load_avg_1m']} |"
    )
  lines.append("")
  return lines


# ----------------------------------------------------------------- plot


def plot(result, path):
  """Figure 4-style plot: median latency vs words, log y, p10-p90 bands."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  records = result["latency"]
  fig, ax = plt.subplots(figsize=(6.4, 4.4))
  names = _model_names(records)
  colors = {n: f"C{i}" for i, n in enumerate(names)}
  styles = {"sts": ("-", "o"), "rerank": ("--", "s")}
  for task in flops.TASKS:
    for name in names:
      rows = sorted(
        (r for r in records if r["task"] == task and r["model"] == name), key=lambda r: r["words"]
      )
      if not rows:
        continue
      x = [r["words"] for r in rows]
      line, marker = styles[task]
      ax.plot(
        x,
        [r["median_ms"] for r in rows],
        linestyle=line,
        marker=marker,
        color=colors[name],
        label=f"{name}$_{{{TASK_LABELS[task]}}}$",
      )
      ax.fill_between(
        x,
        [r["p10_ms"] for r in rows],
        [r["p90_ms"] for r in rows],
        color=colors[name],
        alpha=0.12,
        linewidth=0,
      )
  _label_axes(ax, result)
  fig.tight_layout()
  buffer = io.BytesIO()  # a PNG writer may seek: a bucket's file cannot
  fig.savefig(buffer, format="png", dpi=120)
  with io_utils.atomic_open(path, "wb") as f:
    f.write(buffer.getvalue())
  plt.close(fig)


def _label_axes(ax, result):
  """Log y with plain numbers, the lengths as x ticks, the machine as title."""
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top

  env = result["environment"]
  ax.set_yscale("log")
  # Plain numbers (20, 500) read better than 2x10^1 on a latency axis.
  ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
  ax.set_xticks(sorted({r["words"] for r in result["latency"]}))
  ax.set_xlabel("number of words")
  ax.set_ylabel("latency per sentence (ms, median; band p10-p90)")
  load = result["load_avg_1m"]
  ax.set_title(
    f"{env['cpu']}, {env['intra_op_threads']:d} threads, TF {env['tensorflow']}; "
    f"load avg {load['start']}-{load['end']}",
    fontsize=9,
  )
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)


# ---------------------------------------------------------------- files


def write_outputs(result, report, output_dir):
  """Writes benchmark.json, benchmark.md (`report`) and latency.png."""
  io_utils.makedirs(output_dir)
  io_utils.write_atomically(
    os.path.join(output_dir, "benchmark.json"), json.dumps(result, indent=2) + "\n"
  )
  io_utils.write_atomically(os.path.join(output_dir, "benchmark.md"), report)
  plot(result, os.path.join(output_dir, "latency.png"))

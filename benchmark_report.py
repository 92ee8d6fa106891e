"""The runtime benchmark's report: headline ratios, FLOP floors and files.

run_benchmark.py measures and hands over one `result` dict (environment,
flags, latency records, throughput records, matmul peaks); this module turns
it into what a reader sees:

  headline         biLM / T-TA median latency per task at 20 words, next to
                   the paper's CPU ratio, with T-TA's FLOP floors
  benchmark.md     the tables (`markdown_report`)
  latency.png      the paper's Fig. 4-style plot (`plot`)
  benchmark.json   the result dict itself

Each file is written atomically (`write_outputs`).
"""

import json
import os

import flops
import io_utils

# Short task names used in the plot legend, as in the paper's Figure 4.
TASK_LABELS = {"sts": "sts", "rerank": "rrk"}
# The paper's CPU figures (i7-6850K, TF 1.12) at 20 words.
PAPER_RATIO_20 = {"sts": 12.7, "rerank": 6.35}
PAPER_TTA_STS_MS_20 = 9.85
HEADLINE_WORDS = 20


# ------------------------------------------------------------- headline


def headline(records, words=HEADLINE_WORDS, slow="bilm", fast="tta"):
  """slow/fast median latency ratio per task at `words` (nearest length).

  Returns:
    dict task -> {"words", "ratio", slow + "_ms", fast + "_ms"}; tasks
    missing either model are left out.
  """
  out = {}
  for task in flops.TASKS:
    rows = [r for r in records if r["task"] == task]
    by_model = {}
    for r in rows:
      by_model.setdefault(r["model_type"], {})[r["words"]] = r
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
      "paper_ratio": PAPER_RATIO_20[task],
    }
  return out


def add_flop_floors(headlines, records, peaks):
  """Adds T-TA's FLOP floors to each headline, in place.

  floor_ms: the call's FLOPs at the best measured matmul rate (a large
  square matmul), the limit no batch-1 call reaches. floor_ms_shape: at the
  rate of the measured shape with the fewest rows (the [24, 512] x [512,
  2048] FFN matmul of one sentence by default), the limit of a batch-1 call
  whose matmuls all have ~T rows; vs_floor_* = median latency / floor.
  """
  if not peaks:
    return
  best = max(p["gflops"] for p in peaks)
  smallest_m = min(p["m"] for p in peaks)
  shape_rate = max(p["gflops"] for p in peaks if p["m"] == smallest_m)
  for task, h in headlines.items():
    record = next(
      r
      for r in records
      if r["task"] == task and r["model_type"] == "tta" and r["words"] == h["words"]
    )
    h["tta_mflop"] = record["flops"] / 1e6
    h["floor_ms"] = record["flops"] / (best * 1e9) * 1e3
    h["floor_ms_shape"] = record["flops"] / (shape_rate * 1e9) * 1e3
    h["vs_floor"] = h["tta_ms"] / h["floor_ms"]
    h["vs_floor_shape"] = h["tta_ms"] / h["floor_ms_shape"]


def headline_lines(result):
  """One "HEADLINE <task>: ..." line per task, for the run's stdout."""
  load = result["load_avg_1m"]
  return [
    f"HEADLINE {task}: biLM/T-TA = {h['ratio']:.1f}x at {h['words']:d} words (biLM "
    f"{h['bilm_ms']:.2f} ms, T-TA {h['tta_ms']:.2f} ms; paper CPU {h['paper_ratio']:.2f}x, "
    f"T-TA {PAPER_TTA_STS_MS_20:.2f} ms for sts); load {load['start']}-{load['end']}"
    for task, h in result["headline"].items()
  ]


# ------------------------------------------------------------- markdown


def markdown_report(result):
  """The tables of benchmark.md."""
  lines = ["# Runtime benchmark", "", _environment_line(result), ""]
  lines += _latency_tables(result["latency"])
  lines += _details_table(result["latency"])
  lines += _headline_section(result["headline"])
  lines += _throughput_table(result["throughput"])
  lines += _matmul_table(result["matmul_peak"])
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
  lines = []
  for task in flops.TASKS:
    rows = [r for r in records if r["task"] == task]
    if not rows:
      continue
    lines += [
      f"## {task}: median latency per sentence, ms (batch 1)",
      "",
      "| words | tokens | " + " | ".join(names) + " | bilm/tta | load |",
      "|---:|---:|" + "---:|" * len(names) + "---:|---|",
    ]
    for words in sorted({r["words"] for r in rows}):
      cell = {r["model"]: r for r in rows if r["words"] == words}
      first = next(iter(cell.values()))
      ratio = ""
      if "bilm" in cell and "tta" in cell:
        ratio = f"{cell['bilm']['median_ms'] / cell['tta']['median_ms']:.1f}x"
      medians = " | ".join(f"{cell[n]['median_ms']:.2f}" if n in cell else "-" for n in names)
      load_start, load_end = first["load_avg_1m"]
      lines.append(
        f"| {words:d} | {first['tokens']:d} | {medians} | {ratio} | {load_start}-{load_end} |"
      )
    lines.append("")
  return lines


def _details_table(records):
  lines = [
    "## Details",
    "",
    "| task | model | words | tokens | median ms | p10 | p90 | graph ms | MFLOP | GFLOP/s | load |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
  ]
  for r in records:
    graph_ms = f"{r['graph_median_ms']:.2f}" if r["graph_median_ms"] is not None else "-"
    load_start, load_end = r["load_avg_1m"]
    lines.append(
      f"| {r['task']} | {r['model']} | {r['words']:d} | {r['tokens']:d} | "
      f"{r['median_ms']:.2f} | {r['p10_ms']:.2f} | {r['p90_ms']:.2f} | {graph_ms} | "
      f"{r['flops'] / 1e6:.1f} | {r['gflops_per_s']:.2f} | {load_start}-{load_end} |"
    )
  lines.append("")
  return lines


def _headline_section(headlines):
  if not headlines:
    return []
  lines = ["## Headline", ""]
  for task, h in headlines.items():
    lines.append(
      f"- {task} at {h['words']:d} words: biLM {h['bilm_ms']:.2f} ms / T-TA "
      f"{h['tta_ms']:.2f} ms = {h['ratio']:.1f}x (paper, CPU: {h['paper_ratio']:.2f}x)"
    )
    if "floor_ms" in h:
      lines.append(
        f"  - T-TA {h['tta_mflop']:.1f} MFLOP: FLOP floor {h['floor_ms']:.2f} ms at the best "
        f"matmul rate (latency {h['vs_floor']:.1f}x it), {h['floor_ms_shape']:.2f} ms at the "
        f"rate of the one-sentence matmul shape ({h['vs_floor_shape']:.1f}x)"
      )
  lines.append("")
  return lines


def _throughput_table(records):
  if not records:
    return []
  lines = [
    f"## Throughput: batched scoring of {records[0]['source']}",
    "",
    "| model | sentences | tokens | seconds | sentences/s | tokens/s | GFLOP/s | load |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
  ]
  for r in records:
    load_start, load_end = r["load_avg_1m"]
    lines.append(
      f"| {r['model']} | {r['sentences']:d} | {r['tokens']:d} | {r['seconds']:.2f} | "
      f"{r['sentences_per_s']:.1f} | {r['tokens_per_s']:.0f} | {r['gflops_per_s']:.2f} | "
      f"{load_start}-{load_end} |"
    )
  lines.append("")
  return lines


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
  with io_utils.atomic_open(path, "wb") as f:
    fig.savefig(f, format="png", dpi=120)
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
  os.makedirs(output_dir, exist_ok=True)
  io_utils.write_atomically(
    os.path.join(output_dir, "benchmark.json"), json.dumps(result, indent=2) + "\n"
  )
  io_utils.write_atomically(os.path.join(output_dir, "benchmark.md"), report)
  plot(result, os.path.join(output_dir, "latency.png"))

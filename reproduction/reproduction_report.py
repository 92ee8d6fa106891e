# coding=utf-8
"""The report of reproduce.py: its report dict as report.md with the paper-shaped tables (1/1b
LibriSpeech WER, 2 WMT21 BLEU, 3-4 STS-B and SICK, 7 (pseudo-)perplexity), the training table,
the learning curves and the paired comparisons. With several seeds a cell holds the mean over
seeds and each seed's value (`seed_cell`).
"""

import statistics

from evaluation import comparisons
from evaluation import significance
from reproduction import seed_runs
from util import io_utils

# First-pass setting of the learning curves' dev WER (run_rescoring --settings): reproduce.py's
# curves stage runs with it; the panels and the report name it. "am", no LM in the first pass: with
# the fused Transformer LM's scores ("full") the tuned λ was mostly 0 and the curves carried no
# signal.
CURVE_ASR_SETTING = "am"

# The paper's full-scale figures (ACL 2020, Tables 1, 3, 4), for orientation
# only: 3 layers x 512, ~30k vocab, 1M steps on Wikipedia + BookCorpus.
PAPER = {
  "sts": {
    "T-TA": {"stsb_dev": (71.88, 54.75), "stsb_test": (62.27, 44.74)},
    "biLM": {"stsb_dev": (59.99, None), "stsb_test": (50.76, None)},
    "uniLM": {"stsb_dev": (56.25, 63.87), "stsb_test": (39.57, 55.00)},
  },
}


# ------------------------------------------------------------ learning curves


# (measure, panel title)
CURVE_PANELS = (
  ("stsb_dev", "STS-B dev, Pearson r x 100 (context)"),
  ("sick_test", "SICK test, Pearson r x 100 (context)"),
  ("dev_clean_wer", f"dev_clean WER % ({CURVE_ASR_SETTING} setting, λ tuned on it)"),
  ("dev_other_wer", f"dev_other WER % ({CURVE_ASR_SETTING} setting, λ tuned on it)"),
)


def plot_curves(points, path):
  """Quality vs training tokens, one line per objective, one panel per measure."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(2, 2, figsize=(9, 6.4))
  for ax, (measure, title) in zip(axes.flat, CURVE_PANELS):
    for model in dict.fromkeys(p["model"] for p in points):
      mine = sorted((p for p in points if p["model"] == model), key=lambda p: p["tokens"])
      ax.plot(
        [p["tokens"] / 1e6 for p in mine], [p[measure] for p in mine], marker="o", label=model
      )
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("training tokens (millions)", fontsize=8)
    ax.grid(True, alpha=0.3)
  axes.flat[0].legend(fontsize=8)
  fig.tight_layout()
  with io_utils.atomic_open(path, "wb") as f:
    fig.savefig(f, format="png", dpi=110)
  plt.close(fig)


def curves_table(points):
  lines = [
    "| model | step | tokens (M) | STS-B dev | SICK test | dev clean WER | dev other WER |",
    "|---|---:|---:|---:|---:|---:|---:|",
  ]
  for p in points:
    lines.append(
      f"| {p['model']} | {p['step']:d} | {p['tokens'] / 1e6:.2f} | {_fmt(p['stsb_dev'])} | "
      f"{_fmt(p['sick_test'])} | {_fmt(p['dev_clean_wer'])} | {_fmt(p['dev_other_wer'])} |"
    )
  return "\n".join(lines)


# -------------------------------------------------------------------- report


def _fmt(value, digits=2):
  return "-" if value is None else f"{value:.{digits}f}"


def seed_cell(values, digits=2):
  """ "47.80 (47.10 / 48.50)": the mean of a figure over seeds, then each seed's value ("-" where a
  seed lacks it); a single value when every seed gives the same (an LM no seed changes)."""
  present = [v for v in values if v is not None]
  if not present:
    return "-"
  if len(set(values)) == 1:
    return _fmt(values[0], digits)
  return (
    f"{_fmt(statistics.fmean(present), digits)} ({' / '.join(_fmt(v, digits) for v in values)})"
  )


def _result(rows, lm, column=None):
  """The result of LM `lm` among rescoring `rows` at (test, setting) `column` (the first one when
  None); None when absent."""
  for row in rows or ():
    if row["lm"] == lm:
      for r in row["results"]:
        if column is None or (r["test"], r["setting"]) == column:
          return r
  return None


def _reranked_cell(result):
  """ "1.53 (λ 0.05, p 0.030)": WER, λ, and p of the paired bootstrap vs the first pass."""
  cell = f"{_fmt(result['reranked'])} (λ {result['lambda']:.2f}"
  if result.get("vs_first_pass"):
    cell += f", p {significance.format_p(result['vs_first_pass']['p_value'])}"
  return cell + ")"


def wer_table(asr, others=()):
  """Table 1: rows first pass / each LM; columns test sets x settings.

  `others`: the rows of each further seed; then an LM's cell is `seed_cell` of its WER (the λ and
  p of each seed are in report.json).
  """
  cols = [(r["test"], r["setting"]) for r in asr[0]["results"]]
  head = "| method | " + " | ".join(f"{t.replace('_', ' ')} {st}" for t, st in cols) + " |"
  lines = [head, "|---|" + "---:|" * len(cols)]
  first = {(r["test"], r["setting"]): r for r in asr[0]["results"]}
  lines.append("| first pass | " + " | ".join(_fmt(first[c]["first_pass"]) for c in cols) + " |")
  for row in asr:
    by = {(r["test"], r["setting"]): r for r in row["results"]}
    if others:
      runs = [asr, *others]
      cells = [
        seed_cell([(_result(run, row["lm"], c) or {}).get("reranked") for run in runs])
        for c in cols
      ]
    else:
      cells = [_reranked_cell(by[c]) for c in cols]
    lines.append(f"| + {row['lm']} | " + " | ".join(cells) + " |")
  lines.append("| oracle | " + " | ".join(_fmt(first[c]["oracle"]) for c in cols) + " |")
  return "\n".join(lines)


def bleu_table(nmt, others=()):
  """Table 2; `others`: the rows of each further seed (cells: `seed_cell`)."""
  r0 = nmt[0]["results"][0]
  lines = [
    "| method | BLEU |",
    "|---|---:|",
    f"| first system in file order | {_fmt(r0['first_pass'])} |",
  ]
  for row in nmt:
    values = [(_result(run, row["lm"]) or {}).get("reranked") for run in [nmt, *others]]
    lines.append(f"| {row['lm']} alone | {seed_cell(values)} |")
  lines.append(f"| oracle | {_fmt(r0['oracle'])} |")
  return "\n".join(lines)


def _pearson_cell(row, set_name):
  """ "55.50 [50.12, 60.31]": Pearson x100 with its 95% bootstrap interval; "-" for no row."""
  if row is None:
    return "-"
  cell = _fmt(row["scores"][set_name][0])
  interval = (row.get("pearson_ci") or {}).get(set_name)
  if interval:
    cell += f" [{interval[0]:.2f}, {interval[1]:.2f}]"
  return cell


def _pearson_seed_cell(runs, model, representation, set_name):
  """`seed_cell` of a model's Pearson x100 over the seeds' STS rows `runs`."""
  values = []
  for rows in runs:
    row = next(
      (r for r in rows or () if (r["model"], r["representation"]) == (model, representation)), None
    )
    values.append(None if row is None else row["scores"][set_name][0])
  return seed_cell(values)


def sts_table(sts, set_names, paper_sets=(), others=()):
  """Pearson x100, a row per model and representation (in the rows' order: context, first_last,
  embed, each then whitened, "+W<dim>"), a column per set; `others`: the rows of each further
  seed (cells: `seed_cell`, without the CIs, which are each seed's)."""
  lines = [
    "| model | representation | " + " | ".join(set_names) + " |",
    "|---|---|" + "---:|" * len(set_names),
  ]
  by = {(r["model"], r["representation"]): r for r in sts}
  for m, r in by:
    if others:
      cells = [_pearson_seed_cell([sts, *others], m, r, n) for n in set_names]
    else:
      cells = [_pearson_cell(by[m, r], n) for n in set_names]
    lines.append(f"| {m} | {r} | " + " | ".join(cells) + " |")
  for m, sets in PAPER["sts"].items():
    if paper_sets and all(n in sets for n in set_names):
      for i, r in enumerate(("context", "embed")):
        cells = " | ".join(_fmt(sets[n][i]) for n in set_names)
        lines.append(f"| paper {m} (full scale) | {r} | {cells} |")
  return "\n".join(lines)


def _pppl_cells(row, sets):
  wer = {r["test"]: r["reranked"] for r in row["results"] if r["setting"] == "full"}
  cells = []
  for name in sets:
    p = row["perplexity"].get(name)
    cell = "-" if p is None else f"{p['mean']:.1f} / {p['median']:.1f}"
    if name in wer:
      cell += f" [{wer[name]:.2f}]"
    cells.append(cell)
  return " | ".join(cells)


def pppl_table(asr, sets=("dev_clean", "test_clean", "dev_other", "test_other"), others=()):
  """Table 7: (pseudo-)perplexity mean / median per LM and set, with the
  full-setting WER of that LM on that set when it is a test set.

  `others`: the rows of each further seed; then an LM has a row per seed, "T-TA (seed 2)", unless
  every seed gives it the same cells (an LM no seed changes, such as the 5-gram).
  """
  lines = [
    "| LM | " + " | ".join(s.replace("_", " ") for s in sets) + " |",
    "|---|" + "---:|" * len(sets),
  ]
  for row in asr:
    seeds = [row] + [next((r for r in rows if r["lm"] == row["lm"]), None) for rows in others]
    cells = ["-" if r is None else _pppl_cells(r, sets) for r in seeds]
    if len(set(cells)) == 1:
      lines.append(f"| {row['lm']} | {cells[0]} |")
      continue
    lines += [f"| {row['lm']} (seed {i:d}) | {c} |" for i, c in enumerate(cells, 1)]
  return "\n".join(lines)


def report_notes(report):
  """Paragraphs that say what the report is: quick mode checks mechanics; why eval loss is "-"."""
  setup, notes = report["setup"], []
  if setup["mode"] == "quick":
    books = f"{setup['max_books']:d} books" if setup.get("max_books") else "the books"
    notes.append(
      "**Quick mode checks the mechanics only**: tiny models trained a few steps on a slice of "
      f"{books}, evaluated on a few lists and pairs, to show that every stage runs end to end. "
      "Its numbers say nothing about T-TA; the meaningful tables are those of the full mode "
      '(`bash scripts/reproduce.sh --mode=full`), in docs/results.md, "Results of the full mode".'
    )
  if any(t["eval_loss"] is None for t in report["training"].values()):
    why = "no evaluation ran"
    if not setup.get("eval_sentences"):
      why = (
        "the data holds out no sentence for it (sentences are held out by whole book, and a "
        "slice of few books may hold out none), so training ran without --eval_file"
      )
    notes.append(f'Eval loss is "-" where {why}.')
  seeds = seed_runs.seed_count(report)
  if seeds > 1:
    notes.append(
      f"**{seeds:d} seeds**: every neural LM was trained {seeds:d} times, each time with another "
      "weight initialisation and dropout on the same data order, biLM masks and steps (seed 1: "
      "run_pretraining.py's default seeds; seed k: --init_seed=k). A cell gives the mean over "
      "the seeds, then each seed's value (seed 1 / seed 2 / ...), or one value when every seed "
      "gives the same; each seed's CIs, λ and p are in report.json. A comparison of two models "
      "counts as significant only by the every-seed rule (evaluation/significance.py, "
      "`significant_in_every_seed`): its paired-bootstrap 95% CI excludes 0, on the same side, "
      'for every seed ("every seed: yes"). '
      "The learning curves are seed 1's."
    )
  return [line for note in notes for line in (note, "")]


def _others(report, key):
  """report[key] of each seed after the first (none with one seed)."""
  return seed_runs.per_seed(report, key)[1:]


def _comparison_section(report, key, unit, columns, title="T-TA vs biLM / uniLM"):
  """Heading and table of report[key] (see asr_comparisons), or nothing when it is empty; with
  several seeds, the table of its comparisons over seeds (report["seed_comparisons"])."""
  if "seed_comparisons" in report:
    over_seeds = report["seed_comparisons"].get(key)
    if not over_seeds:
      return []
    return ["", f"{title} ({unit}):", "", comparisons.seed_comparison_table(over_seeds, columns)]
  if not report.get(key):
    return []
  return ["", f"{title} ({unit}):", "", comparisons.comparison_table(report[key], columns)]


def _precision_reason(setup):
  """ " (calibration steps/s: bf16 1.52 vs fp32 1.10)" when both precisions were timed."""
  calibrations = setup.get("calibrations") or {}
  if len(calibrations) < 2:
    return ""
  rates = " vs ".join(f"{p} {c['steps_per_second']:.2f}" for p, c in sorted(calibrations.items()))
  return f" (calibration steps/s: {rates})"


def _training_section(report):
  """The training table (time, tokens, tokens/s, GFLOP/s, fraction of the matmul peak, eval loss)
  and the line saying which peak."""
  setup = report["setup"]
  parts = [
    "| model | train min | tokens trained (M) | tokens/s | GFLOP/s | of matmul peak | eval loss |",
    "|---|---:|---:|---:|---:|---:|---:|",
  ]
  runs = seed_runs.per_seed(report, "training")
  for name in report["training"]:
    for seed, training in enumerate(runs, 1):
      t = (training or {}).get(name)
      if t is None:
        continue
      of_peak = "-" if t.get("of_peak") is None else f"{100 * t['of_peak']:.0f}%"
      label = name if len(runs) == 1 else f"{name} (seed {seed:d})"
      parts.append(
        f"| {label} | {t['wall_seconds'] / 60:.1f} | {t['tokens_trained'] / 1e6:.2f} | "
        f"{t['tokens_per_second']:.0f} | {_fmt(t.get('gflops_per_second'), 1)} | {of_peak} | "
        f"{_fmt(t['eval_loss'], 3)} |"
      )
  if setup.get("matmul_peak"):
    peak = setup["matmul_peak"]
    parts += [
      "",
      f"Matmul peak: {peak['gflops']:.0f} GFLOP/s ({peak['dtype']}, [2048]^3 in a tf.function, "
      "measured after training); GFLOP/s counts the matmuls of forward and backward passes "
      "(lm/flops.py).",
    ]
  return parts


def _setup_section(report):
  """The title and the paragraph of what ran where: command, commit, machine, data, model."""
  setup = report["setup"]
  return [
    f"# T-TA reproduction at CPU scale ({setup['mode']} mode)",
    "",
    f"Command: `{setup['command']}`; commit {setup['commit']}; {setup['machine']}; "
    f"{setup['finished']}. Data: {setup['train_sentences']:d} training sentences "
    f"({setup['train_tokens']:d} tokens), vocab {setup['vocab_size']:d}. Every neural LM: "
    f"{setup['model']}, trained {setup['train_steps']:d} steps of {setup['batch_size']:d} "
    f"sentences in {setup.get('precision', 'fp32')}{_precision_reason(setup)}.",
    "",
  ]


def _asr_sections(report):
  """Table 1 (whole sets), Table 1b (the paired sample) and Table 7 (its perplexities)."""
  setup, parts = report["setup"], []
  p_line = (
    f"p: paired bootstrap over utterances ({significance.DEFAULT_RESAMPLES:,d} seeded "
    "resamples) of the LM vs the first pass."
  )
  if seed_runs.seed_count(report) > 1:
    p_line = "LM cells: mean WER over the seeds (each seed's)."
  if "asr" in report:
    lists = f"first {setup['asr_max_lists']:d}" if setup["asr_max_lists"] else "all"
    parts += [
      "",
      f"## Table 1: LibriSpeech reranking, WER % ({lists} lists of each set; λ tuned on dev)",
      "",
      wer_table(report["asr"], _others(report, "asr")),
      "",
      p_line,
      *_comparison_section(
        report, "asr_comparisons", "WER points, paired over utterances", ["test", "setting"]
      ),
    ]
  if "asr_paired" in report:
    parts += [
      "",
      f"## Table 1b: every LM on the same seeded sample of {setup['asr_sample_lists']:d} "
      "lists per set (WER %, λ tuned on the dev sample)",
      "",
      wer_table(report["asr_paired"], _others(report, "asr_paired")),
      "",
      p_line,
      *_comparison_section(
        report, "asr_paired_comparisons", "WER points, paired over utterances", ["test", "setting"]
      ),
      *_word_scoring_notes(report),
      "",
      "## Table 7: (pseudo-)perplexity mean / median per sentence [full-setting WER] on the "
      "sample of Table 1b; word pieces for the neural LMs, words for the 5-gram",
      "",
      pppl_table(report["asr_paired"], others=_others(report, "asr_paired")),
    ]
  return parts


def _word_scoring_notes(report):
  """What the word-level rows of Table 1b are, and their paired comparisons."""
  if not report.get("asr_word_comparisons"):
    return []
  return [
    "",
    f"Word-level scoring: an LM named with{comparisons.WORD_L2R} scores each piece given the other "
    "words and "
    "the earlier pieces of its own word (PLL-word-l2r; T-TA in one pass with the word mask, the "
    "biLM by masked copies); T-TA-w is a T-TA trained with that mask (same data, objective and "
    "steps as T-TA), scored the same way. The others score each piece given every other piece.",
    *_comparison_section(
      report,
      "asr_word_comparisons",
      "WER points, paired over utterances",
      ["test", "setting"],
      title="Word-level against piece-level scoring, and the word mask in training",
    ),
  ]


def _nmt_section(report):
  """Table 2: WMT21 de-en BLEU of LM-only selection."""
  if "nmt" not in report:
    return []
  return [
    "",
    "## Table 2: WMT21 de-en, LM-only selection among the "
    f"systems' outputs (first {report['setup']['nmt_max_lists'] or 'all'} segments)",
    "",
    "The candidates carry no NMT scores, so the LMs select alone (the paper interpolated "
    "with its NMT model's scores).",
    "",
    bleu_table(report["nmt"], _others(report, "nmt")),
  ]


def _sts_section(report):
  """Table 3 (STS-B, with the paper's figures) and Table 4 (SICK), with the comparisons."""
  if "sts" not in report:
    return []
  max_pairs = report["setup"]["sts_max_pairs"]
  first_pairs = f" (first {max_pairs:d} pairs)" if max_pairs else ""
  return [
    "",
    f"## Table 3: STS-B, Pearson r x 100{first_pairs}",
    "",
    sts_table(report["sts"], ["stsb_dev", "stsb_test"], True, _others(report, "sts")),
    "",
    "## Table 4: SICK test, Pearson r x 100",
    "",
    sts_table(report["sts"], ["sick_test"], others=_others(report, "sts")),
    "",
    "Cells: mean Pearson over the seeds (each seed's)."
    if seed_runs.seed_count(report) > 1
    else "Cells: Pearson [95% bootstrap CI over pairs].",
    *_comparison_section(
      report,
      "sts_comparisons",
      "Pearson x 100, paired over pairs",
      ["set", "representation"],
      title="T-TA vs biLM / uniLM, and T-TA-w (trained with the word mask) vs T-TA",
    ),
  ]


def _curves_section(report):
  """The learning-curve table and how its dev WER was measured."""
  if not report.get("curves"):
    return []
  return [
    "",
    "## Learning curves: quality vs training tokens (curves/learning_curves.png)",
    "",
    f"Dev WER: λ tuned on a seeded sample of {report['setup']['curve_asr_lists']:d} lists of "
    f"each dev set and applied to it (no test set involved), first pass '{CURVE_ASR_SETTING}' "
    "(decoder and CTC scores, no LM).",
    "",
    curves_table(report["curves"]),
  ]


def console_summary(report):
  """What reproduce.py prints at its end, before the report's path: Table 1 (the paper's headline,
  each LM's WER as a reranker), or nothing when the run rescored no ASR lists; the ~300 lines of
  report.md stay in the file."""
  if "asr" not in report:
    return ""
  table = wer_table(report["asr"], _others(report, "asr"))
  return f"Table 1: LibriSpeech reranking, WER % (every table: report.md)\n{table}\n"


def render_report(report):
  """The markdown report from the report dict (see `reproduce.build_report`): what ran, notes,
  the training table, then each table whose results the report holds."""
  parts = [*_setup_section(report), *report_notes(report), *_training_section(report)]
  for section in (_asr_sections, _nmt_section, _sts_section, _curves_section):
    parts += section(report)
  return "\n".join(parts) + "\n"

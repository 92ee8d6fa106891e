"""Tests of reproduction/reproduction_report.py: each number in its cell, p values, CIs and paired
comparisons, and the notes of a quick-mode report."""

import pytest

from evaluation import comparisons
from reproduction import reproduction_report
from reproduction import seed_runs


def _asr_row(lm, reranked, lam, ppl):
  results = []
  for i, (test, setting) in enumerate([("test_clean", "am"), ("test_clean", "full")]):
    results.append(
      {
        "test": test,
        "setting": setting,
        "first_pass": 2.0 + i,
        "oracle": 0.5 + i,
        "reranked": reranked[i],
        "lambda": lam[i],
      }
    )
  return {
    "lm": lm,
    "results": results,
    "perplexity": {"test_clean": {"mean": ppl[0], "median": ppl[1]}},
  }


def test_report_tables_put_each_number_in_its_cell():
  asr = [
    _asr_row("T-TA", (1.11, 1.22), (0.3, 0.45), (300.0, 12.5)),
    _asr_row("5-gram", (1.33, 1.44), (0.1, 0.2), (700.0, 250.0)),
  ]
  lines = reproduction_report.wer_table(asr).splitlines()
  assert lines[0] == "| method | test clean am | test clean full |"
  assert lines[2] == "| first pass | 2.00 | 3.00 |"
  assert lines[3] == "| + T-TA | 1.11 (λ 0.30) | 1.22 (λ 0.45) |"
  assert lines[4] == "| + 5-gram | 1.33 (λ 0.10) | 1.44 (λ 0.20) |"
  assert lines[5] == "| oracle | 0.50 | 1.50 |"
  ppl = reproduction_report.pppl_table(asr, sets=("test_clean",)).splitlines()
  assert ppl[2] == "| T-TA | 300.0 / 12.5 [1.22] |"
  sts = [
    {"model": "T-TA", "representation": "context", "scores": {"sick_test": [55.5, 50.0]}},
    {"model": "T-TA", "representation": "embed", "scores": {"sick_test": [44.4, 40.0]}},
    {"model": "biLM", "representation": "context", "scores": {"sick_test": [33.3, 30.0]}},
  ]
  table = reproduction_report.sts_table(sts, ["sick_test"]).splitlines()
  assert table[0] == "| model | representation | sick_test |"
  assert table[2:] == [
    "| T-TA | context | 55.50 |",
    "| T-TA | embed | 44.40 |",
    "| biLM | context | 33.30 |",
  ]


def _with_errors(row, errors, p_value):
  """`row` with per-utterance errors (4 words each) and a stored p vs the first pass."""
  for r in row["results"]:
    r.update(errors=errors, reference_words=[4] * len(errors))
    r["vs_first_pass"] = {"difference": -1.0, "low": -2.0, "high": 0.5, "p_value": p_value}
  return row


def test_report_cells_show_p_values_cis_and_paired_lm_comparisons():
  asr = [
    _with_errors(_asr_row("T-TA", (1.11, 1.22), (0.3, 0.45), (1, 1)), [0, 0, 0, 0], 0.004),
    _with_errors(_asr_row("biLM", (1.33, 1.44), (0.1, 0.2), (1, 1)), [1, 1, 1, 1], 0.5),
    _asr_row("5-gram", (1.5, 1.6), (0.1, 0.2), (1, 1)),  # NMT-like row: no errors, no p
  ]
  lines = reproduction_report.wer_table(asr).splitlines()
  assert lines[3] == "| + T-TA | 1.11 (λ 0.30, p 0.004) | 1.22 (λ 0.45, p 0.004) |"
  assert lines[4] == "| + biLM | 1.33 (λ 0.10, p 0.500) | 1.44 (λ 0.20, p 0.500) |"
  assert lines[5] == "| + 5-gram | 1.50 (λ 0.10) | 1.60 (λ 0.20) |"
  # T-TA makes 0 errors where biLM makes 1 in 4 words, on every utterance: -25 WER points in
  # every resample, so the CI is [-25, -25] and no resample reaches 0 (p 0).
  paired = comparisons.asr_comparisons(asr)
  assert [(c["b"], c["test"], c["setting"]) for c in paired] == [
    ("biLM", "test_clean", "am"),
    ("biLM", "test_clean", "full"),
  ]
  assert paired[0]["difference"] == pytest.approx(-25.0)
  assert paired[0]["low"] == pytest.approx(-25.0) == paired[0]["high"]
  assert paired[0]["p_value"] == 0.0 and paired[0]["num_units"] == 4
  table = comparisons.comparison_table(paired, ["test", "setting"]).splitlines()
  assert table[2] == "| T-TA - biLM | test clean | am | -25.00 [-25.00, -25.00] | < 0.001 |"
  # STS: T-TA's cosines follow the gold scores exactly (r = 100), biLM's are reversed
  # (r = -100): difference 200, and its CI stays above 0.
  gold = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 1.5, 2.5, 3.5, 4.5]
  sts = [
    {
      "model": "T-TA",
      "representation": "context",
      "scores": {"sick_test": [100.0, 100.0]},
      "pearson_ci": {"sick_test": [99.5, 100.0]},
      "cosines": {"sick_test": [g / 5 for g in gold]},
      "gold": {"sick_test": gold},
    },
    {
      "model": "biLM",
      "representation": "context",
      "scores": {"sick_test": [-100.0, -100.0]},
      "pearson_ci": {"sick_test": [-100.0, -99.5]},
      "cosines": {"sick_test": [1 - g / 5 for g in gold]},
      "gold": {"sick_test": gold},
    },
  ]
  cells = reproduction_report.sts_table(sts, ["sick_test"]).splitlines()
  assert cells[2] == "| T-TA | context | 100.00 [99.50, 100.00] |"
  assert cells[3] == "| biLM | context | -100.00 [-100.00, -99.50] |"
  (c,) = comparisons.sts_comparisons(sts)
  assert (c["a"], c["b"], c["set"], c["representation"]) == ("T-TA", "biLM", "sick_test", "context")
  assert c["difference"] == pytest.approx(200.0)
  assert 0 < c["low"] <= c["high"] <= 200.0 + 1e-9 and c["p_value"] < 0.01


def _report(mode, eval_loss, eval_sentences):
  return {
    "setup": {
      "mode": mode,
      "command": "python reproduce.py",
      "commit": "abc1234",
      "machine": "2 cores",
      "finished": "2026-11-24 10:00",
      "train_sentences": 100,
      "train_tokens": 1000,
      "eval_sentences": eval_sentences,
      "max_books": 8 if mode == "quick" else None,
      "vocab_size": 2000,
      "model": "3 layers x 128 hidden, 2 heads, FFN 512",
      "train_steps": 60,
      "batch_size": 32,
    },
    "training": {
      "T-TA": {
        "wall_seconds": 60.0,
        "tokens_per_second": 900.0,
        "tokens_trained": 1.92e6,
        "gflops_per_second": 3.5,
        "of_peak": 0.25,
        "eval_loss": eval_loss,
      }
    },
  }


def test_quick_report_says_it_checks_mechanics_and_why_eval_loss_is_missing():
  text = reproduction_report.render_report(_report("quick", None, 0))
  assert "Quick mode checks the mechanics only" in text
  assert "8 books" in text
  assert 'docs/results.md, "Results of the full mode"' in text
  assert 'Eval loss is "-"' in text and "holds out no sentence" in text
  assert "| T-TA | 1.0 | 1.92 | 900 | 3.5 | 25% | - |" in text
  full = reproduction_report.render_report(_report("full", 4.2, 5000))
  assert "Quick mode" not in full and "Eval loss is" not in full


def _sts_row(model, representation, pearson, ci):
  return {
    "model": model,
    "representation": representation,
    "scores": {n: [pearson, pearson - 1.0] for n in ("stsb_dev", "stsb_test", "sick_test")},
    "pearson_ci": {n: list(ci) for n in ("stsb_dev", "stsb_test", "sick_test")},
  }


def _comparison(a, b, difference, low, high, p_value=0.01):
  return {
    "a": a,
    "b": b,
    "set": "sick_test",
    "representation": "context",
    "difference": difference,
    "low": low,
    "high": high,
    "p_value": p_value,
    "num_units": 10,
  }


def _two_seed_report():
  """A full-mode report of two seeds: seed 2 moves every neural figure, not the 5-gram's."""
  report = _report("full", 4.2, 5000)
  report["asr_paired"] = [
    _asr_row("T-TA", (1.11, 1.22), (0.3, 0.45), (300.0, 12.5)),
    _asr_row("5-gram", (1.33, 1.44), (0.1, 0.2), (700.0, 250.0)),
  ]
  report["sts"] = [_sts_row("T-TA", "context", 40.0, (35.0, 45.0))]
  report["sts"].append(_sts_row("biLM", "context", 30.0, (25.0, 35.0)))
  # T-TA beats the biLM by 10 [2, 18] in seed 1 and by 4 [-1, 9] in seed 2: not in every seed.
  report["sts_comparisons"] = [_comparison("T-TA", "biLM", 10.0, 2.0, 18.0)]
  seed2 = {
    "seed": 2,
    "training": {"T-TA": dict(report["training"]["T-TA"], wall_seconds=120.0)},
    "asr_paired": [
      _asr_row("T-TA", (1.31, 1.02), (0.3, 0.45), (320.0, 13.5)),
      _asr_row("5-gram", (1.33, 1.44), (0.1, 0.2), (700.0, 250.0)),
    ],
    "sts": [_sts_row("T-TA", "context", 60.0, (55.0, 65.0))],
    "sts_comparisons": [_comparison("T-TA", "biLM", 4.0, -1.0, 9.0, 0.2)],
  }
  seed2["sts"].append(_sts_row("biLM", "context", 20.0, (15.0, 25.0)))
  report["seed_runs"] = [seed2]
  report["setup"]["seeds"] = 2
  report["setup"].update(asr_sample_lists=4, sts_max_pairs=None)
  report["seed_comparisons"] = seed_runs.seed_comparisons(report)
  return report


def test_two_seeds_show_each_seeds_value_and_the_mean():
  text = reproduction_report.render_report(_two_seed_report())
  # Pearson: means (40 + 60) / 2 and (30 + 20) / 2, then seed 1 / seed 2; no CIs (per seed).
  assert "| T-TA | context | 50.00 (40.00 / 60.00) |" in text
  assert "| biLM | context | 25.00 (30.00 / 20.00) |" in text
  assert "Cells: mean Pearson over the seeds (each seed's)." in text
  # WER: (1.11 + 1.31) / 2 and (1.22 + 1.02) / 2; the 5-gram, the same in both seeds, once.
  assert "| + T-TA | 1.21 (1.11 / 1.31) | 1.12 (1.22 / 1.02) |" in text
  assert "| + 5-gram | 1.33 | 1.44 |" in text
  # Perplexity and training: a row per seed; the 5-gram's perplexities are the same, one row.
  assert "| T-TA (seed 1) | - | 300.0 / 12.5 [1.22] | - | - |" in text
  assert "| T-TA (seed 2) | - | 320.0 / 13.5 [1.02] | - | - |" in text
  assert "| 5-gram | - | 700.0 / 250.0 [1.44] | - | - |" in text
  assert "| T-TA (seed 1) | 1.0 | 1.92 |" in text and "| T-TA (seed 2) | 2.0 | 1.92 |" in text
  # The comparison: mean (10 + 4) / 2, each seed's CI, and not significant in every seed.
  assert (
    "| T-TA - biLM | sick test | context | +7.00 | +10.00 [+2.00, +18.00]; +4.00 [-1.00, +9.00] "
    "| no |" in text
  )
  assert "**2 seeds**" in text and "`significant_in_every_seed`" in text


def test_seed_comparisons_pair_the_same_comparison_of_each_seed():
  combine = seed_runs.combine_comparisons
  both = combine(
    [
      [_comparison("T-TA", "biLM", 3.0, 1.0, 5.0), _comparison("T-TA", "uniLM", 1.0, -1.0, 3.0)],
      [_comparison("T-TA", "biLM", 5.0, 2.0, 8.0)],
    ]
  )
  assert [(c["a"], c["b"], c["set"]) for c in both] == [
    ("T-TA", "biLM", "sick_test"),
    ("T-TA", "uniLM", "sick_test"),
  ]
  assert both[0]["difference"] == 4.0 and both[0]["every_seed"] is True
  assert [s["low"] for s in both[0]["seeds"]] == [1.0, 2.0]
  # Seed 2 lacks T-TA - uniLM: the mean of the seed that has it, and no claim.
  assert both[1]["difference"] == 1.0 and both[1]["seeds"][1] is None
  assert both[1]["every_seed"] is False


def test_the_console_summary_is_table_1_alone():
  report = _report("full", 4.2, 5000)
  assert reproduction_report.console_summary(report) == ""  # no rescoring in this run
  report["asr"] = [_asr_row("T-TA", (1.11, 1.22), (0.3, 0.45), (300.0, 12.5))]
  summary = reproduction_report.console_summary(report)
  table = reproduction_report.wer_table(report["asr"])
  title, *rows = summary.splitlines()
  assert "report.md" in title and rows == table.splitlines()

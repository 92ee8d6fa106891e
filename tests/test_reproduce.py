"""Tests of reproduce.py: missing data, report tables, and one tiny end-to-end
run on real data slices that must resume without redoing any stage (the stage
stamps themselves are tested in test_io_utils.py)."""

import json
import os
import subprocess
import sys

from conftest import data_dir_or_skip

import reproduce

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_missing_data_names_every_file_and_its_source(tmp_path):
  (tmp_path / "stsb").mkdir()
  (tmp_path / "stsb" / "sts-dev.csv").write_text("x")
  proc = subprocess.run(
    [
      sys.executable,
      "reproduce.py",
      f"--data_dir={tmp_path}",
      f"--work_dir={tmp_path / 'work'}",
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
  )
  assert proc.returncode == 2
  for rel, _ in reproduce.REQUIRED_DATA:
    if rel == "stsb/sts-dev.csv":
      assert rel + "\n" not in proc.stderr
    else:
      assert rel in proc.stderr
  assert "ixa2.si.ehu.eus/stswiki" in proc.stderr
  assert "wmt21-news-systems" in proc.stderr
  assert not (tmp_path / "work").exists()


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
  lines = reproduce.wer_table(asr).splitlines()
  assert lines[0] == "| method | test clean am | test clean full |"
  assert lines[2] == "| first pass | 2.00 | 3.00 |"
  assert lines[3] == "| + T-TA | 1.11 (λ 0.30) | 1.22 (λ 0.45) |"
  assert lines[4] == "| + 5-gram | 1.33 (λ 0.10) | 1.44 (λ 0.20) |"
  assert lines[5] == "| oracle | 0.50 | 1.50 |"
  ppl = reproduce.pppl_table(asr, sets=("test_clean",)).splitlines()
  assert ppl[2] == "| T-TA | 300.0 / 12.5 [1.22] |"
  sts = [
    {"model": "T-TA", "representation": "context", "scores": {"sick_test": [55.5, 50.0]}},
    {"model": "T-TA", "representation": "embed", "scores": {"sick_test": [44.4, 40.0]}},
    {"model": "biLM", "representation": "context", "scores": {"sick_test": [33.3, 30.0]}},
  ]
  table = reproduce.sts_table(sts, ["sick_test"]).splitlines()
  assert table[2] == "| T-TA | 55.50 | 44.40 |"
  assert table[3] == "| biLM | 33.30 | - |"


def test_tiny_end_to_end_run_reports_every_table_and_resumes(tmp_path):
  data_dir_or_skip("gutenberg-books-subset")
  work = tmp_path / "work"
  cmd = [
    sys.executable,
    "reproduce.py",
    "--mode=quick",
    f"--work_dir={work}",
    "--max_books=2",
    "--train_steps=3",
    "--sts_max_pairs=12",
    "--asr_max_lists=2",
    "--nmt_max_lists=2",
  ]
  first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
  assert first.returncode == 0, first.stderr[-3000:]
  report = json.loads((work / "report.json").read_text())
  assert report["setup"]["train_steps"] == 3
  assert set(report["training"]) == {"T-TA", "biLM", "uniLM"}
  for name, t in report["training"].items():
    assert t["final_step"] == 3, name
  assert [r["lm"] for r in report["asr"]] == ["T-TA", "biLM", "uniLM", "5-gram"]
  assert [r["lm"] for r in report["nmt"]] == ["T-TA", "biLM", "uniLM", "5-gram"]
  assert {(r["model"], r["representation"]) for r in report["sts"]} == {
    (m, r) for m in ("T-TA", "biLM", "uniLM") for r in ("context", "embed")
  }
  # The neural models were trained on LibriSpeech-normalized text and say so.
  config = json.loads((work / "models" / "tta" / "config.json").read_text())
  assert config["normalization"] == "librispeech"
  text = (work / "report.md").read_text()
  for table in ("Table 1", "Table 2", "Table 3", "Table 4", "Table 7"):
    assert table in text
  # A second run finds every stage done: no training, scoring or KenLM step.
  logs_before = sorted(os.listdir(work / "logs"))
  sizes = {n: os.path.getsize(work / "logs" / n) for n in logs_before}
  second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
  assert second.returncode == 0, second.stderr[-3000:]
  assert sorted(os.listdir(work / "logs")) == logs_before
  for name in logs_before:
    if name != "data.log":  # the data step runs and finds itself complete
      assert os.path.getsize(work / "logs" / name) == sizes[name], name
  assert json.loads((work / "report.json").read_text())["asr"] == report["asr"]

"""Tests of reproduce.py and its stages (reproduction/): missing data, steps and their console,
the precision plan, curve checkpoints, and one tiny end-to-end run on real data slices that must
resume without redoing any stage (the stage stamps themselves are tested in test_io_utils.py; the
report's tables in test_reproduction_report.py)."""

import json
import os
import re
import subprocess
import sys

import commands
from conftest import data_dir_or_skip
from conftest import lock_files
import pytest
import tensorflow as tf

from lm import checkpoints
from reproduction import modes
from reproduction import reproduction_report
from reproduction import runner
from reproduction import seed_runs
from reproduction import stages
from util import cli
from util import machine
from util import progress

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
  for rel, _ in modes.REQUIRED_DATA:
    if rel == "stsb/sts-dev.csv":
      assert rel + "\n" not in proc.stderr
    else:
      assert rel in proc.stderr
  assert "ixa2.si.ehu.eus/stswiki" in proc.stderr
  assert "wmt21-news-systems" in proc.stderr
  assert not (tmp_path / "work").exists()


def _run_here(cmd, log, show):
  """runner.run_python with the stage's command run in this process (tests/commands.py)."""
  script, *args = cmd[1:]
  result = commands.run(script, *args)
  log.write(result.stdout)
  for line in result.stderr.splitlines(keepends=True):
    log.write(line)
    show(line)
  return result.returncode


def _threads_as_they_are(intra_op, inter_op):
  """machine.pin_threads in a process whose TensorFlow has started: its pools, unchanged."""
  del intra_op, inter_op
  return (
    tf.config.threading.get_intra_op_parallelism_threads(),
    tf.config.threading.get_inter_op_parallelism_threads(),
  )


@pytest.mark.slow(seconds=120)
def test_tiny_end_to_end_run_reports_every_table_and_resumes(tmp_path, monkeypatch):
  data_dir_or_skip("gutenberg-books-subset")
  monkeypatch.setattr(runner, "run_python", _run_here)
  # The peak stage's run_benchmark.py sets its thread pools before TensorFlow starts, which here
  # has (its setting of them: test_benchmark.py); in a process of its own it paid TF's start-up.
  monkeypatch.setattr(machine, "pin_threads", _threads_as_they_are)
  work = tmp_path / "work"
  cmd = [
    "--mode=quick",
    f"--work_dir={work}",
    "--max_books=2",
    "--train_steps=3",
    "--sts_max_pairs=12",
    "--asr_max_lists=2",
    "--asr_sample_lists=2",
    "--nmt_max_lists=2",
    "--curve_asr_lists=1",
  ]
  first = commands.run("reproduce.py", *cmd)
  assert first.returncode == 0, first.stderr[-3000:]
  assert lock_files(work) == []  # its steps' (cache/.lm_scores.jsonl.lock, ...)
  report = json.loads((work / "report.json").read_text())
  assert report["setup"]["train_steps"] == 3
  assert report["setup"]["curve_asr_lists"] == 1  # the flag overrides the mode's 3
  assert set(report["training"]) == {"T-TA", "T-TA-w", "biLM", "uniLM"}
  for name, t in report["training"].items():
    assert t["final_step"] == 3, name
    # 3 steps leave no timed step (the first ones are warm-up): no rate, so no fraction.
    assert t["of_peak"] is None, name
  peak = report["setup"]["matmul_peak"]
  assert peak["dtype"] == "float32" and peak["gflops"] > 0  # --train_steps: no bf16 plan
  # Whole sets (here the first 2 lists) for the one-pass LMs; every LM on the paired sample.
  assert [r["lm"] for r in report["asr"]] == ["T-TA", "T-TA-w", "uniLM", "5-gram"]
  # T-TA-w scores words by default (its training mask); asr_word adds T-TA and the biLM so.
  scoring = {r["lm"]: r["scoring"] for r in report["asr_paired"]}
  assert scoring == {
    "T-TA": "piece",
    "T-TA-w": "word_l2r",
    "biLM": "piece",
    "uniLM": "piece",
    "5-gram": "word",  # KenLM scores words whatever is asked
    "T-TA (word_l2r)": "word_l2r",
    "biLM (word_l2r)": "word_l2r",
  }
  assert [r["lm"] for r in report["nmt"]] == ["T-TA", "T-TA-w", "biLM", "uniLM", "5-gram"]
  # Learning curves: the one checkpoint of a 3-step run per model, every measure filled in.
  assert [(p["model"], p["step"]) for p in report["curves"]] == [
    ("T-TA", 3),
    ("T-TA-w", 3),
    ("biLM", 3),
    ("uniLM", 3),
  ]
  for point in report["curves"]:
    assert point["tokens"] > 0
    assert all(point[m] is not None for m, _ in reproduction_report.CURVE_PANELS)
  assert (work / "curves" / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"
  # context, first_last and embed, each also whitened to 12 dimensions (--sts_max_pairs=12).
  representations = [f"{r}{w}" for r in ("context", "first_last", "embed") for w in ("", "+W12")]
  assert [(r["model"], r["representation"]) for r in report["sts"]] == [
    (m, r) for m in ("T-TA", "T-TA-w", "biLM", "uniLM") for r in representations
  ]
  assert (work / "eval" / "sts" / "whitening" / "stsb_dev.npz").exists()
  # The neural models were trained on LibriSpeech-normalized text and say so.
  config = json.loads((work / "models" / "tta" / "config.json").read_text())
  assert config["normalization"] == "librispeech"
  _assert_report_tables(work, report)
  _assert_second_run_redoes_nothing(cmd, work, report)
  _assert_an_sts_stage_of_other_representations_runs_again(cmd, work)


def _assert_report_tables(work, report):
  """report.md holds every table, and the paired comparisons are all there."""
  text = (work / "report.md").read_text()
  for table in ("Table 1", "Table 1b", "Table 2", "Table 3", "Table 4", "Table 7", "Learning"):
    assert table in text
  # Paired comparisons of T-TA with biLM and uniLM: 2 test sets x 2 settings (uniLM only on the
  # whole sets), 3 STS sets x 6 representations (and T-TA-w vs T-TA); the word-level pairs
  # (comparisons.WORD_PAIRS) on the sample; the WER cells carry their p vs the first pass.
  assert len(report["asr_comparisons"]) == 4 and len(report["asr_paired_comparisons"]) == 8
  assert len(report["asr_word_comparisons"]) == 12
  assert len(report["sts_comparisons"]) == 54
  assert "T-TA (word_l2r) - T-TA" in text and "T-TA-w - T-TA (word_l2r)" in text
  assert "T-TA - biLM" in text and "T-TA - uniLM" in text
  assert re.search(r"\| \+ T-TA \| \d+\.\d\d \(λ \d\.\d\d, p \d\.\d{3}\) \|", text)


def _assert_second_run_redoes_nothing(cmd, work, report):
  """A second run finds every stage done: no training, scoring or KenLM step."""
  logs_before = sorted(os.listdir(work / "logs"))
  sizes = {n: os.path.getsize(work / "logs" / n) for n in logs_before}
  second = commands.run("reproduce.py", *cmd)
  assert second.returncode == 0, second.stderr[-3000:]
  assert sorted(os.listdir(work / "logs")) == logs_before
  for name in logs_before:
    if name != "data.log":  # the data step runs and finds itself complete
      assert os.path.getsize(work / "logs" / name) == sizes[name], name
  assert json.loads((work / "report.json").read_text())["asr"] == report["asr"]


def _assert_an_sts_stage_of_other_representations_runs_again(cmd, work):
  """A work dir whose sts stage ran before its key held the representations and whitening (only
  context and embed then) runs that stage again, and no other."""
  stamp = work / "stamps" / "sts.json"
  old = json.loads(stamp.read_text())
  for field in ("representations", "whiten"):
    del old["key"][field]
  stamp.write_text(json.dumps(old))
  sizes = {n: os.path.getsize(work / "logs" / n) for n in os.listdir(work / "logs")}
  again = commands.run("reproduce.py", *cmd)
  assert again.returncode == 0, again.stderr[-3000:]
  grown = {n for n in sizes if os.path.getsize(work / "logs" / n) != sizes[n]}
  assert grown == {"sts.log", "data.log"}
  assert json.loads(stamp.read_text())["key"]["whiten"] == 12


def test_console_hides_checkpoint_noise_but_not_errors():
  noise = "I1124 10:18:18.123456 140213 checkpoint.py:123] Sharding callback duration: 34\n"
  assert runner.console_line(noise) is None
  # Other lines show, with absl's prefix cut to its level letter (none for info).
  assert (
    runner.console_line("I1124 10:18:18.123456 140213 run_rescoring.py:97] T-TA: 10/10\n")
    == "T-TA: 10/10\n"
  )
  assert (
    runner.console_line("E1124 10:18:18.123456 140213 training.py:9] loss is NaN\n")
    == "E loss is NaN\n"
  )
  real = "E0000 00:00:1795515241.1 2974 op_kernel.cc:1828] OP_REQUIRES failed: OOM\n"
  assert runner.console_line(real) == "E OP_REQUIRES failed: OOM\n"
  assert runner.console_line("Traceback (most recent call last):\n") is not None


def test_a_step_shows_its_stderr_logs_everything_and_fails_by_kind(tmp_path, capfd):
  code = (
    "import sys; print('| results table |'); "
    "sys.stderr.write('I1124 10:18:18.1 7 checkpoint.py:1] Sharding callback duration: 34\\n'); "
    "sys.stderr.write('T-TA: 5/10 sentences\\n')"
  )
  runner.run_step(str(tmp_path), "demo", ["-c", code])
  shown = capfd.readouterr().err
  assert "[demo] T-TA: 5/10 sentences" in shown
  assert "results table" not in shown and "Sharding" not in shown
  log = (tmp_path / "logs" / "demo.log").read_text()
  assert "| results table |" in log and "Sharding callback" in log and "T-TA: 5/10" in log
  with pytest.raises(cli.InputError, match="stage bad_input stopped on a wrong input"):
    runner.run_step(str(tmp_path), "bad_input", ["-c", "import sys; sys.exit(2)"])
  with pytest.raises(RuntimeError, match="stage crash failed"):
    runner.run_step(str(tmp_path), "crash", ["-c", "raise SystemExit(1)"])


def test_precision_is_the_faster_calibration_and_fp32_on_a_tie():
  fast, slow = {"steps_per_second": 2.0}, {"steps_per_second": 1.0}
  assert stages.choose_precision({"fp32": slow, "bf16": fast}) == "bf16"
  assert stages.choose_precision({"fp32": fast, "bf16": slow}) == "fp32"
  assert stages.choose_precision({"fp32": slow, "bf16": dict(slow)}) == "fp32"
  assert stages.choose_precision({"fp32": slow}) == "fp32"
  setup = {"calibrations": {"fp32": slow, "bf16": fast}}
  assert (
    reproduction_report._precision_reason(setup) == " (calibration steps/s: bf16 2.00 vs fp32 1.00)"
  )
  assert reproduction_report._precision_reason({"calibrations": {"fp32": slow}}) == ""


def test_curve_checkpoints_are_spread_and_viewed_as_model_dirs(tmp_path):
  # Indices 0, 2.5, 5, 7.5, 10 of 11 checkpoints, rounded half to even: 0, 2, 5, 8, 10.
  assert stages.spread([10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 101], 5) == [
    10,
    30,
    60,
    90,
    101,
  ]
  assert stages.spread([5, 9], 5) == [5, 9]
  model = tmp_path / "model"
  model.mkdir()
  for name in ("config.json", "vocab.txt", "ckpt-4.index", "ckpt-4.data-00000-of-00001"):
    (model / name).write_text(name)
  (model / "ckpt-40.index").write_text("not this one")
  assert stages.checkpoint_steps(str(model)) == [4, 40]
  view = stages.checkpoint_view(str(model), 4, str(tmp_path / "view"))
  assert sorted(os.listdir(view)) == [
    "checkpoint",
    "ckpt-4.data-00000-of-00001",
    "ckpt-4.index",
    "config.json",
    "vocab.txt",
  ]

  assert checkpoints.latest_checkpoint(view) == os.path.join(view, "ckpt-4")


def test_seed_one_keeps_the_one_seed_layout_and_flags_and_the_others_their_own(tmp_path):
  work = str(tmp_path)
  # Seed 1 is a one-seed run as it was: its dir, run_pretraining.py's default seeds.
  assert seed_runs.seed_dir(work, 1) == work and seed_runs.init_seed_flags(1) == []
  assert seed_runs.seed_dir(work, 3) == os.path.join(work, "seed3")
  assert seed_runs.init_seed_flags(3) == ["--init_seed=3"]
  # A further seed's run_step writes its log and stamps in its own dir, and its stages show their
  # seed on the console.
  runner.run_step(seed_runs.seed_dir(work, 2), "sts", ["-c", "pass"])
  assert (tmp_path / "seed2" / "logs" / "sts.log").exists()
  assert not (tmp_path / "logs").exists()
  seed_stages = seed_runs.SeedStages(progress.Stages(["sts", "seed2/sts"]), 2)
  assert seed_stages.start("sts").startswith("stage 2 of 2: seed2/sts")

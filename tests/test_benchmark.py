"""Mechanics of run_benchmark.py: sentence picking, the stage breakdown and the
report files of a quick run. Nothing here asserts a speed."""

import json
import os
import subprocess
import sys

import commands
import conftest
from conftest import HANG_SECONDS
import pytest
import tensorflow as tf

import kinds
from lm import stage_clock
from reproduction import benchmark
import tokenization
from util import machine

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "."]


def test_sentences_of_lengths_prefers_a_real_sentence_then_joins():
  sentences = [("a b c", "s1"), ("d e", "s2"), ("f g h i", "s3"), ("j k", "s4")]
  picked = benchmark.sentences_of_lengths(sentences, [2, 4, 6])
  assert picked[2] == ("d e", "s2")
  assert picked[4] == ("f g h i", "s3")
  text, origin = picked[6]
  assert text == "a b c d e f" and origin.startswith("joined: s1 .. s3")
  with pytest.raises(ValueError, match="fewer than the 99"):
    benchmark.sentences_of_lengths(sentences, [99])


def test_parse_shapes():
  assert benchmark.parse_shapes(["2048x2048x2048", "24X512x2048"]) == [
    (2048, 2048, 2048),
    (24, 512, 2048),
  ]
  with pytest.raises(Exception, match="MxKxN"):
    benchmark.parse_shapes(["2048x2048"])


def test_summarize():
  stats = benchmark.summarize([0.001 * i for i in range(1, 11)])
  assert stats["median_ms"] == pytest.approx(5.5)
  assert stats["p10_ms"] < stats["median_ms"] < stats["p90_ms"]
  assert stats["runs"] == 10


def run_benchmark_cli(*flags):
  """run_benchmark.py in a subprocess (thread pools can only be set before TF starts, and this
  process has started it): the CompletedProcess, failing the test on a non-zero exit."""
  command = [sys.executable, os.path.join(REPO, "run_benchmark.py"), *flags]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(
    command, capture_output=True, text=True, env=env, timeout=HANG_SECONDS, check=False
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def write_vocab(tmp_path):
  """The random models' vocab: the special tokens and WORDS."""
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + WORDS) + "\n")
  return vocab


@pytest.mark.slow(seconds=55)
def test_quick_run_writes_json_markdown_and_plot(tmp_path):
  conftest.data_dir_or_skip()  # STS-B sentences and N-best lists
  vocab = write_vocab(tmp_path)
  out = tmp_path / "out"
  proc = run_benchmark_cli(
    "--quick",
    f"--vocab_file={vocab}",
    "--lengths=3,70",
    "--runs=2",
    "--warmup=1",
    # One layer: each model's OpenVINO conversions, most of this run, read every variable.
    "--hidden_size=8",
    "--num_hidden_layers=1",
    "--intermediate_size=16",
    "--max_lists=1",
    "--matmul_runs=1",
    "--matmul_shapes=64x32x16,8x8x8",
    "--intra_op=1",
    "--inter_op=1",
    f"--output_dir={out}",
  )
  assert "HEADLINE sts: biLM/T-TA" in proc.stdout
  result = json.loads((out / "benchmark.json").read_text())
  env_info = result["environment"]
  assert env_info["intra_op_threads"] == 1
  assert env_info["inter_op_threads"] == 1
  assert env_info["cpu"] and env_info["tensorflow"] == tf.__version__
  # Every pretrainable kind by default (tta_word: T-TA scored word by word).
  models = [f"{m}{b}" for m in kinds.PRETRAINABLE for b in ("", "@openvino")]
  cells = {(r["task"], r["model"], r["words"]) for r in result["latency"]}
  assert cells == {(t, m, w) for t in ("sts", "rerank") for m in models for w in (3, 70)}
  for record in result["latency"]:
    assert len(record["sentence"].split()) == record["words"]
    assert record["runs"] == 2
    assert record["p10_ms"] <= record["median_ms"] <= record["p90_ms"]
    assert record["backend"] == ("openvino" if "@" in record["model"] else "tf")
    assert set(record["stages_ms"]) == set(stage_clock.StageClock.STAGES)
    assert record["stages_ms"]["graph"] > 0  # how the stages add up: test_inference's clock test
    assert (record["encoder_ms"] is None) == (record["model_type"] == "bilm")
    assert record["flops"] > 0 and record["vs_floor"] > 0 and record["memory_floor_ms"] > 0
  long = [r for r in result["latency"] if r["words"] == 70]
  assert all(r["origin"].startswith("joined:") for r in long)
  assert {r["model"] for r in result["throughput"]} == set(models)
  assert all(0 < r["of_peak"] for r in result["throughput"])
  assert all(r["sentences"] > 0 for r in result["throughput"])
  assert [(r["when"], r["shape"]) for r in result["matmul_peak"]] == [
    ("start", "[64,32]x[32,16]"),
    ("start", "[8,8]x[8,8]"),
    ("end", "[64,32]x[32,16]"),
    ("end", "[8,8]x[8,8]"),
  ]
  for record in result["matmul_peak"]:  # in the models' type, float32, by default
    assert record["dtype"] == "float32"
    m, k, n = record["m"], record["k"], record["n"]
    assert record["gflops"] == pytest.approx(2 * m * k * n / record["median_ms"] / 1e6)
  assert result["memory_bandwidth"]["gb_per_s"] > 0
  assert "## sts" in (out / "benchmark.md").read_text()
  assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert not [p for p in os.listdir(out) if p.startswith(".")]


# float32, the default, is the quick run's peak, checked there the same way: one process fewer.
@pytest.mark.parametrize("dtype", ["bfloat16"])
@pytest.mark.slow(seconds=15)
def test_peak_only_measures_the_matmul_peak_in_the_given_type(tmp_path, dtype):
  out = tmp_path / "peak"
  proc = run_benchmark_cli(
    "--peak_only",
    f"--matmul_dtype={dtype}",
    "--matmul_shapes=64x32x16",
    "--matmul_runs=2",
    f"--output_dir={out}",
  )
  (record,) = json.loads((out / "benchmark.json").read_text())["matmul_peak"]
  assert (record["dtype"], record["shape"]) == (dtype, "[64,32]x[32,16]")
  assert record["gflops"] == pytest.approx(2 * 64 * 32 * 16 / record["median_ms"] / 1e6)
  assert f"{dtype} [64,32]x[32,16]" in proc.stdout


def test_quick_run_with_peers_reports_peer_time_over_ours(tmp_path):
  conftest.data_dir_or_skip()  # STS-B sentences
  for package in ("torch", "transformers", "onnxruntime", "minicons"):
    pytest.importorskip(package)
  vocab = write_vocab(tmp_path)
  out = tmp_path / "out"
  proc = run_benchmark_cli(
    "--quick",
    f"--vocab_file={vocab}",
    "--models=tta,bilm",
    "--backends=tf",
    "--peers=all",
    "--lengths=3",
    "--runs=2",
    "--warmup=1",
    "--nbest_set=",
    "--matmul_runs=0",
    "--intra_op=1",
    "--inter_op=1",
    f"--output_dir={out}",
  )
  result = json.loads((out / "benchmark.json").read_text())
  cells = {(r["task"], r["model"]) for r in result["peer_latency"]}
  assert cells == {
    ("sts", "bert@torch"),
    ("sts", "bert@onnxruntime"),
    ("sts", "copies@torch"),
    ("rerank", "bert@torch"),
    ("rerank", "bert@onnxruntime"),
    ("rerank", "minicons@torch"),
  }
  ours = {(r["task"], r["peer"]): r["ours_model"] for r in result["peer_ratios"]}
  assert ours[("sts", "bert@onnxruntime")] == "tta" and ours[("rerank", "minicons@torch")] == "bilm"
  assert all(r["ratio"] > 0 for r in result["peer_ratios"])
  assert result["peers"]["versions"]["minicons"]
  assert "## Peers" in (out / "benchmark.md").read_text()
  assert "PEER sts at 3 words: bert@onnxruntime" in proc.stdout


def _refusal(result):
  """The one error line of a run that exited 2 without a traceback."""
  assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
  (line,) = [l for l in result.stderr.splitlines() if l.startswith("run_benchmark.py: error: ")]
  return line[len("run_benchmark.py: error: ") :]


def test_output_dir_is_new_or_empty_or_an_earlier_run_s_replaced_with_overwrite(
  tmp_path, monkeypatch
):
  # Issue 56's probes, third round (G16): benchmark.json/.md and latency.png were written in among
  # a user's files, over a user's benchmark.md of the same name. Run in this process: its thread
  # pools are TensorFlow's already.
  monkeypatch.setattr(machine, "pin_threads", lambda intra_op, inter_op: (1, 1))
  peaks = []

  def peak_only(peak, threads):
    peaks.append(peak.matmul_dtype)
    return measure_peak(peak, threads)

  measure_peak = benchmark.peak_only
  monkeypatch.setattr(benchmark, "peak_only", peak_only)
  args = ["--peak_only", "--matmul_shapes=8x8x8", "--matmul_runs=1"]
  mine = tmp_path / "mine"
  mine.mkdir()
  (mine / "a.txt").write_text("a\n")
  (mine / "benchmark.md").write_text("mine\n")
  for overwrite in ([], ["--overwrite"]):
    result = commands.run("run_benchmark.py", *args, f"--output_dir={mine}", *overwrite)
    assert _refusal(result) == (
      f"--output_dir {mine} holds a.txt, benchmark.md, which no run of this command wrote (no "
      "run.json): choose a new or empty --output_dir"
    )
  assert sorted(os.listdir(mine)) == ["a.txt", "benchmark.md"] and peaks == []
  assert (mine / "benchmark.md").read_text() == "mine\n"

  out = tmp_path / "out"
  commands.run("run_benchmark.py", *args, f"--output_dir={out}", status=0)
  assert sorted(os.listdir(out)) == ["benchmark.json", "run.json"] and peaks == ["float32"]
  first = (out / "benchmark.json").read_text()
  # A measurement is not resumed: its earlier results are replaced only when asked.
  assert _refusal(commands.run("run_benchmark.py", *args, f"--output_dir={out}")) == (
    f"--output_dir {out} holds benchmark.json of an earlier run, which run_benchmark.py does not "
    "resume: add --overwrite to replace it"
  )
  result = commands.run("run_benchmark.py", *args, "--matmul_dtype=bfloat16", f"--output_dir={out}")
  assert _refusal(result).startswith(f"--output_dir {out} holds another job: matmul_dtype float32")
  assert peaks == ["float32"] and (out / "benchmark.json").read_text() == first
  (out / "notes.txt").write_text("mine\n")
  commands.run(
    "run_benchmark.py", *args, "--matmul_dtype=bfloat16", f"--output_dir={out}", "--overwrite",
    status=0,
  )  # fmt: skip
  assert sorted(os.listdir(out)) == ["benchmark.json", "notes.txt", "run.json"]
  (peak,) = json.loads((out / "benchmark.json").read_text())["matmul_peak"]
  assert peak["dtype"] == "bfloat16" and (out / "notes.txt").read_text() == "mine\n"

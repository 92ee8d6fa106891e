"""reproduction/benchmark_report.py: headline ratios, FLOP floors and the report files."""

import json
import os

import pytest

from reproduction import benchmark_report


def test_headline():
  records = [
    {"task": task, "model_type": kind, "words": words, "median_ms": ms}
    for task in ("sts", "rerank")
    for kind, ms in (("tta", 2.0), ("bilm", 10.0))
    for words in (5, 25)
  ]
  head = benchmark_report.headline(records)
  assert head["sts"]["ratio"] == pytest.approx(5.0)
  assert head["sts"]["words"] == 25  # the length nearest 20
  assert benchmark_report.headline(records, fast="unilm") == {}


def test_headline_compares_each_model_on_its_fastest_backend():
  records = [
    {"task": "sts", "model_type": kind, "backend": backend, "words": 20, "median_ms": ms}
    for kind, backend, ms in (
      ("tta", "tf", 6.0),
      ("tta", "openvino", 2.0),
      ("bilm", "tf", 30.0),
      ("bilm", "openvino", 40.0),
    )
  ]
  head = benchmark_report.headline(records)["sts"]
  assert head["ratio"] == pytest.approx(15.0)  # 30 (bilm on tf) / 2 (tta on openvino)
  assert (head["bilm_backend"], head["tta_backend"]) == ("tf", "openvino")


def test_flop_floors_use_the_best_and_the_one_sentence_matmul_rates():
  records = [
    {
      "task": "sts",
      "model_type": "tta",
      "words": 20,
      "tokens": 22,
      "flops": 400e6,
      "weight_bytes": 40e6,
      "median_ms": m,
    }
    for m in (10.0, 12.0)
  ]
  heads = {"sts": {"words": 20, "tta_ms": 10.0}}
  peaks = [
    {"m": 2048, "n": 2048, "gflops": 100.0},
    {"m": 24, "n": 2048, "gflops": 40.0},
    {"m": 24, "n": 2048, "gflops": 50.0},
    {"m": 8, "n": 2048, "gflops": 20.0},
    {"m": 24, "n": 29530, "gflops": 90.0},  # the LM head's shape: not an FFN-like rate
    {"m": 512, "n": 2048, "gflops": 80.0},
  ]
  throughput = [{"gflops_per_s": 70.0}]
  benchmark_report.add_flop_floors(heads, records, throughput, peaks, bandwidth=20.0)
  h = heads["sts"]
  assert h["floor_ms"] == pytest.approx(4.0)  # 400 MFLOP / 100 GFLOP/s
  assert h["shape_m"] == 24  # nearest the 22 tokens
  assert h["floor_ms_shape"] == pytest.approx(8.0)  # / the best 24-row FFN rate
  assert h["vs_floor"] == pytest.approx(2.5)
  assert h["vs_floor_shape"] == pytest.approx(1.25)
  assert [r["vs_floor"] for r in records] == pytest.approx([2.5, 3.0])
  assert throughput[0]["of_peak"] == pytest.approx(0.7)
  assert h["memory_floor_ms"] == pytest.approx(2.0)  # 40 MB at 20 GB/s
  assert [r["memory_floor_ms"] for r in records] == pytest.approx([2.0, 2.0])


def test_bfloat16_backends_get_no_float32_floors():
  """The peak and weight bytes are float32 figures: a bf16 record must not be divided by them."""
  records = [
    {
      "task": "sts",
      "model_type": "tta",
      "backend": backend,
      "words": 20,
      "tokens": 22,
      "flops": 400e6,
      "weight_bytes": 40e6,
      "median_ms": ms,
    }
    for backend, ms in (("openvino", 3.0), ("openvino_bf16", 2.0))
  ]
  heads = {"sts": {"words": 20, "tta_ms": 2.0}}
  throughput = [{"gflops_per_s": 70.0, "backend": b} for b in ("tf", "openvino_bf16")]
  peaks = [{"m": 2048, "n": 2048, "gflops": 100.0}]
  benchmark_report.add_flop_floors(heads, records, throughput, peaks, bandwidth=20.0)
  assert records[0]["vs_floor"] == pytest.approx(0.75)
  assert "floor_ms" not in records[1] and "memory_floor_ms" not in records[1]
  assert "of_peak" in throughput[0] and "of_peak" not in throughput[1]
  assert "floor_ms" not in heads["sts"]  # its fastest T-TA is the bf16 one


def _result():
  """A result dict as benchmark.measure returns it, with made-up times."""
  latency = [
    {
      "task": task,
      "model": kind,
      "model_type": kind,
      "words": 20,
      "tokens": 24,
      "median_ms": ms,
      "p10_ms": ms * 0.9,
      "p90_ms": ms * 1.1,
      "graph_median_ms": ms * 0.8,
      "flops": 400e6,
      "gflops_per_s": 400e6 / ms / 1e6,
      "load_avg_1m": [0.5, 0.6],
    }
    for task in ("sts", "rerank")
    for kind, ms in (("tta", 2.0), ("bilm", 10.0))
  ]
  result = {
    "environment": {
      "cpu": "Test CPU",
      "cores_usable": 2,
      "intra_op_threads": 2,
      "inter_op_threads": 2,
      "tensorflow": "2.x",
      "keras": "3.x",
    },
    "load_avg_1m": {"start": 0.5, "end": 0.7},
    "matmul_peak": [
      {
        "when": "start",
        "shape": "[24,512]x[512,2048]",
        "m": 24,
        "n": 2048,
        "median_ms": 0.5,
        "gflops": 100.0,
        "load_avg_1m": 0.5,
      }
    ],
    "latency": latency,
    "throughput": [
      {
        "model": "tta",
        "source": "test_clean (1 lists)",
        "sentences": 30,
        "tokens": 600,
        "seconds": 1.0,
        "sentences_per_s": 30.0,
        "tokens_per_s": 600.0,
        "gflops_per_s": 10.0,
        "load_avg_1m": [0.5, 0.6],
      }
    ],
  }
  result["headline"] = benchmark_report.headline(latency)
  benchmark_report.add_flop_floors(
    result["headline"], latency, result["throughput"], result["matmul_peak"]
  )
  return result


def test_report_has_every_section_and_headline_lines(tmp_path):
  result = _result()
  report = benchmark_report.markdown_report(result)
  for section in (
    "# Runtime benchmark",
    "## sts: median latency",
    "## rerank: median latency",
    "## Details",
    "## Headline",
    "## Throughput: batched scoring of test_clean",
    "## float32 matmul peak",
  ):
    assert section in report
  assert "| 20 | 24 | 2.00 | 10.00 | 5.0x | 0.5-0.6 |" in report
  lines = benchmark_report.headline_lines(result)
  assert [l.split(":")[0] for l in lines] == ["HEADLINE sts", "HEADLINE rerank"]
  out = tmp_path / "out"
  benchmark_report.write_outputs(result, report, str(out))
  assert json.loads((out / "benchmark.json").read_text()) == result
  assert (out / "benchmark.md").read_text() == report
  assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert not [p for p in os.listdir(out) if p.startswith(".")]


def test_peer_ratios_and_their_section():
  result = _result()
  stages = {"tokenization": 0.1, "graph": 2.5}
  result["peer_latency"] = [
    {
      "task": task,
      "model": name,
      "versus": versus,
      "words": 20,
      "tokens": 24,
      "median_ms": ms,
      "p10_ms": ms,
      "p90_ms": ms,
      "stages_ms": stages,
    }
    for task, name, versus, ms in (
      ("sts", "bert@onnxruntime", "tta", 3.0),
      ("rerank", "minicons@torch", "bilm", 40.0),
      ("rerank", "bert@torch", "unilm", 9.0),  # no unilm was timed: no ratio
    )
  ]
  result["peers"] = {
    "versions": {"torch": "2.x"},
    "peers": {"bert@onnxruntime": {"fused_operators": {"sts": {"Attention": 3}}}},
  }
  ratios = benchmark_report.peer_ratios(result["latency"], result["peer_latency"])
  assert [(r["peer"], r["ours_model"], r["ratio"]) for r in ratios] == [
    ("bert@onnxruntime", "tta", pytest.approx(1.5)),  # 3 ms / T-TA's 2 ms
    ("minicons@torch", "bilm", pytest.approx(4.0)),
  ]
  result["peer_ratios"] = ratios
  report = benchmark_report.markdown_report(result)
  assert (
    "| sts | 20 | 24 | bert@onnxruntime | 3.00 | 3.00 | 3.00 | 0.10 | 2.50 | tta | 2.00 | 1.50x |"
    in report
  )
  assert (
    "| rerank | 20 | 24 | bert@torch | 9.00 | 9.00 | 9.00 | 0.10 | 2.50 | - | - | - |" in report
  )
  assert "bert@onnxruntime sts graph, fused by ONNX Runtime's optimizer: Attention 3" in report
  lines = benchmark_report.headline_lines(result)
  assert lines[-2].startswith(
    "PEER sts at 20 words: bert@onnxruntime 3.00 ms / tta 2.00 ms = 1.50x"
  )

"""scripts/profile_onnxruntime.py: the per-op aggregation of real ONNX Runtime profiles, and the
sessions, feeds and profiling twins it takes from a tiny T-TA and a tiny BERT peer.

The invariants are checked against the raw trace and ORT's own optimized graph, not against the
script's arithmetic. Nothing here asserts a speed. Skipped without onnxruntime (opt-in, as the
backend's other tests); the peer's test also needs torch and transformers.
"""

import collections
import importlib.util
import json
import os

import conftest
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
  importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed"
)

SENTENCE = "the cat sat on the mat , a dog ran far away ."


@pytest.fixture(scope="module")
def script():
  path = os.path.join(os.path.dirname(conftest.__file__), "..", "scripts", "profile_onnxruntime.py")
  spec = importlib.util.spec_from_file_location("profile_onnxruntime", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _options(threads=1):
  """Session options as onnx_backend sets them."""
  import onnxruntime  # pylint: disable=g-import-not-at-top

  options = onnxruntime.SessionOptions()
  options.intra_op_num_threads = threads
  options.add_session_config_entry("session.intra_op.allow_spinning", "1")
  options.add_session_config_entry("session.force_spinning_stop", "1")
  return options


def _small_model():
  """A graph of several op types, one of them twice; ORT fuses MatMul + Add into one node."""
  from onnx import TensorProto  # pylint: disable=g-import-not-at-top
  from onnx import helper  # pylint: disable=g-import-not-at-top
  from onnx import numpy_helper  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(0)

  def weight(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

  nodes = [
    helper.make_node("MatMul", ["x", "w1"], ["m1"]),
    helper.make_node("Add", ["m1", "b1"], ["a1"]),
    helper.make_node("Relu", ["a1"], ["r1"]),
    helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
    helper.make_node("Tanh", ["m2"], ["t2"]),
    helper.make_node("MatMul", ["t2", "w3"], ["m3"]),
    helper.make_node("Softmax", ["m3"], ["y"], axis=-1),
  ]
  graph = helper.make_graph(
    nodes,
    "small",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 32])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    [weight("w1", 32, 64), weight("b1", 64), weight("w2", 64, 64), weight("w3", 64, 16)],
  )
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _executed_ops(model, options, tmp_path):
  """Counter of the op types of the graph ORT runs: its optimized model under `options`."""
  import onnx  # pylint: disable=g-import-not-at-top
  import onnxruntime  # pylint: disable=g-import-not-at-top

  path = str(tmp_path / "optimized.onnx")
  options.optimized_model_filepath = path
  onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
  return collections.Counter(node.op_type for node in onnx.load(path).graph.node)


def _trace(session):
  with open(session.end_profiling(), encoding="utf-8") as f:
    return json.load(f)


def test_aggregate_keeps_the_timed_runs_of_a_real_profile(script, tmp_path):
  import onnxruntime  # pylint: disable=g-import-not-at-top

  model, warmup, runs = _small_model(), 3, 5
  options = _options()
  options.enable_profiling = True
  options.profile_file_prefix = str(tmp_path / "small")
  session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
  feeds = {"x": np.ones([2, 32], np.float32)}
  for _ in range(warmup + runs):
    session.run(None, feeds)
  events = _trace(session)
  got = script.aggregate(events, warmup)

  executed = _executed_ops(model, _options(), tmp_path)
  assert executed["FusedGemm"] == 1 and executed["MatMul"] == 2  # several ops, one twice
  kernels = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
  assert len(kernels) == (warmup + runs) * sum(executed.values())  # every run, every node
  model_runs = sorted((e for e in events if e["name"] == "model_run"), key=lambda e: e["ts"])
  assert len(model_runs) == warmup + runs
  # The timed runs' kernels, found independently: inside one of the last `runs` model_runs.
  timed = [
    e for e in kernels if any(r["ts"] <= e["ts"] <= r["ts"] + r["dur"] for r in model_runs[warmup:])
  ]
  assert got["runs"] == runs
  assert got["nodes"] == [sum(executed.values())] * runs  # warm-up runs' events left out
  assert got["model_run_us"] == [r["dur"] for r in model_runs[warmup:]]
  assert sum(got["kernel_us"]) == sum(e["dur"] for e in timed)
  assert {o["op"]: o["nodes_per_call"] for o in got["ops"]} == dict(executed)
  for o in got["ops"]:
    # mean per call x runs = the op's kernel time over the timed runs.
    assert o["mean_us"] * runs == pytest.approx(
      sum(e["dur"] for e in timed if e["args"]["op_name"] == o["op"])
    )
  assert sum(o["share"] for o in got["ops"]) == pytest.approx(1.0)
  assert sum(o["mean_us"] for o in got["ops"]) == pytest.approx(np.mean(got["kernel_us"]))
  assert [o["total_us"] for o in got["ops"]] == sorted(
    (o["total_us"] for o in got["ops"]), reverse=True
  )
  with pytest.raises(ValueError, match="none after"):
    script.aggregate(events, warmup + runs)


@pytest.fixture(scope="module")
def tiny_tta(tokenizer):
  """A tiny T-TA as `NeuralLM(backend="onnxruntime")`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from lm import inference  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top

  tf.keras.utils.set_random_seed(3)
  config = conftest.tiny_config(vocab_size=tokenizer.vocab_size)
  return inference.NeuralLM(modeling.build_model(config, "tta"), tokenizer, backend="onnxruntime")


def test_tiny_tta_graph_feeds_and_profiling_twin(script, tiny_tta, tmp_path):
  """The session a public call runs and its exact feeds; the twin has the session's options,
  computes the same outputs, and its profile holds every node ORT runs, once per timed run."""
  lm = tiny_tta
  engine = script.our_engine("tta@onnxruntime", lm)
  (ids,), _ = lm.tokenize([SENTENCE])
  for task, graph_name in (("sts", "vectors"), ("rerank", "scores")):
    call = engine.call(task, SENTENCE)
    expected = call()
    graph = script.graph_of(engine, call)
    session = lm._onnx._sessions[graph_name, "dmsa"][0]  # pylint: disable=protected-access
    assert graph.session is session
    assert "run" not in vars(session)  # the recorder is gone
    np.testing.assert_array_equal(graph.feeds["input_ids"], [ids])
    assert set(graph.feeds) == {i.name for i in session.get_inputs()}
    outputs = session.run(None, graph.feeds)
    if task == "sts":
      np.testing.assert_array_equal(outputs[0][:, 0], expected)  # row 0: "context"
    else:
      np.testing.assert_allclose(outputs[0], expected[0].token_logprobs, rtol=0, atol=1e-6)

    twin = script.profiling_twin(session, graph.model, str(tmp_path / task))
    options = script.session_options(session)
    assert options["config"] == {
      "session.intra_op.allow_spinning": "1",
      "session.force_spinning_stop": "1",
    }
    assert script.session_options(twin) == options
    for got, want in zip(twin.run(None, graph.feeds), outputs):
      np.testing.assert_array_equal(got, want)
    warmup, runs = 2, 3
    script.profile_runs({"tta": (twin, graph.feeds)}, runs, warmup - 1, rounds=2)
    profile = script.aggregate(_trace(twin), warmup)  # the run above was a warm-up run too
    executed = _executed_ops(graph.model, _options(), tmp_path)
    assert profile["nodes"] == [sum(executed.values())] * runs
    assert {o["op"]: o["nodes_per_call"] for o in profile["ops"]} == dict(executed)


def test_profile_cell_and_report_of_tiny_tta(script, tiny_tta, tmp_path):
  """One cell end to end: the record's per-call numbers agree with its per-run lists and
  per-op rows, its trace is kept, and the report shows both tables."""
  engine = script.our_engine("tta@onnxruntime", tiny_tta)
  runs, warmup = 4, 2
  record = script.profile_cell([engine], "rerank", SENTENCE, runs, warmup, 2, str(tmp_path), "c")
  r = record["engines"]["tta@onnxruntime"]
  assert r["runs"] == len(r["kernel_us"]) == len(r["model_run_us"]) == runs
  assert os.path.exists(tmp_path / "c_tta_onnxruntime.json")
  assert r["kernel_mean_us"] == pytest.approx(np.mean(r["kernel_us"]))
  assert sum(o["mean_us"] for o in r["ops"]) == pytest.approx(r["kernel_mean_us"])
  assert all(k <= m for k, m in zip(r["kernel_us"], r["model_run_us"]))
  assert r["call_median_us"] > 0 and r["session_run_median_us"] > 0
  assert set(r["feeds"]) == {"input_ids", "input_mask", "read_at", "targets", "key_value_by_token"}
  record.update(words=len(SENTENCE.split()), sentence=SENTENCE)
  result = {
    "environment": {
      "cpu": "cpu",
      "cores_usable": 1,
      "intra_op_threads": 1,
      "onnxruntime": "x",
      "commit": "c",
    },
    "flags": {"runs": runs, "warmup": warmup},
    "load_avg_1m": [0.0, 0.0],
    "engines": {"tta@onnxruntime": engine.description},
    "cells": [record],
  }
  report = script.markdown_report(result)
  assert "| public call (wall) |" in report
  assert "| MultiHeadAttention |" in report and "| kernel total |" in report


def test_tiny_bert_peer_sessions_and_feeds(script, tokenizer, tmp_path):
  pytest.importorskip("torch")
  pytest.importorskip("transformers")
  from reproduction import peers  # pylint: disable=g-import-not-at-top

  config = conftest.tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=32)
  engines = script.peer_engines(
    lambda: peers.build_peers(["bert@onnxruntime"], config, tokenizer, 32, threads=1)
  )
  engine = engines["bert@onnxruntime"]
  assert engine.description["fused_operators"]["sts"]["Attention"] == config.num_hidden_layers
  graphs = engine.graphs()
  assert len(graphs) == 2  # sts and rerank
  ids = tokenizer.encode(SENTENCE)
  for task in ("sts", "rerank"):
    call = engine.call(task, SENTENCE)
    expected = call()
    graph = script.graph_of(engine, call)
    assert any(graph.session is s for s, _ in graphs)
    np.testing.assert_array_equal(graph.feeds["input_ids"], [ids])
    np.testing.assert_array_equal(graph.feeds["attention_mask"], np.ones([1, len(ids)]))
    (output,) = graph.session.run(None, graph.feeds)
    if task == "sts":
      np.testing.assert_array_equal(output[0], expected)
    twin = script.profiling_twin(graph.session, graph.model, str(tmp_path / task))
    np.testing.assert_array_equal(twin.run(None, graph.feeds)[0], output)
    assert script.session_options(twin) == script.session_options(graph.session)

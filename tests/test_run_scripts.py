"""End-to-end runs of run_rescoring.py and run_sts.py with tiny random models
on (slices of) the real evaluation sets."""

import json
import os
import subprocess
import sys

import conftest
import numpy as np
import pytest
import tensorflow as tf

import inference
import model_dir
import modeling
import nbest
import sts_data

ROOT = os.path.join(os.path.dirname(__file__), "..")


data_dir_or_skip = conftest.data_dir_or_skip


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
  """Tiny random tta/bilm/unilm model dirs with the T-TA authors' vocab."""
  vocab = os.path.join(data_dir_or_skip(), "reference-vocab", "tta-vocab-lower.sub-32k.txt")
  root = tmp_path_factory.mktemp("models")
  dirs = {}
  for model_type in ("tta", "bilm", "unilm"):
    tf.keras.utils.set_random_seed(3)
    config = modeling.TTAConfig(
      vocab_size=29530,
      hidden_size=16,
      num_hidden_layers=1,
      num_attention_heads=2,
      intermediate_size=16,
      max_position_embeddings=128,
    )
    dirs[model_type] = str(root / model_type)
    model_dir.save_model_dir(modeling.build_model(config, model_type), vocab, dirs[model_type])
  return dirs


def run_script(script, *args):
  result = subprocess.run(
    [sys.executable, os.path.join(ROOT, script)] + list(args),
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def test_model_dir_round_trip_gives_the_same_scores(model_dirs):
  lm = inference.NeuralLM.from_model_dir(model_dirs["tta"])
  again = inference.NeuralLM.from_model_dir(model_dirs["tta"])
  a, b = lm.score(["the man is here"]), again.score(["the man is here"])
  np.testing.assert_array_equal(a[0].token_logprobs, b[0].token_logprobs)
  assert lm.model_type == "tta"


def test_rescoring_end_to_end_and_cache_resume(model_dirs, tmp_path):
  data_dir = data_dir_or_skip()
  out = str(tmp_path / "asr")
  args = [
    f"--lm=tta={model_dirs['tta']},bilm={model_dirs['bilm']}",
    "--pairs=dev_clean:test_clean",
    "--max_lists=6",
    "--data_dir=" + data_dir,
    "--output_dir=" + out,
  ]
  first = run_script("run_rescoring.py", *args)
  with open(os.path.join(out, "rescoring_results.json")) as f:
    rows = json.load(f)
  test = nbest.read_espnet_nbest("test_clean", data_dir)[:6]
  dev = nbest.read_espnet_nbest("dev_clean", data_dir)[:6]
  # The reported first pass is the argmax of the s2s score, checked here
  # with jiwer directly.
  am_best = [
    max(l.hyps, key=lambda h: 0.6 * h.scores["decoder"] + 0.4 * h.scores["ctc"]).text for l in test
  ]
  refs = [l.refs[0] for l in test]
  import jiwer  # pylint: disable=g-import-not-at-top

  for row in rows:
    results = {r["setting"]: r for r in row["results"]}
    assert results["am"]["first_pass"] == pytest.approx(100 * jiwer.wer(refs, am_best))
    assert results["full"]["first_pass"] == pytest.approx(
      100 * jiwer.wer(refs, [l.hyps[0].text for l in test])
    )
    assert [lam for lam, _ in results["am"]["dev_curve"]] == list(nbest.DEFAULT_GRID)
    # The reported test WER is what the chosen λ gives with the LM scores
    # recomputed here through the public inference path.
    lm = inference.NeuralLM.from_model_dir(model_dirs[row["lm"]])
    lm_test = [[s.total for s in lm.score([h.text for h in l.hyps])] for l in test]
    lm_dev = [[s.total for s in lm.score([h.text for h in l.hyps])] for l in dev]
    for setting in ("am", "full"):
      sweep = nbest.sweep_lambda(dev, lm_dev, "wer", setting)
      assert results[setting]["lambda"] == sweep.best_lam
      choice = nbest.rerank(test, lm_test, sweep.best_lam, setting)
      assert results[setting]["reranked"] == pytest.approx(nbest.evaluate(test, choice, "wer"))
  assert "0 cached" in first.stderr
  second = run_script("run_rescoring.py", *args)
  assert " 0 to score" in second.stderr  # everything came from the cache
  with open(os.path.join(out, "rescoring_results.json")) as f:
    again = json.load(f)
  assert [r["results"] for r in again] == [r["results"] for r in rows]


def test_sts_end_to_end(model_dirs, tmp_path):
  data_dir = data_dir_or_skip()
  out = str(tmp_path / "sts")
  run_script(
    "run_sts.py",
    "--model_dir=" + model_dirs["tta"],
    "--representations=context,embed",
    "--max_pairs=40",
    "--sets=stsb_dev,sick_test",
    "--data_dir=" + data_dir,
    "--output_dir=" + out,
  )
  with open(os.path.join(out, "sts_results.json")) as f:
    rows = json.load(f)
  assert [r["representation"] for r in rows] == ["context", "embed"]
  lm = inference.NeuralLM.from_model_dir(model_dirs["tta"])
  pairs = sts_data.read_stsb("dev", data_dir)[:40]
  # One call over the same sentences as run_sts.py, so both see the same
  # batches, and cosines in float64: a random 16-wide model gives cosines
  # within float32 rounding of 1, whose noise (it differs between CPUs) would
  # reorder them.
  sentences = sorted({s for p in pairs for s in (p.sent1, p.sent2)})
  vectors = dict(zip(sentences, lm.sentence_vectors(sentences, pooling="context")))
  a = np.stack([vectors[p.sent1] for p in pairs]).astype(np.float64)
  b = np.stack([vectors[p.sent2] for p in pairs]).astype(np.float64)
  cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
  want = sts_data.pearson_spearman(cos, [p.score for p in pairs])
  pearson, spearman = rows[0]["scores"]["stsb_dev"]
  assert pearson == pytest.approx(want[0], abs=1e-3)
  # A random 16-wide model gives near-equal cosines, so float noise from a
  # different batching reorders a few near-ties: Spearman moves a little.
  assert spearman == pytest.approx(want[1], abs=1.0)
  with open(os.path.join(out, "sts_results.md")) as f:
    assert "| STS-B dev | SICK test |" in f.read()

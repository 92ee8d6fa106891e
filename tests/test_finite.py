"""Weights and scores that are not finite: released weights (hf:, bert:) and our model dirs holding
a NaN or inf are refused at load, naming the first such variable, before any scoring; a score
that overflows is refused naming the LM and the sentence, never written as NaN or Infinity into
score.py's output or the rescoring score cache; a truncated model.safetensors is one line."""

import json
import os
import re

import commands
from conftest import WORDS
from conftest import hf_bert_tensors
from conftest import tiny_bert
from conftest import tiny_config
from conftest import write_google_release
from conftest import write_hf_bert_dir
import numpy as np
import pytest
import tensorflow as tf

from lm import checkpoints
from lm import hf_checkpoint
from lm import inference
from lm import model_dir
import modeling
import tokenization

SENTENCES = ["the cat sat on the mat .", "a dog ran far away"]
# The first variable of each load (the model's order: embeddings, layers, head) that is bad.
HF_BAD = "bert.encoder.layer.0.attention.self.query.weight"
TF1_BAD = "bert/encoder/layer_1/output/dense/kernel"


@pytest.fixture(scope="module")
def bert():
  return tiny_bert()


@pytest.fixture(scope="module")
def bad_releases(bert, tmp_path_factory):
  """{"hf": an hf: spec with a NaN in HF_BAD (and an inf in a later tensor), "bert": a bert:
  spec with an inf in TF1_BAD}."""
  root = tmp_path_factory.mktemp("bad")
  tensors = hf_bert_tensors(bert)
  tensors[HF_BAD] = tensors[HF_BAD].copy()
  tensors[HF_BAD][3, 1] = np.nan
  tensors["cls.predictions.bias"] = tensors["cls.predictions.bias"].copy()
  tensors["cls.predictions.bias"][0] = np.inf
  hf = write_hf_bert_dir(root / "hf", bert, tensors=tensors)
  variable = bert.tf1_variables()[TF1_BAD]
  good = variable.numpy()
  bad = good.copy()
  bad[0, 0] = -np.inf
  variable.assign(bad)
  try:
    google = write_google_release(root / "google", bert)
  finally:
    variable.assign(good)
  return {"hf": f"hf:{hf}", "bert": f"bert:{google}"}


@pytest.mark.parametrize(
  "kind, named",
  [
    ("hf", rf"{HF_BAD} holds 1 NaN or infinite value"),
    ("bert", rf"{TF1_BAD} holds 1 NaN or infinite value"),
  ],
)
def test_released_weights_that_are_not_finite_are_refused_naming_the_first(
  bad_releases, kind, named
):
  with pytest.raises(checkpoints.NonFiniteWeightsError) as error:
    inference.load_model(bad_releases[kind])
  message = str(error.value)
  assert re.search(named, message) and "\n" not in message, message
  assert bad_releases[kind].split(":", 1)[1] in message


def test_a_nan_in_both_tied_copies_is_named_as_a_nan_not_as_untied(bert, tmp_path):
  tensors = hf_bert_tensors(bert, older_checkpoint=True)  # with the decoder's tied copy
  table = tensors["bert.embeddings.word_embeddings.weight"].copy()
  table[4, 2] = np.nan
  tensors["bert.embeddings.word_embeddings.weight"] = table
  tensors["cls.predictions.decoder.weight"] = table.copy()
  path = write_hf_bert_dir(tmp_path / "hf", bert, tensors=tensors)
  with pytest.raises(checkpoints.NonFiniteWeightsError, match="word_embeddings.weight holds 1 NaN"):
    hf_checkpoint.load_hf_bert(path)


def test_our_model_dir_that_is_not_finite_is_refused(tmp_path, tokenizer):
  tf.keras.utils.set_random_seed(1)
  model = modeling.build_model(tiny_config(vocab_size=tokenizer.vocab_size), "tta")
  name = "bert/encoder/layer_1/attention/self/key/bias"
  model.tf1_variables()[name].assign(np.full([32], np.nan, np.float32))
  model_dir.save_model_dir(model, tokenizer.vocab_file, str(tmp_path / "tta"))
  with pytest.raises(checkpoints.NonFiniteWeightsError, match=rf"{name} holds 32 NaN or infinite"):
    model_dir.load_model_dir(str(tmp_path / "tta"))


def test_score_py_refuses_nan_weights_before_scoring(bad_releases, tmp_path):
  sentences = tmp_path / "sentences.txt"
  sentences.write_text("\n".join(SENTENCES) + "\n")
  out = tmp_path / "scores.jsonl"
  for spec, bad in ((bad_releases["hf"], HF_BAD), (bad_releases["bert"], TF1_BAD)):
    result = commands.run(
      "score.py", f"--model_dir={spec}", f"--input_file={sentences}", f"--output_file={out}"
    )
    assert bad in commands.one_error_line(result)
    assert not out.exists() and not os.path.exists(f"{out}.partial")
    # To stdout too: nothing is written.
    result = commands.run("score.py", f"--model_dir={spec}", stdin=SENTENCES[0] + "\n")
    assert bad in commands.one_error_line(result) and result.stdout == ""


@pytest.mark.slow(seconds=2)
def test_convert_checkpoint_refuses_nan_weights_and_writes_no_model(bad_releases, tmp_path):
  for kind, bad in (("hf", HF_BAD), ("bert", TF1_BAD)):
    out = tmp_path / kind
    result = commands.run(
      "convert_checkpoint.py", f"--input={bad_releases[kind]}", f"--output_dir={out}"
    )
    assert bad in commands.one_error_line(result)
    assert checkpoints.latest_checkpoint(str(out)) is None


def nbest_file(path, lists):
  data = {
    f"utt{i}": {
      "ref": ref,
      **{f"hyp_{r + 1}": {"score": -1.0 - r, "text": h} for r, h in enumerate(hyps)},
    }
    for i, (ref, hyps) in enumerate(lists)
  }
  path.write_text(json.dumps(data))
  return str(path)


LISTS = [
  ("the cat sat", ["a cat sat", "the cat sat"]),
  ("a dog ran", ["a dog ran on", "a dog ran"]),
]


def rescore(tmp_path, spec, name="lm"):
  """run_rescoring.py of LISTS with the LM `spec`; (result, the score cache's lines)."""
  out = tmp_path / "asr"
  result = commands.run(
    "run_rescoring.py",
    f"--lm={name}={spec}",
    "--format=json",
    "--settings=full",
    f"--dev_file={nbest_file(tmp_path / 'dev.json', LISTS)}",
    f"--test_file={nbest_file(tmp_path / 'test.json', LISTS[::-1])}",
    f"--output_dir={out}",
  )
  cache = out / "cache" / "lm_scores.jsonl"
  return result, cache.read_text().splitlines() if cache.exists() else []


@pytest.mark.slow(seconds=2)
def test_run_rescoring_refuses_nan_weights_before_scoring(bad_releases, tmp_path):
  result, cached = rescore(tmp_path, bad_releases["hf"])
  assert HF_BAD in commands.one_error_line(result)
  assert cached == []


# ------------------------------------------------------------------ scores that overflow


@pytest.fixture(scope="module")
def overflowing(tmp_path_factory):
  """A model dir of finite weights whose log-probs overflow: the output bias is +3e38 for "cat"
  and -3e38 for every other token, so log_softmax's x - max is -6e38, -inf in float32, for every
  token but "cat"."""
  root = tmp_path_factory.mktemp("overflow")
  vocab = root / "vocab.txt"
  tokens = list(tokenization.SPECIAL_TOKENS) + list(WORDS)
  vocab.write_text("\n".join(tokens) + "\n")
  tf.keras.utils.set_random_seed(2)
  model = modeling.build_model(tiny_config(vocab_size=len(tokens)), "tta")
  bias = np.full([len(tokens)], -3e38, np.float32)
  bias[tokens.index("cat")] = 3e38
  model.lm_head.output_bias.assign(bias)
  path = str(root / "tta")
  model_dir.save_model_dir(model, str(vocab), path)
  return path


def test_overflowing_weights_load_but_score_minus_infinity(overflowing):
  # The premise of the two tests below: the weights are finite, the scores are not.
  lm = inference.load_lm(overflowing)
  assert all(np.isfinite(v.numpy()).all() for v in lm.model.tf1_variables().values())
  assert np.isneginf(lm.score(["the cat sat"])[0].total)


def test_score_py_refuses_a_score_that_is_not_finite(overflowing, tmp_path):
  sentences = tmp_path / "sentences.txt"
  sentences.write_text("cat\nthe cat sat\n")
  out = tmp_path / "scores.jsonl"
  result = commands.run(
    "score.py", f"--model_dir={overflowing}", f"--input_file={sentences}", f"--output_file={out}"
  )
  line = commands.one_error_line(result)
  assert overflowing in line and "'cat'" in line and "not finite" in line, line
  for path in (out, f"{out}.partial"):
    if os.path.exists(path):
      text = open(path, encoding="utf-8").read()
      assert "Infinity" not in text and "NaN" not in text, text
  for output_format in ("jsonl", "tsv"):
    result = commands.run(
      "score.py", f"--model_dir={overflowing}", f"--format={output_format}", stdin="the cat\n"
    )
    assert "'the cat'" in commands.one_error_line(result) and result.stdout == ""


@pytest.mark.slow(seconds=2)
def test_run_rescoring_caches_no_score_that_is_not_finite(overflowing, tmp_path):
  result, cached = rescore(tmp_path, overflowing, name="big")
  line = commands.one_error_line(result)
  assert "big" in line and "not finite" in line and "'a cat sat'" in line, line
  assert not any("Infinity" in l or "NaN" in l for l in cached), cached


def test_score_cache_drops_a_line_that_is_not_finite(tmp_path):
  from evaluation import score_cache  # pylint: disable=g-import-not-at-top

  path = tmp_path / "lm_scores.jsonl"
  path.write_text(
    '{"model": "m", "text": "a", "value": [NaN, 2, false, 1]}\n'
    '{"model": "m", "text": "b", "value": [-1.5, 2, false, 1]}\n'
    '{"model": "m", "text": "c", "value": [-Infinity, 2, false, 1]}\n'
  )
  cache = score_cache.ScoreCache(str(path))
  # A score an older run cached as NaN is computed again (and refused if it still is not finite).
  assert cache.get_many("m", ["a", "b", "c"]) == {"b": [-1.5, 2, False, 1]}


# ------------------------------------------------------------------ damaged files


@pytest.mark.parametrize("keep", [0.01, 0.5, 0.99])
def test_truncated_safetensors_is_one_line_naming_the_file(bert, tmp_path, keep):
  path = write_hf_bert_dir(tmp_path / "hf", bert)
  weights = os.path.join(path, "model.safetensors")
  with open(weights, "r+b") as f:
    f.truncate(int(os.path.getsize(weights) * keep))
  with pytest.raises(ValueError) as error:
    hf_checkpoint.load_hf_bert(path)
  message = str(error.value)
  assert message.startswith(f"{weights} cannot be read") and "\n" not in message, message
  result = commands.run("score.py", f"--model_dir=hf:{path}", stdin="the cat\n")
  assert weights in commands.one_error_line(result)

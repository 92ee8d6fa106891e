"""convert_checkpoint.py: released checkpoints -> model dirs that score as their source."""

import json
import os

import commands
from conftest import WORDS
from conftest import tiny_bert
from conftest import tiny_config
from conftest import write_hf_bert_dir
import numpy as np
import pytest
import tensorflow as tf

from lm import checkpoint_job
from lm import checkpoints
from lm import conversion
from lm import inference
import modeling
import tokenization

ROOT = os.path.join(os.path.dirname(__file__), "..")
# The keys of the authors' configs/config.layer-3.vocab-lower.sub-32k.json (besides vocab_file).
AUTHORS_CONFIG_KEYS = (
  "attention_probs_dropout_prob",
  "hidden_act",
  "hidden_dropout_prob",
  "hidden_size",
  "initializer_range",
  "intermediate_size",
  "max_position_embeddings",
  "num_attention_heads",
  "num_hidden_layers",
  "vocab_size",
)
SENTENCES = ["the cat sat on the mat .", "a dog ran far away", "walking cats"]


def assert_same_scores(a, b):
  for x, y in zip(a.score(SENTENCES), b.score(SENTENCES)):
    assert x.tokens == y.tokens
    np.testing.assert_array_equal(x.token_logprobs, y.token_logprobs)


def read_config(path):
  with open(os.path.join(path, "config.json")) as f:
    return json.load(f)


def test_a_folder_holding_a_user_s_files_is_refused_before_the_load(tmp_path):
  # Issue 56's probes, third round (v08): the model was written in among the user's files.
  mine = tmp_path / "mine"
  mine.mkdir()
  (mine / "notes.txt").write_text("mine\n")
  params = checkpoint_job.JobParams(output_dir=str(mine), input=f"hf:{tmp_path}/absent")
  with pytest.raises(ValueError, match=f"{mine} holds files \\(notes.txt\\)"):
    checkpoint_job.run(params)
  assert os.listdir(mine) == ["notes.txt"]


def test_hf_dir_converts_to_a_model_dir_that_scores_the_same(tmp_path):
  hf = write_hf_bert_dir(tmp_path / "hf", tiny_bert())
  out = str(tmp_path / "converted")
  params = checkpoint_job.JobParams(output_dir=out, input=f"hf:{hf}")
  checkpoint_job.run(params)
  config = read_config(out)
  assert config["model_type"] == "bert" and config["boundary_tokens"] == ["[CLS]", "[SEP]"]
  assert_same_scores(inference.load_lm(f"hf:{hf}"), inference.load_lm(out))
  for convert_again in (
    lambda: checkpoint_job.run(params),  # refused before the load
    lambda: conversion.convert(*checkpoint_job.load_source(params), out),
  ):
    with pytest.raises(ValueError, match="already holds a model"):
      convert_again()


@pytest.mark.slow(seconds=3)
def test_authors_tf1_checkpoint_converts_on_the_command_line(tmp_path):
  # The T-TA authors' release: their config (no model_type, a vocab_file key), their vocab's
  # file name, model.ckpt with their variable names (and the untrained pooler).
  release = tmp_path / "tta-layer-3-enwiki-lower-sub-32k"
  release.mkdir()
  vocab = release / "vocab-lower.sub-32k.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(WORDS)) + "\n")
  tf.keras.utils.set_random_seed(8)
  config = tiny_config(vocab_size=len(tokenization.SPECIAL_TOKENS) + len(WORDS))
  original = modeling.build_model(config, "tta")
  checkpoints.save_tf1_checkpoint(original, str(release / "model.ckpt"))
  authors_config = release / "config.layer-3.vocab-lower.sub-32k.json"
  fields = {k: getattr(config, k) for k in AUTHORS_CONFIG_KEYS}
  authors_config.write_text(json.dumps(dict(fields, vocab_file=vocab.name)))
  out = str(tmp_path / "tta-enwiki")
  commands.run(
    "convert_checkpoint.py",
    f"--init_checkpoint={release / 'model.ckpt'}",
    f"--bert_config_file={authors_config}",
    f"--vocab_file={vocab}",
    f"--output_dir={out}",
    status=0,
  )
  converted = read_config(out)
  assert converted["model_type"] == "tta" and converted["boundary_tokens"] == ["[SOS]", "[EOS]"]
  tokenizer = tokenization.FullTokenizer(str(vocab))
  assert_same_scores(inference.NeuralLM(original, tokenizer), inference.load_lm(out))


@pytest.mark.parametrize(
  "given, message",
  [
    (dict(), "either --input"),
    (dict(input="hf:a", init_checkpoint="b"), "either --input"),
    (dict(input="runs/tta"), "must start with one of"),
    (dict(input="hf:a", do_lower_case=False), "hf:DIR's tokenizer says it"),
    (dict(init_checkpoint="model.ckpt"), "needs --bert_config_file and --vocab_file"),
  ],
)
def test_flags_that_do_not_name_one_source_are_refused(given, message):
  with pytest.raises(ValueError, match=message):
    checkpoint_job.JobParams(output_dir="out", **given)

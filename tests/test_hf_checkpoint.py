"""lm/hf_checkpoint.py: Hugging Face BERT dirs (safetensors, no PyTorch) load as model_type
"bert"."""

import json
import os
import re

import commands
from conftest import BERT_TOKENS
from conftest import hf_bert_config
from conftest import hf_bert_tensors
from conftest import tiny_bert
from conftest import write_google_release
from conftest import write_hf_bert_dir
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops for loading)

from lm import checkpoints
from lm import hf_checkpoint
from lm import inference
from lm import model_dir
from lm import saved_model_export
from lm import scoring_job

ROOT = os.path.join(os.path.dirname(__file__), "..")
SENTENCES = ["the cat sat on the mat .", "a dog ran far away", "walking cats"]


@pytest.fixture(scope="module")
def bert():
  return tiny_bert()


@pytest.fixture(scope="module")
def one_layer_bert():
  """For the tests whose point is not the depth (the layers map as `bert`'s two do): a smaller
  graph traces faster."""
  return tiny_bert(num_hidden_layers=1)


def outputs(model, ids):
  inputs = {"input_ids": tf.constant(ids, tf.int32), "input_mask": tf.ones_like(ids, tf.int32)}
  return {k: v.numpy() for k, v in model(inputs).items()}


@pytest.mark.parametrize(
  "base_prefix, older_checkpoint",
  [("bert.", False), ("bert.", True), ("", False)],
  ids=["BertForMaskedLM", "older-BertForPreTraining", "encoder-saved-alone-plus-head"],
)
def test_hf_dir_loads_back_to_bit_equal_outputs(tmp_path, bert, base_prefix, older_checkpoint):
  tensors = hf_bert_tensors(bert, base_prefix, older_checkpoint)
  path = write_hf_bert_dir(tmp_path / "hf", bert, tensors=tensors)
  model, tokenizer = hf_checkpoint.load_hf_bert(path)
  assert model.model_type == "bert"
  assert tokenizer.boundary_tokens == ("[CLS]", "[SEP]") and tokenizer.do_lower_case
  assert model_dir.weights_fingerprint(model) == model_dir.weights_fingerprint(bert)
  ids = np.array([[2, 5, 6, 7, 3, 0], [2, 9, 10, 11, 12, 3]])
  want, got = outputs(bert, ids), outputs(model, ids)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["F16", "BF16"])
def test_half_precision_weights_are_widened_exactly(tmp_path, bert, dtype):
  half = {k: v.astype(dtype) for k, v in hf_bert_tensors(bert).items()}
  model, _ = hf_checkpoint.load_hf_bert(write_hf_bert_dir(tmp_path / "hf", bert, tensors=half))
  np.testing.assert_array_equal(
    model.embeddings.word_embeddings.numpy(), half["bert.embeddings.word_embeddings.weight"]
  )


@pytest.fixture(scope="module")
def release_dirs(bert, tmp_path_factory):
  """(Google BERT release dir, Hugging Face dir) holding the same weights."""
  root = tmp_path_factory.mktemp("releases")
  return write_google_release(root / "google", bert), write_hf_bert_dir(root / "hf", bert)


def test_tf1_release_and_hf_dir_of_the_same_weights_score_equal(release_dirs):
  google, hf = release_dirs
  from_tf1, from_hf = inference.load_lm(f"bert:{google}"), inference.load_lm(f"hf:{hf}")
  for a, b in zip(from_tf1.score(SENTENCES), from_hf.score(SENTENCES)):
    assert a.tokens == b.tokens and a.tokens[-1] == "[SEP]"
    np.testing.assert_array_equal(a.token_logprobs, b.token_logprobs)
  np.testing.assert_array_equal(
    from_tf1.sentence_vectors(SENTENCES), from_hf.sentence_vectors(SENTENCES)
  )
  # Everything that changes a score is the same, so is the score-cache identity.
  identity = inference.describe(from_hf)
  assert identity == inference.describe(from_tf1)
  assert identity["boundary_tokens"] == ["[CLS]", "[SEP]"]


def run_script(script, *args):
  return commands.run(script, *args, status=0)


@pytest.mark.slow(seconds=3)
def test_score_py_and_run_rescoring_score_hf_as_the_tf1_release(release_dirs, tmp_path):
  google, hf = release_dirs
  sentences = tmp_path / "sents.txt"
  sentences.write_text("\n".join(SENTENCES) + "\n")
  out = tmp_path / "scores.jsonl"
  run_script(
    "score.py", f"--model_dir=hf:{hf}", f"--input_file={sentences}", f"--output_file={out}"
  )
  tf1 = inference.load_lm(f"bert:{google}", long_inputs="window")  # the commands' default
  want = [
    scoring_job.record(i, t, s) for i, (t, s) in enumerate(zip(SENTENCES, tf1.score(SENTENCES)))
  ]
  assert [json.loads(line) for line in out.read_text().splitlines()] == want

  def nbest_file(name, lists):
    data = {
      f"utt{i}": {
        "ref": ref,
        **{f"hyp_{r + 1}": {"score": -1.0 - r, "text": h} for r, h in enumerate(hyps)},
      }
      for i, (ref, hyps) in enumerate(lists)
    }
    (tmp_path / name).write_text(json.dumps(data))
    return str(tmp_path / name)

  lists = [
    ("the cat sat", ["a cat sat", "the cat sat"]),
    ("a dog ran", ["a dog ran on", "a dog ran"]),
  ]
  results = tmp_path / "asr"
  run_script(
    "run_rescoring.py",
    f"--lm=hf=hf:{hf}",
    "--format=json",
    "--settings=full",
    f"--dev_file={nbest_file('dev.json', lists)}",
    f"--test_file={nbest_file('test.json', lists[::-1])}",
    f"--output_dir={results}",
  )
  # The identity of the TF1 release: a cache made with either serves both.
  cache = (results / "cache" / "lm_scores.jsonl").read_text().splitlines()
  cached = [json.loads(line) for line in cache]
  assert {r["model"] for r in cached} == {inference.model_id(inference.describe(tf1))}
  texts = [r["text"] for r in cached]
  assert len(texts) == 4
  assert [r["value"][0] for r in cached] == [s.total for s in tf1.score(texts)]


# ------------------------------------------------------------------ refusals


def refusal(path):
  """The one-line message load_hf_bert refuses `path` with."""
  with pytest.raises((ValueError, FileNotFoundError)) as info:
    hf_checkpoint.load_hf_bert(str(path))
  message = str(info.value)
  assert "\n" not in message
  return message


def test_pytorch_bin_only_dir_is_refused_with_the_conversion_command(tmp_path, bert):
  path = tmp_path / "hf"
  write_hf_bert_dir(path, bert)
  os.rename(path / "model.safetensors", path / "pytorch_model.bin")
  message = refusal(path)
  assert "pytorch_model.bin" in message and "never unpickles" in message
  assert f"save_pretrained('{path}', safe_serialization=True)" in message


@pytest.mark.parametrize(
  "overrides, named",
  [
    (dict(model_type="roberta", architectures=["RobertaForMaskedLM"]), "'roberta'.*byte-level BPE"),
    (dict(model_type="albert", architectures=["AlbertForMaskedLM"]), "'albert'.*shared by every"),
    (dict(model_type="distilbert", architectures=["DistilBertForMaskedLM"]), "'distilbert'"),
    (dict(architectures=["BertLMHeadModel"], is_decoder=True), "left-to-right BERT decoder"),
    (dict(hidden_act="gelu_new"), "hidden_act='gelu_new'"),
    (dict(layer_norm_eps=1e-5), "layer_norm_eps=1e-05"),
    (dict(position_embedding_type="relative_key"), "position_embedding_type='relative_key'"),
    (dict(tie_word_embeddings=False), "tie_word_embeddings=False"),
  ],
)
def test_other_architectures_and_settings_are_refused_by_name(tmp_path, bert, overrides, named):
  path = write_hf_bert_dir(tmp_path / "hf", bert, config=hf_bert_config(bert, **overrides))
  assert re.search(named, refusal(path))


def test_other_tokenizers_are_refused_by_name(tmp_path, bert):
  path = write_hf_bert_dir(tmp_path / "hf", bert)
  with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
    json.dump({"tokenizer_class": "BertJapaneseTokenizer"}, f)
  assert refusal(path) == (
    f"{path}/tokenizer_config.json: tokenizer_class 'BertJapaneseTokenizer'; ours is BERT's "
    "WordPiece (BertTokenizer) only"
  )


def edited(bert, edit):
  tensors = hf_bert_tensors(bert, older_checkpoint=True)
  edit(tensors)
  return tensors


@pytest.mark.parametrize(
  "edit, named",
  [
    (
      lambda t: t.pop("bert.encoder.layer.1.attention.self.key.bias"),
      "missing from checkpoint: bert.encoder.layer.1.attention.self.key.bias",
    ),
    (
      lambda t: t.update({"bert.encoder.layer.0.intermediate.dense.weight": np.zeros([32, 37])}),
      r"shape mismatch: bert.encoder.layer.0.intermediate.dense.weight: checkpoint \[32, 37\], "
      r"model \[37, 32\]",
    ),
    (
      lambda t: t.update({"classifier.weight": np.zeros([2, 32], np.float32)}),
      "unexpected in checkpoint: classifier.weight",
    ),
    (
      lambda t: t.update({"cls.predictions.decoder.weight": np.zeros([22, 32], np.float32)}),
      "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight",
    ),
    (
      lambda t: [t.pop(n) for n in list(t) if n.startswith("cls.predictions.")],
      r"no masked-LM head \(cls.predictions.\*\)",
    ),
  ],
  ids=["missing", "mis-shaped", "unexpected", "untied", "no-head"],
)
def test_tensors_that_do_not_fit_are_named_and_nothing_is_assigned(tmp_path, bert, edit, named):
  path = write_hf_bert_dir(tmp_path / "hf", bert, tensors=edited(bert, edit))
  weights = hf_checkpoint.SafetensorsWeights(path)
  model = tiny_bert(seed=5)
  before = model_dir.weights_fingerprint(model)
  with pytest.raises(checkpoints.CheckpointMismatchError, match=named):
    hf_checkpoint.load_weights(model, weights)
  assert model_dir.weights_fingerprint(model) == before


def test_vocab_that_does_not_match_the_config_is_refused(tmp_path, bert):
  path = write_hf_bert_dir(tmp_path / "hf", bert, tokens=BERT_TOKENS + ["extra"])
  assert "has 23 tokens but" in refusal(path) and "vocab_size 22" in refusal(path)


@pytest.mark.slow(seconds=5)
def test_hf_dir_exports_with_its_cls_sep_frame(tmp_path, one_layer_bert):
  hf = write_hf_bert_dir(tmp_path / "hf", one_layer_bert)  # the frame is the tokenizer's
  lm = inference.NeuralLM.from_model_dir(f"hf:{hf}")
  module = saved_model_export.export(lm, str(tmp_path / "export"))
  assert (module.info()["bos_id"], module.info()["eos_id"]) == (2, 3)  # [CLS], [SEP]
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  got = loaded.signatures["score"](texts=tf.constant(SENTENCES))["total"].numpy()
  np.testing.assert_allclose(got, [s.total for s in lm.score(SENTENCES)], atol=1e-4)


@pytest.mark.parametrize("base_prefix", ["bert.", ""], ids=["bert-prefix", "encoder-alone"])
def test_an_encoder_without_a_head_gives_sentence_vectors_and_refuses_to_score(
  tmp_path, one_layer_bert, base_prefix
):
  """A sentence encoder (a BertModel, as all-MiniLM-L6-v2 ships) is run_sts.py's peer: its
  vectors are those of the same weights with a head, and it cannot score."""
  bert = one_layer_bert  # a headless dir maps the layers as a full one
  tensors = hf_bert_tensors(bert, base_prefix)
  full = write_hf_bert_dir(tmp_path / "full", bert, tensors=tensors)
  encoder = {k: v for k, v in tensors.items() if not k.startswith("cls.")}
  encoder = write_hf_bert_dir(tmp_path / "encoder", bert, tensors=encoder)
  with pytest.raises(checkpoints.CheckpointMismatchError, match="no masked-LM head"):
    inference.load_lm(f"hf:{encoder}")
  with_head = inference.load_lm(f"hf:{full}")
  without = inference.load_lm(f"hf:{encoder}", vectors_only=True)
  for pooling, masked in [("context", False), ("context", True), ("embed", True)]:
    np.testing.assert_array_equal(
      without.sentence_vectors(SENTENCES, pooling=pooling, masked=masked),
      with_head.sentence_vectors(SENTENCES, pooling=pooling, masked=masked),
    )
  with pytest.raises(ValueError, match=f"{encoder} has no masked-LM head"):
    without.score(SENTENCES)

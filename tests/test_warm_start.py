"""lm/warm_start.py and run_pretraining.py --init_checkpoint: a T-TA, biLM or uniLM started from a
Hugging Face BERT (with or without its masked-LM head), a Google BERT release, a TF1 checkpoint or
a model dir of ours; the source's architecture and vocab, refusals in one line.

The sources are tiny random BERTs written as the releases hold them (conftest's writers spell out
HF's and Google's names), 4 layers with token types, so that layer picking, folding and cutting
show.
"""

import json
import os

import commands
from conftest import BERT_TOKENS
from conftest import hf_bert_config
from conftest import hf_bert_tensors
from conftest import tiny_config
from conftest import write_google_release
from conftest import write_hf_bert_dir
import keras
import numpy as np
import pytest

from lm import checkpoints
from lm import model_dir
from lm import warm_start
import modeling
from pretraining import training_job
import tokenization

SOURCE_LAYERS = 4
SOURCE_POSITIONS = 16
KINDS = ("tta", "tta_word", "bilm", "unilm")


@pytest.fixture(scope="module")
def bert():
  """The source: a random 4-layer "bert" model of BERT_TOKENS with two token types."""
  config = tiny_config(
    vocab_size=len(BERT_TOKENS),
    num_hidden_layers=SOURCE_LAYERS,
    max_position_embeddings=SOURCE_POSITIONS,
    type_vocab_size=2,
    mask_token_id=BERT_TOKENS.index("[MASK]"),
  )
  keras.utils.set_random_seed(7)
  model = modeling.build_model(config, "bert")
  # A non-zero bias: a fresh head's zeros must not pass for a copied one.
  model.lm_head.output_bias.assign(np.linspace(-1, 1, len(BERT_TOKENS)).astype(np.float32))
  return model


def write_headless(path, bert, base_prefix=""):
  """An HF BertModel dir of `bert`'s encoder: no cls.predictions.* (base_prefix "": as
  BertModel.save_pretrained writes it)."""
  tensors = {
    k: v for k, v in hf_bert_tensors(bert, base_prefix).items() if not k.startswith("cls.")
  }
  config = hf_bert_config(bert, architectures=["BertModel"])
  return write_hf_bert_dir(path, bert, tensors=tensors, config=config)


def source_value(bert, name):
  return bert.tf1_variables()[name].numpy()


def ours(model_type, **overrides):
  keras.utils.set_random_seed(3)
  config = tiny_config(
    **dict(dict(vocab_size=len(BERT_TOKENS), max_position_embeddings=8), **overrides)
  )
  return modeling.build_model(config, model_type)


def head_values(model):
  return {n: v.numpy() for n, v in model.tf1_variables().items() if n.startswith("cls/")}


def assert_layers_from(model, bert, layers):
  """Every variable of our layer i equals source layer layers[i]'s."""
  for name, variable in model.tf1_variables().items():
    if name.startswith("bert/encoder/layer_"):
      index, rest = name[len("bert/encoder/layer_") :].split("/", 1)
      want = source_value(bert, f"bert/encoder/layer_{layers[int(index)]}/{rest}")
      np.testing.assert_array_equal(variable.numpy(), want, err_msg=name)


@pytest.mark.parametrize("base_prefix", ["", "bert."], ids=["BertModel", "bert-prefixed"])
@pytest.mark.parametrize("model_type", KINDS)
def test_headless_hf_bert_fills_embeddings_and_the_picked_layers_head_fresh(
  tmp_path, bert, model_type, base_prefix
):
  source = warm_start.open_source(f"hf:{write_headless(tmp_path / 'hf', bert, base_prefix)}")
  model = ours(model_type)
  fresh_head = head_values(model)
  lines = warm_start.load(model, source, [3, 1])
  got = model.tf1_variables()
  for name in ("word_embeddings", "LayerNorm/gamma", "LayerNorm/beta"):
    np.testing.assert_array_equal(
      got[f"bert/embeddings/{name}"].numpy(), source_value(bert, f"bert/embeddings/{name}")
    )
  # BERT's embedding of a segment-A token at position p: word + position p + token type 0.
  want = (
    source_value(bert, "bert/embeddings/position_embeddings")[:8]
    + source_value(bert, "bert/embeddings/token_type_embeddings")[0]
  )
  np.testing.assert_array_equal(got["bert/embeddings/position_embeddings"].numpy(), want)
  assert_layers_from(model, bert, [3, 1])
  for name, value in head_values(model).items():
    np.testing.assert_array_equal(value, fresh_head[name], err_msg=name)
  assert lines == [
    "embeddings: copied; folded token-type row 0 into the positions; cut positions 16 -> 8",
    "layer 0: copied (source layer 3)",
    "layer 1: copied (source layer 1)",
    "head: fresh (the source has no masked-LM head)",
  ]


def test_a_masked_lm_head_is_copied_with_the_first_layers_by_default(tmp_path, bert):
  # Older spellings (LayerNorm gamma/beta, the tied decoder copies) as BertForPreTraining's.
  path = write_hf_bert_dir(
    tmp_path / "hf", bert, tensors=hf_bert_tensors(bert, older_checkpoint=True)
  )
  source = warm_start.open_source(f"hf:{path}")
  model = ours("tta", max_position_embeddings=SOURCE_POSITIONS)
  layers = warm_start.pick_layers(source, model.config.num_hidden_layers, None)
  assert layers == [0, 1]
  lines = warm_start.load(model, source, layers)
  assert_layers_from(model, bert, [0, 1])
  for name, value in head_values(model).items():
    np.testing.assert_array_equal(value, source_value(bert, name), err_msg=name)
  assert lines[0] == "embeddings: copied; folded token-type row 0 into the positions"
  assert lines[-1] == "head: copied"


def test_google_release_and_tf1_prefix_load_as_the_hf_dir(tmp_path, bert):
  release = write_google_release(tmp_path / "google", bert)
  hf = warm_start.open_source(f"hf:{write_hf_bert_dir(tmp_path / 'hf', bert)}")
  want = ours("bilm")
  warm_start.load(want, hf, [2, 0])
  for spec in (f"bert:{release}", os.path.join(release, "bert_model.ckpt")):
    source = warm_start.open_source(spec)
    assert source.fields["hidden_size"] == 32 and source.num_layers == SOURCE_LAYERS
    model = ours("bilm")
    warm_start.load(model, source, [2, 0])
    assert model_dir.weights_fingerprint(model) == model_dir.weights_fingerprint(want), spec


def test_a_tta_model_dir_starts_a_bilm_of_the_same_shape(tiny_tta):
  source = warm_start.open_source(tiny_tta)
  config = model_dir.read_config(tiny_tta)
  config.model_type = "bilm"
  model = modeling.build_model(config)
  lines = warm_start.load(model, source, [0, 1])
  saved, _ = model_dir.load_model_dir(tiny_tta)
  assert model_dir.weights_fingerprint(model) == model_dir.weights_fingerprint(saved)
  assert lines == [
    "embeddings: copied",
    "layer 0: copied (source layer 0)",
    "layer 1: copied (source layer 1)",
    "head: copied",
  ]


def test_a_continuous_head_keeps_its_fresh_projection(tmp_path, bert):
  source = warm_start.open_source(f"hf:{write_hf_bert_dir(tmp_path / 'hf', bert)}")
  model = ours("tta", output_layer="continuous", target_embedding_size=16)
  fresh = head_values(model)
  lines = warm_start.load(model, source, [0, 1])
  got = head_values(model)
  for name in ("transform/dense/kernel", "transform/LayerNorm/gamma"):
    np.testing.assert_array_equal(
      got[f"cls/predictions/{name}"], source_value(bert, f"cls/predictions/{name}")
    )
  np.testing.assert_array_equal(
    got["cls/predictions/projection/kernel"], fresh["cls/predictions/projection/kernel"]
  )
  assert lines[-1] == "head: copied; fresh projection/kernel, projection/bias"


def test_a_source_that_does_not_fit_is_named_before_anything_is_assigned(tmp_path, bert):
  tensors = hf_bert_tensors(bert)
  tensors["bert.encoder.layer.1.output.dense.weight"] = np.zeros([32, 36], np.float32)
  del tensors["bert.encoder.layer.0.attention.self.key.bias"]
  source = warm_start.open_source(f"hf:{write_hf_bert_dir(tmp_path / 'hf', bert, tensors=tensors)}")
  model = ours("tta")
  before = model_dir.weights_fingerprint(model)
  with pytest.raises(checkpoints.CheckpointMismatchError) as e:
    warm_start.load(model, source, [0, 1])
  assert "bert/encoder/layer_0/attention/self/key/bias missing" in str(e.value)
  assert "layer_1/output/dense/kernel: source [36, 32], ours [37, 32]" in str(e.value)
  assert model_dir.weights_fingerprint(model) == before


def test_a_source_that_is_not_there_is_named_with_the_prefix_it_needs(tmp_path, bert):
  with pytest.raises(FileNotFoundError, match="no model dir or checkpoint prefix there"):
    warm_start.open_source(str(tmp_path / "absent"))
  path = write_hf_bert_dir(tmp_path / "hf", bert)
  with pytest.raises(FileNotFoundError, match=f"no checkpoint in it; did you mean hf:{path}"):
    warm_start.open_source(path)


# ------------------------------------------------------- the run's config and refusals


@pytest.fixture(scope="module")
def headless(bert, tmp_path_factory):
  return write_headless(tmp_path_factory.mktemp("headless") / "hf", bert)


def params(tmp_path, source, **kwargs):
  fields = dict(
    output_dir=str(tmp_path / "run"),
    model_type="tta",
    synthetic_data=True,
    init_checkpoint=f"hf:{source}",
    max_seq_length=8,
  )
  fields.update(kwargs)
  return training_job.JobParams(**fields)


def test_the_architecture_and_vocab_are_the_sources(tmp_path, headless):
  setup = training_job.prepare_model(params(tmp_path, headless, init_layers=[3, 0, 2]), False)
  c = setup.config
  assert (c.vocab_size, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (
    22,
    32,
    4,
    37,
  )
  assert (c.num_hidden_layers, c.max_position_embeddings, c.type_vocab_size) == (3, 16, 0)
  assert (c.mask_token_id, c.model_type) == (4, "tta")
  assert setup.vocab_file == os.path.join(headless, "vocab.txt")
  assert setup.init_layers == [3, 0, 2]
  flags = training_job.ConfigFlags(num_hidden_layers=2, max_position_embeddings=8)
  setup = training_job.prepare_model(params(tmp_path, headless, config_flags=flags), False)
  assert (setup.config.num_hidden_layers, setup.config.max_position_embeddings) == (2, 8)
  assert setup.init_layers == [0, 1]


def test_a_resumed_run_ignores_the_source(tmp_path, headless):
  setup = training_job.prepare_model(params(tmp_path, headless + "-gone"), resuming=True)
  assert setup.init_source is None


def other_vocab(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(tokenization.SPECIAL_TOKENS + tuple(BERT_TOKENS[5:])) + "\n")
  return str(path)


@pytest.mark.parametrize(
  "kwargs, named",
  [
    (
      dict(config_flags=training_job.ConfigFlags(hidden_size=64)),
      "hidden_size 64 (the run's flags / config) differs from 32 of --init_checkpoint hf:{src} "
      "({src}/config.json): leave it out to take the source's",
    ),
    (
      dict(config_json='{"num_attention_heads": 8}'),
      "num_attention_heads 8 (the run's flags / config) differs from 4",
    ),
    (
      dict(config_flags=training_job.ConfigFlags(max_position_embeddings=32)),
      "max_position_embeddings 32 (the run's flags / config) is more than the 16 of",
    ),
    (dict(init_layers=[0, 4]), "--init_layers 4: --init_checkpoint hf:{src} has layers 0..3"),
    (
      dict(init_layers=[0, 1], config_flags=training_job.ConfigFlags(num_hidden_layers=3)),
      "--init_layers names 2 source layers for a model of num_hidden_layers 3",
    ),
    (
      dict(config_flags=training_job.ConfigFlags(num_hidden_layers=5)),
      "num_hidden_layers 5 is more than the 4 layers of --init_checkpoint",
    ),
    (
      dict(vocab_file="{other}"),
      "the records' vocab {other} (24 tokens) is not the vocab of --init_checkpoint hf:{src} "
      "({src}/vocab.txt, 22): id 1 is '[EOS]' in the records', '[UNK]' in the source's; "
      "make records with its vocab: create_pretraining_data.py --vocab_file={src}/vocab.txt ...",
    ),
    (
      dict(do_lower_case=False),
      "do_lower_case False (--do_lower_case) but --init_checkpoint hf:{src} is uncased",
    ),
    (
      dict(init_checkpoint=None, init_layers=[0]),
      "--init_layers picks layers of --init_checkpoint",
    ),
  ],
  ids=[
    "hidden",
    "heads",
    "positions",
    "layer-range",
    "layer-count",
    "too-deep",
    "vocab",
    "casing",
    "layers-alone",
  ],
)
def test_a_run_that_contradicts_its_source_is_refused_in_one_line(
  tmp_path, headless, kwargs, named
):
  if "config_json" in kwargs:
    kwargs = dict(config_flags=training_job.ConfigFlags(config_json=kwargs["config_json"]))
  kwargs = {
    k: v.format(other=other_vocab(tmp_path)) if isinstance(v, str) else v for k, v in kwargs.items()
  }
  with pytest.raises(ValueError) as e:
    training_job.prepare_model(params(tmp_path, headless, **kwargs), False)
  message = str(e.value)
  assert "\n" not in message
  assert named.format(src=headless, other=other_vocab(tmp_path)) in message


# ------------------------------------------------------------------ the command


def run_pretraining(tmp_path, source, *flags, status):
  return commands.run(
    "run_pretraining.py",
    f"--output_dir={tmp_path / 'run'}",
    f"--init_checkpoint={source}",
    "--synthetic_data",
    "--synthetic_length=6",
    "--max_seq_length=8",
    "--train_batch_size=4",
    "--num_warmup_steps=0",
    "--steps_per_loop=1",
    *flags,
    status=status,
  )


@pytest.mark.slow(seconds=20)
def test_run_pretraining_from_a_headless_hf_dir_records_its_source(tmp_path, bert, headless):
  result = run_pretraining(
    tmp_path, f"hf:{headless}", "--init_layers=1,3", "--num_train_steps=1", status=0
  )
  assert "warm start from hf:" in result.stderr and "head: fresh" in result.stderr
  run_json = json.loads((tmp_path / "run" / "run.json").read_text())
  assert run_json["init_checkpoint"] == {"path": f"hf:{headless}", "init_layers": [1, 3]}
  config = model_dir.read_config(str(tmp_path / "run"))
  assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (2, 32, 22)
  with open(os.path.join(headless, "vocab.txt")) as f:
    assert (tmp_path / "run" / "vocab.txt").read_text() == f.read()
  # A resume with another source (or other layers) is another job (with the same one, the source
  # is not read: test_a_resumed_run_ignores_the_source).
  other = write_headless(tmp_path / "other", bert)
  for source, layers in ((f"hf:{other}", "1,3"), (f"hf:{headless}", "0,3")):
    refused = run_pretraining(
      tmp_path, source, f"--init_layers={layers}", "--num_train_steps=2", status=2
    )
    assert "holds another job: init_checkpoint" in refused.stderr


@pytest.mark.slow(seconds=5)
def test_a_mismatch_stops_the_command_before_it_trains(tmp_path, headless):
  result = run_pretraining(tmp_path, f"hf:{headless}", "--hidden_size=64", status=2)
  assert "error: hidden_size 64" in result.stderr
  assert not (tmp_path / "run" / "run.json").exists()


@pytest.mark.slow(seconds=5)
def test_score_py_refuses_a_headless_bert_in_one_line(tmp_path, headless):
  sentences = tmp_path / "in.txt"
  sentences.write_text("the cat sat\n")
  result = commands.run(
    "score.py", f"--model_dir=hf:{headless}", f"--input_file={sentences}", status=2
  )
  errors = [line for line in result.stderr.splitlines() if "error:" in line]
  assert len(errors) == 1 and "has no masked-LM head" in errors[0]
  assert f"--init_checkpoint=hf:{headless}" in errors[0]

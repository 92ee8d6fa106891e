"""Makes the flat top-level modules importable and keeps TF quiet."""

import contextlib
import os
import signal
import sys

import keras
import numpy as np
import pytest

# Before the project's imports: the `pytest` command, unlike `python -m pytest`, does not put the
# current directory on sys.path.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# A suite started in the background of a script (`bash scripts/test.sh &`) inherits SIGINT
# ignored, and so would every command a test starts: the tests of Ctrl-C would see none arrive.
# Python's own handler is what a user's command at a terminal has (and a child gets SIG_DFL).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
  signal.signal(signal.SIGINT, signal.default_int_handler)

import tensorflow as tf  # noqa: E402

from lm import checkpoints  # noqa: E402
import modeling  # noqa: E402
from util import io_utils  # noqa: E402

# Every test process splits its CPU into this many logical devices before TensorFlow's runtime
# starts (it cannot be changed after): the tests of 2 replicas (--strategy=mirrored
# --num_cpu_devices=2, whose get_strategy finds the split already made) then run in the test's own
# process instead of a subprocess paying TensorFlow's import. Ops without a device still run on
# /cpu:0, and a one-device strategy names /cpu:0, so the other tests see one device as before.
TEST_CPU_DEVICES = 2
tf.config.set_logical_device_configuration(
  tf.config.list_physical_devices("CPU")[0],
  [tf.config.LogicalDeviceConfiguration()] * TEST_CPU_DEVICES,
)


def pytest_configure(config):
  config.addinivalue_line(
    "markers",
    "slow(seconds): a test of several seconds (its rough cost on a 2-core machine, for ordering "
    "only); `bash scripts/test.sh -m 'not slow'` is the fast loop for editing",
  )


def pytest_collection_modifyitems(items):
  """Whole modules in file order, the module with the longest test first.

  scripts/test.sh's xdist workers (--dist worksteal) each take a contiguous share of this order
  and steal from the other's end when idle: the longest tests start first, and a module's tests
  stay together, so its module-scoped fixtures are built once per worker that runs it.
  """

  def seconds(item):
    marker = item.get_closest_marker("slow")
    return marker.kwargs.get("seconds", 1) if marker else 0

  longest, total = {}, {}
  for item in items:
    module = item.nodeid.split("::")[0]
    longest[module] = max(longest.get(module, 0), seconds(item))
    total[module] = total.get(module, 0) + seconds(item)
  # A stable sort: the tests of a module keep their order. The modules that raise real signals in
  # the test process come first, in a fresh worker: after ~700 other tests in one xdist worker
  # (TensorFlow, OpenVINO and Beam loaded) a raised SIGINT or SIGTERM ended that worker although
  # util/interrupts.py's handler was installed (three full runs at fa951d4; never when the module
  # ran alone or after the signal and CLI modules). Its cause is not found yet.
  items.sort(
    key=lambda item: (
      item.nodeid.split("::")[0] not in SIGNALS_FIRST,
      -longest[item.nodeid.split("::")[0]],
      -total[item.nodeid.split("::")[0]],
    )
  )


SIGNALS_FIRST = ("tests/test_interrupts.py",)


# A subprocess's timeout only guards against a hang (never a verdict on speed: a busy machine
# may be many times slower than a quiet one); its TimeoutExpired names the command.
HANG_SECONDS = 1800


def lock_files(root):
  """The lock files under `root` (`.NAME.lock` beside an output, a training dir's run.lock), by
  relative path: a run that ended has left none (issue 57)."""
  return sorted(
    os.path.relpath(os.path.join(directory, name), root)
    for directory, _, names in os.walk(root)
    for name in names
    if name.endswith(".lock")
  )


# BERT's test habit: a tiny config that builds and runs in milliseconds. Tests
# override what their case needs (a vocab size, a layer count).
TINY = dict(
  vocab_size=99,
  hidden_size=32,
  num_hidden_layers=2,
  num_attention_heads=4,
  intermediate_size=37,
  max_position_embeddings=16,
)


def tiny_config(**overrides):
  """A `modeling.TTAConfig` of TINY updated with `overrides`."""
  return modeling.TTAConfig(**dict(TINY, **overrides))


# Words and pieces of the tiny vocabulary the inference and export tests share: enough for
# sentences with continuation pieces ("walk ##ing"), punctuation and an unknown word.
WORDS = (
  "the",
  "cat",
  "sat",
  "on",
  "mat",
  "a",
  "dog",
  "ran",
  "far",
  "away",
  "##s",
  "##ed",
  "run",
  "walk",
  "##ing",
  ".",
  ",",
)
# Sentence pairs with gold scores that share sentences (in either position, and a pair of one
# sentence): the --pairs_file of the STS and whitening tests.
PAIRS = [
  ("the cat sat", "a dog ran", 1.5),
  ("a dog ran", "the cat sat on the mat", 4.0),
  ("the cat sat", "the cat sat", 5.0),
  ("a dog", "a dog ran far away", 2.0),
  ("the mat", "the cat sat", 0.5),
  ("a cat walked", "the dog ran", 3.0),
  ("a dog ran far away", "the mat", 1.0),
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  """A lower-casing `FullTokenizer` of the special tokens followed by WORDS."""
  import tokenization  # pylint: disable=g-import-not-at-top

  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(WORDS)) + "\n")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


@pytest.fixture(scope="module")
def tiny_tta(tmp_path_factory):
  """A random tiny T-TA model dir of the special tokens and WORDS."""
  from lm import model_dir  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top

  root = tmp_path_factory.mktemp("tiny_tta")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(WORDS)) + "\n")
  config = tiny_config(vocab_size=len(tokenization.SPECIAL_TOKENS) + len(WORDS))
  path = str(root / "tta")
  model_dir.save_model_dir(modeling.build_model(config, "tta"), str(vocab), path)
  return path


def data_dir_or_skip(subdir=""):
  """The shared data root (`io_utils.data_root`: $TTA_DATA, else ../shared/data) holding `subdir`.

  Missing data skips the test, or fails it under TTA_REQUIRE_DATA=1 (scripts/test.sh sets it):
  there a skipped real-data test would pass unnoticed.
  """
  try:
    root = io_utils.data_root()
  except FileNotFoundError as e:
    _data_missing(f"shared data not available: {e}")
  if not os.path.isdir(os.path.join(root, subdir)):
    _data_missing(f"shared data folder {subdir} missing under {root}")
  return root


def _data_missing(reason):
  if os.environ.get("TTA_REQUIRE_DATA") == "1":
    pytest.fail(f"{reason} (TTA_REQUIRE_DATA=1: tests on the real data must run)", pytrace=False)
  pytest.skip(reason)


# The vocab of the BERT-checkpoint tests: Google's special tokens, no [SOS]/[EOS].
BERT_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(WORDS)


def tiny_bert(tokens=BERT_TOKENS, seed=21, **overrides):
  """A random tiny model_type "bert" model over `tokens` (token types, as Google's); `overrides`
  of its config (a layer count)."""
  config = tiny_config(
    vocab_size=len(tokens), type_vocab_size=2, mask_token_id=tokens.index("[MASK]"), **overrides
  )
  tf.keras.utils.set_random_seed(seed)
  return modeling.build_model(config, "bert")


def write_google_release(path, model, tokens=BERT_TOKENS):
  """Writes a Google BERT release dir (bert_config.json, vocab.txt, bert_model.ckpt) of `model`;
  returns the path as str."""

  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, "vocab.txt"), "w") as f:
    f.write("\n".join(tokens) + "\n")
  model.config.to_json_file(os.path.join(path, "bert_config.json"))
  checkpoints.save_tf1_checkpoint(model, os.path.join(path, "bert_model.ckpt"))
  return str(path)


def hf_bert_tensors(model, base_prefix="bert.", older_checkpoint=False):
  """A `bert` model's weights as a Hugging Face BertForMaskedLM holds them.

  Spelled out from HF's module tree (bert.embeddings, bert.encoder.layer.N, cls.predictions)
  and torch's Linear layout (weight [out, in]), not derived from the loader's naming rule, so
  a wrong rule fails the tests.

  Args:
    model: `modeling.TransformerLM` of model_type "bert".
    base_prefix: "bert." (BertForMaskedLM), or "" for an encoder saved as BertModel saves it.
    older_checkpoint: write what older and BertForPreTraining files hold too: LayerNorm
      gamma/beta, the tied decoder weight and bias, the position_ids buffer, the NSP pooler
      and head.

  Returns:
    {name: numpy array}.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top

  tensors = {}

  def linear(name, dense):
    tensors[name + ".weight"] = dense.kernel.numpy().T
    tensors[name + ".bias"] = dense.bias.numpy()

  def layer_norm(name, norm):
    weight, bias = ("gamma", "beta") if older_checkpoint else ("weight", "bias")
    tensors[f"{name}.{weight}"] = norm.gamma.numpy()
    tensors[f"{name}.{bias}"] = norm.beta.numpy()

  e, b = model.embeddings, base_prefix
  tensors[b + "embeddings.word_embeddings.weight"] = e.word_embeddings.numpy()
  tensors[b + "embeddings.position_embeddings.weight"] = e.position_embeddings.numpy()
  tensors[b + "embeddings.token_type_embeddings.weight"] = e.token_type_embeddings.numpy()
  layer_norm(b + "embeddings.LayerNorm", e.layer_norm)
  for i, block in enumerate(model.encoder_layers):
    p = f"{b}encoder.layer.{i}."
    linear(p + "attention.self.query", block.query)
    linear(p + "attention.self.key", block.key)
    linear(p + "attention.self.value", block.value)
    linear(p + "attention.output.dense", block.attention_output)
    layer_norm(p + "attention.output.LayerNorm", block.attention_layer_norm)
    linear(p + "intermediate.dense", block.intermediate)
    linear(p + "output.dense", block.output_dense)
    layer_norm(p + "output.LayerNorm", block.output_layer_norm)
  head = model.lm_head
  linear("cls.predictions.transform.dense", head.transform)
  layer_norm("cls.predictions.transform.LayerNorm", head.layer_norm)
  tensors["cls.predictions.bias"] = head.output_bias.numpy()
  if older_checkpoint:
    d, n = model.config.hidden_size, model.config.max_position_embeddings
    tensors["cls.predictions.decoder.weight"] = e.word_embeddings.numpy()
    tensors["cls.predictions.decoder.bias"] = head.output_bias.numpy()
    tensors[b + "embeddings.position_ids"] = np.arange(n, dtype=np.int64)[None]
    tensors[b + "pooler.dense.weight"] = np.ones([d, d], np.float32)
    tensors[b + "pooler.dense.bias"] = np.zeros([d], np.float32)
    tensors["cls.seq_relationship.weight"] = np.ones([2, d], np.float32)
    tensors["cls.seq_relationship.bias"] = np.zeros([2], np.float32)
  return tensors


def hf_bert_config(model, **overrides):
  """The config.json `save_pretrained` writes for a BertForMaskedLM of `model`'s size."""
  c = model.config
  config = {
    "architectures": ["BertForMaskedLM"],
    "model_type": "bert",
    "vocab_size": c.vocab_size,
    "hidden_size": c.hidden_size,
    "num_hidden_layers": c.num_hidden_layers,
    "num_attention_heads": c.num_attention_heads,
    "intermediate_size": c.intermediate_size,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": c.max_position_embeddings,
    "type_vocab_size": c.type_vocab_size,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "torch_dtype": "float32",
    "transformers_version": "4.57.1",
  }
  config.update(overrides)
  return config


def write_hf_bert_dir(path, model, tokens=BERT_TOKENS, tensors=None, config=None):
  """Writes a Hugging Face BERT dir (config.json, tokenizer_config.json, vocab.txt,
  model.safetensors with safetensors.numpy) of `model`; returns the path as str."""
  import json  # pylint: disable=g-import-not-at-top

  import numpy as np  # pylint: disable=g-import-not-at-top
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top

  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(config or hf_bert_config(model), f, indent=2)
  with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
    json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f)
  with open(os.path.join(path, "vocab.txt"), "w") as f:
    f.write("\n".join(tokens) + "\n")
  tensors = hf_bert_tensors(model) if tensors is None else tensors
  # Contiguous copies: safetensors 0.8.0's save_file writes a transposed view's memory in its
  # storage order, not its values.
  tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
  save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
  return str(path)


@contextlib.contextmanager
def keras_policy(name):
  """Layers built in the block compute under Keras' dtype policy `name` ("mixed_bfloat16")."""
  previous = keras.mixed_precision.global_policy().name
  keras.mixed_precision.set_global_policy(name)
  try:
    yield
  finally:
    keras.mixed_precision.set_global_policy(previous)


def padded_batch(lengths, tokens, rng):
  """ids, mask int32 [B, max(lengths)]: row b holds lengths[b] ids drawn from `tokens`, then 0s."""
  mask = (np.arange(max(lengths))[None] < np.array(lengths)[:, None]).astype(np.int32)
  return np.where(mask > 0, rng.choice(tokens, mask.shape), 0).astype(np.int32), mask


# Config overrides for the self-unknown tests: at BERT's initializer_range (0.02) a query's
# attention logits span ~0.03, attention is nearly uniform, and a leak through the softmax's
# normaliser (a masked logit not far enough below the others) would hide under float32 rounding;
# at 0.5 they span ~20, and a mask adder of -15 instead of -1e9 fails the tests.
SHARP_ATTENTION = {"initializer_range": 0.5}


def assert_self_unknown(run, ids, mask, tokens, positions=None, seed=0):
  """T-TA's self-unknown property, bit for bit: output i does not depend on token i.

  For each position i, token i of every row where it is real is changed to another of `tokens`,
  and, against the unchanged batch: output i of those rows is bit-identical (no tolerance: the
  attention weight of key i at query i is an exact zero, docs/DESIGN.md §2.2); rows where i is
  padding are bit-identical everywhere (rows never mix); and each changed row with another real
  token has some other output changed (the change did reach the model).

  Args:
    run: (ids, mask) int32 [B, T] -> dict of arrays [B, T, ...] holding output t of row b at
      [b, t] (whatever an output does not observe may hold zeros, in both calls).
    ids, mask: int32 [B, T], a padded batch.
    tokens: the ids a changed token is drawn from.
    positions: the positions i to change (default: every one).
    seed: of the draws.
  """
  rng = np.random.default_rng(seed)
  tokens = np.asarray(tokens)
  base = run(ids, mask)
  for i in range(ids.shape[1]) if positions is None else positions:
    real = mask[:, i] > 0
    changed = ids.copy()
    for row in np.flatnonzero(real):
      changed[row, i] = rng.choice(tokens[tokens != ids[row, i]])
    out = run(changed, mask)
    for name, want in base.items():
      np.testing.assert_array_equal(out[name][real, i], want[real, i], err_msg=f"{name}, token {i}")
      np.testing.assert_array_equal(out[name][~real], want[~real], err_msg=f"{name}, other rows")
    for row in np.flatnonzero(real & (mask.sum(1) > 1)):
      assert any(not np.array_equal(out[k][row], base[k][row]) for k in base), (row, i)


@pytest.fixture
def op_determinism():
  """TF op determinism for one test only: the tests after it in the process draw unseeded
  random ops, which determinism refuses. TF has no public switch back, hence the private one."""
  from tensorflow.python.framework import config as tf_config  # pylint: disable=g-import-not-at-top

  tf.config.experimental.enable_op_determinism()
  yield
  tf_config.disable_op_determinism()

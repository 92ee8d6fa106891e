# coding=utf-8
"""Hugging Face BERT masked LMs (`hf:DIR`), read as model_type "bert" with safetensors: no
PyTorch, never a pickle. Another architecture, or a setting our BERT cannot reproduce, is refused
by name (docs/DESIGN.md §5.1); each of our TF1 names has one HF name (`hf_name`).
"""

import json
import os
import re

from absl import logging

# Registers bfloat16 with NumPy, so safetensors.numpy reads BF16 checkpoints.
import ml_dtypes  # noqa: F401
import numpy as np
from safetensors import SafetensorError
from safetensors import safe_open

from lm import checkpoints
from lm import model_dir as model_dir_lib
import modeling
import tokenization

CONFIG_FILE = "config.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
VOCAB_FILE = "vocab.txt"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
# PyTorch's pickled weight files: loading one runs code from the file, so we never do.
PICKLED_WEIGHTS_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
_WHAT_A_DIR_HOLDS = (
  f"an hf: dir holds {CONFIG_FILE}, {VOCAB_FILE} and {WEIGHTS_FILE} (Hugging Face BERT)"
)

# BertConfig's defaults, for keys a config.json leaves out; the keys are TTAConfig's too.
_BERT_CONFIG_DEFAULTS = {
  "vocab_size": 30522,
  "hidden_size": 768,
  "num_hidden_layers": 12,
  "num_attention_heads": 12,
  "intermediate_size": 3072,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "attention_probs_dropout_prob": 0.1,
  "max_position_embeddings": 512,
  "type_vocab_size": 2,
  "initializer_range": 0.02,
}
# BertConfig settings our BERT has one way only: key -> (HF's default, the values we implement).
# HF's "gelu" is the exact erf form, as ours ("gelu_new" and "gelu_pytorch_tanh" are the tanh
# approximation); our LayerNorm's epsilon is BERT's 1e-12 (modeling.LayerNorm); our output
# layer is tied to the word embeddings.
_SETTINGS = {
  "hidden_act": ("gelu", ("gelu", "relu", "tanh")),
  "layer_norm_eps": (1e-12, (1e-12,)),
  "position_embedding_type": ("absolute", ("absolute",)),
  "tie_word_embeddings": (True, (True,)),
}

# Why the families people most often try instead of BERT do not load as BERT, by model_type.
_NOT_BERT = {
  "roberta": "a byte-level BPE vocab (vocab.json, merges.txt) and position ids offset past the "
  "padding id",
  "xlm-roberta": "a SentencePiece vocab and position ids offset past the padding id",
  "camembert": "a SentencePiece vocab and position ids offset past the padding id",
  "albert": "factorised embeddings and one set of layer weights shared by every layer",
  "distilbert": "no token-type embeddings, and its own layer layout",
  "electra": "factorised embeddings and a discriminator head instead of a masked LM",
  "deberta": "disentangled relative-position attention",
  "deberta-v2": "disentangled relative-position attention",
}

# HF names our model does not use: a buffer of position indices, the NSP pooler and head, and
# the tied copies of the output embeddings and bias (checked equal to what we load, not loaded).
_IGNORED = (
  r"(^|\.)embeddings\.position_ids$",
  r"^(bert\.)?pooler\.",
  r"^cls\.seq_relationship\.",
  r"^cls\.predictions\.decoder\.(weight|bias)$",
)
# Our TF1 leaf name -> (HF leaf name, stored transposed).
_LEAVES = {
  "kernel": ("weight", True),
  "bias": ("bias", False),
  "gamma": ("weight", False),
  "beta": ("bias", False),
  "output_bias": ("bias", False),
}
# Older checkpoints' spellings of LayerNorm parameters (HF renames them when loading).
_OLD_SPELLINGS = ((".LayerNorm.weight", ".LayerNorm.gamma"), (".LayerNorm.bias", ".LayerNorm.beta"))


def hf_name(tf1_name, base_prefix="bert."):
  """(HF name, stored transposed) of one of our TF1 names; base_prefix "" for a bare encoder."""
  scope, leaf = tf1_name.rsplit("/", 1)
  parts = [re.sub(r"^layer_(\d+)$", r"layer.\1", p) for p in scope.split("/")]
  # An embedding table is a module of its own in HF (nn.Embedding), holding "weight".
  name, transposed = _LEAVES.get(leaf, (leaf + ".weight", False))
  dotted = ".".join(parts + [name])
  if dotted.startswith("bert."):
    dotted = base_prefix + dotted[len("bert.") :]
  return dotted, transposed


def _tied_copies(base_prefix):
  """HF names holding a copy of another tensor in a BertForMaskedLM: HF name -> copy."""
  return {
    f"{base_prefix}embeddings.word_embeddings.weight": "cls.predictions.decoder.weight",
    "cls.predictions.bias": "cls.predictions.decoder.bias",
  }


# ------------------------------------------------------------------- config


def _refuse_unless_bert(hf, path):
  model_type = hf.get("model_type")
  architectures = list(hf.get("architectures") or [])
  if (model_type not in (None, "bert")) or any(not a.startswith("Bert") for a in architectures):
    what = f"model_type {model_type!r}" if model_type else "no model_type"
    why = f" ({_NOT_BERT[model_type]})" if model_type in _NOT_BERT else ""
    raise ValueError(
      f"{path}: {what}, architectures {architectures}: not BERT{why}; hf:DIR reads BERT masked "
      "LMs (BertForMaskedLM, BertForPreTraining) only"
    )
  if hf.get("is_decoder") or "BertLMHeadModel" in architectures:
    raise ValueError(
      f"{path}: a left-to-right BERT decoder (is_decoder / BertLMHeadModel), not a masked LM; "
      "hf:DIR reads BertForMaskedLM and BertForPreTraining"
    )
  wrong = [
    f"{key}={hf.get(key, default)!r}"
    for key, (default, ours) in _SETTINGS.items()
    if hf.get(key, default) not in ours
  ]
  if wrong:
    raise ValueError(
      f"{path}: {', '.join(wrong)} is not implemented here (ours: "
      + ", ".join(f"{key} in {ours}" for key, (_, ours) in _SETTINGS.items())
      + ")"
    )


def read_do_lower_case(hf_dir):
  """do_lower_case of tokenizer_config.json (true without one); ValueError for a tokenizer or
  settings ours cannot follow.
  """
  path = os.path.join(hf_dir, TOKENIZER_CONFIG_FILE)
  if not os.path.exists(path):
    return True
  with open(path, encoding="utf-8") as f:
    settings = json.load(f)
  tokenizer_class = settings.get("tokenizer_class")
  if tokenizer_class not in (None, "BertTokenizer", "BertTokenizerFast"):
    raise ValueError(
      f"{path}: tokenizer_class {tokenizer_class!r}; ours is BERT's WordPiece (BertTokenizer) only"
    )
  lower = bool(settings.get("do_lower_case", True))
  strip_accents = settings.get("strip_accents")
  if strip_accents is not None and bool(strip_accents) != lower:
    raise ValueError(
      f"{path}: strip_accents={strip_accents} with do_lower_case={lower}; our tokenizer strips "
      "accents exactly when it lower-cases (BertTokenizer's default)"
    )
  if settings.get("tokenize_chinese_chars", True) is False:
    raise ValueError(f"{path}: tokenize_chinese_chars=false; our tokenizer always splits them")
  return lower


def read_config(hf_dir):
  """The `TTAConfig` of an HF BERT dir, framed by [CLS]/[SEP]; FileNotFoundError without
  config.json, ValueError naming a non-BERT architecture or a setting we cannot reproduce.
  """
  path = os.path.join(hf_dir, CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found; {_WHAT_A_DIR_HOLDS}")
  with open(path, encoding="utf-8") as f:
    hf = json.load(f)
  _refuse_unless_bert(hf, path)
  do_lower_case = read_do_lower_case(hf_dir)
  try:
    return modeling.TTAConfig(
      **{key: hf.get(key, default) for key, default in _BERT_CONFIG_DEFAULTS.items()},
      model_type="bert",
      do_lower_case=do_lower_case,
      boundary_tokens=model_dir_lib.BERT_BOUNDARY_TOKENS,
    )
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path}: {e}") from e


# ------------------------------------------------------------------ weights


def weight_files(hf_dir):
  """model.safetensors, or the shards its index names; ValueError for pickled weights (the line
  says how to convert them), FileNotFoundError for none.
  """
  single = os.path.join(hf_dir, WEIGHTS_FILE)
  if os.path.exists(single):
    return [single]
  index = os.path.join(hf_dir, WEIGHTS_INDEX_FILE)
  if os.path.exists(index):
    with open(index, encoding="utf-8") as f:
      shards = sorted(set(json.load(f)["weight_map"].values()))
    return [os.path.join(hf_dir, shard) for shard in shards]
  pickled = [n for n in PICKLED_WEIGHTS_FILES if os.path.exists(os.path.join(hf_dir, n))]
  if pickled:
    raise ValueError(
      f"{hf_dir} has {pickled[0]} but no {WEIGHTS_FILE}, and tta never unpickles weights; "
      'convert them where torch and transformers are installed: python -c "from transformers '
      f"import AutoModelForMaskedLM as M; M.from_pretrained('{hf_dir}')"
      f".save_pretrained('{hf_dir}', safe_serialization=True)\""
    )
  raise FileNotFoundError(f"{hf_dir} has no {WEIGHTS_FILE}; {_WHAT_A_DIR_HOLDS}")


class SafetensorsWeights(object):
  """An HF dir's safetensors tensors: `shapes` {name: list of int} from the headers, values
  read one at a time, memory-mapped.
  """

  def __init__(self, hf_dir):
    """CheckpointUnreadableError in one line for a truncated or non-safetensors file."""
    self.source = hf_dir
    self.shapes = {}
    self._files = {}
    for path in weight_files(hf_dir):
      try:
        handle = safe_open(path, framework="np")
      except SafetensorError as e:
        raise checkpoints.CheckpointUnreadableError(
          f"{path} cannot be read: {e} (a truncated download, or not a safetensors file)"
        ) from None
      for name in handle.keys():
        self.shapes[name] = list(handle.get_slice(name).get_shape())
        self._files[name] = handle

  def base_prefix(self):
    """ "bert." in a model with heads, "" for an encoder saved alone."""
    if any(name.startswith("bert.") for name in self.shapes):
      return "bert."
    return "" if "embeddings.word_embeddings.weight" in self.shapes else "bert."

  def get(self, name):
    """float32 array of tensor `name` (float16 and bfloat16 widen exactly)."""
    return np.asarray(self._files[name].get_tensor(name), np.float32)

  def find(self, tf1_name):
    """(the name this file holds our TF1 variable `tf1_name` under, or None; stored transposed)."""
    prefix = self.base_prefix()
    name, transposed = hf_name(tf1_name, prefix)
    return next((n for n in _spellings(name, prefix) if n in self.shapes), None), transposed


def _spellings(name, base_prefix):
  """Every name a file may hold HF tensor `name` under, the current spelling first."""
  names = [name]
  for new, old in _OLD_SPELLINGS:
    if name.endswith(new):
      names.append(name[: -len(new)] + old)
  copy = _tied_copies(base_prefix).get(name)
  return names + ([copy] if copy else [])


def headless_message(source):
  """Why a BERT without a masked-LM head at `source` cannot score."""
  return (
    f"{source} has no masked-LM head (cls.predictions.*): a BertModel or a fine-tuned BERT "
    "cannot score (its sentence vectors can: run_sts.py); use the BertForMaskedLM or "
    "BertForPreTraining checkpoint (it can warm-start training: run_pretraining.py "
    f"--init_checkpoint=hf:{source})"
  )


def has_head(weights):
  """Whether `SafetensorsWeights` holds a masked-LM head (cls.predictions.*)."""
  return any(name.startswith("cls.predictions.") for name in weights.shapes)


def load_weights(model, weights, require_head=True):
  """Assigns a "bert" model's variables from `SafetensorsWeights`; returns the names ignored.

  Without `require_head`, an encoder saved without a head (a sentence-embedding BertModel) loads
  every variable but the head's, which keeps its initial values: its LM may give sentence
  vectors, never scores (`NeuralLM.score` refuses one).

  CheckpointMismatchError, before any assignment, names every missing, mis-shaped or unexpected
  tensor, a missing masked-LM head (when required) or tied copies that differ.
  """
  context = f"cannot load {weights.source} into a {model.model_type} model"
  head = has_head(weights)
  if not head and require_head:
    raise checkpoints.CheckpointMismatchError(f"{context}: {headless_message(weights.source)}")
  prefix = weights.base_prefix()
  assignments = {}  # the file's name -> (variable, transposed)
  for tf1_name, variable in model.tf1_variables().items():
    if not head and tf1_name.startswith(modeling.HEAD_SCOPE + "/"):
      continue
    found, transposed = weights.find(tf1_name)
    assignments[found or hf_name(tf1_name, prefix)[0]] = (variable, transposed)
  ignored, _ = checkpoints.match_names(
    {n: list(v.shape)[::-1] if t else list(v.shape) for n, (v, t) in assignments.items()},
    weights.shapes,
    _IGNORED,
    strict=True,
    context=context,
  )
  for name, copy in _tied_copies(prefix).items():
    source = next((n for n in _spellings(name, prefix) if n in assignments), None)
    if source is not None and copy != source and copy in weights.shapes:
      # equal_nan: a NaN in both copies is named by the finite check below, not called untied.
      if not np.array_equal(weights.get(copy), weights.get(source), equal_nan=True):
        raise checkpoints.CheckpointMismatchError(
          f"{context}: {copy} differs from {source}; our output layer is tied to them, as "
          "BERT's (untied output embeddings are not implemented)"
        )
  for name, (variable, transposed) in assignments.items():
    value = weights.get(name)
    checkpoints.check_finite(name, value, weights.source)
    variable.assign(value.T if transposed else value)
  return ignored


def checked_vocab_file(hf_dir, config):
  """The dir's vocab.txt; FileNotFoundError without one, ValueError unless it holds
  config.vocab_size tokens and [MASK].
  """
  vocab_file = os.path.join(hf_dir, VOCAB_FILE)
  if not os.path.exists(vocab_file):
    raise FileNotFoundError(
      f"{vocab_file} not found; {_WHAT_A_DIR_HOLDS} (a tokenizer.json alone is not read)"
    )
  vocab = tokenization.load_vocab(vocab_file)
  if len(vocab) != config.vocab_size:
    raise ValueError(
      f"{vocab_file} has {len(vocab):d} tokens but "
      f"{os.path.join(hf_dir, CONFIG_FILE)} says vocab_size {config.vocab_size:d}"
    )
  if "[MASK]" not in vocab:
    raise ValueError(f"{vocab_file} has no [MASK] token")
  return vocab_file


def load_hf_bert(hf_dir, require_head=True):
  """(model, tokenizer) of an HF BERT masked LM dir; ValueError / FileNotFoundError naming the
  file and what is wrong, nothing assigned unless every tensor fits.
  """
  config = read_config(hf_dir)
  weights = SafetensorsWeights(hf_dir)
  tokenizer = model_dir_lib.tokenizer_for(config, checked_vocab_file(hf_dir, config))
  config.mask_token_id = tokenizer.mask_id
  model = modeling.build_model(config, "bert")
  ignored = load_weights(model, weights, require_head)
  # Read by NeuralLM.score, which refuses a model without its head: the dir, or None.
  model.headless = None if has_head(weights) else hf_dir
  logging.info(
    "loaded Hugging Face BERT from %s (ignored: %s)", hf_dir, ", ".join(ignored) or "none"
  )
  return model, tokenizer

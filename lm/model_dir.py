# coding=utf-8
"""The model directory (docs/DESIGN.md §5.1): the one place that reads and writes our models on
disk, and training's embedding targets (its warm start: lm/warm_start.py).
"""

import copy
import gc
import hashlib
import os
import re

from absl import logging
import numpy as np
import tensorflow as tf

from lm import checkpoints
import modeling
import tokenization
from util import io_utils

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"


def config_path(model_dir):
  return os.path.join(model_dir, CONFIG_FILE)


def vocab_path(model_dir):
  return os.path.join(model_dir, VOCAB_FILE)


def read_config(model_dir):
  path = config_path(model_dir)
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(
      f"{path} not found; a model dir needs {CONFIG_FILE}, {VOCAB_FILE} and a checkpoint"
    )
  return modeling.TTAConfig.from_json_file(path)


def write_config_and_vocab(model_dir, config, vocab_file=None, tokens=None):
  """Writes config.json and vocab.txt atomically: `vocab_file` copied, else `tokens` if none."""
  io_utils.write_atomically(config_path(model_dir), config.to_json_string())
  dest = vocab_path(model_dir)
  if vocab_file and os.path.abspath(vocab_file) != os.path.abspath(dest):
    with tf.io.gfile.GFile(vocab_file, "rb") as source:
      data = source.read()
    with io_utils.atomic_open(dest, "wb") as f:
      f.write(data)
  elif not vocab_file and tokens and not tf.io.gfile.exists(dest):
    tokenization.write_vocab(tokens, dest)


def identity(model_dir):
  """What a model dir's numbers depend on, read cheaply (`util/runs.py`): path, sha256 of config
  and vocab, the newest checkpoint's file sizes and mtimes.
  """
  model_dir = io_utils.absolute(model_dir)
  digests = {}
  for name in (CONFIG_FILE, VOCAB_FILE):
    path = os.path.join(model_dir, name)
    if io_utils.exists(path):
      with io_utils.open_file(path, "rb") as f:
        digests[name] = hashlib.sha256(f.read()).hexdigest()
  checkpoint = checkpoints.latest_checkpoint(model_dir)
  files = {}
  if checkpoint:
    for path in sorted(tf.io.gfile.glob(checkpoint + ".*")):
      files[os.path.basename(path)] = io_utils.stat(path)
  return {"path": model_dir, "sha256": digests, "checkpoint": files}


def load_model_dir(model_dir, checkpoint=None):
  """(model, tokenizer) of a model dir at `checkpoint` (default the latest); ValueError /
  FileNotFoundError naming the missing or mismatched piece, or NonFiniteWeightsError.
  """
  config = read_config(model_dir)
  vocab_file = vocab_path(model_dir)
  if not tf.io.gfile.exists(vocab_file):
    raise FileNotFoundError(
      f"{vocab_file} not found; a model dir needs {CONFIG_FILE}, {VOCAB_FILE} and a checkpoint"
    )
  tokenizer = tokenizer_for(config, vocab_file)
  model = modeling.build_model(config)
  checkpoint = checkpoint or checkpoints.resolve_checkpoint(model_dir)
  _restore_for_inference(model, checkpoint, config_path(model_dir))
  for name, variable in model.tf1_variables().items():
    checkpoints.check_finite(name, variable.numpy(), checkpoint)
  logging.info("loaded %s model from %s", config.model_type, checkpoint)
  return model, tokenizer


def tokenizer_for(config, vocab_file):
  """The tokenizer of `config`: its casing and boundary tokens (else the vocab's pair)."""
  return tokenization.FullTokenizer(
    vocab_file, config.do_lower_case, boundary_tokens=config.boundary_tokens
  )


# TF's message when a checkpoint value does not fit the variable the config built.
_SHAPE_ERROR = re.compile(
  r"incompatible tensor with shape (?P<saved>\(.*?\)) when attempting to restore variable "
  r"with shape (?P<built>\(.*?\)) and name (?P<name>[^\s:]+)"
)


def _restore_for_inference(model, checkpoint, config_file):
  """Reads every model weight from `checkpoint`, silencing TF's hundreds of warnings about
  training's optimizer slots; a mismatch is one `CheckpointMismatchError` with both shapes.
  """
  tf_logger = tf.get_logger()
  level = tf_logger.level
  tf_logger.setLevel("ERROR")
  problem = None
  try:
    with checkpoints.reading_checkpoint(checkpoint):
      status = tf.train.Checkpoint(model=model).read(checkpoint)
    status.expect_partial()
    status.assert_existing_objects_matched()
  except checkpoints.CheckpointUnreadableError:
    raise
  except (AssertionError, ValueError) as e:
    problem = str(e)
  finally:
    gc.collect()  # the failed restore's leftovers warn when collected: while still quiet
    tf_logger.setLevel(level)
  if problem is None:
    return
  match = _SHAPE_ERROR.search(problem)
  if match:
    fields = ("vocab_size", "hidden_size", "intermediate_size", "max_position_embeddings")
    config = ", ".join(f"{f}={getattr(model.config, f)}" for f in fields)
    problem = (
      f"variable {match['name']} has shape {match['saved']} in the checkpoint but "
      f"{match['built']} from {os.path.basename(config_file)}\n  ({config})"
    )
  raise checkpoints.CheckpointMismatchError(
    f"{config_file} does not match checkpoint {checkpoint}:\n  {problem}"
  )


def save_model_dir(model, vocab_file, model_dir):
  """Writes `model` and `vocab_file` as a model dir; returns the checkpoint prefix."""
  config = copy.deepcopy(model.config)
  config.model_type = model.model_type
  write_config_and_vocab(model_dir, config, vocab_file)
  return tf.train.Checkpoint(model=model).write(
    os.path.join(model_dir, f"{checkpoints.CHECKPOINT_NAME}-0")
  )


def load_word_embeddings(path, vocab):
  """(float32 [V, D] table, checkpoint prefix) of a model dir or TF1 checkpoint; ValueError
  unless it lines up with `vocab`.
  """
  checkpoint = checkpoints.resolve_checkpoint(path)
  if checkpoints.is_tf1_checkpoint(checkpoint):
    with checkpoints.reading_checkpoint(checkpoint):
      table = tf.train.load_checkpoint(checkpoint).get_tensor(checkpoints.TF1_WORD_EMBEDDINGS)
  else:
    source = os.path.dirname(checkpoint)
    model, tokenizer = load_model_dir(source, checkpoint)
    if list(tokenizer.vocab) != list(vocab):
      raise ValueError(
        f"{vocab_path(source)} has a different vocab from ours; its embeddings "
        "would not line up with our token ids"
      )
    table = model.embeddings.word_embeddings.numpy()
  if table.shape[0] != len(vocab):
    raise ValueError(
      f"{checkpoint}: word_embeddings has {table.shape[0]:d} rows, the vocab {len(vocab)}"
    )
  return table.astype(np.float32), checkpoint


def weights_fingerprint(model):
  """sha256 hex of every weight of `model` (names, shapes and values)."""
  digest = hashlib.sha256()
  for name, variable in model.tf1_variables().items():
    value = np.ascontiguousarray(variable.numpy())
    digest.update((f"{name} {value.shape}\n").encode("utf-8"))
    digest.update(value.tobytes())
  return digest.hexdigest()


# The sentence frame of BERT checkpoints (Google's, Hugging Face's): BERT was trained on
# [CLS] ... [SEP], whatever else its vocab holds.
BERT_BOUNDARY_TOKENS = ("[CLS]", "[SEP]")

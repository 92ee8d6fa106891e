# coding=utf-8
"""The model directory: the one place that reads and writes a model of ours on disk
(docs/DESIGN.md §5.1): config.json (`modeling.TTAConfig` with model_type, output_layer,
do_lower_case, normalization), vocab.txt and `tf.train.Checkpoint` files whose model object is
"model"; a training run's warm start and embedding targets from such a dir or a TF1 checkpoint.
Released formats convert through lm/conversion.py.
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
  """The `modeling.TTAConfig` of a model dir (FileNotFoundError if none)."""
  path = config_path(model_dir)
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(
      f"{path} not found; a model dir needs {CONFIG_FILE}, {VOCAB_FILE} and a checkpoint"
    )
  return modeling.TTAConfig.from_json_file(path)


def write_config_and_vocab(model_dir, config, vocab_file=None, tokens=None):
  """Writes config.json and vocab.txt, each atomically.

  Other workers and tools reading the dir meanwhile never see a half-written
  file.

  Args:
    model_dir: str, created if missing.
    config: `modeling.TTAConfig`.
    vocab_file: the vocab to copy in (nothing is copied when it already is
      the dir's vocab.txt).
    tokens: without vocab_file, the token list to write as vocab.txt; an
      existing vocab.txt is then kept.
  """
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
  """What a model dir's numbers depend on, read cheaply (nothing of the weights is hashed): its
  absolute path, the sha256 of config.json and vocab.txt, and the newest checkpoint with the
  size and modification time of its files. For a run record (`util/runs.py`): a model trained
  further, or another model at the path, is another identity."""
  model_dir = os.path.abspath(model_dir)
  digests = {}
  for name in (CONFIG_FILE, VOCAB_FILE):
    path = os.path.join(model_dir, name)
    if os.path.exists(path):
      with open(path, "rb") as f:
        digests[name] = hashlib.sha256(f.read()).hexdigest()
  checkpoint = checkpoints.latest_checkpoint(model_dir)
  files = {}
  if checkpoint:
    for path in sorted(tf.io.gfile.glob(checkpoint + ".*")):
      files[os.path.basename(path)] = [os.path.getsize(path), os.stat(path).st_mtime_ns]
  return {"path": model_dir, "sha256": digests, "checkpoint": files}


def load_model_dir(model_dir, checkpoint=None):
  """Loads a model dir: (model, tokenizer).

  Args:
    model_dir: str.
    checkpoint: a specific checkpoint prefix; default the latest one.

  Raises:
    ValueError / FileNotFoundError naming the missing or mismatched piece;
      checkpoints.NonFiniteWeightsError naming the first weight (in `tf1_variables` order) with a
      NaN or inf.
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
  """The `tokenization.FullTokenizer` a model of `config` reads its text with.

  Lower-casing and the pair of boundary tokens come from the config (config.json), so every
  path that encodes text (scoring, vectors, the SavedModel export) frames sentences alike; a
  config without boundary_tokens gets the vocab's pair, as before the field existed.
  """
  return tokenization.FullTokenizer(
    vocab_file, config.do_lower_case, boundary_tokens=config.boundary_tokens
  )


# TF's message when a checkpoint value does not fit the variable the config built.
_SHAPE_ERROR = re.compile(
  r"incompatible tensor with shape (?P<saved>\(.*?\)) when attempting to restore variable "
  r"with shape (?P<built>\(.*?\)) and name (?P<name>[^\s:]+)"
)


def _restore_for_inference(model, checkpoint, config_file):
  """Reads `model`'s weights from `checkpoint`; every model weight must be there.

  The optimizer slots and step counter that training checkpoints also hold are not needed here:
  TF's per-value warnings about them (a few hundred lines, also emitted when a failed restore is
  garbage-collected) are silenced for the read, and a mismatch becomes one short error instead.

  Raises:
    checkpoints.CheckpointMismatchError: naming `config_file`, and for a shape mismatch the
      variable and both shapes.
    checkpoints.CheckpointUnreadableError: a file of `checkpoint` is missing, truncated or corrupt.
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
  """Writes a model dir that `load_model_dir` reads.

  Args:
    model: `modeling.TransformerLM`; its config (with do_lower_case and
      normalization) becomes config.json.
    vocab_file: the model's vocab, copied to vocab.txt.
    model_dir: str, created if missing.

  Returns:
    The checkpoint prefix written.
  """
  config = copy.deepcopy(model.config)
  config.model_type = model.model_type
  write_config_and_vocab(model_dir, config, vocab_file)
  return tf.train.Checkpoint(model=model).write(
    os.path.join(model_dir, f"{checkpoints.CHECKPOINT_NAME}-0")
  )


def warm_start(model, init_checkpoint):
  """Loads a model dir / checkpoint's weights into a fresh model.

  Our object-based checkpoints and TF1 ones (Google BERT or T-TA names) both
  work; the optimizer is not touched. A partial match (e.g. a continuous
  head started from a softmax model: the encoder loads, the new head keeps
  its initialisation) is logged, not an error.
  """
  checkpoint = checkpoints.resolve_checkpoint(init_checkpoint)
  if checkpoints.is_tf1_checkpoint(checkpoint):
    report = checkpoints.load_tf1_checkpoint(model, checkpoint, strict=False)
    logging.info(
      "warm start from TF1 checkpoint %s: %d variables loaded, ignored %s, unexpected %s",
      checkpoint,
      len(report["loaded"]),
      report["ignored"],
      report["unexpected"],
    )
    return
  with checkpoints.reading_checkpoint(checkpoint):
    status = tf.train.Checkpoint(model=model).read(checkpoint)
  status.expect_partial()
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    logging.warning("warm start from %s is partial: %s", checkpoint, e)
  logging.info("warm start from %s", checkpoint)


def load_word_embeddings(path, vocab):
  """The word embedding table of a model dir / checkpoint, for `vocab`.

  Args:
    path: our model dir or one of its checkpoint prefixes, or a TF1
      checkpoint (Google BERT / T-TA names).
    vocab: OrderedDict token -> id the table must line up with.

  Returns:
    (float32 [V, D] numpy array, the checkpoint prefix read).

  Raises:
    ValueError: when our model dir's vocab differs from `vocab`, or the
      table's row count from len(vocab).
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
  """sha256 of every weight of `model` (names, shapes and values), hex."""
  digest = hashlib.sha256()
  for name, variable in model.tf1_variables().items():
    value = np.ascontiguousarray(variable.numpy())
    digest.update((f"{name} {value.shape}\n").encode("utf-8"))
    digest.update(value.tobytes())
  return digest.hexdigest()


# The sentence frame of BERT checkpoints (Google's, Hugging Face's): BERT was trained on
# [CLS] ... [SEP], whatever else its vocab holds.
BERT_BOUNDARY_TOKENS = ("[CLS]", "[SEP]")

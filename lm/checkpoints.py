# coding=utf-8
"""Checkpoint files: newest first, damaged ones named in one line, roll-back, TF1 names. TensorFlow
and util/ only, so the training loops can use it.
"""

import contextlib
import os
import re

from absl import logging
import numpy as np
import tensorflow as tf

from util import io_utils

# Checkpoint prefix: ckpt-N, N = the global step.
CHECKPOINT_NAME = "ckpt"
# Checkpoint variables that a Google BERT or T-TA TF1 checkpoint holds but our
# models do not use: optimizer slots, the step counter, the NSP pooler/head.
IGNORED_CHECKPOINT_VARIABLES = (
  r"(^|/)adam_[mv]$",
  r"^global_step$",
  r"^bert/pooler/",
  r"^cls/seq_relationship/",
)


# A variable every TF1 checkpoint of a BERT-style model has: it tells a TF1
# checkpoint from one of our object-based ones.
TF1_WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"
# Seed of the untrained pooler that save_tf1_checkpoint writes.
_POOLER_SEED = (2020, 0)


class CheckpointMismatchError(ValueError):
  pass


class CheckpointUnreadableError(ValueError):
  """A checkpoint file is missing, truncated or corrupt (one line naming it)."""


class NonFiniteWeightsError(ValueError):
  """A weight holds NaN or inf (one line naming the checkpoint and variable)."""


def check_finite(name, value, source):
  """NonFiniteWeightsError if weight `name` of checkpoint `source` holds a NaN or inf."""
  bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
  if bad:
    raise NonFiniteWeightsError(
      f"{source}: {name} holds {bad} NaN or infinite value(s) of {np.size(value)}; a model with "
      "weights that are not numbers cannot score (a diverged run, or a damaged file)"
    )


def latest_checkpoint(model_dir):
  """The newest checkpoint prefix in `model_dir` (without an index file, the highest ckpt-N)."""
  latest = tf.train.latest_checkpoint(model_dir)
  if latest or not tf.io.gfile.isdir(model_dir):
    return latest
  numbered = _numbered_checkpoints(model_dir)
  return numbered[0] if numbered else None


def _numbered_checkpoints(model_dir):
  pattern = re.compile(rf"^{CHECKPOINT_NAME}-(\d+)\.index$")
  steps = [int(m.group(1)) for m in map(pattern.match, tf.io.gfile.listdir(model_dir)) if m]
  return [os.path.join(model_dir, f"{CHECKPOINT_NAME}-{step}") for step in sorted(steps)[::-1]]


def newest_first(model_dir):
  """The checkpoint prefixes of `model_dir` in the index file's order, else by N, newest first."""
  if not tf.io.gfile.isdir(model_dir):
    return []
  state = tf.train.get_checkpoint_state(model_dir)
  if state and state.model_checkpoint_path:
    paths = [state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)]
    return list(dict.fromkeys(paths))
  return _numbered_checkpoints(model_dir)


def roll_back_to(model_dir, checkpoint):
  """Makes `checkpoint` the index file's latest, forgetting later ones (their files stay): a
  CheckpointManager would otherwise delete a new checkpoint saved under one of their names first.
  """
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top

  state = tf.train.get_checkpoint_state(model_dir)
  if state is None:
    return
  # The index file holds names relative to model_dir, as CheckpointManager writes them.
  names = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
  keep = names.index(os.path.basename(checkpoint)) + 1
  state.model_checkpoint_path = os.path.basename(checkpoint)
  del state.all_model_checkpoint_paths[:]
  state.all_model_checkpoint_paths.extend(names[:keep])
  del state.all_model_checkpoint_timestamps[keep:]
  io_utils.write_atomically(
    os.path.join(model_dir, "checkpoint"), text_format.MessageToString(state)
  )


@contextlib.contextmanager
def reading_checkpoint(checkpoint):
  """TF's errors reading `checkpoint` (IndexError, DataLossError: none naming the file) as a
  one-line `CheckpointUnreadableError`.
  """
  try:
    yield
  except (tf.errors.OpError, IndexError) as e:
    raise CheckpointUnreadableError(
      f"checkpoint {checkpoint} cannot be read: {_checkpoint_fault(checkpoint, e)}"
    ) from e


def restore_newest_readable(checkpoint, model_dir):
  """(prefix restored or None, `newest_first(model_dir)`), skipping unreadable checkpoints."""
  found = newest_first(model_dir)
  for path in found:
    try:
      with reading_checkpoint(path):
        checkpoint.restore(path).assert_existing_objects_matched()
    except CheckpointUnreadableError as e:
      logging.warning("%s; trying the checkpoint saved before it", e)
      continue
    return path, found
  return None, found


def error_line(error):
  lines = str(error).strip().splitlines()
  return re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", lines[0]) if lines else type(error).__name__


def missing_file(checkpoint):
  """The first file of the checkpoint prefix `checkpoint` that is not there (its .index, a data
  shard, or "PREFIX.data-*" when it has none), else None. Reads file names only, no TF op."""
  index = checkpoint + ".index"
  data = sorted(tf.io.gfile.glob(checkpoint + ".data-*-of-*"))
  # The shard count is in every data file's name: ".data-00000-of-00002".
  shards = {int(re.search(r"-of-(\d+)$", path).group(1)) for path in data}
  missing = [index] + [f"{checkpoint}.data-{k:05d}-of-{n:05d}" for n in shards for k in range(n)]
  missing = [path for path in missing if not tf.io.gfile.exists(path)]
  if missing or not data:
    return missing[0] if missing else checkpoint + ".data-*"
  return None


def _checkpoint_fault(checkpoint, error):
  """Which file of `checkpoint` is at fault and how, from the files and TF's `error`."""
  detail = error_line(error)
  index = checkpoint + ".index"
  data = sorted(tf.io.gfile.glob(checkpoint + ".data-*-of-*"))
  missing = missing_file(checkpoint)
  if missing:
    return f"{missing} is missing"
  try:
    tf.train.load_checkpoint(checkpoint)
  except tf.errors.OpError:
    return f"{index} is truncated or corrupt ({detail})"
  name = data[0] if len(data) == 1 else checkpoint + ".data-*"
  return f"{name} is truncated or corrupt ({detail})"


def resolve_checkpoint(path):
  if not tf.io.gfile.isdir(path):
    return path
  checkpoint = latest_checkpoint(path)
  if checkpoint is None:
    raise FileNotFoundError(f"no checkpoint in {path}")
  return checkpoint


def is_tf1_checkpoint(checkpoint):
  with reading_checkpoint(checkpoint):
    names = [name for name, _ in tf.train.list_variables(checkpoint)]
  return TF1_WORD_EMBEDDINGS in names


def load_tf1_checkpoint(model, checkpoint_path, strict=True):
  """Loads a Google-BERT or T-TA-authors TF1 checkpoint into a built model: {"loaded", "ignored",
  "unexpected": names}. A mismatch is refused before anything is assigned (`match_names`).
  """
  with reading_checkpoint(checkpoint_path):
    reader = tf.train.load_checkpoint(checkpoint_path)
  wanted = model.tf1_variables()
  ignored, unexpected = match_names(
    {n: v.shape for n, v in wanted.items()},
    reader.get_variable_to_shape_map(),
    IGNORED_CHECKPOINT_VARIABLES,
    strict,
    f"cannot load {checkpoint_path} into a {model.model_type} model",
  )
  with reading_checkpoint(checkpoint_path):
    for name, var in wanted.items():
      value = reader.get_tensor(name)
      check_finite(name, value, checkpoint_path)
      var.assign(value)
  return {"loaded": list(wanted), "ignored": ignored, "unexpected": unexpected}


def match_names(wanted, found, ignored_patterns, strict, context):
  """(ignored, unexpected) names of a checkpoint's {name: shape} `found` against the model's
  `wanted`; CheckpointMismatchError naming every missing, mis-shaped and (strict) unexpected one.
  """
  missing = [n for n in wanted if n not in found]
  mis_shaped = [
    f"{n}: checkpoint {list(found[n])}, model {list(shape)}"
    for n, shape in wanted.items()
    if n in found and list(found[n]) != list(shape)
  ]
  extra = sorted(n for n in found if n not in wanted)
  ignored = [n for n in extra if any(re.search(p, n) for p in ignored_patterns)]
  unexpected = [n for n in extra if n not in ignored]
  problems = []
  if missing:
    problems.append("missing from checkpoint: " + ", ".join(missing))
  if mis_shaped:
    problems.append("shape mismatch: " + "; ".join(mis_shaped))
  if unexpected and strict:
    problems.append("unexpected in checkpoint: " + ", ".join(unexpected))
  if problems:
    raise CheckpointMismatchError(f"{context}: {' | '.join(problems)}")
  return ignored, unexpected


def untrained_pooler(config):
  """The NSP pooler the authors' graph declares (no loss trains it; their Saver needs it):
  {"bert/pooler/dense/kernel": float32 [D, D], ".../bias": [D]}, seeded as their initializer draws.
  """
  d = config.hidden_size
  kernel = tf.random.stateless_truncated_normal(
    [d, d], seed=_POOLER_SEED, stddev=config.initializer_range
  )
  return {
    "bert/pooler/dense/kernel": kernel.numpy(),
    "bert/pooler/dense/bias": np.zeros([d], np.float32),
  }


def save_tf1_checkpoint(model, checkpoint_prefix):
  """Writes `model` under its Google-BERT TF1 names (and `untrained_pooler`): the prefix."""
  arrays = {n: v.numpy() for n, v in model.tf1_variables().items()}
  arrays.update(untrained_pooler(model.config))
  return write_tf1_checkpoint(arrays, checkpoint_prefix)


def write_tf1_checkpoint(arrays, checkpoint_prefix):
  with tf.Graph().as_default():
    variables = [tf.compat.v1.Variable(np.asarray(a), name=n) for n, a in arrays.items()]
    saver = tf.compat.v1.train.Saver(variables)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return saver.save(sess, checkpoint_prefix, write_meta_graph=False)

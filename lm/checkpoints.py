# coding=utf-8
"""Checkpoint files: finding a dir's checkpoints newest first, reading one (a damaged file or a NaN
weight is one line naming it), rolling a dir back to one, and TF1 name-based checkpoints (Google
BERT's and the T-TA authors', under the names of `TransformerLM.tf1_variables()`). Low on purpose:
TensorFlow and util/ only, so the training loops and every loader can use it.
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
  """A checkpoint file is missing, truncated or corrupt; the message is one line naming it."""


class NonFiniteWeightsError(ValueError):
  """A weight holds NaN or inf: the message is one line naming the checkpoint and the variable."""


def check_finite(name, value, source):
  """Raises NonFiniteWeightsError when `value` (the weight `name` of checkpoint `source`) holds a
  NaN or an infinity.

  Every loader calls it on each weight before it is used (`load_model_dir`, `load_tf1_checkpoint`,
  `hf_checkpoint.load_weights`): such a model scores every sentence NaN, which JSON cannot hold
  and no ranking can use, and a conversion would write it on. A diverged training run or a
  damaged download gives one.
  """
  bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
  if bad:
    raise NonFiniteWeightsError(
      f"{source}: {name} holds {bad} NaN or infinite value(s) of {np.size(value)}; a model with "
      "weights that are not numbers cannot score (a diverged run, or a damaged file)"
    )


def latest_checkpoint(model_dir):
  """The newest checkpoint prefix in `model_dir`, or None.

  From the `checkpoint` index file a CheckpointManager keeps, else the
  highest-numbered ckpt-N (`save_model_dir` and `tf.train.Checkpoint.write`
  write no index file).
  """
  latest = tf.train.latest_checkpoint(model_dir)
  if latest or not tf.io.gfile.isdir(model_dir):
    return latest
  numbered = _numbered_checkpoints(model_dir)
  return numbered[0] if numbered else None


def _numbered_checkpoints(model_dir):
  """The ckpt-N prefixes of an existing `model_dir`, highest N first."""
  pattern = re.compile(rf"^{CHECKPOINT_NAME}-(\d+)\.index$")
  steps = [int(m.group(1)) for m in map(pattern.match, tf.io.gfile.listdir(model_dir)) if m]
  return [os.path.join(model_dir, f"{CHECKPOINT_NAME}-{step}") for step in sorted(steps)[::-1]]


def newest_first(model_dir):
  """The checkpoint prefixes of `model_dir`, newest first; the first is `latest_checkpoint`'s.

  The `checkpoint` index file a CheckpointManager keeps lists them in the order they were saved;
  without one, the ckpt-N go by N. A resume tries them in this order (`pretraining/training.py`).
  """
  if not tf.io.gfile.isdir(model_dir):
    return []
  state = tf.train.get_checkpoint_state(model_dir)
  if state and state.model_checkpoint_path:
    paths = [state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)]
    return list(dict.fromkeys(paths))
  return _numbered_checkpoints(model_dir)


def roll_back_to(model_dir, checkpoint):
  """Makes `checkpoint` the latest of the index file, forgetting the checkpoints saved after it.

  For a resume that had to skip unreadable newer checkpoints: a CheckpointManager made afterwards
  must not list them, or when it saves again under one of their names it keeps that name in its
  old place among the oldest and deletes the new checkpoint first. Their files stay where they
  are (the next save of the same step replaces them). Without an index file nothing lists them.
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
  """Turns TensorFlow's errors while reading `checkpoint` into a `CheckpointUnreadableError`.

  TF reports a truncated data file as an IndexError ("Read less bytes than requested"), a
  corrupt one as a DataLossError and a bad or missing file as an OpError, none of them naming
  the file; the error names it, and what is wrong with it, in one line.
  """
  try:
    yield
  except (tf.errors.OpError, IndexError) as e:
    raise CheckpointUnreadableError(
      f"checkpoint {checkpoint} cannot be read: {_checkpoint_fault(checkpoint, e)}"
    ) from e


def restore_newest_readable(checkpoint, model_dir):
  """Restores `checkpoint` (a tf.train.Checkpoint whose objects must all be in the file) from the
  newest checkpoint of `model_dir` that can be read, skipping each that cannot with a warning.

  Returns:
    (the prefix restored, or None when none could be; `newest_first(model_dir)`, newest first).
  """
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
  """The first line of a TensorFlow error's message, without the op's "{{function_node ...}}"."""
  lines = str(error).strip().splitlines()
  return re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", lines[0]) if lines else type(error).__name__


def _checkpoint_fault(checkpoint, error):
  """Which file of `checkpoint` is at fault and how, judged from the files and TF's `error`."""
  detail = error_line(error)
  index = checkpoint + ".index"
  data = sorted(tf.io.gfile.glob(checkpoint + ".data-*-of-*"))
  # The shard count is in every data file's name: ".data-00000-of-00002".
  shards = {int(re.search(r"-of-(\d+)$", path).group(1)) for path in data}
  missing = [index] + [f"{checkpoint}.data-{k:05d}-of-{n:05d}" for n in shards for k in range(n)]
  missing = [path for path in missing if not tf.io.gfile.exists(path)]
  if missing or not data:
    return f"{missing[0] if missing else checkpoint + '.data-*'} is missing"
  try:
    tf.train.load_checkpoint(checkpoint)
  except tf.errors.OpError:
    return f"{index} is truncated or corrupt ({detail})"
  name = data[0] if len(data) == 1 else checkpoint + ".data-*"
  return f"{name} is truncated or corrupt ({detail})"


def resolve_checkpoint(path):
  """A checkpoint prefix from a model dir (its latest) or a prefix itself."""
  if not tf.io.gfile.isdir(path):
    return path
  checkpoint = latest_checkpoint(path)
  if checkpoint is None:
    raise FileNotFoundError(f"no checkpoint in {path}")
  return checkpoint


def is_tf1_checkpoint(checkpoint):
  """Whether a checkpoint prefix holds TF1 (Google BERT / T-TA) names."""
  with reading_checkpoint(checkpoint):
    names = [name for name, _ in tf.train.list_variables(checkpoint)]
  return TF1_WORD_EMBEDDINGS in names


def load_tf1_checkpoint(model, checkpoint_path, strict=True):
  """Loads a Google-BERT or T-TA-authors TF1 checkpoint into `model`.

  Every model variable must be found with the right shape; otherwise nothing
  is assigned and the error lists every missing and mis-shaped name.

  Args:
    model: a built `TransformerLM`.
    checkpoint_path: checkpoint prefix or directory.
    strict: if True, checkpoint variables that are neither used nor in
      IGNORED_CHECKPOINT_VARIABLES are an error too; if False they are only
      reported.

  Returns:
    dict with "loaded", "ignored" and "unexpected" lists of names.

  Raises:
    CheckpointMismatchError: naming every offending variable.
    CheckpointUnreadableError: a file of the checkpoint is missing, truncated or corrupt.
    NonFiniteWeightsError: naming the first variable (in the model's order) with a NaN or inf;
      the model is then partly assigned, and not to be used.
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
  """Checks a checkpoint's tensors against a model's, by name and shape, before any is assigned.

  Args:
    wanted: {name: shape} of every model variable, in the checkpoint's naming and layout.
    found: {name: shape} of every tensor of the checkpoint.
    ignored_patterns: regexes of checkpoint names the model does not use (optimizer slots,
      the NSP pooler and head).
    strict: whether a checkpoint name neither wanted nor ignored is an error.
    context: the start of the error message (which checkpoint, which model).

  Returns:
    (ignored, unexpected): the sorted checkpoint names not loaded.

  Raises:
    CheckpointMismatchError: naming every missing, mis-shaped (with both shapes) and, when
      strict, unexpected name.
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
  """The NSP pooler `bert/pooler/dense` at a fixed, seeded initialisation.

  The authors' BertModel (joongbo/tta modeling.py) declares this pooler, but
  no loss of theirs reaches it, so their checkpoints hold it untrained, and
  their scripts' `tf.train.Saver().restore` fails without it. Our models have
  none, so we write what theirs holds: the kernel drawn as their
  initializer draws it (truncated normal, stddev initializer_range, redrawn
  beyond 2 stddev), from a fixed seed so that a saved file is reproducible,
  and the bias zeros. A converted Google BERT loses its trained pooler this
  way (`load_tf1_checkpoint` ignores it); nothing of ours reads it.

  Args:
    config: `modeling.TTAConfig`.

  Returns:
    {"bert/pooler/dense/kernel": float32 [D, D], "bert/pooler/dense/bias":
    float32 [D]} of numpy arrays.
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
  """Writes `model`'s variables under their Google-BERT TF1 names.

  Also writes `untrained_pooler`, which the authors' graph declares.

  Returns:
    The path prefix written (loadable by `load_tf1_checkpoint` and by the
    authors' and Google's TF1 BERT code).
  """
  arrays = {n: v.numpy() for n, v in model.tf1_variables().items()}
  arrays.update(untrained_pooler(model.config))
  return write_tf1_checkpoint(arrays, checkpoint_prefix)


def write_tf1_checkpoint(arrays, checkpoint_prefix):
  """Writes a name-keyed dict of numpy arrays as a TF1 name-based checkpoint."""
  with tf.Graph().as_default():
    variables = [tf.compat.v1.Variable(np.asarray(a), name=n) for n, a in arrays.items()]
    saver = tf.compat.v1.train.Saver(variables)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return saver.save(sess, checkpoint_prefix, write_meta_graph=False)

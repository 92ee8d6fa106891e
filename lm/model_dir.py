# coding=utf-8
"""The model directory: the one place that reads and writes a model on disk (docs/DESIGN.md §5.1).

config.json (`modeling.TTAConfig` with model_type, output_layer, do_lower_case, normalization),
vocab.txt and `tf.train.Checkpoint` files whose model object is "model". Also the other ways a
model arrives on disk: Google BERT release dirs and TF1 name-based checkpoints of Google BERT and
the T-TA authors, under the names of `TransformerLM.tf1_variables()`.
"""

import contextlib
import copy
import dataclasses
import gc
import hashlib
import os
import re

from absl import logging
import numpy as np
import tensorflow as tf

import kinds
import modeling
import tokenization
from util import cli
from util import io_utils

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
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
_TF1_WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"
# Seed of the untrained pooler that save_tf1_checkpoint writes.
_POOLER_SEED = (2020, 0)


class CheckpointMismatchError(ValueError):
  pass


class CheckpointUnreadableError(ValueError):
  """A checkpoint file is missing, truncated or corrupt; the message is one line naming it."""


# ------------------------------------------------------------ files and paths


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


def checkpoints(model_dir):
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
  checkpoint = latest_checkpoint(model_dir)
  files = {}
  if checkpoint:
    for path in sorted(tf.io.gfile.glob(checkpoint + ".*")):
      files[os.path.basename(path)] = [os.path.getsize(path), os.stat(path).st_mtime_ns]
  return {"path": model_dir, "sha256": digests, "checkpoint": files}


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
    (the prefix restored, or None when none could be; `checkpoints(model_dir)`, newest first).
  """
  found = checkpoints(model_dir)
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


# ----------------------------------------------------------- our model dirs


def load_model_dir(model_dir, checkpoint=None):
  """Loads a model dir: (model, tokenizer).

  Args:
    model_dir: str.
    checkpoint: a specific checkpoint prefix; default the latest one.

  Raises:
    ValueError / FileNotFoundError naming the missing or mismatched piece.
  """
  config = read_config(model_dir)
  vocab_file = vocab_path(model_dir)
  if not tf.io.gfile.exists(vocab_file):
    raise FileNotFoundError(
      f"{vocab_file} not found; a model dir needs {CONFIG_FILE}, {VOCAB_FILE} and a checkpoint"
    )
  tokenizer = tokenizer_for(config, vocab_file)
  model = modeling.build_model(config)
  checkpoint = checkpoint or resolve_checkpoint(model_dir)
  _restore_for_inference(model, checkpoint, config_path(model_dir))
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
    CheckpointMismatchError: naming `config_file`, and for a shape mismatch the variable and
      both shapes.
    CheckpointUnreadableError: a file of `checkpoint` is missing, truncated or corrupt.
  """
  tf_logger = tf.get_logger()
  level = tf_logger.level
  tf_logger.setLevel("ERROR")
  problem = None
  try:
    with reading_checkpoint(checkpoint):
      status = tf.train.Checkpoint(model=model).read(checkpoint)
    status.expect_partial()
    status.assert_existing_objects_matched()
  except CheckpointUnreadableError:
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
  raise CheckpointMismatchError(
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
  return tf.train.Checkpoint(model=model).write(os.path.join(model_dir, f"{CHECKPOINT_NAME}-0"))


def warm_start(model, init_checkpoint):
  """Loads a model dir / checkpoint's weights into a fresh model.

  Our object-based checkpoints and TF1 ones (Google BERT or T-TA names) both
  work; the optimizer is not touched. A partial match (e.g. a continuous
  head started from a softmax model: the encoder loads, the new head keeps
  its initialisation) is logged, not an error.
  """
  checkpoint = resolve_checkpoint(init_checkpoint)
  if is_tf1_checkpoint(checkpoint):
    report = load_tf1_checkpoint(model, checkpoint, strict=False)
    logging.info(
      "warm start from TF1 checkpoint %s: %d variables loaded, ignored %s, unexpected %s",
      checkpoint,
      len(report["loaded"]),
      report["ignored"],
      report["unexpected"],
    )
    return
  with reading_checkpoint(checkpoint):
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
  checkpoint = resolve_checkpoint(path)
  if is_tf1_checkpoint(checkpoint):
    with reading_checkpoint(checkpoint):
      table = tf.train.load_checkpoint(checkpoint).get_tensor(_TF1_WORD_EMBEDDINGS)
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


# ------------------------------------------------ Google BERT and TF1 files


# The sentence frame of BERT checkpoints (Google's, Hugging Face's): BERT was trained on
# [CLS] ... [SEP], whatever else its vocab holds.
BERT_BOUNDARY_TOKENS = ("[CLS]", "[SEP]")


def load_google_bert(bert_dir, do_lower_case=True):
  """Loads a Google BERT release dir (bert_config.json, vocab.txt,
  bert_model.ckpt) as model_type "bert"; returns (model, tokenizer).

  Sentences are wrapped in [CLS] ... [SEP], as BERT was trained.
  """
  return load_tf1_model(
    os.path.join(bert_dir, "bert_config.json"),
    vocab_path(bert_dir),
    os.path.join(bert_dir, "bert_model.ckpt"),
    "bert",
    do_lower_case,
    BERT_BOUNDARY_TOKENS,
  )


def load_tf1_model(
  config_file, vocab_file, checkpoint, model_type, do_lower_case=True, boundary_tokens=None
):
  """Loads a TF1 name-based checkpoint with its BERT-style config and vocab: a Google BERT
  release, or the T-TA authors' (config.layer-3.vocab-lower.sub-32k.json, their vocab,
  model.ckpt). Returns (model, tokenizer).

  Args:
    config_file: BERT's config JSON (extra keys, like the authors' "vocab_file", are kept).
    vocab_file: the vocab the checkpoint was trained with.
    checkpoint: the checkpoint prefix (e.g. DIR/model.ckpt).
    model_type: "bert" for Google's (token types), "tta" for the authors'.
    do_lower_case: how the vocab was made (BERT's "uncased" releases and the authors': True).
    boundary_tokens: the pair the model was trained with, recorded in its config; None: the
      vocab's pair.

  Raises:
    FileNotFoundError / ValueError naming the missing or mismatched piece.
  """
  for path in (config_file, vocab_file):
    if not tf.io.gfile.exists(path):  # else TF's NotFoundError, which is no OSError
      raise FileNotFoundError(f"{path} not found")
  config = modeling.TTAConfig.from_json_file(config_file)
  config.model_type = model_type
  config.do_lower_case = do_lower_case
  if boundary_tokens is not None:
    config.boundary_tokens = list(boundary_tokens)
  tokenizer = tokenizer_for(config, vocab_file)
  if tokenizer.mask_id is None:
    raise ValueError(f"vocab {vocab_file} has no [MASK] token")
  config.mask_token_id = tokenizer.mask_id
  model = modeling.build_model(config, model_type)
  report = load_tf1_checkpoint(model, checkpoint)
  logging.info(
    "loaded %s from %s (ignored: %s)",
    model_type,
    checkpoint,
    ", ".join(report["ignored"]) or "none",
  )
  return model, tokenizer


def is_tf1_checkpoint(checkpoint):
  """Whether a checkpoint prefix holds TF1 (Google BERT / T-TA) names."""
  with reading_checkpoint(checkpoint):
    names = [name for name, _ in tf.train.list_variables(checkpoint)]
  return _TF1_WORD_EMBEDDINGS in names


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
      var.assign(reader.get_tensor(name))
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


# ---------------------------------------------------------------------- conversion

# The release formats convert_checkpoint.py's --input takes (a model dir of ours needs none).
INPUT_PREFIXES = ("hf:", "bert:")


@dataclasses.dataclass
class ConversionParams:
  """Which released checkpoint to convert and where; convert_checkpoint.py makes its flags from
  the `cli.param` fields. Exactly one source: `input` (hf:DIR, bert:DIR) or `init_checkpoint`."""

  output_dir: str = cli.param("The model dir to write (must not hold a model yet).", io=cli.OUTPUT)
  input: str = cli.param(
    "hf:DIR (Hugging Face BERT) or bert:DIR (Google BERT release) to convert.", None, io=cli.INPUT
  )
  init_checkpoint: str = cli.param(
    "Instead of --input: a TF1 checkpoint prefix (e.g. DIR/model.ckpt).", None, io=cli.INPUT
  )
  bert_config_file: str = cli.param(
    "With --init_checkpoint: its BERT-style config.", None, io=cli.INPUT
  )
  vocab_file: str = cli.param(
    "With --init_checkpoint: the vocab it was trained with.", None, io=cli.INPUT
  )
  model_type: str = cli.param(
    "With --init_checkpoint: what it holds (the T-TA authors' checkpoint: tta).",
    "tta",
    kinds.MODEL_TYPES,
  )
  do_lower_case: bool = cli.param(
    "bert:DIR and --init_checkpoint: whether the vocab is uncased (default true; false for "
    "Google's cased releases). Not with hf:DIR, whose tokenizer_config.json says it.",
    None,
  )

  def __post_init__(self):
    if bool(self.input) == bool(self.init_checkpoint):
      raise ValueError("give either --input=hf:DIR|bert:DIR or --init_checkpoint")
    if self.init_checkpoint:
      if not (self.bert_config_file and self.vocab_file):
        raise ValueError("--init_checkpoint needs --bert_config_file and --vocab_file")
      return
    if not self.input.startswith(INPUT_PREFIXES):
      raise ValueError(f"--input must start with one of {INPUT_PREFIXES}, got {self.input!r}")
    if self.input.startswith("hf:") and self.do_lower_case is not None:
      raise ValueError("--do_lower_case is for bert: and TF1 inputs; hf:DIR's tokenizer says it")


def load_source(params):
  """(model, tokenizer) of the checkpoint `ConversionParams` `params` names."""
  do_lower_case = True if params.do_lower_case is None else params.do_lower_case
  if params.init_checkpoint:
    return load_tf1_model(
      params.bert_config_file,
      params.vocab_file,
      params.init_checkpoint,
      params.model_type,
      do_lower_case,
    )
  if params.input.startswith("bert:"):
    # Google's release dirs do not say whether they are cased; the flag does.
    return load_google_bert(params.input[len("bert:") :], do_lower_case)
  # hf_checkpoint reads through this module: imported here, not at the top.
  from lm import hf_checkpoint  # pylint: disable=g-import-not-at-top

  return hf_checkpoint.load_hf_bert(params.input[len("hf:") :])


def check_output_dir(output_dir):
  """Raises ValueError if output_dir already holds a model."""
  if latest_checkpoint(output_dir):
    raise ValueError(f"{output_dir} already holds a model; choose a new --output_dir")


def convert(model, tokenizer, output_dir):
  """Writes a loaded model as a model dir and checks that it reads back the same.

  Args:
    model: `modeling.TransformerLM` as a loader returned it.
    tokenizer: its `tokenization.FullTokenizer`; its lower-casing and boundary tokens are
      recorded in config.json.
    output_dir: str; must not hold a checkpoint yet.

  Returns:
    The checkpoint prefix written.

  Raises:
    ValueError: if output_dir already holds a model.
  """
  check_output_dir(output_dir)
  # Recorded even when the vocab's rule would choose the same pair: the dir then frames
  # sentences as its source did whatever the rule becomes.
  model.config.boundary_tokens = list(tokenizer.boundary_tokens)
  model.config.do_lower_case = tokenizer.do_lower_case
  prefix = save_model_dir(model, tokenizer.vocab_file, output_dir)
  again, again_tokenizer = load_model_dir(output_dir)
  if (
    weights_fingerprint(again) != weights_fingerprint(model)
    or again_tokenizer.boundary_tokens != tokenizer.boundary_tokens
  ):
    raise RuntimeError(f"{output_dir} does not read back as the model just written")
  return prefix


def convert_checkpoint(params):
  """Converts the checkpoint `ConversionParams` `params` names into `params.output_dir`.

  Returns:
    (model, tokenizer, checkpoint prefix written).

  Raises:
    ValueError / OSError: naming the unreadable source or the output dir that holds a model.
  """
  io_utils.check_outputs_apart(params)
  io_utils.check_output_path(params.output_dir, "output_dir")
  check_output_dir(params.output_dir)  # before the (slow) load
  model, tokenizer = load_source(params)
  return model, tokenizer, convert(model, tokenizer, params.output_dir)

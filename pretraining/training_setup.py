# coding=utf-8
"""What a pretraining run trains, decided before any variable exists: vocab, config (a resumed run
keeps its architecture), the records' tokenizer settings, a continuous head's frozen targets, and
the train/eval datasets.
"""

import dataclasses
import json
import os
from typing import Optional

from absl import logging
import numpy as np
import tensorflow as tf

from lm import checkpoints
from lm import model_dir
from lm import warm_start
import modeling
from pretraining import distillation
from pretraining import input_pipeline
from pretraining import pretraining_data
import tokenization


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSpec:
  """What `prepare_model` decides a run's model from: run_pretraining.py's flags of that role
  (pretraining/training_job.py's JobParams, `training_job.role`), each as its flag means."""

  # The run's directory: a resumed run's config.json and vocab.txt.
  output_dir: str
  # One of kinds.PRETRAINABLE.
  model_type: str
  # The training records' glob: their vocab.txt and data_stats.json lie beside.
  input_file: Optional[str]
  # The vocab; None: the records', else the run's own.
  vocab_file: Optional[str]
  # None: the records' data_stats.json's, else True.
  do_lower_case: Optional[bool]
  # A TTAConfig / BERT config JSON.
  bert_config_file: Optional[str]
  # {config field: value} the flags set (they win over every other source).
  config_overrides: dict
  # A NEW run's warm start (`warm_start.open_source`'s spec) and the source layers it takes.
  init_checkpoint: Optional[str]
  init_layers: Optional[list]
  # A distilling run's teacher (`distillation.open_teacher`'s spec).
  teacher: Optional[str]
  # modeling.OUTPUT_LAYERS; a continuous head's targets and inference scale.
  output_layer: str
  target_embeddings: Optional[str]
  continuous_logit_scale: float
  # Longest sentence in tokens (at most the config's max_position_embeddings).
  max_seq_length: int
  # Seed of the random targets of a synthetic continuous head and of unmatched target words.
  seed: int
  # Random ids instead of records: no vocab needed.
  synthetic_data: bool
  # Start over: a config.json in output_dir binds nothing.
  overwrite: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataSpec:
  """What `make_dataset_fn` batches: run_pretraining.py's flags of the input (JobParams',
  `training_job.role`)."""

  # Globs of the training and eval records.
  input_file: Optional[str]
  eval_file: Optional[str]
  # Global batch sizes (sentences).
  train_batch_size: int
  eval_batch_size: int
  # One of kinds.PRETRAINABLE: what the batches' targets are.
  model_type: str
  max_seq_length: int
  # Length bucket boundaries (None: the pipeline's), or every batch padded to max_seq_length.
  bucket_boundaries: Optional[list]
  pad_to_max_seq_length: bool
  # Seed of the data order and the biLM masks; the biLM masking rate.
  seed: int
  mlm_probability: float
  # Random ids of this mean length instead of records.
  synthetic_data: bool
  synthetic_length: int
  # Eval batches per evaluation (0: the whole eval file).
  max_eval_steps: int


@dataclasses.dataclass
class ModelSetup:
  """What a run trains. vocab_file and vocab are None for synthetic data without one; target_table
  is float32 [V, E] for a NEW continuous head only (a resumed run restores it); init_source and
  init_layers: a NEW run's warm start (`warm_start.load`), the source layer of each of ours;
  teacher: --teacher's `warm_start.Source`, checked (pretraining/distillation.py).
  """

  config: modeling.TTAConfig
  vocab_file: str
  vocab: dict
  target_table: np.ndarray = None
  init_source: warm_start.Source = None
  init_layers: list = None
  teacher: warm_start.Source = None

  def write_model_files(self, output_dir):
    """config.json and vocab.txt into output_dir (the chief only)."""
    tokens = None if self.vocab_file else synthetic_vocab(self.config.vocab_size)
    model_dir.write_config_and_vocab(output_dir, self.config, self.vocab_file, tokens)


def prepare_model(spec, resuming):
  """The run's `ModelSetup`; resuming: --output_dir holds a checkpoint (a warm start is then
  ignored: the run's own weights are restored)."""
  if spec.init_layers and not spec.init_checkpoint:
    raise ValueError("--init_layers picks layers of --init_checkpoint: give it too")
  source = None
  if spec.init_checkpoint and not resuming:
    source = warm_start.open_source(spec.init_checkpoint)
  teacher = None
  if spec.teacher:
    teacher = distillation.open_teacher(spec.teacher)
  vocab_file, vocab = resolve_vocab(spec, resuming, [s for s in (source, teacher) if s])
  new_continuous = spec.output_layer == "continuous" and not resuming
  targets = _pretrained_targets(spec, vocab) if new_continuous else None
  config = build_config(
    spec, vocab, target_size=None if targets is None else targets.shape[1], source=source
  )
  layers = None
  if source is not None:
    layers = warm_start.pick_layers(source, config.num_hidden_layers, spec.init_layers)
  if teacher is not None:
    distillation.check_teacher(teacher, config, spec.max_seq_length, vocab, _casing_origin(spec))
  if new_continuous and targets is None:
    # --synthetic_data without --target_embeddings (benchmarking only).
    targets = (
      np.random.RandomState(spec.seed)
      .normal(size=(config.vocab_size, config.hidden_size))
      .astype(np.float32)
    )
  return ModelSetup(config, vocab_file, vocab, targets, source, layers, teacher)


def _data_dir_stats(input_file):
  if not input_file:
    return {}
  path = os.path.join(os.path.dirname(input_file), pretraining_data.STATS_FILE)
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      return json.load(f)
  return {}


def resolve_vocab(spec, resuming=False, sources=()):
  """(vocab_file, OrderedDict token -> id): --vocab_file, the data dir's, or output_dir's; a resumed
  run's own vocab.txt first (its checkpoint's ids refer to it); then the vocab of the first of
  `sources` (`warm_start.Source`s: a warm start's, a teacher's), which any other must equal.
  (None, None) for synthetic data without one.
  """
  own = model_dir.vocab_path(spec.output_dir)
  beside = model_dir.vocab_path(os.path.dirname(spec.input_file)) if spec.input_file else None
  candidates = [own] if resuming else []
  candidates.append(spec.vocab_file)
  candidates.extend([beside, own])
  candidates.extend(source.vocab_file for source in sources)
  for path in candidates:
    if path and tf.io.gfile.exists(path):
      vocab = tokenization.load_vocab(path)
      if (
        resuming
        and spec.vocab_file
        and path == own
        and (list(tokenization.load_vocab(spec.vocab_file)) != list(vocab))
      ):
        raise ValueError(
          f"--vocab_file {spec.vocab_file} differs from {own} of the run being resumed"
        )
      if (
        path == spec.vocab_file
        and beside
        and tf.io.gfile.exists(beside)
        and list(tokenization.load_vocab(beside)) != list(vocab)
      ):
        # The records hold ids of the vocab they were made with (create_pretraining_data.py writes
        # it beside them): another vocab trained on wrong tokens in silence, or, larger ids, ended
        # in an assertion's traceback at the first step.
        raise ValueError(
          f"--vocab_file {spec.vocab_file} differs from {beside}, the vocab the records of "
          f"--input_file were made with: give --vocab_file={beside} or leave the flag out"
        )
      for source in sources:
        warm_start.check_vocab(source, path, vocab)
      return path, vocab
  if spec.vocab_file:
    raise FileNotFoundError(f"--vocab_file {spec.vocab_file} not found")
  if spec.synthetic_data:
    return None, None
  raise FileNotFoundError(
    "no vocab: give --vocab_file, or put vocab.txt beside --input_file "
    f"({spec.input_file}) or in --output_dir ({spec.output_dir})"
  )


def _resumed_config(output_dir):
  """The config.json of a run to resume, or None: only a dir with a checkpoint binds the
  architecture (the chief writes config.json before any checkpoint).
  """
  if checkpoints.latest_checkpoint(output_dir) and tf.io.gfile.exists(
    model_dir.config_path(output_dir)
  ):
    return model_dir.read_config(output_dir)
  return None


def build_config(spec, vocab, target_size=None, source=None):
  """output_dir/config.json or --bert_config_file, then a warm start's `source` (the fields they
  and the flags leave out), then --config_json and the size flags; ValueError naming each
  architecture field that differs from a resumed run's, or one that contradicts the source.
  """
  # --overwrite: the config.json there is of the run this one replaces.
  existing = None if spec.overwrite else _resumed_config(spec.output_dir)
  given = {}
  if spec.bert_config_file:
    given = modeling.TTAConfig.from_json_file(spec.bert_config_file).to_dict()
    fields = dict(given)
  elif existing is not None:
    fields = existing.to_dict()
  else:
    fields = {"vocab_size": len(vocab) if vocab else 30000}
  if source is not None:
    given.update(spec.config_overrides)
    fields.update(warm_start.config_fields(source, given, spec.init_layers))
  fields.update(spec.config_overrides)
  if vocab is not None and "vocab_size" not in spec.config_overrides:
    fields["vocab_size"] = len(vocab)
  if vocab is not None and "[MASK]" in vocab:
    fields["mask_token_id"] = vocab["[MASK]"]
  fields.update(_head_fields(spec, target_size))
  fields.update(_text_fields(spec, fields))
  if source is not None:
    warm_start.check_casing(source, fields["do_lower_case"], _casing_origin(spec))
  config = modeling.TTAConfig.from_dict(fields)
  if vocab is not None and config.vocab_size != len(vocab):
    raise ValueError(
      f"config vocab_size {config.vocab_size:d} != {len(vocab)} tokens in the vocab file"
    )
  if spec.max_seq_length > config.max_position_embeddings:
    raise ValueError(
      f"--max_seq_length {spec.max_seq_length:d} > max_position_embeddings "
      f"{config.max_position_embeddings:d}"
    )
  if existing is not None:
    _check_same_architecture(existing, config, spec.output_dir)
  return config


def _head_fields(spec, target_size):
  fields = {"model_type": spec.model_type, "output_layer": spec.output_layer}
  if spec.output_layer == "continuous":
    fields["continuous_logit_scale"] = spec.continuous_logit_scale
    if target_size is not None:
      fields["target_embedding_size"] = target_size
  else:
    fields["target_embedding_size"] = None
  return fields


def _text_fields(spec, fields):
  """The records' do_lower_case and normalization travel with the model (--do_lower_case wins)."""
  data_args = _data_dir_stats(spec.input_file).get("args", {})
  do_lower_case = spec.do_lower_case
  if do_lower_case is None:
    do_lower_case = data_args.get("do_lower_case", fields.get("do_lower_case", True))
  text = {"do_lower_case": bool(do_lower_case)}
  if data_args.get("normalization"):
    text["normalization"] = data_args["normalization"]
  return text


def _casing_origin(spec):
  """What decided a run's do_lower_case (`_text_fields`), for a message."""
  if spec.do_lower_case is not None:
    return "--do_lower_case"
  if "do_lower_case" in _data_dir_stats(spec.input_file).get("args", {}):
    return "the records' data_stats.json"
  return "the default"


def _check_same_architecture(existing, config, output_dir):
  old, new = existing.to_dict(), config.to_dict()
  if new.get("target_embedding_size") is None and (config.output_layer == "continuous"):
    new["target_embedding_size"] = old.get("target_embedding_size")
    config.target_embedding_size = old.get("target_embedding_size")
  diffs = [
    f"{k}: {old.get(k)!r} in {model_dir.config_path(output_dir)}, {new.get(k)!r} now"
    for k in modeling.TTAConfig.field_names("architecture")
    if old.get(k) != new.get(k)
  ]
  if diffs:
    raise ValueError(
      f"--output_dir {output_dir} belongs to a different model ({'; '.join(diffs)}); "
      "use a new --output_dir"
    )


def synthetic_vocab(vocab_size):
  tokens = list(tokenization.SPECIAL_TOKENS)
  return tokens + [f"tok{i}" for i in range(len(tokens), vocab_size)]


# ------------------------------------------------------ target embeddings


def _pretrained_targets(spec, vocab):
  if spec.synthetic_data and not spec.target_embeddings:
    return None
  if not spec.target_embeddings:
    raise ValueError(
      "--output_layer=continuous needs --target_embeddings "
      "(a word-vector file or a trained model dir)"
    )
  if vocab is None:
    raise ValueError("--target_embeddings needs a vocab file")
  table, info = load_target_embeddings(spec.target_embeddings, vocab, seed=spec.seed)
  logging.info("target embeddings: %s", info)
  return table


def load_target_embeddings(path, vocab, seed=0):
  """The frozen targets of a continuous head: (float32 [V, E], info dict of coverage counts).

  path: a word2vec/fastText text file, or a model dir / checkpoint whose word embeddings are taken
  (its vocab.txt must equal ours). A text file's vectors match a token exactly, then lower-cased,
  then "##piece" as "piece"; the rest get a seeded random unit vector: a zero target would give a
  constant loss and no gradient.
  """
  if tf.io.gfile.isdir(path) or tf.io.gfile.exists(path + ".index"):
    table, checkpoint = model_dir.load_word_embeddings(path, vocab)
    return table, {
      "source": checkpoint,
      "vocab_size": len(vocab),
      "dim": int(table.shape[1]),
      "random": 0,
    }
  vectors, dim = _read_word_vectors(path)
  rng = np.random.RandomState(seed)
  table = rng.normal(size=(len(vocab), dim)).astype(np.float32)
  table /= np.linalg.norm(table, axis=-1, keepdims=True)
  found = {"exact": 0, "lower": 0, "piece": 0}
  for token, index in vocab.items():
    for kind, key in (
      ("exact", token),
      ("lower", token.lower()),
      ("piece", tokenization.continued_text(token)),
    ):
      if key is not None and key in vectors:
        table[index] = vectors[key]
        found[kind] += 1
        break
  info = dict(
    found, random=len(vocab) - sum(found.values()), vocab_size=len(vocab), dim=dim, source=path
  )
  return table, info


def _read_word_vectors(path):
  """({word: float32 [E]}, E) of a word2vec/fastText text file."""
  vectors = {}
  dim = None
  with tf.io.gfile.GFile(path) as f:
    for line_number, line in enumerate(f, 1):
      parts = line.rstrip("\n").rstrip().split(" ")
      if line_number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
        continue  # "count dim" header
      if len(parts) < 2:
        continue
      if dim is None:
        dim = len(parts) - 1
      if len(parts) - 1 != dim:
        raise ValueError(f"{path}:{line_number}: {len(parts) - 1} values, expected {dim}")
      if parts[0] not in vectors:
        vectors[parts[0]] = np.asarray(parts[1:], np.float32)
  if dim is None:
    raise ValueError(f"{path}: no word vectors found")
  return vectors, dim


# --------------------------------------------------------------------- data

# Distinct batches of --synthetic_data (repeated endlessly).
_SYNTHETIC_BATCHES = 64


def synthetic_dataset(
  batch_size,
  model_type,
  mean_length,
  vocab_size,
  mask_id,
  special_ids,
  max_seq_length,
  seed,
  mlm_probability=0.15,
  num_batches=_SYNTHETIC_BATCHES,
  continuation=None,
  padded_length=None,
):
  """`make_targets`' features of random ids, lengths mean_length +- 25% (benchmarking): num_batches
  batches cached in memory and repeated, so the input costs nothing during timing. A batch is padded
  to its longest sentence, or to padded_length.
  """
  rng = np.random.RandomState(seed)
  batches = []
  low, high = max(3, int(mean_length * 0.75)), int(mean_length * 1.25)
  for index in range(num_batches):
    lengths = np.minimum(rng.randint(low, high + 1, size=batch_size), max_seq_length)
    t = padded_length or int(lengths.max())
    mask = (np.arange(t)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.randint(len(tokenization.SPECIAL_TOKENS), vocab_size, size=(batch_size, t))
    batch = input_pipeline.make_targets(
      {"input_ids": tf.constant(ids * mask, tf.int32), "input_mask": tf.constant(mask)},
      model_type,
      tf.constant([seed, index], tf.int64),
      vocab_size,
      mask_id,
      special_ids,
      mlm_probability,
      continuation,
    )
    batches.append({k: v.numpy() for k, v in batch.items()})

  def gen():
    yield from batches

  spec = {
    k: tf.TensorSpec([batch_size, None], tf.float32 if k == "target_weights" else tf.int32)
    for k in batches[0]
  }
  return tf.data.Dataset.from_generator(gen, output_signature=spec).cache().repeat().prefetch(2)


def make_dataset_fn(data, config, vocab, is_training, skip_steps=0):
  """A `distribute_datasets_from_function` dataset_fn for train or eval, past the batches of the
  first `skip_steps` steps.

  A step takes one per-replica batch for each replica, so each input pipeline skips skip_steps x
  its replicas (num_replicas_in_sync / num_input_pipelines) batches, and hands out the batches of
  one step from one length bucket (`input_pipeline.make_dataset`'s replicas_per_pipeline).
  """
  mask_id = config.mask_token_id
  specials = (
    input_pipeline.special_ids_from_vocab(vocab)
    if vocab
    else list(range(len(tokenization.SPECIAL_TOKENS)))
  )
  global_batch = data.train_batch_size if is_training else data.eval_batch_size
  continuation = tokenization.continuation_flags(vocab or synthetic_vocab(config.vocab_size))

  def dataset_fn(ctx):
    batch_size = ctx.get_per_replica_batch_size(global_batch)
    replicas = ctx.num_replicas_in_sync // ctx.num_input_pipelines
    skip_batches = skip_steps * replicas
    if data.synthetic_data:
      dataset = synthetic_dataset(
        batch_size,
        data.model_type,
        data.synthetic_length,
        config.vocab_size,
        mask_id,
        specials,
        data.max_seq_length,
        data.seed + ctx.input_pipeline_id + (0 if is_training else 7919),
        data.mlm_probability,
        continuation=continuation,
        padded_length=data.max_seq_length if data.pad_to_max_seq_length else None,
      ).skip(skip_batches)
    else:
      kwargs = {}
      if data.bucket_boundaries:
        kwargs["bucket_boundaries"] = data.bucket_boundaries
      dataset = input_pipeline.make_dataset(
        data.input_file if is_training else data.eval_file,
        batch_size=batch_size,
        model_type=data.model_type,
        max_seq_length=data.max_seq_length,
        is_training=is_training,
        vocab_size=config.vocab_size,
        mask_id=mask_id,
        special_ids=specials,
        seed=data.seed,
        mlm_probability=data.mlm_probability,
        input_context=ctx,
        skip_batches=skip_batches,
        replicas_per_pipeline=replicas,
        pad_to_max_seq_length=data.pad_to_max_seq_length,
        continuation=continuation,
        **kwargs,
      )
    if is_training:
      return dataset
    # An eval pass must end: after --max_eval_steps batches, or after one
    # round of the endlessly repeated synthetic ones.
    limit = data.max_eval_steps or (_SYNTHETIC_BATCHES if data.synthetic_data else 0)
    return dataset.take(limit) if limit else dataset

  return dataset_fn

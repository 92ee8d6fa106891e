# coding=utf-8
"""What a pretraining run trains, decided before any variable exists: vocab, config (a resumed run
keeps its architecture), the records' tokenizer settings, a continuous head's frozen targets, and
the train/eval datasets.
"""

import dataclasses
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from lm import checkpoints
from lm import model_dir
from lm import warm_start
import modeling
from pretraining import distillation
from pretraining import input_pipeline
import tokenization


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


def prepare_model(params, resuming):
  """The run's `ModelSetup`; resuming: --output_dir holds a checkpoint (a warm start is then
  ignored: the run's own weights are restored)."""
  if params.init_layers and not params.init_checkpoint:
    raise ValueError("--init_layers picks layers of --init_checkpoint: give it too")
  source = None
  if params.init_checkpoint and not resuming:
    source = warm_start.open_source(params.init_checkpoint)
  teacher = None
  if distillation.settings(params):
    teacher = distillation.open_teacher(params.teacher)
  vocab_file, vocab = resolve_vocab(params, resuming, [s for s in (source, teacher) if s])
  new_continuous = params.output_layer == "continuous" and not resuming
  targets = _pretrained_targets(params, vocab) if new_continuous else None
  config = build_config(
    params, vocab, target_size=None if targets is None else targets.shape[1], source=source
  )
  layers = None
  if source is not None:
    layers = warm_start.pick_layers(source, config.num_hidden_layers, params.init_layers)
  if teacher is not None:
    distillation.check_teacher(
      teacher, config, params.max_seq_length, vocab, _casing_origin(params)
    )
  if new_continuous and targets is None:
    # --synthetic_data without --target_embeddings (benchmarking only).
    targets = (
      np.random.RandomState(params.seed)
      .normal(size=(config.vocab_size, config.hidden_size))
      .astype(np.float32)
    )
  return ModelSetup(config, vocab_file, vocab, targets, source, layers, teacher)


def _data_dir_stats(input_file):
  if not input_file:
    return {}
  path = os.path.join(os.path.dirname(input_file), "data_stats.json")
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      return json.load(f)
  return {}


def resolve_vocab(params, resuming=False, sources=()):
  """(vocab_file, OrderedDict token -> id): --vocab_file, the data dir's, or output_dir's; a resumed
  run's own vocab.txt first (its checkpoint's ids refer to it); then the vocab of the first of
  `sources` (`warm_start.Source`s: a warm start's, a teacher's), which any other must equal.
  (None, None) for synthetic data without one.
  """
  own = model_dir.vocab_path(params.output_dir)
  candidates = [own] if resuming else []
  candidates.append(params.vocab_file)
  if params.input_file:
    candidates.append(model_dir.vocab_path(os.path.dirname(params.input_file)))
  candidates.append(own)
  candidates.extend(source.vocab_file for source in sources)
  for path in candidates:
    if path and tf.io.gfile.exists(path):
      vocab = tokenization.load_vocab(path)
      if (
        resuming
        and params.vocab_file
        and path == own
        and (list(tokenization.load_vocab(params.vocab_file)) != list(vocab))
      ):
        raise ValueError(
          f"--vocab_file {params.vocab_file} differs from {own} of the run being resumed"
        )
      for source in sources:
        warm_start.check_vocab(source, path, vocab)
      return path, vocab
  if params.vocab_file:
    raise FileNotFoundError(f"--vocab_file {params.vocab_file} not found")
  if params.synthetic_data:
    return None, None
  raise FileNotFoundError(
    "no vocab: give --vocab_file, or put vocab.txt beside --input_file "
    f"({params.input_file}) or in --output_dir ({params.output_dir})"
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


def build_config(params, vocab, target_size=None, source=None):
  """output_dir/config.json or --bert_config_file, then a warm start's `source` (the fields they
  and the flags leave out), then --config_json and the size flags; ValueError naming each
  architecture field that differs from a resumed run's, or one that contradicts the source.
  """
  # --overwrite: the config.json there is of the run this one replaces.
  existing = None if params.overwrite else _resumed_config(params.output_dir)
  given = {}
  if params.bert_config_file:
    given = modeling.TTAConfig.from_json_file(params.bert_config_file).to_dict()
    fields = dict(given)
  elif existing is not None:
    fields = existing.to_dict()
  else:
    fields = {"vocab_size": len(vocab) if vocab else 30000}
  if source is not None:
    given.update(params.config_overrides)
    fields.update(warm_start.config_fields(source, given, params.init_layers))
  fields.update(params.config_overrides)
  if vocab is not None and "vocab_size" not in params.config_overrides:
    fields["vocab_size"] = len(vocab)
  if vocab is not None and "[MASK]" in vocab:
    fields["mask_token_id"] = vocab["[MASK]"]
  fields.update(_head_fields(params, target_size))
  fields.update(_text_fields(params, fields))
  if source is not None:
    warm_start.check_casing(source, fields["do_lower_case"], _casing_origin(params))
  config = modeling.TTAConfig.from_dict(fields)
  if vocab is not None and config.vocab_size != len(vocab):
    raise ValueError(
      f"config vocab_size {config.vocab_size:d} != {len(vocab)} tokens in the vocab file"
    )
  if params.max_seq_length > config.max_position_embeddings:
    raise ValueError(
      f"--max_seq_length {params.max_seq_length:d} > max_position_embeddings "
      f"{config.max_position_embeddings:d}"
    )
  if existing is not None:
    _check_same_architecture(existing, config, params.output_dir)
  return config


def _head_fields(params, target_size):
  fields = {"model_type": params.model_type, "output_layer": params.output_layer}
  if params.output_layer == "continuous":
    fields["continuous_logit_scale"] = params.continuous_logit_scale
    if target_size is not None:
      fields["target_embedding_size"] = target_size
  else:
    fields["target_embedding_size"] = None
  return fields


def _text_fields(params, fields):
  """The records' do_lower_case and normalization travel with the model (--do_lower_case wins)."""
  data_args = _data_dir_stats(params.input_file).get("args", {})
  do_lower_case = params.do_lower_case
  if do_lower_case is None:
    do_lower_case = data_args.get("do_lower_case", fields.get("do_lower_case", True))
  text = {"do_lower_case": bool(do_lower_case)}
  if data_args.get("normalization"):
    text["normalization"] = data_args["normalization"]
  return text


def _casing_origin(params):
  """What decided a run's do_lower_case (`_text_fields`), for a message."""
  if params.do_lower_case is not None:
    return "--do_lower_case"
  if "do_lower_case" in _data_dir_stats(params.input_file).get("args", {}):
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


def _pretrained_targets(params, vocab):
  if params.synthetic_data and not params.target_embeddings:
    return None
  if not params.target_embeddings:
    raise ValueError(
      "--output_layer=continuous needs --target_embeddings "
      "(a word-vector file or a trained model dir)"
    )
  if vocab is None:
    raise ValueError("--target_embeddings needs a vocab file")
  table, info = load_target_embeddings(params.target_embeddings, vocab, seed=params.seed)
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


def make_dataset_fn(params, config, vocab, is_training, skip_steps=0):
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
  global_batch = params.train_batch_size if is_training else params.eval_batch_size
  continuation = tokenization.continuation_flags(vocab or synthetic_vocab(config.vocab_size))

  def dataset_fn(ctx):
    batch_size = ctx.get_per_replica_batch_size(global_batch)
    replicas = ctx.num_replicas_in_sync // ctx.num_input_pipelines
    skip_batches = skip_steps * replicas
    if params.synthetic_data:
      dataset = synthetic_dataset(
        batch_size,
        params.model_type,
        params.synthetic_length,
        config.vocab_size,
        mask_id,
        specials,
        params.max_seq_length,
        params.seed + ctx.input_pipeline_id + (0 if is_training else 7919),
        params.mlm_probability,
        continuation=continuation,
        padded_length=params.max_seq_length if params.pad_to_max_seq_length else None,
      ).skip(skip_batches)
    else:
      kwargs = {}
      if params.bucket_boundaries:
        kwargs["bucket_boundaries"] = params.bucket_boundaries
      dataset = input_pipeline.make_dataset(
        params.input_file if is_training else params.eval_file,
        batch_size=batch_size,
        model_type=params.model_type,
        max_seq_length=params.max_seq_length,
        is_training=is_training,
        vocab_size=config.vocab_size,
        mask_id=mask_id,
        special_ids=specials,
        seed=params.seed,
        mlm_probability=params.mlm_probability,
        input_context=ctx,
        skip_batches=skip_batches,
        replicas_per_pipeline=replicas,
        pad_to_max_seq_length=params.pad_to_max_seq_length,
        continuation=continuation,
        **kwargs,
      )
    if is_training:
      return dataset
    # An eval pass must end: after --max_eval_steps batches, or after one
    # round of the endlessly repeated synthetic ones.
    limit = params.max_eval_steps or (_SYNTHETIC_BATCHES if params.synthetic_data else 0)
    return dataset.take(limit) if limit else dataset

  return dataset_fn

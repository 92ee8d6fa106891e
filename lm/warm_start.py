# coding=utf-8
"""Training's warm start from any BERT-shaped checkpoint (docs/DESIGN.md §3.5).

A source is a Hugging Face BERT (`hf:DIR`, a masked LM or a bare BertModel), a Google BERT release
(`bert:DIR`), a model dir of ours (or one of its checkpoints) or a TF1 checkpoint prefix (the
T-TA authors'). The source fixes the architecture and the vocab (`config_fields`, `check_vocab`);
`load` copies the embeddings, the chosen layers (`pick_layers`) and the masked-LM head into a fresh
model by our TF1 names, folding BERT's token-type row 0 into the positions and cutting them to
ours. Everything is checked before anything is assigned.
"""

import dataclasses
import os
import re

from absl import logging
import numpy as np
import tensorflow as tf

from lm import checkpoints
from lm import hf_checkpoint
from lm import model_dir
import modeling
import tokenization

HF_PREFIX = "hf:"
BERT_PREFIX = "bert:"
# A Google BERT release dir's files (lm/conversion.py reads them as a model).
BERT_CONFIG_FILE = "bert_config.json"
BERT_CHECKPOINT = "bert_model.ckpt"

# Config fields the source's weights fix: a run takes them as they are.
FIXED_FIELDS = (
  "vocab_size",
  "hidden_size",
  "num_attention_heads",
  "intermediate_size",
  "hidden_act",
)
# Fields a run may set otherwise: the layers (`pick_layers` checks them) and fewer positions (cut).
BOUNDED_FIELDS = ("num_hidden_layers", "max_position_embeddings")

_EMBEDDINGS = "bert/embeddings/"
_POSITIONS = _EMBEDDINGS + "position_embeddings"
_TOKEN_TYPES = _EMBEDDINGS + "token_type_embeddings"
_LAYER = re.compile(r"^bert/encoder/layer_(\d+)/")
_HEAD = modeling.HEAD_SCOPE + "/"


def _making_records(vocab_file):
  """How to make records a source's embeddings line up with: `vocab_file`, its vocab.txt."""
  which = vocab_file or "THE_VOCAB_IT_WAS_TRAINED_WITH"
  return f"make records with its vocab: create_pretraining_data.py --vocab_file={which} ..."


@dataclasses.dataclass
class Source:
  """A checkpoint to warm-start from (or a teacher's, pretraining/distillation.py); its tensors are
  read only by `load`.

  spec: as given, by `flag` (the command's flag, for messages). fields: its config fields of
  FIXED_FIELDS and BOUNDED_FIELDS, type_vocab_size, and do_lower_case where it says. where: the
  file they were read from, for messages. vocab_file: its vocab.txt (None for a bare TF1
  checkpoint). tensors: a function () -> its weights by our TF1 names, `shape(name)` (None for
  one it lacks) and `get(name)` (float32).
  """

  spec: str
  fields: dict
  where: str
  vocab_file: str
  tensors: object
  flag: str = "init_checkpoint"

  @property
  def num_layers(self):
    return self.fields["num_hidden_layers"]


def identity(spec, init_layers):
  """The warm start's part of a run identity (util/runs.py): the source's absolute path (with its
  hf:/bert: prefix) and --init_layers; reads nothing."""
  prefix = next((p for p in (HF_PREFIX, BERT_PREFIX) if spec.startswith(p)), "")
  return {"path": prefix + os.path.abspath(spec[len(prefix) :]), "init_layers": init_layers}


def open_source(spec, flag="init_checkpoint"):
  """The `Source` of --`flag` `spec`, its config and vocab read, its weights not yet;
  FileNotFoundError / ValueError in one line naming what is missing or not BERT.
  """
  return dataclasses.replace(_open(spec, flag), flag=flag)


def _open(spec, flag):
  if spec.startswith(HF_PREFIX):
    return _hf_source(spec)
  if spec.startswith(BERT_PREFIX):
    return _google_source(spec)
  if not tf.io.gfile.isdir(spec) and not tf.io.gfile.exists(spec + ".index"):
    raise FileNotFoundError(
      f"--{flag} {spec}: no model dir or checkpoint prefix there "
      "(a Hugging Face dir is hf:DIR, a Google BERT release bert:DIR)"
    )
  if tf.io.gfile.isdir(spec) and not checkpoints.latest_checkpoint(spec):
    hint = next(
      (
        f"; did you mean {prefix}{spec}?"
        for prefix, name in (
          (HF_PREFIX, hf_checkpoint.WEIGHTS_FILE),
          (BERT_PREFIX, BERT_CONFIG_FILE),
        )
        if tf.io.gfile.exists(os.path.join(spec, name))
      ),
      "",
    )
    raise FileNotFoundError(f"--{flag} {spec}: no checkpoint in it{hint}")
  checkpoint = checkpoints.resolve_checkpoint(spec)
  if checkpoints.is_tf1_checkpoint(checkpoint):
    return _tf1_source(spec, checkpoint, flag)
  return _model_dir_source(spec, checkpoint)


def _fields(config, *extra):
  return {k: getattr(config, k) for k in FIXED_FIELDS + BOUNDED_FIELDS + extra}


def _hf_source(spec):
  hf_dir = spec[len(HF_PREFIX) :]
  config = hf_checkpoint.read_config(hf_dir)
  vocab_file = hf_checkpoint.checked_vocab_file(hf_dir, config)
  fields = _fields(config, "type_vocab_size", "do_lower_case")
  return Source(
    spec,
    fields,
    os.path.join(hf_dir, hf_checkpoint.CONFIG_FILE),
    vocab_file,
    lambda: _HfTensors(hf_dir),
  )


def _google_source(spec):
  bert_dir = spec[len(BERT_PREFIX) :]
  config_file = os.path.join(bert_dir, BERT_CONFIG_FILE)
  vocab_file = model_dir.vocab_path(bert_dir)
  for path in (config_file, vocab_file):
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(
        f"{path} not found; a bert: dir holds {BERT_CONFIG_FILE}, vocab.txt and {BERT_CHECKPOINT}"
      )
  config = modeling.TTAConfig.from_json_file(config_file)
  checkpoint = os.path.join(bert_dir, BERT_CHECKPOINT)
  return Source(
    spec,
    _fields(config, "type_vocab_size"),
    config_file,
    vocab_file,
    lambda: _Tf1Tensors(checkpoint),
  )


def _model_dir_source(spec, checkpoint):
  directory = os.path.dirname(checkpoint)
  config = model_dir.read_config(directory)
  if not tf.io.gfile.exists(model_dir.vocab_path(directory)):
    raise FileNotFoundError(f"{model_dir.vocab_path(directory)} not found; a model dir needs it")
  return Source(
    spec,
    _fields(config, "type_vocab_size", "do_lower_case"),
    model_dir.config_path(directory),
    model_dir.vocab_path(directory),
    lambda: _ModelDirTensors(directory, checkpoint),
  )


def _tf1_source(spec, checkpoint, flag):
  """A bare TF1 checkpoint: its shapes give the sizes; the heads and activation it does not
  say come from the run's flags (or --bert_config_file)."""
  tensors = _Tf1Tensors(checkpoint)
  ffn = "bert/encoder/layer_0/intermediate/dense/kernel"
  missing = [n for n in (_POSITIONS, ffn) if tensors.shape(n) is None]
  if missing:
    raise checkpoints.CheckpointMismatchError(
      f"--{flag} {spec}: {checkpoint} has no {', '.join(missing)}; not a BERT-style model"
    )
  word = tensors.shape(_EMBEDDINGS + "word_embeddings")
  layers = {int(m.group(1)) for m in map(_LAYER.match, tensors.shapes) if m}
  token_types = tensors.shape(_TOKEN_TYPES)
  fields = {
    "vocab_size": word[0],
    "hidden_size": word[1],
    "intermediate_size": tensors.shape(ffn)[1],
    "num_hidden_layers": len(layers),
    "max_position_embeddings": tensors.shape(_POSITIONS)[0],
    "type_vocab_size": token_types[0] if token_types else 0,
  }
  return Source(spec, fields, f"the shapes in {checkpoint}", None, lambda: tensors)


# ------------------------------------------------------------------- config


def config_fields(source, given, init_layers):
  """The config fields a new run takes from `source`: those it fixes or bounds (and its casing)
  that `given` (the run's flags, --config_json and --bert_config_file) leaves out;
  num_hidden_layers is the count of `init_layers` when given. ValueError, in one line, for a given
  field that contradicts the source.
  """
  for name in FIXED_FIELDS:
    if name in given and name in source.fields and given[name] != source.fields[name]:
      raise ValueError(
        f"{name} {given[name]!r} (the run's flags / config) differs from {source.fields[name]!r} "
        f"of --{source.flag} {source.spec} ({source.where}): leave it out to take the source's"
      )
  positions = given.get("max_position_embeddings", 0)
  if positions > source.fields["max_position_embeddings"]:
    raise ValueError(
      f"max_position_embeddings {positions} (the run's flags / config) is more than the "
      f"{source.fields['max_position_embeddings']} of --{source.flag} {source.spec} "
      f"({source.where})"
    )
  # type_vocab_size stays ours (none): `plan` folds the source's row 0 into the positions.
  taken = {k: v for k, v in source.fields.items() if k != "type_vocab_size"}
  if init_layers:
    taken["num_hidden_layers"] = len(init_layers)
  return {k: v for k, v in taken.items() if k not in given}


def pick_layers(source, num_hidden_layers, init_layers):
  """The source layer each of ours starts from: `init_layers` (a layer may be named twice), else
  the first num_hidden_layers; ValueError for an index out of range, a count other than
  num_hidden_layers, or more layers than the source's without `init_layers`."""
  have = source.num_layers
  if init_layers is None:
    if num_hidden_layers > have:
      raise ValueError(
        f"num_hidden_layers {num_hidden_layers} is more than the {have} layers of "
        f"--{source.flag} {source.spec}: give fewer, or --init_layers naming one source layer "
        "for each of ours"
      )
    return list(range(num_hidden_layers))
  layers = list(init_layers)
  if len(layers) != num_hidden_layers:
    raise ValueError(
      f"--init_layers names {len(layers)} source layers for a model of num_hidden_layers "
      f"{num_hidden_layers}: name one for each layer"
    )
  wrong = [i for i in layers if not 0 <= i < have]
  if wrong:
    raise ValueError(
      f"--init_layers {','.join(map(str, wrong))}: --init_checkpoint {source.spec} has layers "
      f"0..{have - 1}"
    )
  return layers


def check_vocab(source, vocab_file, vocab):
  """ValueError unless the records' vocab (`vocab_file`, token -> id) is the source's: its
  embedding rows are by token id."""
  if source.vocab_file is None:
    if len(vocab) != source.fields["vocab_size"]:
      raise ValueError(
        f"{vocab_file} has {len(vocab)} tokens but --{source.flag} {source.spec} has "
        f"{source.fields['vocab_size']} embedding rows; {_making_records(None)}"
      )
    return
  theirs = list(tokenization.load_vocab(source.vocab_file))
  ours = list(vocab)
  if theirs == ours:
    return
  at = next(
    (i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs))
  )
  shown = [repr(v[at]) if at < len(v) else "its end" for v in (ours, theirs)]
  raise ValueError(
    f"the records' vocab {vocab_file} ({len(ours)} tokens) is not the vocab of --{source.flag} "
    f"{source.spec} ({source.vocab_file}, {len(theirs)}): id {at} is {shown[0]} in the records', "
    f"{shown[1]} in the source's; {_making_records(source.vocab_file)}"
  )


def check_casing(source, do_lower_case, where):
  """ValueError if the run lower-cases (`do_lower_case`, decided by `where`) unlike the source."""
  theirs = source.fields.get("do_lower_case")
  if theirs is None or bool(theirs) == bool(do_lower_case):
    return
  raise ValueError(
    f"do_lower_case {bool(do_lower_case)} ({where}) but --{source.flag} {source.spec} is "
    f"{'un' if theirs else ''}cased; {_making_records(source.vocab_file)} "
    f"--do_lower_case={str(bool(theirs)).lower()}"
  )


# ------------------------------------------------------------------ weights


class _HfTensors(object):
  """An hf: dir's tensors by our TF1 names."""

  def __init__(self, hf_dir):
    self.source = hf_dir
    self._weights = hf_checkpoint.SafetensorsWeights(hf_dir)

  def shape(self, name):
    key, transposed = self._weights.find(name)
    if key is None:
      return None
    shape = self._weights.shapes[key]
    return shape[::-1] if transposed else shape

  def get(self, name):
    key, transposed = self._weights.find(name)
    value = self._weights.get(key)
    return value.T if transposed else value


class _Tf1Tensors(object):
  """A TF1 checkpoint's tensors (Google BERT's, the T-TA authors')."""

  def __init__(self, checkpoint):
    self.source = checkpoint
    with checkpoints.reading_checkpoint(checkpoint):
      self._reader = tf.train.load_checkpoint(checkpoint)
    self.shapes = self._reader.get_variable_to_shape_map()

  def shape(self, name):
    return self.shapes.get(name)

  def get(self, name):
    with checkpoints.reading_checkpoint(self.source):
      return np.asarray(self._reader.get_tensor(name), np.float32)


class _ModelDirTensors(object):
  """A model dir's checkpoint, read into a model of its own config (its names are object paths)."""

  def __init__(self, directory, checkpoint):
    self.source = checkpoint
    model, _ = model_dir.load_model_dir(directory, checkpoint)
    self._values = {n: v.numpy() for n, v in model.tf1_variables().items()}

  def shape(self, name):
    return list(self._values[name].shape) if name in self._values else None

  def get(self, name):
    return self._values[name]


def _source_name(name, layers):
  """The source's TF1 name of our variable `name`: layer i is source layer layers[i]."""
  match = _LAYER.match(name)
  if not match:
    return name
  return f"bert/encoder/layer_{layers[int(match.group(1))]}/" + name[match.end() :]


def _group(name):
  match = _LAYER.match(name)
  if match:
    return f"layer {match.group(1)}"
  return "embeddings" if name.startswith(_EMBEDDINGS) else "head"


def plan(tensors, wanted, layers):
  """What `load` assigns: ({our TF1 name: float32 value}, [one line per variable group]).

  wanted: {our TF1 name: shape}. The positions are the source's first rows, plus its token-type
  row 0 when we have no token types (BERT's segment A, which every sentence of ours is); a head
  variable the source lacks stays fresh. CheckpointMismatchError naming every variable missing or
  mis-shaped.
  """
  values, words, problems = {}, {}, []
  folded = _TOKEN_TYPES not in wanted and tensors.shape(_TOKEN_TYPES) is not None
  for name, shape in wanted.items():
    shape = list(shape)
    group = words.setdefault(_group(name), {})
    source_name = _source_name(name, layers)
    found = tensors.shape(source_name)
    if found is None and name.startswith(_HEAD):
      group.setdefault("fresh", []).append(name[len(_HEAD) :])
      continue
    if found is None:
      problems.append(f"{source_name} missing")
      continue
    found = list(found)
    if name == _POSITIONS and found[1:] == shape[1:] and found[0] >= shape[0]:
      value = tensors.get(source_name)[: shape[0]]
      if found[0] > shape[0]:
        group.setdefault("cut", []).append(f"positions {found[0]} -> {shape[0]}")
      if folded:
        value = value + tensors.get(_TOKEN_TYPES)[0]
        group.setdefault("folded", []).append("token-type row 0 into the positions")
      if found[0] == shape[0] and not folded:
        group.setdefault("copied", []).append(name)
      values[name] = value
      continue
    if found != shape:
      problems.append(f"{source_name}: source {found}, ours {shape}")
      continue
    values[name] = tensors.get(source_name)
    group.setdefault("copied", []).append(name)
  if problems:
    raise checkpoints.CheckpointMismatchError(
      f"cannot warm-start from {tensors.source}: " + "; ".join(problems)
    )
  lines = []
  for group, by_word in words.items():
    source_layer = ""
    if group.startswith("layer "):
      source_layer = f" (source layer {layers[int(group.split()[1])]})"
    parts = []
    for word in ("copied", "folded", "cut", "fresh"):
      if word not in by_word:
        continue
      detail = "" if word == "copied" else " " + ", ".join(by_word[word])
      if word == "fresh" and "copied" not in by_word:
        detail = " (the source has no masked-LM head)"
      parts.append(word + detail)
    lines.append(f"{group}: {'; '.join(parts)}{source_layer}")
  return values, lines


def load(model, source, layers):
  """Assigns `model`'s trainable variables from `source` (`plan`), every value checked finite
  first; returns and logs the lines saying what each group got. (A continuous head's frozen
  targets are the run's --target_embeddings, set after.)"""
  tensors = source.tensors()
  variables = {n: v for n, v in model.tf1_variables().items() if v.trainable}
  values, lines = plan(tensors, {n: v.shape for n, v in variables.items()}, layers)
  for name, value in values.items():
    checkpoints.check_finite(name, value, tensors.source)
  for name, value in values.items():
    variables[name].assign(value)
  for line in lines:
    logging.info("warm start from %s: %s", source.spec, line)
  return lines

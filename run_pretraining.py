# coding=utf-8
"""Pretrains a T-TA, biLM or uniLM with a custom loop under tf.distribute.

One data set serves all three objectives (DESIGN.md §3): `input_pipeline`
turns the sentence records into `input_ids`, `input_mask`, `target_ids` and
`target_weights` [B, T], and for every model type the loss is

    sum(w * loss(head(h), target)) / sum(w)        (global sums over replicas)

with tta: target = the input token itself (the model never sees it),
bilm: dynamic MLM targets (w = 1 at the ~15% chosen positions), unilm: the
next token. The head is BERT's tied vocabulary softmax (cross-entropy), or,
with --output_layer=continuous, ELMo-C's continuous output layer (cosine
distance to a frozen pretrained embedding of the target; no V-sized softmax;
`modeling.ContinuousHead`).

The training loop (why it is not `model.fit`: Keras 3 `fit` does not run
under MultiWorkerMirroredStrategy, keras-team/keras#20585):
  * `train_loop` is one `tf.function` that runs --steps_per_loop steps, each
    under `strategy.run`; the per-replica loss is divided by the GLOBAL sum
    of target weights (an all-reduce), so the gradients that the optimizer
    sums over replicas are exactly those of the global-batch mean loss;
    `optimization.AdamWeightDecay` clips their global norm to 1.0 after that
    sum and applies BERT's warmup + linear decay.
  * Checkpoints (`tf.train.CheckpointManager`, the last --keep_checkpoint_max)
    every --save_checkpoints_steps, at the end, on SIGTERM/SIGINT and when
    --train_minutes is used up. A run restarted with the same --output_dir
    resumes from its latest checkpoint: model, optimizer slots and
    iterations (= the global step), and the input position (the number of
    batches consumed, given back to the pipeline as `skip_batches`, so the
    data order continues where it stopped).
  * config.json (with model_type, do_lower_case, output_layer) and vocab.txt
    are written beside the checkpoints first, so every run_* script takes
    --model_dir alone.
  * TensorBoard scalars in output_dir/train and output_dir/eval; a progress
    line with ETA every --log_every_steps.

Example (the paper's model; add --mixed_precision on GPUs, TPUs and CPUs with
AMX/AVX512_BF16):
  python run_pretraining.py --model_type=tta \\
    --input_file='data/train-*.tfrecord' --eval_file='data/eval-*.tfrecord' \\
    --vocab_file=data/vocab.txt --output_dir=runs/tta \\
    --num_train_steps=100000 --num_warmup_steps=5000

Multi-worker: run the same command on every worker with TF_CONFIG set and
--strategy=multi_worker; only the chief writes to --output_dir (the others
write their checkpoints to a temporary directory, as the tf.distribute
guide recommends) and all of them must see --output_dir to resume. A stop
request (signal, --train_minutes) on any worker stops all of them at the
same step (a one-scalar all-reduce per loop), so none waits forever in a
collective.

Speed on the 2-core development host (AMD EPYC, AVX2, no AVX-512/AMX; shared
with other jobs: a reference 2048x512x2048 fp32 MatMul ran at 53-65 GFLOP/s
during these runs), T-TA, vocab 30k, batch 64 x ~32 tokens, the variants
trained interleaved in one process (tokens/s and the achieved GFLOP/s of
`flops.training_flops`):

  config              precision  softmax            continuous      speed-up
  3x512, 8h, FFN 2048 fp32        350 tok/s  53 GF   705 tok/s  43 GF   2.0x
                      bf16        331 tok/s  50 GF   692 tok/s  42 GF   2.1x
  3x256, 4h, FFN 1024 fp32        795 tok/s  49 GF  2834 tok/s  43 GF   3.6x
                      bf16        731 tok/s  45 GF  2181 tok/s  33 GF   3.0x

The vocabulary softmax is 61% (paper size) / 76% (small) of the training
FLOPs; the continuous head removes it. bfloat16 does not pay on a CPU
without native bf16 (the run warns); on GPUs/TPUs use --mixed_precision.
"""

import os

# Before TensorFlow starts: its default CPU allocator hands every large
# buffer (a [2048, 30000] logits tensor is 245 MB) back to the OS and takes
# it again, page-faulting on each step; the BFC pool keeps them. Measured on
# the 2-core host (3x256, V=30k, batch 64x32): 591 -> 774 tokens/s with the
# softmax head, 1614 -> 2349 with the continuous one, system time 16 -> 4 s.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import dataclasses  # pylint: disable=g-import-not-at-top,wrong-import-position
import json
import math
import shutil
import signal
import tempfile
import threading
import time

from absl import app
from absl import flags
from absl import logging
import keras
import numpy as np
import tensorflow as tf

import flops
import input_pipeline
import modeling
import optimization
import tokenization

MODEL_TYPES = ("tta", "bilm", "unilm")
STRATEGIES = ("one_device", "mirrored", "multi_worker", "tpu")

# Architecture fields that the size flags may set; a resumed run must agree
# with the config.json already in --output_dir on all of them.
_ARCH_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size", "hidden_act",
                "max_position_embeddings", "type_vocab_size",
                "output_layer", "target_embedding_size")

# Candidate inference scales of a continuous model's cosine logits; the eval
# reports the cross-entropy under each so the best one can be kept.
LOGIT_SCALES = (1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0, 75.0,
                100.0)

_SIZE_FLAGS = ("vocab_size", "hidden_size", "num_hidden_layers",
               "num_attention_heads", "intermediate_size",
               "max_position_embeddings", "hidden_dropout_prob",
               "attention_probs_dropout_prob")


# --------------------------------------------------------------------- flags

def define_flags():
  """Defines the command-line flags (BERT's names where BERT has them)."""
  f = flags
  f.DEFINE_enum("model_type", "tta", MODEL_TYPES, "Which LM to train.")
  f.DEFINE_string("bert_config_file", None,
                  "Model config JSON (TTAConfig / BERT format).")
  f.DEFINE_string("config_json", None,
                  "Inline JSON overriding config fields, e.g. "
                  "'{\"hidden_size\": 256}'.")
  f.DEFINE_integer("vocab_size", None, "Default: the vocab file's size.")
  f.DEFINE_integer("hidden_size", None, "Default 512 (the paper's).")
  f.DEFINE_integer("num_hidden_layers", None, "Default 3.")
  f.DEFINE_integer("num_attention_heads", None, "Default 8.")
  f.DEFINE_integer("intermediate_size", None, "Default 2048.")
  f.DEFINE_integer("max_position_embeddings", None, "Default 128.")
  f.DEFINE_float("hidden_dropout_prob", None, "Default 0.1.")
  f.DEFINE_float("attention_probs_dropout_prob", None, "Default 0.1.")
  f.DEFINE_string("input_file", None,
                  "Glob of training TFRecords (create_pretraining_data.py).")
  f.DEFINE_string("eval_file", None, "Glob of evaluation TFRecords.")
  f.DEFINE_string("vocab_file", None,
                  "WordPiece vocab; default the vocab.txt beside "
                  "--input_file, or the one already in --output_dir.")
  f.DEFINE_boolean("do_lower_case", None,
                   "Stored in config.json for the tokenizer; default: from "
                   "the data dir's data_stats.json, else True.")
  f.DEFINE_string("output_dir", None, "Checkpoints, config.json, vocab.txt, "
                  "TensorBoard logs.")
  f.DEFINE_string("init_checkpoint", None,
                  "Warm start (ignored when --output_dir already holds a "
                  "checkpoint): our model dir / checkpoint, or a Google-BERT "
                  "/ T-TA TF1 checkpoint.")
  f.DEFINE_integer("train_batch_size", 64, "Global batch size (sentences).")
  f.DEFINE_integer("eval_batch_size", 64, "Global eval batch size.")
  f.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
  f.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay.")
  f.DEFINE_integer("num_train_steps", 100000, "Total optimizer steps.")
  f.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.")
  f.DEFINE_integer("max_seq_length", 128, "Longest sentence in tokens.")
  f.DEFINE_float("mlm_probability", 0.15, "biLM masking rate.")
  f.DEFINE_list("bucket_boundaries", None,
                "Sequence-length bucket boundaries for batching, e.g. "
                "16,24,32,48,64 (default: the pipeline's).")
  f.DEFINE_integer("seed", 12345, "Seed of the data order and masking.")
  f.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint interval.")
  f.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
  f.DEFINE_integer("eval_every_steps", 0,
                   "Evaluate every N steps (0: only at the end).")
  f.DEFINE_integer("max_eval_steps", 100, "Eval batches per evaluation "
                   "(0: the whole eval file).")
  f.DEFINE_integer("steps_per_loop", 20,
                   "Steps per tf.function call (cuts Python overhead).")
  f.DEFINE_integer("log_every_steps", 100, "Progress line interval.")
  f.DEFINE_enum("strategy", "one_device", STRATEGIES, "tf.distribute.")
  f.DEFINE_string("tpu", None, "TPU name/address for --strategy=tpu.")
  f.DEFINE_integer("num_cpu_devices", 0,
                   "Split the CPU into this many logical devices (for "
                   "--strategy=mirrored without GPUs; testing).")
  f.DEFINE_boolean("mixed_precision", False,
                   "bfloat16 compute, float32 variables; LayerNorm, softmax "
                   "and the loss stay float32 (1.4-1.7x faster on AMX CPUs).")
  f.DEFINE_boolean("use_xla", False, "jit_compile the forward/backward pass "
                   "(on CPU slower than TF's oneDNN kernels: measured 2.8 vs "
                   "2.3 s/step at the paper's size).")

  f.DEFINE_float("train_minutes", 0.0, "Wall-clock budget; when used up the "
                 "run saves a checkpoint and exits 0 (0: no limit).")
  f.DEFINE_enum("output_layer", "softmax", modeling.OUTPUT_LAYERS,
                "softmax: tied vocabulary softmax; continuous: ELMo-C cosine "
                "loss against --target_embeddings.")
  f.DEFINE_string("target_embeddings", None,
                  "For --output_layer=continuous: a word-vector text file "
                  "(word2vec/fastText .vec) aligned to the vocab, or a "
                  "trained model dir (its word_embeddings are used).")
  f.DEFINE_float("continuous_logit_scale", 10.0,
                 "Inference scale of a continuous model's cosine logits: "
                 "log p(v) = log_softmax(scale * cos(W h, e(v))).")
  f.DEFINE_boolean("calibrate_logit_scale", True,
                   "Continuous head: after the final eval, store in "
                   "config.json the scale (of LOGIT_SCALES) with the lowest "
                   "eval cross-entropy.")
  f.DEFINE_boolean("synthetic_data", False,
                   "Random ids instead of --input_file (benchmarking).")
  f.DEFINE_integer("synthetic_length", 32,
                   "Mean sentence length of --synthetic_data.")


# ----------------------------------------------------------------- parameters

@dataclasses.dataclass
class TrainParams:
  """Everything `run_training` needs; `params_from_flags` fills it."""
  output_dir: str
  model_type: str = "tta"
  input_file: str = None
  eval_file: str = None
  vocab_file: str = None
  do_lower_case: bool = None
  bert_config_file: str = None
  config_overrides: dict = dataclasses.field(default_factory=dict)
  init_checkpoint: str = None
  train_batch_size: int = 64
  eval_batch_size: int = 64
  learning_rate: float = 1e-4
  weight_decay_rate: float = 0.01
  num_train_steps: int = 100000
  num_warmup_steps: int = 10000
  max_seq_length: int = 128
  mlm_probability: float = 0.15
  bucket_boundaries: list = None
  seed: int = 12345
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5
  eval_every_steps: int = 0
  max_eval_steps: int = 100
  steps_per_loop: int = 20
  log_every_steps: int = 100
  strategy: str = "one_device"
  tpu: str = None
  num_cpu_devices: int = 0
  mixed_precision: bool = False
  use_xla: bool = False
  train_minutes: float = 0.0
  output_layer: str = "softmax"
  target_embeddings: str = None
  continuous_logit_scale: float = 10.0
  calibrate_logit_scale: bool = True
  synthetic_data: bool = False
  synthetic_length: int = 32
  install_signal_handlers: bool = True


def params_from_flags(flag_values):
  """Builds `TrainParams` from parsed absl flags."""
  fv = flag_values
  overrides = json.loads(fv.config_json) if fv.config_json else {}
  for name in _SIZE_FLAGS:
    if fv[name].value is not None:
      overrides[name] = fv[name].value
  if not fv.output_dir:
    raise app.UsageError("--output_dir is required")
  names = [f.name for f in dataclasses.fields(TrainParams)
           if f.name in fv and f.name not in _SIZE_FLAGS]
  params = TrainParams(output_dir=fv.output_dir,
                       config_overrides=overrides,
                       **{n: fv[n].value for n in names
                          if n not in ("output_dir",)})
  if params.bucket_boundaries:
    params.bucket_boundaries = [int(b) for b in params.bucket_boundaries]
  return params


# ------------------------------------------------------------------- losses

def weighted_cross_entropy(logits, target_ids, target_weights):
  """Sums of the weighted token cross-entropy.

  Args:
    logits: float [..., V] unnormalised scores.
    target_ids: int32 [...] targets.
    target_weights: float32 [...]; 0 drops a position, 1 counts it once.

  Returns:
    (loss_sum, weight_sum, correct_sum), float32 scalars:
    sum(w * -log softmax(logits)[target]), sum(w), sum(w * [argmax == target]).
    The mean loss is loss_sum / weight_sum -- divided by the GLOBAL weight
    sum when the batch is split over replicas.
  """
  logits = tf.cast(logits, tf.float32)
  target_weights = tf.cast(target_weights, tf.float32)
  ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target_ids,
                                                      logits=logits)
  correct = tf.cast(
      tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), target_ids),
      tf.float32)
  return (tf.reduce_sum(target_weights * ce), tf.reduce_sum(target_weights),
          tf.reduce_sum(target_weights * correct))


def weighted_cosine_distance(predicted, target_table, target_ids,
                             target_weights):
  """ELMo-C's loss: sums of w * (1 - cos(predicted, e(target))).

  Args:
    predicted: float [..., E], the continuous head's W h.
    target_table: float [V, E], the frozen target embeddings e.
    target_ids: int32 [...].
    target_weights: float32 [...].

  Returns:
    (loss_sum, weight_sum), float32 scalars. A target whose embedding is all
    zeros has cos 0 (distance 1) and gives no gradient.
  """
  target_weights = tf.cast(target_weights, tf.float32)
  targets = tf.gather(tf.cast(target_table, tf.float32), target_ids)
  cosine = tf.reduce_sum(
      tf.math.l2_normalize(tf.cast(predicted, tf.float32), axis=-1) *
      tf.math.l2_normalize(targets, axis=-1), axis=-1)
  return (tf.reduce_sum(target_weights * (1.0 - cosine)),
          tf.reduce_sum(target_weights))


def forward_loss_terms(model, features, training, gather_targets=True,
                       with_logits=False):
  """Encoder + head + loss sums for one (per-replica) batch.

  Args:
    model: `modeling.TransformerLM` (softmax or continuous head).
    features: dict of [B, T] tensors from `input_pipeline.make_dataset`.
    training: bool; dropout on.
    gather_targets: run the head on positions with weight > 0 only (a
      dynamic shape: skips padding, and 85% of the biLM's positions). Off
      under XLA/TPU, where the head runs densely and w masks.
    with_logits: continuous head only: also compute the cosine-logit
      cross-entropy and nearest-neighbour accuracy over the whole table
      (V-sized; for evaluation), and "ce_by_scale", the cross-entropy sums
      at each of LOGIT_SCALES [12].

  Returns:
    dict of float32 scalars: loss_sum, weight_sum, correct_sum, ce_sum
    (= loss_sum for the softmax head).
  """
  hidden, _ = model.encode(features, training=training)
  extra = {}
  targets = features["target_ids"]
  weights = tf.cast(features["target_weights"], tf.float32)
  if gather_targets:
    where = tf.where(weights > 0)
    hidden = tf.gather_nd(hidden, where)      # [n, D]
    targets = tf.gather_nd(targets, where)    # [n]
    weights = tf.gather_nd(weights, where)    # [n]
  head = model.lm_head
  if isinstance(head, modeling.ContinuousHead):
    loss_sum, weight_sum = weighted_cosine_distance(
        head.predict_vectors(hidden), head.target_embeddings, targets, weights)
    correct_sum = ce_sum = tf.constant(0.0)
    if with_logits:
      logits = head(hidden)
      ce_sum, _, correct_sum = weighted_cross_entropy(logits, targets,
                                                      weights)
      cosine = logits / head.config.continuous_logit_scale
      extra = {"ce_by_scale": tf.stack([
          weighted_cross_entropy(scale * cosine, targets, weights)[0]
          for scale in LOGIT_SCALES])}
  else:
    logits = head(hidden, model.embeddings.word_embeddings)
    loss_sum, weight_sum, correct_sum = weighted_cross_entropy(
        logits, targets, weights)
    ce_sum = loss_sum
  return dict(extra, loss_sum=loss_sum, weight_sum=weight_sum,
              correct_sum=correct_sum, ce_sum=ce_sum)


# ------------------------------------------------------------- distribution

def get_strategy(name, tpu=None, num_cpu_devices=0):
  """Creates the tf.distribute strategy for --strategy.

  Args:
    name: one of STRATEGIES.
    tpu: TPU name/address (strategy "tpu").
    num_cpu_devices: > 1 splits the CPU into logical devices first, so
      "mirrored" has several replicas on a CPU-only machine.
  """
  if num_cpu_devices > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * num_cpu_devices)
  # Physical, not logical, devices: listing logical ones initialises the
  # runtime, after which MultiWorkerMirroredStrategy can no longer configure
  # its collectives ("must be configured at program startup").
  gpus = tf.config.list_physical_devices("GPU")
  if name == "one_device":
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
  if name == "mirrored":
    if gpus:
      return tf.distribute.MirroredStrategy()
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
  if name == "multi_worker":
    # RING collectives work on CPU; NCCL is picked automatically on GPUs.
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=(tf.distribute.experimental.CommunicationImplementation
                        .AUTO if gpus else
                        tf.distribute.experimental.CommunicationImplementation
                        .RING))
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=options)
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  raise ValueError("unknown strategy %r; expected one of %s" %
                   (name, STRATEGIES))


def is_chief(strategy):
  """True on the one worker that writes --output_dir."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  if task_type == "chief" or task_type is None:
    return True
  has_chief = "chief" in resolver.cluster_spec().as_dict()
  return task_type == "worker" and task_id == 0 and not has_chief


def _worker_write_dir(output_dir, strategy):
  if is_chief(strategy):
    return output_dir
  resolver = strategy.cluster_resolver
  return os.path.join(tempfile.gettempdir(), "tta_worker_%s_%d_%d" %
                      (resolver.task_type, resolver.task_id, os.getpid()))


# --------------------------------------------------------- config and vocab

def _data_dir_stats(input_file):
  """data_stats.json written by create_pretraining_data.py, if found."""
  if not input_file:
    return {}
  path = os.path.join(os.path.dirname(input_file), "data_stats.json")
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      return json.load(f)
  return {}


def resolve_vocab(params, resuming=False):
  """Finds the vocab: --vocab_file, the data dir's, or output_dir's.

  Args:
    params: `TrainParams`.
    resuming: output_dir holds a checkpoint; then its vocab.txt comes first
      (the ids in the checkpoint refer to it).

  Returns:
    (vocab_file or None, OrderedDict token -> id or None). With
    --synthetic_data and no vocab file a placeholder vocab is made.
  """
  own = os.path.join(params.output_dir, "vocab.txt")
  candidates = [own] if resuming else []
  candidates.append(params.vocab_file)
  if params.input_file:
    candidates.append(os.path.join(os.path.dirname(params.input_file),
                                   "vocab.txt"))
  candidates.append(own)
  for path in candidates:
    if path and tf.io.gfile.exists(path):
      vocab = tokenization.load_vocab(path)
      if resuming and params.vocab_file and path == own and (
          list(tokenization.load_vocab(params.vocab_file)) != list(vocab)):
        raise ValueError("--vocab_file %s differs from %s of the run being "
                         "resumed" % (params.vocab_file, own))
      return path, vocab
  if params.vocab_file:
    raise FileNotFoundError("--vocab_file %s not found" % params.vocab_file)
  if params.synthetic_data:
    return None, None
  raise FileNotFoundError(
      "no vocab: give --vocab_file, or put vocab.txt beside --input_file "
      "(%s) or in --output_dir (%s)" % (params.input_file, params.output_dir))


def build_config(params, vocab, target_size=None):
  """The model config: output_dir/config.json or --bert_config_file as the
  base, then --config_json and the size flags.

  Raises:
    ValueError: when --output_dir holds a config.json whose architecture
      differs from the one the flags ask for (naming each field).
  """
  existing_path = os.path.join(params.output_dir, "config.json")
  existing = None
  # Only a dir with a checkpoint binds the architecture (and then its
  # config.json is complete: the chief writes it before any checkpoint).
  if tf.train.latest_checkpoint(params.output_dir) and tf.io.gfile.exists(
      existing_path):
    existing = modeling.TTAConfig.from_json_file(existing_path)
  if params.bert_config_file:
    fields = modeling.TTAConfig.from_json_file(
        params.bert_config_file).to_dict()
  elif existing is not None:
    fields = existing.to_dict()
  else:
    fields = {"vocab_size": len(vocab) if vocab else 30000}
  fields.update(params.config_overrides)
  if vocab is not None and "vocab_size" not in params.config_overrides:
    fields["vocab_size"] = len(vocab)
  if vocab is not None and "[MASK]" in vocab:
    fields["mask_token_id"] = vocab["[MASK]"]
  fields["model_type"] = params.model_type
  fields["output_layer"] = params.output_layer
  if params.output_layer == "continuous":
    fields["continuous_logit_scale"] = params.continuous_logit_scale
    if target_size is not None:
      fields["target_embedding_size"] = target_size
  else:
    fields["target_embedding_size"] = None
  # The tokenizer settings the records were made with travel with the model.
  data_args = _data_dir_stats(params.input_file).get("args", {})
  do_lower_case = params.do_lower_case
  if do_lower_case is None:
    do_lower_case = data_args.get("do_lower_case",
                                  fields.get("do_lower_case", True))
  fields["do_lower_case"] = bool(do_lower_case)
  if data_args.get("normalization"):
    fields["normalization"] = data_args["normalization"]
  config = modeling.TTAConfig.from_dict(fields)
  if vocab is not None and config.vocab_size != len(vocab):
    raise ValueError("config vocab_size %d != %d tokens in the vocab file" %
                     (config.vocab_size, len(vocab)))
  if params.max_seq_length > config.max_position_embeddings:
    raise ValueError("--max_seq_length %d > max_position_embeddings %d" %
                     (params.max_seq_length, config.max_position_embeddings))
  if existing is not None:
    old, new = existing.to_dict(), config.to_dict()
    if new.get("target_embedding_size") is None and (
        config.output_layer == "continuous"):
      new["target_embedding_size"] = old.get("target_embedding_size")
      config.target_embedding_size = old.get("target_embedding_size")
    diffs = ["%s: %r in %s, %r now" % (k, old.get(k), existing_path,
                                       new.get(k))
             for k in _ARCH_FIELDS + ("model_type",)
             if old.get(k) != new.get(k)]
    if diffs:
      raise ValueError("--output_dir %s belongs to a different model (%s); "
                       "use a new --output_dir" %
                       (params.output_dir, "; ".join(diffs)))
  return config


def write_model_dir_files(output_dir, config, vocab_file, vocab):
  """Writes config.json and vocab.txt so output_dir is a model dir."""
  tf.io.gfile.makedirs(output_dir)
  # Written to a temporary name and renamed: other workers and tools never
  # see a half-written file.
  path = os.path.join(output_dir, "config.json")
  config.to_json_file(path + ".tmp")
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
  dest = os.path.join(output_dir, "vocab.txt")
  if vocab_file and os.path.abspath(vocab_file) != os.path.abspath(dest):
    tf.io.gfile.copy(vocab_file, dest, overwrite=True)
  elif vocab_file is None and not tf.io.gfile.exists(dest):
    tokens = list(vocab) if vocab else synthetic_vocab(config.vocab_size)
    tokenization.write_vocab(tokens, dest)


def synthetic_vocab(vocab_size):
  """Placeholder token list for --synthetic_data without a vocab file."""
  tokens = list(tokenization.SPECIAL_TOKENS)
  return tokens + ["tok%d" % i for i in range(len(tokens), vocab_size)]


# ------------------------------------------------------ target embeddings

def load_target_embeddings(path, vocab, seed=0):
  """The frozen target table of a continuous output layer, [V, E].

  Args:
    path: a word-vector text file (word2vec/fastText text format: an
      optional "count dim" header, then "word v1 ... vE" lines), or a
      trained model dir / checkpoint whose word_embeddings are used (its
      vocab.txt, when present, must equal ours).
    vocab: OrderedDict token -> id.
    seed: seed of the random vectors given to tokens without one.

  Returns:
    (float32 [V, E] numpy array, info dict with coverage counts).

  Text files are aligned to WordPiece tokens by exact match, then
  lower-case, then for "##piece" the vector of "piece". Tokens still
  without a vector (special tokens, rare pieces) get a fixed random unit
  vector: a distinct target direction that the model can learn to predict
  (a zero vector would give a constant loss and no gradient).
  """
  if tf.io.gfile.isdir(path) or tf.io.gfile.exists(path + ".index"):
    return _embeddings_from_checkpoint(path, vocab)
  vectors = {}
  dim = None
  with tf.io.gfile.GFile(path) as f:
    for line_number, line in enumerate(f, 1):
      parts = line.rstrip("\n").rstrip().split(" ")
      if line_number == 1 and len(parts) == 2 and all(
          p.isdigit() for p in parts):
        continue  # "count dim" header
      if len(parts) < 2:
        continue
      if dim is None:
        dim = len(parts) - 1
      if len(parts) - 1 != dim:
        raise ValueError("%s:%d: %d values, expected %d" %
                         (path, line_number, len(parts) - 1, dim))
      if parts[0] not in vectors:
        vectors[parts[0]] = np.asarray(parts[1:], np.float32)
  if dim is None:
    raise ValueError("%s: no word vectors found" % path)
  rng = np.random.RandomState(seed)
  table = rng.normal(size=(len(vocab), dim)).astype(np.float32)
  table /= np.linalg.norm(table, axis=-1, keepdims=True)
  found = {"exact": 0, "lower": 0, "piece": 0}
  for token, index in vocab.items():
    for kind, key in (("exact", token), ("lower", token.lower()),
                      ("piece", token[2:] if token.startswith("##") else None)):
      if key is not None and key in vectors:
        table[index] = vectors[key]
        found[kind] += 1
        break
  info = dict(found, random=len(vocab) - sum(found.values()),
              vocab_size=len(vocab), dim=dim, source=path)
  return table, info


def _embeddings_from_checkpoint(path, vocab):
  """word_embeddings of a model dir / our checkpoint / a TF1 checkpoint."""
  checkpoint = path
  if tf.io.gfile.isdir(path):
    checkpoint = tf.train.latest_checkpoint(path)
    if checkpoint is None:
      raise FileNotFoundError("no checkpoint in %s" % path)
    other_vocab = os.path.join(path, "vocab.txt")
    if tf.io.gfile.exists(other_vocab) and (
        list(tokenization.load_vocab(other_vocab)) != list(vocab)):
      raise ValueError("%s has a different vocab from ours; its embeddings "
                       "would not line up with our token ids" % other_vocab)
  names = [n for n, _ in tf.train.list_variables(checkpoint)]
  for name in ("model/embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE",
               "bert/embeddings/word_embeddings"):
    if name in names:
      table = tf.train.load_checkpoint(checkpoint).get_tensor(name)
      break
  else:
    raise ValueError("%s has no word_embeddings variable" % checkpoint)
  if table.shape[0] != len(vocab):
    raise ValueError("%s: word_embeddings has %d rows, the vocab %d" %
                     (checkpoint, table.shape[0], len(vocab)))
  return table.astype(np.float32), {"source": checkpoint,
                                    "vocab_size": len(vocab),
                                    "dim": int(table.shape[1]),
                                    "random": 0}


def warm_start(model, init_checkpoint):
  """Loads --init_checkpoint into a fresh model (not the optimizer)."""
  checkpoint = init_checkpoint
  if tf.io.gfile.isdir(checkpoint):
    checkpoint = tf.train.latest_checkpoint(checkpoint) or checkpoint
  names = {n for n, _ in tf.train.list_variables(checkpoint)}
  if "bert/embeddings/word_embeddings" in names:
    report = modeling.load_tf1_checkpoint(model, checkpoint, strict=False)
    logging.info("warm start from TF1 checkpoint %s: %d variables loaded, "
                 "ignored %s, unexpected %s", checkpoint,
                 len(report["loaded"]), report["ignored"],
                 report["unexpected"])
    return
  status = tf.train.Checkpoint(model=model).read(checkpoint)
  status.expect_partial()
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    # e.g. a continuous head started from a softmax model: the encoder
    # loads, the new head keeps its initialisation.
    logging.warning("warm start from %s is partial: %s", checkpoint, e)
  logging.info("warm start from %s", checkpoint)


# --------------------------------------------------------------------- data

def synthetic_dataset(batch_size, model_type, mean_length, vocab_size,
                      mask_id, max_seq_length, seed, mlm_probability=0.15,
                      num_batches=64):
  """Random-id batches with lengths in mean_length +- 25% (benchmarking).

  Same features as `input_pipeline.make_dataset`; a fixed set of
  `num_batches` batches is cached in memory and repeated, so the input
  costs nothing during timing.
  """
  rng = np.random.RandomState(seed)
  batches = []
  low, high = max(3, int(mean_length * 0.75)), int(mean_length * 1.25)
  for _ in range(num_batches):
    lengths = np.minimum(rng.randint(low, high + 1, size=batch_size),
                         max_seq_length)
    t = int(lengths.max())
    mask = (np.arange(t)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.randint(7, vocab_size, size=(batch_size, t)).astype(np.int32)
    ids *= mask
    if model_type == "tta":
      inputs, targets, weights = ids, ids, mask.astype(np.float32)
    elif model_type == "unilm":
      inputs = ids
      targets = np.concatenate([ids[:, 1:], np.zeros_like(ids[:, :1])], 1)
      weights = np.concatenate([mask[:, 1:], np.zeros_like(mask[:, :1])],
                               1).astype(np.float32)
    else:
      chosen = (rng.uniform(size=ids.shape) < mlm_probability) & (mask > 0)
      inputs = np.where(chosen, mask_id, ids).astype(np.int32)
      targets, weights = ids, chosen.astype(np.float32)
    batches.append({"input_ids": inputs, "input_mask": mask,
                    "target_ids": targets.astype(np.int32),
                    "target_weights": weights})

  def gen():
    yield from batches
  spec = {k: tf.TensorSpec([batch_size, None],
                           tf.float32 if k == "target_weights" else tf.int32)
          for k in batches[0]}
  return (tf.data.Dataset.from_generator(gen, output_signature=spec)
          .cache().repeat().prefetch(2))


def make_dataset_fn(params, config, vocab, is_training, skip_batches=0):
  """A `distribute_datasets_from_function` dataset_fn for train or eval."""
  mask_id = config.mask_token_id
  specials = (input_pipeline.special_ids_from_vocab(vocab) if vocab
              else list(range(len(tokenization.SPECIAL_TOKENS))))
  global_batch = (params.train_batch_size if is_training
                  else params.eval_batch_size)

  def dataset_fn(ctx):
    batch_size = ctx.get_per_replica_batch_size(global_batch)
    if params.synthetic_data:
      return synthetic_dataset(batch_size, params.model_type,
                               params.synthetic_length, config.vocab_size,
                               mask_id, params.max_seq_length,
                               params.seed + ctx.input_pipeline_id +
                               (0 if is_training else 7919),
                               params.mlm_probability)
    kwargs = {}
    if params.bucket_boundaries:
      kwargs["bucket_boundaries"] = params.bucket_boundaries
    dataset = input_pipeline.make_dataset(
        params.input_file if is_training else params.eval_file,
        batch_size=batch_size, model_type=params.model_type,
        max_seq_length=params.max_seq_length, is_training=is_training,
        vocab_size=config.vocab_size, mask_id=mask_id, special_ids=specials,
        seed=params.seed, mlm_probability=params.mlm_probability,
        input_context=ctx, skip_batches=skip_batches, **kwargs)
    if not is_training and params.max_eval_steps:
      dataset = dataset.take(params.max_eval_steps)
    return dataset
  return dataset_fn


# ------------------------------------------------------------ stop requests

class StopRequest(object):
  """Set by SIGTERM/SIGINT; the loop saves a checkpoint and returns."""

  def __init__(self):
    self.signal = None
    self._previous = {}

  def install(self):
    if threading.current_thread() is not threading.main_thread():
      return
    for signum in (signal.SIGTERM, signal.SIGINT):
      self._previous[signum] = signal.signal(signum, self._handle)

  def _handle(self, signum, frame):
    del frame
    if self.signal is not None and signum == signal.SIGINT:
      raise KeyboardInterrupt  # a second Ctrl-C aborts without saving
    self.signal = signum
    logging.warning("received signal %d: stopping after this loop and "
                    "saving a checkpoint", signum)

  def uninstall(self):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}


# -------------------------------------------------------------------- train

def _sum_replicas(strategy, per_replica):
  return tf.nest.map_structure(
      lambda v: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None),
      per_replica)


_METRICS = ("loss_sum", "weight_sum", "correct_sum", "ce_sum", "tokens",
            "positions", "sequences")


def _batch_counts(features):
  mask = tf.cast(features["input_mask"], tf.float32)
  return {"tokens": tf.reduce_sum(mask),
          "positions": tf.cast(tf.size(mask), tf.float32),
          "sequences": tf.cast(tf.shape(mask)[0], tf.float32)}


def make_train_loop(strategy, model, optimizer, use_xla=False):
  """Returns train_loop(iterator, num_steps) -> float32 [num_steps, 7].

  Each row holds the global sums of _METRICS for one step.

  Args:
    strategy: the tf.distribute strategy the model was built under.
    model: `modeling.TransformerLM`.
    optimizer: `optimization.AdamWeightDecay` (any Keras optimizer works).
    use_xla: jit_compile the forward/backward pass (dense head, no gather).
  """
  gather = not (use_xla or isinstance(strategy, tf.distribute.TPUStrategy))
  variables = model.trainable_variables

  def compute_gradients(features, global_weight):
    with tf.GradientTape() as tape:
      terms = forward_loss_terms(model, features, training=True,
                                 gather_targets=gather)
      # Divide by the GLOBAL weight sum: the optimizer sums the replicas'
      # gradients, which then equal the gradient of the global mean loss.
      loss = terms["loss_sum"] / global_weight
    return tape.gradient(loss, variables), terms

  if use_xla:
    compute_gradients = tf.function(compute_gradients, jit_compile=True)

  def step_fn(features):
    local_weight = tf.reduce_sum(
        tf.cast(features["target_weights"], tf.float32))
    global_weight = tf.distribute.get_replica_context().all_reduce(
        tf.distribute.ReduceOp.SUM, local_weight)
    grads, terms = compute_gradients(features,
                                     tf.maximum(global_weight, 1e-6))
    # AdamWeightDecay sums over replicas, clips the global norm to 1.0, then
    # applies the update (optimization.py); we must not clip here as well.
    optimizer.apply_gradients(zip(grads, variables))
    terms.update(_batch_counts(features))
    return tf.stack([terms[k] for k in _METRICS])

  @tf.function
  def train_loop(iterator, num_steps):
    rows = tf.TensorArray(tf.float32, size=num_steps)
    for i in tf.range(num_steps):
      per_replica = strategy.run(step_fn, args=(next(iterator),))
      rows = rows.write(i, _sum_replicas(strategy, per_replica))
    return rows.stack()

  return train_loop


def make_eval_step(strategy, model, use_xla=False, element_spec=None):
  """Returns eval_step(distributed batch) -> float32 [7 + 12] global sums:
  _METRICS, then (continuous head) the cosine-logit cross-entropy sum at
  each of LOGIT_SCALES.

  element_spec: the distributed eval dataset's; as the input signature it
  makes one trace serve every bucket length and the partial last batches.
  """
  gather = not (use_xla or isinstance(strategy, tf.distribute.TPUStrategy))

  def step_fn(features):
    terms = forward_loss_terms(model, features, training=False,
                               gather_targets=gather, with_logits=True)
    terms.update(_batch_counts(features))
    by_scale = terms.get("ce_by_scale",
                         tf.zeros([len(LOGIT_SCALES)], tf.float32))
    return tf.concat([tf.stack([terms[k] for k in _METRICS]), by_scale], 0)

  @tf.function(reduce_retracing=True,
               input_signature=None if element_spec is None else [
                   element_spec])
  def eval_step(features):
    return _sum_replicas(strategy, strategy.run(step_fn, args=(features,)))
  return eval_step


def evaluate(strategy, eval_step, dist_dataset, continuous):
  """Runs the eval set; returns a dict of eval metrics.

  loss: mean CE per target (softmax) or mean cosine distance (continuous).
  perplexity: exp(mean CE) over the targets. For tta this is the
  pseudo-perplexity exp(-mean log p(x_t | x_\\t)); for bilm it is over the
  masked positions of one random masking (an estimate of the
  pseudo-perplexity); for unilm the ordinary perplexity. A continuous model
  uses its cosine logits (`modeling.ContinuousHead`) at the config's scale;
  best_logit_scale / best_scale_perplexity give the scale of LOGIT_SCALES
  with the lowest eval cross-entropy.
  """
  del strategy
  totals = np.zeros(len(_METRICS) + len(LOGIT_SCALES), np.float64)
  batches = 0
  for features in dist_dataset:
    totals += eval_step(features).numpy()
    batches += 1
  m = dict(zip(_METRICS, totals))
  weight = max(m["weight_sum"], 1e-9)
  result = {"loss": m["loss_sum"] / weight,
            "accuracy": m["correct_sum"] / weight,
            "perplexity": math.exp(min(m["ce_sum"] / weight, 700.0)),
            "batches": batches, "targets": m["weight_sum"]}
  if continuous:
    result["cosine_logit_ce"] = m["ce_sum"] / weight
    by_scale = totals[len(_METRICS):] / weight
    best = int(np.argmin(by_scale))
    result["best_logit_scale"] = LOGIT_SCALES[best]
    result["best_scale_perplexity"] = math.exp(min(by_scale[best], 700.0))
  return result


def _make_stop_agreement(strategy):
  """Under multi-worker, every worker must stop at the same step: returns a
  function flag -> whether any worker set it (a tiny all-reduce)."""
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return lambda flag: flag

  @tf.function
  def any_worker(flag):
    per_replica = strategy.run(lambda f: tf.identity(f), args=(flag,))
    # ReduceOp has no MAX: the sum of 0/1 flags is > 0 when any is set.
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica,
                           axis=None)
  return lambda flag: bool(any_worker(tf.constant(float(flag))).numpy() > 0)


def _scalar_metadata():
  # What tensorboard's tf.summary.scalar writes; built from TF's own proto so
  # that logging scalars does not need the tensorboard package installed
  # (only viewing them does).
  # pylint: disable-next=g-import-not-at-top
  from tensorflow.core.framework import summary_pb2
  metadata = summary_pb2.SummaryMetadata()
  metadata.plugin_data.plugin_name = "scalars"
  metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
  return metadata.SerializeToString()


def write_scalar(name, value, step):
  """A TensorBoard scalar into the default summary writer."""
  tf.summary.write(name, tf.constant(float(value), tf.float32), step=step,
                   metadata=_scalar_metadata())


def _format_eta(seconds):
  if seconds is None or not math.isfinite(seconds):
    return "?"
  seconds = int(seconds)
  return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def set_precision_policy(mixed_precision):
  keras.mixed_precision.set_global_policy(
      "mixed_bfloat16" if mixed_precision else "float32")


def cpu_has_native_bfloat16():
  """Whether this x86 CPU has bf16 matmul instructions (AMX or AVX512_BF16).

  Without them (e.g. AMD Zen 3, AVX2 only) TF emulates bfloat16 and mixed
  precision trains slower than float32. None when /proc/cpuinfo is absent.
  """
  try:
    with open("/proc/cpuinfo") as f:
      flags_line = next((l for l in f if l.startswith("flags")), "")
  except OSError:
    return None
  words = set(flags_line.split())
  return bool(words & {"amx_bf16", "avx512_bf16"})


def run_training(params, strategy=None):
  """Trains (or resumes) according to `params`.

  Args:
    params: `TrainParams`.
    strategy: an existing strategy (tests); default from params.strategy.

  Returns:
    dict summary: start_step, final_step, skip_batches, step_losses (the
    per-step mean losses of this run), stopped_by, throughput figures, the
    final eval (if any), checkpoint path.
  """
  strategy = strategy or get_strategy(params.strategy, params.tpu,
                                      params.num_cpu_devices)
  chief = is_chief(strategy)
  write_dir = _worker_write_dir(params.output_dir, strategy)
  tf.io.gfile.makedirs(write_dir)
  set_precision_policy(params.mixed_precision)
  if (params.mixed_precision and not tf.config.list_physical_devices("GPU")
      and params.strategy != "tpu" and cpu_has_native_bfloat16() is False):
    logging.warning("--mixed_precision on a CPU without AMX/AVX512_BF16: "
                    "bfloat16 is emulated here and trains SLOWER than "
                    "float32 (measured 0.7-0.98x the fp32 speed); leave "
                    "it off on this host")
  # input_pipeline's resume is exact only under the same global seed (tf.data
  # folds it into its shuffle seeds).
  tf.random.set_seed(params.seed)

  latest = tf.train.latest_checkpoint(params.output_dir)
  vocab_file, vocab = resolve_vocab(params, resuming=latest is not None)
  target_table = target_info = None
  random_targets = False
  if params.output_layer == "continuous" and latest is None:
    if params.synthetic_data and not params.target_embeddings:
      random_targets = True  # benchmarking only: made once the config is
    elif not params.target_embeddings:
      raise ValueError("--output_layer=continuous needs --target_embeddings "
                       "(a word-vector file or a trained model dir)")
    elif vocab is None:
      raise ValueError("--target_embeddings needs a vocab file")
    else:
      target_table, target_info = load_target_embeddings(
          params.target_embeddings, vocab, seed=params.seed)
      logging.info("target embeddings: %s", target_info)
  config = build_config(
      params, vocab,
      target_size=None if target_table is None else target_table.shape[1])
  if random_targets:
    target_table = np.random.RandomState(params.seed).normal(
        size=(config.vocab_size, config.hidden_size)).astype(np.float32)
  if chief:
    write_model_dir_files(params.output_dir, config, vocab_file, vocab)

  with strategy.scope():
    model = modeling.build_model(config, params.model_type)
    optimizer = optimization.create_optimizer(
        params.learning_rate, params.num_train_steps,
        params.num_warmup_steps, params.weight_decay_rate)
    optimizer.build(model.trainable_variables)
  # The input position: global batches consumed (one per step, but kept
  # apart from the step so the data stream is explicit in the checkpoint).
  input_batches = tf.Variable(0, dtype=tf.int64, trainable=False,
                              name="input_batches")
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                   input_batches=input_batches)
  manager = tf.train.CheckpointManager(
      checkpoint, write_dir, max_to_keep=params.keep_checkpoint_max,
      step_counter=optimizer.iterations, checkpoint_name="ckpt")

  if latest:
    checkpoint.restore(latest).assert_existing_objects_matched()
    logging.info("resumed from %s at step %d (input position %d batches)",
                 latest, int(optimizer.iterations.numpy()),
                 int(input_batches.numpy()))
  else:
    if params.init_checkpoint:
      warm_start(model, params.init_checkpoint)
    if target_table is not None:
      model.lm_head.set_target_embeddings(target_table)
  start_step = int(optimizer.iterations.numpy())
  skip_batches = int(input_batches.numpy())

  train_fn = make_dataset_fn(params, config, vocab, True, skip_batches)
  iterator = iter(strategy.distribute_datasets_from_function(train_fn))
  train_loop = make_train_loop(strategy, model, optimizer, params.use_xla)
  eval_step = None
  do_eval = bool(params.eval_file or (params.synthetic_data and
                                      params.eval_every_steps))
  if do_eval:
    eval_step = make_eval_step(
        strategy, model, params.use_xla,
        strategy.distribute_datasets_from_function(make_dataset_fn(
            params, config, vocab, False)).element_spec)

  if chief:
    train_writer = tf.summary.create_file_writer(
        os.path.join(params.output_dir, "train"))
    eval_writer = tf.summary.create_file_writer(
        os.path.join(params.output_dir, "eval"))
  else:
    train_writer = eval_writer = tf.summary.create_noop_writer()

  continuous = config.output_layer == "continuous"
  target_size = config.target_embedding_size or config.hidden_size
  any_worker = _make_stop_agreement(strategy)
  stop = StopRequest()
  if params.install_signal_handlers:
    stop.install()
  deadline = (time.time() + 60.0 * params.train_minutes
              if params.train_minutes > 0 else None)

  def run_eval(step):
    dist = strategy.distribute_datasets_from_function(
        make_dataset_fn(params, config, vocab, False))
    result = evaluate(strategy, eval_step, dist, continuous)
    logging.info("eval at step %d: %s", step,
                 " ".join("%s %.4g" % kv for kv in sorted(result.items())))
    with eval_writer.as_default():
      for name in ("loss", "perplexity", "accuracy", "cosine_logit_ce"):
        if name in result:
          write_scalar(name, result[name], step)
    return result

  def save(step, why):
    path = manager.save(checkpoint_number=step)
    logging.info("saved checkpoint for step %d (%s): %s", step, why, path)
    return path

  step = start_step
  step_losses = []
  window = np.zeros(len(_METRICS))
  window_time = window_steps = 0
  timed = {"seconds": 0.0, "steps": 0, "tokens": 0.0, "targets": 0.0,
           "flops": 0.0}
  first_loop = True
  stopped_by = "num_train_steps"
  last_saved = start_step if latest else None
  last_path = latest
  eval_result = None
  run_start = time.time()
  logging.info("training %s (%s head) from step %d to %d, %d replicas, "
               "global batch %d, %s", params.model_type, config.output_layer,
               start_step, params.num_train_steps,
               strategy.num_replicas_in_sync, params.train_batch_size,
               "bf16" if params.mixed_precision else "fp32")

  def next_boundary(step, every):
    return (step // every + 1) * every if every > 0 else float("inf")

  try:
    while step < params.num_train_steps:
      num = min(params.steps_per_loop, params.num_train_steps - step,
                next_boundary(step, params.save_checkpoints_steps) - step,
                next_boundary(step, params.log_every_steps) - step,
                next_boundary(step, params.eval_every_steps) - step
                if eval_step else float("inf"))
      num = int(max(1, num))
      t0 = time.time()
      rows = train_loop(iterator, tf.constant(num, tf.int32)).numpy()
      elapsed = time.time() - t0
      step += num
      input_batches.assign_add(num)
      for row in rows:
        step_losses.append(float(row[0] / max(row[1], 1e-9)))
      sums = rows.sum(0)
      m = dict(zip(_METRICS, sums))
      seq_length = m["positions"] / max(m["sequences"], 1.0)
      head_tokens = m["weight_sum"] if (
          not params.use_xla) else m["positions"]
      flops = flops.training_flops(config, m["tokens"], head_tokens, seq_length,
                             config.output_layer, target_size)
      if first_loop:
        first_loop = False  # includes tracing; not timed
      else:
        timed["seconds"] += elapsed
        timed["steps"] += num
        timed["tokens"] += m["tokens"]
        timed["targets"] += m["weight_sum"]
        timed["flops"] += flops
      window += sums
      window_time += elapsed
      window_steps += num
      lr = float(optimizer.learning_rate.numpy()) if hasattr(
          optimizer.learning_rate, "numpy") else float(
              optimizer.learning_rate)
      scalars = {"loss": m["loss_sum"] / max(m["weight_sum"], 1e-9),
                 "learning_rate": lr,
                 "steps_per_second": num / elapsed,
                 "tokens_per_second": m["tokens"] / elapsed,
                 "target_tokens_per_second": m["weight_sum"] / elapsed,
                 "gflops_per_second": flops / elapsed / 1e9}
      if not continuous:
        scalars["accuracy"] = m["correct_sum"] / max(m["weight_sum"], 1e-9)
      with train_writer.as_default():
        for name, value in scalars.items():
          write_scalar(name, value, step)

      if step % params.log_every_steps == 0 or step >= params.num_train_steps:
        w = dict(zip(_METRICS, window))
        rate = window_steps / max(window_time, 1e-9)
        eta = (params.num_train_steps - step) / rate if rate else None
        if deadline is not None:
          eta = min(eta, max(deadline - time.time(), 0.0))
        logging.info(
            "step %d/%d loss %.4f%s lr %.3g | %.2f steps/s %.0f tokens/s "
            "%.1f GFLOP/s | elapsed %s ETA %s", step, params.num_train_steps,
            w["loss_sum"] / max(w["weight_sum"], 1e-9),
            "" if continuous else " acc %.3f" % (
                w["correct_sum"] / max(w["weight_sum"], 1e-9)),
            lr, rate, w["tokens"] / max(window_time, 1e-9),
            flops.training_flops(config, w["tokens"],
                           w["weight_sum"] if not params.use_xla
                           else w["positions"],
                           w["positions"] / max(w["sequences"], 1.0),
                           config.output_layer, target_size)
            / max(window_time, 1e-9) / 1e9,
            _format_eta(time.time() - run_start), _format_eta(eta))
        window[:] = 0
        window_time = window_steps = 0

      if params.save_checkpoints_steps > 0 and (
          step % params.save_checkpoints_steps == 0):
        last_path, last_saved = save(step, "interval"), step
      if eval_step and params.eval_every_steps > 0 and (
          step % params.eval_every_steps == 0):
        eval_result = run_eval(step)

      want_stop = stop.signal is not None or (
          deadline is not None and time.time() >= deadline)
      if any_worker(want_stop):
        stopped_by = ("signal %d" % stop.signal if stop.signal is not None
                      else "train_minutes" if deadline is not None and
                      time.time() >= deadline else "another worker")
        logging.info("stopping at step %d (%s)", step, stopped_by)
        break
  finally:
    stop.uninstall()

  if last_saved != step:
    last_path = save(step, stopped_by if stopped_by != "num_train_steps"
                     else "final")
  if (eval_step and step >= params.num_train_steps and
      stopped_by == "num_train_steps" and (
          params.eval_every_steps <= 0 or
          step % params.eval_every_steps != 0)):
    eval_result = run_eval(step)
  if (continuous and eval_result and params.calibrate_logit_scale and
      step >= params.num_train_steps):
    # Inference turns cosines into log-probabilities with this scale; keep
    # the one that fits the eval data best (it changes the size of scores
    # and perplexities, not which token ranks first).
    config.continuous_logit_scale = eval_result["best_logit_scale"]
    logging.info("continuous_logit_scale calibrated on the eval set: %g "
                 "(perplexity %.4g)", config.continuous_logit_scale,
                 eval_result["best_scale_perplexity"])
    if chief:
      write_model_dir_files(params.output_dir, config, vocab_file, vocab)
  train_writer.flush()
  eval_writer.flush()

  seconds = max(timed["seconds"], 1e-9)
  summary = {
      "model_type": params.model_type,
      "output_layer": config.output_layer,
      "mixed_precision": params.mixed_precision,
      "use_xla": params.use_xla,
      "strategy": params.strategy,
      "replicas": strategy.num_replicas_in_sync,
      "start_step": start_step,
      "final_step": step,
      "skip_batches": skip_batches,
      "input_batches": int(input_batches.numpy()),
      "stopped_by": stopped_by,
      "checkpoint": last_path,
      "step_losses": step_losses,
      "timed_steps": timed["steps"],
      "steps_per_second": timed["steps"] / seconds,
      "tokens_per_second": float(timed["tokens"] / seconds),
      "target_tokens_per_second": float(timed["targets"] / seconds),
      "gflops_per_second": float(timed["flops"] / seconds / 1e9),
      "eval": eval_result,
      "wall_seconds": time.time() - run_start,
  }
  if chief:
    with tf.io.gfile.GFile(os.path.join(params.output_dir,
                                        "train_summary.json"), "w") as f:
      json.dump({k: v for k, v in summary.items() if k != "step_losses"}, f,
                indent=2, sort_keys=True)
  elif write_dir != params.output_dir:
    shutil.rmtree(write_dir, ignore_errors=True)
  logging.info("done: step %d, %.2f steps/s, %.0f tokens/s, %.1f GFLOP/s "
               "(stopped by %s)", step, summary["steps_per_second"],
               summary["tokens_per_second"], summary["gflops_per_second"],
               stopped_by)
  return summary


def main(argv):
  del argv
  params = params_from_flags(flags.FLAGS)
  run_training(params)


if __name__ == "__main__":
  define_flags()
  app.run(main)

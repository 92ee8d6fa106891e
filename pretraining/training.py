# coding=utf-8
"""The pretraining run of a T-TA, biLM or uniLM under tf.distribute: `train(params)`.

A custom loop, not `model.fit`: Keras 3 `fit` does not run under MultiWorkerMirroredStrategy
(keras-team/keras#20585). The loop is pretraining/training_loop.py's (docs/DESIGN.md §3.3).
"""

import contextlib
import dataclasses
import json
import math
import os
import re
import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import kinds
from lm import checkpoints
from lm import warm_start
import modeling
import optimization
from pretraining import distillation
from pretraining import input_pipeline
from pretraining import losses
from pretraining import training_loop
from pretraining import training_metrics
from pretraining import training_setup
from util import cli
from util import distribute_utils
from util import io_utils
from util import machine
from util import runs

# ----------------------------------------------------------------- parameters


# --mixed_precision's values (a bare --mixed_precision is the first) and their Keras policies.
PRECISIONS = ("bfloat16", "float16")
_POLICIES = {None: "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def _config_help(name):
  default = {f.name: f.default for f in dataclasses.fields(modeling.TTAConfig)}[name]
  return f"Default {default} (the paper's)."


def _int_list(flag):
  """The `cli.param` convert of a list flag of integers."""

  def convert(values):
    try:
      return [int(value) for value in values]
    except ValueError:
      raise ValueError(f"--{flag}: expected integers, got {','.join(values)}") from None

  return convert


def _check_warmup(values):
  """A warmup longer than the run never reaches the peak learning rate: refused by the schedule's
  own rule (`optimization.LinearWarmupLinearDecay`), not shortened (the schedule is the user's;
  BERT warms up for about a tenth of the steps)."""
  steps, warmup = values["num_train_steps"], values["num_warmup_steps"]
  if steps is None or warmup is None:
    return
  try:
    optimization.LinearWarmupLinearDecay(1.0, steps, warmup)
  except ValueError:
    raise ValueError(
      f"--num_warmup_steps={warmup} exceeds --num_train_steps={steps}: the learning rate would "
      f"never reach its peak; give --num_warmup_steps <= {steps} (a tenth: {steps // 10})"
    ) from None


def _check_init_checkpoint(spec):
  """A --init_checkpoint that names nothing a warm start can read, refused while parsing: a
  missing path, a file that is no checkpoint prefix (its .index beside it), hf:/bert: without
  their folder. A remote path is not checked."""
  scheme, _, path = spec.partition(":") if spec.startswith(("hf:", "bert:")) else ("", "", spec)
  if "://" in path:
    return
  if scheme:
    if not os.path.isdir(path):
      raise ValueError(f"{path} is not a folder")
  elif os.path.isfile(path) and not os.path.exists(path + ".index"):
    raise ValueError("a file, not a model dir or checkpoint prefix (PREFIX.index)")
  elif not os.path.exists(path) and not os.path.exists(path + ".index"):
    raise ValueError("no such model dir or checkpoint (PREFIX.index)")


@dataclasses.dataclass
class ConfigFlags:
  """run_pretraining.py's flags that set config fields (`overrides`); unset, a field comes from
  --bert_config_file, the resumed run's config.json or TTAConfig's default."""

  config_json: str = cli.param(
    "Inline JSON overriding config fields, e.g. '{\"hidden_size\": 256}'.", None
  )
  vocab_size: int = cli.param("Default: the vocab file's size.", None, lower_bound=1)
  hidden_size: int = cli.param(_config_help("hidden_size"), None, lower_bound=1)
  num_hidden_layers: int = cli.param(_config_help("num_hidden_layers"), None, lower_bound=1)
  num_attention_heads: int = cli.param(_config_help("num_attention_heads"), None, lower_bound=1)
  intermediate_size: int = cli.param(_config_help("intermediate_size"), None, lower_bound=1)
  hidden_dropout_prob: float = cli.param(_config_help("hidden_dropout_prob"), None)
  attention_probs_dropout_prob: float = cli.param(
    _config_help("attention_probs_dropout_prob"), None
  )
  max_position_embeddings: int = cli.param(
    _config_help("max_position_embeddings"), None, lower_bound=3
  )

  def overrides(self):
    """{config field: value} of --config_json and of the flags given.

    Raises:
      ValueError: --config_json is not a JSON object, or sets a field a flag sets otherwise.
    """
    try:
      overrides = json.loads(self.config_json) if self.config_json else {}
    except ValueError as e:
      raise ValueError(f"--config_json is not JSON: {e}") from None
    if not isinstance(overrides, dict):
      raise ValueError(f"--config_json is not a JSON object: {self.config_json}")
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if field.name == "config_json" or value is None:
        continue
      if field.name in overrides and overrides[field.name] != value:
        raise ValueError(
          f"--config_json sets {field.name} {overrides[field.name]} and --{field.name}={value}: "
          "give it one way"
        )
      overrides[field.name] = value
    return overrides


@dataclasses.dataclass
class TrainParams:
  """Everything `train` needs: run_pretraining.py's flags. `config_overrides` holds those of
  `config_flags` (a caller may give it directly); the fields marked `result=False` are those a
  resume may change (`run_identity`)."""

  output_dir: str = cli.param(
    "Checkpoints, config.json, vocab.txt, TensorBoard logs.", io=cli.OUTPUT
  )
  model_type: str = cli.param("Which LM to train.", "tta", kinds.PRETRAINABLE)
  input_file: str = cli.param(
    "Glob of training TFRecords (create_pretraining_data.py).", None, io=cli.INPUT
  )
  eval_file: str = cli.param("Glob of evaluation TFRecords.", None, io=cli.INPUT, result=False)
  vocab_file: str = cli.param(
    "WordPiece vocab; default the vocab.txt beside "
    "--input_file, or the one already in --output_dir.",
    None,
    io=cli.INPUT,
  )
  do_lower_case: bool = cli.param(
    "Stored in config.json for the tokenizer; default: from the data dir's "
    "data_stats.json, else True.",
    None,
  )
  bert_config_file: str = cli.param(
    "Model config JSON (TTAConfig / BERT format).", None, io=cli.INPUT
  )
  config_overrides: dict = dataclasses.field(default_factory=dict)
  # Folded into config_overrides, which the run identity holds.
  config_flags: ConfigFlags = cli.nested(ConfigFlags, result=False)
  init_checkpoint: str = cli.param(
    "Warm start (ignored when --output_dir already holds a checkpoint): hf:DIR (a Hugging Face "
    "BERT, with or without its masked-LM head), bert:DIR (a Google BERT release), our model dir "
    "or checkpoint, or a TF1 checkpoint prefix (the T-TA authors'). The architecture and vocab "
    "are the source's unless flags give them; the records must use its vocab.txt "
    "(docs/DESIGN.md §3.5).",
    None,
    io=cli.INPUT,
    result=False,  # in the run identity as `warm_start.identity`
    check=_check_init_checkpoint,
  )
  init_layers: list = cli.param(
    "With --init_checkpoint: the source layers that become ours, in order, e.g. 0,4,8 (default: "
    "its first --num_hidden_layers, which defaults to their count, else to the source's).",
    None,
    convert=_int_list("init_layers"),
    result=False,  # in the run identity as `warm_start.identity`
  )
  teacher: str = cli.param(
    "Distil into a T-TA (tta, tta_word): a biLM model dir, hf:DIR or bert:DIR with the records' "
    "vocab, whose prediction at each position from the copy with it masked (what its "
    "pseudo-log-likelihood reads) is mixed into the targets (docs/DESIGN.md §3.6).",
    None,
    io=cli.INPUT,
    result=False,  # in the run identity as `distillation.identity`
  )
  distill_temperature: float = cli.param(
    f"With --teacher: the temperature T of both distributions in its term (default "
    f"{distillation.DEFAULT_TEMPERATURE}).",
    None,
    result=False,  # in the run identity as `distillation.identity`
  )
  distill_weight: float = cli.param(
    "With --teacher: w in loss = (1 - w) CE(one-hot) + w T^2 KL(teacher^T || student^T) "
    f"(default {distillation.DEFAULT_WEIGHT}).",
    None,
    result=False,  # in the run identity as `distillation.identity`
  )
  train_batch_size: int = cli.param("Global batch size (sentences).", 64, lower_bound=1)
  eval_batch_size: int = cli.param("Global eval batch size.", 64, result=False, lower_bound=1)
  # A peak learning rate of 0 trains nothing and a negative one climbs the loss.
  learning_rate: float = cli.param("Peak learning rate.", 1e-4, check=cli.positive)
  weight_decay_rate: float = cli.param("Decoupled weight decay.", 0.01)
  num_train_steps: int = cli.param("Total optimizer steps.", 100000, result=False, lower_bound=1)
  num_warmup_steps: int = cli.param(
    "Linear warmup steps; at most --num_train_steps.", 10000, result=False, lower_bound=0
  )
  max_seq_length: int = cli.param("Longest sentence in tokens.", 128, lower_bound=3)
  loss_normalization: str = cli.param(
    "Divisor of each batch's training-loss sum: constant = train_batch_size * max_seq_length "
    "(the authors' reduce_mean over padded positions: every real token weighs the same in every "
    "batch); per_batch_tokens = the batch's real-target count (a token of a short-sentence batch "
    "weighs more). Eval and logged losses are per real target either way.",
    "constant",
    losses.LOSS_NORMALIZATIONS,
  )
  mlm_probability: float = cli.param("biLM masking rate.", 0.15)
  bucket_boundaries: list = cli.param(
    "Sequence-length bucket boundaries for batching, e.g. 16,24,32,48,64 "
    "(default: the pipeline's).",
    None,
    convert=_int_list("bucket_boundaries"),
  )
  pad_to_max_seq_length: bool = cli.param(
    "Pad every batch to --max_seq_length (one shape, partial batches dropped, also in eval) "
    "instead of bucketing by length: for TPUs, which compile each shape anew.",
    False,
    result=False,
  )
  seed: int = cli.param(
    "Seed of the data order and the biLM masks, and of weight initialisation and dropout unless "
    "--init_seed is given.",
    12345,
  )
  init_seed: int = cli.param(
    "Seed of weight initialisation and dropout (Python, NumPy, Keras and the global TF seed); "
    "default --seed. Another value trains another model on the data order and biLM masks of "
    "--seed.",
    None,
  )
  save_checkpoints_steps: int = cli.param("Checkpoint interval.", 1000, result=False, lower_bound=1)
  keep_checkpoint_max: int = cli.param("Checkpoints kept.", 5, result=False, lower_bound=1)
  eval_every_steps: int = cli.param(
    "Evaluate every N steps (0: only at the end).", 0, result=False, lower_bound=0
  )
  max_eval_steps: int = cli.param(
    "Eval batches per evaluation (0: the whole eval file).", 100, result=False, lower_bound=0
  )
  steps_per_loop: int = cli.param(
    "Steps per tf.function call (cuts Python overhead).", 20, result=False, lower_bound=1
  )
  log_every_steps: int = cli.param("Progress line interval.", 100, result=False, lower_bound=1)
  strategy: str = cli.param(
    "tf.distribute.", "one_device", distribute_utils.STRATEGIES, result=False
  )
  tpu: str = cli.param(distribute_utils.TPU_HELP, None, result=False)
  num_cpu_devices: int = cli.param(distribute_utils.NUM_CPU_DEVICES_HELP, 0, result=False)
  mixed_precision: str = cli.param(
    "Compute in bfloat16 (TPUs, AMX CPUs, GPUs from A100) or float16 (GPU tensor cores of V100 and "
    "T4, which have no bfloat16; with Keras' dynamic loss scaling); variables, LayerNorm, softmax "
    "and the loss stay float32 (docs/DESIGN.md §3.3, §6). --nomixed_precision: float32.",
    None,
    PRECISIONS,
    kind=cli.SWITCH,
  )
  max_nonfinite_steps: int = cli.param(
    "A step whose loss or gradients are not finite (NaN, inf) is skipped; this many in a row end "
    "the run at the last checkpoint saved, unsaved, and run_pretraining.py exits 3 (float16's "
    "loss-scale overflows are not counted).",
    10,
    lower_bound=1,
    result=False,
  )
  use_xla: bool = cli.param(
    "jit_compile the forward/backward pass (on CPU slower than TF's oneDNN "
    "kernels; docs/DESIGN.md §6).",
    False,
    result=False,
  )
  train_minutes: float = cli.param(
    "Wall-clock budget; when used up the run saves a checkpoint and stops unfinished "
    "(run_pretraining.py exits 75) (0: no limit).",
    0.0,
    result=False,
  )
  output_layer: str = cli.param(
    "softmax: tied vocabulary softmax; continuous: ELMo-C cosine loss against --target_embeddings.",
    "softmax",
    modeling.OUTPUT_LAYERS,
  )
  target_embeddings: str = cli.param(
    "For --output_layer=continuous: a word-vector text file "
    "(word2vec/fastText .vec) aligned to the vocab, or a trained model dir "
    "(its word_embeddings are used).",
    None,
    io=cli.INPUT,
  )
  continuous_logit_scale: float = cli.param(
    "Inference scale of a continuous model's cosine logits: "
    "log p(v) = log_softmax(scale * cos(W h, e(v))).",
    10.0,
  )
  calibrate_logit_scale: bool = cli.param(
    "Continuous head: after the final eval, store in config.json the scale "
    "(of losses.LOGIT_SCALES) with the lowest eval cross-entropy.",
    True,
    result=False,
  )
  synthetic_data: bool = cli.param("Random ids instead of --input_file (benchmarking).", False)
  synthetic_length: int = cli.param("Mean sentence length of --synthetic_data.", 32)
  deterministic: bool = cli.param(
    "TF op determinism (tf.config.experimental.enable_op_determinism): the same --seed and "
    "data give the same losses, and a run resumed after a kill or a stop at any step continues "
    "bit-identically (same device kind, strategy and replica count; some GPU ops are slower or "
    "refuse to run).",
    False,
  )
  overwrite: bool = cli.param(
    "Start over: remove the checkpoints, logs and summary of the training --output_dir holds "
    "(another job's, or this job's) instead of resuming it.",
    False,
    result=False,
  )
  install_signal_handlers: bool = cli.setting(True, result=False)

  FLAG_CHECKS = ((("num_train_steps", "num_warmup_steps"), _check_warmup),)

  def __post_init__(self):
    self.config_overrides = {**self.config_overrides, **self.config_flags.overrides()}


def run_identity(params):
  """`runs.identity`: the command, the files --input_file matches, and every field not marked
  result=False (those a resume may change).
  """
  data = None
  if params.input_file:
    data = [runs.path_identity(path) for path in io_utils.expand_globs(params.input_file)]
  # Fields a run has only when set (a warm start, a teacher, fixed shapes): the identities
  # recorded before they existed still match. --mixed_precision keeps the values of the boolean it
  # was: an old run resumes with a bare flag.
  optional = {}
  if params.init_checkpoint:
    optional["init_checkpoint"] = warm_start.identity(params.init_checkpoint, params.init_layers)
  if params.teacher:
    optional["teacher"] = distillation.identity(params)
  if params.pad_to_max_seq_length:
    optional["pad_to_max_seq_length"] = True
  precision = {None: False, "bfloat16": True}.get(params.mixed_precision, params.mixed_precision)
  return runs.identity(
    "run_pretraining.py", params, input_file=data, mixed_precision=precision, **optional
  )


def _run_record(params):
  """`runs.Record` of --output_dir (None for gs://, stated in a warning); config.json and vocab.txt,
  which every run writes anew, are not among its outputs. Unrecorded checkpoints are adopted.
  """
  if runs.unrecorded_remote(params.output_dir):
    return None
  outputs = [
    checkpoints.CHECKPOINT_NAME + "-*",
    "checkpoint",
    # TensorBoard's event files; a file of the user's in train/ or eval/ is no output.
    "train/events.out.tfevents.*",
    "eval/events.out.tfevents.*",
    "train_summary.json",
  ]
  with cli.user_input():
    return runs.Record(
      params.output_dir, run_identity(params), outputs, params.overwrite, adopt_unrecorded=True
    )


def set_precision_policy(mixed_precision):
  """Keras' global policy of --mixed_precision (None, or one of PRECISIONS)."""
  keras.mixed_precision.set_global_policy(_POLICIES[mixed_precision])


def _warn_if_precision_is_slow(params):
  if not params.mixed_precision or tf.config.list_physical_devices("GPU"):
    return
  if params.mixed_precision == "float16":
    logging.warning(
      "--mixed_precision=float16 without a GPU: float16 is for GPU tensor cores (V100, T4); "
      "TPUs and CPUs with AMX want bfloat16"
    )
  elif params.strategy != "tpu" and machine.cpu_has_native_bfloat16() is False:
    logging.warning(
      "--mixed_precision on a CPU without AMX/AVX512_BF16: bfloat16 is emulated here and "
      "trains SLOWER than float32 (docs/DESIGN.md §6); leave it off on this host"
    )


# ---------------------------------------------------------- train and eval


def _batch_counts(features):
  mask = tf.cast(features["input_mask"], tf.float32)
  return {
    "tokens": tf.reduce_sum(mask),
    "positions": tf.cast(tf.size(mask), tf.float32),
    "sequences": tf.cast(tf.shape(mask)[0], tf.float32),
  }


def make_train_loop(
  strategy, model, optimizer, use_xla=False, loss_denominator=None, seed=0, distiller=None
):
  """train_loop(iterator, num_steps) -> float32 [num_steps, 9]: each step's global TRAIN_METRICS
  sums. loss_denominator None: each step's global target-weight sum. Dropout draws its masks from
  (seed, step, replica) (`_seeded_dropout`). distiller: a `distillation.Distiller` whose loss
  replaces the plain one.

  A step whose loss or gradients are not finite changes no variable (`apply_gradients_if_finite`)
  and its loss sums are 0, so that every sum stays finite; its row counts it in nonfinite_steps (a
  float16 loss-scale overflow in overflow_steps).
  """
  gather = not (use_xla or isinstance(strategy, tf.distribute.TPUStrategy))
  variables = model.trainable_variables
  loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

  def compute_gradients(features, denominator, teacher_log_probs=None):
    with tf.GradientTape() as tape:
      # One denominator on every replica: the optimizer sums the replicas'
      # gradients, which then equal the gradient of the global-batch loss.
      if distiller is None:
        loss, terms = losses.training_loss(model, features, denominator, gather_targets=gather)
      else:
        loss, terms = distiller.training_loss(model, features, teacher_log_probs, denominator)
      if loss_scaling:
        # float16 gradients that would underflow are scaled up; the optimizer divides them back.
        loss = optimizer.scale_loss(loss)
    return tape.gradient(loss, variables), terms

  if use_xla:
    compute_gradients = tf.function(compute_gradients, jit_compile=True)

  def step_fn(features):
    if loss_denominator is None:
      local_weight = tf.reduce_sum(tf.cast(features["target_weights"], tf.float32))
      global_weight = tf.distribute.get_replica_context().all_reduce(
        tf.distribute.ReduceOp.SUM, local_weight
      )
      denominator = tf.maximum(global_weight, 1e-6)
    else:
      denominator = tf.constant(loss_denominator, tf.float32)
    # The teacher predicts this replica's batch, outside the tape: it is not trained.
    teacher = None if distiller is None else distiller.teacher_log_probs(features)
    grads, terms = compute_gradients(features, denominator, teacher)
    # AdamWeightDecay sums over replicas, clips the global norm to 1.0, then
    # applies the update (optimization.py); we must not clip here as well.
    overflow, nonfinite = optimization.apply_gradients_if_finite(
      optimizer, grads, variables, terms["loss_sum"]
    )
    for name in training_metrics.LOSS_SUMS:
      terms[name] = tf.where(nonfinite, 0.0, terms[name])
    # The flags are the same on every replica, and the rows are summed over them: one counts.
    first = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group == 0, tf.float32)
    terms["overflow_steps"] = first * tf.cast(overflow, tf.float32)
    terms["nonfinite_steps"] = first * tf.cast(nonfinite, tf.float32)
    terms.update(_batch_counts(features))
    return tf.stack([terms[k] for k in training_metrics.TRAIN_METRICS])

  @tf.function
  def train_loop(iterator, num_steps):
    rows = tf.TensorArray(tf.float32, size=num_steps)
    for i in tf.range(num_steps):
      per_replica = strategy.run(
        _seeded_dropout(step_fn, seed),
        args=(next(iterator), tf.identity(optimizer.iterations.value)),
      )
      rows = rows.write(i, distribute_utils.sum_replicas(strategy, per_replica))
    return rows.stack()

  return train_loop


def _seeded_dropout(step_fn, seed):
  """step_fn(features) as a replica function (features, step int64 []) whose dropout masks are
  drawn statelessly from (seed, step, replica) (`modeling.stateless_dropout`).

  TF's stateful dropout keeps its stream position in the traced function, in no checkpoint: a run
  resumed (or stopped and restarted) at any step would draw other masks from there on. Keyed by the
  step the checkpoint holds, every step's masks are the same in every process, so a resume is
  bit-identical wherever the run stopped (docs/DESIGN.md §3.3).
  """

  def replica_fn(features, step):
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    step_seed = tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)])
    with modeling.stateless_dropout(
      tf.random.experimental.stateless_fold_in(step_seed, tf.cast(replica, tf.int64))
    ):
      return step_fn(features)

  return replica_fn


def make_eval_step(strategy, model, use_xla=False, element_spec=None):
  """eval_step(batch) -> float32 [7 + 12]: METRICS, then the continuous head's CE at each of
  LOGIT_SCALES. element_spec makes one trace serve every bucket and partial batch.
  """
  gather = not (use_xla or isinstance(strategy, tf.distribute.TPUStrategy))

  def step_fn(features):
    terms = losses.forward_loss_terms(
      model, features, training=False, gather_targets=gather, with_logits=True
    )
    terms.update(_batch_counts(features))
    by_scale = terms.get("ce_by_scale", tf.zeros([len(losses.LOGIT_SCALES)], tf.float32))
    return tf.concat([tf.stack([terms[k] for k in training_metrics.METRICS]), by_scale], 0)

  @tf.function(
    reduce_retracing=True, input_signature=None if element_spec is None else [element_spec]
  )
  def eval_step(features):
    return distribute_utils.sum_replicas(strategy, strategy.run(step_fn, args=(features,)))

  return eval_step


def evaluate(eval_step, dist_dataset, continuous):
  """Eval metrics over the whole set: loss (mean CE, or cosine distance for a continuous head, per
  target) and perplexity exp(mean CE): the pseudo-perplexity for tta, its one-masking estimate for
  bilm, the ordinary one for unilm. A continuous head also reports best_logit_scale and
  best_scale_perplexity over losses.LOGIT_SCALES.
  """
  totals = np.zeros(len(training_metrics.METRICS) + len(losses.LOGIT_SCALES), np.float64)
  batches = 0
  for features in dist_dataset:
    totals += eval_step(features).numpy()
    batches += 1
  m = dict(zip(training_metrics.METRICS, totals))
  weight = max(m["weight_sum"], 1e-9)
  result = {
    "loss": m["loss_sum"] / weight,
    "accuracy": m["correct_sum"] / weight,
    "perplexity": math.exp(min(m["ce_sum"] / weight, 700.0)),
    "batches": batches,
    "targets": m["weight_sum"],
  }
  if continuous:
    result["cosine_logit_ce"] = m["ce_sum"] / weight
    by_scale = totals[len(training_metrics.METRICS) :] / weight
    best = int(np.argmin(by_scale))
    result["best_logit_scale"] = losses.LOGIT_SCALES[best]
    result["best_scale_perplexity"] = math.exp(min(by_scale[best], 700.0))
  return result


def _evaluator(strategy, model, params, setup, writer, progress):
  """evaluate(step): the eval set (--eval_file or synthetic data) into progress.eval_result, a
  log line and output_dir/eval."""
  dataset_fn = training_setup.make_dataset_fn(params, setup.config, setup.vocab, False)
  element_spec = strategy.distribute_datasets_from_function(dataset_fn).element_spec
  eval_step = make_eval_step(strategy, model, params.use_xla, element_spec)

  def run(step):
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    result = evaluate(eval_step, dist, setup.config.output_layer == "continuous")
    logging.info(
      "eval at step %d: %s", step, " ".join(f"{k} {v:.4g}" for k, v in sorted(result.items()))
    )
    with writer.as_default():
      for name in ("loss", "perplexity", "accuracy", "cosine_logit_ce"):
        if name in result:
          training_metrics.write_scalar(name, result[name], step)
    progress.eval_result = result

  return run


# -------------------------------------------------------------------- train


@dataclasses.dataclass
class _TrainState:
  """The checkpointed objects of a run."""

  model: modeling.TransformerLM
  optimizer: keras.optimizers.Optimizer
  # The input position: global batches consumed (one per step, but kept
  # apart from the step so the data stream is explicit in the checkpoint).
  input_batches: tf.Variable
  checkpoint: tf.train.Checkpoint

  @classmethod
  def create(cls, params, config, strategy):
    with strategy.scope():
      model = modeling.build_model(config, params.model_type)
      optimizer = optimization.create_optimizer(
        params.learning_rate,
        params.num_train_steps,
        params.num_warmup_steps,
        params.weight_decay_rate,
        loss_scaling=params.mixed_precision == "float16",
      )
      optimizer.build(model.trainable_variables)
    input_batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_batches")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, input_batches=input_batches)
    return cls(model, optimizer, input_batches, checkpoint)

  @property
  def step(self):
    return int(self.optimizer.iterations.numpy())

  def learning_rate(self):
    lr = self.optimizer.learning_rate
    return float(lr.numpy()) if hasattr(lr, "numpy") else float(lr)

  def loss_scale(self):
    """{"loss_scale": float16's dynamic loss scale}, or {} without loss scaling."""
    if not isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
      return {}
    return {"loss_scale": float(self.optimizer.dynamic_scale.numpy())}


@dataclasses.dataclass
class _NonfiniteGuard:
  """The steps skipped as non-finite in a row (a step applied ends a run of them; a float16
  overflow neither counts nor ends one): `limit` in a row stop the run (`check`)."""

  limit: int
  in_a_row: int = 0

  def check(self, rows, step):
    """Logs the skipped steps of train-loop rows [num, 9] (their last reached `step`);
    training_loop.NonfiniteSteps when `limit` came in a row."""
    overflow, nonfinite = (
      rows[:, training_metrics.TRAIN_METRICS.index(k)] for k in training_metrics.SKIPS
    )
    longest = 0
    for over, bad in zip(overflow, nonfinite):
      self.in_a_row = self.in_a_row + 1 if bad else (self.in_a_row if over else 0)
      longest = max(longest, self.in_a_row)
    if nonfinite.any():
      logging.warning(
        "step %d: %d of the last %d steps skipped, their loss or gradients not finite (NaN/inf); "
        "%d in a row now (--max_nonfinite_steps %d)",
        step,
        int(nonfinite.sum()),
        len(rows),
        self.in_a_row,
        self.limit,
      )
    if longest >= self.limit:
      raise training_loop.NonfiniteSteps(
        f"{longest} steps in a row had a non-finite loss or gradients (--max_nonfinite_steps "
        f"{self.limit})"
      )


@dataclasses.dataclass
class _Progress:
  """What a `train` call has done so far: the figures of its summary."""

  start_step: int
  # Global batches (steps) the input skipped: the input position resumed from.
  skip_batches: int
  # The newest checkpoint saved or resumed from (None: none yet).
  last_path: str
  step_losses: list = dataclasses.field(default_factory=list)
  # (global batch, padded length) of each step: the shapes the step function ran on, each a
  # compilation under XLA or on a TPU.
  step_shapes: set = dataclasses.field(default_factory=set)
  stopped_by: str = "num_train_steps"
  eval_result: dict = None
  run_start: float = dataclasses.field(default_factory=time.time)
  nonfinite: _NonfiniteGuard = None


def _init_seed(params):
  return params.seed if params.init_seed is None else params.init_seed


@contextlib.contextmanager
def _data_order_seed(params):
  """Builds the training datasets under the global TF seed --seed, whatever --init_seed.

  tf.data folds the global seed into its shuffle seeds, and a resume is exact only under the same
  one; on exit the global seed restarts at --init_seed for the dropout of the loop traced next.
  """
  if params.init_seed is None:
    yield
    return
  tf.random.set_seed(params.seed)
  try:
    yield
  finally:
    tf.random.set_seed(params.init_seed)


def training_iterator(params, strategy, setup, skip_steps):
  """The distributed iterator over the training batches, past those of the first `skip_steps`
  steps, in the data order of --seed (`_data_order_seed`)."""
  with _data_order_seed(params):
    return iter(
      strategy.distribute_datasets_from_function(
        training_setup.make_dataset_fn(params, setup.config, setup.vocab, True, skip_steps)
      )
    )


def run(params):
  """run_pretraining.py's job: the inputs and the output checked, then `train`; returns its
  summary.

  Raises:
    cli.InputError: naming the flag, before a strategy, an output dir or a model is made.
  """
  check_data(params)
  io_utils.check_outputs_apart(params)
  io_utils.check_output_path(params.output_dir, "output_dir")
  return train(params)


def check_data(params):
  """The TFRecord globs match files and the schedule and batching flags agree (cli.InputError
  naming the flag), before anything is written."""
  try:  # the schedule's own rule (0 <= warmup <= steps)
    optimization.LinearWarmupLinearDecay(
      params.learning_rate, params.num_train_steps, params.num_warmup_steps
    )
  except ValueError as e:
    raise cli.InputError(f"--{e}") from None
  if params.synthetic_data:
    return  # no file is read
  if not params.input_file:
    raise cli.InputError("--input_file is required (or --synthetic_data)")
  if params.pad_to_max_seq_length and params.bucket_boundaries:
    raise cli.InputError(
      "--pad_to_max_seq_length pads every batch to one length: give no --bucket_boundaries"
    )
  try:
    input_pipeline.bucket_lengths(params.max_seq_length, params.bucket_boundaries)
  except ValueError as e:
    raise cli.InputError(f"--{e}") from None
  for name in ("input_file", "eval_file"):
    pattern = getattr(params, name)
    if pattern:
      try:
        io_utils.expand_globs(pattern)
      except ValueError as e:
        raise cli.InputError(f"--{name}: {e}") from None


def _check_records(params):
  """Refuses an input file that is not TFRecords, and a glob whose files hold no record at all (the
  repeated training stream would wait for one forever), by each file's first record. Run once the
  strategy exists (a TF op before it would fix the devices) and before any file is written."""
  for name in ("input_file", "eval_file"):
    pattern = None if params.synthetic_data else getattr(params, name)
    if not pattern:
      continue
    paths = io_utils.expand_globs(pattern)
    records = 0
    for path in paths:
      try:
        records += sum(1 for _ in tf.data.TFRecordDataset(path).take(1))
      except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        found = re.search(r"corrupted record at \d+", e.message or "")
        why = found.group(0) if found else type(e).__name__
        raise cli.InputError(f"--{name} {path}: not a TFRecord file ({why})") from None
    if not records:
      raise cli.InputError(f"--{name}: its {len(paths)} file(s) hold no records")


def train(params, strategy=None):
  """Trains (or resumes) per `params`; returns the run's summary dict (train_summary.json, plus
  step_losses: this run's per-step mean losses).

  The chief holds `training_loop.output_dir_lock` from before it reads the latest checkpoint until
  the summary is written (OutputDirBusy). strategy: an existing one (tests), else params.strategy.
  """
  if params.deterministic:
    tf.config.experimental.enable_op_determinism()
  strategy = strategy or distribute_utils.get_strategy(
    params.strategy, params.tpu, params.num_cpu_devices
  )
  write_dir = distribute_utils.worker_write_dir(params.output_dir, strategy)
  with contextlib.ExitStack() as lock:
    if "://" not in params.output_dir:
      # A run refused before it wrote anything (the config's heads do not divide its width)
      # leaves no --output_dir it made.
      lock.enter_context(io_utils.output_dir(params.output_dir))
    tf.io.gfile.makedirs(write_dir)
    if distribute_utils.is_chief(strategy):
      lock.enter_context(training_loop.output_dir_lock(params.output_dir))
    summary = _train_locked(params, strategy, write_dir)
  if write_dir != params.output_dir:
    io_utils.rmtree(write_dir, ignore_errors=True)
  return summary


def _train_locked(params, strategy, write_dir):
  set_precision_policy(params.mixed_precision)
  _warn_if_precision_is_slow(params)
  # The seed of Python, NumPy and TF: weight initialisation and dropout (the data order's global
  # TF seed is `_data_order_seed`'s).
  keras.utils.set_random_seed(_init_seed(params))
  chief = distribute_utils.is_chief(strategy)
  # Another job's training is refused before anything is read or written; --overwrite clears it
  # once the flags' files have been read.
  record = _run_record(params) if chief else None
  resuming = not params.overwrite and checkpoints.latest_checkpoint(params.output_dir) is not None
  with cli.user_input():  # the vocab, config and target embeddings the flags name
    setup = training_setup.prepare_model(params, resuming=resuming)
  _check_records(params)
  if record:
    record.start()
  if chief:
    setup.write_model_files(params.output_dir)

  # The model, optimizer and input position: resumed, else warm-started.
  state = _TrainState.create(params, setup.config, strategy)
  latest = _restore_or_initialise(state, params, setup, chief)
  distiller = None
  if setup.teacher is not None:
    with cli.user_input():
      distiller = distillation.Distiller.load(params, strategy)
  progress = _Progress(
    state.step,
    int(state.input_batches.numpy()),
    latest,
    nonfinite=_NonfiniteGuard(params.max_nonfinite_steps),
  )

  # What the steps read and write, made in this order: the datasets draw their seeds from the
  # global seed's stream.
  meter = training_metrics.Throughput(setup.config, params.use_xla)
  iterator = training_iterator(params, strategy, setup, progress.skip_batches)
  train_loop = _new_train_loop(params, strategy, state, distiller)
  train_writer, eval_writer = _summary_writers(params.output_dir, chief)
  evaluator = None
  if params.eval_file or (params.synthetic_data and params.eval_every_steps):
    evaluator = _evaluator(strategy, state.model, params, setup, eval_writer, progress)

  def train_steps(num):
    _run_steps(train_loop, iterator, num, state, meter, train_writer, progress)

  def log(step, seconds_left):
    elapsed = time.time() - progress.run_start
    meter.log_window(step, params.num_train_steps, state.learning_rate(), elapsed, seconds_left)

  # The steps, until num_train_steps or a stop request.
  _log_start(params, strategy, setup, state.step)
  stopped_by, progress.last_path = training_loop.run(
    state.checkpoint,
    write_dir,
    lambda: state.step,
    params.num_train_steps,
    train_steps,
    resumed=latest,
    keep=params.keep_checkpoint_max,
    save_every=(params.save_checkpoints_steps,),
    evaluate=evaluator,
    eval_every=params.eval_every_steps,
    log=log,
    log_every=params.log_every_steps,
    steps_per_call=params.steps_per_loop,
    strategy=strategy,
    install_signal_handlers=params.install_signal_handlers,
    train_minutes=params.train_minutes,
  )
  progress.stopped_by = stopped_by or "num_train_steps"
  for writer in (train_writer, eval_writer):
    writer.flush()
  return _finish(params, strategy, setup, state, meter, progress, chief)


def _finish(params, strategy, setup, state, meter, progress, chief):
  """The calibration of a finished run, then the summary: written (chief), logged, returned."""
  if state.step >= params.num_train_steps:
    _calibrate_logit_scale(params, setup, progress.eval_result, chief)
  summary = _summary(params, strategy, setup, state, meter, progress)
  if chief:
    written = {k: v for k, v in summary.items() if k != "step_losses"}
    # Atomic: GFile's "w" does not truncate every file system's file (ram:// appends).
    io_utils.write_atomically(
      os.path.join(params.output_dir, "train_summary.json"),
      json.dumps(written, indent=2, sort_keys=True),
    )
  logging.info(
    "the steps ran on %d distinct batch shapes (global batch, padded length): %s",
    len(progress.step_shapes),
    ", ".join(f"{b}x{length:g}" for b, length in sorted(progress.step_shapes)),
  )
  logging.info(
    "done: step %d, %.2f steps/s, %.0f tokens/s, %.1f GFLOP/s (stopped by %s)",
    state.step,
    summary["steps_per_second"],
    summary["tokens_per_second"],
    summary["gflops_per_second"],
    progress.stopped_by,
  )
  return summary


def _restore_or_initialise(state, params, setup, chief):
  """The checkpoint prefix resumed from (`training_loop.restore`; the chief rolls the index back),
  or None after a warm start and setting the continuous targets.
  """
  latest = None
  if not params.overwrite:  # (the chief has removed them; the other workers must not read them)
    latest = training_loop.restore(state.checkpoint, params.output_dir, roll_back=chief)
  if latest is not None:
    logging.info(
      "resumed from %s at step %d (input position %d batches)",
      latest,
      state.step,
      int(state.input_batches.numpy()),
    )
    if state.step > params.num_train_steps:
      raise cli.InputError(
        f"--num_train_steps {params.num_train_steps} is below step {state.step}, which {latest} "
        f"has reached: give --num_train_steps >= {state.step}, or --overwrite to start over"
      )
    return latest
  if setup.init_source is not None:
    with cli.user_input():  # a source that does not fit, named before the first step
      warm_start.load(state.model, setup.init_source, setup.init_layers)
  if setup.target_table is not None:
    state.model.lm_head.set_target_embeddings(setup.target_table)
  return None


def _new_train_loop(params, strategy, state, distiller):
  denominator = losses.constant_denominator(
    params.loss_normalization, params.train_batch_size, params.max_seq_length
  )
  return make_train_loop(
    strategy,
    state.model,
    state.optimizer,
    params.use_xla,
    denominator,
    _init_seed(params),
    distiller,
  )


def _summary_writers(output_dir, chief):
  if not chief:
    return tf.summary.create_noop_writer(), tf.summary.create_noop_writer()
  return tuple(
    tf.summary.create_file_writer(os.path.join(output_dir, name)) for name in ("train", "eval")
  )


def _log_start(params, strategy, setup, step):
  logging.info(
    "training %s (%s head) from step %d to %d, %d replicas, global batch %d, %s",
    params.model_type,
    setup.config.output_layer,
    step,
    params.num_train_steps,
    strategy.num_replicas_in_sync,
    params.train_batch_size,
    params.mixed_precision or "float32",
  )


def _run_steps(train_loop, iterator, num, state, meter, writer, progress):
  t0 = time.time()
  rows = train_loop(iterator, tf.constant(num, tf.int32)).numpy()
  seconds = time.time() - t0
  state.input_batches.assign_add(num)
  skipped = rows[:, training_metrics.TRAIN_METRICS.index("nonfinite_steps")]
  progress.step_losses.extend(
    float("nan") if bad else float(row[0] / max(row[1], 1e-9)) for row, bad in zip(rows, skipped)
  )
  progress.step_shapes.update(_step_shapes(rows))
  scalars = meter.add(rows.sum(0), num, seconds, state.learning_rate())
  scalars.update(state.loss_scale())
  with writer.as_default():
    for name, value in scalars.items():
      training_metrics.write_scalar(name, value, state.step)
  progress.nonfinite.check(rows, state.step)


def _step_shapes(rows):
  """{(sequences, padded length)} of train-loop rows [num, 9]: positions / sequences is the
  length every replica of the step padded to (one bucket per step), else their mean."""
  sequences = rows[:, training_metrics.METRICS.index("sequences")]
  positions = rows[:, training_metrics.METRICS.index("positions")]
  return {(int(b), float(p / max(b, 1.0))) for b, p in zip(sequences, positions)}


def _calibrate_logit_scale(params, setup, eval_result, chief):
  """A finished continuous head's inference scale: the one that fits the eval data best (it
  changes the size of scores and perplexities, not which token ranks first), in config.json."""
  config = setup.config
  if not (config.output_layer == "continuous" and eval_result and params.calibrate_logit_scale):
    return
  config.continuous_logit_scale = eval_result["best_logit_scale"]
  logging.info(
    "continuous_logit_scale calibrated on the eval set: %g (perplexity %.4g)",
    config.continuous_logit_scale,
    eval_result["best_scale_perplexity"],
  )
  if chief:
    setup.write_model_files(params.output_dir)


def _summary(params, strategy, setup, state, meter, progress):
  return dict(
    {
      "model_type": params.model_type,
      "output_layer": setup.config.output_layer,
      "mixed_precision": params.mixed_precision,
      "use_xla": params.use_xla,
      "strategy": params.strategy,
      "replicas": strategy.num_replicas_in_sync,
      "start_step": progress.start_step,
      "final_step": state.step,
      "finished": state.step >= params.num_train_steps,
      "skip_batches": progress.skip_batches,
      "input_batches": int(state.input_batches.numpy()),
      "stopped_by": progress.stopped_by,
      "checkpoint": progress.last_path,
      "step_losses": progress.step_losses,
      "step_shapes": len(progress.step_shapes),
      "eval": progress.eval_result,
      "wall_seconds": time.time() - progress.run_start,
    },
    **meter.summary(),
  )

# coding=utf-8
"""The pretraining loop: a T-TA, biLM or uniLM under tf.distribute.

`train(params)` is the whole run; run_pretraining.py turns flags into
`TrainParams` and calls it. Around this module: pretraining/losses.py (the losses),
pretraining/training_setup.py (a run's vocab, config, continuous targets and datasets),
util/distribute_utils.py (strategy, chief, cross-worker agreement) and
lm/model_dir.py (config.json, vocab.txt, checkpoints).

Why a custom loop and not `model.fit`: Keras 3 `fit` does not run under
MultiWorkerMirroredStrategy (keras-team/keras#20585). Its steps:
  * Strategy (`distribute_utils`): one device, mirrored GPUs (or logical CPUs),
    multi-worker, TPU. Only the chief writes --output_dir; the other workers
    write their checkpoints to a temporary directory, as the tf.distribute
    guide recommends.
  * Step loop (`make_train_loop`): one `tf.function` runs --steps_per_loop
    steps, each under `strategy.run`; the per-replica loss sum is divided by
    one denominator for all replicas (--loss_normalization, pretraining/losses.py: the
    constant train_batch_size * max_seq_length, or the GLOBAL sum of target
    weights, an all-reduce), so the gradients the optimizer sums over
    replicas are exactly those of the global-batch loss;
    `optimization.AdamWeightDecay` clips their global norm to 1.0 after
    that sum and applies BERT's warmup + linear decay.
  * Checkpoints (`tf.train.CheckpointManager`, the last --keep_checkpoint_max)
    every --save_checkpoints_steps, at the end, on SIGTERM/SIGINT and when
    --train_minutes is used up. A run restarted with the same --output_dir
    resumes from its latest checkpoint: model, optimizer slots and
    iterations (= the global step), and the input position (the number of
    batches consumed, given back to the pipeline as `skip_batches`, so the
    data order continues where it stopped). config.json and vocab.txt are
    written first, so every run_* script takes --model_dir alone. A latest
    checkpoint that cannot be read (cut short, corrupt) is skipped with a
    warning for the one before it; a save that fails (a full disk) stops the
    run with one line (`CheckpointError`, exit 2: not requeued).
  * Stop requests (`StopRequest`, `_StopCondition`): a signal or the
    --train_minutes deadline on any worker stops all of them at the same
    step (a one-scalar all-reduce per loop), so none waits forever in a
    collective. The summary's "finished" is False for a run stopped before
    num_train_steps (run_pretraining.py then exits `EXIT_UNFINISHED`).
  * One run per output dir (`output_dir_lock`): the chief holds an flock on
    output_dir/run.lock; a second run is refused (`OutputDirBusy`), the lock
    of a crashed run dies with it.
  * Seeds: --seed fixes the data order and the biLM masks; --init_seed (default --seed) the
    weight initialisation and dropout (`_data_order_seed` keeps them apart).
  * Determinism (--deterministic): TF op determinism, Python/NumPy/TF seeded
    with --init_seed, and the dropout streams restarted at every checkpoint as a
    resumed run restarts them, so a run killed and resumed ends bit-identical
    to one never stopped.
  * Logging (`training_metrics.Throughput`): TensorBoard scalars in output_dir/train (loss,
    lr, accuracy, steps/s, tokens/s, GFLOP/s of `flops.training_flops`) and
    a progress line with ETA every --log_every_steps.
  * Eval (`_Evaluator`): loss / perplexity / accuracy on --eval_file every
    --eval_every_steps and at the end, into output_dir/eval; a continuous
    head also gets its inference logit scale calibrated there.
"""

import contextlib
import dataclasses
import json
import math
import os
import shutil
import signal
import threading
import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import kinds
from lm import model_dir
import modeling
import optimization
from pretraining import losses
from pretraining import training_metrics
from pretraining import training_setup
from util import cli
from util import distribute_utils
from util import io_utils
from util import machine

# ----------------------------------------------------------------- parameters


@dataclasses.dataclass
class TrainParams:
  """Everything `train` needs.

  The single statement of each default: run_pretraining.py generates its
  flags (same names, these defaults, the help texts below) from the fields
  made with `cli.param`. config_overrides (from --config_json and the size
  flags) and install_signal_handlers are for callers only.
  """

  output_dir: str = cli.param("Checkpoints, config.json, vocab.txt, TensorBoard logs.")
  model_type: str = cli.param("Which LM to train.", "tta", kinds.PRETRAINABLE)
  input_file: str = cli.param("Glob of training TFRecords (create_pretraining_data.py).", None)
  eval_file: str = cli.param("Glob of evaluation TFRecords.", None)
  vocab_file: str = cli.param(
    "WordPiece vocab; default the vocab.txt beside "
    "--input_file, or the one already in --output_dir.",
    None,
  )
  do_lower_case: bool = cli.param(
    "Stored in config.json for the tokenizer; default: from the data dir's "
    "data_stats.json, else True.",
    None,
  )
  bert_config_file: str = cli.param("Model config JSON (TTAConfig / BERT format).", None)
  config_overrides: dict = dataclasses.field(default_factory=dict)
  init_checkpoint: str = cli.param(
    "Warm start (ignored when --output_dir already holds a checkpoint): "
    "our model dir / checkpoint, or a Google-BERT / T-TA TF1 checkpoint.",
    None,
  )
  train_batch_size: int = cli.param("Global batch size (sentences).", 64)
  eval_batch_size: int = cli.param("Global eval batch size.", 64)
  learning_rate: float = cli.param("Peak learning rate.", 1e-4)
  weight_decay_rate: float = cli.param("Decoupled weight decay.", 0.01)
  num_train_steps: int = cli.param("Total optimizer steps.", 100000)
  num_warmup_steps: int = cli.param("Linear warmup steps.", 10000)
  max_seq_length: int = cli.param("Longest sentence in tokens.", 128)
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
  save_checkpoints_steps: int = cli.param("Checkpoint interval.", 1000)
  keep_checkpoint_max: int = cli.param("Checkpoints kept.", 5)
  eval_every_steps: int = cli.param("Evaluate every N steps (0: only at the end).", 0)
  max_eval_steps: int = cli.param("Eval batches per evaluation (0: the whole eval file).", 100)
  steps_per_loop: int = cli.param("Steps per tf.function call (cuts Python overhead).", 20)
  log_every_steps: int = cli.param("Progress line interval.", 100)
  strategy: str = cli.param("tf.distribute.", "one_device", distribute_utils.STRATEGIES)
  tpu: str = cli.param(distribute_utils.TPU_HELP, None)
  num_cpu_devices: int = cli.param(distribute_utils.NUM_CPU_DEVICES_HELP, 0)
  mixed_precision: bool = cli.param(
    "bfloat16 compute, float32 variables; LayerNorm, softmax and the loss "
    "stay float32 (faster on AMX CPUs; docs/DESIGN.md §6).",
    False,
  )
  use_xla: bool = cli.param(
    "jit_compile the forward/backward pass (on CPU slower than TF's oneDNN "
    "kernels; docs/DESIGN.md §6).",
    False,
  )
  train_minutes: float = cli.param(
    "Wall-clock budget; when used up the run saves a checkpoint and stops unfinished "
    "(run_pretraining.py exits 75) (0: no limit).",
    0.0,
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
  )
  synthetic_data: bool = cli.param("Random ids instead of --input_file (benchmarking).", False)
  synthetic_length: int = cli.param("Mean sentence length of --synthetic_data.", 32)
  deterministic: bool = cli.param(
    "TF op determinism (tf.config.experimental.enable_op_determinism): the same --seed and "
    "data give the same losses, and a run resumed after a kill continues bit-identically "
    "(same device kind and strategy; some GPU ops are slower or refuse to run).",
    False,
  )
  install_signal_handlers: bool = True


def set_precision_policy(mixed_precision):
  keras.mixed_precision.set_global_policy("mixed_bfloat16" if mixed_precision else "float32")


def _warn_if_bfloat16_is_emulated(params):
  if (
    params.mixed_precision
    and not tf.config.list_physical_devices("GPU")
    and params.strategy != "tpu"
    and machine.cpu_has_native_bfloat16() is False
  ):
    logging.warning(
      "--mixed_precision on a CPU without AMX/AVX512_BF16: bfloat16 is emulated here and "
      "trains SLOWER than float32 (docs/DESIGN.md §6); leave it off on this host"
    )


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
    logging.warning("received signal %d: stopping after this loop and saving a checkpoint", signum)

  def uninstall(self):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}


class _StopCondition(object):
  """A signal or the --train_minutes deadline, agreed on by all workers."""

  def __init__(self, strategy, params):
    self.request = StopRequest()
    if params.install_signal_handlers:
      self.request.install()
    self.deadline = time.time() + 60.0 * params.train_minutes if params.train_minutes > 0 else None
    self._any_worker = distribute_utils.any_worker_agreement(strategy)

  def seconds_left(self):
    """Until the deadline (>= 0), or None without one."""
    if self.deadline is None:
      return None
    return max(self.deadline - time.time(), 0.0)

  def reason(self):
    """Why to stop now ("signal 15", "train_minutes", "another worker"), or
    None to go on. Every worker must call it at the same step."""
    expired = self.deadline is not None and time.time() >= self.deadline
    if not self._any_worker(self.request.signal is not None or expired):
      return None
    if self.request.signal is not None:
      return f"signal {self.request.signal:d}"
    return "train_minutes" if expired else "another worker"

  def uninstall(self):
    self.request.uninstall()


# ---------------------------------------------------------- output dir lock

LOCK_FILE = "run.lock"


class OutputDirBusy(cli.InputError):
  """Another live training run holds the lock of --output_dir (scripts: one line, exit 2)."""


class CheckpointError(cli.InputError):
  """A checkpoint cannot be saved (a full disk), or none of the output dir's can be read."""


@contextlib.contextmanager
def output_dir_lock(output_dir):
  """Holds an exclusive lock on output_dir (an existing local dir) for the `with` body.

  `io_utils.exclusive_lock` on output_dir/run.lock: the file holds the owner's pid, host and
  start time, for the message a second run gets; the lock dies with its process, so a crashed
  run never blocks the next (see there for network and remote file systems).

  Raises:
    OutputDirBusy: another run holds the lock.
  """
  with contextlib.ExitStack() as stack:
    try:
      stack.enter_context(
        io_utils.exclusive_lock(
          output_dir, wait=False, lock_file=os.path.join(output_dir, LOCK_FILE)
        )
      )
    except io_utils.OutputBusy as e:
      raise OutputDirBusy(
        f"--output_dir {output_dir} is in use by another training run ({e.holder}; lock file "
        f"{e.lock_file}): wait for it to end or choose another --output_dir"
      ) from None
    yield


# ---------------------------------------------------------- train and eval


def _batch_counts(features):
  mask = tf.cast(features["input_mask"], tf.float32)
  return {
    "tokens": tf.reduce_sum(mask),
    "positions": tf.cast(tf.size(mask), tf.float32),
    "sequences": tf.cast(tf.shape(mask)[0], tf.float32),
  }


def make_train_loop(strategy, model, optimizer, use_xla=False, loss_denominator=None):
  """Returns train_loop(iterator, num_steps) -> float32 [num_steps, 7].

  Each row holds the global sums of training_metrics.METRICS for one step.

  Args:
    strategy: the tf.distribute strategy the model was built under.
    model: `modeling.TransformerLM`.
    optimizer: `optimization.AdamWeightDecay` (any Keras optimizer works).
    use_xla: jit_compile the forward/backward pass (dense head, no gather).
    loss_denominator: float, the divisor of every step's global loss sum
      (`losses.constant_denominator`); None: each step's global target-weight sum.
  """
  gather = not (use_xla or isinstance(strategy, tf.distribute.TPUStrategy))
  variables = model.trainable_variables

  def compute_gradients(features, denominator):
    with tf.GradientTape() as tape:
      # One denominator on every replica: the optimizer sums the replicas'
      # gradients, which then equal the gradient of the global-batch loss.
      loss, terms = losses.training_loss(model, features, denominator, gather_targets=gather)
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
    grads, terms = compute_gradients(features, denominator)
    # AdamWeightDecay sums over replicas, clips the global norm to 1.0, then
    # applies the update (optimization.py); we must not clip here as well.
    optimizer.apply_gradients(zip(grads, variables))
    terms.update(_batch_counts(features))
    return tf.stack([terms[k] for k in training_metrics.METRICS])

  @tf.function
  def train_loop(iterator, num_steps):
    rows = tf.TensorArray(tf.float32, size=num_steps)
    for i in tf.range(num_steps):
      per_replica = strategy.run(step_fn, args=(next(iterator),))
      rows = rows.write(i, distribute_utils.sum_replicas(strategy, per_replica))
    return rows.stack()

  return train_loop


def make_eval_step(strategy, model, use_xla=False, element_spec=None):
  """Returns eval_step(distributed batch) -> float32 [7 + 12] global sums:
  training_metrics.METRICS, then (continuous head) the cosine-logit cross-entropy sum at
  each of losses.LOGIT_SCALES.

  element_spec: the distributed eval dataset's; as the input signature it
  makes one trace serve every bucket length and the partial last batches.
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


class _Evaluator(object):
  """Evaluates on --eval_file (or synthetic data) into output_dir/eval."""

  def __init__(self, strategy, model, params, setup, writer):
    self._strategy = strategy
    self._dataset_fn = training_setup.make_dataset_fn(params, setup.config, setup.vocab, False)
    self._continuous = setup.config.output_layer == "continuous"
    self._writer = writer
    self._eval_step = make_eval_step(
      strategy,
      model,
      params.use_xla,
      strategy.distribute_datasets_from_function(self._dataset_fn).element_spec,
    )

  def run(self, step):
    dist = self._strategy.distribute_datasets_from_function(self._dataset_fn)
    result = evaluate(self._eval_step, dist, self._continuous)
    logging.info(
      "eval at step %d: %s", step, " ".join(f"{k} {v:.4g}" for k, v in sorted(result.items()))
    )
    with self._writer.as_default():
      for name in ("loss", "perplexity", "accuracy", "cosine_logit_ce"):
        if name in result:
          training_metrics.write_scalar(name, result[name], step)
    return result


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
  # Made by `save_to` after the restore (it reads the index file a roll-back rewrites).
  manager: tf.train.CheckpointManager = None

  @classmethod
  def create(cls, params, config, strategy):
    with strategy.scope():
      model = modeling.build_model(config, params.model_type)
      optimizer = optimization.create_optimizer(
        params.learning_rate,
        params.num_train_steps,
        params.num_warmup_steps,
        params.weight_decay_rate,
      )
      optimizer.build(model.trainable_variables)
    input_batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_batches")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, input_batches=input_batches)
    return cls(model, optimizer, input_batches, checkpoint)

  def restore_or_initialise(self, params, target_table, chief):
    """Resumes from the newest readable checkpoint of the output dir, else warm-starts / sets
    continuous targets.

    A checkpoint that cannot be read (cut short by a full disk or a crash, corrupt) is skipped
    with a warning for the one saved before it, and the chief rolls the index file back to that
    one; a dir whose checkpoints all fail is refused, never silently trained from step 0.

    Returns:
      The checkpoint prefix resumed from, or None.

    Raises:
      CheckpointError: there are checkpoints, and none can be read.
    """
    checkpoint, found = model_dir.restore_newest_readable(self.checkpoint, params.output_dir)
    if checkpoint is not None:
      if checkpoint != found[0]:
        logging.warning("resuming from %s, the newest checkpoint that can be read", checkpoint)
        if chief:
          model_dir.roll_back_to(params.output_dir, checkpoint)
      logging.info(
        "resumed from %s at step %d (input position %d batches)",
        checkpoint,
        self.step,
        int(self.input_batches.numpy()),
      )
      return checkpoint
    if found:
      raise CheckpointError(
        f"none of the {len(found)} checkpoints in {params.output_dir} can be read (the warnings "
        "above say why): move them away to train from step 0"
      )
    if params.init_checkpoint:
      model_dir.warm_start(self.model, params.init_checkpoint)
    if target_table is not None:
      self.model.lm_head.set_target_embeddings(target_table)
    return None

  def save_to(self, write_dir, params):
    """Starts the CheckpointManager that saves this state into `write_dir`."""
    self.manager = tf.train.CheckpointManager(
      self.checkpoint,
      write_dir,
      max_to_keep=params.keep_checkpoint_max,
      step_counter=self.optimizer.iterations,
      checkpoint_name=model_dir.CHECKPOINT_NAME,
    )

  @property
  def step(self):
    return int(self.optimizer.iterations.numpy())

  def learning_rate(self):
    lr = self.optimizer.learning_rate
    return float(lr.numpy()) if hasattr(lr, "numpy") else float(lr)


def _init_seed(params):
  return params.seed if params.init_seed is None else params.init_seed


@contextlib.contextmanager
def _data_order_seed(params):
  """Builds the training datasets under the global TF seed --seed, whatever --init_seed.

  tf.data folds the global TF seed into its shuffle seeds, so the data order would follow
  --init_seed otherwise (and a resume is exact only under the same global seed). On exit the
  global seed is --init_seed again, from the start of its stream, for the dropout of the train
  loop traced next. Without --init_seed it changes nothing.
  """
  if params.init_seed is None:
    yield
    return
  tf.random.set_seed(params.seed)
  try:
    yield
  finally:
    tf.random.set_seed(params.init_seed)


def training_iterator(params, strategy, setup, skip_batches):
  """The distributed iterator over the training batches, past the first `skip_batches`, in the
  data order of --seed (`_data_order_seed`)."""
  with _data_order_seed(params):
    return iter(
      strategy.distribute_datasets_from_function(
        training_setup.make_dataset_fn(params, setup.config, setup.vocab, True, skip_batches)
      )
    )


def _at_boundary(step, every):
  return every > 0 and step % every == 0


def _next_boundary(step, every):
  return (step // every + 1) * every if every > 0 else float("inf")


class _Run(object):
  """The step loop of one `train` call and what it accumulates."""

  def __init__(self, params, strategy, setup, state, latest):
    self.params, self.strategy, self.setup = params, strategy, setup
    self.state = state
    self.chief = distribute_utils.is_chief(strategy)
    self.start_step = self.step = state.step
    self.skip_batches = int(state.input_batches.numpy())
    self.step_losses = []
    self.stopped_by = "num_train_steps"
    self.last_saved = self.start_step if latest else None
    self.last_path = latest
    self.eval_result = None
    self.run_start = time.time()
    self.meter = training_metrics.Throughput(setup.config, params.use_xla)
    self.iterator = training_iterator(params, strategy, setup, self.skip_batches)
    self.train_loop = self._make_train_loop()
    self.train_writer, eval_writer = self._summary_writers()
    self.evaluator = None
    if params.eval_file or (params.synthetic_data and params.eval_every_steps):
      self.evaluator = _Evaluator(strategy, state.model, params, setup, eval_writer)
    self._writers = (self.train_writer, eval_writer)

  def _summary_writers(self):
    if not self.chief:
      return tf.summary.create_noop_writer(), tf.summary.create_noop_writer()
    return tuple(
      tf.summary.create_file_writer(os.path.join(self.params.output_dir, name))
      for name in ("train", "eval")
    )

  def loop(self):
    """Trains until num_train_steps or a stop request."""
    p = self.params
    stop = _StopCondition(self.strategy, p)
    logging.info(
      "training %s (%s head) from step %d to %d, %d replicas, global batch %d, %s",
      p.model_type,
      self.setup.config.output_layer,
      self.start_step,
      p.num_train_steps,
      self.strategy.num_replicas_in_sync,
      p.train_batch_size,
      "bf16" if p.mixed_precision else "fp32",
    )
    try:
      while self.step < p.num_train_steps:
        self._run_steps(self._steps_until_next_event(), stop)
        if _at_boundary(self.step, p.save_checkpoints_steps):
          self._save("interval")
          if p.deterministic:
            self._restart_random_streams()
        if self.evaluator and _at_boundary(self.step, p.eval_every_steps):
          self.eval_result = self.evaluator.run(self.step)
        reason = stop.reason()
        if reason:
          self.stopped_by = reason
          logging.info("stopping at step %d (%s)", self.step, reason)
          break
    finally:
      stop.uninstall()

  def _restart_random_streams(self):
    """Starts the train loop's random streams afresh, as a resumed run does.

    Dropout draws from stateful random kernels whose seeds are fixed by the global seed, but
    whose positions in their streams live in the traced function, not in the checkpoint: a
    run resumed from this checkpoint starts them at the beginning. A fresh trace here does
    the same, so that the run and any run resumed from its checkpoints draw the same masks.
    """
    self.train_loop = self._make_train_loop()

  def _make_train_loop(self):
    p = self.params
    denominator = losses.constant_denominator(
      p.loss_normalization, p.train_batch_size, p.max_seq_length
    )
    return make_train_loop(
      self.strategy, self.state.model, self.state.optimizer, p.use_xla, denominator
    )

  def _steps_until_next_event(self):
    """Steps of the next tf.function call: up to --steps_per_loop, ending at
    the next checkpoint, progress line or eval."""
    p, step = self.params, self.step
    num = min(
      p.steps_per_loop,
      p.num_train_steps - step,
      _next_boundary(step, p.save_checkpoints_steps) - step,
      _next_boundary(step, p.log_every_steps) - step,
      _next_boundary(step, p.eval_every_steps) - step if self.evaluator else float("inf"),
    )
    return int(max(1, num))

  def _run_steps(self, num, stop):
    """One train_loop call of `num` steps, with its scalars and logging."""
    t0 = time.time()
    rows = self.train_loop(self.iterator, tf.constant(num, tf.int32)).numpy()
    seconds = time.time() - t0
    self.step += num
    self.state.input_batches.assign_add(num)
    self.step_losses.extend(float(row[0] / max(row[1], 1e-9)) for row in rows)
    learning_rate = self.state.learning_rate()
    scalars = self.meter.add(rows.sum(0), num, seconds, learning_rate)
    with self.train_writer.as_default():
      for name, value in scalars.items():
        training_metrics.write_scalar(name, value, self.step)
    if (
      _at_boundary(self.step, self.params.log_every_steps)
      or self.step >= self.params.num_train_steps
    ):
      self.meter.log_window(
        self.step,
        self.params.num_train_steps,
        learning_rate,
        time.time() - self.run_start,
        stop.seconds_left(),
      )

  @property
  def finished(self):
    """num_train_steps reached (a stop request may have come at the last step too)."""
    return self.step >= self.params.num_train_steps

  def _save(self, why):
    try:
      self.last_path = self.state.manager.save(checkpoint_number=self.step)
    except (tf.errors.OpError, OSError) as e:
      # A full disk: TF removes its temporary files and leaves the index file as it was, so the
      # last whole checkpoint stays the latest. Stopping here (exit 2, not 75) is no crash loop.
      resume = f"resumes from {self.last_path}" if self.last_path else "starts from step 0"
      raise CheckpointError(
        f"cannot save the checkpoint of step {self.step} in {self.state.manager.directory}: "
        f"{model_dir.error_line(e)}; a re-run with the same command {resume}"
      ) from e
    self.last_saved = self.step
    logging.info("saved checkpoint for step %d (%s): %s", self.step, why, self.last_path)

  def finish(self):
    """Final checkpoint, eval and calibration; returns the run's summary."""
    if self.last_saved != self.step:
      self._save(self.stopped_by if self.stopped_by != "num_train_steps" else "final")
    finished = self.finished and self.stopped_by == "num_train_steps"
    if self.evaluator and finished and not _at_boundary(self.step, self.params.eval_every_steps):
      self.eval_result = self.evaluator.run(self.step)
    self._calibrate_logit_scale()
    for writer in self._writers:
      writer.flush()
    summary = self._summary()
    if self.chief:
      with tf.io.gfile.GFile(os.path.join(self.params.output_dir, "train_summary.json"), "w") as f:
        json.dump(
          {k: v for k, v in summary.items() if k != "step_losses"}, f, indent=2, sort_keys=True
        )
    logging.info(
      "done: step %d, %.2f steps/s, %.0f tokens/s, %.1f GFLOP/s (stopped by %s)",
      self.step,
      summary["steps_per_second"],
      summary["tokens_per_second"],
      summary["gflops_per_second"],
      self.stopped_by,
    )
    return summary

  def _calibrate_logit_scale(self):
    """A continuous head's inference scale: the one that fits the eval data
    best (it changes the size of scores and perplexities, not which token
    ranks first), stored in config.json."""
    config = self.setup.config
    if not (
      config.output_layer == "continuous"
      and self.eval_result
      and self.params.calibrate_logit_scale
      and self.step >= self.params.num_train_steps
    ):
      return
    config.continuous_logit_scale = self.eval_result["best_logit_scale"]
    logging.info(
      "continuous_logit_scale calibrated on the eval set: %g (perplexity %.4g)",
      config.continuous_logit_scale,
      self.eval_result["best_scale_perplexity"],
    )
    if self.chief:
      self.setup.write_model_files(self.params.output_dir)

  def _summary(self):
    p = self.params
    return dict(
      {
        "model_type": p.model_type,
        "output_layer": self.setup.config.output_layer,
        "mixed_precision": p.mixed_precision,
        "use_xla": p.use_xla,
        "strategy": p.strategy,
        "replicas": self.strategy.num_replicas_in_sync,
        "start_step": self.start_step,
        "final_step": self.step,
        "finished": self.finished,
        "skip_batches": self.skip_batches,
        "input_batches": int(self.state.input_batches.numpy()),
        "stopped_by": self.stopped_by,
        "checkpoint": self.last_path,
        "step_losses": self.step_losses,
        "eval": self.eval_result,
        "wall_seconds": time.time() - self.run_start,
      },
      **self.meter.summary(),
    )


def train(params, strategy=None):
  """Trains (or resumes) according to `params`.

  On the chief, the run holds `output_dir_lock(params.output_dir)` from before it reads the
  latest checkpoint until its summary is written.

  Args:
    params: `TrainParams`.
    strategy: an existing strategy (tests); default from params.strategy.

  Returns:
    dict summary: start_step, final_step, finished (num_train_steps reached), skip_batches,
    step_losses (the per-step mean losses of this run), stopped_by, throughput figures, the
    final eval (if any), checkpoint path.

  Raises:
    OutputDirBusy: another run holds the lock of params.output_dir.
  """
  if params.deterministic:
    tf.config.experimental.enable_op_determinism()
  strategy = strategy or distribute_utils.get_strategy(
    params.strategy, params.tpu, params.num_cpu_devices
  )
  write_dir = distribute_utils.worker_write_dir(params.output_dir, strategy)
  tf.io.gfile.makedirs(write_dir)
  with contextlib.ExitStack() as lock:
    if distribute_utils.is_chief(strategy):
      lock.enter_context(output_dir_lock(params.output_dir))
    summary = _train_locked(params, strategy, write_dir)
  if write_dir != params.output_dir:
    shutil.rmtree(write_dir, ignore_errors=True)
  return summary


def _train_locked(params, strategy, write_dir):
  """The run of `train`, under the output dir's lock."""
  set_precision_policy(params.mixed_precision)
  _warn_if_bfloat16_is_emulated(params)
  # The seed of Python, NumPy and TF: weight initialisation and dropout (the data order's global
  # TF seed is `_data_order_seed`'s).
  keras.utils.set_random_seed(_init_seed(params))
  resuming = model_dir.latest_checkpoint(params.output_dir) is not None
  with cli.user_input():  # the vocab, config and target embeddings the flags name
    setup = training_setup.prepare_model(params, resuming=resuming)
  chief = distribute_utils.is_chief(strategy)
  if chief:
    setup.write_model_files(params.output_dir)
  state = _TrainState.create(params, setup.config, strategy)
  latest = state.restore_or_initialise(params, setup.target_table, chief)
  state.save_to(write_dir, params)
  run = _Run(params, strategy, setup, state, latest)
  run.loop()
  return run.finish()

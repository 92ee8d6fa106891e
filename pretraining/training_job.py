# coding=utf-8
"""run_pretraining.py's job: `JobParams` (its flags), then `run(params)`: the flags and records
checked, the strategy, the output dir's lock and run record (run.json), resume, the run of
pretraining/training.py's step functions in training_loop, and the summary (train_summary.json).

The libraries it calls take role dataclasses built from the params (`role`): training_setup's
`ModelSpec` and `DataSpec`, training's `Schedule`, distillation's `Settings`; never the params.
"""

import contextlib
import dataclasses
import json
import os
import re
import time

from absl import logging
import keras
import tensorflow as tf

import kinds
from lm import checkpoints
from lm import warm_start
import modeling
import optimization
from pretraining import distillation
from pretraining import input_pipeline
from pretraining import losses
from pretraining import training
from pretraining import training_loop
from pretraining import training_metrics
from pretraining import training_setup
from util import cli
from util import distribute_utils
from util import io_utils
from util import machine
from util import runs

# The run's summary in --output_dir (`_finish`).
SUMMARY_FILE = "train_summary.json"

# ----------------------------------------------------------------- parameters


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


def _check_warmup(steps, warmup):
  """A warmup longer than the run never reaches the peak learning rate: refused by the schedule's
  own rule (`optimization.LinearWarmupLinearDecay`), not shortened (the schedule is the user's;
  BERT warms up for about a tenth of the steps). The one check of the rule: JobParams'."""
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
  else:
    # A checkpoint without its data was found only by the warm start, after config.json and
    # run.json were written, which then refused the corrected command as another job.
    prefix = path if os.path.exists(path + ".index") else checkpoints.latest_checkpoint(path)
    if prefix is None:
      raise ValueError("a folder without a checkpoint (ckpt-N.index)")
    missing = checkpoints.missing_file(prefix)
    if missing:
      raise ValueError(f"{missing} is missing")


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
  hidden_dropout_prob: float = cli.param(
    _config_help("hidden_dropout_prob"), None, check=modeling.check_dropout
  )
  attention_probs_dropout_prob: float = cli.param(
    _config_help("attention_probs_dropout_prob"), None, check=modeling.check_dropout
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
class JobParams:
  """Everything `train` needs: run_pretraining.py's flags. `config_overrides` holds those of
  `config_flags` (a caller may give it directly); the fields marked `result=False` are those a
  resume may change (`run_identity`)."""

  output_dir: str = cli.param(
    "Checkpoints, config.json, vocab.txt, TensorBoard logs.", io=cli.OUTPUT
  )
  model_type: str = cli.param("Which LM to train.", "tta", kinds.PRETRAINABLE)
  input_file: str = cli.param(
    "Glob of training TFRecords (create_pretraining_data.py).",
    None,
    io=cli.INPUT,
    unused_with=("synthetic_data",),
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
  weight_decay_rate: float = cli.param("Decoupled weight decay.", 0.01, check=cli.non_negative)
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
  mlm_probability: float = cli.param("biLM masking rate.", 0.15, check=cli.fraction)
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
    training.PRECISIONS,
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
    check=cli.non_negative,
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
    check=cli.positive,
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

  def __post_init__(self):
    _check_warmup(self.num_train_steps, self.num_warmup_steps)
    self.config_overrides = {**self.config_overrides, **self.config_flags.overrides()}


def role(cls, params):
  """The role dataclass `cls` (training_setup.ModelSpec, DataSpec) of `params`: its fields are
  JobParams fields of the same names and meanings."""
  return cls(**{f.name: getattr(params, f.name) for f in dataclasses.fields(cls)})


def prepare_model(params, resuming):
  """`training_setup.prepare_model` of `params` (its `ModelSpec`), the distillation flags checked
  first; ValueError (one line) naming the flag or file that does not fit."""
  distill_settings(params)
  return training_setup.prepare_model(role(training_setup.ModelSpec, params), resuming)


def _schedule(params):
  return training.Schedule(
    params.learning_rate,
    params.num_train_steps,
    params.num_warmup_steps,
    params.weight_decay_rate,
    loss_scaling=params.mixed_precision == "float16",
  )


def distill_settings(params):
  """The `distillation.Settings` of `params` (None without --teacher); ValueError in one line for
  flags that cannot distil."""
  if not params.teacher:
    for flag in ("distill_temperature", "distill_weight"):
      if getattr(params, flag) is not None:
        raise ValueError(f"--{flag} sets the distillation of --teacher: give it too")
    return None
  if kinds.get(params.model_type).target != "self":
    raise ValueError(
      f"--teacher distils into a T-TA kind (the kinds trained on every token: "
      f"{', '.join(n for n, k in kinds.KINDS.items() if k.pretrainable and k.target == 'self')}), "
      f"not --model_type={params.model_type}"
    )
  if params.output_layer != "softmax":
    raise ValueError("--teacher distils into a softmax head, not --output_layer=continuous")
  if params.use_xla or params.strategy == "tpu":
    raise ValueError(
      "--teacher runs a batch's masked copies in chunks of a count known only at run time: "
      "not under --use_xla or --strategy=tpu"
    )
  temperature = (
    distillation.DEFAULT_TEMPERATURE
    if params.distill_temperature is None
    else params.distill_temperature
  )
  weight = distillation.DEFAULT_WEIGHT if params.distill_weight is None else params.distill_weight
  if not temperature > 0:
    raise ValueError(f"--distill_temperature {temperature} must be > 0")
  if not 0 <= weight <= 1:
    raise ValueError(f"--distill_weight {weight} must be in [0, 1]")
  return distillation.Settings(float(temperature), float(weight))


def run_identity(params, input_files=None):
  """`runs.identity`: the command, `input_files` (the files --input_file matches, `check_data`),
  and every field not marked result=False (those a resume may change).
  """
  data = None
  if input_files:
    data = [runs.path_identity(path) for path in input_files]
  # Fields a run has only when set (a warm start, a teacher, fixed shapes): the identities
  # recorded before they existed still match. --mixed_precision keeps the values of the boolean it
  # was: an old run resumes with a bare flag.
  optional = {}
  if params.init_checkpoint:
    optional["init_checkpoint"] = warm_start.identity(params.init_checkpoint, params.init_layers)
  if params.teacher:
    optional["teacher"] = distillation.identity(params.teacher, distill_settings(params))
  if params.pad_to_max_seq_length:
    optional["pad_to_max_seq_length"] = True
  precision = {None: False, "bfloat16": True}.get(params.mixed_precision, params.mixed_precision)
  return runs.identity(
    "run_pretraining.py", params, input_file=data, mixed_precision=precision, **optional
  )


def _run_record(params, records):
  """`runs.Record` of --output_dir (local or in a bucket); config.json and vocab.txt, which every
  run writes anew, are not among its outputs. Unrecorded checkpoints are adopted.
  records: `check_data`'s.
  """
  outputs = [
    checkpoints.CHECKPOINT_NAME + "-*",
    "checkpoint",
    # TensorBoard's event files; a file of the user's in train/ or eval/ is no output.
    "train/events.out.tfevents.*",
    "eval/events.out.tfevents.*",
    SUMMARY_FILE,
  ]
  with cli.user_input():
    return runs.Record(
      params.output_dir,
      run_identity(params, records.get("input_file")),
      outputs,
      params.overwrite,
      adopt_unrecorded=True,
    )


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


def _init_seed(params):
  return params.seed if params.init_seed is None else params.init_seed


def run(params):
  """run_pretraining.py's job: the inputs and the output checked, then `train`; returns its
  summary.

  Raises:
    cli.InputError: naming the flag, before a strategy, an output dir or a model is made.
  """
  records = check_data(params)
  io_utils.check_outputs_apart(params)
  io_utils.check_output_path(params.output_dir, "output_dir")
  return train(params, records=records)


def check_data(params):
  """The records' files: {"input_file": [paths], "eval_file": [paths] (when given)}, each glob
  expanded once here; the batching flags agree. cli.InputError naming the flag, before anything
  is written ({} for --synthetic_data: no file is read)."""
  if params.synthetic_data:
    return {}
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
  records = {}
  for name in ("input_file", "eval_file"):
    pattern = getattr(params, name)
    if pattern:
      try:
        records[name] = io_utils.expand_globs(pattern)
      except ValueError as e:
        raise cli.InputError(f"--{name}: {e}") from None
      # A folder matched (--input_file=DIR) was read as a file at the first step (a traceback); a
      # pipe or device would be read again at each epoch.
      odd = next((p for p in records[name] if "://" not in p and not os.path.isfile(p)), None)
      if odd and os.path.isdir(odd):
        raise cli.InputError(
          f"--{name} {odd}: is a directory; give its record files (e.g. {odd}/train-*)"
        )
      if odd:
        raise cli.InputError(
          f"--{name} {odd}: not a regular file (a pipe or device?); the records are read again "
          "at each epoch: give a file"
        )
  return records


def _check_records(records):
  """Refuses an input file of `records` ({flag: paths}) that is not TFRecords, and a glob whose
  files hold no record at all (the repeated training stream would wait for one forever), by each
  file's first record. Run once the strategy exists (a TF op before it would fix the devices) and
  before any file is written."""
  for name, paths in records.items():
    count = 0
    for path in paths:
      try:
        count += sum(1 for _ in tf.data.TFRecordDataset(path).take(1))
      except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        found = re.search(r"corrupted record at \d+", e.message or "")
        why = found.group(0) if found else type(e).__name__
        raise cli.InputError(f"--{name} {path}: not a TFRecord file ({why})") from None
    if not count:
      raise cli.InputError(f"--{name}: its {len(paths)} file(s) hold no records")


def train(params, strategy=None, records=None):
  """Trains (or resumes) per `params`; returns the run's summary dict (train_summary.json, plus
  step_losses: this run's per-step mean losses).

  The chief holds `training_loop.output_dir_lock` from before it reads the latest checkpoint until
  the summary is written (OutputDirBusy). strategy: an existing one (tests), else params.strategy.
  records: `check_data`'s (`run` has them), else found here.
  """
  if records is None:
    records = check_data(params)
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
    summary = _train_locked(params, strategy, write_dir, records)
  if write_dir != params.output_dir:
    io_utils.rmtree(write_dir, ignore_errors=True)
  return summary


def _train_locked(params, strategy, write_dir, records):
  training.set_precision_policy(params.mixed_precision)
  _warn_if_precision_is_slow(params)
  # The seed of Python, NumPy and TF: weight initialisation and dropout (the data order's global
  # TF seed is `training.training_iterator`'s).
  keras.utils.set_random_seed(_init_seed(params))
  chief = distribute_utils.is_chief(strategy)
  # Another job's training is refused before anything is read or written; --overwrite clears it
  # once the flags' files have been read.
  record = _run_record(params, records) if chief else None
  resuming = not params.overwrite and checkpoints.latest_checkpoint(params.output_dir) is not None
  with cli.user_input():  # the vocab, config and target embeddings the flags name
    setup = prepare_model(params, resuming)
    distill = distill_settings(params)
  _check_records(records)
  if record:
    record.start()
  if chief:
    setup.write_model_files(params.output_dir)

  # The model, optimizer and input position: resumed, else warm-started.
  state = training.TrainState.create(setup.config, params.model_type, _schedule(params), strategy)
  latest = _restore_or_initialise(state, params, setup, chief)
  distiller = None
  if setup.teacher is not None:
    with cli.user_input():
      distiller = distillation.Distiller.load(params.teacher, distill, strategy)
  progress = training.Progress(
    state.step,
    int(state.input_batches.numpy()),
    latest,
    nonfinite=training.NonfiniteGuard(params.max_nonfinite_steps),
  )

  # What the steps read and write, made in this order: the datasets draw their seeds from the
  # global seed's stream.
  meter = training_metrics.Throughput(setup.config, params.use_xla)
  data = role(training_setup.DataSpec, params)
  iterator = training.training_iterator(
    data, params.init_seed, strategy, setup, progress.skip_batches
  )
  train_loop = _new_train_loop(params, strategy, state, distiller)
  train_writer, eval_writer = _summary_writers(params.output_dir, chief)
  evaluator = None
  if params.eval_file or (params.synthetic_data and params.eval_every_steps):
    evaluator = training.make_evaluator(
      strategy, state.model, data, params.use_xla, setup, eval_writer, progress
    )

  def train_steps(num):
    training.run_steps(train_loop, iterator, num, state, meter, train_writer, progress)

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
      os.path.join(params.output_dir, SUMMARY_FILE),
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
  return training.make_train_loop(
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

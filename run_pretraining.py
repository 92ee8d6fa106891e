# coding=utf-8
"""Pretrains a T-TA, biLM or uniLM: flags -> `training.TrainParams` -> train.

One data set serves all three objectives (docs/DESIGN.md §3): tta predicts
every input token without seeing it, bilm the ~15% masked ones (dynamic
masking), unilm the next token (pretraining/losses.py). The head is BERT's tied
vocabulary softmax or, with --output_layer=continuous, ELMo-C's continuous
output layer (cosine distance to a frozen pretrained embedding of the
target; no V-sized softmax; `modeling.ContinuousHead`). The loop, its
checkpoints, resume, signals, eval and logging are pretraining/training.py's; each flag
below is a `TrainParams` field (same name, default and help), plus the
model-size flags and --config_json, which override config fields.

The output dir becomes a model dir (lm/model_dir.py): config.json (with
model_type, do_lower_case, normalization, output_layer) and vocab.txt are
written beside the checkpoints first, so every run_* script takes
--model_dir alone. A run restarted with the same --output_dir resumes from
its latest checkpoint, data position included, if it is the same job
(output_dir/run.json: the data, input files and every flag that changes the
model; a larger --num_train_steps extends it); another is refused in one line
naming the first field that differs, and --overwrite starts over. TensorBoard
scalars go to output_dir/train and output_dir/eval, train_summary.json to
output_dir.

Example (the paper's model; add --mixed_precision on GPUs, TPUs and CPUs with
AMX/AVX512_BF16):
  python run_pretraining.py --model_type=tta \\
    --input_file='data/train-*.tfrecord' --eval_file='data/eval-*.tfrecord' \\
    --vocab_file=data/vocab.txt --output_dir=runs/tta \\
    --num_train_steps=100000 --num_warmup_steps=5000

Exit codes: 0 when --num_train_steps is reached (or already was);
75 (`training_loop.EXIT_UNFINISHED`) when SIGTERM/SIGINT or --train_minutes stopped the run
before its last step, after saving a checkpoint (the same command resumes);
2 with one line on stderr (util/cli.py) for a wrong input, such as an
--output_dir whose lock (run.lock; `training_loop.output_dir_lock`) another live
run holds: two runs never write one dir at once.

Seeds: --seed fixes the data order and the biLM masks, --init_seed (default
--seed) the weight initialisation and dropout; runs that differ only in
--init_seed see the same batches in the same order (reproduce.py --seeds).
--deterministic turns on TF op determinism: the same seeds and data give the
same losses, and a run killed (even kill -9) and restarted resumes
bit-identically to one never stopped.

Multi-worker: run the same command on every worker with TF_CONFIG set and
--strategy=multi_worker; only the chief writes to --output_dir (the others
write their checkpoints to a temporary directory, as the tf.distribute
guide recommends) and all of them must see --output_dir to resume. A stop
request (signal, --train_minutes) on any worker stops all of them at the
same step, so none waits forever in a collective.

The vocabulary softmax is most of the training FLOPs and the continuous head
removes it; bfloat16 does not pay on a CPU without native bf16 (the run
warns). Measured speeds of both heads and precisions: docs/DESIGN.md §6.
"""

import os

# Before TensorFlow starts: its default CPU allocator hands every large
# buffer (a [2048, 30000] logits tensor is 245 MB) back to the OS and takes
# it again, page-faulting on each step; the BFC pool keeps them (the speed-up
# measured: docs/DESIGN.md §6).
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

# pylint: disable=g-import-not-at-top,wrong-import-position
import dataclasses
import json
import sys

from absl import flags
from absl import logging

import modeling
from pretraining import training
from util import cli
from util import io_utils
from util import training_loop

_DEFINE_BY_TYPE = {int: flags.DEFINE_integer, float: flags.DEFINE_float}


def define_flags(flag_values=flags.FLAGS):
  """Defines the command-line flags (BERT's names where BERT has them), in `flag_values`."""
  cli.define_param_flags(training.TrainParams, flag_values)
  flags.DEFINE_string(
    "config_json",
    None,
    "Inline JSON overriding config fields, e.g. '{\"hidden_size\": 256}'.",
    flag_values=flag_values,
  )
  # Unset, a field comes from --bert_config_file, the resumed run's config.json or TTAConfig's
  # default.
  fields = dataclasses.fields(modeling.TTAConfig)
  for name, default in [(f.name, f.default) for f in fields if f.metadata.get("pretraining_flag")]:
    if default is dataclasses.MISSING:
      flags.DEFINE_integer(name, None, "Default: the vocab file's size.", flag_values=flag_values)
    else:
      _DEFINE_BY_TYPE[type(default)](
        name, None, f"Default {default} (the paper's).", flag_values=flag_values
      )


def params_from_flags(flag_values):
  """Builds `training.TrainParams` from parsed absl flags."""
  fv = flag_values
  if not fv.output_dir:
    raise cli.InputError("--output_dir is required")
  try:
    overrides = json.loads(fv.config_json) if fv.config_json else {}
  except ValueError as e:
    raise cli.InputError(f"--config_json is not JSON: {e}") from None
  flagged = modeling.TTAConfig.field_names("pretraining_flag")
  overrides.update({name: fv[name].value for name in flagged if fv[name].value is not None})
  values = cli.param_values(training.TrainParams, fv)
  if values["bucket_boundaries"]:
    values["bucket_boundaries"] = [int(b) for b in values["bucket_boundaries"]]
  return training.TrainParams(config_overrides=overrides, **values)


def check_data(params):
  """What is cheap first: the TFRecord globs match files before a strategy, an output dir or a
  model is made (cli.InputError naming the flag)."""
  if params.synthetic_data:
    return  # no file is read
  if not params.input_file:
    raise cli.InputError("--input_file is required (or --synthetic_data)")
  for name in ("input_file", "eval_file"):
    pattern = getattr(params, name)
    if pattern:
      try:
        io_utils.expand_globs(pattern)
      except ValueError as e:
        raise cli.InputError(f"--{name}: {e}") from None


def main(argv):
  del argv
  # cli.run prints a cli.InputError (a bad flag; training_loop.OutputDirBusy) as one line.
  params = params_from_flags(flags.FLAGS)
  check_data(params)
  io_utils.check_output_path(params.output_dir, "output_dir")
  summary = training.train(params)
  if not summary["finished"]:
    logging.warning(
      "stopped by %s at step %d before --num_train_steps: exiting %d so that the run is "
      "requeued; the same command resumes it",
      summary["stopped_by"],
      summary["final_step"],
      training_loop.EXIT_UNFINISHED,
    )
    sys.exit(training_loop.EXIT_UNFINISHED)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

# coding=utf-8
"""Pretrains a T-TA, biLM or uniLM: flags -> `training.TrainParams` -> train.

Each flag is a `TrainParams` field, plus the model-size flags and --config_json, which override
config fields. pretraining/training.py owns the loop, checkpoints, resume and signals; the
manual and exit codes: README "Pretrain"; the design: docs/DESIGN.md §3.

  python run_pretraining.py --model_type=tta --input_file='data/train-*.tfrecord' \\
    --vocab_file=data/vocab.txt --output_dir=runs/tta --num_train_steps=100000
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

from absl import flags

import modeling
from pretraining import training
from pretraining import training_loop
from util import cli
from util import io_utils

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
  io_utils.check_outputs_apart(params)
  io_utils.check_output_path(params.output_dir, "output_dir")
  summary = training.train(params)
  if not summary["finished"]:
    training_loop.exit_unfinished(
      f"stopped by {summary['stopped_by']} at step {summary['final_step']} before --num_train_steps"
    )


if __name__ == "__main__":
  define_flags()
  cli.run(main)

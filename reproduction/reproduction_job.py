"""reproduce.py's job: `JobParams` (its flags), then `run(params)`: the work dir and data checked,
the mode's settings with the flags' overrides (`mode_settings`), each stage of `stages` in order
(each skipped when its stamp says it is done), then report.md and report.json.
"""

import dataclasses
import json
import os

from absl import logging

from pretraining import pretraining_data
from reproduction import modes
from reproduction import reproduction_report
from reproduction import seed_runs
from reproduction import stages
from util import cli
from util import io_utils
from util import machine
from util import progress


@dataclasses.dataclass(frozen=True)
class JobParams:
  """reproduce.py's flags (one `cli.param` field each): the mode, the work dir, the models and
  seeds, and limits that override the mode's `modes.Settings`. A limit left None takes the mode's
  value (`mode_settings`); 0 means none."""

  mode: str = cli.param(
    "quick: minutes, tiny config and data slices (checks the "
    "whole pipeline); full: the CPU-scale reproduction.",
    "quick",
    sorted(modes.MODES),
  )
  work_dir: str = cli.param(
    "Where every stage writes (default runs/reproduce/<mode> in the repository).", None
  )
  budget_minutes: float = cli.param(
    "Training time per neural model "
    "(default: 1 in quick mode, 40 in full mode); converted "
    "to a step count once, by the calibration run.",
    None,
    check=cli.positive,
  )
  train_steps: int = cli.param(
    "Train exactly this many steps per model instead of converting --budget_minutes.",
    None,
    lower_bound=1,
  )
  models: list = cli.param("Neural LMs to train.", modes.MODEL_TYPES)
  seeds: int = cli.param(
    "Train and evaluate every neural LM this many times. Seed 1 is run_pretraining.py's default "
    "seed (models/<kind>, eval/, ...); seed k > 1 trains with --init_seed=k in seed<k>/: another "
    "weight initialisation and dropout, the same data order, biLM masks and steps. Every "
    "evaluation but the learning curves runs per seed; the report gives each figure's mean and "
    "per-seed values, and calls a comparison significant only when it is in every seed.",
    1,
    lower_bound=1,
  )
  asr_max_lists: int = cli.param(
    "First N lists of each LibriSpeech set for T-TA, uniLM and the 5-gram (0: all; default "
    "per mode).",
    None,
  )
  asr_sample_lists: int = cli.param(
    "A seeded random sample of N lists per LibriSpeech set, scored by every LM including the "
    "biLM, which needs one pass per token of every hypothesis (default per mode).",
    None,
  )
  nmt_max_lists: int = cli.param("First N WMT21 segments (0: all; default per mode).", None)
  sts_max_pairs: int = cli.param("First N pairs of each STS set (0: all; default per mode).", None)
  max_books: int = cli.param(
    "Read only this many Gutenberg books (0: all; default per mode).", None
  )
  curve_points: int = cli.param(
    "Learning curves: evaluate this many checkpoints per model, spread over training (default "
    "per mode).",
    None,
    lower_bound=2,
  )
  curve_asr_lists: int = cli.param(
    "Learning curves: a seeded sample of N lists of each dev set per checkpoint (default per "
    "mode).",
    None,
  )
  data_dir: str = io_utils.data_dir_param()

  def __post_init__(self):
    unknown = sorted(set(self.models) - set(modes.MODEL_TYPES))
    if unknown:
      raise cli.InputError(f"--models: unknown {unknown} (choose from {modes.MODEL_TYPES})")


# The fields of `JobParams` that override the mode's `Settings` when set.
_OVERRIDES = (
  "budget_minutes",
  "asr_max_lists",
  "asr_sample_lists",
  "nmt_max_lists",
  "sts_max_pairs",
  "max_books",
  "curve_points",
  "curve_asr_lists",
)


def mode_settings(params):
  """The mode's `Settings` with the parameters that are set applied (0: None, no limit)."""
  overrides = {}
  for name in _OVERRIDES:
    value = getattr(params, name)
    if value is not None:
      overrides[name] = value or None
  return dataclasses.replace(modes.MODES[params.mode], **overrides)


def run(params, command=None):
  """Runs the stages of `params` in order, each skipped when its stamp says it is done, into
  report.json and report.md (`command`: the command line the report gives): (report.md's path,
  its summary for the console (`reproduction_report.console_summary`), this run's time).
  cli.InputError: a required data file is missing, or a stage stopped on a wrong input.
  """
  io_utils.refuse_remote(
    params,
    "the reproduction runs KenLM and its stages in a local work dir",
    [("work_dir", params.work_dir), ("data_dir", params.data_dir)],
  )
  work_dir = os.path.abspath(
    params.work_dir or os.path.join(machine.REPO, "runs", "reproduce", params.mode)
  )
  # A --work_dir under a file was os.makedirs' NotADirectoryError traceback.
  io_utils.check_output_path(work_dir, "work_dir")
  root = modes.check_data(params.data_dir)
  settings = mode_settings(params)
  os.makedirs(work_dir, exist_ok=True)
  logging.info("mode %s, work dir %s, data %s", params.mode, work_dir, root)
  tracker = progress.Stages(stages.stage_names(params.models, params.seeds))

  tracker.start("data")
  data_dir = stages.stage_data(work_dir, root, settings)
  data_stats = io_utils.read_json_file(os.path.join(data_dir, pretraining_data.STATS_FILE))
  tracker.start("kenlm")
  kenlm_path = stages.stage_kenlm(work_dir, data_dir, settings)
  tracker.start("plan")
  plan = stages.stage_plan(work_dir, data_dir, settings, params.train_steps)
  model_dirs = stages.stage_train(work_dir, data_dir, settings, plan, params.models, tracker)
  tracker.start("peak")
  peak = stages.stage_peak(work_dir, settings, plan)

  step_tokens = stages.tokens_per_step(settings, data_stats)
  results = stages.stage_evaluations(
    work_dir, root, settings, model_dirs, kenlm_path, step_tokens, tracker
  )
  further_seeds = []
  for seed in range(2, params.seeds + 1):
    own, view = seed_runs.seed_dir(work_dir, seed), seed_runs.SeedStages(tracker, seed)
    dirs = stages.stage_train(own, data_dir, settings, plan, params.models, view, seed)
    seed_results = stages.stage_evaluations(
      own, root, settings, dirs, kenlm_path, step_tokens, view, False
    )
    further_seeds.append(
      dict(
        seed=seed, training=stages.training_table(settings, data_stats, dirs, peak), **seed_results
      )
    )
  report = stages.build_report(
    params.mode, settings, plan, data_stats, model_dirs, results, peak, further_seeds, command
  )
  text = reproduction_report.render_report(report)
  report_file = os.path.join(work_dir, "report.md")
  io_utils.write_atomically(os.path.join(work_dir, "report.json"), json.dumps(report, indent=2))
  io_utils.write_atomically(report_file, text)
  return report_file, reproduction_report.console_summary(report), tracker.elapsed()

"""The MWER job of run_mwer.py: data, baselines, training runs, selection, final evaluation.

The protocol and its outputs: docs/DESIGN.md §4.5, docs/manual.md "Discriminative rescoring (MWER)".
Every stage resumes; only the same job resumes (<output_dir>/run.json, `identity`, util/runs.py).
"""

import dataclasses
import json
import math
import os
import shutil

from absl import logging

from evaluation import score_cache
from evaluation import significance
from finetuning import mwer
from finetuning import mwer_data
from finetuning import mwer_report
from finetuning import mwer_training
from lm import inference
from lm import lm_options as lm_options_lib
from nbest import combination
from nbest import formats
from nbest import settings
from nbest import shared_data
from nbest import tuning
from nbest import types
from util import cli
from util import distribute_utils
from util import io_utils
from util import machine
from util import runs

# MWER reads sets without reference files and holds speakers out by utterance key.
FORMATS = tuple(
  name for name, fmt in formats.FORMATS.items() if fmt.refs_in_file and not fmt.aligned_refs
)
MODEL_DIR = "model"
# What a job writes in --output_dir besides its score cache: a dir per setting, the results.
OUTPUTS = (*settings.SETTINGS, "results.json", "results.md")


@dataclasses.dataclass
class JobParams:
  """The job's settings: run_mwer.py's flags."""

  init_model: str = cli.param(
    "The pretrained LM to start from: a model dir (tta, bilm, ...).", io=cli.INPUT
  )
  output_dir: str = cli.param("Where the job writes (resumable).", io=cli.OUTPUT)
  format: str = cli.param("N-best format of --train_sets and --test_sets.", "espnet", FORMATS)
  train_sets: list = cli.param(
    "Training lists: ESPnet set names (in the data root) or files of --format; pooled.",
    ("dev_clean", "dev_other"),
    io=cli.INPUT,
  )
  test_sets: list = cli.param(
    "Test lists (the final evaluation only), each evaluated on its own.",
    ("test_clean", "test_other"),
    io=cli.INPUT,
  )
  settings: list = cli.param(
    "First-pass settings, each a rescorer of its own (the parts weighted apart): "
    + settings.describe(),
    ("full", "am"),
  )
  heldout_fraction: float = cli.param("Share of the training speakers held out.", 0.2)
  split_seed: int = cli.param("Seed of the held-out speakers.", 0)
  regularizer_weights: list = cli.param(
    "Regulariser weights, one MWER run each; the held-out WER picks one.", ("0.1",)
  )
  combination_epochs: int = cli.param(
    "Epochs of baseline (c), the combination weights alone with the LM frozen.", 20, lower_bound=1
  )
  scoring: str = cli.param(
    "How the LM scores a hypothesis (default: the kind's own, as in run_rescoring.py).",
    None,
    inference.SCORINGS,
  )
  max_seq_length: int = cli.param(
    "Longest hypothesis in tokens, longer ones truncated (0: the model's "
    "max_position_embeddings, as run_rescoring.py scores).",
    0,
    lower_bound=0,
  )
  sample_lists: int = cli.param(
    "Use a seeded random sample of N lists of each set (quick runs; 0: all).", 0, lower_bound=0
  )
  sample_seed: int = cli.param("Seed of --sample_lists.", 0)
  strategy: str = cli.param(
    "tf.distribute strategy of the training steps.", "one_device", ("one_device", "mirrored")
  )
  num_cpu_devices: int = cli.param(
    "Logical CPU devices for --strategy=mirrored on a CPU.", 0, lower_bound=0
  )
  bootstrap_resamples: int = cli.param(
    "Paired bootstrap resamples of the final comparisons.",
    significance.DEFAULT_RESAMPLES,
    lower_bound=1,
  )
  bootstrap_seed: int = cli.param("Seed of the bootstrap.", 0)
  chunk_size: int = cli.param(
    "Sentences per scoring call and cache write.", 500, lower_bound=1, result=False
  )
  overwrite: bool = cli.param(
    "Start over: remove the checkpoints, models and results of the job --output_dir holds "
    "(its LM score cache, keyed by model, stays) instead of refusing a job that differs.",
    False,
    result=False,
  )
  data_dir: str = io_utils.data_dir_param()
  mwer: mwer_training.MwerParams = cli.nested(mwer_training.MwerParams)
  # Held-out scoring reads a hypothesis as one input, as training does.
  lm_options: lm_options_lib.LMOptions = lm_options_lib.nested(
    only=lm_options_lib.THROUGHPUT, defaults={"long_inputs": "truncate"}
  )

  def __post_init__(self):
    # What the settings alone tell, before --output_dir is made or a list is read.
    regularizer_weights(self)
    for setting in self.settings:
      if setting not in settings.SETTINGS:
        raise ValueError(f"--settings: {setting!r} is not one of {tuple(settings.SETTINGS)}")
    if self.init_model.startswith("kenlm:"):
      raise ValueError("MWER trains a neural LM; --init_model is an n-gram model")


# ---------------------------------------------------------------------- data


def read_sets(params, names):
  """{name: list[NBestList]} of set names or files, sampled by --sample_lists."""
  sets = {}
  for name in names:
    lists, _ = formats.read_set(params.format, name, data_dir=params.data_dir)
    for nbest_list in lists:
      if len(nbest_list.refs) != 1:
        raise ValueError(f"{name}: list {nbest_list.key!r} has {len(nbest_list.refs)} references")
    if params.sample_lists:
      lists = types.sample_lists(lists, params.sample_lists, params.sample_seed)
    sets[name] = lists
  return sets


def identity(params):
  """`runs.identity` of the job: the starting model, the lists, and the fields that change a
  result (MwerParams' by their flag names)."""
  return runs.identity(
    "run_mwer.py",
    params,
    init_model=inference.spec_identity(params.init_model),
    train_sets=_set_identities(params, params.train_sets),
    test_sets=_set_identities(params, params.test_sets),
  )


def _set_identities(params, names):
  """{name: runs.path_identity} of --train_sets or --test_sets (a set name in the data root)."""
  identities = {}
  for name in names:
    try:
      path = (
        shared_data.espnet_set_path(name, params.data_dir) if params.format == "espnet" else name
      )
    except FileNotFoundError:
      path = name  # read_sets names it
    identities[name] = runs.path_identity(path)
  return identities


def regularizer_weights(params):
  try:
    weights = [float(w) for w in params.regularizer_weights]
  except ValueError:
    raise ValueError(f"--regularizer_weights: not numbers: {params.regularizer_weights}") from None
  # `not w >= 0` refuses nan too, which would train a whole run before its loss shows it.
  if not weights or any(not w >= 0 or math.isinf(w) for w in weights):
    raise ValueError(
      f"--regularizer_weights must be finite numbers >= 0, got {params.regularizer_weights}"
    )
  return weights


class Job(object):
  """The job's shared pieces: data, split, the starting LM and its cached scores."""

  def __init__(self, params, cache):
    self.params, self.cache = params, cache
    self.reg_weights = regularizer_weights(params)  # checked by JobParams
    # The model first: reading the lists takes a while.
    self.lm = inference.load_lm(params.init_model, **self.lm_kwargs())
    self.scoring = params.scoring or self.lm.default_scoring
    pooled = [l for lists in read_sets(params, params.train_sets).values() for l in lists]
    self.train, self.heldout = mwer_data.split_by_speaker(
      pooled, params.heldout_fraction, params.split_seed
    )
    self.dev = self.train + self.heldout
    for setting in params.settings:
      settings.first_pass_weights(setting, pooled[0].hyps[0].scores, prefer_parts=True)
    self.strategy = distribute_utils.get_strategy(params.strategy, None, params.num_cpu_devices)
    logging.info(
      "%d training lists (%d speakers), %d held out (%d speakers)",
      len(self.train),
      len({mwer_data.speaker(l.key) for l in self.train}),
      len(self.heldout),
      len({mwer_data.speaker(l.key) for l in self.heldout}),
    )

  def lm_kwargs(self):
    return dict(
      self.params.lm_options.load_kwargs(), max_seq_length=self.params.max_seq_length or None
    )

  def scores(self, lm, lists, name):
    """{text: LM score} of every hypothesis of `lists`, cached."""
    lm_id = inference.model_id(inference.describe(lm, self.scoring))
    self.cache.register(lm_id, inference.describe(lm, self.scoring))
    texts = [h.text for l in lists for h in l.hyps]
    scored = score_cache.cached_scores(
      lm, lm_id, texts, self.cache, name, self.params.chunk_size, self.scoring
    )
    return {t: v[0] for t, v in scored.items()}

  def record(self, setting):
    """What a run's exported model records of the job."""
    return {
      "objective": "mwer",
      "init_model": os.path.abspath(self.params.init_model),
      "setting": setting,
      "train_sets": list(self.params.train_sets),
      "train_lists": len(self.train),
      "heldout": {
        "fraction": self.params.heldout_fraction,
        "seed": self.params.split_seed,
        "lists": len(self.heldout),
        "speakers": sorted({mwer_data.speaker(l.key) for l in self.heldout}),
      },
      "scoring": self.scoring,
      "max_seq_length": self.params.max_seq_length or None,
      "commit": machine.git_commit(),
    }


# ------------------------------------------------------------------- training


def _run(job, setting, scorer, start, prepared, name, params):
  """One MwerRun in <output_dir>/<setting>/<name>; returns its summary."""
  run_params = dataclasses.replace(
    params, output_dir=os.path.join(job.params.output_dir, setting, name)
  )
  run = mwer_training.MwerRun(
    run_params,
    job.strategy,
    scorer,
    start,
    prepared["train"],
    prepared["heldout"],
    job.record(setting),
    job.params.lm_options.load_kwargs(),
  )
  return run.train()


def train_setting(job, setting):
  """Baseline (c) and the MWER runs of one setting, then the selection; returns
  {"finished", "combination" (weights file of (c)), "selection"}."""
  p = job.params
  first_pass = settings.first_pass_weights(setting, job.train[0].hyps[0].scores, prefer_parts=True)
  names = tuple(first_pass)
  frozen = job.scores(job.lm, job.dev, "starting LM, dev")
  table = [[frozen[h.text] for h in l.hyps] for l in job.train]
  lam = tuning.sweep_lambda(job.train, table, "wer", setting).best_lam
  k = p.mwer.hyps_per_list
  plain = {
    "train": mwer_data.prepare(job.train, None, names, k)[0],
    "heldout": mwer_data.prepare(job.heldout, None, names)[0],
  }
  combination_params = dataclasses.replace(
    p.mwer, epochs=p.combination_epochs, regularizer="none", regularizer_weight=0.0
  )
  summary = _run(
    job,
    setting,
    mwer.FrozenScorer(frozen),
    combination.Weights.interpolation(first_pass, lam, combination.MWER_LM),
    plain,
    "combination",
    combination_params,
  )
  if not summary["finished"]:
    return {"finished": False}
  combination_file = os.path.join(summary["best_dir"], mwer.WEIGHTS_FILE)
  start = combination.load_weights(combination_file)
  tokenized = {
    "train": mwer_data.prepare(job.train, job.lm.tokenize, names, k)[0],
    "heldout": mwer_data.prepare(job.heldout, job.lm.tokenize, names)[0],
  }
  runs = {}
  for weight in job.reg_weights:
    params = dataclasses.replace(p.mwer, regularizer_weight=weight)
    scorer = _neural_scorer(job, params)
    runs[weight] = _run(job, setting, scorer, start, tokenized, f"mwer_reg{weight:g}", params)
    if not runs[weight]["finished"]:
      return {"finished": False}
  selection = select(job, setting, runs)
  return {"finished": True, "combination": combination_file, "selection": selection}


def _neural_scorer(job, params):
  """A NeuralScorer of a fresh copy of the starting model (and its frozen teacher)."""
  with job.strategy.scope():
    model, tokenizer = inference.load_model(job.params.init_model)
    teacher = None
    if params.regularizer == "distillation":
      teacher, _ = inference.load_model(job.params.init_model)
      teacher.trainable = False
  return mwer.NeuralScorer(
    model,
    tokenizer,
    job.scoring,
    job.params.max_seq_length or None,
    params.regularizer,
    teacher,
    params.seed,
  )


def select(job, setting, runs):
  """Copies the best run's best/ to <output_dir>/<setting>/model; returns the selection."""
  candidates = [(w, s["best"]) for w, s in runs.items() if s["best"] is not None]
  weight, best = min(
    candidates, key=lambda c: (c[1]["heldout_wer"], c[1]["heldout_mwer"], c[1]["epoch"])
  )
  source = runs[weight]["best_dir"]
  target = os.path.join(job.params.output_dir, setting, MODEL_DIR)
  tmp = io_utils.make_temp_dir(os.path.dirname(target), ".model-")
  shutil.rmtree(tmp)
  shutil.copytree(source, tmp)
  shutil.rmtree(target, ignore_errors=True)
  os.rename(tmp, target)
  # Every run starts from (c)'s weights and the untouched LM, so their epoch 0 is one point.
  (start,) = [r for r in runs[weight]["epochs"] if r["epoch"] == 0]
  selection = {
    "regularizer_weight": weight,
    "epoch": best["epoch"],
    "heldout_wer": best["heldout_wer"],
    "start_heldout_wer": start["heldout_wer"],
    "model_dir": target,
    "runs": {f"{w:g}": s["best"] for w, s in runs.items()},
  }
  logging.info(
    "%s: selected regularizer weight %g, epoch %d (held-out WER %.3f, %.3f at the start): %s",
    setting,
    weight,
    best["epoch"],
    best["heldout_wer"],
    start["heldout_wer"],
    target,
  )
  if not mwer_report.training_helped(selection):
    logging.warning(
      "%s: no epoch of MWER training lowered the held-out WER below the start's (the weights "
      "of (c) with the starting LM); the trained model is kept as (d), though on held-out data "
      "it is no better than (c)",
      setting,
    )
  return selection


# ---------------------------------------------------------------- evaluation


def evaluate(job, trained):
  """Every setting's four systems on every test set; returns (rows, curves)."""
  p = job.params
  tests = read_sets(p, p.test_sets)
  all_test = [l for lists in tests.values() for l in lists]
  frozen = job.scores(job.lm, job.dev + all_test, "starting LM")
  dev_table = [[frozen[h.text] for h in l.hyps] for l in job.dev]
  rows, curves = [], {}
  for setting in p.settings:
    selection = trained[setting]["selection"]
    lm = inference.load_lm(selection["model_dir"], **job.lm_kwargs())
    trained_scores = job.scores(lm, all_test, f"MWER LM ({setting})")
    systems = mwer_report.SettingSystems(
      setting=setting,
      interpolation_lambda=tuning.sweep_lambda(job.dev, dev_table, "wer", setting).best_lam,
      combination=combination.load_weights(trained[setting]["combination"]),
      mwer=combination.load_weights(os.path.join(selection["model_dir"], mwer.WEIGHTS_FILE)),
    )
    for name, lists in tests.items():
      rows.append(
        mwer_report.evaluate_set(
          name, lists, systems, frozen, trained_scores, (p.bootstrap_resamples, p.bootstrap_seed)
        )
      )
    for run in ["combination"] + [f"mwer_reg{w:g}" for w in job.reg_weights]:
      run_dir = os.path.join(p.output_dir, setting, run)
      curves[f"{setting}/{run}"] = mwer_training.read_epoch_log(run_dir)
  return rows, curves


def run(params):
  """The whole job; returns False when a signal stopped a training run (resume to finish)."""
  # The output and the model, before anything is written into --output_dir.
  # Not yet: its runs' best/ and model/ dirs are renamed into place, and its lists are read, as
  # local files.
  io_utils.refuse_remote(params, "MWER training writes its runs and reads its lists locally")
  with cli.user_input():
    io_utils.check_outputs_apart(params)
    io_utils.check_output_path(params.output_dir, "output_dir")
    inference.check_spec(params.init_model)
  logging.info("MWER job: %s", dataclasses.asdict(params))
  cache_path = os.path.join(params.output_dir, "cache", "lm_scores.jsonl")
  with io_utils.output_dir(params.output_dir), io_utils.exclusive_lock(cache_path, wait=False):
    # Another job's checkpoints are refused before the model loads; the record is written once
    # the model and lists are read, so a run refused for them leaves none.
    with runs.Record(params.output_dir, identity(params), OUTPUTS, params.overwrite) as record:
      with cli.user_input():
        job = Job(params, score_cache.ScoreCache(cache_path))
      record.start()
      trained = {}
      for setting in params.settings:
        trained[setting] = train_setting(job, setting)
        if not trained[setting]["finished"]:
          return False
      rows, curves = evaluate(job, trained)
  results = {
    "rows": rows,
    "curves": curves,
    "selection": {s: t["selection"] for s, t in trained.items()},
    "init_model": os.path.abspath(params.init_model),
    "machine": machine.cpu_and_cores(),
    "commit": machine.git_commit(),
  }
  io_utils.write_atomically(
    os.path.join(params.output_dir, "results.json"), json.dumps(results, indent=2) + "\n"
  )
  text = mwer_report.markdown(rows, curves, results["selection"])
  io_utils.write_atomically(os.path.join(params.output_dir, "results.md"), text)
  print(text)
  return True

"""The reproduction's stages (reproduce.py's library; its job, `reproduction_job`, runs them): what
each one runs, in which order (`stage_names`), and the report they make (`build_report`).
"""

import datetime
import json
import os
import re

from absl import logging

from evaluation import comparisons
from evaluation import significance
import kinds
from pretraining import pretraining_data
from reproduction import reproduction_report
from reproduction import runner
from reproduction import seed_runs
from util import io_utils
from util import machine

# The models trained with piece-level masks that asr_word also scores word by word (PLL-word-l2r).
WORD_SCORED = ("tta", "bilm")
KENLM_NAME = "5-gram"


def stage_names(models, seeds):
  """The job's stages in the order they run (stage i of n): `models` (--models) trained, each
  evaluation, then again per seed up to `seeds` (--seeds)."""
  trains = [f"train_{t}" for t in models]
  names = (
    ["data", "kenlm", "plan"]
    + trains
    + ["peak", "sts", "asr_paired", "asr_word", "curves", "asr", "nmt"]
  )
  for seed in range(2, seeds + 1):
    names += [seed_runs.stage_name(n, seed) for n in trains + list(seed_runs.EVALUATIONS)]
  return names


def model_flags(settings):
  return [
    f"--num_hidden_layers={settings.num_hidden_layers:d}",
    f"--hidden_size={settings.hidden_size:d}",
    f"--num_attention_heads={settings.num_attention_heads:d}",
    f"--intermediate_size={settings.intermediate_size:d}",
    f"--train_batch_size={settings.train_batch_size:d}",
    f"--learning_rate={settings.learning_rate:g}",
  ]


# -------------------------------------------------------------------- stages


def stage_data(work_dir, root, settings):
  out = os.path.join(work_dir, "data")
  args = [
    "create_pretraining_data.py",
    "--input_file=" + os.path.join(root, "gutenberg-books-subset", "texts.tar.xz"),
    "--normalization=librispeech",
    f"--vocab_size={settings.vocab_size:d}",
    "--output_dir=" + out,
  ]
  if settings.max_books:
    args.append(f"--max_books={settings.max_books:d}")
  if settings.vocab_max_sentences:
    args.append(f"--vocab_max_sentences={settings.vocab_max_sentences:d}")
  if settings.vocab_lower_thresh:
    args.append(f"--vocab_lower_thresh={settings.vocab_lower_thresh:d}")
  # create_pretraining_data.py skips itself when its inputs are unchanged.
  runner.run_step(work_dir, "data", args)
  return out


def stage_kenlm(work_dir, data_dir, settings):
  text = os.path.join(data_dir, "corpus", "train.txt")
  out = os.path.join(work_dir, "kenlm", f"{settings.ngram_order:d}gram.bin")
  key = {
    "text_bytes": os.path.getsize(text),
    "text_mtime": os.path.getmtime(text),
    "order": settings.ngram_order,
  }
  args = [
    "ngram.py",
    "--train_text=" + text,
    "--output=" + out,
    f"--order={settings.ngram_order:d}",
    "--normalization=librispeech",
  ]
  if settings.discount_fallback:
    args.append("--discount_fallback")
  runner.run_stage(work_dir, "kenlm", key, [out], args)
  return out


def train_args(data_dir, settings, model_type, output_dir, steps, max_eval_steps=50):
  args = [
    "run_pretraining.py",
    "--model_type=" + model_type,
    "--input_file=" + os.path.join(data_dir, "train-*.tfrecord"),
  ]
  stats = io_utils.read_json_file(os.path.join(data_dir, pretraining_data.STATS_FILE))
  if stats["eval"]["sentences"]:  # a corpus of very few books may have none
    args.append("--eval_file=" + os.path.join(data_dir, "eval-*.tfrecord"))
  return (
    args
    + [
      "--output_dir=" + output_dir,
      f"--num_train_steps={steps:d}",
      f"--num_warmup_steps={max(1, steps // 10):d}",
      f"--save_checkpoints_steps={max(20, steps // settings.train_checkpoints):d}",
      # Every checkpoint stays: the learning curves evaluate them all.
      f"--keep_checkpoint_max={settings.train_checkpoints + 1:d}",
      f"--log_every_steps={max(10, steps // settings.train_log_lines):d}",
      f"--max_eval_steps={max_eval_steps:d}",
    ]
    + model_flags(settings)
  )


PRECISION_FLAGS = {"fp32": [], "bf16": ["--mixed_precision"]}


def _calibrate(work_dir, data_dir, settings, precision):
  """A short T-TA run in `precision` ("fp32" or "bf16"); its speeds from train_summary.json."""
  name = "calibration" if precision == "fp32" else f"calibration_{precision}"
  calib_dir = os.path.join(work_dir, name)
  args = train_args(data_dir, settings, "tta", calib_dir, settings.calibration_steps, 1)
  runner.run_step(work_dir, name, args + PRECISION_FLAGS[precision])
  summary = io_utils.read_json_file(os.path.join(calib_dir, "train_summary.json"))
  return {k: summary[k] for k in ("steps_per_second", "tokens_per_second", "gflops_per_second")}


def choose_precision(calibrations):
  """The precision whose calibration trained the most steps per second ("fp32" on a tie)."""
  return max(sorted(calibrations), key=lambda p: (calibrations[p]["steps_per_second"], p == "fp32"))


def stage_plan(work_dir, data_dir, settings, train_steps=None):
  """Fixes the number of training steps and the precision; returns the plan dict.

  bf16 is tried only on a CPU with bf16 matmul instructions (AMX, AVX512_BF16), where it can
  be faster, and kept only if its calibration run is: measured, not assumed. Without a
  calibration (`train_steps`, --train_steps) the models train in fp32.
  """
  path = os.path.join(work_dir, "plan.json")
  key = {
    "model": model_flags(settings),
    "budget_minutes": settings.budget_minutes,
    "train_steps": train_steps,
  }
  plan = io_utils.read_stamp(path, key)
  if plan is not None:
    return plan
  plan = {"precision": "fp32"}
  if train_steps:
    plan["train_steps"] = train_steps
  else:
    calibrations = {"fp32": _calibrate(work_dir, data_dir, settings, "fp32")}
    if machine.cpu_has_native_bfloat16():
      calibrations["bf16"] = _calibrate(work_dir, data_dir, settings, "bf16")
    plan["precision"] = choose_precision(calibrations)
    plan["calibrations"] = calibrations
    plan["calibration"] = calibrations[plan["precision"]]
    steps_per_second = plan["calibration"]["steps_per_second"]
    plan["train_steps"] = max(20, int(settings.budget_minutes * 60 * steps_per_second))
  logging.info("plan: %d steps per model in %s", plan["train_steps"], plan["precision"])
  return io_utils.write_stamp(path, key, record=plan)


def stage_train(work_dir, data_dir, settings, plan, models, stages, seed=1):
  """Trains each of `models` to plan["train_steps"] with the seeds of `seed`; {type: model dir}."""
  dirs = {}
  for model_type in models:
    stages.start("train_" + model_type)
    out = os.path.join(work_dir, "models", model_type)
    summary_path = os.path.join(out, "train_summary.json")
    done = (
      os.path.exists(summary_path)
      and io_utils.read_json_file(summary_path)["final_step"] >= plan["train_steps"]
    )
    if not done:
      runner.run_step(
        work_dir,
        "train_" + model_type,
        train_args(data_dir, settings, model_type, out, plan["train_steps"])
        + PRECISION_FLAGS[plan.get("precision", "fp32")]
        + seed_runs.init_seed_flags(seed),
      )
    dirs[model_type] = out
  return dirs


def stage_peak(work_dir, settings, plan):
  """The machine's matmul peak in the training precision (the mode's shape and runs): {"dtype",
  "gflops"}, the reference of training's GFLOP/s in the report."""
  dtype = "bfloat16" if plan.get("precision") == "bf16" else "float32"
  out = os.path.join(work_dir, "peak")
  result = os.path.join(out, "benchmark.json")
  args = [
    "run_benchmark.py",
    "--peak_only",
    f"--matmul_dtype={dtype}",
    "--matmul_shapes=" + settings.peak_matmul_shape,
    f"--matmul_runs={settings.peak_matmul_runs:d}",
    "--output_dir=" + out,
    # The stage's dir, its result removed (run_stage): an earlier run of another dtype is replaced.
    "--overwrite",
  ]
  key = {"dtype": dtype, "shape": settings.peak_matmul_shape, "runs": settings.peak_matmul_runs}
  runner.run_stage(work_dir, "peak", key, [result], args)
  return {
    "dtype": dtype,
    "gflops": max(r["gflops"] for r in io_utils.read_json_file(result)["matmul_peak"]),
  }


def _checkpoint_key(model_dirs):
  # A stage's results depend on exactly these checkpoints.
  return {
    t: io_utils.read_json_file(os.path.join(d, "train_summary.json"))["checkpoint"]
    for t, d in model_dirs.items()
  }


def stage_eval(work_dir, name, args, result_file, key):
  out = os.path.join(work_dir, "eval", name)
  result = os.path.join(out, result_file)
  if args[0] == "run_sts.py":
    # A stage run again is another job in the same dir (its models trained further): run_sts.py
    # refuses that unless told to start over, as runner.run_stage means.
    args = args + ["--overwrite"]
  runner.run_stage(work_dir, name, key, [result], args + ["--output_dir=" + out])
  return io_utils.read_json_file(result)


def named_specs(model_dirs):
  return [f"{kinds.display_name(t)}={d}" for t, d in model_dirs.items()]


def rescoring_args(task, root, lms, max_lists=None, sample_lists=None):
  args = [
    "run_rescoring.py",
    "--task=" + task,
    "--data_dir=" + root,
    "--model_dir=" + ",".join(lms),
  ]
  if max_lists:
    args.append(f"--max_lists={max_lists:d}")
  if sample_lists:
    args.append(f"--sample_lists={sample_lists:d}")
  return args


# ------------------------------------------------------------ learning curves

_CHECKPOINT_INDEX = re.compile(r"^ckpt-(\d+)\.index$")


def checkpoint_steps(model_dir):
  """Steps of the checkpoints in a training output dir, ascending."""
  return sorted(int(m.group(1)) for m in map(_CHECKPOINT_INDEX.match, os.listdir(model_dir)) if m)


def spread(steps, n):
  """n of `steps` spread evenly from the first to the last (all of them when there are fewer)."""
  if len(steps) <= n:
    return list(steps)
  return sorted({steps[round(i * (len(steps) - 1) / (n - 1))] for i in range(n)})


def checkpoint_view(model_dir, step, view_dir):
  """A model dir whose latest checkpoint is ckpt-<step> of `model_dir`: symlinks, no copies,
  so every script that takes a model dir evaluates that checkpoint."""
  os.makedirs(view_dir, exist_ok=True)
  names = ["config.json", "vocab.txt"]
  names += [n for n in os.listdir(model_dir) if n.startswith(f"ckpt-{step:d}.")]
  for name in names:
    link = os.path.join(view_dir, name)
    if not os.path.lexists(link):
      os.symlink(os.path.join(model_dir, name), link)
  io_utils.write_atomically(
    os.path.join(view_dir, "checkpoint"), f'model_checkpoint_path: "ckpt-{step:d}"\n'
  )
  return view_dir


def tokens_per_step(settings, data_stats):
  """Real (unpadded) training tokens per step: the batch size times the training data's mean
  tokens per sentence (the same for every model: same data, same order)."""
  train = data_stats["train"]
  return settings.train_batch_size * train["tokens"] / max(train["sentences"], 1)


def curve_points(work_dir, settings, model_dirs, step_tokens):
  """The checkpoints the learning curves evaluate: [{model, step, tokens, name, view}], with
  tokens = step x `step_tokens`."""
  points = []
  for model_type, d in model_dirs.items():
    for step in spread(checkpoint_steps(d), settings.curve_points):
      name = f"{kinds.display_name(model_type)}@{step:d}"
      view = os.path.join(work_dir, "curves", "models", model_type, f"step-{step:d}")
      points.append(
        {
          "model": kinds.display_name(model_type),
          "step": step,
          "tokens": step * step_tokens,
          "name": name,
          "view": checkpoint_view(d, step, view),
        }
      )
  return points


def stage_curves(work_dir, root, settings, model_dirs, step_tokens, key):
  """Evaluates `curve_points` on STS-B dev, SICK test and dev-set WER; writes curves.json and
  learning_curves.png in work_dir/curves; returns the points with their figures."""
  points = curve_points(work_dir, settings, model_dirs, step_tokens)
  specs = [f"{p['name']}={p['view']}" for p in points]
  key = dict(
    key, points=[p["name"] for p in points], curve_sts_max_pairs=settings.curve_sts_max_pairs
  )
  sts_args = [
    "run_sts.py",
    "--data_dir=" + root,
    "--model_dir=" + ",".join(specs),
    "--representations=context",
    "--sets=stsb_dev,sick_test",
  ]
  if settings.curve_sts_max_pairs:
    sts_args.append(f"--max_pairs={settings.curve_sts_max_pairs:d}")
  sts = stage_eval(work_dir, "curves_sts", sts_args, "sts_results.json", key)
  setting = reproduction_report.CURVE_ASR_SETTING
  # λ tuned and applied on the same dev sample: a dev WER per checkpoint, no test set involved.
  asr_args = rescoring_args("asr", root, specs, sample_lists=settings.curve_asr_lists) + [
    "--pairs=dev_clean:dev_clean,dev_other:dev_other",
    f"--settings={setting}",
  ]
  asr = stage_eval(
    work_dir,
    "curves_asr",
    asr_args,
    "rescoring_results.json",
    dict(key, curve_asr_lists=settings.curve_asr_lists, curve_asr_setting=setting),
  )
  pearson = {r["model"]: r["scores"] for r in sts}
  wer = {row["lm"]: {r["test"]: r["reranked"] for r in row["results"]} for row in asr}
  for p in points:
    p["stsb_dev"] = pearson[p["name"]]["stsb_dev"][0]
    p["sick_test"] = pearson[p["name"]]["sick_test"][0]
    p["dev_clean_wer"] = wer[p["name"]]["dev_clean"]
    p["dev_other_wer"] = wer[p["name"]]["dev_other"]
  out = os.path.join(work_dir, "curves")
  io_utils.write_atomically(os.path.join(out, "curves.json"), json.dumps(points, indent=2))
  reproduction_report.plot_curves(points, os.path.join(out, "learning_curves.png"))
  return points


def training_table(settings, data_stats, model_dirs, peak):
  """{display name: the figures of the report's training table} of the models in `model_dirs`."""
  training = {}
  for model_type, d in model_dirs.items():
    summary = io_utils.read_json_file(os.path.join(d, "train_summary.json"))
    loss = (summary.get("eval") or {}).get("loss")
    training[kinds.display_name(model_type)] = {
      "wall_seconds": summary["wall_seconds"],
      "tokens_per_second": summary["tokens_per_second"],
      "gflops_per_second": summary.get("gflops_per_second"),
      "tokens_trained": summary["final_step"] * tokens_per_step(settings, data_stats),
      "of_peak": (
        summary["gflops_per_second"] / peak["gflops"]
        if peak and summary.get("gflops_per_second")
        else None
      ),
      "final_step": summary["final_step"],
      "eval_loss": loss,
    }
  return training


def build_report(
  mode, settings, plan, data_stats, model_dirs, results, peak=None, further_seeds=(), command=None
):
  """The report dict of a run of `mode` (--mode): setup, training and `results` of seed 1, then
  (with --seeds > 1) "seed_runs", the training and results of each further seed
  (`further_seeds`), and the comparisons over seeds."""
  report = {
    "setup": {
      "mode": mode,
      "command": command,
      "commit": machine.git_commit(),
      "machine": machine.cpu_and_cores(),
      "finished": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
      "train_sentences": data_stats["train"]["sentences"],
      "train_tokens": data_stats["train"]["tokens"],
      "eval_sentences": data_stats["eval"]["sentences"],
      "max_books": settings.max_books,
      "vocab_size": data_stats["vocab_size"],
      "model": (
        f"{settings.num_hidden_layers:d} layers x {settings.hidden_size:d} hidden, "
        f"{settings.num_attention_heads:d} heads, FFN {settings.intermediate_size:d}"
      ),
      "train_steps": plan["train_steps"],
      "batch_size": settings.train_batch_size,
      "budget_minutes": settings.budget_minutes,
      "calibration": plan.get("calibration"),
      "calibrations": plan.get("calibrations"),
      "precision": plan.get("precision", "fp32"),
      "matmul_peak": peak,
      "asr_max_lists": settings.asr_max_lists,
      "asr_sample_lists": settings.asr_sample_lists,
      "curve_asr_lists": settings.curve_asr_lists,
      "nmt_max_lists": settings.nmt_max_lists,
      "sts_max_pairs": settings.sts_max_pairs,
    },
    "training": training_table(settings, data_stats, model_dirs, peak),
  }
  report.update(results)
  if further_seeds:
    report["setup"]["seeds"] = 1 + len(further_seeds)
    report["seed_runs"] = list(further_seeds)
    report["seed_comparisons"] = seed_runs.seed_comparisons(report)
  return report


def stage_asr_sample(work_dir, root, settings, model_dirs, lms, key, kenlm_path, stages):
  """Stages asr_paired (every LM in `lms` on one seeded sample of lists: the comparisons paired
  with the biLM) and asr_word (the same sample scored word by word by the LMs trained without
  the word mask; T-TA-w scores so by default): their rows, joined as Table 1b's."""
  stages.start("asr_paired")
  sample = settings.asr_sample_lists
  rows = stage_eval(
    work_dir,
    "asr_paired",
    rescoring_args("asr", root, lms, sample_lists=sample),
    "rescoring_results.json",
    dict(key, kenlm=kenlm_path, sample_lists=sample),
  )
  stages.start("asr_word")
  word_dirs = {
    kinds.display_name(t) + comparisons.WORD_L2R: d
    for t, d in model_dirs.items()
    if t in WORD_SCORED
  }
  if word_dirs:
    rows = rows + stage_eval(
      work_dir,
      "asr_word",
      rescoring_args("asr", root, [f"{n}={d}" for n, d in word_dirs.items()], sample_lists=sample)
      + ["--scoring=word_l2r"],
      "rescoring_results.json",
      dict(key, sample_lists=sample, scoring="word_l2r"),
    )
  return rows


# The STS stage's vectors: the paper's (context, embed) and the field's unsupervised baseline
# (BERT-whitening's and SimCSE's first-last average), each also whitened (run_sts.py --whiten).
STS_REPRESENTATIONS = ("context", "first_last", "embed")
# BERT-whitening's dimensions (Su et al. 2021: 256 of BERT-base's 768).
STS_WHITEN_DIM = 256


def sts_whiten_dim(settings):
  """The STS stage's --whiten: STS_WHITEN_DIM, at most the hidden size - 1 (the full mode's 255:
  every direction the vectors span; a LayerNorm's outputs, and so their means, lie in a
  hyperplane), and at most --sts_max_pairs when the sets are cut (each set's whitening is fitted
  on its own 2P sentences, which span fewer than 2P directions)."""
  dim = min(STS_WHITEN_DIM, settings.hidden_size - 1)
  return min(dim, settings.sts_max_pairs) if settings.sts_max_pairs else dim


def stage_evaluations(
  work_dir, root, settings, model_dirs, kenlm_path, step_tokens, stages, curves=True
):
  """Runs the stages sts, asr_paired, asr_word, curves (unless not `curves`), asr and nmt in that
  order; returns their results ({stage: result rows}) with the paired comparisons, as
  `build_report` takes them."""
  # The resample count in the key re-runs evaluations stored before they carried bootstraps.
  key = {
    "checkpoints": _checkpoint_key(model_dirs),
    "data": root,
    "bootstrap_resamples": significance.DEFAULT_RESAMPLES,
  }
  results = {}
  whiten = sts_whiten_dim(settings)
  sts_args = [
    "run_sts.py",
    "--data_dir=" + root,
    "--model_dir=" + ",".join(named_specs(model_dirs)),
    "--representations=" + ",".join(STS_REPRESENTATIONS),
    f"--whiten={whiten:d}",
  ]
  if settings.sts_max_pairs:
    sts_args.append(f"--max_pairs={settings.sts_max_pairs:d}")
  stages.start("sts")
  # The representations and whitening are in the stage's key: a work dir whose sts stage ran
  # with others runs it again (and only it).
  sts_key = dict(
    key,
    max_pairs=settings.sts_max_pairs,
    representations=list(STS_REPRESENTATIONS),
    whiten=whiten,
  )
  results["sts"] = stage_eval(work_dir, "sts", sts_args, "sts_results.json", sts_key)
  kenlm = [f"{KENLM_NAME}=kenlm:{kenlm_path}"]
  lms = named_specs(model_dirs) + kenlm
  results["asr_paired"] = stage_asr_sample(
    work_dir, root, settings, model_dirs, lms, key, kenlm_path, stages
  )
  if curves:
    stages.start("curves")
    results["curves"] = stage_curves(work_dir, root, settings, model_dirs, step_tokens, key)
  # The LMs of one pass per sentence (and the 5-gram) on whole sets: the biLM's pass per token
  # is what the paired sample above is for.
  one_pass = (
    named_specs({t: d for t, d in model_dirs.items() if not kinds.get(t).masked_copies}) + kenlm
  )
  for task, task_lms, max_lists in (
    ("asr", one_pass, settings.asr_max_lists),
    ("nmt", lms, settings.nmt_max_lists),
  ):
    stages.start(task)
    results[task] = stage_eval(
      work_dir,
      task,
      rescoring_args(task, root, task_lms, max_lists=max_lists),
      "rescoring_results.json",
      dict(key, kenlm=kenlm_path, max_lists=max_lists),
    )

  results["sts_comparisons"] = comparisons.sts_comparisons(results["sts"])
  results["asr_comparisons"] = comparisons.asr_comparisons(results["asr"])
  results["asr_paired_comparisons"] = comparisons.asr_comparisons(results["asr_paired"])
  results["asr_word_comparisons"] = comparisons.asr_comparisons(
    results["asr_paired"], comparisons.WORD_PAIRS
  )
  return results

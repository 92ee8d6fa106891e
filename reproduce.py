"""Reproduces the paper's evaluation at CPU scale, as one resumable job.

Trains T-TA, T-TA-w (T-TA with the word_l2r mask), biLM and uniLM of one config on the same
Gutenberg text for the same number of steps and a KenLM 5-gram on the same sentences, evaluates
them all, and writes report.md and report.json in --work_dir, shaped like the paper's Tables 1
(LibriSpeech reranking), 2 (WMT21 selection), 3-4 (STS-B, SICK) and 7 (perplexity)
(reproduction/reproduction_report.py renders them).

Stages (`stage_names`; docs/results.md says what each runs) are skipped when their stamp says
their outputs exist for the same inputs: a re-run goes on where it stopped. --seeds=N trains each
neural LM N times (reproduction/seed_runs.py) and reports means with the per-seed values.

  python reproduce.py --mode=quick      # minutes: tiny config, data slices
  python reproduce.py --mode=full --budget_minutes=40
"""

import dataclasses
import datetime
import json
import logging as std_logging
import os
import re
import subprocess
import sys
import time

from absl import flags
from absl import logging

from evaluation import significance
import kinds
from reproduction import reproduction_report
from reproduction import seed_runs
from util import cli
from util import io_utils
from util import machine
from util import progress

FLAGS = flags.FLAGS

REPO = os.path.dirname(os.path.abspath(__file__))
MODEL_TYPES = kinds.PRETRAINABLE
# The models trained with piece-level masks that asr_word also scores word by word (PLL-word-l2r).
WORD_SCORED = ("tta", "bilm")
KENLM_NAME = "5-gram"


@dataclasses.dataclass(frozen=True)
class Settings:
  """What a run trains and evaluates: a mode's preset (`MODES`), some fields set by flags.

  None for a limit (max_books, *_max_lists, *_max_pairs, vocab_max_sentences, vocab_lower_thresh)
  means none.
  """

  max_books: int | None  # Gutenberg books for the corpus
  vocab_size: int
  vocab_max_sentences: int | None
  vocab_lower_thresh: int | None
  num_hidden_layers: int
  hidden_size: int
  num_attention_heads: int
  intermediate_size: int
  train_batch_size: int
  learning_rate: float
  budget_minutes: float  # training time per neural model, converted to steps by the plan stage
  calibration_steps: int
  train_log_lines: int
  train_checkpoints: int
  ngram_order: int
  discount_fallback: bool
  sts_max_pairs: int | None
  asr_max_lists: int | None
  asr_sample_lists: int
  nmt_max_lists: int | None
  curve_points: int
  curve_sts_max_pairs: int | None
  curve_asr_lists: int


# quick: minutes on 2 CPU cores, every stage end to end (the numbers mean little). full: the
# CPU-scale reproduction (docs/results.md, "Reproducing the paper at CPU scale", says why).
MODES = {
  "quick": Settings(
    max_books=8,
    vocab_size=2000,
    vocab_max_sentences=None,
    vocab_lower_thresh=2,
    num_hidden_layers=3,
    hidden_size=128,
    num_attention_heads=2,
    intermediate_size=512,
    train_batch_size=32,
    learning_rate=1e-3,
    budget_minutes=1.0,
    calibration_steps=20,
    # Progress lines and checkpoints per training run (a short log; resume loses <= half a run).
    train_log_lines=5,
    train_checkpoints=2,
    ngram_order=5,
    discount_fallback=True,
    sts_max_pairs=200,
    asr_max_lists=10,
    asr_sample_lists=4,
    nmt_max_lists=20,
    curve_points=5,
    curve_sts_max_pairs=50,
    curve_asr_lists=3,
  ),
  "full": Settings(
    max_books=None,
    vocab_size=8000,
    vocab_max_sentences=200000,
    vocab_lower_thresh=None,
    num_hidden_layers=3,
    hidden_size=256,
    num_attention_heads=4,
    intermediate_size=1024,
    train_batch_size=64,
    learning_rate=5e-4,
    budget_minutes=40.0,
    calibration_steps=60,
    train_log_lines=20,
    train_checkpoints=10,
    ngram_order=5,
    discount_fallback=False,
    sts_max_pairs=None,
    # The one-pass LMs and the 5-gram score every list of the four sets; the biLM (a pass per
    # token) scores a seeded sample, which every other LM scores too (paired comparisons).
    asr_max_lists=None,
    asr_sample_lists=300,
    nmt_max_lists=200,
    # Learning curves: this many checkpoints per model, on STS-B dev, SICK test and a sample of
    # each dev set's lists (150: 50 left λ at 0 and the WER flat in the 2026-11-24 run).
    curve_points=5,
    curve_sts_max_pairs=None,
    curve_asr_lists=150,
  ),
}

# Files each stage reads from the data root, and where to get them.
_STSB = (
  "STS Benchmark: https://ixa2.si.ehu.eus/stswiki (Stsbenchmark.tar.gz;"
  " sts-dev.csv and sts-test.csv)"
)
_LIBRISPEECH = (
  "ESPnet2 LibriSpeech 30-best lists {dev,test}_{clean,other}"
  ".tar.xz (see the SOURCE.md of that folder in the project's "
  "shared data)"
)
REQUIRED_DATA = (
  (
    "gutenberg-books-subset/texts.tar.xz",
    "Project Gutenberg books from https://www.gutenberg.org (the book list "
    "is MANIFEST.tsv of this folder in the project's shared data; any "
    "English books as .txt files in one tar.xz work)",
  ),
  ("stsb/sts-dev.csv", _STSB),
  ("stsb/sts-test.csv", _STSB),
  ("sick/SICK.txt", "SICK: https://marcobaroni.org/composes/sick.html (SICK.zip -> SICK.txt)"),
  ("asr-librispeech-espnet2-30best/dev_clean.tar.xz", _LIBRISPEECH),
  ("asr-librispeech-espnet2-30best/test_clean.tar.xz", _LIBRISPEECH),
  ("asr-librispeech-espnet2-30best/dev_other.tar.xz", _LIBRISPEECH),
  ("asr-librispeech-espnet2-30best/test_other.tar.xz", _LIBRISPEECH),
  (
    "nmt-wmt21-deen-multisystem/references",
    "WMT21 de-en: https://github.com/wmt-conference/wmt21-news-systems "
    "(sources/, references/, system-outputs/ for newstest2021 de-en)",
  ),
)


def define_flags():
  flags.DEFINE_enum(
    "mode",
    "quick",
    sorted(MODES),
    "quick: minutes, tiny config and data slices (checks the "
    "whole pipeline); full: the CPU-scale reproduction.",
  )
  flags.DEFINE_string(
    "work_dir", None, "Where every stage writes (default runs/reproduce/<mode> in the repository)."
  )
  io_utils.define_data_dir_flag()
  flags.DEFINE_float(
    "budget_minutes",
    None,
    "Training time per neural model "
    "(default: 1 in quick mode, 40 in full mode); converted "
    "to a step count once, by the calibration run.",
  )
  flags.DEFINE_integer(
    "train_steps",
    None,
    "Train exactly this many steps per model instead of converting --budget_minutes.",
  )
  flags.DEFINE_list("models", list(MODEL_TYPES), "Neural LMs to train.")
  flags.DEFINE_integer(
    "seeds",
    1,
    "Train and evaluate every neural LM this many times. Seed 1 is run_pretraining.py's default "
    "seed (models/<kind>, eval/, ...); seed k > 1 trains with --init_seed=k in seed<k>/: another "
    "weight initialisation and dropout, the same data order, biLM masks and steps. Every "
    "evaluation but the learning curves runs per seed; the report gives each figure's mean and "
    "per-seed values, and calls a comparison significant only when it is in every seed.",
    lower_bound=1,
  )
  flags.DEFINE_integer(
    "asr_max_lists",
    None,
    "First N lists of each LibriSpeech set for T-TA, uniLM and the 5-gram (0: all; default "
    "per mode).",
  )
  flags.DEFINE_integer(
    "asr_sample_lists",
    None,
    "A seeded random sample of N lists per LibriSpeech set, scored by every LM including the "
    "biLM, which needs one pass per token of every hypothesis (default per mode).",
  )
  flags.DEFINE_integer("nmt_max_lists", None, "First N WMT21 segments (0: all; default per mode).")
  flags.DEFINE_integer(
    "sts_max_pairs", None, "First N pairs of each STS set (0: all; default per mode)."
  )
  flags.DEFINE_integer(
    "max_books", None, "Read only this many Gutenberg books (0: all; default per mode)."
  )
  flags.DEFINE_integer(
    "curve_points",
    None,
    "Learning curves: evaluate this many checkpoints per model, spread over training (default "
    "per mode).",
    lower_bound=2,
  )
  flags.DEFINE_integer(
    "curve_asr_lists",
    None,
    "Learning curves: a seeded sample of N lists of each dev set per checkpoint (default per "
    "mode).",
  )


# ------------------------------------------------------------------- helpers


def missing_data(root):
  """[(relative path, where to get it)] of the required files not under root."""
  return [(rel, how) for rel, how in REQUIRED_DATA if not os.path.exists(os.path.join(root, rel))]


def missing_data_message(root, missing):
  lines = [
    f"The data root {root} lacks {len(missing)} required file(s). Place the official "
    "downloads there (or point --data_dir / $TTA_DATA at a folder "
    "that has them):"
  ]
  lines += [f"  {rel}\n      <- {how}" for rel, how in missing]
  return "\n".join(lines)


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def run_stage(work_dir, name, key, outputs, args):
  """Runs step `name` (see run_step) unless its stamp says it is complete.

  Complete: stamps/<name>.json holds this exact `key` and every path of
  `outputs` exists (io_utils.read_stamp). Otherwise `outputs` are removed first.
  """
  stamp = os.path.join(work_dir, "stamps", name + ".json")
  if io_utils.read_stamp(stamp, key, outputs) is not None:
    return
  io_utils.remove_stamp(stamp)
  for path in outputs:  # a rerun starts afresh (run_rescoring.py merges into an existing result)
    if os.path.exists(path):
      os.remove(path)
  run_step(work_dir, name, args)
  io_utils.write_stamp(stamp, key)


# Lines of a step's output that its log keeps but the console does not show: TensorFlow's
# start-up notes and CUDA probe on a machine without a GPU (printed before TF's log level
# applies, so TF_CPP_MIN_LOG_LEVEL cannot hide them, and level 3 would hide real errors too),
# and the checkpoint writer's timing notes. Errors and warnings of any other kind still show.
CONSOLE_NOISE = re.compile(
  r"^WARNING: All log messages before absl::InitializeLog\(\) is called"
  r"|^[IWE]\d{4} [\d:. ]+\d+ (port|cudart_stub|cuda_platform|cuda_executor|cpu_feature_guard)"
  r"\.cc:\d+\]"
  r"|Sharding callback duration"
)
# absl's line prefix ("I1124 10:18:18.123456 140213 run_sts.py:97] "): the console keeps its
# level letter for warnings and errors only.
_ABSL_PREFIX = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ")


def console_line(line):
  """How a line of a step's output shows on the console: None to hide it, else the line with
  absl's prefix shortened (the step's log keeps the line as it was)."""
  if CONSOLE_NOISE.search(line):
    return None
  match = _ABSL_PREFIX.match(line)
  if match:
    level = "" if match.group(1) == "I" else f"{match.group(1)} "
    line = level + line[match.end() :]
  return line


def run_step(work_dir, name, args):
  """Runs `python <args>` in the repository; raises with the log's tail on failure.

  All its output goes to logs/<name>.log. Its stderr (progress, warnings, errors) also goes line
  by line to our stderr (see console_line); its stdout (results, which its result files hold
  too, and which the report gathers) does not, so the console stays short.
  """
  log_path = os.path.join(work_dir, "logs", name + ".log")
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  cmd = [sys.executable] + args
  # The whole command line heads the log; the console names the script.
  logging.info("[%s] python %s ... (command and output: %s)", name, args[0], log_path)
  start = time.time()
  with open(log_path, "a", encoding="utf-8") as log:
    log.write(f"\n# {datetime.datetime.now().isoformat()} {' '.join(cmd)}\n")
    log.flush()
    code = run_python(cmd, log, lambda line: _show(name, line))
  if code == cli.EXIT_INPUT_ERROR:  # the step printed its one-line reason above
    raise cli.InputError(f"stage {name} stopped on a wrong input; its log is {log_path}")
  if code != 0:
    with open(log_path, encoding="utf-8") as f:
      tail = "".join(f.readlines()[-30:])
    raise RuntimeError(f"stage {name} failed (exit {code}); log {log_path} ends with:\n{tail}")
  logging.info("[%s] done in %.1f min", name, (time.time() - start) / 60)
  return time.time() - start


def _show(name, line):
  """Writes a line of step `name`'s stderr to the console (see console_line)."""
  shown = console_line(line)
  if shown is not None:
    sys.stderr.write(f"[{name}] {shown}")


def run_python(cmd, log, show):
  """Runs `cmd` in the repository: its stdout into the open file `log`, each stderr line into
  `log` and to `show(line)`; returns its exit status. (The tests run the commands in their own
  process through this seam.)"""
  # The step appends its stdout to the log itself (the file is open for appending).
  proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.PIPE, text=True)
  for line in proc.stderr:
    log.write(line)
    log.flush()
    show(line)
  return proc.wait()


def mode_settings():
  """The mode's `Settings` with the command-line overrides applied."""
  overrides = {}
  for name in (
    "budget_minutes",
    "asr_max_lists",
    "asr_sample_lists",
    "nmt_max_lists",
    "sts_max_pairs",
    "max_books",
    "curve_points",
    "curve_asr_lists",
  ):
    if FLAGS[name].value is not None:
      overrides[name] = FLAGS[name].value or None
  return dataclasses.replace(MODES[FLAGS.mode], **overrides)


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
  run_step(work_dir, "data", args)
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
  run_stage(work_dir, "kenlm", key, [out], args)
  return out


def train_args(data_dir, settings, model_type, output_dir, steps):
  args = [
    "run_pretraining.py",
    "--model_type=" + model_type,
    "--input_file=" + os.path.join(data_dir, "train-*.tfrecord"),
  ]
  stats = read_json(os.path.join(data_dir, "data_stats.json"))
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
      "--max_eval_steps=50",
    ]
    + model_flags(settings)
  )


PRECISION_FLAGS = {"fp32": [], "bf16": ["--mixed_precision"]}


def _calibrate(work_dir, data_dir, settings, precision):
  """A short T-TA run in `precision` ("fp32" or "bf16"); its speeds from train_summary.json."""
  name = "calibration" if precision == "fp32" else f"calibration_{precision}"
  calib_dir = os.path.join(work_dir, name)
  args = train_args(data_dir, settings, "tta", calib_dir, settings.calibration_steps)
  run_step(work_dir, name, args + ["--max_eval_steps=1"] + PRECISION_FLAGS[precision])
  summary = read_json(os.path.join(calib_dir, "train_summary.json"))
  return {k: summary[k] for k in ("steps_per_second", "tokens_per_second", "gflops_per_second")}


def choose_precision(calibrations):
  """The precision whose calibration trained the most steps per second ("fp32" on a tie)."""
  return max(sorted(calibrations), key=lambda p: (calibrations[p]["steps_per_second"], p == "fp32"))


def stage_plan(work_dir, data_dir, settings):
  """Fixes the number of training steps and the precision; returns the plan dict.

  bf16 is tried only on a CPU with bf16 matmul instructions (AMX, AVX512_BF16), where it can
  be faster, and kept only if its calibration run is: measured, not assumed. Without a
  calibration (--train_steps) the models train in fp32.
  """
  path = os.path.join(work_dir, "plan.json")
  key = {
    "model": model_flags(settings),
    "budget_minutes": settings.budget_minutes,
    "train_steps": FLAGS.train_steps,
  }
  plan = io_utils.read_stamp(path, key)
  if plan is not None:
    return plan
  plan = {"precision": "fp32"}
  if FLAGS.train_steps:
    plan["train_steps"] = FLAGS.train_steps
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


def stage_train(work_dir, data_dir, settings, plan, stages, seed=1):
  """Trains each model to plan["train_steps"] with the seeds of `seed`; {type: model dir}."""
  dirs = {}
  for model_type in FLAGS.models:
    stages.start("train_" + model_type)
    out = os.path.join(work_dir, "models", model_type)
    summary_path = os.path.join(out, "train_summary.json")
    done = (
      os.path.exists(summary_path) and read_json(summary_path)["final_step"] >= plan["train_steps"]
    )
    if not done:
      run_step(
        work_dir,
        "train_" + model_type,
        train_args(data_dir, settings, model_type, out, plan["train_steps"])
        + PRECISION_FLAGS[plan.get("precision", "fp32")]
        + seed_runs.init_seed_flags(seed),
      )
    dirs[model_type] = out
  return dirs


def stage_peak(work_dir, plan):
  """The machine's matmul peak in the training precision: {"dtype", "gflops"}, the reference of
  training's GFLOP/s in the report."""
  dtype = "bfloat16" if plan.get("precision") == "bf16" else "float32"
  out = os.path.join(work_dir, "peak")
  result = os.path.join(out, "benchmark.json")
  args = [
    "run_benchmark.py",
    "--peak_only",
    f"--matmul_dtype={dtype}",
    "--matmul_shapes=2048x2048x2048",
    "--matmul_runs=10",
    "--output_dir=" + out,
  ]
  run_stage(work_dir, "peak", {"dtype": dtype}, [result], args)
  return {"dtype": dtype, "gflops": max(r["gflops"] for r in read_json(result)["matmul_peak"])}


def _checkpoint_key(model_dirs):
  # A stage's results depend on exactly these checkpoints.
  return {
    t: read_json(os.path.join(d, "train_summary.json"))["checkpoint"] for t, d in model_dirs.items()
  }


def stage_eval(work_dir, name, args, result_file, key):
  out = os.path.join(work_dir, "eval", name)
  result = os.path.join(out, result_file)
  if args[0] == "run_sts.py":
    # A stage run again is another job in the same dir (its models trained further): run_sts.py
    # refuses that unless told to start over, as run_stage means.
    args = args + ["--overwrite"]
  run_stage(work_dir, name, key, [result], args + ["--output_dir=" + out])
  return read_json(result)


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
    summary = read_json(os.path.join(d, "train_summary.json"))
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


def build_report(settings, plan, data_stats, model_dirs, results, peak=None, further_seeds=()):
  """The report dict: setup, training and `results` of seed 1, then (with --seeds > 1)
  "seed_runs", the training and results of each further seed (`further_seeds`), and the
  comparisons over seeds."""
  report = {
    "setup": {
      "mode": FLAGS.mode,
      "command": " ".join(["python"] + sys.argv),
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


# ---------------------------------------------------------------------- main


def stage_names():
  """The job's stages in the order they run (stage i of n)."""
  trains = [f"train_{t}" for t in FLAGS.models]
  names = (
    ["data", "kenlm", "plan"]
    + trains
    + ["peak", "sts", "asr_paired", "asr_word", "curves", "asr", "nmt"]
  )
  for seed in range(2, FLAGS.seeds + 1):
    names += [seed_runs.stage_name(n, seed) for n in trains + list(seed_runs.EVALUATIONS)]
  return names


def check_data():
  """The absolute data root; cli.InputError naming each missing file and its source."""
  with cli.user_input():
    root = os.path.abspath(io_utils.data_root(FLAGS.data_dir))
  missing = missing_data(root)
  if missing:
    raise cli.InputError(missing_data_message(root, missing))
  return root


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
    kinds.display_name(t) + reproduction_report.WORD_L2R: d
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

  results["sts_comparisons"] = reproduction_report.sts_comparisons(results["sts"])
  results["asr_comparisons"] = reproduction_report.asr_comparisons(results["asr"])
  results["asr_paired_comparisons"] = reproduction_report.asr_comparisons(results["asr_paired"])
  results["asr_word_comparisons"] = reproduction_report.asr_comparisons(
    results["asr_paired"], reproduction_report.WORD_PAIRS
  )
  return results


def main(argv):
  del argv
  unknown = sorted(set(FLAGS.models) - set(MODEL_TYPES))
  if unknown:
    raise cli.InputError(f"--models: unknown {unknown} (choose from {MODEL_TYPES})")
  root = check_data()
  # The job's own lines: time, level, message (absl's prefix adds thread id and source line).
  logging.get_absl_handler().setFormatter(
    std_logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
  )
  settings = mode_settings()
  work_dir = os.path.abspath(FLAGS.work_dir or os.path.join(REPO, "runs", "reproduce", FLAGS.mode))
  os.makedirs(work_dir, exist_ok=True)
  logging.info("mode %s, work dir %s, data %s", FLAGS.mode, work_dir, root)
  stages = progress.Stages(stage_names())

  stages.start("data")
  data_dir = stage_data(work_dir, root, settings)
  data_stats = read_json(os.path.join(data_dir, "data_stats.json"))
  stages.start("kenlm")
  kenlm_path = stage_kenlm(work_dir, data_dir, settings)
  stages.start("plan")
  plan = stage_plan(work_dir, data_dir, settings)
  model_dirs = stage_train(work_dir, data_dir, settings, plan, stages)
  stages.start("peak")
  peak = stage_peak(work_dir, plan)

  step_tokens = tokens_per_step(settings, data_stats)
  results = stage_evaluations(work_dir, root, settings, model_dirs, kenlm_path, step_tokens, stages)
  further_seeds = []
  for seed in range(2, FLAGS.seeds + 1):
    own, view = seed_runs.seed_dir(work_dir, seed), seed_runs.SeedStages(stages, seed)
    dirs = stage_train(own, data_dir, settings, plan, view, seed)
    seed_results = stage_evaluations(
      own, root, settings, dirs, kenlm_path, step_tokens, view, False
    )
    further_seeds.append(
      dict(seed=seed, training=training_table(settings, data_stats, dirs, peak), **seed_results)
    )
  report = build_report(settings, plan, data_stats, model_dirs, results, peak, further_seeds)
  text = reproduction_report.render_report(report)
  io_utils.write_atomically(os.path.join(work_dir, "report.json"), json.dumps(report, indent=2))
  io_utils.write_atomically(os.path.join(work_dir, "report.md"), text)
  print(text)
  logging.info("report: %s (%s in this run)", os.path.join(work_dir, "report.md"), stages.elapsed())


if __name__ == "__main__":
  define_flags()
  cli.run(main)

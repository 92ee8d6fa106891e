"""Reproduces the paper's evaluation at CPU scale, as one resumable job.

Trains T-TA, biLM and uniLM of one config on the same Gutenberg text for the
same number of steps, a KenLM 5-gram on the same sentences, then evaluates
all of them and writes one report shaped like the paper's tables:

  Table 1  LibriSpeech 30-best reranking WER (AM-only and full first pass,
           lambda tuned on the matching dev set)
  Table 2  WMT21 de-en LM-only candidate selection BLEU (the paper used
           WMT13 with NMT scores; our candidates carry no scores)
  Table 3  STS-B dev/test Pearson r x 100, context and embed representations
  Table 4  SICK test Pearson r x 100
  Table 7  (pseudo-)perplexity, mean and median over sentences, with WER

Stages, in order; each is skipped when its stamp (io_utils.write_stamp) says
its outputs exist for the same inputs (so re-running after an interruption goes
on where it stopped, and training resumes from its last checkpoint):

  data   create_pretraining_data.py: books -> LibriSpeech-normalized sentences
         (upper case, numbers spelled, no punctuation: the style of the ASR
         references) -> WordPiece vocab -> TFRecords. One normalization
         serves every task: models record it in config.json and inference
         normalizes STS and WMT text the same way (normalization.normalizer).
  kenlm  ngram.py: modified Kneser-Ney 5-gram on the same training sentences.
  plan   a short T-TA run measures steps/s; --budget_minutes then fixes the
         step count that all three models train (same steps = same tokens,
         same data order), recorded in plan.json.
  train  run_pretraining.py for each of --models.
  sts, asr, nmt   run_sts.py and run_rescoring.py (asr, nmt).
  report report.md and report.json in --work_dir.

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

from absl import app
from absl import flags
from absl import logging

import cli
import io_utils
import kinds
import machine
import progress
import significance

FLAGS = flags.FLAGS

REPO = os.path.dirname(os.path.abspath(__file__))
MODEL_TYPES = kinds.PRETRAINABLE
KENLM_NAME = "5-gram"

# What each mode trains and evaluates. quick: a few minutes in all on 2 CPU
# cores, to check that every stage works end to end (the numbers mean
# little). full: the CPU-scale reproduction (see README, "Reproducing the
# paper at CPU scale", for why this config).
MODES = {
  "quick": {
    "max_books": 8,
    "vocab_size": 2000,
    "vocab_max_sentences": None,
    "vocab_lower_thresh": 2,
    "num_hidden_layers": 3,
    "hidden_size": 128,
    "num_attention_heads": 2,
    "intermediate_size": 512,
    "train_batch_size": 32,
    "learning_rate": 1e-3,
    "budget_minutes": 1.0,
    "calibration_steps": 20,
    # Progress lines and checkpoints per training run (a short log; resume loses <= half a run).
    "train_log_lines": 5,
    "train_checkpoints": 2,
    "ngram_order": 5,
    "discount_fallback": True,
    "sts_max_pairs": 200,
    "asr_max_lists": 10,
    "asr_sample_lists": 4,
    "nmt_max_lists": 20,
    "curve_points": 5,
    "curve_sts_max_pairs": 50,
    "curve_asr_lists": 3,
  },
  "full": {
    "max_books": None,
    "vocab_size": 8000,
    "vocab_max_sentences": 200000,
    "vocab_lower_thresh": None,
    "num_hidden_layers": 3,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "intermediate_size": 1024,
    "train_batch_size": 64,
    "learning_rate": 5e-4,
    "budget_minutes": 40.0,
    "calibration_steps": 60,
    "train_log_lines": 20,
    "train_checkpoints": 10,
    "ngram_order": 5,
    "discount_fallback": False,
    "sts_max_pairs": None,
    # The one-pass LMs and the 5-gram score every list of the four sets; the biLM (a pass per
    # token) scores a seeded sample, which every other LM scores too (paired comparisons).
    "asr_max_lists": None,
    "asr_sample_lists": 300,
    "nmt_max_lists": 200,
    # Learning curves: this many checkpoints per model, on STS-B dev, SICK test and a sample of
    # each dev set's lists (150: 50 left λ at 0 and the WER flat in the 2026-11-24 run).
    "curve_points": 5,
    "curve_sts_max_pairs": None,
    "curve_asr_lists": 150,
  },
}

# First-pass setting of the learning curves' dev WER (run_rescoring --settings).
CURVE_ASR_SETTING = "am"

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

# The paper's full-scale figures (ACL 2020, Tables 1, 3, 4), for orientation
# only: 3 layers x 512, ~30k vocab, 1M steps on Wikipedia + BookCorpus.
PAPER = {
  "sts": {
    "T-TA": {"stsb_dev": (71.88, 54.75), "stsb_test": (62.27, 44.74)},
    "biLM": {"stsb_dev": (59.99, None), "stsb_test": (50.76, None)},
    "uniLM": {"stsb_dev": (56.25, 63.87), "stsb_test": (39.57, 55.00)},
  },
}


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
    # The step appends its stdout to the log itself (the file is open for appending).
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
      log.write(line)
      log.flush()
      shown = console_line(line)
      if shown is not None:
        sys.stderr.write(f"[{name}] {shown}")
    code = proc.wait()
  if code == cli.EXIT_INPUT_ERROR:  # the step printed its one-line reason above
    raise cli.InputError(f"stage {name} stopped on a wrong input; its log is {log_path}")
  if code != 0:
    with open(log_path, encoding="utf-8") as f:
      tail = "".join(f.readlines()[-30:])
    raise RuntimeError(f"stage {name} failed (exit {code}); log {log_path} ends with:\n{tail}")
  logging.info("[%s] done in %.1f min", name, (time.time() - start) / 60)
  return time.time() - start


def settings():
  """The mode's preset with the command-line overrides applied."""
  s = dict(MODES[FLAGS.mode])
  for name in (
    "budget_minutes",
    "asr_max_lists",
    "asr_sample_lists",
    "nmt_max_lists",
    "sts_max_pairs",
    "max_books",
  ):
    if FLAGS[name].value is not None:
      s[name] = FLAGS[name].value or None
  return s


def model_flags(s):
  return [
    f"--num_hidden_layers={s['num_hidden_layers']:d}",
    f"--hidden_size={s['hidden_size']:d}",
    f"--num_attention_heads={s['num_attention_heads']:d}",
    f"--intermediate_size={s['intermediate_size']:d}",
    f"--train_batch_size={s['train_batch_size']:d}",
    f"--learning_rate={s['learning_rate']:g}",
  ]


# -------------------------------------------------------------------- stages


def stage_data(work_dir, root, s):
  out = os.path.join(work_dir, "data")
  args = [
    "create_pretraining_data.py",
    "--input_file=" + os.path.join(root, "gutenberg-books-subset", "texts.tar.xz"),
    "--normalization=librispeech",
    f"--vocab_size={s['vocab_size']:d}",
    "--output_dir=" + out,
  ]
  if s["max_books"]:
    args.append(f"--max_books={s['max_books']:d}")
  if s["vocab_max_sentences"]:
    args.append(f"--vocab_max_sentences={s['vocab_max_sentences']:d}")
  if s["vocab_lower_thresh"]:
    args.append(f"--vocab_lower_thresh={s['vocab_lower_thresh']:d}")
  # create_pretraining_data.py skips itself when its inputs are unchanged.
  run_step(work_dir, "data", args)
  return out


def stage_kenlm(work_dir, data_dir, s):
  text = os.path.join(data_dir, "corpus", "train.txt")
  out = os.path.join(work_dir, "kenlm", f"{s['ngram_order']:d}gram.bin")
  key = {
    "text_bytes": os.path.getsize(text),
    "text_mtime": os.path.getmtime(text),
    "order": s["ngram_order"],
  }
  args = [
    "ngram.py",
    "--train_text=" + text,
    "--output=" + out,
    f"--order={s['ngram_order']:d}",
    "--normalization=librispeech",
  ]
  if s["discount_fallback"]:
    args.append("--discount_fallback")
  run_stage(work_dir, "kenlm", key, [out], args)
  return out


def train_args(data_dir, s, model_type, output_dir, steps):
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
      f"--save_checkpoints_steps={max(20, steps // s['train_checkpoints']):d}",
      # Every checkpoint stays: the learning curves evaluate them all.
      f"--keep_checkpoint_max={s['train_checkpoints'] + 1:d}",
      f"--log_every_steps={max(10, steps // s['train_log_lines']):d}",
      "--max_eval_steps=50",
    ]
    + model_flags(s)
  )


PRECISION_FLAGS = {"fp32": [], "bf16": ["--mixed_precision"]}


def _calibrate(work_dir, data_dir, s, precision):
  """A short T-TA run in `precision` ("fp32" or "bf16"); its speeds from train_summary.json."""
  name = "calibration" if precision == "fp32" else f"calibration_{precision}"
  calib_dir = os.path.join(work_dir, name)
  args = train_args(data_dir, s, "tta", calib_dir, s["calibration_steps"])
  run_step(work_dir, name, args + ["--max_eval_steps=1"] + PRECISION_FLAGS[precision])
  summary = read_json(os.path.join(calib_dir, "train_summary.json"))
  return {k: summary[k] for k in ("steps_per_second", "tokens_per_second", "gflops_per_second")}


def choose_precision(calibrations):
  """The precision whose calibration trained the most steps per second ("fp32" on a tie)."""
  return max(sorted(calibrations), key=lambda p: (calibrations[p]["steps_per_second"], p == "fp32"))


def stage_plan(work_dir, data_dir, s):
  """Fixes the number of training steps and the precision; returns the plan dict.

  bf16 is tried only on a CPU with bf16 matmul instructions (AMX, AVX512_BF16), where it can
  be faster, and kept only if its calibration run is: measured, not assumed. Without a
  calibration (--train_steps) the models train in fp32.
  """
  path = os.path.join(work_dir, "plan.json")
  key = {
    "model": model_flags(s),
    "budget_minutes": s["budget_minutes"],
    "train_steps": FLAGS.train_steps,
  }
  plan = io_utils.read_stamp(path, key)
  if plan is not None:
    return plan
  plan = {"precision": "fp32"}
  if FLAGS.train_steps:
    plan["train_steps"] = FLAGS.train_steps
  else:
    calibrations = {"fp32": _calibrate(work_dir, data_dir, s, "fp32")}
    if machine.cpu_has_native_bfloat16():
      calibrations["bf16"] = _calibrate(work_dir, data_dir, s, "bf16")
    plan["precision"] = choose_precision(calibrations)
    plan["calibrations"] = calibrations
    plan["calibration"] = calibrations[plan["precision"]]
    steps_per_second = plan["calibration"]["steps_per_second"]
    plan["train_steps"] = max(20, int(s["budget_minutes"] * 60 * steps_per_second))
  logging.info("plan: %d steps per model in %s", plan["train_steps"], plan["precision"])
  return io_utils.write_stamp(path, key, record=plan)


def stage_train(work_dir, data_dir, s, plan, stages):
  """Trains each model to plan["train_steps"]; {type: model dir}."""
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
        train_args(data_dir, s, model_type, out, plan["train_steps"])
        + PRECISION_FLAGS[plan.get("precision", "fp32")],
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
  run_stage(work_dir, name, key, [result], args + ["--output_dir=" + out])
  return read_json(result)


def named_specs(model_dirs):
  return [f"{kinds.display_name(t)}={d}" for t, d in model_dirs.items()]


def rescoring_args(task, root, lms, max_lists=None, sample_lists=None):
  args = ["run_rescoring.py", "--task=" + task, "--data_dir=" + root, "--lm=" + ",".join(lms)]
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


def tokens_per_step(s, data_stats):
  """Real (unpadded) training tokens per step: the batch size times the training data's mean
  tokens per sentence (the same for every model: same data, same order)."""
  train = data_stats["train"]
  return s["train_batch_size"] * train["tokens"] / max(train["sentences"], 1)


def curve_points(work_dir, s, model_dirs, step_tokens):
  """The checkpoints the learning curves evaluate: [{model, step, tokens, name, view}], with
  tokens = step x `step_tokens`."""
  points = []
  for model_type, d in model_dirs.items():
    for step in spread(checkpoint_steps(d), s["curve_points"]):
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


def stage_curves(work_dir, root, s, model_dirs, step_tokens, key):
  """Evaluates `curve_points` on STS-B dev, SICK test and dev-set WER; writes curves.json and
  learning_curves.png in work_dir/curves; returns the points with their figures."""
  points = curve_points(work_dir, s, model_dirs, step_tokens)
  specs = [f"{p['name']}={p['view']}" for p in points]
  key = dict(key, points=[p["name"] for p in points], curve_sts_max_pairs=s["curve_sts_max_pairs"])
  sts_args = [
    "run_sts.py",
    "--data_dir=" + root,
    "--model_dir=" + ",".join(specs),
    "--representations=context",
    "--sets=stsb_dev,sick_test",
  ]
  if s["curve_sts_max_pairs"]:
    sts_args.append(f"--max_pairs={s['curve_sts_max_pairs']:d}")
  sts = stage_eval(work_dir, "curves_sts", sts_args, "sts_results.json", key)
  # λ tuned and applied on the same dev sample: a dev WER per checkpoint, no test set involved.
  # The am setting (no LM in the first pass): with the fused Transformer LM's scores ("full") the
  # tuned λ was mostly 0 and the curves carried no signal.
  asr_args = rescoring_args("asr", root, specs, sample_lists=s["curve_asr_lists"]) + [
    "--pairs=dev_clean:dev_clean,dev_other:dev_other",
    f"--settings={CURVE_ASR_SETTING}",
  ]
  asr = stage_eval(
    work_dir,
    "curves_asr",
    asr_args,
    "rescoring_results.json",
    dict(key, curve_asr_lists=s["curve_asr_lists"], curve_asr_setting=CURVE_ASR_SETTING),
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
  plot_curves(points, os.path.join(out, "learning_curves.png"))
  return points


# (measure, panel title)
CURVE_PANELS = (
  ("stsb_dev", "STS-B dev, Pearson r x 100 (context)"),
  ("sick_test", "SICK test, Pearson r x 100 (context)"),
  ("dev_clean_wer", f"dev_clean WER % ({CURVE_ASR_SETTING} setting, λ tuned on it)"),
  ("dev_other_wer", f"dev_other WER % ({CURVE_ASR_SETTING} setting, λ tuned on it)"),
)


def plot_curves(points, path):
  """Quality vs training tokens, one line per objective, one panel per measure."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(2, 2, figsize=(9, 6.4))
  for ax, (measure, title) in zip(axes.flat, CURVE_PANELS):
    for model in dict.fromkeys(p["model"] for p in points):
      mine = sorted((p for p in points if p["model"] == model), key=lambda p: p["tokens"])
      ax.plot(
        [p["tokens"] / 1e6 for p in mine], [p[measure] for p in mine], marker="o", label=model
      )
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("training tokens (millions)", fontsize=8)
    ax.grid(True, alpha=0.3)
  axes.flat[0].legend(fontsize=8)
  fig.tight_layout()
  with io_utils.atomic_open(path, "wb") as f:
    fig.savefig(f, format="png", dpi=110)
  plt.close(fig)


def curves_table(points):
  lines = [
    "| model | step | tokens (M) | STS-B dev | SICK test | dev clean WER | dev other WER |",
    "|---|---:|---:|---:|---:|---:|---:|",
  ]
  for p in points:
    lines.append(
      f"| {p['model']} | {p['step']:d} | {p['tokens'] / 1e6:.2f} | {_fmt(p['stsb_dev'])} | "
      f"{_fmt(p['sick_test'])} | {_fmt(p['dev_clean_wer'])} | {_fmt(p['dev_other_wer'])} |"
    )
  return "\n".join(lines)


# -------------------------------------------------------------------- report


def _fmt(value, digits=2):
  return "-" if value is None else f"{value:.{digits}f}"


def _reranked_cell(result):
  """ "1.53 (λ 0.05, p 0.030)": WER, λ, and p of the paired bootstrap vs the first pass."""
  cell = f"{_fmt(result['reranked'])} (λ {result['lambda']:.2f}"
  if result.get("vs_first_pass"):
    cell += f", p {significance.format_p(result['vs_first_pass']['p_value'])}"
  return cell + ")"


def wer_table(asr):
  """Table 1: rows first pass / each LM; columns test sets x settings."""
  cols = [(r["test"], r["setting"]) for r in asr[0]["results"]]
  head = "| method | " + " | ".join(f"{t.replace('_', ' ')} {st}" for t, st in cols) + " |"
  lines = [head, "|---|" + "---:|" * len(cols)]
  first = {(r["test"], r["setting"]): r for r in asr[0]["results"]}
  lines.append("| first pass | " + " | ".join(_fmt(first[c]["first_pass"]) for c in cols) + " |")
  for row in asr:
    by = {(r["test"], r["setting"]): r for r in row["results"]}
    lines.append(f"| + {row['lm']} | " + " | ".join(_reranked_cell(by[c]) for c in cols) + " |")
  lines.append("| oracle | " + " | ".join(_fmt(first[c]["oracle"]) for c in cols) + " |")
  return "\n".join(lines)


def bleu_table(nmt):
  r0 = nmt[0]["results"][0]
  lines = [
    "| method | BLEU |",
    "|---|---:|",
    f"| first system in file order | {_fmt(r0['first_pass'])} |",
  ]
  lines += [f"| {row['lm']} alone | {_fmt(row['results'][0]['reranked'])} |" for row in nmt]
  lines.append(f"| oracle | {_fmt(r0['oracle'])} |")
  return "\n".join(lines)


def _pearson_cell(row, set_name):
  """ "55.50 [50.12, 60.31]": Pearson x100 with its 95% bootstrap interval; "-" for no row."""
  if row is None:
    return "-"
  cell = _fmt(row["scores"][set_name][0])
  interval = (row.get("pearson_ci") or {}).get(set_name)
  if interval:
    cell += f" [{interval[0]:.2f}, {interval[1]:.2f}]"
  return cell


def sts_table(sts, set_names, paper_sets=()):
  """Pearson x100 per model, context and embed side by side per set."""
  reps = ("context", "embed")
  head = "| model | " + " | ".join(f"{n} {r}" for n in set_names for r in reps) + " |"
  lines = [head, "|---|" + "---:|" * (2 * len(set_names))]
  models = list(dict.fromkeys(r["model"] for r in sts))
  by = {(r["model"], r["representation"]): r for r in sts}
  for m in models:
    lines.append(
      f"| {m} | "
      + " | ".join(_pearson_cell(by.get((m, r)), n) for n in set_names for r in reps)
      + " |"
    )
  for m, sets in PAPER["sts"].items():
    if paper_sets and all(n in sets for n in set_names):
      lines.append(
        f"| paper {m} (full scale) | "
        + " | ".join(_fmt(v) for n in set_names for v in sets[n])
        + " |"
      )
  return "\n".join(lines)


# The paper's claims compare T-TA with these LMs on the same utterances / sentence pairs.
COMPARED = ("biLM", "uniLM")


def _comparison_dict(a, b, where, comparison):
  return dict(a=a, b=b, **where, **dataclasses.asdict(comparison))


def asr_comparisons(asr, first="T-TA", others=COMPARED):
  """WER of `first` minus each of `others`, paired bootstrap over the same utterances.

  Args:
    asr: rescoring_results.json rows, whose WER results keep per-utterance "errors".

  Returns:
    list of dicts: a, b, test, setting and the significance.Comparison fields (WER points;
    negative means `first` makes fewer errors). Pairs without errors or with < 2 utterances
    are left out.
  """
  rows = {row["lm"]: row for row in asr}
  out = []
  for other in others:
    if first not in rows or other not in rows:
      continue
    theirs = {(r["test"], r["setting"]): r for r in rows[other]["results"]}
    for r in rows[first]["results"]:
      o = theirs.get((r["test"], r["setting"]))
      if o is None or len(r.get("errors") or ()) < 2 or "errors" not in o:
        continue
      c = significance.compare_error_rates(r["errors"], o["errors"], r["reference_words"])
      out.append(_comparison_dict(first, other, {"test": r["test"], "setting": r["setting"]}, c))
  return out


def sts_comparisons(sts, first="T-TA", others=COMPARED):
  """Pearson x100 of `first` minus each of `others` per set and representation, paired
  bootstrap over the same sentence pairs (rows need the per-pair "cosines" and "gold")."""
  by = {(r["model"], r["representation"]): r for r in sts}
  out = []
  for (model, representation), mine in by.items():
    for other in others if model == first else ():
      theirs = by.get((other, representation))
      if theirs is None:
        continue
      for name, cosines in (mine.get("cosines") or {}).items():
        c = significance.compare_pearson(cosines, theirs["cosines"][name], mine["gold"][name])
        out.append(
          _comparison_dict(first, other, {"set": name, "representation": representation}, c)
        )
  return out


def comparison_table(comparisons, columns):
  """One line per comparison: "a - b", the `columns` keys, difference [95% CI], p."""
  lines = [
    "| comparison | " + " | ".join(columns) + " | difference [95% CI] | p |",
    "|---|" + "---|" * len(columns) + "---:|---:|",
  ]
  for c in comparisons:
    where = " | ".join(str(c[k]).replace("_", " ") for k in columns)
    lines.append(
      f"| {c['a']} - {c['b']} | {where} | {c['difference']:+.2f} "
      f"[{c['low']:+.2f}, {c['high']:+.2f}] | {significance.format_p(c['p_value'])} |"
    )
  return "\n".join(lines)


def pppl_table(asr, sets=("dev_clean", "test_clean", "dev_other", "test_other")):
  """Table 7: (pseudo-)perplexity mean / median per LM and set, with the
  full-setting WER of that LM on that set when it is a test set."""
  lines = [
    "| LM | " + " | ".join(s.replace("_", " ") for s in sets) + " |",
    "|---|" + "---:|" * len(sets),
  ]
  for row in asr:
    wer = {r["test"]: r["reranked"] for r in row["results"] if r["setting"] == "full"}
    cells = []
    for name in sets:
      p = row["perplexity"].get(name)
      cell = "-" if p is None else f"{p['mean']:.1f} / {p['median']:.1f}"
      if name in wer:
        cell += f" [{wer[name]:.2f}]"
      cells.append(cell)
    lines.append(f"| {row['lm']} | {' | '.join(cells)} |")
  return "\n".join(lines)


def report_notes(report):
  """Paragraphs that say what the report is: quick mode checks mechanics; why eval loss is "-"."""
  setup, notes = report["setup"], []
  if setup["mode"] == "quick":
    books = f"{setup['max_books']:d} books" if setup.get("max_books") else "the books"
    notes.append(
      "**Quick mode checks the mechanics only**: tiny models trained a few steps on a slice of "
      f"{books}, evaluated on a few lists and pairs, to show that every stage runs end to end. "
      "Its numbers say nothing about T-TA; the meaningful tables are those of the full mode "
      '(`bash scripts/reproduce.sh --mode=full`), in README.md, "Results of the full mode".'
    )
  if any(t["eval_loss"] is None for t in report["training"].values()):
    why = "no evaluation ran"
    if not setup.get("eval_sentences"):
      why = (
        "the data holds out no sentence for it (sentences are held out by whole book, and a "
        "slice of few books may hold out none), so training ran without --eval_file"
      )
    notes.append(f'Eval loss is "-" where {why}.')
  return [line for note in notes for line in (note, "")]


def _comparison_section(report, key, unit, columns):
  """Heading and table of report[key] (see asr_comparisons), or nothing when it is empty."""
  if not report.get(key):
    return []
  return ["", f"T-TA vs biLM / uniLM ({unit}):", "", comparison_table(report[key], columns)]


def _precision_reason(setup):
  """ " (calibration steps/s: bf16 1.52 vs fp32 1.10)" when both precisions were timed."""
  calibrations = setup.get("calibrations") or {}
  if len(calibrations) < 2:
    return ""
  rates = " vs ".join(f"{p} {c['steps_per_second']:.2f}" for p, c in sorted(calibrations.items()))
  return f" (calibration steps/s: {rates})"


def _training_section(report):
  """The training table (time, tokens, tokens/s, GFLOP/s, fraction of the matmul peak, eval loss)
  and the line saying which peak."""
  setup = report["setup"]
  parts = [
    "| model | train min | tokens trained (M) | tokens/s | GFLOP/s | of matmul peak | eval loss |",
    "|---|---:|---:|---:|---:|---:|---:|",
  ]
  for name, t in report["training"].items():
    of_peak = "-" if t.get("of_peak") is None else f"{100 * t['of_peak']:.0f}%"
    parts.append(
      f"| {name} | {t['wall_seconds'] / 60:.1f} | {t['tokens_trained'] / 1e6:.2f} | "
      f"{t['tokens_per_second']:.0f} | {_fmt(t.get('gflops_per_second'), 1)} | {of_peak} | "
      f"{_fmt(t['eval_loss'], 3)} |"
    )
  if setup.get("matmul_peak"):
    peak = setup["matmul_peak"]
    parts += [
      "",
      f"Matmul peak: {peak['gflops']:.0f} GFLOP/s ({peak['dtype']}, [2048]^3 in a tf.function, "
      "measured after training); GFLOP/s counts the matmuls of forward and backward passes "
      "(flops.py).",
    ]
  return parts


def render_report(report):
  """The markdown report from the report dict (see `build_report`)."""
  setup = report["setup"]
  parts = [
    f"# T-TA reproduction at CPU scale ({setup['mode']} mode)",
    "",
    f"Command: `{setup['command']}`; commit {setup['commit']}; {setup['machine']}; "
    f"{setup['finished']}. Data: {setup['train_sentences']:d} training sentences "
    f"({setup['train_tokens']:d} tokens), vocab {setup['vocab_size']:d}. Every neural LM: "
    f"{setup['model']}, trained {setup['train_steps']:d} steps of {setup['batch_size']:d} "
    f"sentences in {setup.get('precision', 'fp32')}{_precision_reason(setup)}.",
    "",
    *report_notes(report),
    *_training_section(report),
  ]
  p_line = (
    f"p: paired bootstrap over utterances ({significance.DEFAULT_RESAMPLES:,d} seeded "
    "resamples) of the LM vs the first pass."
  )
  if "asr" in report:
    lists = f"first {setup['asr_max_lists']:d}" if setup["asr_max_lists"] else "all"
    parts += [
      "",
      f"## Table 1: LibriSpeech reranking, WER % ({lists} lists of each set; λ tuned on dev)",
      "",
      wer_table(report["asr"]),
      "",
      p_line,
      *_comparison_section(
        report, "asr_comparisons", "WER points, paired over utterances", ["test", "setting"]
      ),
    ]
  if "asr_paired" in report:
    parts += [
      "",
      f"## Table 1b: every LM on the same seeded sample of {setup['asr_sample_lists']:d} "
      "lists per set (WER %, λ tuned on the dev sample)",
      "",
      wer_table(report["asr_paired"]),
      "",
      p_line,
      *_comparison_section(
        report, "asr_paired_comparisons", "WER points, paired over utterances", ["test", "setting"]
      ),
      "",
      "## Table 7: (pseudo-)perplexity mean / median per sentence [full-setting WER] on the "
      "sample of Table 1b; word pieces for the neural LMs, words for the 5-gram",
      "",
      pppl_table(report["asr_paired"]),
    ]
  if "nmt" in report:
    parts += [
      "",
      "## Table 2: WMT21 de-en, LM-only selection among the "
      f"systems' outputs (first {setup['nmt_max_lists'] or 'all'} segments)",
      "",
      "The candidates carry no NMT scores, so the LMs select alone (the paper interpolated "
      "with its NMT model's scores).",
      "",
      bleu_table(report["nmt"]),
    ]
  if "sts" in report:
    first_pairs = f" (first {setup['sts_max_pairs']:d} pairs)" if setup["sts_max_pairs"] else ""
    parts += [
      "",
      f"## Table 3: STS-B, Pearson r x 100{first_pairs}",
      "",
      sts_table(report["sts"], ["stsb_dev", "stsb_test"], True),
      "",
      "## Table 4: SICK test, Pearson r x 100",
      "",
      sts_table(report["sts"], ["sick_test"]),
      "",
      "Cells: Pearson [95% bootstrap CI over pairs].",
      *_comparison_section(
        report, "sts_comparisons", "Pearson x 100, paired over pairs", ["set", "representation"]
      ),
    ]
  if report.get("curves"):
    parts += [
      "",
      "## Learning curves: quality vs training tokens (curves/learning_curves.png)",
      "",
      f"Dev WER: λ tuned on a seeded sample of {setup['curve_asr_lists']:d} lists of each dev "
      f"set and applied to it (no test set involved), first pass '{CURVE_ASR_SETTING}' (decoder "
      "and CTC scores, no LM).",
      "",
      curves_table(report["curves"]),
    ]
  return "\n".join(parts) + "\n"


def build_report(s, plan, data_stats, model_dirs, results, peak=None):
  training = {}
  for model_type, d in model_dirs.items():
    summary = read_json(os.path.join(d, "train_summary.json"))
    loss = (summary.get("eval") or {}).get("loss")
    training[kinds.display_name(model_type)] = {
      "wall_seconds": summary["wall_seconds"],
      "tokens_per_second": summary["tokens_per_second"],
      "gflops_per_second": summary.get("gflops_per_second"),
      "tokens_trained": summary["final_step"] * tokens_per_step(s, data_stats),
      "of_peak": (
        summary["gflops_per_second"] / peak["gflops"]
        if peak and summary.get("gflops_per_second")
        else None
      ),
      "final_step": summary["final_step"],
      "eval_loss": loss,
    }
  report = {
    "setup": {
      "mode": FLAGS.mode,
      "command": " ".join(["python"] + sys.argv),
      "commit": machine.git_commit(),
      "machine": machine.machine(),
      "finished": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
      "train_sentences": data_stats["train"]["sentences"],
      "train_tokens": data_stats["train"]["tokens"],
      "eval_sentences": data_stats["eval"]["sentences"],
      "max_books": s["max_books"],
      "vocab_size": data_stats["vocab_size"],
      "model": (
        f"{s['num_hidden_layers']:d} layers x {s['hidden_size']:d} hidden, "
        f"{s['num_attention_heads']:d} heads, FFN {s['intermediate_size']:d}"
      ),
      "train_steps": plan["train_steps"],
      "batch_size": s["train_batch_size"],
      "budget_minutes": s["budget_minutes"],
      "calibration": plan.get("calibration"),
      "calibrations": plan.get("calibrations"),
      "precision": plan.get("precision", "fp32"),
      "matmul_peak": peak,
      "asr_max_lists": s["asr_max_lists"],
      "asr_sample_lists": s["asr_sample_lists"],
      "curve_asr_lists": s["curve_asr_lists"],
      "nmt_max_lists": s["nmt_max_lists"],
      "sts_max_pairs": s["sts_max_pairs"],
    },
    "training": training,
  }
  report.update(results)
  return report


# ---------------------------------------------------------------------- main


def stage_names():
  """The job's stages in the order they run (stage i of n)."""
  return (
    ["data", "kenlm", "plan"]
    + [f"train_{t}" for t in FLAGS.models]
    + ["peak", "sts", "asr_paired", "curves", "asr", "nmt"]
  )


def check_data():
  """The absolute data root; cli.InputError naming each missing file and its source."""
  with cli.user_input():
    root = os.path.abspath(io_utils.data_root(FLAGS.data_dir))
  missing = missing_data(root)
  if missing:
    raise cli.InputError(missing_data_message(root, missing))
  return root


def main(argv):
  del argv
  unknown = sorted(set(FLAGS.models) - set(MODEL_TYPES))
  if unknown:
    raise app.UsageError(f"--models: unknown {unknown} (choose from {MODEL_TYPES})")
  root = check_data()
  # The job's own lines: time, level, message (absl's prefix adds thread id and source line).
  logging.get_absl_handler().setFormatter(
    std_logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
  )
  s = settings()
  work_dir = os.path.abspath(FLAGS.work_dir or os.path.join(REPO, "runs", "reproduce", FLAGS.mode))
  os.makedirs(work_dir, exist_ok=True)
  logging.info("mode %s, work dir %s, data %s", FLAGS.mode, work_dir, root)
  stages = progress.Stages(stage_names())

  stages.start("data")
  data_dir = stage_data(work_dir, root, s)
  data_stats = read_json(os.path.join(data_dir, "data_stats.json"))
  stages.start("kenlm")
  kenlm_path = stage_kenlm(work_dir, data_dir, s)
  stages.start("plan")
  plan = stage_plan(work_dir, data_dir, s)
  model_dirs = stage_train(work_dir, data_dir, s, plan, stages)
  stages.start("peak")
  peak = stage_peak(work_dir, plan)

  # The resample count in the key re-runs evaluations stored before they carried bootstraps.
  key = {
    "checkpoints": _checkpoint_key(model_dirs),
    "data": root,
    "bootstrap_resamples": significance.DEFAULT_RESAMPLES,
  }
  results = {}
  sts_args = [
    "run_sts.py",
    "--data_dir=" + root,
    "--model_dir=" + ",".join(named_specs(model_dirs)),
    "--representations=context,embed",
  ]
  if s["sts_max_pairs"]:
    sts_args.append(f"--max_pairs={s['sts_max_pairs']:d}")
  stages.start("sts")
  results["sts"] = stage_eval(
    work_dir, "sts", sts_args, "sts_results.json", dict(key, max_pairs=s["sts_max_pairs"])
  )
  kenlm = [f"{KENLM_NAME}=kenlm:{kenlm_path}"]
  lms = named_specs(model_dirs) + kenlm
  # Every LM on the same seeded sample of lists: the paired comparisons with the biLM.
  stages.start("asr_paired")
  sample = s["asr_sample_lists"]
  results["asr_paired"] = stage_eval(
    work_dir,
    "asr_paired",
    rescoring_args("asr", root, lms, sample_lists=sample),
    "rescoring_results.json",
    dict(key, kenlm=kenlm_path, sample_lists=sample),
  )
  stages.start("curves")
  step_tokens = tokens_per_step(s, data_stats)
  results["curves"] = stage_curves(work_dir, root, s, model_dirs, step_tokens, key)
  # The LMs of one pass per sentence (and the 5-gram) on whole sets: the biLM's pass per token
  # is what the paired sample above is for.
  one_pass = (
    named_specs({t: d for t, d in model_dirs.items() if not kinds.get(t).masked_copies}) + kenlm
  )
  for task, task_lms, max_lists in (
    ("asr", one_pass, s["asr_max_lists"]),
    ("nmt", lms, s["nmt_max_lists"]),
  ):
    stages.start(task)
    results[task] = stage_eval(
      work_dir,
      task,
      rescoring_args(task, root, task_lms, max_lists=max_lists),
      "rescoring_results.json",
      dict(key, kenlm=kenlm_path, max_lists=max_lists),
    )

  results["sts_comparisons"] = sts_comparisons(results["sts"])
  results["asr_comparisons"] = asr_comparisons(results["asr"])
  results["asr_paired_comparisons"] = asr_comparisons(results["asr_paired"])
  report = build_report(s, plan, data_stats, model_dirs, results, peak)
  text = render_report(report)
  io_utils.write_atomically(os.path.join(work_dir, "report.json"), json.dumps(report, indent=2))
  io_utils.write_atomically(os.path.join(work_dir, "report.md"), text)
  print(text)
  logging.info("report: %s (%s in this run)", os.path.join(work_dir, "report.md"), stages.elapsed())


if __name__ == "__main__":
  define_flags()
  cli.run(main)

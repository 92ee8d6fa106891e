"""What reproduce.py trains and evaluates: the modes' presets (`Settings`, `MODES`) and the data
files the job reads (`REQUIRED_DATA`); the job's flags are `reproduction_job.JobParams`.
"""

import dataclasses
import os

import kinds
from util import cli
from util import io_utils

MODEL_TYPES = kinds.PRETRAINABLE


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
  peak_matmul_shape: str  # MxKxN of the matmul peak, training's GFLOP/s reference
  peak_matmul_runs: int


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
    # A check of the stage, not a figure to quote: 2048^3 x 10 runs was a quick run's longest
    # step after training (about 15 CPU seconds).
    peak_matmul_shape="1024x1024x1024",
    peak_matmul_runs=3,
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
    peak_matmul_shape="2048x2048x2048",
    peak_matmul_runs=10,
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


def check_data(data_dir):
  """The absolute data root of `data_dir` (--data_dir); cli.InputError naming each missing file
  and its source."""
  with cli.user_input():
    root = os.path.abspath(io_utils.data_root(data_dir))
  missing = missing_data(root)
  if missing:
    raise cli.InputError(missing_data_message(root, missing))
  return root

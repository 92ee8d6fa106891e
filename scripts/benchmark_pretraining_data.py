"""Measures create_pretraining_data.py at scale: wall time, sentences/s and peak RSS.

The corpora are made by REPEATING real sentences: the LibriSpeech-style sentences corpus.py makes
from the shared Gutenberg books (as reproduce.py's quick mode does; made once, cached in
--work_dir), repeated until each size is reached. A scale test only: repeated text tokenizes like
real text, but it is not a new corpus. Each size runs with 1 and 2 workers (--workers), with the
authors' vocab, `--input_format=sentences --num_shards=16`, as a subprocess under
`/usr/bin/time -v` (peak RSS: the largest single process, parent or worker). The table also
extrapolates (start-up plus a rate, fitted to the two largest sizes) to the LibriSpeech LM
corpus (~40 M sentences) and the paper's Wikipedia + LibriSpeech (~160 M).

  python scripts/benchmark_pretraining_data.py --sizes=1000000,4000000,16000000
  python scripts/benchmark_pretraining_data.py --sizes=20000                      # a smoke run

It runs long and uses every core it is given: run it on a quiet machine.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

from absl import app
from absl import flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from util import io_utils  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["1000000", "4000000", "16000000"], "Corpus sizes in sentences.")
flags.DEFINE_list("workers", ["1", "2"], "--num_workers values to run at each size.")
flags.DEFINE_string(
  "work_dir", "work/benchmark_pretraining_data", "Corpora and outputs (removed after each run)."
)
flags.DEFINE_integer("max_books", 40, "Gutenberg books the repeated sentences come from.")
flags.DEFINE_integer("num_shards", 16, "--num_shards of each run.")
flags.DEFINE_list("extrapolate", ["40000000", "160000000"], "Sizes to extrapolate to.")
io_utils.define_data_dir_flag()

_SCRIPT = os.path.join(_REPO, "create_pretraining_data.py")


def base_sentences(root, work_dir, max_books):
  """LibriSpeech-style sentences of the shared Gutenberg books (corpus.py, cached)."""
  from text import corpus  # pylint: disable=g-import-not-at-top

  out = os.path.join(work_dir, f"gutenberg_{max_books}_books")
  corpus.prepare_corpus(
    [corpus.default_gutenberg_tar(root)],
    out,
    normalization="librispeech",
    eval_fraction=0.0,
    seed=1,
    max_books=max_books,
    input_format="paragraphs",
  )
  with open(os.path.join(out, "train.txt"), "rb") as f:
    return [line for line in f.read().split(b"\n") if line.strip()]


def repeated_corpus(lines, size, work_dir):
  """A file of `size` sentences: `lines` repeated (cached); returns (path, bytes)."""
  path = os.path.join(work_dir, f"sentences_{size}.txt")
  if not os.path.exists(path):
    with io_utils.atomic_open(path, "wb") as f:
      for i in range(size):
        f.write(lines[i % len(lines)] + b"\n")
  return path, os.path.getsize(path)


def measure(corpus_path, vocab, workers, out):
  """One run under /usr/bin/time -v: (wall seconds, peak RSS bytes, the run's summary)."""
  shutil.rmtree(out, ignore_errors=True)
  command = [
    "/usr/bin/time",
    "-v",
    sys.executable,
    _SCRIPT,
    f"--input_file={corpus_path}",
    f"--vocab_file={vocab}",
    "--input_format=sentences",
    f"--num_shards={FLAGS.num_shards}",
    f"--num_workers={workers}",
    f"--output_dir={out}",
  ]
  start = time.time()
  result = subprocess.run(command, capture_output=True, text=True, check=False)
  wall = time.time() - start
  if result.returncode:
    sys.exit(f"run failed ({result.returncode}): {' '.join(command)}\n{result.stderr[-3000:]}")
  rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr).group(1))
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  shutil.rmtree(out, ignore_errors=True)
  return wall, rss_kb * 1024, summary


def main(argv):
  del argv
  root = io_utils.data_root(FLAGS.data_dir)
  vocab = os.path.join(root, "reference-vocab", "tta-vocab-lower.sub-32k.txt")
  os.makedirs(FLAGS.work_dir, exist_ok=True)
  lines = base_sentences(root, FLAGS.work_dir, FLAGS.max_books)
  print(
    f"corpora: {len(lines):,} distinct LibriSpeech-style sentences of {FLAGS.max_books} shared "
    "Gutenberg books (corpus.py), REPEATED to each size (a scale test, not a real corpus)"
  )
  print(
    f"machine: {machine.cpu_and_cores()}, load {machine.load_average()}; commit "
    f"{machine.git_commit()}"
  )
  print(
    f"{'sentences':>12} {'text MB':>8} {'workers':>7} {'wall s':>8} {'sent/s':>9} {'RSS MB':>7}"
  )
  rows = []
  for size in (int(s) for s in FLAGS.sizes):
    path, text_bytes = repeated_corpus(lines, size, FLAGS.work_dir)
    for workers in (int(w) for w in FLAGS.workers):
      wall, rss, summary = measure(path, vocab, workers, os.path.join(FLAGS.work_dir, "out"))
      sentences = summary["train"]["sentences"] + summary["eval"]["sentences"]
      rows.append((size, text_bytes, workers, wall, sentences / wall, rss))
      print(
        f"{size:>12,} {text_bytes / 1e6:>8.0f} {workers:>7} {wall:>8.1f} "
        f"{sentences / wall:>9.0f} {rss / 1e6:>7.0f}",
        flush=True,
      )
  print(
    "extrapolated: wall = start-up + sentences / rate, fitted to the two largest sizes (to the "
    "largest alone when only one was run); RSS as at the largest size (it does not grow):"
  )
  for workers in (int(w) for w in FLAGS.workers):
    runs = sorted(r for r in rows if r[2] == workers)
    (n1, _, _, t1, _, _), (n2, b2, _, t2, _, rss) = ([runs[0]] + runs)[-2:]
    # Too small or too noisy a difference (smoke runs): the largest size's mean rate.
    per_sentence = (t2 - t1) / (n2 - n1) if n2 > n1 and t2 > t1 else t2 / n2
    startup = t2 - per_sentence * n2
    for target in (int(t) for t in FLAGS.extrapolate):
      wall = startup + per_sentence * target
      print(
        f"{target:>12,} {b2 * target / n2 / 1e6:>8.0f} {workers:>7} {wall:>8.0f} "
        f"{target / wall:>9.0f} {rss / 1e6:>7.0f}"
      )


if __name__ == "__main__":
  app.run(main)

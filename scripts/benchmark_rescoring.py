"""Hypotheses per second of rescoring a whole N-best set end to end from the Kaldi format, one run.

LibriSpeech test_clean 30-best as a Kaldi dir (tests/nbest_fixtures.py), timed as a user runs it:
run_rescoring.py --format=kaldi with T-TA, then KenLM + T-TA (weights tuned beforehand, a whole
process from an empty cache); score.py on the distinct hypotheses; and in-process, on
--peer_lists lists, `NeuralLM.score` against a same-size BERT's PLL through minicons.
Results to --output_dir/results.{json,md} with the CPU, threads, load and commit.

  python scripts/benchmark_rescoring.py --tta=runs/reproduce/full/models/tta \\
      --kenlm=runs/reproduce/full/kenlm/5gram.bin
"""

import json
import os
import shutil
import subprocess
import sys
import time

from absl import flags
from absl import logging

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)
# The Kaldi writer of the tests, written from Kaldi's docs apart from our reader (no twin here).
sys.path.insert(0, os.path.join(_REPO, "tests"))

from util import cli  # noqa: E402
from util import io_utils  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("tta", None, "T-TA model dir.")
flags.DEFINE_string("kenlm", None, "KenLM binary of the KenLM + T-TA run (empty: skip that run).")
flags.DEFINE_string("test_set", "test_clean", "Shared ESPnet N-best set rescored whole.")
flags.DEFINE_string("dev_set", "dev_clean", "Shared ESPnet N-best set the weights are tuned on.")
flags.DEFINE_integer("dev_lists", 300, "Lists of --dev_set to tune on (untimed).", lower_bound=1)
flags.DEFINE_integer(
  "max_lists",
  0,
  "Rescore only the first N lists of --test_set (0: all; a smoke run).",
  lower_bound=0,
)
flags.DEFINE_integer(
  "peer_lists", 100, "Lists of --test_set for the minicons comparison (0: skip).", lower_bound=0
)
flags.DEFINE_integer("peer_batch", 16, "Sentences per minicons / T-TA call.", lower_bound=1)
flags.DEFINE_integer("intra_op", 0, "Threads of TF and PyTorch in this process (0: all cores).")
flags.DEFINE_string(
  "output_dir", os.path.join(_REPO, "runs", "benchmark_rescoring"), "Where everything goes."
)
io_utils.define_data_dir_flag()


def write_kaldi_sets(out):
  """The --dev_set sample and --test_set as Kaldi dirs; {name: (dir, refs path, lists)}."""
  import nbest_fixtures  # pylint: disable=g-import-not-at-top

  from nbest.formats import espnet  # pylint: disable=g-import-not-at-top

  test = espnet.read_espnet_nbest(FLAGS.test_set, FLAGS.data_dir)
  sets = {
    "dev": espnet.read_espnet_nbest(FLAGS.dev_set, FLAGS.data_dir)[: FLAGS.dev_lists],
    "test": test[: FLAGS.max_lists] if FLAGS.max_lists else test,
  }
  written = {}
  for name, lists in sets.items():
    root = os.path.join(out, "kaldi", name)
    shutil.rmtree(root, ignore_errors=True)
    written[name] = (*nbest_fixtures.write_kaldi_dir(lists, root), lists)
  return written


def run_timed(args, log_path):
  """Wall seconds of a command of this repository, its output to `log_path`; RuntimeError
  naming the command and its log when it fails."""
  start = time.perf_counter()
  with open(log_path, "w", encoding="utf-8") as log:
    result = subprocess.run(
      [sys.executable] + args, cwd=_REPO, stdout=log, stderr=subprocess.STDOUT, check=False
    )
  seconds = time.perf_counter() - start
  if result.returncode:
    raise RuntimeError(f"{' '.join(args[:1])} exited {result.returncode}; see {log_path}")
  return seconds


def rescoring_runs(kaldi, out):
  """Tunes (untimed) and times the blind rescoring of the test set for each LM combination."""
  dev_dir, dev_refs, _ = kaldi["dev"]
  test_dir, test_refs, test_lists = kaldi["test"]
  combos = {"T-TA": f"tta={FLAGS.tta}"}
  if FLAGS.kenlm:
    combos["KenLM + T-TA"] = f"ngram=kenlm:{FLAGS.kenlm},tta={FLAGS.tta}"
  records = []
  for name, spec in combos.items():
    slug = name.replace(" + ", "_").replace("-", "").lower()
    common = ["run_rescoring.py", "--format=kaldi", f"--model_dir={spec}"]
    tuned = os.path.join(out, f"tune_{slug}")
    run_timed(
      common
      + [
        "--first_pass=decoder,ctc",
        f"--dev_file={dev_dir}",
        f"--dev_refs={dev_refs}",
        f"--test_file={dev_dir}",
        f"--test_refs={dev_refs}",
        f"--output_dir={tuned}",
      ],
      os.path.join(out, f"tune_{slug}.log"),
    )
    blind = os.path.join(out, f"blind_{slug}")
    shutil.rmtree(blind, ignore_errors=True)  # an empty cache: every sentence is scored
    logging.info("timing run_rescoring.py with %s on %d lists", name, len(test_lists))
    seconds = run_timed(
      common
      + [
        f"--test_file={test_dir}",
        f"--test_refs={test_refs}",
        f"--weights_file={os.path.join(tuned, 'weights.json')}",
        f"--output_dir={blind}",
      ],
      os.path.join(out, f"blind_{slug}.log"),
    )
    with open(os.path.join(blind, "rescoring_report.json"), encoding="utf-8") as f:
      test = json.load(f)["sets"]["test"]
    records.append(
      dict(
        counts(test_lists),
        what=f"run_rescoring.py, {name}",
        seconds=seconds,
        wer_first_pass=test["first_pass"]["wer"],
        wer_rescored=test["rescored"]["wer"],
      )
    )
  return records


def counts(lists):
  texts = [h.text for l in lists for h in l.hyps]
  return {"lists": len(lists), "hypotheses": len(texts), "distinct": len(set(texts))}


def score_py_run(kaldi, out):
  """score.py with T-TA on the test set's distinct hypotheses, timed as a process."""
  lists = kaldi["test"][2]
  path = os.path.join(out, "distinct_hypotheses.txt")
  distinct = sorted({h.text for l in lists for h in l.hyps})
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(t + "\n" for t in distinct))
  target = os.path.join(out, "scores.jsonl")
  for stale in (target, target + ".partial", target + ".partial.json"):
    if os.path.exists(stale):
      os.remove(stale)
  logging.info("timing score.py on %d sentences", len(distinct))
  seconds = run_timed(
    ["score.py", f"--model_dir={FLAGS.tta}", f"--input_file={path}", f"--output_file={target}"],
    os.path.join(out, "score.log"),
  )
  return dict(counts(lists), hypotheses=len(distinct), what="score.py, T-TA", seconds=seconds)


def peer_runs(kaldi, threads):
  """T-TA's NeuralLM.score and minicons' PLL of a same-size BERT on the first --peer_lists
  lists, in this process, --peer_batch sentences per call."""
  from lm import inference  # pylint: disable=g-import-not-at-top
  from reproduction import peers  # pylint: disable=g-import-not-at-top

  lists = kaldi["test"][2][: FLAGS.peer_lists]
  texts = [h.text for l in lists for h in l.hyps]
  lm = inference.load_lm(FLAGS.tta)
  (minicons,) = peers.build_peers(
    ["minicons@torch"], lm.model.config, lm.tokenizer, lm.max_seq_length, threads
  ).values()
  batches = [
    range(i, min(i + FLAGS.peer_batch, len(texts))) for i in range(0, len(texts), FLAGS.peer_batch)
  ]
  timed = {
    "NeuralLM.score, T-TA": lambda b: lm.score([texts[i] for i in b]),
    # minicons gets the raw texts too: its tokenizer wraps ours (lower-casing included).
    "minicons PLL, same-size BERT (PyTorch)": lambda b: minicons.score_sentences(
      [texts[i] for i in b]
    ),
  }
  records = []
  for what, call in timed.items():
    call(batches[0])  # traces / warms up outside the timing
    start = time.perf_counter()
    for batch in batches:
      call(batch)
    records.append(dict(counts(lists), what=what, seconds=time.perf_counter() - start))
  return records


def markdown(result):
  lines = [
    f"`{result['command']}`",
    "",
    f"{result['cpu']}, {result['threads']} threads, commit {result['commit']}, load "
    f"{result['load_avg_1m'][0]:.2f} -> {result['load_avg_1m'][1]:.2f}",
    "",
    "| what | lists | hyps | distinct | seconds | hyps/s | WER % first pass -> rescored |",
    "|---|---:|---:|---:|---:|---:|---|",
  ]
  for r in result["records"]:
    wer = ""
    if "wer_rescored" in r:
      wer = f"{r['wer_first_pass']:.2f} -> {r['wer_rescored']:.2f}"
    lines.append(
      f"| {r['what']} | {r['lists']} | {r['hypotheses']} | {r['distinct']} | {r['seconds']:.1f} "
      f"| {r['hypotheses'] / r['seconds']:.1f} | {wer} |"
    )
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  if not FLAGS.tta:
    raise cli.InputError("--tta is required (a T-TA model dir)")
  from lm import inference  # pylint: disable=g-import-not-at-top

  with cli.user_input():
    inference.check_spec(FLAGS.tta)
    if FLAGS.kenlm:
      inference.check_spec(f"kenlm:{FLAGS.kenlm}")
  threads = machine.pin_threads(FLAGS.intra_op, FLAGS.intra_op)[0]
  out = FLAGS.output_dir
  os.makedirs(out, exist_ok=True)
  load_start = machine.load_average()
  with cli.user_input():
    kaldi = write_kaldi_sets(out)
  records = rescoring_runs(kaldi, out) + [score_py_run(kaldi, out)]
  if FLAGS.peer_lists:
    records += peer_runs(kaldi, threads)
  result = {
    "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
    "cpu": machine.cpu_and_cores(),
    "threads": threads,
    "commit": machine.git_commit(),
    "load_avg_1m": [load_start, machine.load_average()],
    "records": records,
  }
  io_utils.write_atomically(os.path.join(out, "results.json"), json.dumps(result, indent=2) + "\n")
  text = markdown(result)
  io_utils.write_atomically(os.path.join(out, "results.md"), text)
  print(text)


if __name__ == "__main__":
  cli.run(main)

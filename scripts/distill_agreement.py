"""How close a (distilled) T-TA's one-pass sentence scores come to its teacher's pseudo-log-
likelihood, and what each costs (docs/DESIGN.md §3.6): both LMs score the hypotheses of a seeded
sample of the shared LibriSpeech N-best lists through the one inference path (lm/inference.py, as
score.py does); reported are Pearson's r of the sentence log-probabilities over all hypotheses,
the mean r within a list (what reranking sees), how often the two put the same hypothesis first,
and each LM's scoring time and hypotheses/s (after one list that traces the graphs). A measuring
tool, not a test: run it on a quiet machine.

  python scripts/distill_agreement.py --student=runs/tta_distilled --teacher=runs/bilm \\
    --set=dev_clean --sample_lists=300
"""

import json
import os
import sys
import time

from absl import app
from absl import flags
import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from lm import inference  # noqa: E402
from nbest import types  # noqa: E402
from nbest.formats import espnet  # noqa: E402
from util import io_utils  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("student", None, "The one-pass LM (a T-TA model dir).", required=True)
flags.DEFINE_string("teacher", None, "The PLL LM (a biLM model dir, hf:DIR or bert:DIR).")
flags.DEFINE_string("set", "test_clean", "The shared ESPnet2 30-best set.")
flags.DEFINE_integer("sample_lists", 300, "Lists drawn (seeded) from the set (0: all).")
flags.DEFINE_integer("seed", 0, "Seed of the sample.")
flags.DEFINE_string("output_json", None, "Also write the figures here (a new file).")
io_utils.define_data_dir_flag()


def timed_scores(spec, lists):
  """(per list float64 [K] sentence log-probabilities, seconds, hypotheses scored after the
  first list, which traces the graphs and is not timed)."""
  lm = inference.load_lm(spec)
  per_list = [np.array([s.total for s in lm.score([h.text for h in lists[0].hyps])])]
  start = time.perf_counter()
  for nbest in lists[1:]:
    per_list.append(np.array([s.total for s in lm.score([h.text for h in nbest.hyps])]))
  return per_list, time.perf_counter() - start, sum(len(n.hyps) for n in lists[1:])


def agreement(student, teacher):
  """Pearson's r over all hypotheses, the mean r within the lists where both vary, and the share
  of lists whose best hypothesis is the same; per list float [K] scores each."""
  within = [
    np.corrcoef(s, t)[0, 1] for s, t in zip(student, teacher) if np.std(s) > 0 and np.std(t) > 0
  ]
  return {
    "pearson": float(np.corrcoef(np.concatenate(student), np.concatenate(teacher))[0, 1]),
    "pearson_within_lists": float(np.mean(within)) if within else float("nan"),
    "lists_with_r": len(within),
    "same_best": float(np.mean([np.argmax(s) == np.argmax(t) for s, t in zip(student, teacher)])),
  }


def main(argv):
  del argv
  if FLAGS.output_json:
    io_utils.check_output_path(FLAGS.output_json, "output_json", is_dir=False)
    if os.path.lexists(FLAGS.output_json):
      raise app.UsageError(f"--output_json {FLAGS.output_json} exists; give a new file")
  select = types.list_selection(sample_lists=FLAGS.sample_lists or None, seed=FLAGS.seed)
  lists = espnet.read_espnet_nbest(FLAGS.set, io_utils.data_root(FLAGS.data_dir), select=select)
  if len(lists) < 2:
    raise app.UsageError("--sample_lists: need at least 2 lists (the first one is not timed)")
  figures = {"set": FLAGS.set, "lists": len(lists), "hypotheses": sum(len(n.hyps) for n in lists)}
  scores = {}
  for name, spec in (("student", FLAGS.student), ("teacher", FLAGS.teacher)):
    scores[name], seconds, timed = timed_scores(spec, lists)
    figures[name] = {"spec": spec, "seconds": seconds, "hypotheses_per_second": timed / seconds}
  figures.update(agreement(scores["student"], scores["teacher"]))
  figures["teacher_seconds_per_student_second"] = (
    figures["teacher"]["seconds"] / figures["student"]["seconds"]
  )
  print(json.dumps(figures, indent=2))
  if FLAGS.output_json:
    with open(FLAGS.output_json, "x", encoding="utf-8") as f:
      json.dump(figures, f, indent=2)


if __name__ == "__main__":
  flags.mark_flag_as_required("teacher")
  app.run(main)

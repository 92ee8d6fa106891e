"""Unsupervised semantic textual similarity (paper Tables 3 and 4).

Each sentence becomes a vector (inference.NeuralLM.sentence_vectors), a pair's
similarity is the cosine of its two vectors, and the score is Pearson r x 100
(the paper's metric; Spearman is reported too) against the gold scores of
STS-B dev/test and SICK test, with a seeded 95% bootstrap interval of the Pearson
(evaluation/significance.py). The per-pair cosines and gold scores are kept in sts_results.json so
that reproduce.py can compare two models on the same pairs. No training, no tuning.

Example:
  python run_sts.py --model_dir=runs/tta,runs/bilm,runs/unilm \
      --representations=context,embed --output_dir=results/sts
"""

import json
import os
import time

from absl import flags
from absl import logging
import numpy as np

from evaluation import significance
from evaluation import sts_data
from lm import inference
from lm import lm_flags
from util import cli
from util import io_utils
from util import progress

FLAGS = flags.FLAGS
RESULTS_FILE = "sts_results.json"

lm_flags.define_model_dir(several=True, kenlm=False, required=False)  # required under __main__
flags.DEFINE_list(
  "representations",
  ["context", "embed"],
  "Any of context, embed, first, last (the [CLS]/[SOS] and "
  "[SEP]/[EOS] vectors), and context\\M / first\\M ... for the "
  "bilm/bert intact-input variants.",
)
flags.DEFINE_list("sets", ["stsb_dev", "stsb_test", "sick_test"], "Evaluation sets.")
io_utils.define_data_dir_flag()
flags.DEFINE_string(
  "output_dir", None, "Where to write sts_results.json and sts_results.md (optional)."
)
flags.DEFINE_integer(
  "max_pairs",
  None,
  "Evaluate only the first N pairs of each set (quick runs; the full sets are the result).",
  lower_bound=0,
)
lm_flags.define_throughput_flags()
flags.DEFINE_integer(
  "bootstrap_resamples",
  significance.DEFAULT_RESAMPLES,
  "Paired bootstrap resamples (over sentence pairs) for each Pearson's 95% interval.",
  lower_bound=1,
)
flags.DEFINE_integer("bootstrap_seed", 0, "Seed of the bootstrap resampler.")

SETS = {
  "stsb_dev": ("STS-B dev", lambda d: sts_data.read_stsb("dev", d)),
  "stsb_test": ("STS-B test", lambda d: sts_data.read_stsb("test", d)),
  "sick_test": ("SICK test", lambda d: sts_data.read_sick(d, "TEST")),
}


def parse_representation(name):
  """ "context\\M" -> ("context", False); "embed" -> ("embed", True)."""
  pooling, _, variant = name.partition("\\")
  if pooling not in inference.POOLINGS or variant not in ("", "M"):
    raise ValueError(
      f"unknown representation {name!r}; expected one of {inference.POOLINGS}, optionally with \\M"
    )
  return pooling, variant != "M"


def _check_representations(names):
  """The --representations validator: flags.ValidationError naming an unknown one."""
  try:
    for name in names:
      parse_representation(name)
  except ValueError as e:
    raise flags.ValidationError(str(e)) from None
  return True


# Sentences per sentence_vectors call; progress (rate, ETA) is reported between calls.
ENCODE_CHUNK = 1000


def encode(lm, sentences, pooling, masked, label):
  """lm.sentence_vectors of `sentences` in chunks, logging progress as `label`: float32 [N, D]."""
  bar = progress.Progress(label, total=len(sentences), unit="sentences")
  parts = []
  for begin in range(0, max(len(sentences), 1), ENCODE_CHUNK):  # no sentence: one call, [0, D]
    chunk = sentences[begin : begin + ENCODE_CHUNK]
    parts.append(lm.sentence_vectors(chunk, pooling=pooling, masked=masked))
    bar.update(len(chunk))
  return np.concatenate(parts)


def pair_cosines(lm, pairs, representation, label="encoding"):
  """Cosine similarity of each pair's two sentence vectors: float [P].

  Each distinct sentence is encoded once; progress lines are logged as `label`.
  """
  pooling, masked = parse_representation(representation)
  sentences = sorted({s for p in pairs for s in (p.sent1, p.sent2)})
  index = {s: i for i, s in enumerate(sentences)}
  vectors = encode(lm, sentences, pooling, masked, label)
  left = vectors[[index[p.sent1] for p in pairs]]
  right = vectors[[index[p.sent2] for p in pairs]]
  return inference.cosine(left, right)


def evaluate_sts(
  lm, pairs, representation, label="encoding", bootstrap=(significance.DEFAULT_RESAMPLES, 0)
):
  """Scores of one set and representation, as stored in sts_results.json.

  Args:
    bootstrap: (resamples, seed) of the Pearson interval.

  Returns:
    dict: "scores" [Pearson x100, Spearman x100], "pearson_ci" [low, high] (95%),
    "cosines" float [P] and "gold" float [P].
  """
  cosines = pair_cosines(lm, pairs, representation, label)
  gold = [float(p.score) for p in pairs]
  scores = sts_data.pearson_spearman(cosines, gold)
  resamples, seed = bootstrap
  ci = significance.pearson_interval(cosines, gold, num_resamples=resamples, seed=seed)
  return {
    "scores": list(scores),
    "pearson_ci": [ci.low, ci.high],
    "cosines": [float(c) for c in cosines],
    "gold": gold,
  }


def markdown_table(results, set_names):
  """Rows "model (representation)", columns the sets: Pearson [95% CI] (Spearman)."""
  lines = [
    "| model | representation | " + " | ".join(SETS[s][0] for s in set_names) + " |",
    "|---|---|" + "---|" * len(set_names),
  ]
  for row in results:
    cells = []
    for name in set_names:
      pearson, spearman = row["scores"][name]
      low, high = row["pearson_ci"][name]
      cells.append(f"{pearson:.2f} [{low:.2f}, {high:.2f}] ({spearman:.2f})")
    lines.append(f"| {row['model']} | {row['representation']} | {' | '.join(cells)} |")
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  if not FLAGS.output_dir:
    evaluate_and_write()
    return
  # One writer of the results: a second run into --output_dir exits 2 naming this one.
  with io_utils.exclusive_lock(os.path.join(FLAGS.output_dir, RESULTS_FILE), wait=False):
    evaluate_and_write()


def evaluate_and_write():
  """Every --model_dir and representation on every set; the table, and the results files."""
  # What is cheap first: the models are there, before the sets are read.
  with cli.user_input():
    for _, spec in lm_flags.model_specs(FLAGS.model_dir):
      if spec.startswith("kenlm:"):
        raise cli.InputError(f"--model_dir {spec}: an n-gram model has no sentence vectors")
      inference.check_spec(spec)
    data_sets = {name: SETS[name][1](FLAGS.data_dir) for name in FLAGS.sets}
  for name, pairs in data_sets.items():
    if FLAGS.max_pairs:
      data_sets[name] = pairs[: FLAGS.max_pairs]
    logging.info("%s: %d pairs", SETS[name][0], len(data_sets[name]))
  results = []
  for row_name, spec in lm_flags.model_specs(FLAGS.model_dir):
    with cli.user_input():
      lm = inference.load_lm(spec, **lm_flags.load_options(FLAGS))
    row_name = row_name or os.path.basename(spec.rstrip("/"))
    for representation in FLAGS.representations:
      row = {
        "model": row_name,
        "model_type": lm.model_type,
        "representation": representation,
        "scores": {},
        "pearson_ci": {},
        "cosines": {},
        "gold": {},
      }
      for name, pairs in data_sets.items():
        start = time.time()
        label = f"{row_name} {representation} {name}"
        bootstrap = (FLAGS.bootstrap_resamples, FLAGS.bootstrap_seed)
        for field, value in evaluate_sts(lm, pairs, representation, label, bootstrap).items():
          row[field][name] = value
        logging.info(
          "%s %s %s: Pearson %.2f [%.2f, %.2f] Spearman %.2f (%.1f s)",
          row_name,
          representation,
          name,
          row["scores"][name][0],
          *row["pearson_ci"][name],
          row["scores"][name][1],
          time.time() - start,
        )
      results.append(row)
  table = markdown_table(results, FLAGS.sets)
  print(table)
  if FLAGS.output_dir:
    io_utils.write_atomically(
      os.path.join(FLAGS.output_dir, RESULTS_FILE), json.dumps(results, indent=2)
    )
    io_utils.write_atomically(os.path.join(FLAGS.output_dir, "sts_results.md"), table)


cli.register_choices("sets", list(SETS))
flags.register_validator("representations", _check_representations)


if __name__ == "__main__":
  flags.mark_flag_as_required("model_dir")
  cli.run(main)

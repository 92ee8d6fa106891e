"""Unsupervised semantic textual similarity (paper Tables 3 and 4).

Each sentence becomes a vector (inference.NeuralLM.sentence_vectors), a pair's
similarity is the cosine of its two vectors, and the score is Pearson r x 100
(the paper's metric; Spearman is reported too) against the gold scores of
STS-B dev/test and SICK test, with a seeded 95% bootstrap interval of the Pearson
(evaluation/significance.py). The per-pair cosines and gold scores are kept in sts_results.json so
that reproduce.py can compare two models on the same pairs. No training, no tuning.

Your own pairs (--pairs_file, evaluation/pair_files.py): a TSV of sentence1<TAB>sentence2 with an
optional gold score, or SentEval's STS12-16 layout (senteval:DIR). The cosines of every pair go to
--output_dir/pairs/<NAME>.tsv in input order (streamed and resumable,
evaluation/pair_similarity.py); with gold scores, pairs_results.{json,md} hold the correlations,
their intervals and each model minus each later one, paired over the same pairs
(reproduction_report.sts_comparisons). The paper's sets then run only if --sets is given.

--output_dir holds one job: <output_dir>/run.json records its models (config, vocab, checkpoint),
representations, sets and the flags that change a result (util/runs.py), and a run of another
job into it is refused in one line naming the first that differs, before a model loads, rather
than overwriting its results; --overwrite removes them and starts over.

Examples:
  python run_sts.py --model_dir=runs/tta,runs/bilm,runs/unilm \
      --representations=context,embed --output_dir=results/sts
  python run_sts.py --model_dir=tta=runs/tta,bilm=runs/bilm --pairs_file=mine=pairs.tsv \
      --pairs_file=senteval:SentEval/data/downstream/STS --output_dir=results/pairs
"""

import itertools
import json
import os
import time

from absl import flags
from absl import logging

from evaluation import pair_files
from evaluation import pair_similarity
from evaluation import significance
from evaluation import sts_data
from lm import inference
from lm import lm_flags
from reproduction import reproduction_report
from util import cli
from util import io_utils
from util import runs

FLAGS = flags.FLAGS
RESULTS_FILE = "sts_results.json"
PAIRS_RESULTS_FILE = "pairs_results.json"
# What a run writes in --output_dir; --overwrite removes them.
OUTPUTS = (RESULTS_FILE, "sts_results.md", PAIRS_RESULTS_FILE, "pairs_results.md", "pairs")


def define_flags():
  """Defines the command-line flags (called from __main__ only: a module that imports this
  one, or a test, gets its functions without its flags)."""
  lm_flags.define_model_dir(several=True, kenlm=False, required=True)
  flags.DEFINE_list(
    "representations",
    ["context", "embed"],
    "Any of context, embed, first, last (the [CLS]/[SOS] and "
    "[SEP]/[EOS] vectors), and context\\M / first\\M ... for the "
    "bilm/bert intact-input variants.",
  )
  flags.DEFINE_list("sets", list(SETS), "Evaluation sets.")
  cli.register_choices("sets", list(SETS))
  flags.register_validator("representations", _check_representations)
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
  lm_flags.define_long_input_flags()
  flags.DEFINE_integer(
    "bootstrap_resamples",
    significance.DEFAULT_RESAMPLES,
    "Paired bootstrap resamples (over sentence pairs) for each Pearson's 95% interval.",
    lower_bound=1,
  )
  flags.DEFINE_integer("bootstrap_seed", 0, "Seed of the bootstrap resampler.")
  flags.DEFINE_multi_string(
    "pairs_file",
    [],
    "Your own sentence pairs (repeatable, or comma-separated): a TSV of sentence1<TAB>sentence2 "
    "with an optional third column of gold scores, or senteval:DIR for SentEval's STS12-16 layout "
    "(a directory of STS.input.<subset>.txt + STS.gs.<subset>.txt, or of such directories). "
    "NAME=FILE names the set (default: the file's name without its extension). Needs --output_dir; "
    "the paper's --sets then run only when given.",
  )
  flags.DEFINE_enum(
    "pairs_header",
    "auto",
    pair_files.PAIRS_HEADER,
    "Whether each --pairs_file TSV starts with a header line; auto: when line 1's third field is "
    "not a number while line 2's is.",
  )
  flags.DEFINE_integer(
    "pairs_batch_size",
    pair_similarity.DEFAULT_BATCH_SIZE,
    "Pairs read, encoded (each distinct sentence once) and appended to pairs/<NAME>.tsv at a time; "
    "an interrupted run resumes after the last complete batch.",
    lower_bound=1,
  )
  flags.DEFINE_bool(
    "overwrite",
    False,
    "Start over: remove the results and pairs/ of the job --output_dir holds instead of refusing "
    "another job (models, representations, sets, --max_pairs, --pairs_batch_size, bootstrap) or "
    "resuming an unfinished pairs/<NAME>.tsv.partial.",
  )


SETS = {
  "stsb_dev": ("STS-B dev", lambda d: sts_data.read_stsb("dev", d)),
  "stsb_test": ("STS-B test", lambda d: sts_data.read_stsb("test", d)),
  "sick_test": ("SICK test", lambda d: sts_data.read_sick(d, "TEST")),
}


def _check_representations(names):
  """The --representations validator: flags.ValidationError naming an unknown one."""
  try:
    for name in names:
      pair_similarity.parse_representation(name)
  except ValueError as e:
    raise flags.ValidationError(str(e)) from None
  return True


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
  cosines = pair_similarity.pair_cosines(lm, pairs, representation, label)
  gold = [float(p.score) for p in pairs]
  return {
    **pair_similarity.correlations(cosines, gold, bootstrap),
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
    cells = [
      pair_similarity.score_cell(
        row["scores"][n],
        row["pearson_ci"][n],
        pair_similarity.undefined_reason(row["cosines"][n], row["gold"][n]),
      )
      for n in set_names
    ]
    lines.append(f"| {row['model']} | {row['representation']} | {' | '.join(cells)} |")
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  if FLAGS.pairs_file and not FLAGS.output_dir:
    raise cli.InputError("--pairs_file needs --output_dir, where the cosines of each pair go")
  # What is cheap first, before anything is written into --output_dir: the output, the models.
  with cli.user_input():
    if FLAGS.output_dir:
      io_utils.check_output_path(FLAGS.output_dir, "output_dir")
    check_model_specs()
  if not FLAGS.output_dir:
    evaluate_and_write()
    return
  # One writer of the results: a second run into --output_dir exits 2 naming this one.
  results = os.path.join(FLAGS.output_dir, RESULTS_FILE)
  with io_utils.output_dir(FLAGS.output_dir), io_utils.exclusive_lock(results, wait=False):
    with cli.user_input():
      groups = pair_groups()
    # Another job's results are refused before a model loads; the record is written with the
    # first output, so a run refused for its data or models leaves none.
    record = runs.Record(FLAGS.output_dir, job_identity(groups), OUTPUTS, FLAGS.overwrite)
    if paper_sets():
      evaluate_and_write(record)
    if FLAGS.pairs_file:
      evaluate_pairs(groups, record)


def pair_groups():
  """`pair_files.pair_sets` of --pairs_file ([] without)."""
  specs = [spec for value in FLAGS.pairs_file for spec in value.split(",") if spec]
  return pair_files.pair_sets(specs, FLAGS.pairs_header)


def job_identity(groups):
  """The run identity of --output_dir (`util/runs.py`): the models, the sets, every flag that
  changes a result. A pair set's content is checked apart, per set (`CosineWriter`)."""
  identity = {
    "command": "run_sts.py",
    "model_dir": [
      dict(inference.spec_identity(spec), name=name)
      for name, spec in lm_flags.named_specs(FLAGS.model_dir)
    ],
    "representations": FLAGS.representations,
    **lm_flags.load_options(FLAGS),
    "bootstrap_resamples": FLAGS.bootstrap_resamples,
    "bootstrap_seed": FLAGS.bootstrap_seed,
  }
  if paper_sets():
    try:
      data_dir = io_utils.data_root(FLAGS.data_dir)
    except FileNotFoundError:
      data_dir = FLAGS.data_dir  # reading the sets names it
    identity.update(sets=paper_sets(), data_dir=data_dir, max_pairs=FLAGS.max_pairs)
  if groups:
    identity.update(
      pairs_file={name: source.identity() for _, sets in groups for name, source in sets},
      pairs_batch_size=FLAGS.pairs_batch_size,
    )
  return identity


def paper_sets():
  """--sets; with --pairs_file, only when --sets is given."""
  return FLAGS.sets if FLAGS["sets"].present or not FLAGS.pairs_file else []


def check_model_specs():
  """cli.InputError naming a --model_dir entry that is no model or has no sentence vectors."""
  with cli.user_input():
    specs = lm_flags.named_specs(FLAGS.model_dir)
  for _, spec in specs:
    if spec.startswith("kenlm:"):
      raise cli.InputError(f"--model_dir {spec}: an n-gram model has no sentence vectors")
    inference.check_spec(spec)


def load_model(spec):
  """(row name, LM) of a --model_dir entry: name=SPEC, or SPEC named by its directory."""
  ((row_name, spec),) = lm_flags.named_specs([spec])
  with cli.user_input():
    lm = inference.load_lm(spec, **lm_flags.load_options(FLAGS))
  return row_name, lm


def evaluate_and_write(record=None):
  """Every --model_dir and representation on every set; the table, and the results files
  (`record`, the `runs.Record` of --output_dir, started before they are written)."""
  with cli.user_input():
    data_sets = {name: SETS[name][1](FLAGS.data_dir) for name in paper_sets()}
  for name, pairs in data_sets.items():
    if FLAGS.max_pairs:
      data_sets[name] = pairs[: FLAGS.max_pairs]
    logging.info("%s: %d pairs", SETS[name][0], len(data_sets[name]))
  results = []
  for spec in FLAGS.model_dir:
    row_name, lm = load_model(spec)
    for representation in FLAGS.representations:
      row = {
        "model": row_name,
        "model_type": lm.model_type,
        "representation": representation,
        "scores": {},
        "pearson_ci": {},
        "cosines": {},
        "gold": {},
        "windowed": {},
      }
      for name, pairs in data_sets.items():
        start = time.time()
        label = f"{row_name} {representation} {name}"
        bootstrap = (FLAGS.bootstrap_resamples, FLAGS.bootstrap_seed)
        before = lm.stats["windowed"]
        for field, value in evaluate_sts(lm, pairs, representation, label, bootstrap).items():
          row[field][name] = value
        # Each distinct sentence of the set is encoded once (`pair_similarity.pair_cosines`).
        row["windowed"][name] = lm.stats["windowed"] - before
        reason = pair_similarity.undefined_reason(row["cosines"][name], row["gold"][name])
        if reason:
          logging.warning(
            "%s %s %s: Pearson and Spearman are undefined (%s)",
            row_name,
            representation,
            name,
            reason,
          )
          continue
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
  table = markdown_table(results, paper_sets()) + windowed_note(
    (f"{r['model']} {r['representation']} {n}", k)
    for r in results
    for n, k in r["windowed"].items()
  )
  print(table)
  if FLAGS.output_dir:
    record.start()
    io_utils.write_atomically(
      os.path.join(FLAGS.output_dir, RESULTS_FILE), json.dumps(results, indent=2)
    )
    io_utils.write_atomically(os.path.join(FLAGS.output_dir, "sts_results.md"), table)


def windowed_note(counts):
  """A report's line counting the sentences read in sliding windows (`--long_inputs=window`),
  from (what, count) pairs; "" when there are none."""
  long = [f"{what} {k}" for what, k in counts if k]
  if not long:
    return ""
  return (
    "\nSentences longer than the model takes, read in sliding windows: " + ", ".join(long) + ".\n"
  )


# ------------------------------------------------------------------ your own pairs (--pairs_file)


def evaluate_pairs(groups, record):
  """Every --model_dir and representation on every --pairs_file set (`pair_groups`):
  pairs/<set>.tsv each, and pairs_results.{json,md} with the correlations of the sets with gold
  scores; `record` (`runs.Record`) is started once the models load."""
  with cli.user_input():
    counts = {name: pair_files.count_pairs(source) for _, sets in groups for name, source in sets}
  models = [load_model(spec) for spec in FLAGS.model_dir]
  names = [name for name, _ in models]
  if len(set(names)) < len(names):
    raise cli.InputError(f"--model_dir: two models share a name in {names}: name them name=DIR")
  record.start()
  rows = [
    dict(model=name, model_type=lm.model_type, representation=representation)
    | {field: {} for field in ("scores", "pearson_ci", "cosines", "gold", "all")}
    for name, lm in models
    for representation in FLAGS.representations
  ]
  writer = pair_similarity.CosineWriter(
    models, FLAGS.representations, FLAGS.pairs_batch_size, FLAGS.overwrite
  )
  bootstrap = (FLAGS.bootstrap_resamples, FLAGS.bootstrap_seed)
  truncated = {}  # set name: pairs with a sentence truncated to fit a model
  windowed = {}  # set name: {model: sentences this run read in windows}
  for _, sets in groups:
    for name, source in sets:
      path = os.path.join(FLAGS.output_dir, "pairs", name + ".tsv")
      logging.info("%s: %d pairs of %s -> %s", name, counts[name][0], source.path, path)
      before = {model: lm.stats["windowed"] for model, lm in models}
      writer.write(source, path, name, counts[name][0])
      # Each representation encodes each distinct sentence of a batch once.
      windowed[name] = {
        model: (lm.stats["windowed"] - before[model]) // len(FLAGS.representations)
        for model, lm in models
      }
      truncated[name] = pair_similarity.read_cosines(path, return_truncated=True)[2]
      if counts[name][1]:
        pair_similarity.add_correlations(rows, name, path, bootstrap)
  results, table = pairs_report(rows, groups, counts, names, truncated, windowed)
  print(table)
  io_utils.write_atomically(
    os.path.join(FLAGS.output_dir, PAIRS_RESULTS_FILE), json.dumps(results, indent=2)
  )
  io_utils.write_atomically(os.path.join(FLAGS.output_dir, "pairs_results.md"), table)


def pairs_report(rows, groups, counts, model_names, truncated, windowed):
  """(pairs_results.json's content, pairs_results.md): the sets (with `truncated`, their pairs
  with a truncated sentence, and `windowed`, {model: the sentences it read in sliding windows in
  this run, each distinct sentence of a batch once}), the correlations of those with gold
  scores (SentEval's "all" rows after each task), each model minus each later one."""
  gold_groups = [(task, [n for n, _ in sets if counts[n][1]]) for task, sets in groups]
  gold_groups = [(task, names) for task, names in gold_groups if names]
  for task, names in gold_groups:
    if task is not None:
      for row, means in zip(rows, pair_similarity.senteval_means(rows, names)):
        row["all"][task] = means
  comparisons = reproduction_report.sts_comparisons(
    rows, list(itertools.combinations(model_names, 2))
  )
  # A difference of correlations is undefined where either is (it would compare a 0 standing in).
  defined = {
    (r["model"], r["representation"], name)
    for r in rows
    for name, scores in r["scores"].items()
    if scores[0] is not None
  }
  comparisons = [
    c for c in comparisons if {(c[m], c["representation"], c["set"]) for m in ("a", "b")} <= defined
  ]
  sets = [
    {
      "name": name,
      "input": source.path,
      "output": os.path.join("pairs", name + ".tsv"),
      "pairs": counts[name][0],
      "gold": bool(counts[name][1]),
      "truncated": truncated[name],
      "windowed": windowed[name],
    }
    for _, group in groups
    for name, source in group
  ]
  parts = [f"Cosines of each pair: {', '.join(s['output'] for s in sets)}.\n"]
  cut = [f"{s['name']} {s['truncated']} of {s['pairs']}" for s in sets if s["truncated"]]
  if cut:
    parts.append(
      "Pairs with a sentence truncated to fit a model (column `truncated` of its TSV): "
      + ", ".join(cut)
      + ".\n"
    )
  note = windowed_note((f"{s['name']}: {m}", k) for s in sets for m, k in s["windowed"].items())
  if note:
    parts.append(note.lstrip("\n"))
  if gold_groups:
    parts.insert(
      0,
      "Pearson r x 100 [95% bootstrap CI over pairs] (Spearman x 100); all (mean / wmean): "
      "SentEval's mean and pair-weighted mean of a task's subsets.\n\n"
      + pair_similarity.markdown_table(rows, gold_groups),
    )
  if comparisons:
    parts.append(
      "Each model minus each later one, paired bootstrap over the same pairs:\n\n"
      + reproduction_report.comparison_table(comparisons, ["set", "representation"])
      + "\n"
    )
  results = {
    "sets": sets,
    "rows": [{k: v for k, v in row.items() if k not in ("cosines", "gold")} for row in rows],
    "comparisons": comparisons,
  }
  return results, "\n".join(parts)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

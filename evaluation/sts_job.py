"""The STS job of run_sts.py (docs/manual.md "Sentence similarity"): the paper's sets and
--pairs_file sets, each representation raw and whitened. sts_results.json keeps each pair's
cosine and gold score, so that reproduce.py compares two models on the same pairs.
"""

import dataclasses
import itertools
import json
import os
import time

from absl import logging
import numpy as np

from evaluation import comparisons
from evaluation import pair_files
from evaluation import pair_similarity
from evaluation import significance
from evaluation import sts_data
from evaluation import whitening
from lm import inference
from lm import lm_options as lm_options_lib
from util import cli
from util import io_utils
from util import runs

RESULTS_FILE = "sts_results.json"
PAIRS_RESULTS_FILE = "pairs_results.json"
# What a run writes in --output_dir; --overwrite removes them.
WHITENING_DIR = "whitening"
# The files a run writes (runs.Record): a file of the user's in pairs/ or whitening/ is no output.
OUTPUTS = (
  RESULTS_FILE,
  "sts_results.md",
  PAIRS_RESULTS_FILE,
  "pairs_results.md",
  *(f"pairs/*.tsv{end}" for end in ("", ".partial", ".partial.json", ".done.json")),
  f"{WHITENING_DIR}/*.npz",
)
SETS = {
  "stsb_dev": ("STS-B dev", lambda d: sts_data.read_stsb("dev", d)),
  "stsb_test": ("STS-B test", lambda d: sts_data.read_stsb("test", d)),
  "sick_test": ("SICK test", lambda d: sts_data.read_sick(d, "TEST")),
}


@dataclasses.dataclass
class JobParams:
  """What an STS run does: run_sts.py's flags."""

  model_dir: list = lm_options_lib.model_dir_param(several=True, kenlm=False)
  representations: list = cli.param(
    "Any of context, embed, first_last (the word-piece mean of the first and last blocks' "
    "average, intact input), first, last (the [CLS]/[SOS] and [SEP]/[EOS] vectors), and "
    "context\\M for the bilm/bert intact-input context.",
    ("context", "embed"),
    check=lambda names: [pair_similarity.parse_representation(name) for name in names],
  )
  sets: list = cli.param("Evaluation sets.", tuple(SETS), check=cli.choices(list(SETS)))
  output_dir: str = cli.param(
    "Where to write sts_results.json and sts_results.md (optional).",
    None,
    io=cli.OUTPUT,
  )
  max_pairs: int = cli.param(
    "Evaluate only the first N pairs of each set (quick runs; the full sets are the result).",
    None,
    lower_bound=0,
  )
  bootstrap_resamples: int = cli.param(
    "Paired bootstrap resamples (over sentence pairs) for each Pearson's 95% interval.",
    significance.DEFAULT_RESAMPLES,
    lower_bound=1,
  )
  bootstrap_seed: int = cli.param("Seed of the bootstrap resampler.", 0)
  pairs_header: str = cli.param(
    "Whether each --pairs_file TSV starts with a header line; auto: when line 1's third field is "
    "not a number while line 2's is.",
    "auto",
    pair_files.PAIRS_HEADER,
  )
  pairs_batch_size: int = cli.param(
    "Pairs read, encoded (each distinct sentence once) and appended to pairs/<NAME>.tsv at a time; "
    "an interrupted run resumes after the last complete batch.",
    pair_similarity.DEFAULT_BATCH_SIZE,
    lower_bound=1,
  )
  whiten: int = cli.param(
    "Also score each representation whitened to DIM dimensions (BERT-whitening: the vectors' "
    "mean and covariance SVD, no labels), as representation+W<DIM>: fitted on the sentences of "
    "each set (a SentEval task: of all its subsets), or of --whiten_fit, or loaded from "
    "--whiten_load. The transforms go to <output_dir>/whitening/<set or task>.npz. 0: none.",
    0,
    lower_bound=0,
  )
  whiten_fit: str = cli.param(
    "With --whiten: a text file, one sentence per line (e.g. the training corpus), to fit the "
    "whitening on instead of each set's sentences, so that any set, even one pair, is whitened.",
    None,
    io=cli.INPUT,
  )
  whiten_load: str = cli.param(
    "A whitening/<name>.npz of an earlier run: whiten with its transforms (one per model and "
    "representation) instead of fitting; --whiten, if given, must be their dimension.",
    None,
    io=cli.INPUT,
  )
  overwrite: bool = cli.param(
    "Start over: remove the results and pairs/ of the job --output_dir holds instead of refusing "
    "another job (models, representations, sets, --max_pairs, --pairs_batch_size, bootstrap) or "
    "resuming an unfinished pairs/<NAME>.tsv.partial.",
    False,
    result=False,
  )
  pairs_file: list = cli.param(
    "Your own sentence pairs (repeatable, or comma-separated): a TSV of sentence1<TAB>sentence2 "
    "with an optional third column of gold scores, or senteval:DIR for SentEval's STS12-16 layout "
    "(a directory of STS.input.<subset>.txt + STS.gs.<subset>.txt, or of such directories). "
    "NAME=FILE names the set (default: the file's name without its extension). Needs --output_dir; "
    "the paper's --sets then run only when given.",
    (),
    io=cli.INPUT,
    kind=cli.MULTI,
    preset={"sets": []},
  )
  data_dir: str = io_utils.data_dir_param()
  lm_options: lm_options_lib.LMOptions = lm_options_lib.nested(
    only=lm_options_lib.THROUGHPUT + lm_options_lib.LONG_INPUTS
  )

  def __post_init__(self):
    if self.pairs_file and not self.output_dir:
      raise ValueError("--pairs_file needs --output_dir, where the cosines of each pair go")


def run(params):
  """The paper's `params.sets`, then the --pairs_file sets; cli.InputError before any model
  loads where the flags, output dir, models' files or inputs alone show it."""
  # What is cheap first, before anything is written into --output_dir: the output, the models.
  with cli.user_input():
    io_utils.check_outputs_apart(params)
    if params.output_dir:
      io_utils.check_output_path(params.output_dir, "output_dir")
    check_model_specs(params.model_dir)
    whiten = whitening_options(params)
  if not params.output_dir:
    evaluate_and_write(params, whiten)
    return
  # One writer of the results: a second run into --output_dir exits 2 naming this one.
  results = os.path.join(params.output_dir, RESULTS_FILE)
  with io_utils.output_dir(params.output_dir), io_utils.exclusive_lock(results, wait=False):
    with cli.user_input():
      groups = pair_groups(params)
    # Another job's results are refused before a model loads; the record is written with the
    # first output, so a run refused for its data or models leaves none.
    with runs.Record(
      params.output_dir, identity(params, groups), OUTPUTS, params.overwrite
    ) as record:
      paper = evaluate_and_write(params, whiten, record) if params.sets else []
      if params.pairs_file:
        evaluate_pairs(params, groups, record, whiten, paper)


def pair_groups(params):
  """`pair_files.pair_sets` of --pairs_file ([] without)."""
  specs = [spec for value in params.pairs_file for spec in value.split(",") if spec]
  return pair_files.pair_sets(specs, params.pairs_header)


def identity(params, groups):
  """`runs.identity` of --output_dir; a pair set's content is checked per set (`CosineWriter`)."""
  data_dir = None
  if params.sets:
    try:
      data_dir = io_utils.data_root(params.data_dir)
    except FileNotFoundError:
      data_dir = params.data_dir  # reading the sets names it
  return runs.identity(
    "run_sts.py",
    params,
    model_dir=[
      dict(inference.spec_identity(spec), name=name)
      for name, spec in lm_options_lib.named_specs(params.model_dir)
    ],
    pairs_file={name: source.identity() for _, sets in groups for name, source in sets},
    data_dir=data_dir,
  )


def check_model_specs(model_dir):
  """cli.InputError naming a --model_dir entry that is no model or has no sentence vectors."""
  with cli.user_input():
    specs = lm_options_lib.named_specs(model_dir)
  for _, spec in specs:
    if spec.startswith("kenlm:"):
      raise cli.InputError(f"--model_dir {spec}: an n-gram model has no sentence vectors")
    inference.check_spec(spec)


def load_model(spec, lm_options):
  """(row name, LM) of a --model_dir entry: name=SPEC, or SPEC named by its directory."""
  ((row_name, spec),) = lm_options_lib.named_specs([spec])
  with cli.user_input():
    # Sentence vectors need no masked-LM head: a sentence encoder (hf:) is a peer here.
    lm = inference.load_lm(spec, vectors_only=True, **lm_options.load_kwargs())
  return row_name, lm


def evaluate_sts(
  lm,
  pairs,
  representation,
  label="encoding",
  bootstrap=(significance.DEFAULT_RESAMPLES, 0),
  whiten=None,
):
  """sts_results.json entries of one set and representation: `pair_similarity.correlations`
  with "cosines" float [P] and "gold" float [P]; with `whiten` ((first, second) float [P, D] ->
  Whitening) a second, whitened one, its "whitening" the transform."""
  first, second, _ = pair_similarity.pair_vectors(lm, pairs, representation, label)
  gold = [float(p.score) for p in pairs]

  def scored(cosines):
    return {
      **pair_similarity.correlations(cosines, gold, bootstrap),
      "cosines": [float(c) for c in cosines],
      "gold": gold,
    }

  results = [scored(inference.cosine(first, second))]
  if whiten:
    transform = whiten(first, second)
    results.append(
      dict(scored(pair_similarity.whitened_cosines(first, second, transform)), whitening=transform)
    )
  return results


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


def evaluate_and_write(params, whiten, record=None):
  """The result rows of every model and representation on the paper's sets, raw and whitened;
  prints the table and writes the results and transforms (`record` started first)."""
  with cli.user_input():
    data_sets = {name: SETS[name][1](params.data_dir) for name in params.sets}
  for name, pairs in data_sets.items():
    if params.max_pairs:
      data_sets[name] = pairs[: params.max_pairs]
    logging.info("%s: %d pairs", SETS[name][0], len(data_sets[name]))
  results = []
  transforms = {name: {} for name in data_sets}  # set: {column: whitening.Whitening}
  bootstrap = (params.bootstrap_resamples, params.bootstrap_seed)
  for spec in params.model_dir:
    row_name, lm = load_model(spec, params.lm_options)
    model = whiten.model_identity(lm)
    fixed = whiten.model_transforms(row_name, lm, params.representations, model)
    for representation in params.representations:
      rows = [
        {
          "model": row_name,
          "model_type": lm.model_type,
          "representation": name,
          **{field: {} for field in ("scores", "pearson_ci", "cosines", "gold", "windowed")},
        }
        for name in whiten.representations(representation)
      ]
      for name, pairs in data_sets.items():
        start = time.time()
        label = f"{row_name} {representation} {name}"
        fit = whiten.fitter(
          fixed.get(representation), f"{SETS[name][0]}'s sentences", (model, representation)
        )
        before = lm.stats["windowed"]
        for row, result in zip(
          rows, evaluate_sts(lm, pairs, representation, label, bootstrap, fit)
        ):
          if "whitening" in result:
            column = pair_similarity.column_name(row_name, representation)
            transforms[name][column] = result.pop("whitening")
          for field, value in result.items():
            row[field][name] = value
          # Each distinct sentence of the set is encoded once (`pair_similarity.pair_cosines`).
          row["windowed"][name] = lm.stats["windowed"] - before
          log_scores(row, name, time.time() - start)
      results += rows
  table = markdown_table(results, params.sets) + windowed_note(
    (f"{r['model']} {r['representation']} {n}", k)
    for r in results
    for n, k in r["windowed"].items()
  )
  print(table)
  if params.output_dir:
    record.start()
    io_utils.write_atomically(
      os.path.join(params.output_dir, RESULTS_FILE), json.dumps(results, indent=2)
    )
    io_utils.write_atomically(os.path.join(params.output_dir, "sts_results.md"), table)
    for name, fitted in transforms.items():
      if fitted:
        save_transforms(params.output_dir, name, fitted)
  return results


def log_scores(row, name, seconds):
  """Logs a result row's scores on set `name` (or why they are undefined)."""
  what = f"{row['model']} {row['representation']} {name}"
  reason = pair_similarity.undefined_reason(row["cosines"][name], row["gold"][name])
  if reason:
    logging.warning("%s: Pearson and Spearman are undefined (%s)", what, reason)
    return
  logging.info(
    "%s: Pearson %.2f [%.2f, %.2f] Spearman %.2f (%.1f s)",
    what,
    row["scores"][name][0],
    *row["pearson_ci"][name],
    row["scores"][name][1],
    seconds,
  )


# ------------------------------------------------------------------ whitening (--whiten)


@dataclasses.dataclass
class Whiten:
  """--whiten (`dim`, 0: none), --whiten_fit (`sentences`), --whiten_load (`loaded`, {column:
  Whitening}); `source` names the flag in messages."""

  dim: int
  source: str
  sentences: list = None
  loaded: dict = None

  def representations(self, representation):
    """The result rows' representations of `representation`: itself, and whitened."""
    if not self.dim:
      return [representation]
    return [representation, pair_similarity.whitened_name(representation, self.dim)]

  def model_identity(self, lm):
    """`whitening.model_identity` of `lm` (hashes the weights: once per model), None without."""
    return whitening.model_identity(lm) if self.dim else None

  def model_transforms(self, name, lm, representations, model):
    """{representation: Whitening} of model `name` fixed for every set (fitted on --whiten_fit or
    loaded); {} when each set fits its own. cli.InputError naming what does not fit the model."""
    if not self.dim:
      return {}
    hidden = lm.model.config.hidden_size
    if self.dim > hidden:
      raise cli.InputError(
        f"{self.source}: {self.dim} dimensions asked of {name}'s {hidden}-dimensional vectors"
      )
    if self.loaded is not None:
      out = {}
      for r in representations:
        column = pair_similarity.column_name(name, r)
        out[r] = self.loaded[column]  # whitening_options checked that every column is there
        if out[r].dims[0] != hidden:
          raise cli.InputError(
            f"{self.source}: {column!r} takes {out[r].dims[0]}-dimensional vectors; {name}'s "
            f"have {hidden}"
          )
        try:
          whitening.check_fitted_for(out[r], {"model": model, "representation": r})
        except ValueError as e:
          raise cli.InputError(
            f"{self.source}: {column!r} was {e}; fit it again for this model (--whiten="
            f"{self.dim} without --whiten_load)"
          ) from None
      return out
    if self.sentences is None:
      return {}
    out = {}
    for r in representations:
      vectors, _ = pair_similarity.encode(
        lm, self.sentences, *pair_similarity.parse_representation(r), f"{name} {r} whitening"
      )
      out[r] = self.fitted(vectors, f"{self.source}", (model, r))
    return out

  def fitter(self, fixed, what, fitted_for):
    """evaluate_sts's `whiten`: `fixed`, or a fit on the set's sentences; None without."""
    if not self.dim:
      return None
    if fixed is not None:
      return lambda first, second: fixed
    return lambda first, second: self.fitted(np.concatenate([first, second]), what, fitted_for)

  def fitted(self, vectors, what, fitted_for):
    """whitening.fit of `vectors` float [N, D], the vectors of `fitted_for` (the model's
    `model_identity`, the representation); cli.InputError naming `what` when it cannot."""
    model, representation = fitted_for
    try:
      return whitening.fit(vectors, self.dim, {"model": model, "representation": representation})
    except ValueError as e:
      raise cli.InputError(f"--whiten={self.dim} on {what}: {e}") from None


def whitening_options(params):
  """--whiten, --whiten_fit and --whiten_load as a `Whiten`, their files read and checked
  against --whiten, --model_dir and --representations (cli.InputError)."""
  if params.whiten_fit and params.whiten_load:
    raise cli.InputError("--whiten_fit and --whiten_load: give one (fit a transform, or load one)")
  if params.whiten_load:
    source = f"--whiten_load={params.whiten_load}"
    try:
      loaded = whitening.load(params.whiten_load)
    except whitening.BadTransformsError as e:
      raise cli.InputError(f"--whiten_load: {e}") from None  # it names the file
    except (OSError, ValueError) as e:
      raise cli.InputError(f"{source}: {e}") from None
    dims = sorted({t.dims[1] for t in loaded.values()})
    if len(dims) != 1 or params.whiten not in (0, dims[0]):
      raise cli.InputError(
        f"{source}: its transforms give {dims} dimensions"
        + (f", not --whiten={params.whiten}" if params.whiten else "; one expected")
      )
    with cli.user_input():
      names = [name for name, _ in lm_options_lib.named_specs(params.model_dir)]
    for name in names:
      for r in params.representations:
        column = pair_similarity.column_name(name, r)
        if column not in loaded:
          raise cli.InputError(
            f"{source}: no transform of {column!r} in it (it has {sorted(loaded)})"
          )
    return Whiten(dims[0], source, loaded=loaded)
  source = f"--whiten_fit={params.whiten_fit}"
  if not params.whiten_fit:
    return Whiten(params.whiten, f"--whiten={params.whiten}")
  if not params.whiten:
    raise cli.InputError(f"{source} needs --whiten=DIM, the dimensions to keep")
  try:
    with io_utils.open_file(params.whiten_fit) as f:
      sentences = [line.strip() for line in f if line.strip()]
  except (OSError, UnicodeDecodeError) as e:
    raise cli.InputError(f"{source}: {e}") from None
  if len(sentences) < 2:
    raise cli.InputError(
      f"{source}: {len(sentences)} sentence(s); a whitening needs at least 2, one per line"
    )
  return Whiten(params.whiten, source, sentences=sentences)


def save_transforms(output_dir, name, transforms):
  """Writes set or task `name`'s {column: whitening.Whitening} to <output_dir>/whitening/."""
  path = os.path.join(output_dir, WHITENING_DIR, name + ".npz")
  whitening.save(path, transforms)  # makes whitening/
  logging.info("whitening of %s: %s", name, path)


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


def evaluate_pairs(params, groups, record, whiten, paper):
  """Every model and representation on every --pairs_file set, raw and whitened: pairs/<set>.tsv
  each and pairs_results.{json,md}; `paper`: this run's rows of the paper's sets (for SimCSE's
  average)."""
  with cli.user_input():
    counts = {name: pair_files.count_pairs(source) for _, sets in groups for name, source in sets}
  models = [load_model(spec, params.lm_options) for spec in params.model_dir]
  names = [name for name, _ in models]
  if len(set(names)) < len(names):
    raise cli.InputError(f"--model_dir: two models share a name in {names}: name them name=DIR")
  identities = {name: whiten.model_identity(lm) for name, lm in models}
  fixed = {
    name: whiten.model_transforms(name, lm, params.representations, identities[name])
    for name, lm in models
  }
  record.start()
  rows = [
    dict(model=name, model_type=lm.model_type, representation=r)
    | {field: {} for field in ("scores", "pearson_ci", "cosines", "gold", "all")}
    for name, lm in models
    for representation in params.representations
    for r in whiten.representations(representation)
  ]
  writer = pair_similarity.CosineWriter(
    models, params.representations, params.pairs_batch_size, params.overwrite, whiten.dim
  )
  bootstrap = (params.bootstrap_resamples, params.bootstrap_seed)
  truncated = {}  # set name: pairs with a sentence truncated to fit a model
  windowed = {}  # set name: {model: sentences this run read in windows}
  for task, sets in groups:
    transforms = group_transforms(models, params.representations, sets, whiten, fixed, identities)
    if transforms:
      save_transforms(
        params.output_dir,
        task or sets[0][0],
        {pair_similarity.column_name(*key): t for key, t in transforms.items()},
      )
    for name, source in sets:
      path = os.path.join(params.output_dir, "pairs", name + ".tsv")
      logging.info("%s: %d pairs of %s -> %s", name, counts[name][0], source.path, path)
      before = {model: lm.stats["windowed"] for model, lm in models}
      writer.write(source, path, name, counts[name][0], transforms)
      # Each representation encodes each distinct sentence of a batch once.
      windowed[name] = {
        model: (lm.stats["windowed"] - before[model]) // len(params.representations)
        for model, lm in models
      }
      truncated[name] = pair_similarity.read_cosines(path, return_truncated=True)[2]
      if counts[name][1]:
        pair_similarity.add_correlations(rows, name, path, bootstrap)
  results, table = pairs_report(rows, groups, counts, names, truncated, windowed, bootstrap, paper)
  print(table)
  io_utils.write_atomically(
    os.path.join(params.output_dir, PAIRS_RESULTS_FILE), json.dumps(results, indent=2)
  )
  io_utils.write_atomically(os.path.join(params.output_dir, "pairs_results.md"), table)


def group_transforms(models, representations, sets, whiten, fixed, identities):
  """{(model name, representation): Whitening} of a --pairs_file group: `fixed`, or fitted on
  the sentences of all the group's pairs (BERT-whitening fits on a task's); {} without."""
  if not whiten.dim:
    return {}
  out = {}
  pairs = None
  for name, lm in models:
    for r in representations:
      if r in fixed[name]:
        out[name, r] = fixed[name][r]
        continue
      if pairs is None:
        with cli.user_input():
          pairs = [pair for _, source in sets for pair in source]
      first, second, _ = pair_similarity.pair_vectors(lm, pairs, r, f"{name} {r} whitening")
      out[name, r] = whiten.fitted(
        np.concatenate([first, second]), ", ".join(n for n, _ in sets), (identities[name], r)
      )
  return out


def pairs_report(rows, groups, counts, model_names, truncated, windowed, bootstrap, paper):
  """(pairs_results.json's content, pairs_results.md): the sets, the correlations of those with
  gold scores (SentEval's aggregates, SimCSE's average), each model minus each later one."""
  gold_groups = [(task, [n for n, _ in sets if counts[n][1]]) for task, sets in groups]
  gold_groups = [(task, names) for task, names in gold_groups if names]
  tasks = [task for task, _ in gold_groups if task is not None]
  for task, names in gold_groups:
    if task is not None:
      for row, entry in zip(rows, pair_similarity.senteval_aggregates(rows, names, bootstrap)):
        row["all"][task] = entry
  paper = {(r["model"], r["representation"]): r for r in paper}
  for row in rows if tasks else ():
    paper_row = paper.get((row["model"], row["representation"]))
    row["avg"] = pair_similarity.senteval_average(row, tasks, paper_row)
  paired = comparisons.sts_comparisons(
    rows, list(itertools.combinations(model_names, 2)), bootstrap
  )
  # A difference of correlations is undefined where either is (it would compare a 0 standing in).
  defined = {
    (r["model"], r["representation"], name)
    for r in rows
    for name, scores in r["scores"].items()
    if scores[0] is not None
  }
  paired = [
    c for c in paired if {(c[m], c["representation"], c["set"]) for m in ("a", "b")} <= defined
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
      "Pearson r x 100 [95% bootstrap CI over pairs] (Spearman x 100). A SentEval task's "
      "all / mean / wmean (SentEval's: the correlation over its subsets' pairs joined, the mean "
      "and the pair-weighted mean of its subsets' correlations): Spearman x 100 [95% CI] "
      "(Pearson [95% CI]), each subset resampled within itself. avg: SimCSE's, the mean "
      "Spearman x 100 of each task's all (and of STS-B test and SICK test when --sets ran "
      "them).\n\n" + pair_similarity.markdown_table(rows, gold_groups),
    )
  if paired:
    parts.append(
      "Each model minus each later one, paired bootstrap over the same pairs:\n\n"
      + comparisons.comparison_table(paired, ["set", "representation"])
      + "\n"
    )
  results = {
    "sets": sets,
    "rows": [{k: v for k, v in row.items() if k not in ("cosines", "gold")} for row in rows],
    "comparisons": paired,
  }
  return results, "\n".join(parts)

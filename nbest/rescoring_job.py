"""A rescoring run: read the sets, score every hypothesis with each LM (cached), then the paper's
table (nbest/paper_protocol.py) and, for a user's --test_file, the combination's outputs."""

import contextlib
import dataclasses
import os
import time

from absl import logging

from evaluation import score_cache
from evaluation import significance
from lm import inference
from lm import lm_options as lm_options_lib
from nbest import formats
from nbest import paper_protocol
from nbest import rescoring
from nbest import settings
from nbest import shared_data
from nbest import types
from util import cli
from util import io_utils
from util import parts
from util import runs

# What a --test_file run writes in --output_dir (beside the score cache, which is keyed by model
# and kept, and the paper's table, whose rows merge by LM); --overwrite removes them.
OUTPUTS = ("weights.json", "rescoring_report.json")


def _check_pairs(pairs):
  if not all(len(p.split(":")) == 2 and all(p.split(":")) for p in pairs):
    raise ValueError("expected DEV:TEST set pairs, e.g. dev_clean:test_clean")


def _check_shard_flags(values):
  """--num_shards > 1 needs --output_dir (its parts of the score cache go there); --shard_id a
  part."""
  if values["num_shards"] > 1 and not values["output_dir"]:
    raise ValueError("--num_shards needs --output_dir: each part's scores go into its cache/")
  if not values["merge"]:
    parts.check_part(values["shard_id"], values["num_shards"])


def _check_file_flags(values):
  """--test_file (any format) needs --dev_file (to tune on) or --weights_file; --dev_file alone
  is refused."""
  if values["dev_file"] and not values["test_file"]:
    raise ValueError("--dev_file needs --test_file")
  if values["test_file"] and not (values["dev_file"] or values["weights_file"]):
    raise ValueError(
      f"--format={values['format']} needs --dev_file and --test_file (or --weights_file)"
    )


@dataclasses.dataclass
class JobParams:
  """What a rescoring run does: run_rescoring.py's flags."""

  # [(name, spec)]: lm_options.named_specs of the --model_dir list.
  lms: list = lm_options_lib.model_dir_param(
    several=True, convert=lm_options_lib.named_specs, alias="lm"
  )
  task: str = cli.param(
    "asr: WER on ESPnet2 LibriSpeech (or --format files); nmt: BLEU on WMT21 de-en.",
    "asr",
    enum=("asr", "nmt"),
  )
  pairs: list = cli.param(
    "ASR dev:test set pairs (λ tuned on dev, applied to test).",
    ("dev_clean:test_clean", "dev_other:test_other"),
    check=_check_pairs,
    unused_with=("test_file",),
  )
  settings: list = cli.param(
    "The paper's first-pass settings: " + settings.describe(),
    ("am", "full"),
    check=cli.choices(list(settings.SETTINGS)),
  )
  format: str = cli.param(
    "N-best format of --dev_file/--test_file (nbest/formats/).",
    "espnet",
    enum=tuple(formats.FORMATS),
  )
  dev_file: str = cli.param(
    "Dev N-best file or dir (with references: weights tuned).", None, io=cli.INPUT
  )
  test_file: str = cli.param("Test N-best file or dir (references optional).", None, io=cli.INPUT)
  dev_refs: list = cli.param(
    "Reference file(s) of --dev_file (several: multi-reference).", (), io=cli.INPUT
  )
  test_refs: list = cli.param(
    "Reference file(s) of --test_file (none: a blind set).", (), io=cli.INPUT
  )
  weights_file: str = cli.param(
    "Combination weights to apply (the weights.json of an earlier run); no tuning on dev then.",
    None,
    io=cli.INPUT,
  )
  allow_negative_weights: bool = cli.param(
    "Let the search on dev give an LM a negative weight (by default LM weights stay >= 0: a "
    "negative one rewards what the LM finds unlikely, which a small dev set can favour by "
    "chance).",
    False,
    unused_with=("weights_file",),
  )
  cer: bool = cli.param("Report the character error rate too (ASR files).", False)
  sentence_score: str = cli.param(
    "LM sentence score: sum of token log-probs, or their mean.", "sum", enum=("sum", "mean")
  )
  output_dir: str = cli.param(
    "Results (rescoring_results.json, .md) and the score cache.", None, io=cli.OUTPUT
  )
  max_lists: int = cli.param(
    "Use only the first N lists of each set (quick runs). With --test_file, the rescored "
    "lists, 1-best files and metrics then hold those lists only (a line-based file: their "
    "lines, in the input's order).",
    None,
    lower_bound=0,
  )
  sample_lists: int = cli.param(
    "Use a seeded random sample of N lists of each set (after --max_lists), the same for "
    "every LM and run: paired comparisons at a fraction of the cost. Outputs as for "
    "--max_lists.",
    None,
    lower_bound=0,
  )
  sample_seed: int = cli.param("Seed of --sample_lists.", 0)
  chunk_size: int = cli.param(
    "Sentences scored between cache writes; progress lines (rate, ETA) at most every 10 s.",
    500,
    lower_bound=1,
    result=False,
  )
  bootstrap_resamples: int = cli.param(
    "Paired bootstrap resamples (over utterances) for each LM's WER vs the first pass.",
    significance.DEFAULT_RESAMPLES,
    lower_bound=1,
  )
  bootstrap_seed: int = cli.param("Seed of the paired bootstrap resampler.", 0)
  overwrite: bool = cli.param(
    "--test_file runs: start over in an --output_dir that holds another run's weights, "
    "rescored lists and report (removes them; the score cache stays).",
    False,
    result=False,
  )
  num_shards: int = cli.param(
    "Split the LM scoring into this many parts, one run each (--shard_id: a Slurm array), each "
    "scoring its share of the distinct sentences into --output_dir/cache; then one run with "
    "--merge merges them and reranks: the same results as one process.",
    1,
    lower_bound=1,
    result=False,
  )
  shard_id: int = cli.param(
    "Which part this run scores, 0 .. num_shards-1 (with --num_shards > 1).",
    0,
    lower_bound=0,
    result=False,
  )
  merge: bool = cli.param(
    "Merge the --num_shards finished parts into the score cache, then rerank.",
    False,
    result=False,
  )
  scoring: str = lm_options_lib.scoring_param()
  first_pass: list = cli.param(
    "First-pass score columns NAME[:WEIGHT] of the combination, separated by commas; a comma in "
    "a NAME is written \\, (e.g. Moses' sparse feature pl_1,1: --first_pass='pl_1\\,1,LM0'). "
    "Default 'score' if the lists have it, else every column.",
    (),
    kind=cli.ESCAPED_LIST,
  )
  format_options: dict = cli.param(
    "KEY=VALUE option of the format's reader (VALUE as JSON if it parses).",
    (),
    flag="format_option",
    kind=cli.MULTI,
    convert=lambda options: dict(rescoring.parse_option(o) for o in options),
  )
  data_dir: str = io_utils.data_dir_param()
  lm_options: lm_options_lib.LMOptions = lm_options_lib.nested()

  FLAG_CHECKS = (
    (("format", "dev_file", "test_file", "weights_file"), _check_file_flags),
    (("num_shards", "shard_id", "merge", "output_dir"), _check_shard_flags),
  )


def run(params):
  """The whole run; input errors are raised before any LM loads where the input shows them."""
  check_params(params)
  metric = "bleu" if params.task == "nmt" else "wer"
  sets, table_runs, kept, unmatched = read_lists(params)
  own_files = params.test_file is not None and params.output_dir
  texts = texts_to_score(sets, table_runs)
  if params.num_shards > 1 and not params.merge:
    path, scored = score_part(params, texts)
    print(
      f"part {params.shard_id} of {params.num_shards}: {scored} of {len(texts)} sentences "
      f"scored into {path}; when every part is done, run the same command with --merge"
    )
    return
  record = None
  if own_files:
    with cli.user_input():
      # With the paper's table too (`paper_table` files with references), LMs run one at a time into
      # one dir add up to one table (paper_protocol.merge_rows): each rewrites the outputs whole.
      job = identity(params, with_lms=not table_runs)
      record = runs.Record(params.output_dir, job, outputs(params), params.overwrite)
  with contextlib.ExitStack() as stack:
    cache = shards = None
    if params.output_dir:
      # The cache has one writer: a second run into --output_dir exits 2 naming this one.
      path = cache_path(params)
      stack.enter_context(io_utils.exclusive_lock(path, wait=False))
      with cli.user_input():  # a damaged cache: one line, before any LM is loaded
        cache = score_cache.ScoreCache(path)
        if params.merge:
          names = [name for name, _ in params.lms]
          shards = score_cache.Parts(path, params.num_shards, params.chunk_size, texts, names)
    rows, all_scores = rescore_all(params, cache, texts, sets, table_runs, metric, shards)
  if table_runs:
    print(paper_protocol.markdown(rows, metric))
    if params.output_dir:
      paper_protocol.write_results(params.output_dir, rows, metric)
  if own_files:
    with record or contextlib.nullcontext(), cli.user_input():
      if record is not None:
        record.start()
      rescoring.rescore_own_files(own_files_of(params), sets, kept, all_scores, metric, unmatched)


def own_files_of(params):
  """`rescoring.OwnFiles` of `params`: what a --test_file run writes and how it weighs."""
  return rescoring.OwnFiles(
    output_dir=params.output_dir,
    format=params.format,
    format_options=params.format_options,
    sources={
      "dev": (params.dev_file, params.dev_refs),
      "test": (params.test_file, params.test_refs),
    },
    sentence_score=params.sentence_score,
    cer=params.cer,
    weights_file=params.weights_file,
    first_pass=params.first_pass,
    allow_negative_weights=params.allow_negative_weights,
  )


def check_params(params):
  """What is cheap first: the LMs are there, before the lists are read (the lists are read and
  checked before anything is written into --output_dir); cli.InputError naming the flag."""
  with cli.user_input():
    io_utils.check_outputs_apart(params)
    if params.output_dir:
      io_utils.check_output_path(params.output_dir, "output_dir")
    for _, spec in params.lms:
      inference.check_spec(spec)


def outputs(params):
  """The files a --test_file run writes into --output_dir (runs.Record): each set's in its folder,
  where a file of the user's (test/notes.txt) is no output."""
  sets = {"dev": params.dev_file, "test": params.test_file}
  return list(OUTPUTS) + [
    f"{name}/{file}"
    for name, path in sets.items()
    if path is not None
    for file in rescoring.output_files(params.format, path)
  ]


def identity(params, with_lms=True):
  """`runs.identity` of a --test_file run; without `with_lms` (the paper's table, to which each
  run adds its LMs' rows) nothing of the LMs."""
  if not with_lms:
    return runs.identity(
      "run_rescoring.py",
      params,
      **dict.fromkeys(("lms", "scoring", "sentence_score", "lm_options")),
    )
  lms = [dict(inference.spec_identity(spec), name=name) for name, spec in params.lms]
  return runs.identity("run_rescoring.py", params, lms=lms)


def read_sets(params):
  """({set name: lists}, the paper's (dev, test, settings) runs, {set name: references without
  hypotheses})."""
  if params.test_file is not None:
    sets, unmatched = {}, {}
    for name, path, refs in (
      ("dev", params.dev_file, params.dev_refs),
      ("test", params.test_file, params.test_refs),
    ):
      if path is not None:
        sets[name], unmatched[name] = formats.read_set(
          params.format, path, refs, params.format_options
        )
    table = (
      params.task == "asr"
      and formats.FORMATS[params.format].paper_table
      and "dev" in sets
      and not params.weights_file
      and all(lists[0].refs for lists in sets.values())
    )
    if not params.output_dir and not table:
      raise ValueError("--output_dir is needed: the rescored lists and 1-best files go there")
    names = [name for name, _ in params.lms]
    rescoring.check_tuning_input(
      sets, names, params.weights_file, params.first_pass, params.dev_file
    )
    return sets, [("dev", "test", params.settings)] if table else [], unmatched
  if params.task == "nmt":
    return (
      {"wmt21": shared_data.read_wmt_candidates(params.data_dir)},
      [(None, "wmt21", [None])],
      {},
    )
  pairs = [p.split(":") for p in params.pairs]
  names = sorted({n for p in pairs for n in p})
  # Only the lists of --max_lists / --sample_lists are parsed (read_lists cuts the others alike).
  select = types.list_selection(params.max_lists, params.sample_lists, params.sample_seed)
  sets = {}
  for n in names:
    sets[n], _ = formats.read_set("espnet", n, data_dir=params.data_dir, select=select)
  return sets, [(dev, test, params.settings) for dev, test in pairs], {}


def read_lists(params):
  """`read_sets` cut by --max_lists / --sample_lists and checked, with {name: the kept lists'
  indices among those read} before the unmatched references."""
  with cli.user_input():
    sets, table_runs, unmatched = read_sets(params)
    paper_protocol.check_settings(sets, table_runs)
  select = types.list_selection(params.max_lists, params.sample_lists, params.sample_seed)
  kept = {name: [int(i) for i in select(len(lists))] for name, lists in sets.items()}
  sets = {name: [lists[i] for i in kept[name]] for name, lists in sets.items()}
  for name, lists in sets.items():
    logging.info("%s: %d lists, %d hypotheses", name, len(lists), sum(len(l.hyps) for l in lists))
  return sets, table_runs, kept, unmatched


def cache_path(params):
  return os.path.join(params.output_dir, "cache", "lm_scores.jsonl")


def texts_to_score(sets, table_runs):
  """The sorted distinct texts every LM scores: the hypotheses, and the references for the
  paper's table (its perplexities)."""
  return sorted(
    {
      t
      for lists in sets.values()
      for l in lists
      for t in [h.text for h in l.hyps] + (l.refs if table_runs else [])
    }
  )


def load_lm(params, spec):
  """(LM of `spec`, its identity: `inference.describe`)."""
  with cli.user_input():
    lm = inference.load_lm(spec, **params.lm_options.load_kwargs())
  return lm, inference.describe(lm, params.scoring)


def _load_lm(params, spec, cache):
  """(LM, its cache key), the key's identity registered in `cache`."""
  lm, identity = load_lm(params, spec)
  return lm, _register(cache, identity)


def _register(cache, identity):
  """The cache key of an LM of `identity`, registered in `cache` (None: no cache)."""
  lm_id = inference.model_id(identity)
  if cache is not None:
    cache.register(lm_id, identity)
  return lm_id


def score_part(params, texts, loaded=None):
  """A --shard_id run: every LM's scores of its part of `texts` into its own cache part, then the
  part's record (score_cache.finish_part) that --merge checks: (the part's path, sentences
  scored). `loaded`: {name in `params.lms`: `load_lm`'s pair} of LMs loaded already (a Beam
  worker's, beam/beam_rescore_job.py); else each LM is loaded in turn."""
  path = score_cache.part_path(cache_path(params), params.shard_id, params.num_shards)
  mine = score_cache.part_texts(texts, params.shard_id, params.num_shards, params.chunk_size)
  with io_utils.exclusive_lock(path, wait=False):
    with cli.user_input():
      cache = score_cache.ScoreCache(path)
    lm_ids = {}
    for name, spec in params.lms:
      lm, identity = loaded[name] if loaded else load_lm(params, spec)
      lm_ids[name] = _register(cache, identity)
      score_cache.cached_scores(
        lm, lm_ids[name], mine, cache, name, params.chunk_size, params.scoring
      )
    score_cache.finish_part(
      cache, params.shard_id, params.num_shards, params.chunk_size, texts, lm_ids
    )
  return path, len(mine)


def evaluation_key(params):
  """What the rows of one rescoring_results.json must share to sit in one table
  (`paper_protocol.RowSettings.evaluation`)."""
  if params.task == "nmt":
    data = {"sets": ["wmt21"]}
  elif params.test_file is None:
    data = {"pairs": params.pairs}
  else:
    data = {
      "dev_file": os.path.abspath(params.dev_file),
      "test_file": os.path.abspath(params.test_file),
    }
  return dict(
    data,
    task=params.task,
    format=params.format,
    max_lists=params.max_lists,
    sample_lists=params.sample_lists,
    sample_seed=params.sample_seed if params.sample_lists else None,
  )


def row_settings(params):
  """`paper_protocol.RowSettings` of `params`: what every LM's row of this run shares."""
  return paper_protocol.RowSettings(
    evaluation=evaluation_key(params),
    scoring=params.scoring,
    sentence_score=params.sentence_score,
    bootstrap=(params.bootstrap_resamples, params.bootstrap_seed),
  )


def rescore_all(params, cache, texts, sets, table_runs, metric, shards=None):
  """([paper-table row of each LM], {LM name: scores of the texts}); `shards`
  (score_cache.Parts, --merge) adds each LM's scores from the parts to `cache` first."""
  rows, all_scores = [], {}
  shared = row_settings(params) if table_runs else None  # the paper's table's rows
  for name, spec in params.lms:
    lm, lm_id = _load_lm(params, spec, cache)
    if shards is not None:
      with cli.user_input():
        shards.merge_into(cache, name, lm_id)
    start = time.time()
    scores = {
      "texts": score_cache.cached_scores(
        lm, lm_id, texts, cache, name, params.chunk_size, params.scoring
      )
    }
    scores["seconds"] = time.time() - start
    all_scores[name] = scores["texts"]
    if table_runs:
      rows.append(
        paper_protocol.rescore_with(
          shared, name, lm, lm_id, texts, scores, sets, table_runs, metric
        )
      )
  return rows, all_scores

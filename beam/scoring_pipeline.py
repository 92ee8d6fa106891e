"""score.py's sentences and run_rescoring.py's score cache, scored by Apache Beam pipelines.

Both jobs already split into parts that run apart and merge to one process's bytes (score.py's
--num_shards of the input's 64 KiB blocks, run_rescoring.py's --num_shards of its sorted distinct
sentences; docs/DESIGN.md §5.6). Here the parts are a pipeline's elements: a DoFn loads the LM(s)
once per worker (`setup`) and scores whole parts through the jobs' own functions (`score_to_file`,
`score_part`, the one inference path), then the jobs' own merges run where the command runs.
"""

import dataclasses
import os

from absl import logging

from beam import options as options_lib
from lm import inference
from lm import scoring_job
from nbest import rescoring_job
from util import cli
from util import io_utils
from util import resumable


def _params_fields(cls, *left_out):
  """The names of `cls`'s own flag fields but `left_out` (its nested ones keep all theirs)."""
  return tuple(
    f.name for f in dataclasses.fields(cls) if f.name not in left_out and "nested" not in f.metadata
  )


@dataclasses.dataclass
class BeamScoreParams:
  """beam_score.py's flags: score.py's (but --shard_id and --merge) and the pipeline's."""

  score: scoring_job.ScoreParams = cli.nested(
    scoring_job.ScoreParams,
    only=_params_fields(scoring_job.ScoreParams, "shard_id", "merge"),
    defaults={"num_shards": 16},
  )
  beam: options_lib.BeamParams = cli.nested(options_lib.BeamParams, result=False)


@dataclasses.dataclass
class BeamRescoreParams:
  """beam_rescore.py's flags: run_rescoring.py's (but --shard_id and --merge) and the
  pipeline's."""

  rescore: rescoring_job.RescoringParams = cli.nested(
    rescoring_job.RescoringParams,
    only=_params_fields(rescoring_job.RescoringParams, "shard_id", "merge"),
    defaults={"num_shards": 16},
  )
  beam: options_lib.BeamParams = cli.nested(options_lib.BeamParams, result=False)


# ----------------------------------------------------------------------------------------------
# Sentences: score.py's output
# ----------------------------------------------------------------------------------------------


def parts_prefix(output_file):
  """Where the shards of `output_file` go: `.NAME.beam-parts/NAME` beside it (the shards are
  `NAME-0000I-of-0000N`), a directory of this command's, removed once they are merged."""
  directory, name = os.path.split(output_file)
  return os.path.join(directory, f".{name}.beam-parts", name)


def score_sentences(params):
  """score.py's output file of `params.score` (`BeamScoreParams`), its shards scored by a Beam
  pipeline; cli.InputError naming the flag for a wrong input, before any work."""
  score = params.score
  if "-" in (score.input_file, score.output_file):
    raise cli.InputError(
      "--input_file and --output_file are required: files or bucket paths (a pipeline reads no "
      "stdin and writes no stdout)"
    )
  scoring_job.check_params(score)
  # check_params checks a shard's path; the output file is written here (copied from the parts).
  io_utils.check_output_path(
    score.output_file, "output_file", is_dir=False, overwrite=score.overwrite
  )
  with cli.user_input():
    # The workers read their parts by offset: a pipe was an "Illegal seek" traceback.
    io_utils.check_input_file(score.input_file, read_twice=True)
    inference.check_spec(score.model_dir)
  options = options_lib.pipeline_options(params.beam)
  apache_beam = options_lib.import_beam()
  with io_utils.exclusive_lock(score.output_file, wait=False):
    shards = dataclasses.replace(score, output_file=parts_prefix(score.output_file))
    made = not io_utils.exists(os.path.dirname(shards.output_file))
    try:
      with apache_beam.Pipeline(options=options) as pipeline:
        _ = (
          pipeline
          | "shards" >> apache_beam.Create(range(score.num_shards))
          | "spread" >> apache_beam.Reshuffle()
          | "score" >> apache_beam.ParDo(ScoreShards(shards))
        )
    except cli.InputError:
      # A wrong input (a line that is not UTF-8): the parts this run began go with it (a stop by
      # signal keeps them, for the same command to resume).
      if made:
        io_utils.rmtree(os.path.dirname(shards.output_file))
      raise
    with cli.user_input():
      scoring_job.merge_shards(shards.output_file, score.num_shards)
    io_utils.copy_file(shards.output_file, score.output_file)
    # This job's files only, the dir once emptied: another job's shards, kept by a stop for its
    # resume, were removed with it.
    parts_dir, name = os.path.split(shards.output_file)
    ours = [name]
    for shard_id in range(score.num_shards):
      shard = scoring_job.shard_path(name, shard_id, score.num_shards)
      ours += [shard, resumable.done_path(shard)]
    folder = os.path.basename(parts_dir)
    io_utils.remove_files(os.path.dirname(parts_dir), [f"{folder}/{n}" for n in ours])
  logging.info("wrote %s from %d shards", score.output_file, score.num_shards)


class ScoreShards(options_lib.DoFn):
  """score.py --shard_id=I of each element I (`scoring_job.score_to_file`), the LM loaded once."""

  def __init__(self, params):
    super().__init__()
    self._params = params
    self._lm = None

  def setup(self):
    self._lm = inference.load_lm(self._params.model_dir, **scoring_job.lm_options(self._params))

  def process(self, shard_id):
    scoring_job.score_to_file(self._lm, dataclasses.replace(self._params, shard_id=shard_id))
    yield shard_id


# ----------------------------------------------------------------------------------------------
# N-best lists: run_rescoring.py's score cache
# ----------------------------------------------------------------------------------------------


def rescore(params):
  """run_rescoring.py's run of `params.rescore` (`BeamRescoreParams`): the parts of its score cache
  scored by a Beam pipeline, then its --merge (the cache, the tuning, the outputs)."""
  job = params.rescore
  if not job.output_dir:
    raise cli.InputError("--output_dir is required: the score cache's parts go into its cache/")
  rescoring_job.check_params(job)
  options = options_lib.pipeline_options(params.beam)
  apache_beam = options_lib.import_beam()
  sets, table_runs, _, _ = rescoring_job.read_lists(job)
  texts = rescoring_job.texts_to_score(sets, table_runs)
  with apache_beam.Pipeline(options=options) as pipeline:
    texts_in = pipeline | "texts" >> apache_beam.Create([texts])
    _ = (
      pipeline
      | "parts" >> apache_beam.Create(range(job.num_shards))
      | "spread" >> apache_beam.Reshuffle()
      | "score"
      >> apache_beam.ParDo(ScoreParts(job), texts=apache_beam.pvalue.AsSingleton(texts_in))
    )
  rescoring_job.run(dataclasses.replace(job, merge=True))


class ScoreParts(options_lib.DoFn):
  """run_rescoring.py --shard_id=I of each element I (`rescoring_job.score_part`), every LM of
  --model_dir loaded once."""

  def __init__(self, params):
    super().__init__()
    self._params = params
    self._loaded = None

  def setup(self):
    self._loaded = {
      name: rescoring_job.load_lm(self._params, spec) for name, spec in self._params.lms
    }

  def process(self, shard_id, texts):
    rescoring_job.score_part(
      dataclasses.replace(self._params, shard_id=shard_id), texts, self._loaded
    )
    yield shard_id

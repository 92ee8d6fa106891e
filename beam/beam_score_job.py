"""beam_score.py's job: score.py's sentences scored by an Apache Beam pipeline (`JobParams`,
`run`).

score.py's job already splits into parts that run apart and merge to one process's bytes (its
--num_shards of the input's 64 KiB blocks; docs/DESIGN.md §5.6). Here the parts are a pipeline's
elements: a DoFn loads the LM once per worker (`setup`) and scores whole parts through the job's
own function (`scoring_job.score_to_file`, the one inference path), then the job's own merge runs
where the command runs.
"""

import dataclasses
import os

from absl import logging

from beam import options as options_lib
from lm import inference
from lm import scoring_job
from util import cli
from util import io_utils
from util import resumable


@dataclasses.dataclass
class JobParams:
  """beam_score.py's flags (one `cli.param` field each): score.py's (but --shard_id and --merge)
  and the pipeline's (`options.BeamParams`)."""

  score: scoring_job.JobParams = options_lib.sharded_job(scoring_job.JobParams)
  beam: options_lib.BeamParams = cli.nested(options_lib.BeamParams, result=False)


def parts_prefix(output_file):
  """Where the shards of `output_file` go: `.NAME.beam-parts/NAME` beside it (the shards are
  `NAME-0000I-of-0000N`), a directory of this command's, removed once they are merged."""
  directory, name = os.path.split(output_file)
  return os.path.join(directory, f".{name}.beam-parts", name)


def run(params):
  """score.py's output file of `params.score` (`JobParams`), its shards scored by a Beam
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

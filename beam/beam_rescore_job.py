"""beam_rescore.py's job: run_rescoring.py's score cache scored by an Apache Beam pipeline
(`JobParams`, `run`).

run_rescoring.py's job already splits its score cache into parts that run apart and merge to one
process's bytes (its --num_shards of the sorted distinct sentences; docs/DESIGN.md §5.6). Here the
parts are a pipeline's elements: a DoFn loads the LMs once per worker (`setup`) and scores whole
parts through the job's own function (`rescoring_job.score_part`, the one inference path), then
the job's own --merge runs where the command runs.
"""

import dataclasses

from beam import options as options_lib
from nbest import rescoring_job
from util import cli


@dataclasses.dataclass
class JobParams:
  """beam_rescore.py's flags (one `cli.param` field each): run_rescoring.py's (but --shard_id and
  --merge) and the pipeline's (`options.BeamParams`)."""

  rescore: rescoring_job.JobParams = options_lib.sharded_job(rescoring_job.JobParams)
  beam: options_lib.BeamParams = cli.nested(options_lib.BeamParams, result=False)


def run(params):
  """run_rescoring.py's run of `params.rescore` (`JobParams`): the parts of its score cache
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

"""score.py's output made by an Apache Beam pipeline: the same flags (but --shard_id and --merge),
the same bytes; the runner's flags: docs/scale.md "Apache Beam".

  source scripts/setup_beam.sh
  python beam_score.py --model_dir=runs/tta --input_file=sentences.txt --output_file=scores.jsonl \\
    --direct_num_workers=2 --direct_running_mode=multi_processing

beam/beam_score_job.py runs it: the input's --num_shards parts are the pipeline's elements.
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from beam import beam_score_job
from util import cli


def define_flags():
  cli.define_param_flags(beam_score_job.JobParams)


def main(argv):
  del argv
  beam_score_job.run(cli.params(beam_score_job.JobParams))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""score.py's output made by an Apache Beam pipeline: the same flags (but --shard_id and --merge),
the same bytes; the runner's flags: docs/scale.md "Apache Beam".

  source scripts/setup_beam.sh
  python beam_score.py --model_dir=runs/tta --input_file=sentences.txt --output_file=scores.jsonl \\
    --direct_num_workers=2 --direct_running_mode=multi_processing

beam/scoring_pipeline.py runs it: the input's --num_shards parts are the pipeline's elements.
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from beam import scoring_pipeline
from util import cli


def define_flags():
  cli.define_param_flags(scoring_pipeline.BeamScoreParams)


def main(argv):
  del argv
  scoring_pipeline.score_sentences(cli.params(scoring_pipeline.BeamScoreParams))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

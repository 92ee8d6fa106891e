"""run_rescoring.py with its LM scoring done by an Apache Beam pipeline: the same flags (but
--shard_id and --merge), the same score cache, weights and results; the runner's flags:
docs/scale.md "Apache Beam".

  source scripts/setup_beam.sh
  python beam_rescore.py --model_dir=runs/tta --pairs=dev_clean:test_clean --output_dir=out \\
    --direct_num_workers=2 --direct_running_mode=multi_processing

beam/beam_rescore_job.py runs it: the --num_shards parts of the distinct sentences are the
pipeline's elements; the merge and the tuning (run_rescoring.py --merge) run here.
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from beam import beam_rescore_job
from util import cli


def define_flags():
  cli.define_param_flags(beam_rescore_job.JobParams)


def main(argv):
  del argv
  beam_rescore_job.run(cli.params(beam_rescore_job.JobParams))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

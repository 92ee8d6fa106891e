"""create_pretraining_data.py's records made by an Apache Beam pipeline: the same flags (but the
worker pool's and the parts'), the same bytes; the runner's flags: docs/scale.md "Apache Beam".

  source scripts/setup_beam.sh
  python beam_data.py --input_file=work/corpus_ls/train.txt --vocab_size=8000 \\
    --output_dir=work/records_ls8k --direct_num_workers=2 --direct_running_mode=multi_processing

beam/beam_data_job.py runs it: the blocks are the pipeline's elements; the scan, the vocab and the
assembly of the shards run here.
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
import json

from beam import beam_data_job
from pretraining import pretraining_records
from util import cli


def define_flags():
  cli.define_param_flags(beam_data_job.JobParams)


def main(argv):
  del argv  # Unused.
  params = cli.params(beam_data_job.JobParams)
  with cli.user_input():
    stats = beam_data_job.run(params)
  print(json.dumps(pretraining_records.summary(stats), sort_keys=True))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

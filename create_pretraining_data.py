"""Sentences -> vocab -> sharded, unpadded TFRecords for T-TA, biLM and uniLM pretraining.

pretraining/data_job.py runs the job on pretraining/pretraining_data.py's library; the data:
docs/DESIGN.md §3.1, the output: §5.2.

  python create_pretraining_data.py --input_file=work/corpus_ls/train.txt \\
    --eval_file=work/corpus_ls/eval.txt --vocab_size=8000 --output_dir=work/records_ls8k

Streams on every core (--num_workers); kill it and run it again to resume. Across machines:
--num_jobs=N --job_id=I (each into the same --output_dir), then the same command with --merge.
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
import json

from pretraining import data_job
from pretraining import pretraining_records
from util import cli


def define_flags():
  """Defines the command-line flags (BERT's names where BERT has them).

  Called from __main__ only, like corpus.define_flags: a script importing
  this module may define flags of the same names (--output_dir, ...) itself,
  and absl refuses a second definition.
  """
  cli.define_param_flags(data_job.JobParams)


def main(argv):
  del argv  # Unused.
  job = cli.params(data_job.JobParams)
  with cli.user_input():
    stats = data_job.run(job)
  if "part" in stats:  # one job of several: the merge writes data_stats.json
    print(json.dumps(stats, sort_keys=True))
    return
  # One line: data_stats.json has the details.
  print(json.dumps(pretraining_records.summary(stats), sort_keys=True))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""Sentences -> vocab -> sharded, unpadded TFRecords for T-TA, biLM and uniLM pretraining.

pretraining/pretraining_data.py builds them; the data: docs/DESIGN.md §3.1, the output: §5.2.

  python create_pretraining_data.py --input_file=work/corpus_ls/train.txt \\
    --eval_file=work/corpus_ls/eval.txt --vocab_size=8000 --output_dir=work/records_ls8k

Streams on every core (--num_workers); kill it and run it again to resume. Across machines:
--num_jobs=N --job_id=I (each into the same --output_dir), then the same command with --merge.
"""

import json

from absl import flags

from pretraining import pretraining_data
from pretraining import pretraining_records
from util import cli

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (BERT's names where BERT has them): the `DataParams` fields,
  and what is not an argument of the records.

  Called from __main__ only, like corpus.define_flags: a script importing
  this module may define flags of the same names (--output_dir, ...) itself,
  and absl refuses a second definition.
  """
  cli.define_param_flags(pretraining_data.DataParams)
  cli.define_param_flags(pretraining_data.RunParams)
  flags.DEFINE_string("output_dir", None, "Where the TFRecords, vocab.txt and data_stats.json go.")
  flags.DEFINE_integer(
    "vocab_lower_thresh",
    None,
    "Minimum count of a learned word piece (the learner's default is 10; lower it for tiny "
    "corpora).",
  )
  flags.DEFINE_bool("force", False, "Rebuild even if --output_dir is complete for these arguments.")


def main(argv):
  del argv  # Unused.
  for name in ("input_file", "output_dir"):
    if not FLAGS[name].value:
      raise cli.InputError(f"--{name} is required")
  learn_params = None
  if FLAGS.vocab_lower_thresh is not None:
    learn_params = {"lower_thresh": FLAGS.vocab_lower_thresh}
  options = cli.param_values(pretraining_data.DataParams, FLAGS)
  options.update(cli.param_values(pretraining_data.RunParams, FLAGS))
  with cli.user_input():
    stats = pretraining_data.create_pretraining_data(
      output_dir=FLAGS.output_dir, force=FLAGS.force, vocab_learn_params=learn_params, **options
    )
  if "part" in stats:  # one job of several: the merge writes data_stats.json
    print(json.dumps(stats, sort_keys=True))
    return
  summary = {
    split: {k: stats[split][k] for k in ("sentences", "tokens", "truncated", "unk_rate")}
    for split in pretraining_records.SPLITS
  }
  summary["seconds"] = stats["seconds"]
  summary["reused"] = stats.get("reused", False)
  print(json.dumps(summary, sort_keys=True))  # one line: data_stats.json has the details


if __name__ == "__main__":
  define_flags()
  cli.run(main)

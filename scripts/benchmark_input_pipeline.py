"""Does the training input pipeline keep up with a step, on a data set of any size?

Builds pretraining/input_pipeline.py's training dataset over `--input_file` (the TFRecords of
create_pretraining_data.py) as run_pretraining.py does, and prints the time to its first batch
(start-up: no pass over the records happens before it) and the records/s it yields over
`--batches` batches, on the CPU threads it is given. Set that beside the sentences/s a training
step consumes (run_pretraining.py's train_summary.json: batch size x steps/s).

  python scripts/benchmark_input_pipeline.py --input_file='records/train-*' \\
      --vocab_file=records/vocab.txt --batches=300
"""

import os
import sys
import time

from absl import app
from absl import flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from pretraining import input_pipeline  # noqa: E402
import tokenization  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Glob of training TFRecords.", required=True)
flags.DEFINE_string("vocab_file", None, "The records' vocab.txt.", required=True)
flags.DEFINE_string("model_type", "tta", "Whose targets the pipeline makes (bilm adds masking).")
flags.DEFINE_integer("batch_size", 64, "Sentences per batch (run_pretraining's default).")
flags.DEFINE_integer("max_seq_length", 128, "As run_pretraining.py's --max_seq_length.")
flags.DEFINE_integer("batches", 300, "Batches timed after the first.")


def main(argv):
  del argv
  vocab = tokenization.load_vocab(FLAGS.vocab_file)
  start = time.time()
  dataset = input_pipeline.make_dataset(
    FLAGS.input_file,
    FLAGS.batch_size,
    FLAGS.model_type,
    FLAGS.max_seq_length,
    is_training=True,
    vocab_size=len(vocab),
    mask_id=vocab["[MASK]"],
    special_ids=input_pipeline.special_ids_from_vocab(vocab),
    seed=0,
  )
  batches = iter(dataset)
  next(batches)
  startup = time.time() - start
  start = time.time()
  for _ in range(FLAGS.batches):
    next(batches)
  seconds = time.time() - start
  print(f"machine: {machine.cpu_and_cores()}; commit {machine.git_commit()}")
  print(f"start-up to the first batch: {startup:.1f} s")
  print(
    f"{FLAGS.batches} batches of {FLAGS.batch_size}: {seconds:.1f} s, "
    f"{FLAGS.batches * FLAGS.batch_size / seconds:,.0f} records/s"
  )


if __name__ == "__main__":
  app.run(main)

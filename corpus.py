# coding=utf-8
"""Corpus preparation: Gutenberg archives or text files -> train.txt, eval.txt, stats.json.

Its job is text/corpus_job.py; text/corpus.py does the work.

  python corpus.py --output_dir=/tmp/tta_corpus_librispeech --normalization=librispeech
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
import json

from text import corpus_job
from util import cli

# The stats.json entries the command prints.
_REPORTED = (
  "books",
  "paragraphs",
  "sentences",
  "train",
  "eval",
  "words",
  "mean_words_per_sentence",
  "elapsed_s",
)


def define_flags():
  """Defines the command-line flags (called under __main__ only, like every command here)."""
  cli.define_param_flags(corpus_job.JobParams)


def main(argv):
  del argv  # Unused.
  params = cli.params(corpus_job.JobParams)
  with cli.user_input():
    stats = corpus_job.run(params)
  print(json.dumps({k: stats[k] for k in _REPORTED}, indent=2))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

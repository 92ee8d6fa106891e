# coding=utf-8
"""Corpus preparation: Gutenberg archives or text files -> train.txt, eval.txt, stats.json.

text/corpus.py does the work.

  python corpus.py --output_dir=/tmp/tta_corpus_librispeech --normalization=librispeech
"""

import json

from absl import flags

from text import corpus
from text import normalization as normalization_lib
from util import cli
from util import io_utils

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (called under __main__ only, like every command here)."""
  flags.DEFINE_list(
    "input",
    None,
    "Comma-separated input paths: Gutenberg .tar.xz archives and/or plain text "
    "files. Default: <data_dir>/gutenberg-books-subset/texts.tar.xz.",
  )
  io_utils.define_data_dir_flag()
  flags.DEFINE_string("output_dir", None, "Where train.txt, eval.txt and stats.json go.")
  flags.DEFINE_enum(
    "normalization",
    "none",
    normalization_lib.NORMALIZATIONS,
    "none: cleaned text; librispeech: upper case, no punctuation but apostrophes, "
    "numbers spelled out.",
  )
  flags.DEFINE_enum(
    "input_format",
    "lines",
    corpus.INPUT_FORMATS,
    "Format of plain text inputs: one sentence per line, or blank-line separated paragraphs.",
  )
  flags.DEFINE_float("eval_fraction", 0.01, "Share held out for eval.txt.")
  flags.DEFINE_integer("seed", 12345, "Seed of the held-out choice.")
  flags.DEFINE_bool("dedup", True, "Drop exact duplicate sentences.")
  flags.DEFINE_integer("min_words", 3, "Drop sentences with fewer words.")
  flags.DEFINE_integer("max_words", 100, "Drop sentences with more words.")
  flags.DEFINE_integer("num_workers", None, "Worker processes (default: all cores).")
  flags.DEFINE_integer("log_every", 20, "Log progress every this many books.")
  flags.DEFINE_integer("max_books", None, "Stop after this many books per archive.")
  flags.DEFINE_bool("force", False, "Rebuild even if output_dir is complete for these arguments.")


def main(argv):
  del argv  # Unused.
  if not FLAGS.output_dir:
    raise cli.InputError("--output_dir is required")
  with cli.user_input():
    inputs = FLAGS.input or [corpus.default_gutenberg_tar(FLAGS.data_dir)]
    stats = corpus.prepare_corpus(
      inputs,
      FLAGS.output_dir,
      normalization=FLAGS.normalization,
      eval_fraction=FLAGS.eval_fraction,
      seed=FLAGS.seed,
      dedup=FLAGS.dedup,
      min_words=FLAGS.min_words,
      max_words=FLAGS.max_words,
      input_format=FLAGS.input_format,
      num_workers=FLAGS.num_workers,
      log_every=FLAGS.log_every,
      max_books=FLAGS.max_books,
      force=FLAGS.force,
    )
  print(
    json.dumps(
      {
        k: stats[k]
        for k in (
          "books",
          "paragraphs",
          "sentences",
          "train",
          "eval",
          "words",
          "mean_words_per_sentence",
          "elapsed_s",
        )
      },
      indent=2,
    )
  )


if __name__ == "__main__":
  define_flags()
  cli.run(main)

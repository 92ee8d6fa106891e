# coding=utf-8
"""KenLM n-gram baseline from the command line: train with lmplz, or score sentences in natural log.

The library is lm/ngram_lm.py (training, `NgramScorer`); this script is its flags and output.

Usage:
  python ngram.py --train_text=corpus.txt --output=lm.bin --order=5
  python ngram.py --model=lm.bin --score_file=sents.txt
"""

import math
import os

from absl import flags
from absl import logging

from lm import ngram_lm
from text import normalization as normalization_lib
from util import cli
from util import progress


def define_flags():
  """Defines the CLI flags."""
  flags.DEFINE_string("train_text", None, "Training text, one sentence per line: trains a model.")
  flags.DEFINE_string("output", None, "Where the trained model goes (with --train_text).")
  flags.DEFINE_integer("order", 5, "n-gram order.")
  flags.DEFINE_string("memory", "20%", "lmplz -S: sorting memory, e.g. 20% or 2G.")
  flags.DEFINE_list("prune", None, "lmplz --prune count thresholds per order, e.g. 0,0,1.")
  flags.DEFINE_bool("discount_fallback", False, "lmplz --discount_fallback (tiny corpora).")
  flags.DEFINE_bool("binary", True, "Write a KenLM binary (else ARPA).")
  flags.DEFINE_enum(
    "normalization",
    None,
    normalization_lib.NORMALIZATIONS,
    "Normalization of --train_text, stored beside the model "
    "so that scoring normalizes text the same way.",
  )
  flags.DEFINE_string(
    "model",
    None,
    "ARPA or KenLM binary model to score with: this KenLM tool takes the file itself, as "
    "KenLM's query does; every LM command takes it as --model_dir=kenlm:PATH.",
  )
  flags.DEFINE_string(
    "score_file", None, "Sentences to score, one per line; prints ln p, n_words, n_oov, text."
  )
  flags.DEFINE_bool("bos", True, "Condition the first word on <s>.")
  flags.DEFINE_bool("eos", True, "Score </s> (counted as a word).")
  return flags.FLAGS


def main(argv):
  del argv
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  if bool(FLAGS.train_text) == bool(FLAGS.score_file):
    raise cli.InputError("give either --train_text (with --output) or --score_file (with --model)")
  if FLAGS.train_text:
    if not FLAGS.output:
      raise cli.InputError("--train_text needs --output")
    with cli.user_input():
      ngram_lm.train_ngram(
        FLAGS.train_text,
        FLAGS.output,
        order=FLAGS.order,
        memory=FLAGS.memory,
        prune=FLAGS.prune,
        discount_fallback=FLAGS.discount_fallback,
        binary=FLAGS.binary,
        normalization=FLAGS.normalization,
      )
    print(FLAGS.output)
    return
  if not FLAGS.model:
    raise cli.InputError("--score_file needs --model")
  with cli.user_input():
    scorer = ngram_lm.NgramScorer(FLAGS.model)
    with open(FLAGS.score_file, encoding="utf-8") as f:
      texts = [line.rstrip("\n") for line in f]
  bar = progress.Progress(os.path.basename(FLAGS.model), total=len(texts), unit="sentences")
  total, n_words = 0.0, 0
  for text in texts:
    s = scorer.score_sentences([text], bos=FLAGS.bos, eos=FLAGS.eos)[0]
    print(f"{s.logprob:.6f}\t{s.n_words}\t{s.n_oov}\t{text}")
    total += s.logprob
    n_words += s.n_words
    bar.update()
  ppl = math.exp(-total / n_words) if n_words else float("nan")
  logging.info(
    "%d sentences, %d scored words (</s> %s), %d OOV, total ln p %.4f, perplexity %.3f",
    len(texts),
    n_words,
    "included" if FLAGS.eos else "excluded",
    scorer.total_oov,
    total,
    ppl,
  )


if __name__ == "__main__":
  define_flags()
  cli.run(main)

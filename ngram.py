# coding=utf-8
"""KenLM n-gram baseline: train with lmplz, or score sentences in natural log.

The flags and output of lm/ngram_lm.py (training) and `lm.inference.NgramLM` (scoring).

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
    "score_file",
    None,
    "Sentences to score, one per line, normalized as recorded with the model (as score.py "
    "does); prints ln p, n_words, n_oov, text.",
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
  score_file(FLAGS.model, FLAGS.score_file, FLAGS.bos, FLAGS.eos)


# Sentences normalized and scored at a time.
_CHUNK = 256


def score_file(model, path, bos, eos):
  """Prints ln p, n_words, n_oov and the text of each line of `path`, scored by
  `inference.NgramLM` (score.py's KenLM path: the model's recorded normalization first)."""
  from lm import inference  # pylint: disable=g-import-not-at-top

  with cli.user_input():
    lm = inference.NgramLM(model, score_eos=eos, bos=bos)
    with open(path, encoding="utf-8") as f:
      texts = [line.rstrip("\n") for line in f]
  bar = progress.Progress(os.path.basename(model), total=len(texts), unit="sentences")
  total, n_words, n_oov = 0.0, 0, 0
  for start in range(0, len(texts), _CHUNK):
    chunk = texts[start : start + _CHUNK]
    for text, scored in zip(chunk, lm.score(chunk)):
      print(f"{scored.total:.6f}\t{scored.num_tokens}\t{scored.unknown_words}\t{text}")
      total += scored.total
      n_words += scored.num_tokens
      n_oov += scored.unknown_words
    bar.update(len(chunk))
  ppl = math.exp(-total / n_words) if n_words else float("nan")
  logging.info(
    "%d sentences, %d scored words (</s> %s), %d OOV, total ln p %.4f, perplexity %.3f",
    len(texts),
    n_words,
    "included" if eos else "excluded",
    n_oov,
    total,
    ppl,
  )


if __name__ == "__main__":
  define_flags()
  cli.run(main)

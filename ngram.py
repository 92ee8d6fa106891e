# coding=utf-8
"""KenLM n-gram baseline: train with lmplz, or score sentences in natural log.

The flags and output of lm/ngram_lm.py (training) and `lm.inference.NgramLM` (scoring).

  python ngram.py --train_text=corpus.txt --output=lm.bin --order=5
  python ngram.py --model=lm.bin --score_file=sents.txt
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
import math
import os

from absl import logging

from lm import ngram_lm
from util import cli
from util import progress
from util import resumable


def define_flags():
  """Defines the CLI flags."""
  cli.define_param_flags(ngram_lm.NgramParams)


def main(argv):
  del argv
  params = cli.params(ngram_lm.NgramParams)
  if params.train_text:
    with cli.user_input():
      ngram_lm.train(params)
    print(params.output)
    return
  score_file(params.model, params.score_file, params.bos, params.eos)


# Sentences normalized and scored at a time.
_CHUNK = 256


def score_file(model, path, bos, eos):
  """Prints ln p, n_words, n_oov and the text of each line of `path`, scored by
  `inference.NgramLM` (score.py's KenLM path: the model's recorded normalization first)."""
  from lm import inference  # pylint: disable=g-import-not-at-top

  with cli.user_input():
    lm = inference.NgramLM(model, score_eos=eos, bos=bos)
    # InputLines names the file and line of bytes that are not UTF-8.
    texts = [text for _, text in resumable.InputLines(path, strip=False)]
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

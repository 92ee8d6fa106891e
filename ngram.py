# coding=utf-8
"""KenLM n-gram baseline: train with lmplz, or score sentences in natural log.

Its job is lm/ngram_job.py: training through lm/ngram_lm.py, scoring through
`lm.inference.NgramLM`.

  python ngram.py --train_text=corpus.txt --output=lm.bin --order=5
  python ngram.py --model=lm.bin --score_file=sents.txt
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from lm import ngram_job
from util import cli


def define_flags():
  """Defines the CLI flags."""
  cli.define_param_flags(ngram_job.JobParams)


def main(argv):
  del argv
  params = cli.params(ngram_job.JobParams)
  output = ngram_job.run(params)
  if output:
    print(output)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

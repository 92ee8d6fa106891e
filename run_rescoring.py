"""N-best reranking with any LM kind: the paper's tables (1, 2 and 7) and your own N-best files.

Your own files (nbest/rescoring.py) or the paper's protocol (nbest/paper_protocol.py); the
manual: README "Rescore your N-best lists", docs/manual.md
"Rescoring N-best lists".

  python run_rescoring.py --model_dir=runs/tta --task=asr --output_dir=results/asr
  python run_rescoring.py --format=kaldi --model_dir=ngram=kenlm:lm.bin,tta=runs/tta \\
      --dev_file=dev/nbest --dev_refs=data/dev/text --test_file=test/nbest --output_dir=out
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from nbest import rescoring_job
from util import cli


def define_flags():
  cli.define_param_flags(rescoring_job.JobParams)


def main(argv):
  del argv
  rescoring_job.run(cli.params(rescoring_job.JobParams))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""Writes N-best lists in a toolkit's format with their references: the shared LibriSpeech 30-best
lists, or any set run_rescoring.py reads, as Kaldi, ESPnet2, NeMo, fairseq or Moses files.

The job (nbest/conversion_job.py) reads the lists back with the format's reader and compares them
before success is reported. Examples: README "Rescore your N-best lists".

  python convert_nbest.py --input=dev_other --max_lists=100 --output_format=kaldi \\
      --output_dir=lists/kaldi/dev
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from absl import logging

from nbest import conversion_job
from util import cli


def define_flags():
  """Defines the command-line flags (from __main__ only, so tests can import the module)."""
  cli.define_param_flags(conversion_job.JobParams)


def main(argv):
  del argv
  params = cli.params(conversion_job.JobParams)
  done = conversion_job.run(params)
  logging.info(
    "wrote %d lists (%d hypotheses) as %s%s%s; scores kept: %s%s; rescore them with %s",
    done.lists,
    done.hypotheses,
    done.lists_path,
    f" and {done.refs_path}" if done.refs_path else "",
    "" if done.has_refs else " (no references)",
    ", ".join(done.kept),
    f" (left out: {', '.join(done.left_out)})" if done.left_out else "",
    " ".join(done.read_flags(params.output_format)),
  )


if __name__ == "__main__":
  define_flags()
  cli.run(main)

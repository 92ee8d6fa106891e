"""Converts a released checkpoint into a model dir that every command reads by --model_dir alone.

Sources: --input=hf:DIR (Hugging Face BERT), --input=bert:DIR (a Google BERT release), or
--init_checkpoint, --bert_config_file and --vocab_file (a TF1 checkpoint such as the T-TA
authors'). The written model dir is read back and its weights compared with the source's before
success is reported (its job: lm/checkpoint_job.py; lm/conversion.py converts). Examples:
README "Use a released checkpoint".

  python convert_checkpoint.py --input=hf:downloads/bert-base-uncased --output_dir=models/bert
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from absl import logging

from lm import checkpoint_job
from util import cli


def define_flags():
  """Defines the command-line flags (from __main__ only, so tests can import the module)."""
  cli.define_param_flags(checkpoint_job.JobParams)


def main(argv):
  del argv
  params = cli.params(checkpoint_job.JobParams)
  with cli.user_input():
    model, tokenizer, prefix = checkpoint_job.run(params)
  logging.info(
    "wrote %s model %s (sentences framed by %s ... %s); score with --model_dir=%s",
    model.model_type,
    prefix,
    *tokenizer.boundary_tokens,
    params.output_dir,
  )


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""N-best reranking with any LM kind: the paper's tables (1, 2 and 7) and your own N-best files.

Your own files (nbest/rescoring.py) or the paper's protocol (nbest/paper_protocol.py); the
manual: README "Rescore your own N-best lists".

  python run_rescoring.py --model_dir=runs/tta --task=asr --output_dir=results/asr
  python run_rescoring.py --format=kaldi --model_dir=ngram=kenlm:lm.bin,tta=runs/tta \\
      --dev_file=dev/nbest --dev_refs=data/dev/text --test_file=test/nbest --output_dir=out
"""

from absl import flags

from lm import lm_flags
from nbest import rescoring
from nbest import rescoring_job
from nbest import settings
from util import cli
from util import io_utils

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (called from __main__ only: a module that imports this
  one, or a test, gets its functions without its flags)."""
  lm_flags.define_model_dir(several=True, required=True)
  # The name this command had for --model_dir before every command took --model_dir.
  flags.DEFINE_alias("lm", "model_dir")
  lm_flags.define_scoring_flags()
  lm_flags.define_long_input_flags()
  cli.define_param_flags(rescoring_job.RescoringParams)
  flags.register_validator(
    "pairs",
    lambda pairs: all(len(p.split(":")) == 2 and all(p.split(":")) for p in pairs),
    "expected DEV:TEST set pairs, e.g. dev_clean:test_clean",
  )
  cli.register_choices("settings", list(settings.SETTINGS))
  flags.DEFINE_multi_string(
    "format_option", [], "KEY=VALUE option of the format's reader (VALUE as JSON if it parses)."
  )
  cli.define_escaped_list(
    "first_pass",
    [],
    "First-pass score columns NAME[:WEIGHT] of the combination, separated by commas; a comma in "
    "a NAME is written \\, (e.g. Moses' sparse feature pl_1,1: --first_pass='pl_1\\,1,LM0'). "
    "Default 'score' if the lists have it, else every column.",
  )
  io_utils.define_data_dir_flag()
  lm_flags.define_throughput_flags()
  flags.register_multi_flags_validator(
    ["format", "dev_file", "test_file", "weights_file"], _check_file_flags
  )


def params_from_flags():
  """`rescoring_job.RescoringParams` from the parsed flags."""
  with cli.user_input():
    options = dict(rescoring.parse_option(o) for o in FLAGS.format_option)
  return rescoring_job.RescoringParams(
    lms=lm_flags.named_specs(FLAGS.model_dir),
    scoring=FLAGS.scoring,
    first_pass=FLAGS.first_pass,
    format_options=options,
    data_dir=FLAGS.data_dir,
    lm_options=lm_flags.load_options(FLAGS),
    **cli.param_values(rescoring_job.RescoringParams, FLAGS),
  )


def main(argv):
  del argv
  rescoring_job.run(params_from_flags())


def _check_file_flags(values):
  """--test_file (any format) needs --dev_file (to tune on) or --weights_file; --dev_file alone
  is refused."""
  if values["dev_file"] and not values["test_file"]:
    raise flags.ValidationError("--dev_file needs --test_file")
  if values["test_file"] and not (values["dev_file"] or values["weights_file"]):
    raise flags.ValidationError(
      f"--format={values['format']} needs --dev_file and --test_file (or --weights_file)"
    )
  return True


if __name__ == "__main__":
  define_flags()
  cli.run(main)

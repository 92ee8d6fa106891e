"""Unsupervised semantic textual similarity (paper Tables 3 and 4), and of your own sentence pairs.

evaluation/sts_job.py runs it; the manual: README "Sentence similarity (STS)".

  python run_sts.py --model_dir=runs/tta,runs/bilm,runs/unilm --output_dir=results/sts
"""

from absl import flags

from evaluation import pair_similarity
from evaluation import sts_job
from lm import lm_flags
from util import cli
from util import io_utils

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (called from __main__ only: a module that imports this
  one, or a test, gets its functions without its flags)."""
  lm_flags.define_model_dir(several=True, kenlm=False, required=True)
  cli.define_param_flags(sts_job.JobParams)
  cli.register_choices("sets", list(sts_job.SETS))
  flags.register_validator("representations", _check_representations)
  io_utils.define_data_dir_flag()
  lm_flags.define_throughput_flags()
  lm_flags.define_long_input_flags()
  flags.DEFINE_multi_string(
    "pairs_file",
    [],
    "Your own sentence pairs (repeatable, or comma-separated): a TSV of sentence1<TAB>sentence2 "
    "with an optional third column of gold scores, or senteval:DIR for SentEval's STS12-16 layout "
    "(a directory of STS.input.<subset>.txt + STS.gs.<subset>.txt, or of such directories). "
    "NAME=FILE names the set (default: the file's name without its extension). Needs --output_dir; "
    "the paper's --sets then run only when given.",
  )


def _check_representations(names):
  """The --representations validator: flags.ValidationError naming an unknown one."""
  try:
    for name in names:
      pair_similarity.parse_representation(name)
  except ValueError as e:
    raise flags.ValidationError(str(e)) from None
  return True


def main(argv):
  del argv
  values = cli.param_values(sts_job.JobParams, FLAGS)
  if FLAGS.pairs_file and not FLAGS["sets"].present:
    values["sets"] = []  # with --pairs_file, the paper's sets run only when --sets is given
  with cli.user_input():
    params = sts_job.JobParams(
      **values,
      model_dir=FLAGS.model_dir,
      pairs_file=FLAGS.pairs_file,
      data_dir=FLAGS.data_dir,
      lm_options=lm_flags.load_options(FLAGS),
    )
  sts_job.run(params)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

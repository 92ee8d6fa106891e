"""Scores sentences with any LM: one sentence per line in, one JSON record per line out.

lm/scoring_job.py runs it; records, resume and shards: README "Score your own sentences".

  echo "the cat sat on the mat" | python score.py --model_dir=runs/tta
"""

from absl import flags

from lm import lm_flags
from lm import scoring_job
from util import cli

FLAGS = flags.FLAGS


def define_flags():
  lm_flags.define_model_dir(required=False)  # --merge needs none
  cli.define_param_flags(scoring_job.ScoreParams)
  lm_flags.define_scoring_flags()
  lm_flags.define_long_input_flags()
  lm_flags.define_throughput_flags()


def main(argv):
  del argv
  params = scoring_job.ScoreParams(
    **cli.param_values(scoring_job.ScoreParams, FLAGS),
    model_dir=FLAGS.model_dir,
    scoring=FLAGS.scoring,
    lm_options=lm_flags.load_options(FLAGS),
  )
  scoring_job.run(params)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

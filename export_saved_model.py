"""Exports a model dir as a SavedModel with `encode` and `score` signatures over strings.

lm/saved_model_export.py writes it; signatures and loading: docs/saved_model.md.

  python export_saved_model.py --model_dir=runs/tta --export_dir=exports/tta
"""

from absl import flags

from lm import lm_flags
from lm import saved_model_export
from util import cli

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (called from __main__ only, so that
  tests can import this module beside other scripts with the same flag
  names)."""
  lm_flags.define_model_dir(kenlm=False)
  cli.define_param_flags(saved_model_export.ExportParams)
  flags.mark_flag_as_required("export_dir")
  lm_flags.define_scoring_flags()
  lm_flags.define_long_input_flags(default="truncate")
  lm_flags.define_throughput_flags(backend=False)


def main(argv):
  del argv
  params = saved_model_export.ExportParams(
    **cli.param_values(saved_model_export.ExportParams, FLAGS),
    model_dir=FLAGS.model_dir,
    scoring=FLAGS.scoring,
    lm_options=lm_flags.load_options(FLAGS),
  )
  saved_model_export.run(params)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""Exports a model dir as a SavedModel with `encode` and `score` signatures over strings.

Its job is lm/export_job.py; lm/saved_model_export.py writes the SavedModel; signatures and
loading: docs/saved_model.md.

  python export_saved_model.py --model_dir=runs/tta --export_dir=exports/tta
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from lm import export_job
from util import cli


def define_flags():
  cli.define_param_flags(export_job.JobParams)


def main(argv):
  del argv
  export_job.run(cli.params(export_job.JobParams))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

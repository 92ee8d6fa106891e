"""Exports a model dir as a SavedModel with `encode` and `score` signatures over strings.

lm/saved_model_export.py writes it; signatures and loading: docs/saved_model.md.

  python export_saved_model.py --model_dir=runs/tta --export_dir=exports/tta
"""

from util import startup_log  # noqa: F401  # isort: skip (first: holds TF's start-up log)
from lm import saved_model_export
from util import cli


def define_flags():
  cli.define_param_flags(saved_model_export.ExportParams)


def main(argv):
  del argv
  saved_model_export.run(cli.params(saved_model_export.ExportParams))


if __name__ == "__main__":
  define_flags()
  cli.run(main)

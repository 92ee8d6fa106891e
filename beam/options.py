"""The Beam flags every beam_*.py command shares, and the pipeline options they make."""

import dataclasses
import difflib
import logging
import os
import re
import shlex

from util import cli


def _import_quietly():
  """apache_beam, or None where it is not installed (requirements-beam.txt is opt-in: the
  commands then refuse in one line, `import_beam`). Its import logs, on the root logger, that the
  GCP clients of its [gcp] extra are missing: held back, so that a refused command's stderr stays
  one line; the handler keeps `logging.warning` from installing one of its own (basicConfig)."""
  root, held = logging.getLogger(), logging.NullHandler()
  level = root.level
  root.addHandler(held)
  root.setLevel(logging.ERROR)
  try:
    import apache_beam  # pylint: disable=g-import-not-at-top

    return apache_beam
  except ImportError:
    return None
  finally:
    root.removeHandler(held)
    root.setLevel(level)


apache_beam = _import_quietly()

# The base of the pipelines' DoFns; without Beam a placeholder (`import_beam` refuses the run).
DoFn = apache_beam.DoFn if apache_beam else object
RUNNING_MODES = ("in_memory", "multi_threading", "multi_processing")


@dataclasses.dataclass(frozen=True)
class BeamParams:
  """Where a pipeline runs; none of it changes a byte of the output."""

  runner: str = cli.param(
    "Beam runner: DirectRunner (this machine: Beam's FnApiRunner, --direct_*), DataflowRunner, "
    "FlinkRunner, SparkRunner, PortableRunner, PrismRunner; the remote ones need their options "
    "in --pipeline_options and paths their workers reach (a bucket).",
    "DirectRunner",
    result=False,
  )
  direct_num_workers: int = cli.param(
    "DirectRunner: parallel workers (0: one per core).", 1, lower_bound=0, result=False
  )
  direct_running_mode: str = cli.param(
    "DirectRunner: in_memory (one thread), multi_threading or multi_processing (a process per "
    "worker: the CPU-bound work runs in parallel).",
    "in_memory",
    RUNNING_MODES,
    result=False,
  )
  pipeline_options: str = cli.param(
    "More Beam pipeline options, as on Beam's command line, e.g. '--project=P --region=R "
    "--temp_location=gs://BUCKET/tmp --sdk_container_image=IMAGE' (docs/scale.md).",
    "",
    result=False,
  )


def import_beam():
  """The apache_beam module; cli.InputError (one line) where it is not installed."""
  if apache_beam is None:
    raise cli.InputError(
      "Apache Beam is not installed: run `source scripts/setup_beam.sh` (requirements-beam.txt) "
      "first"
    )
  return apache_beam


def pipeline_options(params):
  """Beam's PipelineOptions of `params` (`BeamParams`), the runner checked first: cli.InputError
  naming --runner or --pipeline_options for a value Beam refuses, before any slow work."""
  import_beam()
  from apache_beam.options import pipeline_options as options_lib  # pylint: disable=g-import-not-at-top
  from apache_beam.runners import runner as runner_lib  # pylint: disable=g-import-not-at-top

  try:
    runner_lib.create_runner(params.runner)
  except (ValueError, ImportError) as e:
    raise cli.InputError(f"--runner={params.runner}: {e}") from None
  try:
    extra = shlex.split(params.pipeline_options)
  except ValueError as e:
    raise cli.InputError(f"--pipeline_options: {e}") from None
  if params.runner == "DirectRunner":
    # Beam's FnApiRunner, the DirectRunner's Python engine, which takes these two options: Beam
    # 2.78's DirectRunner would first try its Prism runner, a Go binary fetched from GitHub.
    argv = [
      "--runner=FnApiRunner",
      f"--direct_num_workers={params.direct_num_workers}",
      f"--direct_running_mode={params.direct_running_mode}",
      *extra,
    ]
  else:
    argv = [f"--runner={params.runner}", *extra]
  options = options_lib.PipelineOptions(argv)
  check_known(options, extra)
  # A DoFn's exception reaches the command (cli.run: one line for a wrong input, a traceback for a
  # bug); Beam's worker would log it with its traceback first.
  logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)
  # The worker processes of multi_processing import this project's modules: they start in
  # Python's default path, so the project's root goes on theirs.
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
  if root not in paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([p for p in paths if p] + [root])
  return options


def check_known(options, extra):
  """cli.InputError naming the options among `extra` (--pipeline_options' words) that no
  PipelineOptions class defines. Beam only warns of them and runs on (a runner's own options may
  be defined after the command line is read), so a misspelt --temp_locaton would be dropped in
  silence; `create_runner` has imported the runner's module, and its options, by then."""
  # Beam's own parse, of its known options alone, then with the unknown ones kept. The first
  # warns of what it drops: held back, the refusal names them in its one line.
  beam_log = logging.getLogger(type(options).__module__)
  level = beam_log.level
  beam_log.setLevel(logging.ERROR)
  try:
    known = options.get_all_options()
    kept = options.get_all_options(retain_unknown_options=True)
  finally:
    beam_log.setLevel(level)
  # Beam drops a single-dash flag (-x 1) even from those it keeps, or keeps it as --x.
  single = [word.split("=")[0] for word in extra if re.match(r"-[^-\d]", word)]
  unknown = [f"--{n}" for n in kept if n not in known and f"-{n}" not in single] + single
  if unknown:
    close = difflib.get_close_matches(unknown[0].lstrip("-"), known, n=1)
    raise cli.InputError(
      f"--pipeline_options={shlex.join(extra)}: Beam knows no option {', '.join(unknown)}"
      + (f" (did you mean --{close[0]}?)" if close else "")
    )


def sharded_job(cls):
  """A pipeline's `cli.nested` field of a sharded job's params `cls`: every flag of it but the part
  flags --shard_id and --merge (the pipeline runs the parts and the merge), 16 parts by default.
  Its nested fields keep all their flags."""
  own = tuple(
    f.name
    for f in dataclasses.fields(cls)
    if f.name not in ("shard_id", "merge") and "nested" not in f.metadata
  )
  return cli.nested(cls, only=own, defaults={"num_shards": 16})

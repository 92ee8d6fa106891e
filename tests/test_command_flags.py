"""Every command's flags (name, default) and run identity fields equal a committed list
(tests/fixtures/command_flags.json): moving a params class, renaming one or splitting a job
module (issue 57 item 5) must leave the command line and run.json as they were.

A deliberate change of a flag regenerates the list:
  python tests/test_command_flags.py > tests/fixtures/command_flags.json
"""

import dataclasses
import importlib
import json
import os
import sys

from absl import flags

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))

from util import cli  # noqa: E402

_LIST = os.path.join(_HERE, "fixtures", "command_flags.json")
_COMMANDS = (
  "convert_checkpoint",
  "convert_nbest",
  "corpus",
  "create_pretraining_data",
  "export_saved_model",
  "ngram",
  "reproduce",
  "run_benchmark",
  "run_mwer",
  "run_pretraining",
  "run_rescoring",
  "run_sts",
  "score",
)


def _params_class(command):
  """The params dataclass whose fields are `command`'s flags (its `define_flags` passes it to
  cli.define_param_flags, tests/test_command_shape.py)."""
  module = importlib.import_module(command)
  found = []
  define = cli.define_param_flags
  cli.define_param_flags = lambda cls, flag_values=None: found.append(cls)
  try:
    module.define_flags()
  finally:
    cli.define_param_flags = define
  (cls,) = found
  return cls


def _identity_names(cls):
  """The run identity's field names of `cls` (util/runs.py `identity`, the values a job adds
  itself aside): a flat nested dataclass's in its place, another one under its own name."""
  names = []
  for field in dataclasses.fields(cls):
    if not cli.is_result(field):
      continue
    nested = field.metadata.get("nested")
    if nested and field.metadata.get("flat", True):
      names += _identity_names(nested)
    else:
      names.append(cli.flag_name(field))
  return names


def dump():
  """{command: {"flags": {name: default}, "identity": [field names]}}."""
  listed = {}
  for command in _COMMANDS:
    cls = _params_class(command)
    flag_values = flags.FlagValues()
    cli.define_param_flags(cls, flag_values)
    listed[command] = {
      "flags": {name: flag_values[name].default for name in sorted(flag_values)},
      "identity": sorted(_identity_names(cls)),
    }
  return json.loads(json.dumps(listed, default=repr))


def test_every_command_s_flags_and_identity_are_the_listed_ones():
  with open(_LIST, encoding="utf-8") as f:
    listed = json.load(f)
  now = dump()
  assert sorted(now) == sorted(listed)
  for command in _COMMANDS:
    assert now[command]["flags"] == listed[command]["flags"], command
    assert now[command]["identity"] == listed[command]["identity"], command


if __name__ == "__main__":
  print(json.dumps(dump(), indent=1, sort_keys=True))

"""The job an output dir holds: recorded when a run starts it, compared when a run resumes it.

`Record(output_dir, identity, outputs, overwrite)` refuses another job; `start()` writes
<output_dir>/run.json (and with --overwrite first removes the old run's `outputs`). `identity` is
a JSON-able dict of what the outputs depend on (the command, `inference.spec_identity` of the
models, `path_identity` of the inputs, every option that changes a result); a different one is
refused in one line naming the first field that differs (`another_job`).
"""

import json
import os
import shutil

from util import cli
from util import io_utils

RECORD_FILE = "run.json"
START_OVER = "add --overwrite to start over"


def path_identity(path):
  """The identity of an input file or directory without reading it: its absolute path, and
  the size and modification time of the file (of each file under the directory); `None` for
  those of a path that does not exist (the run's reader then names it)."""
  path = os.path.abspath(path)
  if os.path.isdir(path):
    files = {}
    for directory, _, names in os.walk(path):
      for name in sorted(names):
        full = os.path.join(directory, name)
        files[os.path.relpath(full, path)] = _stat(full)
    return {"path": path, "files": dict(sorted(files.items()))}
  return {"path": path, **dict(zip(("bytes", "mtime"), _stat(path) or (None, None)))}


def _stat(path):
  try:
    stat = os.stat(path)
  except OSError:
    return None
  return [stat.st_size, stat.st_mtime_ns]


class Record:
  """The run identity of an output dir (see the module docstring).

  Args:
    output_dir: str, the command's --output_dir (it exists: the run holds its lock).
    identity: JSON-able dict, what the run's outputs depend on.
    outputs: names in `output_dir` the command writes (files or dirs); --overwrite removes them.
    overwrite: bool, start over instead of resuming.
    adopt_unrecorded: outputs without a record (of a version that wrote none) are this job's,
      recorded by `start`; else refused.

  Raises:
    cli.InputError: the dir holds another job (naming the first field that differs), or outputs
      of a run that recorded none; the message says how to start over.
  """

  def __init__(self, output_dir, identity, outputs, overwrite=False, adopt_unrecorded=False):
    self.output_dir, self.outputs, self.overwrite = output_dir, list(outputs), overwrite
    self.path = os.path.join(output_dir, RECORD_FILE)
    # As it reads back from the file: tuples become lists.
    self.identity = json.loads(json.dumps(identity))
    self._started = False
    if overwrite:
      return
    if not os.path.exists(self.path):
      found = [name for name in self.outputs if os.path.exists(os.path.join(output_dir, name))]
      if found and not adopt_unrecorded:
        raise cli.InputError(
          f"--output_dir {output_dir} holds {', '.join(found)} of a run that recorded no job "
          f"({RECORD_FILE}): {START_OVER}"
        )
      return
    try:
      recorded = io_utils.read_json_file(self.path)
    except ValueError as e:
      raise cli.InputError(f"{e}: {START_OVER}") from None
    if recorded != self.identity:
      raise another_job(f"--output_dir {output_dir} holds another job", recorded, self.identity)
    self._started = True

  def start(self):
    """Records the run (once): with overwrite, removes the old run's outputs first."""
    if self._started:
      return
    if self.overwrite:
      for name in self.outputs + [RECORD_FILE]:
        path = os.path.join(self.output_dir, name)
        if os.path.isdir(path):
          shutil.rmtree(path)
        elif os.path.lexists(path):
          os.remove(path)
    io_utils.write_atomically(self.path, json.dumps(self.identity, indent=2) + "\n")
    self._started = True


def another_job(where, recorded, identity):
  """The refusal of a run into outputs of another job, in one line: `where` ("OUTPUT holds
  another job"), then the first field in which `recorded` differs from this run's `identity`,
  and how to start over. The one wording of Record's and resumable.Partial's refusals.

  Returns:
    cli.InputError, to raise.
  """
  name, old, new = _first_difference(recorded, json.loads(json.dumps(identity)))
  return cli.InputError(f"{where}: {name} {_show(old)} (this run: {_show(new)}); {START_OVER}")


def _first_difference(old, new, name="job"):
  """(dotted name, old value, new value) of the first field that differs, in `new`'s order.

  A "path" field is named by its parent (`init_model /a/tta`), the way a user names a model,
  and so is an item of a list (of models: the path tells which)."""
  if isinstance(old, dict) and isinstance(new, dict):
    for key in list(new) + [k for k in old if k not in new]:
      if key not in old or key not in new or old[key] != new[key]:
        inner = name if key == "path" else (key if name == "job" else f"{name}.{key}")
        return _first_difference(old.get(key), new.get(key), inner)
  if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
    for a, b in zip(old, new):
      if a != b:
        return _first_difference(a, b, name)
  return name, old, new


def _show(value):
  if value is None:
    return "none"
  if isinstance(value, dict) and "path" in value:
    return value["path"]
  if isinstance(value, list):
    return "[" + ", ".join(_show(v) for v in value) + "]"
  if isinstance(value, dict):
    return json.dumps(value)
  return str(value)

"""The job an output dir holds: recorded in run.json when a run starts it, compared when a run
resumes it (docs/DESIGN.md §1, util/). `Record` refuses another job; `identity` is every
command's run identity."""

import contextlib
import dataclasses
import fnmatch
import glob
import json
import os

from util import cli
from util import io_utils

RECORD_FILE = "run.json"
# run.json's field of the outputs the job created (`Record`); not part of the identity.
RECORDED = "recorded_outputs"
START_OVER = "add --overwrite to start over"
# A field one identity has and the other lacks (`another_job`).
_ABSENT = object()


def identity(command, params, **values):
  """The run identity of `command` run with `params`, as it reads back from run.json.

  {"command": command, **values, then every other field by its flag name}: an OUTPUT field and one
  marked `result=False` left out, an INPUT field as the `path_identity` of its path(s), a nested
  dataclass as its own fields. `values`: the job's identity of fields it reads itself (a model's
  `inference.spec_identity`) or facts no field holds; first, so that a refusal names them before
  what follows from them. ValueError for two fields under one name.
  """
  fields = _identity_fields(params)
  names = {field.name: cli.flag_name(field) for field, _ in fields}
  job = {"command": command}
  for name, value in values.items():
    job[names.get(name, name)] = value
  for field, value in fields:
    if field.name in values:
      continue
    name = cli.flag_name(field)
    if name in job:
      raise ValueError(f"{type(params).__name__}: two fields named {name} in the run identity")
    job[name] = _paths_identity(value) if field.metadata.get("io") == cli.INPUT else value
  return json.loads(json.dumps(job))


def _identity_fields(params):
  """[(field, value)] of `params` in its run identity, a nested dataclass's fields in its place."""
  fields = []
  for field in dataclasses.fields(params):
    value = getattr(params, field.name)
    if not cli.is_result(field):
      continue
    if dataclasses.is_dataclass(value) and field.metadata.get("flat", True):
      fields += _identity_fields(value)
    elif dataclasses.is_dataclass(value):
      only = field.metadata.get("only") or [f.name for f in dataclasses.fields(value)]
      fields.append((field, {name: getattr(value, name) for name in only}))
    else:
      fields.append((field, value))
  return fields


def _paths_identity(value):
  """`path_identity` of an INPUT field's path, or of each of a list of them; unset: as it is."""
  if not value:
    return value
  if isinstance(value, (list, tuple)):
    return [path_identity(path) for path in value]
  return path_identity(value)


def path_identity(path):
  """An input file's or directory's identity without reading it: its absolute path and the size and
  mtime of the file (of each file under the directory); None for those of a missing path."""
  path = io_utils.absolute(path)
  if io_utils.isdir(path):
    files = {}
    for directory, _, names in io_utils.walk(path):
      for name in sorted(names):
        full = os.path.join(directory, name)
        files[os.path.relpath(full, path)] = io_utils.stat(full)
    return {"path": path, "files": dict(sorted(files.items()))}
  return {"path": path, **dict(zip(("bytes", "mtime"), io_utils.stat(path) or (None, None)))}


class Record:
  """The run identity of an output dir (run.json), and the outputs its runs made.

  `outputs` are the files the job may write, as paths relative to the dir ("pairs/x.tsv"), globs
  ("ckpt-*", "pairs/*.tsv": `*` spans folders) or folders it owns whole ("runs"). run.json holds
  the identity and, under RECORDED, the outputs this job claimed: --overwrite removes the files
  those cover that are outputs of this job too, then the folders that leaves empty
  (`io_utils.remove_files`); an existing output no run recorded is the user's, refused, never
  removed; a file the user put beside the outputs (pairs/notes.txt) is no output: kept. A run.json
  without RECORDED owns the outputs modified since it was written. cli.InputError, saying how to
  go on, for another job (naming the first field that differs) or outputs this job may not take.
  A job that does not resume (`resumes=False`: a measurement, run_benchmark.py) takes only a new
  or empty dir, or one a run of its own recorded, and replaces an earlier run's outputs only
  with --overwrite: anything in a dir without run.json is the user's.
  """

  def __init__(
    self, output_dir, identity, outputs, overwrite=False, adopt_unrecorded=False, resumes=True
  ):
    self.output_dir, self.outputs, self.overwrite = output_dir, list(outputs), overwrite
    self.path = os.path.join(output_dir, RECORD_FILE)
    # As it reads back from the file: tuples become lists.
    self.identity = json.loads(json.dumps(identity))
    self._started = False
    self._wrote = False
    self._made = []  # outputs and their folders absent when `start` recorded the run
    recorded = self._read() if io_utils.exists(self.path) else None
    found = self._existing()
    if recorded is None:
      held = [] if resumes or not io_utils.isdir(output_dir) else io_utils.listdir(output_dir)
      if held:
        raise cli.InputError(
          f"--output_dir {output_dir} holds {_listed(held)}, which no run of this command wrote "
          f"(no {RECORD_FILE}): choose a new or empty --output_dir"
        )
      if found and not adopt_unrecorded and not overwrite:
        raise cli.InputError(
          f"--output_dir {output_dir} holds {_listed(found)} of a run that recorded no job "
          f"({RECORD_FILE}): move {'them' if len(found) > 1 else 'it'} away or choose another "
          "--output_dir"
        )
      self.claimed = found if adopt_unrecorded else []
    elif RECORDED in recorded:
      self.claimed = recorded.pop(RECORDED)
    else:
      # A record of a version that kept none: its outputs are those changed since it was written
      # (a run records its job before it writes); an older one was there before the run.
      since = _mtime(self.path)
      self.claimed = [n for n in found if _mtime(os.path.join(output_dir, n)) >= since]
    # The old run's files: those its claims name, and under a folder it claimed whole (a record of
    # an older version), only this job's outputs.
    self.recorded = [
      name
      for name in io_utils.find_files(output_dir, self.claimed)
      if _covers(self.claimed, name, folders=False) or _covers(self.outputs, name)
    ]
    foreign = [name for name in found if name not in self.recorded]
    if foreign:
      raise cli.InputError(
        f"--output_dir {output_dir} holds {_listed(foreign)}, which no run of this command "
        f"recorded in {RECORD_FILE} as its own{' (--overwrite removes only those)' * overwrite}: "
        f"move {'them' if len(foreign) > 1 else 'it'} away or choose another --output_dir"
      )
    if overwrite or recorded is None:
      return
    if recorded != self.identity:
      raise another_job(f"--output_dir {output_dir} holds another job", recorded, self.identity)
    if self.recorded and not resumes:
      raise cli.InputError(
        f"--output_dir {output_dir} holds {_listed(self.recorded)} of an earlier run, which "
        f"{self.identity['command']} does not resume: add --overwrite to replace "
        f"{'them' if len(self.recorded) > 1 else 'it'}"
      )
    self._started = True

  def _read(self):
    """run.json's dict; cli.InputError naming it when it is not a record."""
    try:
      recorded = io_utils.read_json_file(self.path)
      why = None if isinstance(recorded, dict) else f"{self.path}: not a record of a run"
    except ValueError as e:
      why = str(e)
    if why is None:
      return recorded
    if not self.overwrite:
      # What it recorded is unknown: --overwrite can start over only where no output is left
      # (it removes none it cannot tell the run's), so it is advised only then.
      found = self._existing()
      if found:
        raise cli.InputError(
          f"{why}: nothing tells whether {_listed(found)} here {'are' if len(found) > 1 else 'is'}"
          f" a run's: move {'them' if len(found) > 1 else 'it'} away or choose another "
          "--output_dir"
        )
      raise cli.InputError(f"{why}: {START_OVER}")
    return {RECORDED: []}  # none of the outputs are taken for this job's

  def _existing(self):
    """The existing files of `outputs` (relative paths; globs expanded, owned folders walked)."""
    return io_utils.find_files(self.output_dir, self.outputs)

  def start(self):
    """Records the run (once), claiming this job's outputs; with overwrite, first removes the
    files of the old run's outputs and the folders that leaves empty."""
    if self._started:
      return
    if self.overwrite:
      # The folders this job owns whole go too when they hold nothing but folders.
      owned = [o for o in self.outputs if not glob.has_magic(o)]
      io_utils.remove_files(self.output_dir, self.recorded + owned)
      self.recorded = []
    named = _folders(self.outputs) + [o for o in self.outputs if not glob.has_magic(o)]
    self._made = [n for n in named if not io_utils.lexists(self._path(n))]
    # The old claims stay (a resume of the same job), then this job's outputs.
    claimed = [n for n in self.claimed if not self.overwrite] + self.recorded + self.outputs
    record = dict(self.identity, **{RECORDED: list(dict.fromkeys(claimed))})
    io_utils.write_atomically(self.path, json.dumps(record, indent=2) + "\n")
    self._started = self._wrote = True

  def _path(self, name):
    return os.path.join(self.output_dir, *name.split("/"))

  def __enter__(self):
    return self

  def __exit__(self, kind, error, traceback):
    """A run refused (cli.InputError) after `start` but before it made any of its outputs takes
    its run.json back, so that the corrected command is not refused as another job."""
    if not (isinstance(error, cli.InputError) and self._wrote):
      return
    # A folder this run made for an output it then could not write (a full disk) holds nothing.
    for name in sorted(self._made, key=len, reverse=True):  # a file is no folder: kept
      with contextlib.suppress(OSError):
        io_utils.rmdir(self._path(name))
    if not self._existing():
      with contextlib.suppress(OSError):
        io_utils.remove(self.path)
      self._started = self._wrote = False


def _listed(names, shown=3):
  more = len(names) - shown
  return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _covers(outputs, name, folders=True):
  """Whether file `name` is one of `outputs` (names, globs; with `folders`, under a folder)."""
  return any(
    fnmatch.fnmatchcase(name, o) or (folders and name.startswith(o.rstrip("/") + "/"))
    for o in outputs
  )


def _folders(outputs):
  """The folders (relative) that hold `outputs`, as far as their names say, outermost first."""
  folders = []
  for output in outputs:
    parts = output.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
      if glob.has_magic(parts[depth - 1]):
        break
      folders.append("/".join(parts[:depth]))
  return list(dict.fromkeys(folders))


def _mtime(path):
  return io_utils.stat(path)[1] if io_utils.is_remote(path) else os.lstat(path).st_mtime_ns


def another_job(where, recorded, identity):
  """The cli.InputError (to raise) of a run into another job's outputs, in one line: `where`, the
  first field in which `recorded` differs from `identity`, and how to start over. The one wording
  of Record's and resumable.Partial's refusals."""
  name, old, new = _first_difference(recorded, json.loads(json.dumps(identity)))
  shown = [_show(old), _show(new)]
  if shown[0] == shown[1] and (old is _ABSENT or new is _ABSENT):  # the other holds None
    shown[new is _ABSENT] = "absent"
  return cli.InputError(f"{where}: {name} {shown[0]} (this run: {shown[1]}); {START_OVER}")


def _first_difference(old, new, name="job"):
  """(dotted name, old, new) of the first field that differs, in `new`'s order; a "path" field and
  a list item are named by their parent, as a user names a model."""
  if isinstance(old, dict) and isinstance(new, dict):
    for key in list(new) + [k for k in old if k not in new]:
      if key not in old or key not in new or old[key] != new[key]:
        inner = name if key == "path" else (key if name == "job" else f"{name}.{key}")
        return _first_difference(old.get(key, _ABSENT), new.get(key, _ABSENT), inner)
  if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
    for a, b in zip(old, new):
      if a != b:
        return _first_difference(a, b, name)
  return name, old, new


def _show(value):
  if value is None or value is _ABSENT:
    return "none"
  if isinstance(value, dict) and "path" in value:
    return value["path"]
  if isinstance(value, list):
    return "[" + ", ".join(_show(v) for v in value) + "]"
  if isinstance(value, dict):
    return json.dumps(value)
  return str(value)

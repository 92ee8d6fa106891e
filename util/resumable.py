"""Output files that survive an interruption: a long run appends, a re-run resumes.

`Partial(target, job)` appends fsynced batches to target.partial (state in .partial.json) and
`finish` renames it; a re-run of the same job on the same input resumes after the last complete
batch and ends with the same file.
"""

import collections
import contextlib
import hashlib
import json
import os
import sys

from util import cli
from util import io_utils
from util import runs


class InputLines:
  """Yields (line number, sentence stripped) of the input ('-': stdin); cli.InputError file:line on
  bad UTF-8. strip=False keeps spaces and tabs and drops only the line break (inputs with columns).

  `lines_read` and `sha256()` cover the lines yielded so far: consumers pull lazily, so when a batch
  is complete they cover the input through its last line; `offset` is the byte offset of the last
  line yielded. With `byte_range` [begin, end) of a file, only the lines that start in it are read
  (a line starting before `begin` belongs to the range before), numbered from 0 within the range.
  """

  def __init__(self, path, strip=True, byte_range=None):
    self.path = path
    self.strip = strip
    self.byte_range = byte_range
    self.lines_read = 0
    self.offset = 0
    self._digest = hashlib.sha256()

  def sha256(self):
    return self._digest.hexdigest()

  def _raw(self):
    """Yields (byte offset, raw line) of the lines in range, without hashing them."""
    if self.path == "-":
      yield from _with_offsets(sys.stdin.buffer, 0)
      return
    with io_utils.open_file(self.path, "rb") as stream:
      if self.byte_range is None:
        yield from _with_offsets(stream, 0)
        return
      begin, end = self.byte_range
      if begin > 0:
        stream.seek(begin - 1)
        if stream.read(1) != b"\n":
          stream.readline()  # the rest of a line that started before the range
      for offset, raw in _with_offsets(stream, stream.tell()):
        if offset >= end:
          return
        yield offset, raw

  def count(self):
    """The number of lines in range (read apart from the iteration)."""
    return sum(1 for _ in self._raw())

  def __iter__(self):
    name = "<stdin>" if self.path == "-" else self.path
    for number, (offset, raw) in enumerate(self._raw()):
      self._digest.update(raw)
      self.lines_read = number + 1
      self.offset = offset
      try:
        text = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        packed = offset == 0 and _compression(raw)
        if packed:
          raise cli.InputError(_packed(name, packed)) from None
        where = (
          f"{name}:{number + 1}" if self.byte_range is None else f"{name} (line at byte {offset})"
        )
        raise cli.InputError(f"{where}: not valid UTF-8 ({e})") from None
      if self.strip:
        yield number, text.strip()
      else:
        yield number, text.removesuffix("\n").removesuffix("\r")


# The first bytes of a compressed file, by its compressor's name.
_MAGIC = {"gzip": b"\x1f\x8b", "xz": b"\xfd7zXZ\x00", "zstd": b"\x28\xb5\x2f\xfd", "bzip2": b"BZh"}


def check_plain(path):
  """cli.InputError naming the file `path` (a regular file, read apart from the run) when it starts
  with a compressor's magic bytes: refused before a model loads, not at its first line."""
  with io_utils.open_file(path, "rb") as stream:
    packed = _compression(stream.read(8))
  if packed:
    raise cli.InputError(_packed(path, packed))


def _packed(name, packed):
  return f"{name}: {packed}-compressed; this command reads plain UTF-8 text: decompress it first"


def _compression(first_line):
  """The compressor whose magic bytes begin `first_line` (raw bytes), or None."""
  return next((name for name, magic in _MAGIC.items() if first_line.startswith(magic)), None)


def _with_offsets(stream, offset):
  """Yields (byte offset, raw line) of `stream`'s lines, the first at `offset`."""
  for raw in stream:
    yield offset, raw
    offset += len(raw)


class Partial:
  """`OUTPUT.partial`, the records so far, and `OUTPUT.partial.json`, the job and the input read.

  The input's identity is its path plus the line count and sha256 of the part read: an input
  edited, truncated or replaced since is refused, one that only grew resumes. Each batch is
  appended and fsynced before the state is replaced atomically, so a resume keeps exactly the lines
  the state counts and forms the same batches as an uninterrupted run: the same floats.
  """

  def __init__(self, target, job, overwrite=False):
    """Resumes the partial file of `target` for `job`, or starts it afresh; cli.InputError (saying
    how to start over) for another job's file or a state that is missing or does not fit it. A
    remote target's partial files are local (`io_utils.local_stage`: appends, fsyncs and cuts) and
    `finish` copies the whole output in."""
    self.path = io_utils.local_stage(target) + ".partial"
    self.state_path = self.path + ".json"
    self.state = {
      "job": job,
      "lines": 0,
      "input_lines": 0,
      "input_sha256": hashlib.sha256().hexdigest(),
    }
    if overwrite or not os.path.exists(self.path):
      for path in (self.path, self.state_path):
        if os.path.exists(path):
          os.remove(path)
      self._write_state()
      return
    try:
      with open(self.state_path, encoding="utf-8") as f:
        recorded = json.load(f)
    except (OSError, ValueError):
      recorded = None
    if not _is_state(recorded):
      raise cli.InputError(
        f"{self.path} has no readable record of the run that wrote it ({self.state_path} is "
        f"missing or not such a record): {runs.START_OVER}"
      ) from None
    if recorded.get("job") != json.loads(json.dumps(job)):
      raise runs.another_job(f"{self.path} holds records of another job", recorded.get("job"), job)
    if not _cut_after(self.path, recorded["lines"]):
      raise cli.InputError(
        f"{self.path} has fewer lines than {self.state_path} counts ({recorded['lines']}): "
        f"{runs.START_OVER}"
      )
    self.state = recorded

  @property
  def lines(self):
    return self.state["lines"]

  def __enter__(self):
    return self

  def __exit__(self, kind, error, traceback):
    """A run refused (cli.InputError: a line that is not UTF-8, found while scoring) before its
    first record takes its partial files back: nothing is there to resume (as `runs.Record`)."""
    if isinstance(error, cli.InputError) and not self.lines:
      for path in (self.path, self.state_path):
        with contextlib.suppress(OSError):
          os.remove(path)

  def check_input(self, source):
    """Raises unless `source` has read what the partial file was scored from."""
    if (source.lines_read, source.sha256()) != (
      self.state["input_lines"],
      self.state["input_sha256"],
    ):
      raise cli.InputError(
        f"{source.path} is not the input {self.path} was scored from (its first "
        f"{self.state['input_lines']} lines changed): {runs.START_OVER}"
      )

  def append(self, lines, source):
    """Appends a batch's lines; `source` has read the input through its last line. On a failed write
    (a full disk) the file is cut back to its last complete batch and cli.InputError says so."""
    size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
    before = self.state
    try:
      with open(self.path, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
        f.flush()
        os.fsync(f.fileno())
      self.state = dict(
        before,
        lines=before["lines"] + len(lines),
        input_lines=source.lines_read,
        input_sha256=source.sha256(),
      )
      self._write_state()
    except (OSError, cli.InputError) as e:
      self.state = before
      # The state file still counts the lines before this batch, so a resume cuts there anyway;
      # cutting now also frees the space the batch took.
      with contextlib.suppress(OSError):
        os.truncate(self.path, size)
      # An InputError is the state file's (io_utils.write_atomically names it).
      why = str(e) if isinstance(e, cli.InputError) else f"cannot write {self.path} ({e.strerror})"
      if not self.lines:
        # Nothing to resume from: the run leaves nothing (the lock and its dir go too).
        for path in (self.path, self.state_path):
          with contextlib.suppress(OSError):
            os.remove(path)
        raise cli.InputError(f"{why}; nothing was kept") from None
      raise cli.InputError(
        f"{why}: {self.path} keeps its {self.lines} complete lines, and a re-run with the same "
        "arguments resumes after them"
      ) from None

  def _write_state(self):
    io_utils.write_atomically(self.state_path, json.dumps(self.state, indent=2) + "\n")

  def finish(self, target, source=None):
    """Renames the partial file (empty too: every line blank or another shard's) to `target`; with
    `source` (read to its end), records the job and input in `done_path(target)` for `is_done`."""
    if not os.path.exists(self.path):
      open(self.path, "w").close()
    lines = self.lines
    if io_utils.is_remote(target):
      io_utils.copy_file(self.path, target)
      os.remove(self.path)
    else:
      os.replace(self.path, target)
    os.remove(self.state_path)
    if io_utils.is_remote(target):
      with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(self.path))  # the stage, empty now
    if source is not None:
      done = {
        "job": self.state["job"],
        "lines": lines,
        "input_lines": source.lines_read,
        "input_sha256": source.sha256(),
      }
      io_utils.write_atomically(done_path(target), json.dumps(done, indent=2) + "\n")


def done_path(target):
  """The record of a finished output (`Partial.finish` with a source)."""
  return target + ".done.json"


def is_done(target, job, source):
  """Whether `target` is the finished output of `job` on the input `source` (read to its end here)
  holds now, by its `done_path` record: a run of several outputs skips those."""
  try:
    with io_utils.open_file(done_path(target)) as f:
      done = json.load(f)
  except (OSError, ValueError):
    return False
  if not _is_state(done) or not io_utils.exists(target) or done["job"] != job:
    return False
  collections.deque(source, maxlen=0)
  return (source.lines_read, source.sha256()) == (done["input_lines"], done["input_sha256"])


def _is_state(value):
  """Whether `value` (a state file's JSON) is a state `Partial` wrote: its fields and types."""
  return (
    isinstance(value, dict)
    and "job" in value
    and all(
      isinstance(value.get(k), int) and not isinstance(value.get(k), bool) and value[k] >= 0
      for k in ("lines", "input_lines")
    )
    and isinstance(value.get("input_sha256"), str)
  )


def _cut_after(path, count):
  """Cuts `path` after its first `count` lines; False if it has fewer."""
  with open(path, "r+b") as f:
    for _ in range(count):
      if not f.readline().endswith(b"\n"):
        return False
    f.truncate(f.tell())
  return True

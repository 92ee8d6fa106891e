"""Small file helpers shared by the scripts: results are never half-written."""

import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_open(path, mode="w", encoding="utf-8"):
  """Opens a temporary file beside `path`; it replaces `path` only on success.

  A crash or an exception inside the `with` block leaves any earlier `path`
  untouched and removes the temporary file, so readers never see a partial
  result.
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory,
                             prefix="." + os.path.basename(path) + ".")
  try:
    with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_atomically(path, text):
  """Writes a str to `path` atomically (see atomic_open)."""
  with atomic_open(path) as f:
    f.write(text)

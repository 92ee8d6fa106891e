"""Small file helpers shared by the scripts: the data root, globs, atomic writes, output dirs and
their checks, the one lock (`exclusive_lock`), stage stamps and seeded held-out hashes.

Light on purpose (standard library, absl, util/cli.py): corpus.py's worker processes import it;
TensorFlow only for `expand_globs` and remote paths.
"""

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import tempfile
import time

from absl import flags
from absl import logging

from util import cli

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The flags `define_data_dir_flag` defines belong to the script that calls it, so that its
# --help lists them (absl attributes a flag to the module that runs DEFINE_*).
flags.disclaim_key_flags()

# ---------------------------------------------------------------------------------------------
# The data root
# ---------------------------------------------------------------------------------------------


def define_data_dir_flag():
  """Defines `--data_dir`, the data root flag of every script that reads the shared data."""
  flags.DEFINE_string(
    "data_dir", None, "Data root (default: $TTA_DATA, else ../shared/data beside the repository)."
  )


def data_root(data_dir=None):
  """Finds the shared data root.

  Args:
    data_dir: str or None, an explicit root (the `--data_dir` flag); wins over everything else.

  Returns:
    str, the argument, else $TTA_DATA, else `../shared/data` next to the repository root.

  Raises:
    FileNotFoundError: the chosen directory does not exist (naming where it came from).
  """
  if data_dir:
    origin = "the data_dir argument"
  elif os.environ.get("TTA_DATA"):
    data_dir, origin = os.environ["TTA_DATA"], "$TTA_DATA"
  else:
    data_dir = os.path.normpath(os.path.join(_REPO, "..", "shared", "data"))
    origin = "the default (../shared/data next to the repository)"
  if not os.path.isdir(data_dir):
    raise FileNotFoundError(
      f"data directory {data_dir} (from {origin}) does not exist; pass --data_dir or set TTA_DATA"
    )
  return data_dir


# ---------------------------------------------------------------------------------------------
# Input files
# ---------------------------------------------------------------------------------------------


def expand_globs(patterns):
  """Expands comma-separated globs (or a list of globs) into file paths.

  Globs are matched by `tf.io.gfile.glob` (TensorFlow is imported here), so that local and
  remote ("gs://...") patterns work alike.

  Args:
    patterns: str ("a/*.txt,b.txt") or list of str.

  Returns:
    list of str: each pattern's matches sorted; patterns in the given order; duplicates removed
    (first one kept). Local paths are made absolute, so that a record of them (data_stats.json,
    a rerun check) does not depend on the working directory.

  Raises:
    ValueError: naming a pattern that matches no file, or if there is no pattern at all.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  split = patterns.split(",") if isinstance(patterns, str) else patterns
  paths = []
  for pattern in (p.strip() for p in split):
    if not pattern:
      continue
    matches = sorted(tf.io.gfile.glob(pattern))
    if not matches:
      raise ValueError(f"file pattern {pattern!r} matches no file")
    matches = [m if "://" in m else os.path.abspath(m) for m in matches]
    paths.extend(m for m in matches if m not in paths)
  if not paths:
    raise ValueError(f"no input files in {patterns!r}")
  return paths


# ---------------------------------------------------------------------------------------------
# Atomic writes
# ---------------------------------------------------------------------------------------------


def _gfile(path):
  """`tf.io.gfile` for a remote path ("gs://..."), else None (TensorFlow is not imported)."""
  if "://" not in path:
    return None
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  return tf.io.gfile


@contextlib.contextmanager
def atomic_path(path):
  """Yields a temporary path beside `path`; it replaces `path` only on success.

  For writers that open the file themselves (`tf.io.TFRecordWriter`); `atomic_open` is the
  usual entry point. A crash or an exception inside the `with` block leaves any earlier `path`
  untouched and removes the temporary file, so readers never see a partial result.
  """
  gfile = _gfile(path)
  directory, name = os.path.split(path)
  # Hidden, and unique per writer; created by the writer, so it gets the usual permissions.
  tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
  if gfile:
    gfile.makedirs(directory)
  elif directory:
    os.makedirs(directory, exist_ok=True)
  try:
    yield tmp
    if gfile:
      gfile.rename(tmp, path, overwrite=True)
    else:
      os.replace(tmp, path)
  except BaseException:
    if _size(tmp) >= 0:
      (gfile.remove if gfile else os.remove)(tmp)
    raise


@contextlib.contextmanager
def atomic_open(path, mode="w", encoding="utf-8"):
  """Opens a temporary file beside `path` that replaces `path` on success (see atomic_path)."""
  with atomic_path(path) as tmp:
    gfile = _gfile(path)
    if gfile:
      with gfile.GFile(tmp, mode) as f:
        yield f
    else:
      with open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


def write_atomically(path, text):
  """Writes a str to `path` atomically (see atomic_open)."""
  with atomic_open(path) as f:
    f.write(text)


def make_temp_dir(parent, prefix):
  """Creates a new hidden directory in `parent` for an output built there, then renamed.

  Unlike `tempfile.mkdtemp` (mode 0700), it gets the umask's permissions, like any directory the
  user creates: an export dir renamed from it is readable by whoever may read `parent`.

  Returns:
    str, the directory's path.
  """
  os.makedirs(parent, exist_ok=True)
  while True:
    path = os.path.join(parent, f"{prefix}{secrets.token_hex(4)}")
    try:
      os.mkdir(path)
      return path
    except FileExistsError:
      continue


@contextlib.contextmanager
def atomic_dir(path):
  """Yields a new directory beside `path` (`make_temp_dir`) that replaces `path` as a whole on
  success; an exception removes it and leaves any earlier `path` untouched."""
  tmp = make_temp_dir(os.path.dirname(path), "." + os.path.basename(path) + ".")
  try:
    yield tmp
    if os.path.exists(path):
      shutil.rmtree(path)
    os.replace(tmp, path)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def check_output_path(path, flag, is_dir=True):
  """Refuses an output path that cannot be written, before a command loads or writes anything.

  Without it the refusal would come from os.makedirs or the lock, after a model loaded or an
  empty --output_dir was made. Nothing is left behind: the probe file is removed.

  Args:
    path: str, the output directory (is_dir) or file; a remote path ("gs://...") is not checked.
    flag: str, the flag that gave it, for the message.
    is_dir: whether `path` is a directory (made if missing) or a file.

  Raises:
    cli.InputError: "--<flag> <path>: <why>": `path` exists as the other kind, or the nearest
      existing directory above it is a file, or is not writable (its mode, a read-only mount,
      a pseudo file system like /proc).
  """
  if "://" in path:
    return
  where = f"--{flag} {path}"
  if os.path.isdir(path) and not is_dir:
    raise cli.InputError(f"{where}: is a directory; give the path of a file")
  if os.path.lexists(path) and is_dir and not os.path.isdir(path):
    raise cli.InputError(f"{where}: exists and is not a directory")
  existing = os.path.abspath(path if is_dir else os.path.dirname(os.path.abspath(path)))
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise cli.InputError(f"{where}: cannot be created: {existing} is not a directory")
  try:
    # A real file, not os.access: modes say nothing of a read-only mount or of /proc.
    fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-probe-")
  except OSError as e:
    raise cli.InputError(f"{where}: cannot write in {existing} ({e.strerror})") from None
  os.close(fd)
  os.remove(probe)


@contextlib.contextmanager
def output_dir(path):
  """Makes the output dir `path` for the `with` block; if this call made it and the block raises
  `cli.InputError`, removes what holds no output: released (empty) lock files, then empty dirs.

  So a run refused for its input leaves no empty --output_dir behind, and a refusal later in a
  run loses nothing it wrote. A run refused because another holds the output (`OutputBusy`)
  removes nothing: the dir is the other run's.
  """
  made = not os.path.isdir(path)
  os.makedirs(path, exist_ok=True)
  try:
    yield path
  except cli.InputError as e:
    if made and not isinstance(e, OutputBusy):
      _remove_empty(path)
    raise


def _remove_empty(path):
  for directory, _, files in os.walk(path, topdown=False):
    for name in files:
      lock = os.path.join(directory, name)
      if name.startswith(".") and name.endswith(".lock") and os.path.getsize(lock) == 0:
        os.remove(lock)
    if not os.listdir(directory):
      os.rmdir(directory)


class OutputBusy(cli.InputError):
  """Another live process holds the lock of an output (scripts: one line, exit 2).

  Attributes:
    holder: str, the holder's "pid P on HOST since TIME" ("holder unknown" if it wrote none).
    lock_file: str, the lock file.
  """

  def __init__(self, message, holder, lock_file):
    super().__init__(message)
    self.holder = holder
    self.lock_file = lock_file


@contextlib.contextmanager
def exclusive_lock(path, wait=True, lock_file=None):
  """Holds an exclusive lock on the output `path` for the `with` block; the project's one lock.

  The lock is flock(2) on `lock_file`, which holds "pid P on HOST since TIME" while it is held
  (for the message a second process gets) and is left empty on release. The kernel drops an
  flock when its process ends, however it ends (kill -9 included), so a crashed holder leaves no
  stale lock: its line stays in the file, and the next holder logs it and takes over. On a network
  file system the lock is as good as that file system's locking (Linux NFS clients turn flock
  into a byte-range lock other hosts see); where locks are refused (ENOLCK, EOPNOTSUPP), and for
  remote paths ("gs://..."), a warning says the output is not locked and the block runs.

  Args:
    path: str, the output the lock guards.
    wait: True: wait for the lock (a short read-merge-write of `path`); False: raise at once when
      another process holds it (a long run that must be the only writer of `path`).
    lock_file: str, default a hidden `.<name>.lock` beside `path`.

  Raises:
    OutputBusy: with wait=False, another process holds the lock; the message names `path`, the
      holder and the lock file.
  """
  if "://" in path:
    logging.warning("%s is not a local path: not locked against a second writer", path)
    yield
    return
  directory, name = os.path.split(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  lock_file = lock_file or os.path.join(directory, f".{name}.lock")
  fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)
  try:
    locked = _flock(fd, wait, path, lock_file)
    if locked:
      previous = _lock_holder(fd)
      if previous:
        logging.warning(
          "%s: the run that held it (%s) ended without releasing it", lock_file, previous
        )
      holder = f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%F %T')}"
      os.ftruncate(fd, 0)
      os.pwrite(fd, holder.encode("utf-8"), 0)
    try:
      yield
    finally:
      if locked:
        os.ftruncate(fd, 0)  # an empty lock file: released cleanly
  finally:
    os.close(fd)  # drops the flock


def _flock(fd, wait, path, lock_file):
  """Takes the flock: True; False (with a warning) where the file system has no locks."""
  import fcntl  # pylint: disable=g-import-not-at-top

  try:
    fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    return True
  except BlockingIOError:
    holder = _lock_holder(fd) or "holder unknown"
    raise OutputBusy(
      f"{path} is in use by another run ({holder}; lock file {lock_file}): wait for it to end "
      "or choose another output",
      holder,
      lock_file,
    ) from None
  except OSError as e:
    logging.warning(
      "cannot lock %s (%s): %s is not protected against a second writer", lock_file, e, path
    )
    return False


def _lock_holder(fd):
  return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()


# ---------------------------------------------------------------------------------------------
# Stage stamps
# ---------------------------------------------------------------------------------------------
# A stage (corpus preparation, TFRecord creation, a step of reproduce.py) is complete when its
# stamp says so: a JSON file written LAST and atomically, holding the stage's key (everything the
# outputs depend on) and the size of each output. A stage that starts removes its stamp, so an
# interrupted run is never mistaken for a complete one; a rerun with the same key finds the stamp
# and skips the work. The stamp may carry the stage's own record (counts, statistics) beside it.


def _size(path):
  """Size of `path` in bytes, -1 if it does not exist."""
  gfile = _gfile(path)
  if gfile:
    return gfile.stat(path).length if gfile.exists(path) else -1
  return os.path.getsize(path) if os.path.exists(path) else -1


def _read_json(path):
  """The JSON object in `path`, or None if it is missing or unreadable."""
  gfile = _gfile(path)
  try:
    if gfile:
      with gfile.GFile(path, "r") as f:
        return json.load(f)
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def read_json_file(path):
  """The JSON value in `path`; a ValueError naming the file (and the line) when it cannot be
  read or is not JSON."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}:{e.lineno}: not JSON ({e.msg})") from None
  except OSError as e:
    raise ValueError(f"{path}: {e.strerror}") from None


def _json_text(obj):
  return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def _as_json(key):
  """`key` as it reads back from a stamp (tuples become lists, ...)."""
  return json.loads(json.dumps(key))


def write_stamp(path, key, outputs=(), record=None):
  """Marks a stage complete; call it after every output is in place.

  Args:
    path: the stamp file, e.g. `<output_dir>/stats.json`.
    key: JSON-able value identifying the stage's inputs and arguments.
    outputs: paths of the stage's outputs; their sizes are recorded and checked by `read_stamp`.
    record: optional dict written with the stamp (the stage's statistics); its own fields must
      not be named "key" or "outputs".

  Returns:
    dict: the stamp as `read_stamp` returns it: `record` plus "key": key and
    "outputs": {path relative to the stamp's directory: bytes}.
  """
  directory = os.path.dirname(path)
  sizes = {os.path.relpath(p, directory): _size(p) for p in outputs}
  text = _json_text(dict(record or {}, key=key, outputs=sizes))
  write_atomically(path, text)
  return json.loads(text)


def read_stamp(path, key, outputs=()):
  """Returns the stamp at `path` if its stage is complete for `key`, else None.

  Complete: the stamp exists, was written with the same `key`, every output it recorded still
  has its recorded size, and every path of `outputs` exists.

  Args:
    path: the stamp file.
    key: the key the stage would be run with now.
    outputs: further paths that must exist (outputs not recorded in the stamp).

  Returns:
    dict (see `write_stamp`) or None.
  """
  stamp = _read_json(path)
  if not isinstance(stamp, dict) or "key" not in stamp or stamp["key"] != _as_json(key):
    return None
  directory = os.path.dirname(path)
  for name, size in stamp.get("outputs", {}).items():
    if _size(os.path.join(directory, name)) != size:
      return None
  if any(_size(p) < 0 for p in outputs):
    return None
  return stamp


def remove_stamp(path):
  """Marks a stage incomplete (it is about to rewrite its outputs)."""
  gfile = _gfile(path)
  if gfile:
    if gfile.exists(path):
      gfile.remove(path)
  elif os.path.exists(path):
    os.remove(path)


# ---------------------------------------------------------------------------------------------
# Seeded hashing
# ---------------------------------------------------------------------------------------------


def unit_hash(seed, key):
  """A deterministic uniform number in [0, 1) for (seed, key).

  Independent of PYTHONHASHSEED, of the platform and of input order: hashing a sentence (not its
  position) puts repeated sentences in the same split.

  Args:
    seed: int.
    key: str, e.g. "book:0001" or a sentence.
  """
  digest = hashlib.sha256(f"{seed}\t{key}".encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") / 2.0**64

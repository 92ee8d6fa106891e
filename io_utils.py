"""Small file helpers shared by the scripts, one owner each.

  data_root / define_data_dir_flag   where the shared data is, and the `--data_dir` flag
  expand_globs                       comma-separated globs -> input files
  atomic_path / atomic_open / ...    results are never half-written, with the umask's permissions
  make_temp_dir / exclusive_lock     an output dir built aside; a read-merge-write of one file
  read_stamp / write_stamp / ...     a stage knows whether its outputs are complete
  unit_hash                          seeded, reproducible held-out choices

Light on purpose (standard library and absl): corpus.py's worker processes import it. TensorFlow
is imported only when needed: for `expand_globs` and for a remote path ("gs://...").
"""

import contextlib
import hashlib
import json
import os
import secrets

from absl import flags

_REPO = os.path.dirname(os.path.abspath(__file__))

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
def exclusive_lock(path):
  """Holds an exclusive lock tied to `path` for the `with` block (a read-merge-write of it).

  The lock is `flock` on a hidden `.<name>.lock` beside `path`; the kernel releases it when the
  process exits, so a crash leaves no stale lock. Local paths only.
  """
  import fcntl  # pylint: disable=g-import-not-at-top

  directory, name = os.path.split(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, f".{name}.lock"), "a", encoding="utf-8") as lock:
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


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

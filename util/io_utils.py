"""Small file helpers shared by the scripts: the data root, globs, atomic writes, output dirs and
their checks, the one lock (`exclusive_lock`), stage stamps and seeded held-out hashes.

Light on purpose (standard library, absl, util/cli.py): corpus.py's worker processes import it;
TensorFlow only for `expand_globs` and remote paths.
"""

import contextlib
import glob
import hashlib
import json
import os
import re
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


_DATA_DIR_HELP = "Data root (default: $TTA_DATA, else ../shared/data beside the repository)."


def data_dir_param():
  """The --data_dir field of a command that reads the shared data (`data_root`)."""
  return cli.param(_DATA_DIR_HELP, None)


def define_data_dir_flag():
  """Defines `--data_dir` in a script that has no params dataclass."""
  flags.DEFINE_string("data_dir", None, _DATA_DIR_HELP)


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
  """Writes a str to `path` atomically (see atomic_open): the one writer of the commands' small
  state files (run.json, a .partial.json state, a done record, a stamp) and results files.

  Raises:
    cli.InputError: the file cannot be written (a full disk, a quota, a read-only file system),
      naming it and why; the temporary file is removed and any earlier `path` is untouched.
  """
  try:
    with atomic_open(path) as f:
      f.write(text)
  except OSError as e:
    raise cli.InputError(f"cannot write {path} ({e.strerror or e})") from None


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


# A model spec's backend prefix (kenlm:PATH, hf:DIR, bert:DIR) or a pairs file's (senteval:DIR).
_SCHEME = re.compile(r"^[a-z][a-z0-9_]*:(?!//)")


def local_paths(value):
  """The local paths a marked field's value names (`cli.param`'s `io`): a path; a list of values;
  a (name, spec) tuple; NAME=SPEC; a backend prefix (kenlm:PATH, hf:DIR, senteval:DIR); comma-
  separated globs (of a value that is not itself a path). '-' (stdin, stdout) and remote paths
  name none."""
  if isinstance(value, tuple) and len(value) == 2:
    return local_paths(value[1])  # a (name, spec) pair (lm_options.named_specs)
  if isinstance(value, (list, tuple)):
    return [path for item in value for path in local_paths(item)]
  if not isinstance(value, str) or value in ("", "-") or "://" in value:
    return []
  if os.path.lexists(value):
    return [value]
  paths = []
  for part in (p.strip() for p in value.split(",")):
    if not os.path.lexists(part):
      part = part.rpartition("=")[2]  # NAME=SPEC, as lm_options.model_specs reads it
    part = _SCHEME.sub("", part) if not os.path.lexists(part) else part
    if not part or part == "-" or "://" in part:
      continue
    matches = glob.glob(part) if glob.has_magic(part) else []
    paths.extend(matches or [part])
  return paths


def check_outputs_apart(params, inputs=(), outputs=()):
  """Refuses an output path that is, contains or lies inside an input path, before any work.

  The paths are those of `params`' fields marked `cli.INPUT` and `cli.OUTPUT` (`cli.param`'s
  `io`), plus `inputs` and `outputs` ([(flag, value)] a command knows otherwise), compared
  resolved (`os.path.realpath`: symlinks followed, `..` and relative paths made absolute). So no
  write, --overwrite included, can replace or remove what the command was asked to read.

  Raises:
    cli.InputError: "--<out flag> <path> is|contains|lies inside --<in flag> <path>: ..."
  """
  ins = [(f, p) for f, v in cli.io_values(params, cli.INPUT) + list(inputs) for p in local_paths(v)]
  # What is not there cannot be lost; a checkpoint prefix (DIR/model.ckpt) is there by its files.
  ins = [(f, p) for f, p in ins if os.path.lexists(p) or glob.glob(glob.escape(p) + ".*")]
  outs = cli.io_values(params, cli.OUTPUT) + list(outputs)
  for out_flag, out in [(f, p) for f, v in outs for p in local_paths(v)]:
    real_out = os.path.realpath(out)
    for in_flag, path in ins:
      real_in = os.path.realpath(path)
      if real_out == real_in:
        relation = "is"
      elif real_in.startswith(real_out.rstrip(os.sep) + os.sep):
        relation = "contains"
      elif real_out.startswith(real_in.rstrip(os.sep) + os.sep):
        relation = "lies inside"
      else:
        continue
      raise cli.InputError(
        f"--{out_flag} {out} {relation} --{in_flag} {path}: a command never writes over, into "
        f"or around what it reads; choose another --{out_flag}"
      )


@contextlib.contextmanager
def output_dir(path):
  """Makes the output dir `path` for the `with` block; if this call made it and the block raises
  (`cli.InputError`, or a library's ValueError that its command turns into one), removes what
  holds no output: released (empty) lock files, then empty dirs.

  So a run refused for its input leaves no empty --output_dir behind, and a refusal later in a
  run loses nothing it wrote. A run refused because another holds the output (`OutputBusy`)
  removes nothing: the dir is the other run's.
  """
  made = not os.path.isdir(path)
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise cli.InputError(f"cannot make {path} ({e.strerror})") from None
  try:
    yield path
  except (cli.InputError, ValueError) as e:
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
  lock_file = lock_file or os.path.join(directory, f".{name}.lock")
  made = _missing_top(os.path.dirname(os.path.abspath(lock_file)))
  fd, created = _open_lock(lock_file, wait, path, made)
  try:
    yield
    os.ftruncate(fd, 0)  # an empty lock file: released cleanly
  except BaseException:
    if created and not wait:
      # A run that ends refused leaves no trace of itself. No other run waits on this file (no
      # waiter with wait=False), and one that opened it meanwhile sees it gone (`_open_lock`).
      _remove_made(lock_file, made)
    else:
      with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    raise
  finally:
    os.close(fd)  # drops the flock


def _missing_top(directory):
  """The topmost missing directory of `directory`'s path (None if it exists): what making it
  creates."""
  top = None
  while not os.path.lexists(directory):
    directory, top = os.path.dirname(directory), directory
  return top


def _remove_made(path, made_dir, directory=None):
  """Removes the file `path` (if given), then the directories up to `made_dir` (made for it)
  left empty, from `path`'s own (or `directory`) up."""
  if path is not None:
    with contextlib.suppress(OSError):
      os.remove(path)
  if made_dir is None:
    return
  directory = directory or os.path.dirname(os.path.abspath(path))
  while len(directory) >= len(made_dir):
    try:
      os.rmdir(directory)
    except OSError:
      return
    directory = os.path.dirname(directory)


def _open_lock(lock_file, wait, path, made_dir):
  """Opens and flocks `lock_file` and writes this process's holder line into it.

  Returns:
    (fd, created): created when this call made the file (it removes it again on a failure).

  Raises:
    OutputBusy: see `exclusive_lock`.
    cli.InputError: the lock file cannot be made or written (a full disk, a read-only file
      system), naming it; nothing this call made is left.
  """
  directory = os.path.dirname(lock_file)
  while True:
    created = False
    try:
      # In the loop: a refused run that made the dir may remove it between two attempts.
      if directory:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
      raise cli.InputError(
        f"cannot make {directory} for the lock of {path} ({e.strerror})"
      ) from None
    try:
      try:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        created = True
      except FileExistsError:
        fd = os.open(lock_file, os.O_RDWR)
    except FileNotFoundError:
      continue  # removed between the two opens: make it anew
    except OSError as e:
      _remove_made(None, made_dir, os.path.dirname(os.path.abspath(lock_file)))
      raise cli.InputError(f"cannot make the lock file {lock_file} ({e.strerror})") from None
    try:
      locked = _flock(fd, wait, path, lock_file)
      if locked and not _same_file(fd, lock_file):
        os.close(fd)  # its holder removed it after a refusal: lock the file now there
        continue
      if locked:
        previous = _lock_holder(fd)
        if previous:
          logging.warning(
            "%s: the run that held it (%s) ended without releasing it", lock_file, previous
          )
        holder = f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%F %T')}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode("utf-8"), 0)
      return fd, created
    except BaseException as e:
      os.close(fd)
      if created:
        _remove_made(lock_file, made_dir)
      if isinstance(e, OSError):
        raise cli.InputError(
          f"cannot write the lock file {lock_file} ({e.strerror or e})"
        ) from None
      raise


def _same_file(fd, path):
  try:
    return os.path.samestat(os.fstat(fd), os.stat(path))
  except FileNotFoundError:
    return False


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
  except UnicodeDecodeError as e:
    raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
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

"""Small file helpers of the commands: the data root, globs, atomic writes, output checks, the one
lock, stage stamps, seeded hashes. Light on purpose: corpus.py's worker processes import it, so
standard library, absl and util/cli.py only (TensorFlow for globs and remote paths)."""

import contextlib
import errno
import glob
import hashlib
import json
import lzma
import os
import re
import secrets
import shutil
import socket
import tarfile
import tempfile
import time
import zlib

from absl import flags
from absl import logging

from util import cli

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The flags `define_data_dir_flag` defines belong to the script that calls it, so that its
# --help lists them (absl attributes a flag to the module that runs DEFINE_*).
flags.disclaim_key_flags()

# --- The data root ---


_DATA_DIR_HELP = "Data root (default: $TTA_DATA, else ../shared/data beside the repository)."


def data_dir_param():
  """The --data_dir field of a command that reads the shared data (`data_root`)."""
  return cli.param(_DATA_DIR_HELP, None)


def define_data_dir_flag():
  """Defines `--data_dir` in a script that has no params dataclass."""
  flags.DEFINE_string("data_dir", None, _DATA_DIR_HELP)


def data_root(data_dir=None):
  """The shared data root: `data_dir`, else $TTA_DATA, else ../shared/data beside the repository;
  FileNotFoundError, naming where it came from, if it does not exist."""
  if data_dir:
    origin = "the data_dir argument"
  elif os.environ.get("TTA_DATA"):
    data_dir, origin = os.environ["TTA_DATA"], "$TTA_DATA"
  else:
    data_dir = os.path.normpath(os.path.join(_REPO, "..", "shared", "data"))
    origin = "the default (../shared/data next to the repository)"
  if is_remote(data_dir):
    raise FileNotFoundError(
      f"data directory {data_dir} (from {origin}) is not a local path: the shared data root is "
      "read as local files; copy it to a local disk"
    )
  if not os.path.isdir(data_dir):
    raise FileNotFoundError(
      f"data directory {data_dir} (from {origin}) does not exist; pass --data_dir or set TTA_DATA"
    )
  return data_dir


# --- Input files ---


# What reading an input raises besides OSError when the file is damaged or cut short: the
# decompressors' own errors (gzip's zlib.error, xz's LZMAError, EOFError at a stream's early end)
# and tarfile's.
_UNREADABLE = (OSError, EOFError, zlib.error, lzma.LZMAError, tarfile.TarError)


@contextlib.contextmanager
def reading(path):
  """Turns an error reading input file `path` in the block (missing, unreadable, damaged or
  truncated: a .gz, .bz2, .xz or tar archive) into ValueError "<path>: cannot read (<why>)". Keep
  the block to the reading: an OSError from a write would be misnamed."""
  try:
    yield
  except _UNREADABLE as e:
    raise ValueError(f"{path}: cannot read ({e})") from None


def expand_globs(patterns):
  """Paths of comma-separated globs (or a list), each pattern's matches sorted, repeats dropped,
  local ones absolute (a record of them must not depend on the working directory); ValueError
  naming a pattern that matches no file, or if there is no pattern."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  split = patterns.split(",") if isinstance(patterns, str) else patterns
  paths = []
  for pattern in (p.strip() for p in split):
    if not pattern:
      continue
    check_scheme(pattern)
    matches = sorted((_gfile(pattern) or tf.io.gfile).glob(pattern))
    if not matches:
      raise ValueError(f"file pattern {pattern!r} matches no file")
    matches = [m if "://" in m else os.path.abspath(m) for m in matches]
    paths.extend(m for m in matches if m not in paths)
  if not paths:
    raise ValueError(f"no input files in {patterns!r}")
  return paths


def reads_twice(path):
  """Whether the input `path` can be read a second time: a regular file. '-' (stdin), a pipe
  (`<(cat f)`), a FIFO or a device reads once; a command that reads an input twice (to count,
  then to use) asks here first, or the second read finds nothing and the run succeeds empty."""
  if is_remote(path):
    return True  # an object in a bucket
  return path != "-" and os.path.isfile(path)  # follows links: <(cmd) is a pipe, not a file


def missing(path):
  """Why the local `path`, which does not exist, names nothing to read (the words after
  "<path>: "): a link to nothing says so, where "no such file" would deny the link the user sees."""
  if os.path.islink(path):
    return "a symbolic link to nothing (its target is missing, or the links loop)"
  return "no such file"


def check_input_file(path, read_twice=False):
  """Refuses (ValueError "<path>: <why>; give a file") a local input that names no file to read:
  missing, a directory or, for a command that reads it twice (`read_twice`, as `reads_twice`
  asks), a pipe, FIFO or device, which the second read would find empty. Also a `cli.param`
  check, for a flag refused while parsing. '-' (stdin) and remote paths pass: their reader
  names them."""
  if path == "-" or is_remote(path):
    return
  if os.path.isdir(path):
    raise ValueError(f"{path}: is a directory; give a file")
  if not os.path.exists(path):
    raise ValueError(f"{path}: {missing(path)}")
  if read_twice and not reads_twice(path):
    raise ValueError(
      f"{path}: not a regular file (a pipe, FIFO or device) and this command reads its input "
      "twice; give a file"
    )


# --- Paths: local, or remote through tf.io.gfile ---
# A remote path ("gs://bucket/dir", TensorFlow's "ram://" in tests) is read and written through
# tf.io.gfile, a local one through os (no TensorFlow import: the data job's workers import this
# module). The helpers below are the commands' one door to both; a scheme TensorFlow cannot open
# is refused by `check_schemes` before any work, never made into a local folder named "gs:".


def is_remote(path):
  """True for a URL-like path ("gs://...", "ram://..."), which only tf.io.gfile can open."""
  return isinstance(path, str) and "://" in path


def _gfile(path):
  """`tf.io.gfile` for a remote path, its errors as OSError (`_RemoteFiles`), else None
  (TensorFlow is not imported)."""
  if not is_remote(path):
    return None
  return _RemoteFiles(path)


class _RemoteFiles:
  """`tf.io.gfile`'s functions, raising OSError (`os_error`) where they raise TensorFlow's
  OpError (a bucket unreachable or refused: no network, no credentials), so that a command's
  `cli.user_input` makes it one line as it does a local file's error."""

  def __init__(self, path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    self._path, self._gfile, self._op_error = path, tf.io.gfile, tf.errors.OpError

  def __getattr__(self, name):
    function = getattr(self._gfile, name)

    def call(*args, **kwargs):
      try:
        return function(*args, **kwargs)
      except self._op_error as e:
        raise os_error(e, self._path) from None

    return call


def os_error(error, path):
  """The OSError (FileNotFoundError, PermissionError) of TensorFlow's OpError `error` on `path`:
  "<path>: <the error's first line>"."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  kind = {
    tf.errors.NotFoundError: FileNotFoundError,
    tf.errors.PermissionDeniedError: PermissionError,
    tf.errors.UnauthenticatedError: PermissionError,
  }.get(type(error), OSError)
  why = (error.message or type(error).__name__).strip().splitlines()[0]
  return kind(f"{path}: {why}")


def check_scheme(path, flag=None):
  """Refuses (cli.InputError "[--<flag> ]<path>: ...") a remote path whose scheme TensorFlow has no
  file system for (s3:// without its plugin, a typo), or that cannot be reached (a bucket without
  network or credentials): one line, before the command does any work."""
  if not is_remote(path):
    return
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  scheme = path.split("://", 1)[0]
  known = [s for s in tf.io.gfile.get_registered_schemes() if s and s != "file"]
  where = f"--{flag} {path}" if flag else path
  if scheme not in known:
    raise cli.InputError(
      f"{where}: TensorFlow has no file system for {scheme}:// (it has "
      f"{', '.join(s + '://' for s in sorted(known))}; s3:// and hdfs:// need "
      "tensorflow-io); give a local path or one of those"
    )
  try:
    exists(path)  # one request: a bucket out of reach says so here, not mid-run
  except OSError as e:
    why = str(e).removeprefix(f"{path}: ")
    raise cli.InputError(
      f"{where}: cannot reach it ({why}); check the network and the credentials"
    ) from None


def check_schemes(params, pairs=()):
  """`check_scheme` on every path of `params`' `cli.INPUT`/`cli.OUTPUT` fields and of `pairs`
  ([(flag, value)]): comma-separated lists, NAME=SPEC and backend prefixes (kenlm:PATH) included."""
  for flag, path in _flag_paths(params, pairs):
    check_scheme(path, flag)


def refuse_remote(params, why, pairs=()):
  """Refuses (cli.InputError "--<flag> <path>: <why>; ...") the first remote path of `params`'
  `cli.INPUT`/`cli.OUTPUT` fields and of `pairs` ([(flag, value)]): the one line, before any
  work, of a command whose tools read or write local files only (KenLM's programs)."""
  for flag, path in _flag_paths(params, pairs):
    if is_remote(path):
      raise cli.InputError(
        f"--{flag} {path}: {why}; copy it to or from a local path (gcloud storage cp)"
      )


def _flag_paths(params, pairs):
  """[(flag, path)] of `check_schemes`' fields and `pairs`, each list, NAME=SPEC and prefix
  (kenlm:PATH) read to its paths."""
  found = []
  values = cli.io_values(params, cli.INPUT) + cli.io_values(params, cli.OUTPUT) + list(pairs)
  for flag, value in values:
    for item in value if isinstance(value, (list, tuple)) else [value]:
      item = item[1] if isinstance(item, tuple) else item
      if not isinstance(item, str):
        continue
      for part in item.split(","):
        found.append((flag, _SCHEME.sub("", part.strip().rpartition("=")[2])))
  return found


def open_file(path, mode="r", encoding="utf-8"):
  """`open` of a local path, `tf.io.gfile.GFile` of a remote one; FileNotFoundError for a remote
  file that is not there (as `open` gives; GFile would raise its own error at the first read)."""
  gfile = _gfile(path)
  if gfile is None:
    return open(path, mode, encoding=None if "b" in mode else encoding)
  if "r" in mode and not gfile.exists(path):
    raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
  return gfile.GFile(path, mode)


def exists(path):
  gfile = _gfile(path)
  return gfile.exists(path) if gfile else os.path.exists(path)


def lexists(path):
  """`os.path.lexists` of a local path (a broken link is there), `exists` of a remote one."""
  return exists(path) if is_remote(path) else os.path.lexists(path)


def isdir(path):
  gfile = _gfile(path)
  return gfile.isdir(path) if gfile else os.path.isdir(path)


def makedirs(path):
  """Makes `path` and its parents (nothing if it is there)."""
  gfile = _gfile(path)
  if gfile:
    gfile.makedirs(path)
  else:
    os.makedirs(path, exist_ok=True)


def listdir(path):
  """The names in the directory `path`, sorted (gfile marks a remote subdirectory "name/")."""
  gfile = _gfile(path)
  return sorted(n.rstrip("/") for n in gfile.listdir(path)) if gfile else sorted(os.listdir(path))


def remove(path):
  gfile = _gfile(path)
  (gfile.remove if gfile else os.remove)(path)


def rmdir(path):
  """Removes the empty directory `path`; OSError if it is not one (a remote one holds files)."""
  gfile = _gfile(path)
  if gfile is None:
    os.rmdir(path)
  elif not gfile.isdir(path) or gfile.listdir(path):
    raise OSError(errno.ENOTEMPTY, "not an empty directory", path)
  else:
    gfile.rmtree(path)


def rmtree(path, ignore_errors=False):
  gfile = _gfile(path)
  if gfile is None:
    shutil.rmtree(path, ignore_errors=ignore_errors)
    return
  try:
    gfile.rmtree(path)
  except Exception:  # pylint: disable=broad-except
    if not ignore_errors:
      raise


def walk(path):
  """`os.walk` of a local or remote directory (top down)."""
  gfile = _gfile(path)
  return gfile.walk(path) if gfile else os.walk(path)


def absolute(path):
  """`os.path.abspath` of a local path; a remote one as it is."""
  return path if is_remote(path) else os.path.abspath(path)


def local_stage(path):
  """The local file a remote output `path` is written into (appends, fsyncs, truncation: what
  object stores lack) before `copy_file` publishes it whole; the same on every run of this
  machine, so an interrupted run resumes there. A local `path` is its own stage."""
  if not is_remote(path):
    return path
  digest = hashlib.sha256(path.encode("utf-8")).hexdigest()[:16]
  stage = os.path.join(tempfile.gettempdir(), "tta-stage", digest)
  os.makedirs(stage, exist_ok=True)
  return os.path.join(stage, os.path.basename(path))


def copy_file(source, dest):
  """Copies the file `source` to `dest` (either may be remote), atomically (`atomic_path`)."""
  with atomic_path(dest) as tmp:
    if not is_remote(source) and not is_remote(dest):
      shutil.copyfile(source, tmp)
    else:
      _gfile(source if is_remote(source) else dest).copy(source, tmp, overwrite=True)


def file_size(path):
  """Size of `path` in bytes, -1 if it does not exist."""
  return (stat(path) or [-1])[0]


def stat(path):
  """[size in bytes, mtime in ns] of `path`, None if it does not exist."""
  gfile = _gfile(path)
  if gfile:
    if not gfile.exists(path):
      return None
    info = gfile.stat(path)
    return [info.length, info.mtime_nsec]
  try:
    info = os.stat(path)
  except OSError:
    return None
  return [info.st_size, info.st_mtime_ns]


# --- Atomic writes ---


# The name atomic_path gives its temporary file beside NAME: hidden, the writer's pid, 8 hex digits.
_TEMP_FILE = re.compile(r"\..+\.tmp-(\d+)-[0-9a-f]{8}")


@contextlib.contextmanager
def atomic_path(path):
  """Yields a temporary path beside `path` that replaces `path` only on success (for writers that
  open the file themselves); an exception removes it and leaves any earlier `path` untouched."""
  gfile = _gfile(path)
  directory, name = os.path.split(path)
  # Hidden, and unique per writer; created by the writer, so it gets the usual permissions.
  tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")  # _TEMP_FILE
  if directory:
    makedirs(directory)
  try:
    yield tmp
    if gfile:
      gfile.rename(tmp, path, overwrite=True)
    else:
      os.replace(tmp, path)
  except BaseException:
    if file_size(tmp) >= 0:
      remove(tmp)
    raise


@contextlib.contextmanager
def atomic_open(path, mode="w", encoding="utf-8"):
  """Opens a temporary file beside `path` that replaces `path` on success (see atomic_path)."""
  with atomic_path(path) as tmp, open_file(tmp, mode, encoding) as f:
    yield f
    if not is_remote(path):
      f.flush()
      os.fsync(f.fileno())


def write_atomically(path, text):
  """Writes `text` to `path` atomically: the one writer of the commands' state and results files.
  cli.InputError naming the file and why if it cannot be written (a full disk, a read-only fs)."""
  try:
    with atomic_open(path) as f:
      f.write(text)
  except OSError as e:
    raise cli.InputError(f"cannot write {path} ({e.strerror or e})") from None


def make_temp_dir(parent, prefix):
  """A new hidden directory in `parent` with the umask's permissions (mkdtemp gives 0700): an
  export dir renamed from it is readable by whoever may read `parent`."""
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
  success; an exception removes it and leaves any earlier `path` untouched. A remote `path`: the
  directory yielded is local, and its files are copied in on success (object stores rename no
  directories: a reader may see the old files go before the new ones are all there)."""
  if is_remote(path):
    with tempfile.TemporaryDirectory(prefix="tta-dir-") as tmp:
      yield tmp
      if exists(path):
        rmtree(path)
      for directory, _, names in os.walk(tmp):
        for name in names:
          local = os.path.join(directory, name)
          copy_file(local, path + "/" + os.path.relpath(local, tmp).replace(os.sep, "/"))
    return
  tmp = make_temp_dir(os.path.dirname(path), "." + os.path.basename(path) + ".")
  try:
    yield tmp
    if os.path.exists(path):
      shutil.rmtree(path)
    os.replace(tmp, path)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def find_files(root, outputs):
  """The existing files under `root` (local or remote) that `outputs` name, as relative paths
  ("/"-separated) in order: a name, a glob (each `*` within one folder), or a folder (every file
  under it)."""
  gfile = _gfile(root)
  found = []
  for output in outputs:
    path = os.path.join(root, *output.split("/"))
    if glob.has_magic(output):
      matches = sorted(gfile.glob(path) if gfile else glob.glob(path))
    else:
      matches = [path]
    for match in matches:
      if not (gfile.exists(match) if gfile else os.path.lexists(match)):
        continue
      if _is_real_dir(match):
        files = [os.path.join(d, n) for d, _, names in walk(match) for n in sorted(names)]
      else:
        files = [match]
      found += [_relative(f, root) for f in sorted(files)]
  return list(dict.fromkeys(found))


def _is_real_dir(path):
  """A directory, not a symlink to one (whose files are not ours to list or remove)."""
  return isdir(path) and not (not is_remote(path) and os.path.islink(path))


def _relative(path, root):
  if is_remote(root):
    return path[len(root) :].lstrip("/")
  return os.path.relpath(path, root).replace(os.sep, "/")


def remove_files(root, names):
  """Removes the files `names` (relative to `root`, local or remote), then each folder under
  `root` that this leaves empty (a folder named: with its empty folders): the one way a command
  removes what it made. A folder is never removed whole: a file the user put in it keeps it."""
  root = absolute(root).rstrip("/")
  folders = set()
  for name in names:
    path = os.path.join(root, *name.split("/"))
    if _is_real_dir(path):
      folders.update(directory.rstrip("/") for directory, _, _ in walk(path))
    elif is_remote(path):
      if exists(path):
        remove(path)
    else:
      with contextlib.suppress(FileNotFoundError):
        os.remove(path)
    folder = os.path.dirname(path)
    while len(folder) > len(root):
      folders.add(folder)
      folder = os.path.dirname(folder)
  for folder in sorted(folders, key=len, reverse=True):
    with contextlib.suppress(OSError):
      rmdir(folder)


def check_output_path(path, flag, is_dir=True, overwrite=None):
  """Refuses (cli.InputError "--<flag> <path>: <why>") an output path that cannot be written,
  before a command loads or makes anything; leaves nothing behind. A remote path is checked for
  its scheme only (`check_scheme`). overwrite=False (a file output of a command with --overwrite):
  an existing file is refused too, as a command never writes over a file it was not asked to."""
  if not path:
    # `--output_file=` is no path: its partial and lock would be `.partial` in the working dir,
    # and the final rename fails once the work is done.
    raise cli.InputError(f"--{flag} is empty: give a path")
  if is_remote(path):
    check_scheme(path, flag)
    return
  where = f"--{flag} {path}"
  head = path.split(os.sep, 1)[0]
  if head.startswith("~") and not os.path.lexists(head):
    # A shell expands ~ only at the start of a word: `--output_file=~/x` reached us as is, and
    # would make a folder named ~ in the working directory.
    raise cli.InputError(
      f"{where}: the shell did not expand {head} (it does not after --{flag}=): write "
      f"--{flag}=$HOME{path[1:] if head == '~' else '/...'} or --{flag} {path}"
    )
  if os.path.isdir(path) and not is_dir:
    raise cli.InputError(f"{where}: is a directory; give the path of a file")
  if overwrite is False and not is_dir and os.path.lexists(path):
    raise cli.InputError(f"{where}: exists; add --overwrite to replace it")
  if os.path.lexists(path) and is_dir and not os.path.isdir(path):
    raise cli.InputError(f"{where}: exists and is not a directory")
  existing = os.path.abspath(path if is_dir else os.path.dirname(os.path.abspath(path)))
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise cli.InputError(f"{where}: cannot be created: {existing} is not a directory")
  _check_name_lengths(path, existing, where, is_dir)
  try:
    # A real file, not os.access: modes say nothing of a read-only mount or of /proc.
    fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-probe-")
  except OSError as e:
    raise cli.InputError(f"{where}: cannot write in {existing} ({e.strerror})") from None
  os.close(fd)
  os.remove(probe)


# The bytes an output's hidden siblings add to its name: a file's longest, a partial's state written
# atomically, is `.NAME.partial.json.tmp-PID-HEX8` (`resumable.Partial`, `write_atomically`); a
# folder's, a whole folder written aside (`atomic_dir`), `.NAME.HEX8`.
SIBLING_NAME_ROOM = {
  False: len(".") + len(".partial.json") + len(".tmp-") + 7 + len("-") + 8,
  True: len(".") + len(".") + 8,
}


def _check_name_lengths(path, existing, where, is_dir):
  """Refuses (cli.InputError) a name of `path` that the file system under `existing` cannot hold,
  or the output's own name when its hidden siblings would not fit: found before any work, where a
  score.py refused only once its model had loaded and an export was a traceback once traced."""
  limit = os.pathconf(existing, "PC_NAME_MAX")
  new_parts = os.path.relpath(os.path.abspath(path), existing).split(os.sep)
  for part in [p for p in new_parts if p not in (".", "")]:
    if len(part.encode()) > limit:
      raise cli.InputError(
        f"{where}: a name of {len(part.encode())} bytes; {existing} takes {limit}"
      )
  name, room = os.path.basename(os.path.abspath(path)), SIBLING_NAME_ROOM[is_dir]
  if len(name.encode()) + room > limit:
    raise cli.InputError(
      f"{where}: its name is {len(name.encode())} bytes, and the hidden files written beside it "
      f"while it is made add {room}: keep it to {limit - room} bytes"
    )


# A model spec's backend prefix (kenlm:PATH, hf:DIR, bert:DIR) or a pairs file's (senteval:DIR).
_SCHEME = re.compile(r"^[a-z][a-z0-9_]*:(?!//)")


def local_paths(value):
  """The local paths a marked field's value names (`cli.param`'s `io`): a path, a list, a (name,
  spec) pair, NAME=SPEC, a backend prefix (kenlm:PATH), comma-separated globs. '-' and remote
  paths name none."""
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
  """Refuses (cli.InputError) an output path that is, contains or lies inside an input path:
  those of `params`' `cli.INPUT`/`cli.OUTPUT` fields and `inputs`/`outputs` ([(flag, value)]),
  compared by realpath; first `check_schemes` on them all."""
  check_schemes(params, list(inputs) + list(outputs))
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
  """Makes the output dir `path` for the block; if this call made it and the block raises
  cli.InputError or ValueError (not `OutputBusy`: the dir is the other run's), removes the empty
  dirs left (a released lock leaves no file): a refused run leaves no empty --output_dir."""
  made = not isdir(path)
  try:
    makedirs(path)
  except OSError as e:
    raise cli.InputError(f"cannot make {path} ({e.strerror})") from None
  try:
    yield path
  except (cli.InputError, ValueError) as e:
    if made and not isinstance(e, OutputBusy):
      _remove_empty(path)
    raise


def _remove_empty(path):
  gfile = _gfile(path)
  for directory, _, _ in (gfile or os).walk(path, topdown=False):
    if not listdir(directory):
      (gfile.rmtree if gfile else os.rmdir)(directory)


class OutputBusy(cli.InputError):
  """Another live process holds the lock of an output: `holder` ("pid P on HOST since TIME", or
  "holder unknown") and `lock_file`."""

  def __init__(self, message, holder, lock_file):
    super().__init__(message)
    self.holder = holder
    self.lock_file = lock_file


@contextlib.contextmanager
def exclusive_lock(path, wait=True, lock_file=None):
  """Holds an exclusive lock on the output `path` for the block; the project's one lock.

  flock(2) on `lock_file` (default `.<name>.lock` beside `path`), which holds "pid P on HOST since
  TIME" while held and is removed when the block ends, however it ends: only a run that is still
  going has one. The kernel drops a flock when its process ends (kill -9 included): a crashed
  holder leaves its file, with its line, but no stale lock. Where locks are refused (ENOLCK,
  EOPNOTSUPP; remote paths), a warning says the output is not locked and the block runs.

  wait: True waits for the lock (a short read-merge-write of `path`); False raises `OutputBusy`
  at once if another process holds it (a long run that must be the only writer of `path`).
  """
  if is_remote(path):
    logging.warning("%s is not a local path: not locked against a second writer", path)
    yield
    return
  directory, name = os.path.split(path)
  lock_file = lock_file or os.path.join(directory, f".{name}.lock")
  made = _missing_top(os.path.dirname(os.path.abspath(lock_file)))
  fd, locked, created = _open_lock(lock_file, wait, path, made)
  try:
    yield
  finally:
    # Removed BEFORE the flock is dropped (close): a lock file is only ever unlinked by the holder
    # of its flock. A process that opened it meanwhile and waits on its flock gets it once we
    # close, sees that the path no longer names its file (`_same_file` in `_open_lock`) and
    # starts again on the path; so every run that holds a lock holds the one file the path names
    # then, and two runs never hold locks on two different files of one path. (Unlinking after
    # the close would let a waiter lock the old file while a third run makes a new one.)
    if locked or created:
      _remove_made(lock_file, made)
    os.close(fd)


def _missing_top(directory):
  """The topmost missing directory of `directory`'s path (what making it creates), or None."""
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
  """(fd, locked, created) of `lock_file`, flocked (locked: False where the file system has no
  locks), holding this process's holder line; created: this call made the file. OutputBusy, or
  cli.InputError when it cannot be made or written."""
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
          _remove_temp_files_of(previous, directory)
        holder = f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%F %T')}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode("utf-8"), 0)
      return fd, locked, created
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


def _remove_temp_files_of(holder, directory):
  """Removes the temporary files (atomic_path) that the lock's crashed holder left in `directory`
  (a kill -9 during a write leaves one beside the finished output of the re-run). Only on its
  own host: there the flock this process now holds means that pid is gone."""
  found = re.match(r"pid (\d+) on (\S+) since", holder)
  if not found or found.group(2) != socket.gethostname():
    return
  for name in os.listdir(directory or "."):
    temp = _TEMP_FILE.fullmatch(name)
    if temp and temp.group(1) == found.group(1):
      with contextlib.suppress(OSError):
        os.remove(os.path.join(directory, name))


# --- Stage stamps ---
# A stage (corpus preparation, TFRecord creation, a step of reproduce.py) is complete when its
# stamp, written LAST, holds its key (everything the outputs depend on) and its outputs' sizes. A
# stage that starts removes its stamp, so an interrupted run never passes for a complete one.


def _read_json(path):
  """The JSON object in `path`, or None if it is missing or unreadable."""
  try:
    with open_file(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def read_json_file(path):
  """The JSON value in `path`; a ValueError naming the file (and the line) when it cannot be
  read or is not JSON."""
  try:
    with open_file(path) as f:
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
  """Marks a stage complete; call it after every output is in place. `key`: JSON-able identity of
  the stage's inputs and arguments; the sizes of `outputs` are recorded for `read_stamp`; `record`
  (the stage's statistics) is written with them. Returns the stamp as `read_stamp` does."""
  directory = os.path.dirname(path)
  sizes = {os.path.relpath(p, directory): file_size(p) for p in outputs}
  text = _json_text(dict(record or {}, key=key, outputs=sizes))
  write_atomically(path, text)
  return json.loads(text)


def read_stamp(path, key, outputs=()):
  """The stamp at `path` if its stage is complete for `key` (the same key, every recorded output
  at its recorded size, every path of `outputs` present), else None."""
  stamp = _read_json(path)
  if not isinstance(stamp, dict) or "key" not in stamp or stamp["key"] != _as_json(key):
    return None
  directory = os.path.dirname(path)
  for name, size in stamp.get("outputs", {}).items():
    if file_size(os.path.join(directory, name)) != size:
      return None
  if any(file_size(p) < 0 for p in outputs):
    return None
  return stamp


def remove_stamp(path):
  """Marks a stage incomplete (it is about to rewrite its outputs)."""
  if exists(path):
    remove(path)


# --- Seeded hashing ---


def unit_hash(seed, key):
  """A uniform number in [0, 1) for (seed, key), independent of PYTHONHASHSEED and the platform."""
  digest = hashlib.sha256(f"{seed}\t{key}".encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") / 2.0**64

"""What machine and which commit produced a figure: the one owner of the facts run_benchmark.py and
reproduce.py write beside their numbers. TensorFlow and Keras are imported only in the functions
that need them, so that reproduce.py can describe the machine without starting TF."""

import datetime
import os
import platform
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_model():
  """The CPU's model name from /proc/cpuinfo (platform's guess else)."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine() or "unknown"


def usable_cores():
  """Cores this process may run on (affinity), not the machine's total."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def load_average():
  """The 1-minute load average, or None where the OS has none."""
  try:
    return round(os.getloadavg()[0], 2)
  except OSError:
    return None


def pin_threads(intra_op, inter_op):
  """Sets TF's intra-op and inter-op thread pools (0: one per usable core) before TF's first op;
  returns the (intra_op, inter_op) set."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  cores = usable_cores()
  intra_op = intra_op or cores
  inter_op = inter_op or cores
  tf.config.threading.set_intra_op_parallelism_threads(intra_op)
  tf.config.threading.set_inter_op_parallelism_threads(inter_op)
  return (
    tf.config.threading.get_intra_op_parallelism_threads(),
    tf.config.threading.get_inter_op_parallelism_threads(),
  )


def environment(threads):
  """The machine, TF's setup and the versions, a JSON-ready dict; `threads` from `pin_threads`."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  return {
    "cpu": cpu_model(),
    "cores_usable": usable_cores(),
    "cores_total": os.cpu_count(),
    "intra_op_threads": threads[0],
    "inter_op_threads": threads[1],
    "devices": [d.name for d in tf.config.list_logical_devices()],
    "tensorflow": tf.__version__,
    "keras": keras.__version__,
    "python": platform.python_version(),
    "platform": platform.platform(),
    "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
  }


def cpu_and_cores():
  """One line for a report: "<cpu model>, <N> cores" (the machine's total)."""
  return f"{cpu_model()}, {os.cpu_count() or 0} cores"


def git_commit():
  """The short HEAD commit, "+uncommitted" if code differs, else "unknown". Only Python files and
  scripts/ count: a result written into the tree must not mark its own commit dirty."""
  try:
    head = subprocess.run(
      ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    dirty = subprocess.run(
      ["git", "status", "--porcelain", "--", "*.py", "scripts"],
      cwd=REPO,
      capture_output=True,
      text=True,
      check=True,
    ).stdout
    return head.strip() + ("+uncommitted" if dirty.strip() else "")
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


def cpu_has_native_bfloat16():
  """Whether this x86 CPU has bf16 matmul instructions (AMX or AVX512_BF16), without which mixed
  precision trains slower than float32; None without /proc/cpuinfo."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      flags_line = next((l for l in f if l.startswith("flags")), "")
  except OSError:
    return None
  words = set(flags_line.split())
  return bool(words & {"amx_bf16", "avx512_bf16"})

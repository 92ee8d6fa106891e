"""Tests for util/io_utils.py: the data root, atomic writes, stage stamps, seeded hashing."""

import os
import socket

from conftest import HANG_SECONDS
import pytest

from util import cli
from util import io_utils


def test_data_root(tmp_path, monkeypatch):
  monkeypatch.setenv("TTA_DATA", str(tmp_path))
  assert io_utils.data_root() == str(tmp_path)
  assert io_utils.data_root(str(tmp_path / "..")) == str(tmp_path / "..")
  monkeypatch.setenv("TTA_DATA", str(tmp_path / "absent"))
  with pytest.raises(FileNotFoundError, match=r"\$TTA_DATA"):
    io_utils.data_root()


def test_atomic_open_keeps_the_old_file_on_failure(tmp_path):
  path = str(tmp_path / "sub" / "result.txt")
  io_utils.write_atomically(path, "old\n")
  with pytest.raises(RuntimeError):
    with io_utils.atomic_open(path) as f:
      f.write("half")
      raise RuntimeError("crash")
  assert open(path, encoding="utf-8").read() == "old\n"
  assert os.listdir(tmp_path / "sub") == ["result.txt"]


def test_stage_is_done_only_for_the_same_key_and_existing_outputs(tmp_path):
  stamp = str(tmp_path / "stamps" / "sts.json")
  out = tmp_path / "result.json"
  key = {"checkpoints": {"tta": "ckpt-10"}, "max_pairs": None}
  assert io_utils.read_stamp(stamp, key, [str(out)]) is None
  io_utils.write_stamp(stamp, key)
  assert io_utils.read_stamp(stamp, key, [str(out)]) is None
  out.write_text("{}")
  assert io_utils.read_stamp(stamp, key, [str(out)]) is not None
  newer = dict(key, checkpoints={"tta": "ckpt-20"})
  assert io_utils.read_stamp(stamp, newer, [str(out)]) is None


def test_stamp_records_outputs_and_the_stage_record(tmp_path):
  out = tmp_path / "train.txt"
  out.write_text("one\ntwo\n")
  stamp = str(tmp_path / "stats.json")
  key = {"seed": 1, "inputs": ("a", "b")}  # a tuple reads back as a list
  written = io_utils.write_stamp(stamp, key, outputs=[str(out)], record={"sentences": 2})
  assert written == {
    "sentences": 2,
    "key": {"seed": 1, "inputs": ["a", "b"]},
    "outputs": {"train.txt": 8},
  }
  assert io_utils.read_stamp(stamp, key) == written
  out.write_text("one\n")  # an output changed after the stamp: incomplete
  assert io_utils.read_stamp(stamp, key) is None
  io_utils.remove_stamp(stamp)
  assert not os.path.exists(stamp)
  io_utils.remove_stamp(stamp)  # removing a missing stamp is fine


def test_unit_hash_is_seeded_and_uniform():
  values = [io_utils.unit_hash(7, f"sentence {i}") for i in range(2000)]
  assert values == [io_utils.unit_hash(7, f"sentence {i}") for i in range(2000)]
  assert values != [io_utils.unit_hash(8, f"sentence {i}") for i in range(2000)]
  assert all(0 <= v < 1 for v in values)
  assert abs(sum(v < 0.25 for v in values) / len(values) - 0.25) < 0.05


@pytest.fixture
def umask_027():
  """A umask other than the usual 022, so that the permissions must come from it."""
  old = os.umask(0o027)
  yield 0o027
  os.umask(old)


def test_results_and_export_dirs_get_the_umask_permissions(tmp_path, umask_027):
  path = tmp_path / "results" / "rescoring_results.json"
  io_utils.write_atomically(str(path), "{}\n")
  assert path.stat().st_mode & 0o777 == 0o666 & ~umask_027
  tmp = io_utils.make_temp_dir(str(tmp_path / "exports"), ".tta.")
  assert os.path.basename(tmp).startswith(".tta.")
  assert os.stat(tmp).st_mode & 0o777 == 0o777 & ~umask_027


def test_an_export_dir_gets_the_umask_permissions(tmp_path, umask_027):
  from conftest import tiny_config  # pylint: disable=g-import-not-at-top

  from lm import inference  # pylint: disable=g-import-not-at-top
  from lm import saved_model_export  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top

  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + ["the", "cat"]) + "\n")
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  config = tiny_config(vocab_size=tokenizer.vocab_size, hidden_size=8, num_attention_heads=2)
  lm = inference.NeuralLM(modeling.build_model(config, "unilm"), tokenizer, max_seq_length=8)
  export_dir = tmp_path / "export" / "unilm"
  saved_model_export.export(lm, str(export_dir))
  assert export_dir.stat().st_mode & 0o777 == 0o777 & ~umask_027


def test_exclusive_lock_serialises_read_merge_writes(tmp_path, monkeypatch):
  import fcntl  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top

  path = str(tmp_path / "rows.txt")
  io_utils.write_atomically(path, "")
  # The second writer's blocking request for the lock is first tried without blocking, so this
  # thread learns whether it had to wait (an event, not a clock).
  asked, had_to_wait = threading.Event(), threading.Event()
  first_writer, real_flock = threading.current_thread(), fcntl.flock

  def flock(fd, operation):
    blocking = operation in (fcntl.LOCK_EX, fcntl.LOCK_SH)
    if blocking and threading.current_thread() is not first_writer:
      try:
        real_flock(fd, operation | fcntl.LOCK_NB)
        asked.set()
        return
      except BlockingIOError:
        had_to_wait.set()
        asked.set()
    real_flock(fd, operation)

  monkeypatch.setattr(fcntl, "flock", flock)

  def append(name):
    with io_utils.exclusive_lock(path):
      text = open(path, encoding="utf-8").read()
      io_utils.write_atomically(path, text + name + "\n")

  with io_utils.exclusive_lock(path):
    worker = threading.Thread(target=append, args=("second",))
    worker.start()
    assert asked.wait(timeout=HANG_SECONDS)  # only against a hang: a correct lock asks at once
    assert had_to_wait.is_set()  # the held lock excluded the second writer
    append_text = open(path, encoding="utf-8").read() + "first\n"
    io_utils.write_atomically(path, append_text)
  worker.join()
  assert open(path, encoding="utf-8").read() == "first\nsecond\n"


def test_a_refused_run_removes_the_output_dir_it_made_but_no_output(tmp_path):
  out = tmp_path / "out"
  with pytest.raises(cli.InputError):
    with io_utils.output_dir(str(out)), io_utils.exclusive_lock(str(out / "cache" / "c.jsonl")):
      raise cli.InputError("refused at the start")
  assert not out.exists()
  with pytest.raises(cli.InputError):
    with io_utils.output_dir(str(out)), io_utils.exclusive_lock(str(out / "results.json")):
      (out / "pairs").mkdir()
      (out / "pairs" / "a.tsv").write_text("0.5\n")
      raise cli.InputError("refused later")
  assert sorted(os.listdir(out)) == ["pairs"]
  busy = io_utils.OutputBusy("in use", "pid 1", "lock")
  for existing in (out, tmp_path / "new"):
    with pytest.raises(io_utils.OutputBusy):
      with io_utils.output_dir(str(existing)):
        raise busy
  assert (tmp_path / "new").is_dir(), "the dir of a busy output is the other run's"
  assert (out / "pairs" / "a.tsv").exists()


def _marked(**values):
  """A params dataclass with marked paths, as the commands' (cli.param's `io`)."""
  import dataclasses  # pylint: disable=g-import-not-at-top

  fields = [
    ("input_file", str, cli.param("in", None, io=cli.INPUT)),
    ("model_dir", list, cli.param("models", None, io=cli.INPUT)),
    ("output_dir", str, cli.param("out", None, io=cli.OUTPUT)),
  ]
  return dataclasses.make_dataclass("Params", fields)(**values)


def test_an_output_that_is_contains_or_lies_inside_an_input_is_refused(tmp_path):
  lists = tmp_path / "lists" / "x" / "test"
  lists.mkdir(parents=True)
  (lists / "nbest").write_text("1 a\n")
  (tmp_path / "model").mkdir()
  os.symlink(lists, tmp_path / "link")
  nbest = str(lists / "nbest")
  for out, relation in (
    (nbest, "is"),
    (str(tmp_path / "link" / "nbest"), "is"),  # through a symlink
    (str(tmp_path / "lists" / "x"), "contains"),  # the README's lists/x/test/nbest layout
    (str(tmp_path / "lists" / "x" / "test" / "nbest" / ".." / ".."), "contains"),
  ):
    with pytest.raises(cli.InputError) as e:
      io_utils.check_outputs_apart(_marked(input_file=nbest, output_dir=out))
    assert str(e.value) == (
      f"--output_dir {out} {relation} --input_file {nbest}: a command never writes over, into or "
      "around what it reads; choose another --output_dir"
    )
  # A model spec (NAME=kenlm:PATH) and a checkpoint prefix are paths too.
  inside = str(tmp_path / "model" / "out")
  for spec in (f"tta=kenlm:{tmp_path / 'model'}", str(tmp_path / "model")):
    with pytest.raises(cli.InputError, match=r"lies inside --model_dir"):
      io_utils.check_outputs_apart(_marked(model_dir=[spec], output_dir=inside))
  (tmp_path / "model" / "model.ckpt.index").write_text("")
  with pytest.raises(cli.InputError, match=r"contains --model_dir"):
    io_utils.check_outputs_apart(
      _marked(model_dir=[("tta", str(tmp_path / "model" / "model.ckpt"))], output_dir=str(tmp_path))
    )
  # Beside the input, stdout, or an input that is not there: nothing to refuse.
  io_utils.check_outputs_apart(_marked(input_file=nbest, output_dir=str(lists / "out")))
  io_utils.check_outputs_apart(_marked(input_file=nbest, output_dir="-"))
  io_utils.check_outputs_apart(_marked(input_file="absent", output_dir="absent"))


def _full_disk(*args, **kwargs):
  import errno  # pylint: disable=g-import-not-at-top

  raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_is_one_line_naming_the_file_and_leaves_no_temporary(tmp_path, monkeypatch):
  path = tmp_path / "run.json"
  path.write_text("old")
  monkeypatch.setattr(os, "fsync", _full_disk)
  with pytest.raises(cli.InputError) as e:
    io_utils.write_atomically(str(path), "new")
  assert str(e.value) == f"cannot write {path} (No space left on device)"
  assert os.listdir(tmp_path) == ["run.json"] and path.read_text() == "old"


def test_a_lock_that_cannot_be_written_leaves_no_lock_and_no_dir(tmp_path, monkeypatch):
  out = tmp_path / "new" / "scores.jsonl"
  monkeypatch.setattr(os, "pwrite", _full_disk)
  with pytest.raises(cli.InputError) as e:
    with io_utils.exclusive_lock(str(out), wait=False):
      pass
  assert str(e.value) == (
    f"cannot write the lock file {tmp_path}/new/.scores.jsonl.lock (No space left on device)"
  )
  assert os.listdir(tmp_path) == []


def test_a_lock_file_lasts_only_while_its_run_holds_it(tmp_path):
  out = tmp_path / "scores.jsonl"
  with pytest.raises(cli.InputError):
    with io_utils.exclusive_lock(str(out), wait=False):
      raise cli.InputError("refused")
  assert os.listdir(tmp_path) == []
  with io_utils.exclusive_lock(str(out), wait=False):
    assert os.listdir(tmp_path) == [".scores.jsonl.lock"]
  assert os.listdir(tmp_path) == []
  # A killed run's file (its line, no flock) is taken over, then removed like a run's own.
  (tmp_path / ".scores.jsonl.lock").write_text("pid 999999 on elsewhere since 2026-01-01 00:00:00")
  with io_utils.exclusive_lock(str(out)):
    pass
  assert os.listdir(tmp_path) == []
  with io_utils.exclusive_lock(str(tmp_path / "cache" / "lm_scores.jsonl")):
    (tmp_path / "cache" / "lm_scores.jsonl").write_text("{}\n")
  assert os.listdir(tmp_path / "cache") == ["lm_scores.jsonl"]


def test_a_crashed_holders_temporary_files_go_with_its_lock_on_its_host(tmp_path):
  # Issue 56's fifth round (J18): a kill -9 during a write left .o.jsonl.partial.json.tmp-PID-HEX
  # beside the output that the re-run then finished.
  out = tmp_path / "o.jsonl"
  host = socket.gethostname()
  dead = tmp_path / ".o.jsonl.partial.json.tmp-999999-0123abcd"
  other_pid = tmp_path / ".o.jsonl.partial.json.tmp-999998-0123abcd"
  users = tmp_path / "notes.tmp-999999-0123abcd"  # not a hidden temporary file of ours
  for path in (dead, other_pid, users):
    path.write_text("x")
  (tmp_path / ".o.jsonl.lock").write_text(f"pid 999999 on {host} since 2026-01-01 00:00:00")
  with io_utils.exclusive_lock(str(out), wait=False):
    assert not dead.exists()
  assert other_pid.exists() and users.exists()
  # A holder on another host: its pid says nothing here, so nothing is removed.
  (tmp_path / ".o.jsonl.lock").write_text("pid 999998 on elsewhere since 2026-01-01 00:00:00")
  with io_utils.exclusive_lock(str(out), wait=False):
    pass
  assert other_pid.exists()


def test_a_run_waiting_on_a_removed_lock_file_locks_the_one_made_after(tmp_path, monkeypatch):
  import fcntl  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top

  # The waiter opens the holder's file and waits on its flock; the holder removes the file as it
  # ends. The waiter must then hold the file the path names (made anew), so that a third run is
  # refused rather than locking a second file of the same path.
  out = str(tmp_path / "scores.jsonl")
  lock_file = tmp_path / ".scores.jsonl.lock"
  waiting, holding, release = threading.Event(), threading.Event(), threading.Event()
  holder, real_flock = threading.current_thread(), fcntl.flock

  def flock(fd, operation):
    if operation == fcntl.LOCK_EX and threading.current_thread() is not holder:
      waiting.set()
    real_flock(fd, operation)

  monkeypatch.setattr(fcntl, "flock", flock)

  def wait_then_hold():
    with io_utils.exclusive_lock(out):
      holding.set()
      release.wait(timeout=HANG_SECONDS)

  with io_utils.exclusive_lock(out):
    waiter = threading.Thread(target=wait_then_hold)
    waiter.start()
    assert waiting.wait(timeout=HANG_SECONDS)
  try:
    assert holding.wait(timeout=HANG_SECONDS)
    assert lock_file.exists()  # made anew by the waiter
    with pytest.raises(io_utils.OutputBusy):
      with io_utils.exclusive_lock(out, wait=False):
        pass
  finally:
    release.set()
    waiter.join()
  assert os.listdir(tmp_path) == []


def test_a_link_to_nothing_as_input_is_named_a_link_not_a_missing_file(tmp_path):
  # Issue 56's fourth round (H3): a loop of links (or one to a removed file) given as an input
  # was "no such file", which the user's `ls` contradicts.
  os.symlink(tmp_path / "b", tmp_path / "a")
  os.symlink(tmp_path / "a", tmp_path / "b")
  os.symlink(tmp_path / "gone.txt", tmp_path / "dangling")
  for name in ("a", "dangling"):
    with pytest.raises(ValueError, match=f"{name}: a symbolic link to nothing"):
      io_utils.check_input_file(str(tmp_path / name))
  with pytest.raises(ValueError, match="absent.txt: no such file"):
    io_utils.check_input_file(str(tmp_path / "absent.txt"))

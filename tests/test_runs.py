"""util/runs.py: the job an output dir holds, recorded at the start and compared on a resume."""

import json
import os

import pytest

from util import cli
from util import resumable
from util import runs

JOB = {"command": "cmd.py", "model": {"path": "/a/tta", "sha256": "1"}, "rate": 0.001}


def start(out, job=JOB, overwrite=False):
  record = runs.Record(str(out), job, ["results.json", "runs"], overwrite)
  record.start()
  return record


def test_the_same_job_resumes_and_another_is_refused_naming_the_first_difference(tmp_path):
  start(tmp_path)
  (tmp_path / "results.json").write_text("{}")
  start(tmp_path)
  for job, named in (
    (dict(JOB, model={"path": "/b/unilm", "sha256": "2"}), "model /a/tta (this run: /b/unilm)"),
    (dict(JOB, model={"path": "/a/tta", "sha256": "3"}), "model.sha256 1 (this run: 3)"),
    (dict(JOB, rate=0.002), "rate 0.001 (this run: 0.002)"),
    (dict(JOB, extra=[1, 2]), "extra none (this run: [1, 2])"),
    (dict(JOB, model=[{"path": "/b"}]), "model /a/tta (this run: [/b])"),
  ):
    with pytest.raises(cli.InputError) as e:
      runs.Record(str(tmp_path), job, ["results.json"])
    assert str(e.value) == (
      f"--output_dir {tmp_path} holds another job: {named}; add --overwrite to start over"
    )


def test_overwrite_removes_the_outputs_and_nothing_else(tmp_path):
  start(tmp_path)
  (tmp_path / "runs" / "a").mkdir(parents=True)
  (tmp_path / "results.json").write_text("{}")
  (tmp_path / "notes.txt").write_text("mine")
  other = dict(JOB, rate=0.002)
  record = runs.Record(str(tmp_path), other, ["results.json", "runs"], overwrite=True)
  # Nothing goes before the run has read its inputs (a refused run loses nothing).
  assert (tmp_path / "results.json").exists()
  record.start()
  assert sorted(os.listdir(tmp_path)) == ["notes.txt", runs.RECORD_FILE]
  recorded = json.loads((tmp_path / runs.RECORD_FILE).read_text())
  assert recorded.pop(runs.RECORDED) == ["results.json", "runs"]
  assert recorded == other


def test_overwrite_removes_files_not_folders_and_a_folder_once_it_is_empty(tmp_path):
  # Issue 56: a folder of outputs went whole, with a file of the user's in it.
  outputs = ["results.json", "pairs/*.tsv"]
  runs.Record(str(tmp_path), JOB, outputs).start()
  (tmp_path / "pairs").mkdir()
  (tmp_path / "pairs" / "a.tsv").write_text("1\n")
  (tmp_path / "pairs" / "notes.txt").write_text("mine")
  runs.Record(str(tmp_path), dict(JOB, rate=0.002), outputs, overwrite=True).start()
  assert os.listdir(tmp_path / "pairs") == ["notes.txt"]
  (tmp_path / "pairs" / "b.tsv").write_text("1\n")
  (tmp_path / "pairs" / "notes.txt").unlink()
  # A record of an older version claimed the folder: only this job's outputs in it are its.
  record = json.loads((tmp_path / runs.RECORD_FILE).read_text())
  record[runs.RECORDED] = ["results.json", "pairs"]
  (tmp_path / runs.RECORD_FILE).write_text(json.dumps(record))
  runs.Record(str(tmp_path), JOB, outputs, overwrite=True).start()
  assert sorted(os.listdir(tmp_path)) == [runs.RECORD_FILE]


def test_overwrite_refuses_an_output_no_run_recorded_and_removes_nothing(tmp_path):
  # The user's own dir under an output's name, in a dir no run recorded.
  (tmp_path / "runs").mkdir()
  (tmp_path / "runs" / "list.txt").write_text("mine")
  with pytest.raises(cli.InputError) as e:
    runs.Record(str(tmp_path), JOB, ["results.json", "runs"], overwrite=True)
  assert str(e.value) == (
    f"--output_dir {tmp_path} holds runs/list.txt, which no run of this command recorded in "
    "run.json as "
    "its own (--overwrite removes only those): move it away or choose another --output_dir"
  )
  assert (tmp_path / "runs" / "list.txt").read_text() == "mine"


def test_an_old_record_owns_the_outputs_written_after_it(tmp_path):
  # A run.json of a version that recorded no outputs: what changed after it was written is its
  # run's; what is older was there before the run (the user's) and is refused, never removed.
  (tmp_path / "runs").mkdir()
  (tmp_path / "runs" / "a.txt").write_text("mine")
  (tmp_path / runs.RECORD_FILE).write_text(json.dumps(JOB))
  (tmp_path / "results.json").write_text("{}")
  written = os.stat(tmp_path / runs.RECORD_FILE).st_mtime_ns
  os.utime(tmp_path / "runs" / "a.txt", ns=(written - 10**9, written - 10**9))
  os.utime(tmp_path / "results.json", ns=(written + 10**9, written + 10**9))
  with pytest.raises(cli.InputError, match=r"holds runs/a.txt, which no run of this command"):
    runs.Record(str(tmp_path), JOB, ["results.json", "runs"])
  with pytest.raises(cli.InputError, match=r"holds runs/a.txt, which no run of this command"):
    runs.Record(str(tmp_path), JOB, ["results.json", "runs"], overwrite=True)
  runs.Record(str(tmp_path), JOB, ["results.json"]).start()  # resumes
  runs.Record(str(tmp_path), dict(JOB, rate=0.002), ["results.json"], overwrite=True).start()
  assert not (tmp_path / "results.json").exists() and (tmp_path / "runs" / "a.txt").exists()


def test_a_glob_output_is_recorded_for_the_names_it_matches_later(tmp_path):
  record = runs.Record(str(tmp_path), JOB, ["ckpt-*", "results.json"])
  record.start()
  (tmp_path / "ckpt-1.index").write_text("")
  (tmp_path / "results.json").write_text("{}")
  runs.Record(str(tmp_path), dict(JOB, rate=0.002), ["ckpt-*"], overwrite=True).start()
  assert not (tmp_path / "ckpt-1.index").exists()


def test_a_run_refused_after_its_record_takes_the_record_back(tmp_path):
  with pytest.raises(cli.InputError):
    with runs.Record(str(tmp_path), JOB, ["results.json"]) as record:
      record.start()
      raise cli.InputError("--whiten_load: bad transform")
  assert not (tmp_path / runs.RECORD_FILE).exists()
  # The corrected command is not another job; once it wrote an output, the record stays.
  with pytest.raises(cli.InputError):
    with runs.Record(str(tmp_path), dict(JOB, rate=0.002), ["results.json"]) as record:
      record.start()
      (tmp_path / "results.json").write_text("{}")
      raise cli.InputError("later")
  assert (tmp_path / runs.RECORD_FILE).exists()


def test_a_dir_made_for_an_output_it_could_not_write_does_not_keep_the_record(tmp_path):
  # run_sts.py on a full disk: its pairs/ dir is made, the first state file cannot be written.
  with pytest.raises(cli.InputError):
    with runs.Record(str(tmp_path), JOB, ["results.json", "pairs"]) as record:
      record.start()
      (tmp_path / "pairs").mkdir()
      raise cli.InputError("cannot write pairs/x.tsv.partial.json (No space left on device)")
  assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize(
  "content, named",
  [(b"\xff\xfe{}", "not UTF-8"), (b"[]", "not a record of a run"), (b"{", "not JSON")],
)
def test_an_unreadable_run_json_is_named(tmp_path, content, named):
  (tmp_path / runs.RECORD_FILE).write_bytes(content)
  with pytest.raises(cli.InputError) as e:
    runs.Record(str(tmp_path), JOB, ["results.json"])
  assert str(tmp_path / runs.RECORD_FILE) in str(e.value) and named in str(e.value)
  assert str(e.value).endswith("add --overwrite to start over")
  start(tmp_path, overwrite=True)  # as advised: nothing else here


def test_an_unreadable_run_json_beside_outputs_does_not_advise_overwrite(tmp_path):
  # Issue 56's probes (F5): it advised --overwrite, which then refused the outputs no readable
  # record names as the run's: an advice loop.
  (tmp_path / runs.RECORD_FILE).write_text("{bad")
  (tmp_path / "results.json").write_text("{}")
  with pytest.raises(cli.InputError) as e:
    runs.Record(str(tmp_path), JOB, ["results.json"])
  assert "not JSON" in str(e.value) and "--overwrite" not in str(e.value)
  assert str(e.value).endswith("move it away or choose another --output_dir")
  with pytest.raises(cli.InputError, match="move it away or choose another --output_dir"):
    runs.Record(str(tmp_path), JOB, ["results.json"], overwrite=True)
  assert (tmp_path / "results.json").exists()


def test_outputs_without_a_record_are_refused(tmp_path):
  (tmp_path / "results.json").write_text("{}")
  with pytest.raises(cli.InputError, match=r"holds results.json of a run that recorded no job"):
    runs.Record(str(tmp_path), JOB, ["results.json"])
  runs.Record(str(tmp_path / "empty"), JOB, ["results.json"])  # a new dir: nothing recorded


def test_path_identity_has_the_size_and_mtime_of_each_file(tmp_path):
  (tmp_path / "d").mkdir()
  (tmp_path / "d" / "f").write_text("abc")
  file_identity = runs.path_identity(str(tmp_path / "d" / "f"))
  assert file_identity["path"] == str(tmp_path / "d" / "f") and file_identity["bytes"] == 3
  assert runs.path_identity(str(tmp_path / "d"))["files"] == {
    "f": [3, os.stat(tmp_path / "d" / "f").st_mtime_ns]
  }
  assert runs.path_identity(str(tmp_path / "absent"))["bytes"] is None


def test_a_partial_file_of_another_job_is_refused_in_the_same_words(tmp_path):
  target = str(tmp_path / "out.jsonl")
  resumable.Partial(target, {"model": "tta-1", "batch_size": 2})
  open(target + ".partial", "w").close()
  with pytest.raises(cli.InputError) as e:
    resumable.Partial(target, {"model": "tta-1", "batch_size": 3})
  assert str(e.value) == (
    f"{target}.partial holds records of another job: batch_size 2 (this run: 3); add --overwrite "
    "to start over"
  )


@pytest.mark.parametrize("state", ["[]", '{"x": 1}', '{"job": {}, "lines": "2"}', "{"])
def test_a_partial_state_that_is_not_a_state_is_one_line(tmp_path, state):
  target = str(tmp_path / "out.jsonl")
  open(target + ".partial", "w").close()
  with open(target + ".partial.json", "w") as f:
    f.write(state)
  with pytest.raises(cli.InputError) as e:
    resumable.Partial(target, {"model": "tta-1"})
  assert str(e.value) == (
    f"{target}.partial has no readable record of the run that wrote it ({target}.partial.json "
    "is missing or not such a record): add --overwrite to start over"
  )

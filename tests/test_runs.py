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
  assert json.loads((tmp_path / runs.RECORD_FILE).read_text()) == other


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

"""What the commands never do to a user's files (issue 47): write over, into or around an input
(`io_utils.check_outputs_apart`), remove with --overwrite what they did not record as theirs
(`runs.Record`), leave a lock, a record or an empty dir behind when refused, or show a traceback
for a full disk. Commands run in-process (tests/commands.py) on a tiny random T-TA model; the
refusals of paths come before any model is read, so most runs name models that do not exist."""

import errno
import json
import os

import commands
import conftest
import pytest

from util import runs


def _error(result, command):
  """The run's one error line; it must have exited 2 without a traceback."""
  assert result.returncode == 2, result.stderr[-2000:]
  assert "Traceback" not in result.stderr, result.stderr[-2000:]
  lines = [l for l in result.stderr.splitlines() if l.startswith(f"{command}: error: ")]
  assert len(lines) == 1, result.stderr[-2000:]
  return lines[0][len(f"{command}: error: ") :]


def _tree(root):
  """{relative path: content} of every file under `root`."""
  out = {}
  for directory, _, names in os.walk(root):
    for name in names:
      path = os.path.join(directory, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, root)] = f.read()
  return out


def test_score_refuses_to_write_its_scores_over_its_input(tmp_path):
  sentences = tmp_path / "sents.txt"
  sentences.write_text("the cat sat\n")
  os.symlink(sentences, tmp_path / "link.txt")
  for output in (sentences, tmp_path / "link.txt"):
    result = commands.run(
      "score.py", f"--model_dir={tmp_path}/absent", f"--input_file={sentences}",
      f"--output_file={output}",
    )  # fmt: skip
    assert _error(result, "score.py") == (
      f"--output_file {output} is --input_file {sentences}: a command never writes over, into "
      "or around what it reads; choose another --output_file"
    )
  assert sentences.read_text() == "the cat sat\n"
  assert sorted(os.listdir(tmp_path)) == ["link.txt", "sents.txt"]


def _readme_lists(tmp_path):
  """The README's layout: lists/x/{dev,test}/nbest, beside a file of the user's."""
  for name in ("dev", "test"):
    (tmp_path / "lists" / "x" / name).mkdir(parents=True)
    (tmp_path / "lists" / "x" / name / "nbest").write_text('{"u": [{"text": "the cat"}]}\n')
  test = tmp_path / "lists" / "x" / "test"
  (test / "notes.txt").write_text("mine\n")
  return test


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_rescoring_refuses_an_output_dir_above_its_lists_and_overwrite_removes_nothing(
  tmp_path, overwrite
):
  test = _readme_lists(tmp_path)
  before = _tree(tmp_path)
  result = commands.run(
    "run_rescoring.py", f"--lm=tta={tmp_path}/absent", "--format=json",
    f"--dev_file={tmp_path}/lists/x/dev/nbest", f"--test_file={test}/nbest",
    f"--output_dir={tmp_path}/lists/x", *overwrite,
  )  # fmt: skip
  assert _error(result, "run_rescoring.py") == (
    f"--output_dir {tmp_path}/lists/x contains --dev_file {tmp_path}/lists/x/dev/nbest: a "
    "command never writes "
    "over, into or around what it reads; choose another --output_dir"
  )
  assert _tree(tmp_path) == before


def test_sts_overwrite_refuses_a_pairs_file_inside_its_output_dir(tmp_path):
  out = tmp_path / "out"
  (out / "pairs").mkdir(parents=True)
  (out / "pairs" / "mine.tsv").write_text("the cat\tthe cat sat\t4.0\n")
  before = _tree(tmp_path)
  result = commands.run(
    "run_sts.py", f"--model_dir={tmp_path}/absent", f"--pairs_file={out}/pairs/mine.tsv",
    f"--output_dir={out}", "--overwrite",
  )  # fmt: skip
  assert _error(result, "run_sts.py").startswith(
    f"--output_dir {out} contains --pairs_file {out}/pairs/mine.tsv: "
  )
  assert _tree(tmp_path) == before


def test_export_refuses_an_export_dir_under_a_file_or_over_a_dir_it_did_not_write(tmp_path):
  (tmp_path / "file").write_text("mine\n")
  (tmp_path / "mine").mkdir()
  (tmp_path / "mine" / "notes.txt").write_text("mine\n")
  (tmp_path / "model").mkdir()
  before = _tree(tmp_path)
  for export_dir, overwrite, message in (
    (f"{tmp_path}/file/export", [], f"--export_dir {tmp_path}/file/export: cannot be created: "),
    (f"{tmp_path}/mine", ["--overwrite"], f"{tmp_path}/mine exists and is not an export of this "),
    (f"{tmp_path}/model/export", [], f"--export_dir {tmp_path}/model/export lies inside "),
  ):
    result = commands.run(
      "export_saved_model.py", f"--model_dir={tmp_path}/model", f"--export_dir={export_dir}",
      *overwrite,
    )  # fmt: skip
    assert _error(result, "export_saved_model.py").startswith(message)
  assert _tree(tmp_path) == before


def _pairs(tmp_path):
  pairs = tmp_path / "p.tsv"
  pairs.write_text("the cat sat\tthe dog sat\t4.0\nthe cat\ta dog\t1.0\nthe mat\tthe cat\t2.0\n")
  return pairs


def test_a_refused_whiten_run_leaves_nothing_that_refuses_the_corrected_run(tmp_path, tiny_tta):
  pairs, out = _pairs(tmp_path), tmp_path / "out"
  common = [f"--model_dir={tiny_tta}", f"--pairs_file={pairs}", f"--output_dir={out}"]
  # 20 dimensions of 6 sentences: refused once the model has read the pairs, after the record.
  line = _error(commands.run("run_sts.py", *common, "--whiten=20"), "run_sts.py")
  assert line.startswith("--whiten=20 on p: ")
  assert not out.exists(), "the refused run left its output dir (and run.json) behind"
  commands.run("run_sts.py", *common, "--whiten=2", status=0)
  recorded = json.loads((out / runs.RECORD_FILE).read_text())
  assert "pairs/*.tsv" in recorded[runs.RECORDED]


def _full_disk(*args, **kwargs):
  raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["pwrite", "fsync"])
def test_score_on_a_full_disk_is_one_line_and_leaves_nothing(
  tmp_path, tiny_tta, monkeypatch, where
):
  # pwrite: the lock's holder line; fsync: the first state file (OUTPUT.partial.json).
  sentences = tmp_path / "sents.txt"
  sentences.write_text("the cat sat\n")
  monkeypatch.setattr(os, where, _full_disk)
  result = commands.run(
    "score.py", f"--model_dir={tiny_tta}", f"--input_file={sentences}",
    f"--output_file={tmp_path}/new/scores.jsonl",
  )  # fmt: skip
  line = _error(result, "score.py")
  assert line.startswith("cannot write ") and line.endswith("(No space left on device)")
  assert os.listdir(tmp_path) == ["sents.txt"]


def test_sts_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, tiny_tta, monkeypatch):
  pairs, out = _pairs(tmp_path), tmp_path / "out"
  monkeypatch.setattr(os, "fsync", _full_disk)  # run.json, the first file the run writes
  result = commands.run(
    "run_sts.py", f"--model_dir={tiny_tta}", f"--pairs_file={pairs}", f"--output_dir={out}"
  )
  assert _error(result, "run_sts.py") == (
    f"cannot write {out}/{runs.RECORD_FILE} (No space left on device)"
  )
  assert os.listdir(tmp_path) == ["p.tsv"]


# Every other command, its input under its output: (command, flags), {tmp} the test's dir, whose
# in/ holds the input; each must name its output flag and the input flag in the refusal.
INSIDE = {
  "ngram.py": (["--train_text={tmp}/in/x.txt", "--output={tmp}/in/x.txt"], "output", "train_text"),
  "corpus.py": (["--input={tmp}/in/x.txt", "--output_dir={tmp}/in"], "output_dir", "input"),
  "convert_checkpoint.py": (
    ["--init_checkpoint={tmp}/in/model.ckpt", "--bert_config_file={tmp}/in/x.txt",
     "--vocab_file={tmp}/in/x.txt", "--output_dir={tmp}/in"],
    "output_dir", "init_checkpoint",
  ),
  "run_pretraining.py": (
    ["--input_file={tmp}/in/*.tfrecord", "--output_dir={tmp}/in"], "output_dir", "input_file"
  ),
  "run_mwer.py": (
    ["--init_model={tmp}/in", "--output_dir={tmp}/in/mwer", "--format=json",
     "--train_sets={tmp}/in/x.txt", "--test_sets={tmp}/in/x.txt"],
    "output_dir", "init_model",
  ),
  "create_pretraining_data.py": (
    ["--input_file={tmp}/in/x.txt", "--vocab_file={tmp}/in/x.txt", "--output_dir={tmp}/in"],
    "output_dir", "input_file",
  ),
  "run_benchmark.py": (
    ["--vocab_file={tmp}/in/x.txt", "--output_dir={tmp}/in", "--quick"], "output_dir", "vocab_file"
  ),
}  # fmt: skip


@pytest.mark.parametrize("command", INSIDE)
def test_every_command_refuses_an_output_around_its_input(tmp_path, command):
  (tmp_path / "in").mkdir()
  for name in ("x.txt", "model.ckpt.index", "a.tfrecord"):
    (tmp_path / "in" / name).write_text("the cat sat\n")
  args, out_flag, in_flag = INSIDE[command]
  before = _tree(tmp_path)
  line = _error(commands.run(command, *[a.format(tmp=tmp_path) for a in args]), command)
  assert line.startswith(f"--{out_flag} {tmp_path}/in") and f" --{in_flag} " in line, line
  assert _tree(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["in"]


def test_score_that_cannot_write_its_first_batch_leaves_nothing(tmp_path, tiny_tta, monkeypatch):
  sentences = tmp_path / "sents.txt"
  sentences.write_text("the cat sat\n")
  real_open = open

  def no_space_for_records(path, mode="r", *args, **kwargs):
    if str(path).endswith(".partial") and "a" in mode:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return real_open(path, mode, *args, **kwargs)

  monkeypatch.setattr("builtins.open", no_space_for_records)
  out = tmp_path / "new" / "scores.jsonl"
  line = _error(
    commands.run("score.py", f"--model_dir={tiny_tta}", f"--input_file={sentences}",
                 f"--output_file={out}"),
    "score.py",
  )  # fmt: skip
  assert line == f"cannot write {out}.partial (No space left on device); nothing was kept"
  assert os.listdir(tmp_path) == ["sents.txt"]


@pytest.mark.slow(seconds=8)
def test_sts_overwrite_keeps_a_file_of_the_users_in_pairs(tmp_path, tiny_tta):
  # Issue 56: --overwrite removed pairs/ whole, with the user's analysis beside the cosines.
  pairs, out = _pairs(tmp_path), tmp_path / "out"
  common = [f"--model_dir={tiny_tta}", f"--pairs_file={pairs}", f"--output_dir={out}"]
  commands.run("run_sts.py", *common, status=0)
  (out / "pairs" / "analysis.txt").write_text("mine\n")
  commands.run("run_sts.py", *common, "--pairs_batch_size=1", "--overwrite", status=0)
  assert (out / "pairs" / "analysis.txt").read_text() == "mine\n"
  assert sorted(os.listdir(out / "pairs")) == ["analysis.txt", "p.tsv", "p.tsv.done.json"]
  # Another job's --overwrite removes the old job's cosines too.
  commands.run("run_sts.py", *common[:1], f"--pairs_file=q={pairs}", *common[2:], "--overwrite",
               status=0)  # fmt: skip
  assert sorted(os.listdir(out / "pairs")) == ["analysis.txt", "q.tsv", "q.tsv.done.json"]


@pytest.mark.slow(seconds=8)
def test_rescoring_overwrite_keeps_a_file_of_the_users_in_test(tmp_path, tiny_tta):
  # Issue 56: --overwrite removed test/ whole, with the user's notes beside the rescored lists.
  lists = tmp_path / "lists"
  lists.mkdir()
  hyps = {
    "hyp_1": {"score": -1.0, "text": "the cat sat"},
    "hyp_2": {"score": -2.0, "text": "the cat"},
  }
  (lists / "dev.json").write_text(json.dumps({"u1": {"ref": "the cat sat", **hyps}}))
  (lists / "test.json").write_text(json.dumps({"u1": hyps}))
  out = tmp_path / "out"
  common = [f"--lm=tta={tiny_tta}", "--format=json", f"--dev_file={lists}/dev.json",
            f"--test_file={lists}/test.json", f"--output_dir={out}"]  # fmt: skip
  commands.run("run_rescoring.py", *common, status=0)
  (out / "test" / "notes.txt").write_text("mine\n")
  commands.run("run_rescoring.py", *common, "--sentence_score=mean", "--overwrite", status=0)
  assert (out / "test" / "notes.txt").read_text() == "mine\n"
  assert sorted(os.listdir(out / "test")) == ["hyp.trn", "notes.txt", "test.json", "text"]


def test_score_reads_a_pipe_once_and_writes_every_line(tmp_path, tiny_tta):
  # Issue 56: score.py --input_file=<(cat sentences.txt) counted the lines (using the pipe up),
  # then scored what was left: nothing, and exited 0 with 0 records.
  read, write = os.pipe()
  os.write(write, b"the cat sat\nthe dog\n")
  os.close(write)
  out = tmp_path / "scores.jsonl"
  try:
    commands.run("score.py", f"--model_dir={tiny_tta}", f"--input_file=/dev/fd/{read}",
                 f"--output_file={out}", status=0)  # fmt: skip
  finally:
    os.close(read)
  assert len(out.read_text().splitlines()) == 2


def test_score_refuses_a_directory_as_input_before_the_model_loads(tmp_path):
  out = tmp_path / "out" / "scores.jsonl"
  line = _error(
    commands.run("score.py", f"--model_dir={tmp_path}/absent", f"--input_file={tmp_path}",
                 f"--output_file={out}"),
    "score.py",
  )  # fmt: skip
  assert line == f"--input_file {tmp_path}: is a directory; give a file"
  assert os.listdir(tmp_path) == []


def test_sts_refuses_pairs_from_a_pipe_in_one_line(tmp_path, tiny_tta):
  # Read whole to check, then again to encode: a pipe would give an empty second read.
  read, write = os.pipe()
  os.close(write)
  try:
    result = commands.run(
      "run_sts.py",
      f"--model_dir={tiny_tta}",
      f"--pairs_file=/dev/fd/{read}",
      f"--output_dir={tmp_path}/out",
    )
  finally:
    os.close(read)
  assert "not a regular file (a pipe?)" in _error(result, "run_sts.py")
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
  "flag, message",
  [
    ("--train_batch_size=0", "flag --train_batch_size=0: 0 is not a positive integer"),
    (
      "--init_checkpoint={tmp}/a.tfrecord",
      "a.tfrecord: a file, not a model dir or checkpoint prefix",
    ),
    ("--num_attention_heads=3", "hidden_size (512) is not a multiple of num_attention_heads (3)"),
  ],
)
def test_a_refused_pretraining_run_leaves_nothing_that_refuses_the_corrected_run(
  tmp_path, flag, message
):
  # Issue 56: --train_batch_size=0 was a traceback after config.json and run.json were written,
  # which then refused the corrected command as another job.
  vocab = os.path.join(conftest.data_dir_or_skip("reference-vocab"), "reference-vocab",
                       "tta-vocab-lower.sub-32k.txt")  # fmt: skip
  (tmp_path / "a.tfrecord").write_bytes(b"")
  before = _tree(tmp_path)
  result = commands.run(
    "run_pretraining.py", f"--input_file={tmp_path}/a.tfrecord", f"--vocab_file={vocab}",
    f"--output_dir={tmp_path}/run", flag.format(tmp=tmp_path),
  )  # fmt: skip
  assert message in _error(result, "run_pretraining.py")
  assert _tree(tmp_path) == before and os.listdir(tmp_path) == ["a.tfrecord"]

"""Wrong flags and unwritable outputs of the commands that write results (issue 40).

Each is refused in one line naming the flag or the path, with exit status 2, before a model
loads or a list is read, and the refused run leaves nothing behind (no --output_dir, lock file,
cache or partial file). The models named do not exist: the refusal must come before they are
looked at.
"""

import os
import re

import commands
import pytest

from util import cli

BAD_MWER_FLAGS = [
  ("--epochs=0", "--epochs"),
  ("--epochs=-1", "--epochs"),
  ("--lists_per_batch=0", "--lists_per_batch"),
  ("--hyps_per_list=0", "--hyps_per_list"),
  ("--chunk_size=0", "--chunk_size"),
  ("--sample_lists=-1", "--sample_lists"),
  ("--regularizer_weights=nan", "--regularizer_weights"),
  ("--regularizer_weights=0.1,inf", "--regularizer_weights"),
  ("--learning_rate=-1", "--learning_rate"),
  ("--learning_rate=0", "--learning_rate"),
  ("--learning_rate=nan", "--learning_rate"),
  # Issue 56's fifth round (J7): --warmup_fraction=nan or -1 was a ValueError traceback after the
  # lists were read and --output_dir made; --learning_rate=inf and --weight_decay_rate=nan trained
  # until a step was not finite and exited 75, which its same command repeats.
  ("--learning_rate=inf", "--learning_rate"),
  ("--weights_learning_rate=inf", "--weights_learning_rate"),
  ("--warmup_fraction=nan", "--warmup_fraction"),
  ("--warmup_fraction=-1", "--warmup_fraction"),
  ("--weight_decay_rate=nan", "--weight_decay_rate"),
]


def error_line(result, command):
  """The one stderr line of a refused run (besides absl's INFO log of what it did first)."""
  assert result.returncode == cli.EXIT_INPUT_ERROR, result.stderr
  lines = [l for l in result.stderr.splitlines() if not re.match(r"I\d{4} ", l)]
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith(f"{command}: error: "), lines[0]
  return lines[0]


@pytest.mark.parametrize("flag, name", BAD_MWER_FLAGS)
def test_run_mwer_refuses_a_bad_value_naming_its_flag(tmp_path, flag, name):
  result = commands.run(
    "run_mwer.py",
    f"--init_model={tmp_path}/absent",
    f"--output_dir={tmp_path}/mwer",
    f"--data_dir={tmp_path}",
    flag,
  )
  assert name in error_line(result, "run_mwer.py")
  assert os.listdir(tmp_path) == []


def _under_a_file(tmp_path):
  (tmp_path / "file").write_text("")
  return str(tmp_path / "file" / "out"), "is not a directory"


def _read_only(tmp_path):
  if os.geteuid() == 0:
    pytest.skip("root writes into a read-only directory")
  directory = tmp_path / "read_only"
  directory.mkdir(mode=0o500)
  return str(directory / "out"), "Permission denied"


def _proc(tmp_path):
  del tmp_path
  return "/proc/tta-out", "/proc"


LOCATIONS = {"under_a_file": _under_a_file, "read_only": _read_only, "proc": _proc}

# (command, flags besides the output); "{tmp}" is the test's tmp_path.
COMMANDS = {
  "beam_rescore.py": ["--model_dir={tmp}/absent", "--data_dir={tmp}", "--output_dir={out}"],
  "beam_score.py": [
    "--model_dir={tmp}/absent",
    "--input_file={tmp}/in.txt",
    "--output_file={out}",
  ],
  "convert_nbest.py": [
    "--input={tmp}/absent",
    "--input_format=tsv",
    "--output_format=kaldi",
    "--output_dir={out}",
  ],
  "run_mwer.py": ["--init_model={tmp}/absent", "--data_dir={tmp}", "--output_dir={out}"],
  "run_rescoring.py": ["--model_dir={tmp}/absent", "--data_dir={tmp}", "--output_dir={out}"],
  "run_sts.py": ["--model_dir={tmp}/absent", "--data_dir={tmp}", "--output_dir={out}"],
  "score.py": ["--model_dir={tmp}/absent", "--input_file={tmp}/in.txt", "--output_file={out}"],
}

# run_pretraining.py loads no model: the output's test alone takes it.
OUTPUT_COMMANDS = dict(
  COMMANDS, **{"run_pretraining.py": ["--synthetic_data", "--output_dir={out}"]}
)


@pytest.mark.parametrize("location", LOCATIONS)
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_that_cannot_be_written_is_refused_first(tmp_path, command, location):
  out, why = LOCATIONS[location](tmp_path)
  (tmp_path / "in.txt").write_text("the cat sat\n")
  before = sorted(os.listdir(tmp_path))
  args = [a.format(tmp=tmp_path, out=out) for a in OUTPUT_COMMANDS[command]]
  line = error_line(commands.run(command, *args), command)
  assert out in line and why in line, line
  assert sorted(os.listdir(tmp_path)) == before, "a refused run left files behind"
  if location == "read_only":
    os.chmod(tmp_path / "read_only", 0o700)


def test_score_refuses_a_directory_as_output_file(tmp_path):
  (tmp_path / "in.txt").write_text("the cat sat\n")
  (tmp_path / "out").mkdir()
  result = commands.run(
    "score.py",
    f"--model_dir={tmp_path}/absent",
    f"--input_file={tmp_path}/in.txt",
    f"--output_file={tmp_path}/out",
  )
  line = error_line(result, "score.py")
  assert f"--output_file {tmp_path}/out: is a directory" in line
  assert sorted(os.listdir(tmp_path)) == ["in.txt", "out"]
  assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_run_refused_for_its_model_leaves_no_output(tmp_path, command):
  (tmp_path / "in.txt").write_text("the cat sat\n")
  out = str(tmp_path / "out")
  args = [a.format(tmp=tmp_path, out=out) for a in COMMANDS[command]]
  line = error_line(commands.run(command, *args), command)
  assert f"{tmp_path}/absent" in line
  assert os.listdir(tmp_path) == ["in.txt"], "a refused run left files behind"


@pytest.mark.parametrize("command", ["run_mwer.py", "run_sts.py"])
def test_a_run_refused_for_its_data_after_making_its_output_dir_removes_it(
  tmp_path, tiny_tta, command
):
  (tmp_path / "data").mkdir()  # holds no data set
  model_flag = "--init_model" if command == "run_mwer.py" else "--model_dir"
  result = commands.run(
    command,
    f"{model_flag}={tiny_tta}",
    f"--output_dir={tmp_path}/out",
    f"--data_dir={tmp_path}/data",
  )
  assert f"{tmp_path}/data" in error_line(result, command)
  assert os.listdir(tmp_path) == ["data"], "a refused run left files behind"

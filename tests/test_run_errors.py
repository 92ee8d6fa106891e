"""Wrong flags of the commands that write results (issue 40).

Each is refused in one line naming the flag, with exit status 2, before a model loads or a list
is read, and the refused run leaves nothing behind (no --output_dir, cache). The models named do
not exist: the refusal must come before they are looked at.
"""

import os

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
]


def error_line(result, command):
  """The one stderr line of a refused run."""
  assert result.returncode == cli.EXIT_INPUT_ERROR, result.stderr
  lines = result.stderr.splitlines()
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

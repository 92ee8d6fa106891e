"""Every command, given a wrong input as a new user would, prints one line naming it and exits 2.

The first case of a command of each kind of start-up runs it as a subprocess (util/cli.py's
promise is about what the user sees: no traceback, no usage dump, none of TensorFlow's start-up
lines); every other case runs in the test's process (tests/commands.py: the same parsing, the
same line, the same exit status). The commands' shared shape (startup_log imported first, the
same `__main__` lines) is tests/test_command_shape.py's. The wrong inputs
are the cheap kind a command must refuse before it reads its data or builds anything, so each
case costs the command's start-up only.
"""

import dataclasses
import os
import re
import subprocess
import sys

from absl import flags
import commands
from conftest import HANG_SECONDS
import pytest

from lm import inference
from lm import lm_options as lm_options_lib
from util import cli
from util import startup_log

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# (command, arguments, fragments of the error line); "{tmp}" is the test's empty tmp_path.
CASES = [
  # The first case of score.py runs as a process: TensorFlow's import and its device query
  # happen, and a model dir is looked for (tests/test_startup_log.py counts on it).
  (
    "score.py",
    ["--model_dir={tmp}/absent"],
    [
      "{tmp}/absent/config.json not found; a model dir needs config.json, vocab.txt and a "
      "checkpoint"
    ],
  ),
  ("score.py", [], ["--model_dir is required"]),
  ("score.py", ["--model_dir=m", "--batch_size=-3"], ["--batch_size=-3", "positive integer"]),
  ("score.py", ["--model_dir=m", "--window=64", "--stride=63"], ["--stride=63", "62 word pieces"]),
  ("score.py", ["--model_dir=m", "--stride=0"], ["--stride=0", "not a positive integer"]),
  # Issue 56's probes: the vectors were computed and dropped from the TSV rows in silence.
  (
    "score.py",
    ["--model_dir=m", "--vectors=context", "--format=tsv"],
    ["--vectors=context", "--format=tsv has no column for vectors"],
  ),
  # --lm, the alias of --model_dir; the empty --data_dir holds no lists: the model dir is
  # refused before they are read.
  ("run_rescoring.py", ["--lm={tmp}/absent", "--data_dir={tmp}"], ["{tmp}/absent/config.json"]),
  ("run_rescoring.py", ["--model_dir=m", "--pairs=dev_clean"], ["--pairs", "DEV:TEST"]),
  # Issue 56: a repeated flag, or a flag beside its alias, kept its last value in silence.
  (
    "run_rescoring.py",
    ["--lm=ng={tmp}/absent1", "--model_dir=ng2={tmp}/absent2", "--data_dir={tmp}"],
    ["{tmp}/absent1/config.json"],
  ),
  (
    "run_sts.py",
    ["--model_dir=tta={tmp}/absent1", "--model_dir=uni={tmp}/absent2", "--data_dir={tmp}"],
    ["{tmp}/absent1/config.json"],
  ),
  ("score.py", ["--model_dir=m", "--batch_size=4", "--batch_size", "5"], ["given 2 times"]),
  # Issue 56's probes (F6): --pairs (the paper's sets) was dropped in silence beside --test_file.
  (
    "run_rescoring.py",
    [
      "--format=tsv",
      "--dev_file={tmp}/dev.tsv",
      "--test_file={tmp}/test.tsv",
      "--pairs=dev_other:test_other",
      "--model_dir={tmp}/absent",
    ],
    ["--pairs does nothing with --test_file: leave one of them out"],
  ),
  ("run_sts.py", ["--model_dir={tmp}/absent", "--data_dir={tmp}"], ["{tmp}/absent/config.json"]),
  ("run_sts.py", ["--model_dir=m", "--window=2"], ["--window=2", "not integer >= 3"]),
  (
    "run_pretraining.py",
    ["--input_file={tmp}/train-*.tfrecord", "--output_dir={tmp}/run"],
    ["--input_file", "train-*.tfrecord", "matches no file"],
  ),
  # Issue 56: each was a traceback (or, for a warmup past the end, a run that never reached
  # its learning rate); now refused while the flags are parsed, before anything is read or made.
  *(
    ("run_pretraining.py", ["--input_file={tmp}/x", "--output_dir={tmp}/run", flag], fragments)
    for flag, fragments in (
      ("--train_batch_size=0", ["--train_batch_size=0", "positive"]),
      ("--num_attention_heads=0", ["--num_attention_heads=0", "positive"]),
      # Issue 56's probes: a negative rate trained (up the loss) and exited 0.
      ("--learning_rate=-1", ["--learning_rate=-1", "not a finite number > 0"]),
      # Issue 56's fifth round (J7): inf trained until a step was not finite, exit 75 (which its
      # same command repeats); a decay of nan likewise.
      ("--learning_rate=inf", ["--learning_rate=inf", "not a finite number > 0"]),
      ("--weight_decay_rate=nan", ["--weight_decay_rate=nan", "not a finite number >= 0"]),
      # J8: a dropout of nan trained until a step was not finite (exit 3), one of 1.5 was Keras's
      # traceback, both after run.json was written; --train_minutes=nan ran with no limit, exit 0.
      ("--hidden_dropout_prob=nan", ["--hidden_dropout_prob=nan", "not a dropout probability"]),
      ("--attention_probs_dropout_prob=1.5", ["=1.5", "not a dropout probability in [0, 1)"]),
      ("--train_minutes=nan", ["--train_minutes=nan", "not a finite number >= 0"]),
      ("--mlm_probability=2", ["--mlm_probability=2", "not a fraction in [0, 1]"]),
      ("--continuous_logit_scale=nan", ["--continuous_logit_scale=nan", "not a finite number"]),
      ("--num_train_steps=100", ["--num_warmup_steps=10000 exceeds --num_train_steps=100"]),
      ("--init_checkpoint={tmp}/m", ["--init_checkpoint={tmp}/m: no such model dir or checkpoint"]),
      (
        "--init_checkpoint=hf:{tmp}/absent",
        ["--init_checkpoint=hf:{tmp}/absent: {tmp}/absent is not a folder"],
      ),
    )
  ),
  # Issue 56's probes (F12): the flag won over --config_json in silence.
  (
    "run_pretraining.py",
    [
      "--input_file={tmp}/x",
      "--output_dir={tmp}/run",
      '--config_json={{"hidden_size": 64, "num_hidden_layers": 2}}',
      "--hidden_size=32",
    ],
    ["--config_json sets hidden_size 64 and --hidden_size=32", "give it one way"],
  ),
  (
    "run_pretraining.py",
    ["--input_file={tmp}/t*", "--bucket_boundaries=30,20", "--output_dir={tmp}/run"],
    ["--bucket_boundaries must be positive and strictly increasing, got [30, 20]"],
  ),
  ("create_pretraining_data.py", ["--output_dir={tmp}/data"], ["--input_file is required"]),
  ("beam_data.py", ["--output_dir={tmp}/data"], ["--input_file is required"]),
  ("beam_score.py", ["--model_dir=m"], ["--input_file and --output_file are required"]),
  ("beam_rescore.py", ["--model_dir=m"], ["--output_dir is required"]),
  ("corpus.py", ["--input={tmp}/books.txt"], ["--output_dir is required"]),
  ("ngram.py", ["--score_file={tmp}/sents.txt"], ["--score_file needs --model"]),
  ("ngram.py", ["--order=five"], ["--order=five"]),
  ("reproduce.py", ["--models=tta,gpt"], ["--models", "gpt"]),
  # Issue 56's probes: a --work_dir under a file was a NotADirectoryError traceback.
  ("reproduce.py", ["--work_dir=/dev/null/work"], ["--work_dir /dev/null/work", "not a directory"]),
  # Issue 56's probes (F17): a budget <= 0 was accepted and the data stages ran.
  # (An empty --data_dir: refused there, were the flag not refused first.)
  (
    "reproduce.py",
    ["--budget_minutes=-1", "--data_dir={tmp}"],
    ["--budget_minutes=-1.0", "not a finite number > 0"],
  ),
  (
    "reproduce.py",
    ["--train_steps=0", "--data_dir={tmp}"],
    ["--train_steps=0", "not a positive integer"],
  ),
  ("run_benchmark.py", ["--lengths=abc"], ["--lengths", "positive word counts"]),
  # Issue 56's probes (F16): a FailedPreconditionError traceback after the matmul peak ran.
  ("run_benchmark.py", ["--vocab_file={tmp}"], ["--vocab_file", "{tmp}: is a directory"]),
  ("run_benchmark.py", ["--vocab_file={tmp}/absent"], ["{tmp}/absent: no such file"]),
  # Issue 56: found after the matmul peak ran.
  ("run_benchmark.py", ["--num_attention_heads=3"], ["not a multiple of num_attention_heads (3)"]),
  # Issue 56's probes, third round (b08): a ValueError traceback, after the matmul peak.
  ("run_benchmark.py", ["--vocab_file=/dev/null"], ["/dev/null: the vocab file holds no tokens"]),
  (
    "export_saved_model.py",
    ["--model_dir={tmp}/absent", "--export_dir={tmp}/export"],
    ["{tmp}/absent/config.json"],
  ),
  (
    "export_saved_model.py",
    ["--model_dir={tmp}/absent", "--export_dir={tmp}/export", "--long_inputs=window"],
    ["--long_inputs=window", "score longer ones with score.py"],
  ),
  ("convert_checkpoint.py", ["--output_dir={tmp}/model"], ["give either --input"]),
  (
    "convert_nbest.py",
    [
      "--input={tmp}/absent.tsv",
      "--input_format=tsv",
      "--output_format=kaldi",
      "--output_dir={tmp}/out",
    ],
    ["{tmp}/absent.tsv"],
  ),
  (
    "run_mwer.py",
    ["--init_model={tmp}/absent", "--output_dir={tmp}/mwer", "--data_dir={tmp}"],
    ["{tmp}/absent/config.json"],
  ),
  # Issue 56's fourth round (H2): --window was dropped in silence beside --long_inputs=truncate.
  (
    "score.py",
    ["--model_dir=m", "--long_inputs=truncate", "--window=5", "--stride=2"],
    ["--window and --stride do nothing with --long_inputs=truncate"],
  ),
  # Issue 56's fourth round (H4, H5): each flag was dropped in silence beside the other, exit 0.
  (
    "run_rescoring.py",
    [
      "--format=tsv",
      "--dev_file={tmp}/dev.tsv",
      "--test_file={tmp}/test.tsv",
      "--weights_file={tmp}/weights.json",
      "--allow_negative_weights",
      "--model_dir={tmp}/absent",
    ],
    ["--allow_negative_weights does nothing with --weights_file: leave one of them out"],
  ),
  (
    "run_pretraining.py",
    [
      "--input_file={tmp}/x",
      "--output_dir={tmp}/run",
      "--synthetic_data",
      "--vocab_file={tmp}/v.txt",
    ],
    ["--input_file does nothing with --synthetic_data: leave one of them out"],
  ),
  # Issue 56's fourth round: --model (H6) and --tasks (H8) were dropped in silence, exit 0;
  # --prune past --order (H7) was lmplz's traceback.
  (
    "ngram.py",
    ["--train_text={tmp}/t.txt", "--output={tmp}/m.bin", "--model={tmp}/lm.arpa"],
    ["--model does nothing with --train_text: leave one of them out"],
  ),
  (
    "ngram.py",
    ["--train_text={tmp}/t.txt", "--output={tmp}/m.bin", "--order=3", "--prune=0,0,1,1"],
    ["--prune=0,0,1,1 gives 4 thresholds for an --order=3 model"],
  ),
  # Issue 56's fifth round (J13): an empty or misspelt --memory was lmplz's C++ error and a
  # RuntimeError traceback.
  *(
    (
      "ngram.py",
      ["--train_text={tmp}/t.txt", "--output={tmp}/m.bin", flag],
      [flag, "not an amount"],
    )
    for flag in ("--memory=", "--memory=2 G", "--memory=lots")
  ),
  (
    "run_benchmark.py",
    ["--quick", "--output_dir={tmp}/o", "--peak_only", "--tasks=sts"],
    ["--tasks does nothing with --peak_only: leave one of them out"],
  ),
  # Issue 56's fifth round: `--output_file --overwrite` (a value forgotten) wrote a file named
  # --overwrite and dropped the switch, exit 0 (J1).
  (
    "score.py",
    ["--model_dir={tmp}/absent", "--output_file", "--overwrite"],
    ["--output_file has no value: the argument after it, --overwrite, is a flag"],
  ),
  # `--output_file=` scored every line, then was a FileNotFoundError traceback that left .partial
  # and .partial.json in the working dir (J2).
  ("score.py", ["--model_dir={tmp}/absent", "--output_file="], ["--output_file is empty"]),
  # Issue 56's fifth round (J14): an output of 246 bytes was refused only after the model loaded
  # (its .NAME.partial.json is 261); an --export_dir of 250 was a traceback once traced.
  (
    "score.py",
    ["--model_dir={tmp}/absent", "--output_file={tmp}/" + "x" * 246],
    ["its name is 246 bytes", "keep it to 220 bytes"],
  ),
  (
    "export_saved_model.py",
    ["--model_dir={tmp}/absent", "--export_dir={tmp}/" + "x" * 250],
    ["its name is 250 bytes"],
  ),
  # `--output_file=~/o.jsonl` (no shell expands ~ after =) made a folder named ~ in the working
  # directory and wrote there, exit 0; ngram.py --output, convert_checkpoint.py --output_dir
  # likewise (J10).
  (
    "score.py",
    ["--model_dir={tmp}/absent", "--output_file=~/o.jsonl"],
    ["--output_file ~/o.jsonl: the shell did not expand ~", "--output_file=$HOME/o.jsonl"],
  ),
  # run_sts.py --model_dir= ran with no LM and ended in an IndexError traceback, leaving run.json
  # and pairs/; --pairs_file= ran no set at all, exit 0 (J5).
  ("run_sts.py", ["--model_dir=", "--output_dir={tmp}/o"], ["--model_dir is required"]),
  (
    "run_sts.py",
    ["--model_dir={tmp}/absent", "--pairs_file=", "--output_dir={tmp}/o"],
    ["--pairs_file is given an empty value"],
  ),
  # run_rescoring.py --settings= (a list whose default is not empty) rescored no setting: an
  # empty table, exit 0 (J6).
  (
    "run_rescoring.py",
    ["--model_dir={tmp}/absent", "--settings="],
    ["--settings is given no value"],
  ),
]


# One command of each kind of start-up: an LM's (TensorFlow and the lm package), training's (its
# strategies), Apache Beam's (its overlay's imports) and the data job's (TensorFlow not needed for
# a refusal). Its first case runs as the user runs it, `python COMMAND` in a process of its own;
# the other commands differ from these in their flags, which the in-process cases check, not in
# how they start (a subprocess each would add ~8 s of TensorFlow's import per command).
AS_A_PROCESS = ("score.py", "run_pretraining.py", "beam_score.py", "create_pretraining_data.py")
FIRST_OF_COMMAND = {c: i for i, (c, _, _) in reversed(list(enumerate(CASES)))}


@pytest.mark.parametrize(
  "case", range(len(CASES)), ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)]
)
@pytest.mark.slow(seconds=30)
def test_a_wrong_input_is_one_line_and_exit_2(tmp_path, case):
  command, args, fragments = CASES[case]
  args = [a.format(tmp=tmp_path) for a in args]
  if command in AS_A_PROCESS and FIRST_OF_COMMAND[command] == case:
    result = subprocess.run(
      [sys.executable, os.path.join(ROOT, command)] + args,
      capture_output=True,
      text=True,
      cwd=ROOT,
      stdin=subprocess.DEVNULL,
      # Not asked for TensorFlow's start-up lines, whatever the shell running the suite asks.
      env={**os.environ, startup_log.SHOW_ENV: "0"},
      timeout=HANG_SECONDS,
    )
  else:
    result = commands.run(command, *args)
  # One line and nothing else: a command run as the user runs it holds TensorFlow's start-up
  # lines back (util/startup_log.py).
  lines = [line for line in result.stderr.splitlines() if line]
  assert result.returncode == cli.EXIT_INPUT_ERROR, result.stderr
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith(f"{command}: error: "), lines[0]
  for fragment in fragments:
    assert fragment.format(tmp=tmp_path) in lines[0]
  assert os.listdir(tmp_path) == [], "a refused run wrote nothing"


def test_a_folder_or_device_as_record_files_is_one_line_naming_it(tmp_path):
  # Issue 56's probes, third round (q09, q18): --input_file=DIR was read as a record file at the
  # first step, a FailedPreconditionError traceback.
  import tokenization  # pylint: disable=g-import-not-at-top

  (tmp_path / "records").mkdir()
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(tokenization.SPECIAL_TOKENS) + "\nthe\n")
  result = commands.run(
    "run_pretraining.py",
    f"--input_file={tmp_path}/records",
    f"--vocab_file={vocab}",
    f"--output_dir={tmp_path}/run",
  )
  assert result.returncode == cli.EXIT_INPUT_ERROR, result.stderr
  assert f"--input_file {tmp_path}/records: is a directory" in result.stderr, result.stderr
  assert sorted(os.listdir(tmp_path)) == ["records", "vocab.txt"]
  # A device (or a pipe, <(cat f)) was "not a TFRecord file": it is not a file at all.
  result = commands.run(
    "run_pretraining.py",
    "--input_file=/dev/zero",
    f"--vocab_file={vocab}",
    f"--output_dir={tmp_path}/run",
  )
  assert "--input_file /dev/zero: not a regular file" in result.stderr, result.stderr


def test_check_spec_finds_a_missing_model_without_loading_one(tmp_path, tokenizer):
  from lm import model_dir  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top

  for spec, missing in (
    (str(tmp_path / "absent"), "config.json"),
    (f"kenlm:{tmp_path / 'lm.bin'}", "lm.bin"),
    (f"bert:{tmp_path / 'absent'}", "absent"),
    (f"hf:{tmp_path / 'absent'}", "absent"),
  ):
    with pytest.raises(FileNotFoundError, match=missing):
      inference.check_spec(spec)
  config = modeling.TTAConfig(
    vocab_size=tokenizer.vocab_size,
    hidden_size=8,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=8,
    max_position_embeddings=16,
  )
  model_dir.write_config_and_vocab(str(tmp_path / "tta"), config, tokenizer.vocab_file)
  inference.check_spec(str(tmp_path / "tta"))  # config and vocab there: the load decides


@dataclasses.dataclass
class _LMJob:
  """A job's params with the LM fields, as the commands that load LMs have them."""

  model_dir: list = lm_options_lib.model_dir_param(several=True)
  lm_options: lm_options_lib.LMOptions = lm_options_lib.nested()


@dataclasses.dataclass
class _BudgetJob:
  lm_options: lm_options_lib.LMOptions = lm_options_lib.nested(
    only=("token_budget",), defaults={"long_inputs": "truncate"}
  )


def test_the_lm_flags_read_back_as_load_lm_arguments():
  values = flags.FlagValues()
  cli.define_param_flags(_LMJob, values)
  values(
    [
      "prog",
      "--model_dir=tta=runs/tta,kenlm:lm.bin",
      "--score_sos",
      "--token_budget=64",
      "--stride=5",
    ]
  )
  job = cli.params(_LMJob, values)
  assert lm_options_lib.model_specs(job.model_dir) == [("tta", "runs/tta"), ("", "kenlm:lm.bin")]
  assert job.lm_options.load_kwargs() == {
    "score_eos": True,
    "score_sos": True,
    "token_budget": 64,
    "backend": "tf",
    "long_inputs": "window",
    "window": None,
    "stride": 5,
  }
  # A command that takes --token_budget alone: no other LM flag, the others' defaults.
  budget_only = flags.FlagValues()
  cli.define_param_flags(_BudgetJob, budget_only)
  budget_only(["prog", "--token_budget=32"])
  assert sorted(budget_only) == ["token_budget"]
  assert cli.params(_BudgetJob, budget_only).lm_options.load_kwargs() == {
    "score_eos": True,
    "score_sos": False,
    "token_budget": 32,
    "backend": "tf",
    "long_inputs": "truncate",
    "window": None,
    "stride": None,
  }
  required = flags.FlagValues()
  cli.define_param_flags(_LMJob, required)
  required(["prog"])
  with pytest.raises(cli.InputError, match="--model_dir is required"):
    cli.params(_LMJob, required)


@pytest.mark.parametrize(
  "value, message",
  [
    ("a=kenlm:lm.bin,a=runs/tta", "the name 'a' is given twice"),
    ("runs/tta,x=runs/tta/", "runs/tta/ is given twice"),
  ],
)
def test_two_lms_under_one_name_are_refused_at_parse_time(value, message):
  # Both were scored, then collapsed into one weight and one feature.
  values = flags.FlagValues()
  cli.define_param_flags(_LMJob, values)
  with pytest.raises(flags.IllegalFlagValueError, match=re.escape(message)):
    values(["prog", f"--model_dir={value}"])


def test_unnamed_lms_of_one_directory_name_need_a_name():
  specs = lm_options_lib.named_specs(["a/tta", "b=c/tta", "kenlm:x/5gram.bin"])
  assert specs == [("tta", "a/tta"), ("b", "c/tta"), ("5gram.bin", "kenlm:x/5gram.bin")]
  with pytest.raises(ValueError, match=r"--model_dir names two LMs 'tta' \(a/tta and b/tta\)"):
    lm_options_lib.named_specs(["a/tta", "b/tta"])

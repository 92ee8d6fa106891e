"""The run identity of every command that resumes is derived from its params (`runs.identity`):
a field is part of it unless marked `result=False`, and each field so marked is listed here with
its reason, for a reviewer to see."""

import dataclasses
import importlib
import json
import os

from absl import flags
import commands
import pytest

from beam import beam_data_job
from beam import beam_rescore_job
from beam import beam_score_job
from beam import options as beam_options
from evaluation import sts_job
from finetuning import mwer_job
from finetuning import mwer_training
from lm import inference
from lm import ngram_job
from lm import scoring_job
from nbest import conversion_job
from nbest import rescoring_job
from pretraining import training_job
from reproduction import benchmark_job
import run_pretraining
from util import cli
from util import runs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every field marked `result=False` in the repository, with why a resume may change it.
NOT_RESULT = {
  # Where a Beam pipeline runs: the outputs are the one-process commands' (tests/test_beam.py).
  beam_options.BeamParams: dict.fromkeys(
    ("runner", "direct_num_workers", "direct_running_mode", "pipeline_options"), "engine"
  ),
  beam_data_job.JobParams: {"beam": "engine"},
  beam_score_job.JobParams: {"beam": "engine"},
  beam_rescore_job.JobParams: {"beam": "engine"},
  scoring_job.JobParams: {
    "overwrite": "restart",
    # What changes a record is the number of replicas: in --model_dir's inference.run_identity.
    "strategy": "replicas",
    "tpu": "replicas",
    "num_cpu_devices": "replicas",
  },
  rescoring_job.JobParams: {
    "chunk_size": "caching",
    "overwrite": "restart",
    # Parts of the scoring: a merged cache gives the results of one process.
    "num_shards": "caching",
    "shard_id": "caching",
    "merge": "caching",
  },
  conversion_job.JobParams: {"overwrite": "restart"},
  ngram_job.JobParams: {"overwrite": "restart"},
  mwer_job.JobParams: {"chunk_size": "caching", "overwrite": "restart"},
  mwer_training.MwerParams: {
    "save_every_steps": "checkpointing",
    "output_dir": "per-run",  # the job's own is --output_dir
    "regularizer_weight": "per-run",  # the job's are --regularizer_weights
  },
  sts_job.JobParams: {"overwrite": "restart"},
  benchmark_job.JobParams: {"overwrite": "restart"},
  training_job.JobParams: {
    "eval_file": "evaluation",
    "eval_batch_size": "evaluation",
    "num_train_steps": "extends",
    "num_warmup_steps": "extends",
    # In it as warm_start.identity, when given: a run's warm start is part of its job.
    "init_checkpoint": "folded",
    "init_layers": "folded",
    # In it when set: the identities recorded before the flag existed (unset) still match.
    "pad_to_max_seq_length": "folded",
    # In it as distillation.identity, when --teacher is given.
    "teacher": "folded",
    "distill_temperature": "folded",
    "distill_weight": "folded",
    "save_checkpoints_steps": "checkpointing",
    "keep_checkpoint_max": "checkpointing",
    "eval_every_steps": "evaluation",
    "max_eval_steps": "evaluation",
    "steps_per_loop": "speed",
    "log_every_steps": "logging",
    "strategy": "devices",
    "tpu": "devices",
    "num_cpu_devices": "devices",
    "use_xla": "speed",
    "train_minutes": "budget",
    "max_nonfinite_steps": "stopping",
    "calibrate_logit_scale": "post-training",
    "overwrite": "restart",
    "install_signal_handlers": "process",
    "config_flags": "folded",  # into config_overrides, which is part of it
  },
}


@pytest.fixture(scope="module")
def lm(tiny_tta):
  return inference.load_lm(tiny_tta)


def _score(cls, tmp_path, tiny_tta, lm, **values):
  params = cls(
    model_dir=tiny_tta,
    input_file=str(tmp_path / "in.txt"),
    output_file=str(tmp_path / "out"),
    **values,
  )
  return scoring_job.job_key(lm, params)


def _rescoring(cls, tmp_path, tiny_tta, lm, **values):
  params = cls(lms=[("tta", tiny_tta)], test_file=str(tmp_path / "test.json"), **values)
  return rescoring_job.identity(params)


def _conversion(cls, tmp_path, tiny_tta, lm, **values):
  del tiny_tta, lm
  params = cls(
    input=str(tmp_path / "in.tsv"),
    input_format="tsv",
    output_format="kaldi",
    output_dir=str(tmp_path / "out"),
    **values,
  )
  return conversion_job.identity(params)


def _mwer(cls, tmp_path, tiny_tta, lm, mwer=None, **values):
  return mwer_job.identity(
    cls(
      init_model=tiny_tta,
      output_dir=str(tmp_path / "job"),
      format="tsv",
      **({} if mwer is None else {"mwer": mwer}),
      **values,
    )
  )


def _mwer_training(cls, tmp_path, tiny_tta, lm, **values):
  return _mwer(mwer_job.JobParams, tmp_path, tiny_tta, lm, mwer=cls(**values))


def _sts(cls, tmp_path, tiny_tta, lm, **values):
  return sts_job.identity(cls(model_dir=[tiny_tta], output_dir=str(tmp_path / "out"), **values), [])


def _pretraining(cls, tmp_path, tiny_tta, lm, **values):
  return training_job.run_identity(cls(output_dir=str(tmp_path / "run"), **values))


# Each params dataclass of a command that resumes, and its job's identity of an instance.
JOBS = {
  scoring_job.JobParams: _score,
  rescoring_job.JobParams: _rescoring,
  conversion_job.JobParams: _conversion,
  mwer_job.JobParams: _mwer,
  mwer_training.MwerParams: _mwer_training,
  sts_job.JobParams: _sts,
  training_job.JobParams: _pretraining,
}


def _marked(cls):
  return {f.name for f in dataclasses.fields(cls) if not f.metadata.get("result", True)}


@pytest.mark.parametrize("cls", list(JOBS), ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_a_new_field_is_part_of_the_identity_and_a_marked_one_is_not(cls, tmp_path, tiny_tta, lm):
  # A flag no job knows of, added as a contributor adds one: its resume with another value is
  # refused, naming it.
  with_dummy = dataclasses.make_dataclass(
    "WithDummy", [("dummy", int, cli.param("A flag that changes results.", 0))], bases=(cls,)
  )
  before = JOBS[cls](with_dummy, tmp_path, tiny_tta, lm, dummy=0)
  after = JOBS[cls](with_dummy, tmp_path, tiny_tta, lm, dummy=1)
  assert str(runs.another_job("OUT holds another job", before, after)) == (
    f"OUT holds another job: dummy 0 (this run: 1); {runs.START_OVER}"
  )
  # A field marked result=False, and an output, are left out: another value is the same job.
  same = JOBS[cls](cls, tmp_path, tiny_tta, lm)
  for name in _marked(cls) - _FOLDED.get(cls, set()):
    other = _other(getattr(cls(**_REQUIRED.get(cls, {})), name))
    assert JOBS[cls](cls, tmp_path, tiny_tta, lm, **{name: other}) == same, name
  flags = {cli.flag_name(f) for f in dataclasses.fields(cls) if not cli.is_result(f)}
  assert flags and not flags & set(before)


# The required fields of the params without a default.
_REQUIRED = {
  rescoring_job.JobParams: {"lms": []},
  conversion_job.JobParams: {"input": "i", "output_format": "kaldi", "output_dir": "o"},
  sts_job.JobParams: {"model_dir": []},
  mwer_job.JobParams: {"init_model": "m", "output_dir": "o"},
  training_job.JobParams: {"output_dir": "o"},
}
# Fields marked result=False whose values another field of the identity holds.
_FOLDED = {
  training_job.JobParams: {
    "config_flags",
    "init_checkpoint",
    "init_layers",
    "pad_to_max_seq_length",
    "teacher",
    "distill_temperature",
    "distill_weight",
  }
}


def test_the_config_flags_count_as_the_config_overrides_they_make(tmp_path, tiny_tta, lm):
  flagged = training_job.ConfigFlags(config_json='{"hidden_size": 8}', num_hidden_layers=1)
  by_flags = _pretraining(training_job.JobParams, tmp_path, tiny_tta, lm, config_flags=flagged)
  by_overrides = _pretraining(
    training_job.JobParams,
    tmp_path,
    tiny_tta,
    lm,
    config_overrides={"hidden_size": 8, "num_hidden_layers": 1},
  )
  assert by_flags == by_overrides
  assert by_flags != _pretraining(training_job.JobParams, tmp_path, tiny_tta, lm)


@pytest.mark.parametrize(
  "args, identity",
  [
    ((), False),
    (("--nomixed_precision",), False),
    (("--mixed_precision",), True),
    (("--mixed_precision=true",), True),
    (("--mixed_precision=bfloat16",), True),
    (("--mixed_precision=float16",), "float16"),
  ],
)
def test_mixed_precision_keeps_the_identity_of_the_boolean_it_was(args, identity, tmp_path):
  """A run recorded when --mixed_precision was a boolean (run.json: true or false) resumes with
  its old flags, or the value they mean now; float16 is another job."""
  values = flags.FlagValues()
  run_pretraining.define_flags(values)
  values(["run_pretraining.py", f"--output_dir={tmp_path}", *args])
  params = cli.params(training_job.JobParams, values)
  assert training_job.run_identity(params)["mixed_precision"] == identity


def _other(value):
  """A value of a field other than `value`."""
  if isinstance(value, bool):
    return not value
  if isinstance(value, (int, float)):
    return value + 1
  return "other"


def test_every_field_left_out_of_an_identity_is_listed_with_its_reason():
  marked = {}
  for directory, subdirs, names in os.walk(REPO):
    subdirs[:] = [d for d in subdirs if not d.startswith(".") and d not in ("tests", "third_party")]
    for name in names:
      path = os.path.join(directory, name)
      if not name.endswith(".py"):
        continue
      with open(path, encoding="utf-8") as f:
        if "result=False" not in f.read():
          continue
      module = importlib.import_module(
        os.path.splitext(os.path.relpath(path, REPO))[0].replace(os.sep, ".")
      )
      for value in vars(module).values():
        if dataclasses.is_dataclass(value) and value.__module__ == module.__name__:
          if _marked(value):
            marked[value] = _marked(value)
  assert marked == {cls: set(reasons) for cls, reasons in NOT_RESULT.items()}
  assert all(len(reason.split()) == 1 for r in NOT_RESULT.values() for reason in r.values())


def test_a_record_of_the_previous_format_is_refused_in_one_line(tmp_path, tiny_tta, lm):
  # The identity before it was derived lacked the fields no list named (--data_dir here).
  identity = _mwer(mwer_job.JobParams, tmp_path, tiny_tta, lm)
  old = {name: value for name, value in identity.items() if name != "data_dir"}
  out = tmp_path / "job"
  out.mkdir()
  (out / runs.RECORD_FILE).write_text(json.dumps(old))
  with pytest.raises(cli.InputError) as error:
    runs.Record(str(out), identity, mwer_job.OUTPUTS)
  assert str(error.value) == (
    f"--output_dir {out} holds another job: data_dir absent (this run: none); {runs.START_OVER}"
  )


class Killed(Exception):
  pass


def test_a_score_resume_with_another_flag_is_refused_naming_it(tiny_tta, tmp_path, monkeypatch):
  sentences = tmp_path / "in.txt"
  sentences.write_text("the cat sat\nthe mat\non the cat\n")
  out = tmp_path / "out.jsonl"
  common = [f"--model_dir={tiny_tta}", f"--input_file={sentences}", f"--output_file={out}"]
  common.append("--batch_size=1")
  score_batch, scored = scoring_job.score_batch, []

  def one_batch_then_killed(*args):
    if scored:
      raise Killed
    scored.append(1)
    return score_batch(*args)

  with monkeypatch.context() as patched:
    patched.setattr(scoring_job, "score_batch", one_batch_then_killed)
    assert "Killed" in commands.run("score.py", *common, status=1).stderr
  partial = f"{out}.partial"
  kept = open(partial, encoding="utf-8").read()
  assert len(kept.splitlines()) == 1
  result = commands.run("score.py", *common, "--log_base=10", status=2)
  assert result.stderr.splitlines()[-1] == (
    f"score.py: error: {partial} holds records of another job: log_base e (this run: 10); "
    f"{runs.START_OVER}"
  )
  assert open(partial, encoding="utf-8").read() == kept and not out.exists()
  # A flag marked result=False may change: the same job resumes.
  commands.run("score.py", *common, "--num_cpu_devices=1", status=0)
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["text"] for r in records] == ["the cat sat", "the mat", "on the cat"]


def test_fixed_shapes_are_in_a_pretraining_identity_only_when_set(tmp_path):
  # A run recorded before --pad_to_max_seq_length existed (no such field) resumes unchanged;
  # a run with fixed shapes is another job than a bucketed one.
  params = training_job.JobParams(output_dir=str(tmp_path / "run"))
  assert "pad_to_max_seq_length" not in training_job.run_identity(params)
  fixed = dataclasses.replace(params, pad_to_max_seq_length=True)
  assert training_job.run_identity(fixed)["pad_to_max_seq_length"] is True

"""End-to-end runs of run_rescoring.py and run_sts.py with tiny random models
on (slices of) the real evaluation sets."""

import dataclasses
import json
import os
import re
import shutil

import commands
import conftest
from conftest import lock_files
import numpy as np
import pytest
import tensorflow as tf

from evaluation import metrics
from evaluation import significance
from evaluation import sts_data
from lm import inference
from lm import model_dir
import modeling
from nbest import combination
from nbest import paper_protocol
from nbest import tuning
from nbest import types
from nbest.formats import espnet
import tokenization
from util import cli
from util import io_utils

ROOT = os.path.join(os.path.dirname(__file__), "..")


data_dir_or_skip = conftest.data_dir_or_skip


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
  """Tiny random tta/bilm/unilm model dirs with the T-TA authors' vocab."""
  vocab = os.path.join(data_dir_or_skip(), "reference-vocab", "tta-vocab-lower.sub-32k.txt")
  root = tmp_path_factory.mktemp("models")
  dirs = {}
  for model_type in ("tta", "bilm", "unilm"):
    tf.keras.utils.set_random_seed(3)
    config = modeling.TTAConfig(
      vocab_size=29530,
      hidden_size=16,
      num_hidden_layers=1,
      num_attention_heads=2,
      intermediate_size=16,
      max_position_embeddings=128,
    )
    dirs[model_type] = str(root / model_type)
    model_dir.save_model_dir(modeling.build_model(config, model_type), vocab, dirs[model_type])
  return dirs


# Every progress line is logged (not one per 10 s), so that the tests see them.
ENV = {"TTA_PROGRESS_SECONDS": "0"}


def _run(script, args):
  return commands.run(script, *args, env=ENV)


def run_script(script, *args):
  result = _run(script, args)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def run_failing(script, *args):
  result = _run(script, args)
  assert result.returncode != 0
  return result


def test_model_dir_round_trip_gives_the_same_scores(model_dirs):
  lm = inference.NeuralLM.from_model_dir(model_dirs["tta"])
  again = inference.NeuralLM.from_model_dir(model_dirs["tta"])
  a, b = lm.score(["the man is here"]), again.score(["the man is here"])
  np.testing.assert_array_equal(a[0].token_logprobs, b[0].token_logprobs)
  assert lm.model_type == "tta"


@pytest.mark.slow(seconds=20)
def test_rescoring_end_to_end_and_cache_resume(model_dirs, tmp_path):
  data_dir = data_dir_or_skip()
  out = str(tmp_path / "asr")
  args = [
    f"--lm=tta={model_dirs['tta']},bilm={model_dirs['bilm']}",
    "--pairs=dev_clean:test_clean",
    # Three lists of each set: the checks below recompute every number, whatever the count.
    "--max_lists=3",
    "--data_dir=" + data_dir,
    "--output_dir=" + out,
  ]
  first = run_script("run_rescoring.py", *args)
  with open(os.path.join(out, "rescoring_results.json")) as f:
    rows = json.load(f)
  first_three = types.list_selection(max_lists=3)
  test = espnet.read_espnet_nbest("test_clean", data_dir, first_three)
  dev = espnet.read_espnet_nbest("dev_clean", data_dir, first_three)
  # The reported first pass is the argmax of the s2s score, checked here
  # with jiwer directly.
  am_best = [
    max(l.hyps, key=lambda h: 0.6 * h.scores["decoder"] + 0.4 * h.scores["ctc"]).text for l in test
  ]
  refs = [l.refs[0] for l in test]
  import jiwer  # pylint: disable=g-import-not-at-top

  for row in rows:
    results = {r["setting"]: r for r in row["results"]}
    assert results["am"]["first_pass"] == pytest.approx(100 * jiwer.wer(refs, am_best))
    assert results["full"]["first_pass"] == pytest.approx(
      100 * jiwer.wer(refs, [l.hyps[0].text for l in test])
    )
    assert [lam for lam, _ in results["am"]["dev_curve"]] == list(tuning.DEFAULT_GRID)
    # The reported test WER is what the chosen λ gives with the LM scores
    # recomputed here through the public inference path.
    lm = inference.NeuralLM.from_model_dir(model_dirs[row["lm"]])
    lm_test = [[s.total for s in lm.score([h.text for h in l.hyps])] for l in test]
    lm_dev = [[s.total for s in lm.score([h.text for h in l.hyps])] for l in dev]
    for setting in ("am", "full"):
      sweep = tuning.sweep_lambda(dev, lm_dev, "wer", setting)
      assert results[setting]["lambda"] == sweep.best_lam
      choice = combination.rerank(test, lm_test, sweep.best_lam, setting)
      assert results[setting]["reranked"] == pytest.approx(metrics.evaluate(test, choice, "wer"))
  assert "0 cached" in first.stderr
  second = run_script("run_rescoring.py", *args)
  assert " 0 to score" in second.stderr  # everything came from the cache
  with open(os.path.join(out, "rescoring_results.json")) as f:
    again = json.load(f)
  assert [r["results"] for r in again] == [r["results"] for r in rows]
  # Per-utterance errors add up to the reported WERs, and the stored bootstrap of the LM vs the
  # first pass is what evaluation/significance.py gives on them with the default seed and resamples.
  for r in rows[0]["results"]:
    words = r["reference_words"]
    assert words == [len(ref.split()) for ref in refs]
    assert 100 * sum(r["errors"]) / sum(words) == pytest.approx(r["reranked"])
    assert 100 * sum(r["first_pass_errors"]) / sum(words) == pytest.approx(r["first_pass"])
    want = significance.compare_error_rates(r["errors"], r["first_pass_errors"], words)
    assert r["vs_first_pass"] == pytest.approx(dataclasses.asdict(want))
  with open(os.path.join(out, "rescoring_results.md")) as f:
    assert "| reranked - first pass [95% CI], p |" in f.read()
  assert lock_files(out) == []  # cache/.lm_scores.jsonl.lock, .rescoring_results.json.lock


def _fixable_lists(count):
  """`count` lists whose first pass picks a one-word error and whose second hypothesis is right."""
  return [
    types.NBestList(
      key=f"u{i}",
      refs=["the cat sat"],
      hyps=[
        types.Hypothesis("the bat sat", {"score": -1.0}),
        types.Hypothesis("the cat sat", {"score": -2.0}),
      ],
    )
    for i in range(count)
  ]


def test_a_reranker_that_fixes_many_errors_is_significant():
  lists = _fixable_lists(30)
  lm = [[-9.0, -1.0] for _ in lists]  # the LM strongly prefers the right hypothesis
  result = paper_protocol.rerank_pair(lists, lists, lm, lm, "full", "wer", (1000, 0))
  assert result["first_pass_errors"] == [1] * 30 and result["errors"] == [0] * 30
  assert result["reference_words"] == [3] * 30
  c = result["vs_first_pass"]
  # Every utterance loses its one error in 3 words: -33.33 WER points in every resample.
  assert c["difference"] == pytest.approx(-100 / 3)
  assert c["low"] == pytest.approx(-100 / 3) and c["high"] == pytest.approx(-100 / 3)
  assert c["p_value"] < 0.01 and c["num_units"] == 30
  # An LM that agrees with the first pass changes nothing: difference 0, p 1.
  same = paper_protocol.rerank_pair(
    lists, lists, [[-1.0, -9.0]] * 30, [[-1.0, -9.0]] * 30, "full", "wer"
  )
  assert same["vs_first_pass"]["difference"] == 0.0 and same["vs_first_pass"]["p_value"] == 1.0
  assert "-33.33 [-33.33, -33.33], p < 0.001" in paper_protocol.format_comparison(c)


@pytest.mark.slow(seconds=10)
def test_sts_end_to_end(model_dirs, tmp_path):
  data_dir = data_dir_or_skip()
  out = str(tmp_path / "sts")
  result = run_script(
    "run_sts.py",
    "--model_dir=" + model_dirs["tta"],
    "--representations=context,embed",
    "--max_pairs=40",
    "--sets=stsb_dev,sick_test",
    "--data_dir=" + data_dir,
    "--output_dir=" + out,
  )
  with open(os.path.join(out, "sts_results.json")) as f:
    rows = json.load(f)
  assert [r["representation"] for r in rows] == ["context", "embed"]
  lm = inference.NeuralLM.from_model_dir(model_dirs["tta"])
  pairs = sts_data.read_stsb("dev", data_dir)[:40]
  # One call over the same sentences as run_sts.py, so both see the same
  # batches, and cosines in float64: a random 16-wide model gives cosines
  # within float32 rounding of 1, whose noise (it differs between CPUs) would
  # reorder them.
  sentences = sorted({s for p in pairs for s in (p.sent1, p.sent2)})
  vectors = dict(zip(sentences, lm.sentence_vectors(sentences, pooling="context")))
  a = np.stack([vectors[p.sent1] for p in pairs]).astype(np.float64)
  b = np.stack([vectors[p.sent2] for p in pairs]).astype(np.float64)
  cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
  want = sts_data.pearson_spearman(cos, [p.score for p in pairs])
  pearson, spearman = rows[0]["scores"]["stsb_dev"]
  assert pearson == pytest.approx(want[0], abs=1e-3)
  # A random 16-wide model gives near-equal cosines, so float noise from a
  # different batching reorders a few near-ties: Spearman moves a little.
  assert spearman == pytest.approx(want[1], abs=1.0)
  # The 95% interval brackets the Pearson and is the seeded bootstrap of the stored cosines.
  low, high = rows[0]["pearson_ci"]["stsb_dev"]
  assert low < pearson < high
  assert rows[0]["gold"]["stsb_dev"] == [p.score for p in pairs]
  assert rows[0]["cosines"]["stsb_dev"] == pytest.approx(cos, abs=1e-4)
  again = significance.pearson_interval(rows[0]["cosines"]["stsb_dev"], rows[0]["gold"]["stsb_dev"])
  assert [again.low, again.high] == pytest.approx([low, high])
  with open(os.path.join(out, "sts_results.md")) as f:
    table = f.read()
  assert "| STS-B dev | SICK test |" in table
  assert f"| {pearson:.2f} [{low:.2f}, {high:.2f}] ({spearman:.2f}) |" in table
  assert lock_files(out) == []  # .sts_results.json.lock
  # Encoding progress names model, representation and set, with rate and ETA.
  assert re.search(
    r"tta context stsb_dev: \d+/\d+ sentences \(100%\), [\d.]+/s, .* ETA", result.stderr
  )


# ------------------------------------------- errors, merged results, progress: tiny inputs

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran"]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
  """A tiny random T-TA model dir with an 8-word vocab (no shared data needed)."""
  root = tmp_path_factory.mktemp("tiny")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + WORDS) + "\n")
  tf.keras.utils.set_random_seed(3)
  config = conftest.tiny_config(vocab_size=len(tokenization.SPECIAL_TOKENS) + len(WORDS))
  out = str(root / "tta")
  model_dir.save_model_dir(modeling.build_model(config, "tta"), str(vocab), out)
  return out


def _nbest_json(path, lists):
  """An mlm-scoring N-best JSON of [(reference, [hypotheses])]; first-pass scores -1, -2, ..."""
  data = {
    f"utt{i}": dict(
      {"ref": ref}, **{f"hyp_{r + 1}": {"score": -1.0 - r, "text": h} for r, h in enumerate(hyps)}
    )
    for i, (ref, hyps) in enumerate(lists)
  }
  path.write_text(json.dumps(data, indent=1))
  return str(path)


@pytest.fixture(scope="module")
def nbest_files(tmp_path_factory):
  root = tmp_path_factory.mktemp("nbest")
  lists = [
    ("the cat sat", ["the cat sat", "a cat sat", "the cat ran"]),
    ("a dog ran", ["a dog ran on", "a dog ran", "the dog ran"]),
  ]
  return _nbest_json(root / "dev.json", lists), _nbest_json(root / "test.json", lists[::-1])


def _error_lines(stderr):
  """stderr without info lines and TensorFlow's start-up notes (printed by every process that
  imports TF)."""
  return [
    l for l in stderr.splitlines() if l and not re.match(r"^(WARNING: All log|E0000 |I\d{4} )", l)
  ]


@pytest.mark.slow(seconds=3)
def test_malformed_input_file_is_one_line_naming_file_and_line(
  tiny_model_dir, nbest_files, tmp_path
):
  bad = tmp_path / "test.json"
  bad.write_text('{"utt0": {"ref": "the cat",\n "hyp_1": {"score": "high", "text": "the cat"}}}\n')
  result = run_failing(
    "run_rescoring.py",
    f"--lm={tiny_model_dir}",
    "--format=json",
    f"--dev_file={nbest_files[0]}",
    f"--test_file={bad}",
  )
  assert result.returncode == 2
  lines = _error_lines(result.stderr)
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith(f"run_rescoring.py: error: {bad}:2: ")
  assert "Traceback" not in result.stderr


@pytest.mark.slow(seconds=3)
def test_missing_file_and_bad_model_dir_are_one_line(tiny_model_dir, nbest_files, tmp_path):
  result = run_failing(
    "run_rescoring.py",
    f"--lm={tiny_model_dir}",
    "--format=json",
    f"--dev_file={nbest_files[0]}",
    f"--test_file={tmp_path / 'absent.json'}",
  )
  lines = _error_lines(result.stderr)
  assert result.returncode == 2 and len(lines) == 1, result.stderr
  assert lines[0].startswith("run_rescoring.py: error: ") and "absent.json" in lines[0]
  result = run_failing("run_sts.py", f"--model_dir={tmp_path}", "--max_pairs=2")
  lines = _error_lines(result.stderr)
  assert result.returncode == 2 and len(lines) == 1, result.stderr
  assert "config.json" in lines[0] and "Traceback" not in result.stderr


@pytest.mark.slow(seconds=3)
def test_json_format_without_dev_file_is_refused_up_front(tiny_model_dir, nbest_files):
  result = run_failing(
    "run_rescoring.py", f"--lm={tiny_model_dir}", "--format=json", f"--test_file={nbest_files[1]}"
  )
  assert "--format=json needs --dev_file and --test_file" in result.stderr
  assert "Traceback" not in result.stderr and "TypeError" not in result.stderr
  assert len(_error_lines(result.stderr)) <= 2, result.stderr


@pytest.mark.slow(seconds=5)
def test_lms_run_one_at_a_time_merge_into_one_table(tiny_model_dir, nbest_files, tmp_path):
  out = tmp_path / "asr"
  common = [
    "--format=json",
    "--settings=full",
    f"--dev_file={nbest_files[0]}",
    f"--test_file={nbest_files[1]}",
    f"--output_dir={out}",
  ]
  run_script("run_rescoring.py", f"--lm=first={tiny_model_dir}", *common)
  first = json.loads((out / "rescoring_results.json").read_text())
  second_run = run_script(
    "run_rescoring.py", f"--lm=second={tiny_model_dir}", "--noscore_eos", "--chunk_size=1", *common
  )
  rows = json.loads((out / "rescoring_results.json").read_text())
  assert [r["lm"] for r in rows] == ["first", "second"]
  assert rows[0] == first[0]
  table = (out / "rescoring_results.md").read_text()
  assert "| first |" in table and "| second |" in table
  # Progress names the LM by its row name, with a rate and an ETA, not by its whole identity.
  progress_lines = [l for l in second_run.stderr.splitlines() if "] second: " in l]
  assert any(re.search(r"second: \d+/\d+ sentences .*/s, .*ETA", l) for l in progress_lines)
  assert not any('"weights"' in l for l in second_run.stderr.splitlines())
  # A later run of an LM replaces that LM's rows only.
  run_script("run_rescoring.py", f"--lm=first={tiny_model_dir}", "--sentence_score=mean", *common)
  again = json.loads((out / "rescoring_results.json").read_text())
  assert [r["lm"] for r in again] == ["second", "first"]
  assert again[0] == rows[1]
  # Another evaluation is refused, not mixed into the table: the --output_dir's job (run.json)
  # names what differs before any LM loads.
  refused = run_failing(
    "run_rescoring.py", f"--lm=third={tiny_model_dir}", "--max_lists=1", *common
  )
  assert refused.returncode == 2
  assert "holds another job: max_lists none (this run: 1)" in refused.stderr
  assert json.loads((out / "rescoring_results.json").read_text()) == again


def test_rows_of_another_evaluation_are_refused_not_merged():
  key = {"task": "asr", "pairs": ["dev_clean:test_clean"], "max_lists": None}
  earlier = [{"lm": "a", "evaluation": key}, {"lm": "b", "evaluation": key}]
  rows = [{"lm": "b", "evaluation": key, "new": True}]
  assert paper_protocol.merge_rows(earlier, rows, "r.json") == [earlier[0], rows[0]]
  other = [{"lm": "c", "evaluation": dict(key, max_lists=1)}]
  with pytest.raises(cli.InputError, match="^r.json holds results of another evaluation"):
    paper_protocol.merge_rows(earlier, other, "r.json")


# --------------------------------------- one writer per output; a damaged checkpoint


@pytest.fixture
def truncated_model_dir(tiny_model_dir, tmp_path):
  """A copy of tiny_model_dir whose checkpoint data file lost its second half."""
  broken = str(tmp_path / "broken")
  shutil.copytree(tiny_model_dir, broken)
  data = os.path.join(broken, "ckpt-0.data-00000-of-00001")
  os.truncate(data, os.path.getsize(data) // 2)
  return broken, data


def _model_flags(script, model, nbest_files, tmp_path):
  """The flags that make `script` load `model`, on tiny inputs."""
  if script == "score.py":
    return [f"--model_dir={model}", f"--input_file={nbest_files[0]}"]
  if script == "run_rescoring.py":
    return [
      f"--lm={model}",
      "--format=json",
      "--settings=full",
      f"--dev_file={nbest_files[0]}",
      f"--test_file={nbest_files[1]}",
    ]
  if script == "run_sts.py":
    return [f"--model_dir={model}", "--sets=stsb_dev", "--max_pairs=2"]
  return [f"--model_dir={model}", f"--export_dir={tmp_path / 'export'}"]


@pytest.mark.parametrize(
  "script", ["score.py", "run_rescoring.py", "run_sts.py", "export_saved_model.py"]
)
@pytest.mark.slow(seconds=3)
def test_truncated_checkpoint_is_one_line_naming_the_file(
  script, truncated_model_dir, nbest_files, tmp_path
):
  model, data = truncated_model_dir
  if script == "run_sts.py":
    data_dir_or_skip()  # it reads the STS-B pairs before the model
  result = run_failing(script, *_model_flags(script, model, nbest_files, tmp_path))
  lines = _error_lines(result.stderr)
  assert result.returncode == 2 and len(lines) == 1, result.stderr
  assert lines[0] == (
    f"{script}: error: checkpoint {model}/ckpt-0 cannot be read: {data} is truncated or corrupt "
    "(Read less bytes than requested)"
  )


@pytest.mark.parametrize(
  "script, output",
  [("run_rescoring.py", "cache/lm_scores.jsonl"), ("run_sts.py", "sts_results.json")],
)
@pytest.mark.slow(seconds=3)
def test_a_second_run_into_one_output_dir_exits_2_naming_the_first(
  script, output, tiny_model_dir, nbest_files, tmp_path
):
  out = tmp_path / "out"
  flags = _model_flags(script, tiny_model_dir, nbest_files, tmp_path)
  # This process stands for the first run, in the middle of writing.
  with io_utils.exclusive_lock(str(out / output)):
    result = run_failing(script, *flags, f"--output_dir={out}")
  lines = _error_lines(result.stderr)
  assert result.returncode == 2 and len(lines) == 1, result.stderr
  assert lines[0].startswith(
    f"{script}: error: {out / output} is in use by another run (pid {os.getpid()} on "
  )

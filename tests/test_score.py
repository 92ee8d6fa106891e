"""score.py: sentences in, records out, in input order; resume; shards and their merge."""

import errno
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time

import commands
from conftest import HANG_SECONDS
from conftest import lock_files
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

from lm import inference
from lm import model_dir
from lm import scoring_job
import modeling
import tokenization
from util import cli
from util import io_utils

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "."]
# Mixed lengths, an empty and a blank line, and a line over max_position_embeddings (16).
LINES = [
  "the cat sat on the mat .",
  "",
  "a dog",
  "   ",
  " ".join(["the dog ran"] * 8),
  "the mat",
  "a cat ran on a dog .",
]


@pytest.fixture(scope="module")
def tta_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("score")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + WORDS) + "\n")
  tf.keras.utils.set_random_seed(4)
  config = tiny_config(vocab_size=len(tokenization.SPECIAL_TOKENS) + len(WORDS))
  path = str(root / "tta")
  model_dir.save_model_dir(modeling.build_model(config, "tta"), str(vocab), path)
  return path


@pytest.fixture(scope="module")
def other_tta_dir(tta_dir):
  """A T-TA of the same config and vocab as tta_dir's, with other weights."""
  root = os.path.dirname(tta_dir)
  tf.keras.utils.set_random_seed(5)
  model = modeling.build_model(model_dir.read_config(tta_dir), "tta")
  path = os.path.join(root, "other")
  model_dir.save_model_dir(model, model_dir.vocab_path(tta_dir), path)
  return path


@pytest.fixture(scope="module")
def lm(tta_dir):
  return inference.load_lm(tta_dir)


@pytest.fixture
def input_file(tmp_path):
  path = tmp_path / "input.txt"
  path.write_text("\n".join(LINES) + "\n")
  return str(path)


def args(input_file, output_file, **overrides):
  """`scoring_job.JobParams` of a run: piece scoring, 2 lines a batch, else the defaults."""
  values = dict(input_file=input_file, output_file=output_file, scoring="piece", batch_size=2)
  return scoring_job.JobParams(**dict(values, **overrides))


def read_records(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_records_match_inference_in_input_order(lm, input_file, tmp_path):
  out = str(tmp_path / "out.jsonl")
  scoring_job.score_to_file(lm, args(input_file, out))
  records = read_records(out)
  assert [r["line"] for r in records] == list(range(len(LINES)))
  assert [r["text"] for r in records] == [line.strip() for line in LINES]
  # Empty and blank lines: a record with no score, so nothing shifts.
  assert set(records[1]) == {"line", "text"} and set(records[3]) == {"line", "text"}
  scored = [r for r in records if "score" in r]
  want = lm.score([r["text"] for r in scored])
  for r, w in zip(scored, want):
    assert r["score"] == pytest.approx(w.total, abs=1e-5)
    assert r["num_tokens"] == w.num_tokens == len(r["token_logprobs"]) == len(r["tokens"])
    assert r["tokens"] == list(w.tokens)
    assert sum(r["word_logprobs"]) == pytest.approx(r["score"], abs=1e-4)
    assert r["mean"] == pytest.approx(r["score"] / r["num_tokens"], abs=1e-6)
  assert [r["truncated"] for r in scored] == [False, False, True, False, False]


def test_tsv_and_vectors(lm, input_file, tmp_path):
  out = str(tmp_path / "out.tsv")
  scoring_job.score_to_file(lm, args(input_file, out, format="tsv"))
  with open(out, encoding="utf-8") as f:
    rows = f.read().split("\n")[:-1]
  assert len(rows) == len(LINES)
  assert rows[1] == "\t" and rows[0].endswith("\tthe cat sat on the mat .")
  want = lm.score([LINES[0]])[0].total
  assert float(rows[0].split("\t")[0]) == pytest.approx(want, abs=1e-5)
  vec_out = str(tmp_path / "vec.jsonl")
  scoring_job.score_to_file(lm, args(input_file, vec_out, vectors="context"))
  vector = read_records(vec_out)[2]["vector"]
  np.testing.assert_allclose(vector, lm.sentence_vectors(["a dog"])[0], atol=1e-5)


def test_keyed_lines_copy_the_key_and_score_the_text_alone(lm, tmp_path):
  lines = ["utt1 the cat sat on the mat .", "utt-2\ta  dog", "utt3", "", "utt4 the mat"]
  path = tmp_path / "keyed.txt"
  path.write_text("\n".join(lines) + "\n")
  out = str(tmp_path / "keyed.jsonl")
  scoring_job.score_to_file(lm, args(str(path), out, keyed=True))
  records = read_records(out)
  assert [r["key"] for r in records] == ["utt1", "utt-2", "utt3", "", "utt4"]
  assert [r["text"] for r in records] == ["the cat sat on the mat .", "a  dog", "", "", "the mat"]
  assert "score" not in records[2] and "score" not in records[3]
  want = lm.score(["the cat sat on the mat .", "a  dog", "the mat"])
  for r, w in zip([records[0], records[1], records[4]], want):
    assert r["score"] == pytest.approx(w.total, abs=1e-5)
  tsv = str(tmp_path / "keyed.tsv")
  scoring_job.score_to_file(lm, args(str(path), tsv, keyed=True, format="tsv"))
  rows = read(tsv).split("\n")[:-1]
  assert rows[0].split("\t")[0::2] == ["utt1", "the cat sat on the mat ."]
  assert rows[2] == "utt3\t\t"


@pytest.mark.parametrize("base, log", [("10", np.log10), ("2", np.log2)])
def test_log_base_converts_every_log_prob_and_perplexity_stays(lm, input_file, tmp_path, base, log):
  natural = str(tmp_path / "e.jsonl")
  scoring_job.score_to_file(lm, args(input_file, natural))
  other = str(tmp_path / f"{base}.jsonl")
  scoring_job.score_to_file(lm, args(input_file, other, log_base=base))
  for e, b in zip(read_records(natural), read_records(other), strict=True):
    if "score" not in e:
      assert b == e
      continue
    assert b["log_base"] == base and "log_base" not in e
    # log_b p = log_b(e) * ln p, checked through the probabilities themselves.
    assert b["score"] == pytest.approx(float(log(np.exp(e["score"]))), rel=1e-6)
    np.testing.assert_allclose(
      b["token_logprobs"], log(np.exp(e["token_logprobs"])), rtol=1e-5, atol=2e-6
    )
    assert sum(b["word_logprobs"]) == pytest.approx(b["score"], abs=1e-4)
    assert b["perplexity"] == pytest.approx(e["perplexity"], rel=1e-12)
    assert b["perplexity"] == pytest.approx(float(base) ** -b["mean"], rel=1e-9)


def test_perplexity_and_oov_count_in_each_record(lm, tmp_path):
  path = tmp_path / "oov.txt"
  # "zebra" and "€" are not in the tiny vocab: WordPiece maps each to one [UNK].
  path.write_text("the cat sat\nthe zebra sat on € mat\n")
  out = str(tmp_path / "oov.jsonl")
  scoring_job.score_to_file(lm, args(str(path), out))
  plain, unknown = read_records(out)
  assert plain["num_oov"] == 0
  assert unknown["num_oov"] == unknown["tokens"].count("[UNK]") == 2
  for r in (plain, unknown):
    assert r["perplexity"] == pytest.approx(math.exp(-r["score"] / r["num_tokens"]), rel=1e-9)


def test_oov_count_of_kenlm_scores_is_its_unknown_words():
  scored = inference.ScoredSentence(
    tokens=["the", "zebra", "</s>"], token_logprobs=np.array([-1.0, -9.0, -0.5]), unknown_words=1
  )
  assert scored.num_oov == 1


def test_tsv_in_lm_scorer_order(lm, input_file, tmp_path):
  out = str(tmp_path / "out.tsv")
  scoring_job.score_to_file(lm, args(input_file, out, format="tsv", tsv_order="text_score"))
  rows = read(out).split("\n")[:-1]
  assert rows[1] == "\t"
  text, value = rows[0].split("\t")
  assert text == "the cat sat on the mat ."
  assert float(value) == pytest.approx(lm.score([text])[0].total, abs=1e-5)


@pytest.mark.parametrize("tsv_order", scoring_job.TSV_ORDERS)
def test_tsv_escapes_a_tab_in_the_text_so_each_row_keeps_its_columns(tsv_order):
  key, text = scoring_job.split_key("utt5 A\tB \\ C")
  row = scoring_job.render(scoring_job.record(0, text, key=key) | {"score": -1.5}, "tsv", tsv_order)
  columns = row.split("\t")
  assert len(columns) == 3
  assert columns[0] == "utt5"
  assert "A\\tB \\\\ C" in columns
  assert scoring_job.render({"line": 0, "text": "a\nb\rc"}, "tsv") == "\ta\\nb\\rc"


class Killed(Exception):
  """Stands for the end of a process killed between two batches."""


def run_killed(monkeypatch, lm, run_args, batches):
  """score_to_file killed after `batches` complete batches; returns the partial file."""
  score_batch = scoring_job.score_batch
  done = []

  def score_batch_then_die(*args):
    if len(done) == batches:
      raise Killed
    done.append(1)
    return score_batch(*args)

  with monkeypatch.context() as patched:
    patched.setattr(scoring_job, "score_batch", score_batch_then_die)
    with pytest.raises(Killed):
      scoring_job.score_to_file(lm, run_args)
  assert not os.path.exists(run_args.output_file)
  return run_args.output_file + ".partial"


def read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def test_interrupted_run_resumes_to_the_same_file(lm, input_file, tmp_path, monkeypatch):
  whole = str(tmp_path / "whole.jsonl")
  scoring_job.score_to_file(lm, args(input_file, whole))
  full = read(whole)
  resumed = str(tmp_path / "resumed.jsonl")
  partial = run_killed(monkeypatch, lm, args(input_file, resumed), batches=2)
  assert read(partial) == "".join(full.splitlines(keepends=True)[:4])
  # Killed in the middle of writing the third batch: its torn line is cut off.
  with open(partial, "a", encoding="utf-8") as f:
    f.write(full.splitlines(keepends=True)[4][:10])
  scoring_job.score_to_file(lm, args(input_file, resumed))
  assert read(resumed) == full
  assert not os.path.exists(partial) and not os.path.exists(partial + ".json")


def _grow(path):
  with open(path, "a", encoding="utf-8") as f:
    f.write("the dog sat\n")


def _edit(path):
  text = read(path)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text.replace("the cat sat", "the dog sat", 1))


@pytest.mark.parametrize(
  "change, refusal",
  [
    ("model", r"model_dir\.model tta-\w+ \(this run: tta-\w+\)"),
    ("input", r"input.txt is not the input .* was scored from \(its first 4 lines changed\)"),
    ("batch_size", r"batch_size 2 \(this run: 3\)"),
    ("vectors", r"vectors none \(this run: context\)"),
    # The scoring mode is part of the model's identity (inference.describe).
    ("scoring", r"model_dir\.model tta-\w+ \(this run: tta-\w+\)"),
    ("legacy", r"has no readable record of the run that wrote it"),
    # A windowed run (16-token windows, the model's length) resumed with other window flags.
    ("window", r"window 16 \(this run: 12\)"),
    ("long_inputs", r"long_inputs window \(this run: truncate\)"),
  ],
)
def test_resume_of_another_job_is_refused_until_overwrite(
  lm, tta_dir, other_tta_dir, input_file, tmp_path, monkeypatch, change, refusal
):
  out = str(tmp_path / "out.jsonl")
  first = lm
  if change in ("window", "long_inputs"):
    first = inference.load_lm(tta_dir, long_inputs="window")
  partial = run_killed(monkeypatch, first, args(input_file, out), batches=2)
  kept = read(partial)
  again, overrides = lm, {}
  if change == "window":
    again = inference.load_lm(tta_dir, long_inputs="window", window=12)
  elif change == "long_inputs":
    pass  # `lm` truncates
  elif change == "model":
    again = inference.load_lm(other_tta_dir)
  elif change == "input":
    _edit(input_file)
  elif change == "legacy":  # a partial file of a score.py that wrote no record
    os.remove(partial + ".json")
  else:
    overrides = {
      "batch_size": {"batch_size": 3},
      "vectors": {"vectors": "context"},
      "scoring": {"scoring": "word_l2r"},
    }[change]
  with pytest.raises(cli.InputError, match=refusal) as error:
    scoring_job.score_to_file(again, args(input_file, out, **overrides))
  assert "add --overwrite to start over" in str(error.value)
  assert len(str(error.value).splitlines()) == 1
  assert read(partial) == kept and not os.path.exists(out)  # nothing mixed, nothing lost
  scoring_job.score_to_file(again, args(input_file, out, overwrite=True, **overrides))
  fresh = str(tmp_path / "fresh.jsonl")
  scoring_job.score_to_file(again, args(input_file, fresh, **overrides))
  assert read(out) == read(fresh)


def test_resume_after_the_input_grew(lm, input_file, tmp_path, monkeypatch):
  out = str(tmp_path / "out.jsonl")
  run_killed(monkeypatch, lm, args(input_file, out), batches=2)
  _grow(input_file)
  scoring_job.score_to_file(lm, args(input_file, out))
  whole = str(tmp_path / "whole.jsonl")
  scoring_job.score_to_file(lm, args(input_file, whole))
  assert read(out) == read(whole)


def test_full_disk_is_one_line_and_the_rerun_resumes(lm, input_file, tmp_path, monkeypatch):
  """A full disk, injected as ENOSPC from fsync (where a full disk shows first on file systems
  that allocate at write-back) of the third batch, after its lines reached the file."""
  out = str(tmp_path / "out.jsonl")
  fsync = os.fsync
  batches = []

  def fsync_on_a_full_disk(fd):
    if os.readlink(f"/proc/self/fd/{fd}").endswith(".partial"):
      batches.append(fd)
      if len(batches) == 3:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    fsync(fd)

  with monkeypatch.context() as patched:
    patched.setattr(os, "fsync", fsync_on_a_full_disk)
    with pytest.raises(cli.InputError) as error:
      scoring_job.score_to_file(lm, args(input_file, out))
  assert str(error.value) == (
    f"cannot write {out}.partial (No space left on device): {out}.partial keeps its 4 complete "
    "lines, and a re-run with the same arguments resumes after them"
  )
  assert not os.path.exists(out)  # nothing under the final name
  whole = str(tmp_path / "whole.jsonl")
  scoring_job.score_to_file(lm, args(input_file, whole))
  assert read(out + ".partial") == "".join(read(whole).splitlines(keepends=True)[:4])
  scoring_job.score_to_file(lm, args(input_file, out))
  assert read(out) == read(whole)


def test_a_second_writer_of_the_output_is_refused(lm, input_file, tmp_path):
  out = str(tmp_path / "out.jsonl")
  with io_utils.exclusive_lock(out):  # as a run that holds the output would
    with pytest.raises(cli.InputError) as error:
      scoring_job.score_to_file(lm, args(input_file, out))
  assert str(error.value).startswith(
    f"{out} is in use by another run (pid {os.getpid()} on {socket.gethostname()} since "
  )
  assert not os.path.exists(out) and not os.path.exists(out + ".partial")


@pytest.fixture
def small_blocks(monkeypatch):
  """Blocks of 16 bytes, so LINES's 161 bytes make 11 and three shards get 0-4, none and 5-6:
  the long line 4 starts in shard 0's bytes and ends in shard 2's."""
  monkeypatch.setattr(scoring_job, "BLOCK_BYTES", 16)


class _Recorder:
  """An LM that records the sentences of each `score` call (each call's composition changes a
  neural LM's floats) and scores with `lm`."""

  def __init__(self, lm):
    self.lm, self.calls = lm, []

  def __getattr__(self, name):
    return getattr(self.lm, name)

  def score(self, sentences, scoring=None):
    self.calls.append(list(sentences))
    return self.lm.score(sentences, scoring=scoring)


@pytest.mark.parametrize("num_shards", [2, 3, 5])
@pytest.mark.parametrize("output_format", ["jsonl", "tsv"])
def test_shards_merge_to_the_unsharded_output(
  lm, input_file, tmp_path, small_blocks, num_shards, output_format
):
  whole = str(tmp_path / "whole.jsonl")
  one = _Recorder(lm)
  scoring_job.score_to_file(one, args(input_file, whole, format=output_format))
  out = str(tmp_path / "merged.jsonl")
  shards = _Recorder(lm)
  for shard in range(num_shards):
    scoring_job.score_to_file(
      shards,
      args(input_file, out, num_shards=num_shards, shard_id=shard, format=output_format),
    )
  scoring_job.merge_shards(out, num_shards)
  assert read(out) == read(whole)
  # The shards ask the LM for the batches one process does: a batch never spans two blocks.
  assert sorted(shards.calls) == sorted(one.calls)
  assert one.calls == [["the cat sat on the mat ."], ["a dog"], [LINES[4]], ["the mat", LINES[6]]]


def test_a_shard_reads_only_its_own_bytes(lm, tmp_path, small_blocks):
  # Bytes no shard but shard 0 may read: not UTF-8. Shard 1 scores its lines without them.
  path = tmp_path / "input.txt"
  binary = b"\xff\xfe" + b"-" * 29 + b"\n"  # 32 bytes: shard 0's of 63, blocks of 16
  path.write_bytes(binary + b"the cat sat on the mat .\na dog\n")
  out = str(tmp_path / "out.jsonl")
  scoring_job.score_to_file(lm, args(str(path), out, num_shards=2, shard_id=1))
  records = read_records(scoring_job.shard_path(out, 1, 2))
  assert [r["text"] for r in records] == ["the cat sat on the mat .", "a dog"]
  with pytest.raises(cli.InputError, match=r"input.txt \(line at byte 0\): not valid UTF-8"):
    scoring_job.score_to_file(lm, args(str(path), out, num_shards=2, shard_id=0))


def test_merge_refuses_missing_or_truncated_shards(lm, input_file, tmp_path, small_blocks):
  out = str(tmp_path / "merged.jsonl")
  for shard in (0, 2):
    scoring_job.score_to_file(lm, args(input_file, out, num_shards=3, shard_id=shard))
  with pytest.raises(ValueError, match=r"merged.jsonl-00001-of-00003 is missing"):
    scoring_job.merge_shards(out, 3)
  scoring_job.score_to_file(lm, args(input_file, out, num_shards=3, shard_id=1))
  part = scoring_job.shard_path(out, 2, 3)
  with open(part, encoding="utf-8") as f:
    lines = f.readlines()
  with open(part, "w", encoding="utf-8") as f:
    f.writelines(lines[:-1])
  with pytest.raises(ValueError, match="00002-of-00003 ends before input line"):
    scoring_job.merge_shards(out, 3)
  assert not os.path.exists(out)


@pytest.fixture(scope="module")
def other_lm(other_tta_dir):
  return inference.load_lm(other_tta_dir)


@pytest.mark.parametrize("change", ["model_dir", "batch_size", "input_mtime_ns"])
def test_merge_refuses_shards_of_another_job(
  lm, other_lm, input_file, tmp_path, change, small_blocks
):
  out = str(tmp_path / "merged.jsonl")
  for shard in range(3):
    shard_lm, overrides = lm, {}
    if shard == 2 and change == "model_dir":
      shard_lm = other_lm
    elif shard == 2 and change == "batch_size":
      overrides = {"batch_size": 3}
    elif shard == 2:
      _edit(input_file)
    scoring_job.score_to_file(
      shard_lm, args(input_file, out, num_shards=3, shard_id=shard, **overrides)
    )
  with pytest.raises(ValueError, match=rf"shards of {re.escape(out)} disagree on {change}: "):
    scoring_job.merge_shards(out, 3)
  assert not os.path.exists(out)


def score_command(*flags):
  return [sys.executable, os.path.join(REPO, "score.py"), *flags]


def run_cli(*flags, stdin="", status=0):
  """score.py with `flags` in this process: its stdout, or its stderr when it must fail."""
  result = commands.run("score.py", *flags, stdin=stdin, status=status)
  return result.stdout if status == 0 else result.stderr


def wait_for(condition, process, timeout=HANG_SECONDS):
  """Waits until condition() holds while `process` runs; the timeout only guards a hang."""
  deadline = time.monotonic() + timeout
  while not condition():
    assert process.poll() is None, f"the run ended first (status {process.returncode})"
    assert time.monotonic() < deadline, "the run hung"
    time.sleep(0.05)


@pytest.mark.slow(seconds=7)
def test_merge_from_the_command_line(lm, input_file, tmp_path):
  whole = str(tmp_path / "whole.jsonl")
  scoring_job.score_to_file(lm, args(input_file, whole))
  out = str(tmp_path / "merged.jsonl")
  for shard in range(2):
    scoring_job.score_to_file(lm, args(input_file, out, num_shards=2, shard_id=shard))
  run_cli("--merge", "--num_shards=2", f"--output_file={out}")
  assert read(out) == read(whole)
  assert lock_files(tmp_path) == []


@pytest.mark.slow(seconds=3)
def test_stdin_and_file_give_identical_output(tta_dir, input_file, tmp_path):
  with open(input_file, encoding="utf-8") as f:
    text = f.read()
  from_stdin = run_cli(f"--model_dir={tta_dir}", stdin=text)
  out = str(tmp_path / "cli.jsonl")
  run_cli(f"--model_dir={tta_dir}", f"--input_file={input_file}", f"--output_file={out}")
  with open(out, encoding="utf-8") as f:
    assert f.read() == from_stdin
  assert len(from_stdin.splitlines()) == len(LINES)
  assert lock_files(tmp_path) == []


@pytest.mark.slow(seconds=3)
def test_keyed_tsv_in_base_10_from_the_command_line(lm, tta_dir):
  out = run_cli(
    f"--model_dir={tta_dir}",
    "--keyed",
    "--format=tsv",
    "--tsv_order=text_score",
    "--log_base=10",
    stdin="u1 the cat sat\nu2 a dog\n",
  )
  rows = [row.split("\t") for row in out.splitlines()]
  assert [(key, text) for key, text, _ in rows] == [("u1", "the cat sat"), ("u2", "a dog")]
  want = [s.total / math.log(10) for s in lm.score(["the cat sat", "a dog"])]
  assert [float(v) for _, _, v in rows] == pytest.approx(want, abs=1e-5)


@pytest.mark.slow(seconds=15)
def test_mirrored_over_two_cpu_devices_equals_one_device(tta_dir, input_file, tmp_path):
  one = str(tmp_path / "one.jsonl")
  two = str(tmp_path / "two.jsonl")
  common = [f"--model_dir={tta_dir}", f"--input_file={input_file}", "--vectors=context"]
  run_cli(*common, f"--output_file={one}")
  # Over the 2 logical CPU devices of every test process (conftest.TEST_CPU_DEVICES).
  run_cli(*common, f"--output_file={two}", "--strategy=mirrored", "--num_cpu_devices=2")
  for a, b in zip(read_records(one), read_records(two), strict=True):
    assert a.keys() == b.keys() and a["text"] == b["text"]
    if "score" in a:
      assert b["score"] == pytest.approx(a["score"], abs=1e-5)
      np.testing.assert_allclose(b["vector"], a["vector"], atol=1e-5)


@pytest.mark.slow(seconds=15)
def test_two_runs_into_one_output_the_second_exits_2_naming_the_first(
  tta_dir, input_file, tmp_path
):
  text = read(input_file)
  out = str(tmp_path / "out.jsonl")
  flags = [f"--model_dir={tta_dir}", "--input_file=-", f"--output_file={out}", "--batch_size=2"]
  with open(tmp_path / "first.log", "w") as log:
    first = subprocess.Popen(
      score_command(*flags), stdin=subprocess.PIPE, stderr=log, text=True, cwd=REPO
    )
  try:
    # The first run holds the output's lock while it waits for its input on stdin.
    lock = tmp_path / ".out.jsonl.lock"
    wait_for(lambda: lock.exists() and f"pid {first.pid} on " in lock.read_text(), first)
    error = run_cli(*flags, stdin=text, status=2)
    first.communicate(text, timeout=HANG_SECONDS)
  finally:
    if first.poll() is None:
      first.kill()
  assert (
    error.strip()
    .splitlines()[-1]
    .startswith(f"score.py: error: {out} is in use by another run (pid {first.pid} on ")
  )
  assert "Traceback" not in error
  assert first.returncode == 0, read(tmp_path / "first.log")
  records = read_records(out)
  assert [r["text"] for r in records] == [line.strip() for line in LINES]
  scored = [r for r in records if "score" in r]
  windowed = inference.load_lm(tta_dir, long_inputs="window")  # the command's default
  for r, w in zip(scored, windowed.score([r["text"] for r in scored]), strict=True):
    assert r["score"] == pytest.approx(w.total, abs=1e-5)


def _recorded_lines(partial):
  try:
    with open(partial + ".json", encoding="utf-8") as f:
      return json.load(f)["lines"]
  except (OSError, ValueError):
    return 0


@pytest.fixture(scope="module")
def many_lines(tta_dir, tmp_path_factory):
  """(400 lines of LINES over and over, score.py's uninterrupted output of them at
  --batch_size=4): what a stopped run's rerun must write."""
  root = tmp_path_factory.mktemp("many")
  inputs = root / "many.txt"
  inputs.write_text("".join(f"{LINES[i % len(LINES)]}\n" for i in range(400)))
  whole = root / "whole.jsonl"
  run_cli(
    f"--model_dir={tta_dir}", f"--input_file={inputs}", "--batch_size=4", f"--output_file={whole}"
  )
  return inputs.read_text(), read(whole)


@pytest.mark.slow(seconds=12)
def test_killed_run_restarted_writes_the_uninterrupted_file(tta_dir, tmp_path, many_lines):
  text, whole = many_lines
  out = str(tmp_path / "out.jsonl")
  flags = [f"--model_dir={tta_dir}", "--input_file=-", "--batch_size=4", f"--output_file={out}"]
  process = subprocess.Popen(
    score_command(*flags), stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO
  )
  try:
    # Half the input and no end to it: the run scores it and waits for more, so it is still
    # running, mid-job, when killed (kill -9) after 100 lines are on disk.
    process.stdin.write("".join(text.splitlines(keepends=True)[:200]))
    process.stdin.flush()
    wait_for(lambda: _recorded_lines(out + ".partial") >= 100, process)
    process.kill()
    process.wait()
  finally:
    if process.poll() is None:
      process.kill()
  assert os.path.exists(out + ".partial") and not os.path.exists(out)
  run_cli(*flags, stdin=text)
  assert read(out) == whole


# SIGHUP (the terminal closed): issue 56's fifth round (J11), its default action ended score.py
# with .o.jsonl.lock left behind.
@pytest.mark.parametrize(
  "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
@pytest.mark.slow(seconds=12)
def test_a_stop_by_signal_is_one_line_and_the_rerun_resumes_to_the_uninterrupted_file(
  tta_dir, tmp_path, many_lines, signum
):
  """Ctrl-C (SIGINT) or a scheduler's SIGTERM mid-job: no traceback, exit 128 + the signal
  (util/interrupts.py), and the partial file resumes as after a kill (issue 56)."""
  text, whole = many_lines
  out = str(tmp_path / "out.jsonl")
  flags = [f"--model_dir={tta_dir}", "--input_file=-", "--batch_size=4", f"--output_file={out}"]
  process = subprocess.Popen(
    score_command(*flags),
    stdin=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    cwd=REPO,
  )
  try:
    # Half the input and no end to it: still running, mid-job, when the signal comes.
    process.stdin.write("".join(text.splitlines(keepends=True)[:200]))
    process.stdin.flush()
    wait_for(lambda: _recorded_lines(out + ".partial") >= 100, process)
    process.send_signal(signum)
    _, error = process.communicate(timeout=HANG_SECONDS)
  finally:
    if process.poll() is None:
      process.kill()
  assert process.returncode == 128 + signum, error
  assert "Traceback" not in error, error
  name = signal.Signals(signum).name
  assert error.strip().splitlines()[-1].startswith(f"score.py: stopped by {name}: "), error
  assert os.path.exists(out + ".partial") and not os.path.exists(out)
  run_cli(*flags, stdin=text)
  assert read(out) == whole


@pytest.mark.slow(seconds=4)
def test_a_long_line_is_scored_in_windows_by_default_and_truncated_on_request(tta_dir):
  long = LINES[4]  # 24 pieces: 26 tokens, over the model's 16
  windowed = json.loads(
    run_cli(f"--model_dir={tta_dir}", stdin=long + "\nthe mat\n").split("\n")[0]
  )
  assert windowed["windows"] == 3 and windowed["truncated"] is False
  assert windowed["num_tokens"] == 25 and windowed["tokens"][-1] == "[EOS]"
  cut = json.loads(run_cli(f"--model_dir={tta_dir}", "--long_inputs=truncate", stdin=long))
  assert cut["truncated"] is True and cut["num_tokens"] == 15 and "windows" not in cut
  # A line that fits: the same record either way, without "windows".
  fits = [
    run_cli(f"--model_dir={tta_dir}", f"--long_inputs={m}", stdin="the mat\n")
    for m in (
      "window",
      "truncate",
    )
  ]
  assert fits[0] == fits[1] and "windows" not in json.loads(fits[0])
  error = run_cli(f"--model_dir={tta_dir}", "--window=17", stdin=long, status=2)
  assert "--window=17 is more than the 16 tokens the model takes" in error


@pytest.mark.slow(seconds=3)
def test_an_input_refused_while_scoring_leaves_no_partial_file(tta_dir, tmp_path):
  # Issue 56's probes (F1): a line that is not UTF-8, found after the model loaded, left
  # OUT.partial.json (0 records) behind; a .gz was read as text ("0x8b is not UTF-8"), unnamed.
  import gzip  # pylint: disable=g-import-not-at-top

  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"a \xff b\n")
  packed = tmp_path / "s.txt.gz"
  packed.write_bytes(gzip.compress(b"the cat\n"))
  out = tmp_path / "out" / "o.jsonl"
  for path, why in ((bad, f"{bad}:1: not valid UTF-8"), (packed, f"{packed}: gzip-compressed")):
    error = run_cli(
      f"--model_dir={tta_dir}", f"--input_file={path}", f"--output_file={out}", status=2
    )
    assert why in error, error
  assert sorted(os.listdir(tmp_path)) == ["bad.txt", "s.txt.gz"]


def test_a_compressed_input_is_refused_before_the_model_loads(tmp_path):
  # Probes of issue 56 (third round): a .gz input was refused at its first line, after the model
  # had loaded (minutes for a large one). No model is at --model_dir: the file must be named first.
  import gzip  # pylint: disable=g-import-not-at-top

  packed = tmp_path / "s.txt.gz"
  packed.write_bytes(gzip.compress(b"the cat\n"))
  error = run_cli(f"--model_dir={tmp_path}/absent", f"--input_file={packed}", status=2)
  assert f"{packed}: gzip-compressed; this command reads plain UTF-8 text" in error, error


@pytest.mark.slow(seconds=3)
def test_an_existing_output_file_is_replaced_only_with_overwrite(tta_dir, input_file, tmp_path):
  # Issue 56's probes (F3): a file of the user's at --output_file was written over unasked.
  out = tmp_path / "mine.jsonl"
  out.write_text("mine\n")
  error = run_cli(
    f"--model_dir={tta_dir}", f"--input_file={input_file}", f"--output_file={out}", status=2
  )
  assert f"--output_file {out}: exists; add --overwrite to replace it" in error, error
  assert out.read_text() == "mine\n"
  run_cli(
    f"--model_dir={tta_dir}", f"--input_file={input_file}", f"--output_file={out}", "--overwrite"
  )
  assert len(read_records(out)) == len(LINES)

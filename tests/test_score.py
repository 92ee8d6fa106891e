"""score.py: sentences in, records out, in input order; resume; shards and their merge."""

import json
import os
import subprocess
import sys
import types

from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf

import inference
import model_dir
import modeling
import score
import tokenization

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
def lm(tta_dir):
  return inference.load_lm(tta_dir)


@pytest.fixture
def input_file(tmp_path):
  path = tmp_path / "input.txt"
  path.write_text("\n".join(LINES) + "\n")
  return str(path)


def args(input_file, output_file, **overrides):
  values = dict(
    input_file=input_file,
    output_file=output_file,
    format="jsonl",
    vectors="none",
    batch_size=2,
    num_shards=1,
    shard_id=0,
  )
  values.update(overrides)
  return types.SimpleNamespace(**values)


def read_records(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_records_match_inference_in_input_order(lm, input_file, tmp_path):
  out = str(tmp_path / "out.jsonl")
  score.score_to_file(lm, args(input_file, out))
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
  score.score_to_file(lm, args(input_file, out, format="tsv"))
  with open(out, encoding="utf-8") as f:
    rows = f.read().split("\n")[:-1]
  assert len(rows) == len(LINES)
  assert rows[1] == "\t" and rows[0].endswith("\tthe cat sat on the mat .")
  want = lm.score([LINES[0]])[0].total
  assert float(rows[0].split("\t")[0]) == pytest.approx(want, abs=1e-5)
  vec_out = str(tmp_path / "vec.jsonl")
  score.score_to_file(lm, args(input_file, vec_out, vectors="context"))
  vector = read_records(vec_out)[2]["vector"]
  np.testing.assert_allclose(vector, lm.sentence_vectors(["a dog"])[0], atol=1e-5)


def test_interrupted_run_resumes_to_the_same_file(lm, input_file, tmp_path):
  whole = str(tmp_path / "whole.jsonl")
  score.score_to_file(lm, args(input_file, whole))
  with open(whole, encoding="utf-8") as f:
    full = f.read()
  # A run killed after three complete lines, in the middle of writing the fourth.
  resumed = str(tmp_path / "resumed.jsonl")
  cut = [i for i, c in enumerate(full) if c == "\n"][2] + 1
  with open(resumed + ".partial", "w", encoding="utf-8") as f:
    f.write(full[: cut + 10])
  score.score_to_file(lm, args(input_file, resumed))
  with open(resumed, encoding="utf-8") as f:
    assert f.read() == full
  assert not os.path.exists(resumed + ".partial")


def test_shards_merge_to_the_unsharded_output(lm, input_file, tmp_path):
  whole = str(tmp_path / "whole.jsonl")
  score.score_to_file(lm, args(input_file, whole))
  out = str(tmp_path / "merged.jsonl")
  for shard in range(3):
    score.score_to_file(lm, args(input_file, out, num_shards=3, shard_id=shard))
  score.merge_shards(out, 3)
  with open(whole, encoding="utf-8") as a, open(out, encoding="utf-8") as b:
    assert a.read() == b.read()


def test_merge_refuses_missing_or_truncated_shards(lm, input_file, tmp_path):
  out = str(tmp_path / "merged.jsonl")
  for shard in (0, 2):
    score.score_to_file(lm, args(input_file, out, num_shards=3, shard_id=shard))
  with pytest.raises(ValueError, match=r"merged.jsonl-00001-of-00003 is missing"):
    score.merge_shards(out, 3)
  score.score_to_file(lm, args(input_file, out, num_shards=3, shard_id=1))
  part = score.shard_path(out, 2, 3)
  with open(part, encoding="utf-8") as f:
    lines = f.readlines()
  with open(part, "w", encoding="utf-8") as f:
    f.writelines(lines[:-1])
  with pytest.raises(ValueError, match="00002-of-00003 ends before input line"):
    score.merge_shards(out, 3)
  assert not os.path.exists(out)


def run_cli(*flags, stdin=None):
  result = subprocess.run(
    [sys.executable, os.path.join(REPO, "score.py"), *flags],
    input=stdin,
    capture_output=True,
    text=True,
    cwd=REPO,
  )
  assert result.returncode == 0, result.stderr
  return result.stdout


def test_stdin_and_file_give_identical_output(tta_dir, input_file, tmp_path):
  with open(input_file, encoding="utf-8") as f:
    text = f.read()
  from_stdin = run_cli(f"--model_dir={tta_dir}", stdin=text)
  out = str(tmp_path / "cli.jsonl")
  run_cli(f"--model_dir={tta_dir}", f"--input_file={input_file}", f"--output_file={out}")
  with open(out, encoding="utf-8") as f:
    assert f.read() == from_stdin
  assert len(from_stdin.splitlines()) == len(LINES)


def test_mirrored_over_two_cpu_devices_equals_one_device(tta_dir, input_file, tmp_path):
  one = str(tmp_path / "one.jsonl")
  two = str(tmp_path / "two.jsonl")
  common = [f"--model_dir={tta_dir}", f"--input_file={input_file}", "--vectors=context"]
  run_cli(*common, f"--output_file={one}")
  run_cli(*common, f"--output_file={two}", "--strategy=mirrored", "--num_cpu_devices=2")
  for a, b in zip(read_records(one), read_records(two), strict=True):
    assert a.keys() == b.keys() and a["text"] == b["text"]
    if "score" in a:
      assert b["score"] == pytest.approx(a["score"], abs=1e-5)
      np.testing.assert_allclose(b["vector"], a["vector"], atol=1e-5)


def test_killed_run_restarted_writes_the_uninterrupted_file(tta_dir, tmp_path):
  inputs = tmp_path / "many.txt"
  inputs.write_text("".join(f"{LINES[i % len(LINES)]}\n" for i in range(600)))
  common = [f"--model_dir={tta_dir}", f"--input_file={inputs}", "--batch_size=4"]
  whole = str(tmp_path / "whole.jsonl")
  run_cli(*common, f"--output_file={whole}")
  out = str(tmp_path / "out.jsonl")
  command = [sys.executable, os.path.join(REPO, "score.py"), *common, f"--output_file={out}"]
  process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.DEVNULL)
  # kill -9 once some batches are on disk, mid-run.
  while process.poll() is None:
    if os.path.exists(out + ".partial") and os.path.getsize(out + ".partial") > 20_000:
      process.kill()
      break
  process.wait()
  assert process.returncode != 0, "the run ended before it could be killed; use more lines"
  assert os.path.exists(out + ".partial") and not os.path.exists(out)
  run_cli(*common, f"--output_file={out}")
  with open(whole, encoding="utf-8") as a, open(out, encoding="utf-8") as b:
    assert a.read() == b.read()

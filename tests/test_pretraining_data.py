# coding=utf-8
"""Tests for create_pretraining_data.py (its records are read back as tf.train.Examples; the
training reader, input_pipeline.make_dataset, is tested in test_input_pipeline.py)."""

import bz2
import collections
import glob
import gzip
import io
import lzma
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import zlib

import commands
from conftest import HANG_SECONDS
from conftest import data_dir_or_skip
from conftest import lock_files
import numpy as np
import pytest
import tensorflow as tf

from pretraining import data_job
from pretraining import pretraining_data
from pretraining import pretraining_records
from text import corpus
import tokenization
from util import cli

# ----------------------------------------------------------------------------
# create_pretraining_data on a real Gutenberg excerpt
# ----------------------------------------------------------------------------

_GUTENBERG_ARGS = dict(
  vocab_size=1000,
  max_seq_length=32,
  num_shards=3,
  max_books=1,
  # A 2.7k-sentence book: a short binary search keeps the learner quick.
  vocab_learn_params={"num_iterations": 2, "upper_thresh": 64, "lower_thresh": 2},
)


@pytest.fixture(scope="module")
def gutenberg_tar():
  return corpus.default_gutenberg_tar(data_dir_or_skip(corpus.GUTENBERG_SUBDIR))


@pytest.fixture(scope="module")
def gutenberg(gutenberg_tar, tmp_path_factory):
  """Records from the first Gutenberg book, through corpus.py."""
  out = str(tmp_path_factory.mktemp("gutenberg_records"))
  stats = data_job.create_pretraining_data(gutenberg_tar, out, **_GUTENBERG_ARGS)
  with open(os.path.join(out, pretraining_data.CORPUS_SUBDIR, "train.txt"), encoding="utf-8") as f:
    numbered = [(n, s.strip()) for n, s in enumerate(f.read().split("\n"), 1) if s.strip()]
  tokenizer = tokenization.FullTokenizer(os.path.join(out, "vocab.txt"), do_lower_case=True)
  return out, stats, numbered, tokenizer


def _read_all(pattern):
  """The records of the files matching `pattern`, in file order, parsed as docs/DESIGN.md §5.2
  lays them out: input_ids [n], input_mask [n] and exactly one length."""
  records = []
  for path in sorted(glob.glob(pattern)):
    for serialized in tf.data.TFRecordDataset(path):
      feature = tf.train.Example.FromString(serialized.numpy()).features.feature
      assert set(feature) == {"input_ids", "input_mask", "length"}
      (length,) = feature["length"].int64_list.value
      records.append(
        {
          "input_ids": np.array(feature["input_ids"].int64_list.value),
          "input_mask": np.array(feature["input_mask"].int64_list.value),
          "length": length,
        }
      )
  return records


@pytest.mark.slow(seconds=8)
def test_gutenberg_records_match_tokenizer(gutenberg):
  out, stats, numbered, tokenizer = gutenberg
  sentences = [s for _, s in numbered]
  max_len = _GUTENBERG_ARGS["max_seq_length"]
  assert len(sentences) > 1000
  assert stats["vocab_size"] == len(tokenizer.vocab) <= 1000
  assert list(tokenizer.vocab)[:7] == list(tokenization.SPECIAL_TOKENS)

  records = _read_all(os.path.join(out, "train-*"))
  assert len(records) == len(sentences) == stats["train"]["sentences"]
  assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "train-*"))) == [
    f"train-0000{i}-of-00003.tfrecord" for i in range(3)
  ]
  for r in records:
    ids = r["input_ids"]
    assert ids[0] == tokenizer.sos_id and ids[-1] == tokenizer.eos_id
    assert 3 <= len(ids) <= max_len
    assert ids.max() < len(tokenizer.vocab)
    assert r["length"] == len(ids) and (r["input_mask"] == 1).all()
  assert stats["train"]["tokens"] == sum(len(r["input_ids"]) for r in records)

  # The records are exactly the tokenizer's encodings (shuffled), over-long
  # ones cut by truncate_ids (seeded by the default --random_seed and the position: train.txt is
  # input 0): decoding a record's ids gives a contiguous window of the sentence's pieces.
  pieces = tokenizer.tokenize_batch(sentences)
  expected = collections.defaultdict(list)  # ids -> pieces kept
  for (number, _), sentence_pieces in zip(numbered, pieces):
    ids = [tokenizer.sos_id] + tokenizer.convert_tokens_to_ids(sentence_pieces) + [tokenizer.eos_id]
    position = pretraining_records.position_key(0, number)
    ids = pretraining_records.truncate_ids(ids, max_len, 12345, position)
    kept = tokenizer.convert_ids_to_tokens(ids[1:-1])
    assert any(sentence_pieces[i : i + len(kept)] == kept for i in range(len(sentence_pieces)))
    expected[tuple(ids)].append(kept)
  got = collections.Counter(tuple(r["input_ids"].tolist()) for r in records)
  assert got == collections.Counter({k: len(v) for k, v in expected.items()})
  for ids in got:
    assert tokenizer.convert_ids_to_tokens(ids[1:-1]) == expected[ids][0]
  # Shuffled: not in corpus order.
  assert list(got)[:50] != list(expected)[:50]

  # Truncation is counted.
  n_pieces = [len(p) for p in pieces]
  truncated = sum(1 for n in n_pieces if n + 2 > max_len)
  assert truncated > 0
  assert stats["train"]["truncated"] == truncated
  assert stats["train"]["lengths"]["max"] == max_len
  assert stats["train"]["untruncated_lengths"]["max"] == max(n_pieces) + 2
  assert 0 <= stats["train"]["unk_rate"] < 0.01
  assert stats["train"]["malformed_lines"] == 0


def test_gutenberg_rerun_skips_and_rebuild_removes_stale_shards(gutenberg, gutenberg_tar, tmp_path):
  out, stats, _, _ = gutenberg
  shards = sorted(glob.glob(os.path.join(out, "train-*")))
  mtimes = [os.stat(p).st_mtime_ns for p in shards]
  again = data_job.create_pretraining_data(gutenberg_tar, out, **_GUTENBERG_ARGS)
  assert again["reused"] is True
  assert again["fingerprint"] == stats["fingerprint"]
  assert [os.stat(p).st_mtime_ns for p in shards] == mtimes

  # Other arguments: rebuilt; shards of the old layout are removed so a
  # train-* glob does not mix the two.
  vocab = str(tmp_path / "vocab.txt")
  tf.io.gfile.copy(os.path.join(out, "vocab.txt"), vocab)
  args = dict(
    _GUTENBERG_ARGS, num_shards=2, vocab_file=vocab, vocab_size=None, vocab_learn_params=None
  )
  rebuilt = data_job.create_pretraining_data(gutenberg_tar, out, **args)
  assert "reused" not in rebuilt
  assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "train-*"))) == [
    "train-00000-of-00002.tfrecord",
    "train-00001-of-00002.tfrecord",
  ]
  assert rebuilt["train"]["sentences"] == stats["train"]["sentences"]
  assert not glob.glob(os.path.join(out, "*.tmp-*"))


def _write_lines(path, lines):
  with open(path, "wb") as f:
    f.write(b"".join(lines))
  return str(path)


def test_malformed_line_raises_with_location_or_is_skipped(gutenberg, tmp_path):
  out, _, _, _ = gutenberg
  vocab = os.path.join(out, "vocab.txt")
  bad = _write_lines(
    tmp_path / "bad.txt",
    [b"A good first sentence.\n", b"   \n", b"Caf\xe9 in Latin-1.\n", b"Another good one.\n"],
  )
  with pytest.raises(ValueError, match=r"bad\.txt:3: not valid UTF-8"):
    data_job.create_pretraining_data(
      bad, str(tmp_path / "strict"), vocab_file=vocab, eval_fraction=0.0
    )
  stats = data_job.create_pretraining_data(
    bad, str(tmp_path / "lenient"), vocab_file=vocab, eval_fraction=0.0, skip_malformed=True
  )
  assert stats["train"]["sentences"] == 2
  assert stats["train"]["malformed_lines"] == 1
  assert stats["train"]["malformed_examples"] == [bad + ":3"]
  assert stats["train"]["empty_lines"] == 1
  assert stats["train"]["lines"] == 4


def test_sentence_files_held_out_by_hash_or_eval_file(gutenberg, tmp_path):
  out, _, numbered, _ = gutenberg
  sentences = [s for _, s in numbered]
  vocab = os.path.join(out, "vocab.txt")
  text = [(s + "\n").encode("utf-8") for s in sentences[:400]]
  train = _write_lines(tmp_path / "train.txt", text)
  stats = data_job.create_pretraining_data(
    train,
    str(tmp_path / "a"),
    vocab_file=vocab,
    eval_fraction=0.25,
    num_shards=2,
    num_eval_shards=2,
  )
  n_train, n_eval = stats["train"]["sentences"], stats["eval"]["sentences"]
  assert n_train + n_eval == 400 and 60 < n_eval < 140
  assert len(glob.glob(str(tmp_path / "a" / "eval-*-of-00002.tfrecord"))) == 2
  train_ids = {tuple(r["input_ids"].tolist()) for r in _read_all(str(tmp_path / "a" / "train-*"))}
  eval_ids = {tuple(r["input_ids"].tolist()) for r in _read_all(str(tmp_path / "a" / "eval-*"))}
  assert not train_ids & eval_ids

  evalf = _write_lines(tmp_path / "eval.txt", text[:10])
  stats = data_job.create_pretraining_data(
    train, str(tmp_path / "b"), vocab_file=vocab, eval_files=evalf
  )
  assert stats["train"]["sentences"] == 400
  assert stats["eval"]["sentences"] == 10

  with pytest.raises(ValueError, match="normalization"):
    data_job.create_pretraining_data(
      train, str(tmp_path / "c"), vocab_file=vocab, normalization="librispeech"
    )
  with pytest.raises(ValueError, match="matches no file"):
    data_job.create_pretraining_data(
      str(tmp_path / "nothing*.txt"), str(tmp_path / "d"), vocab_file=vocab
    )


# ----------------------------------------------------------------------------
# The streaming job on a tiny synthetic corpus: workers, resume, jobs, inputs, shuffle
# ----------------------------------------------------------------------------

_WORDS = "the a man woman house river old new green small tall walked saw found quietly".split()


def _sentences(count, seed=0):
  """`count` distinct sentences (each names its number), a few over-long."""
  rng = np.random.default_rng(seed)
  result = []
  for i in range(count):
    words = rng.choice(_WORDS, size=int(rng.integers(2, 30 if i % 50 else 60)))
    result.append(f"line {i} " + " ".join(words))
  return result


@pytest.fixture(scope="module")
def reference_vocab():
  return os.path.join(data_dir_or_skip("reference-vocab"), "reference-vocab", _VOCAB)


_VOCAB = "tta-vocab-lower.sub-32k.txt"


def _small_units(monkeypatch):
  """Blocks of ~2 kB and shuffle units of 64 records: many of each on a tiny corpus."""
  monkeypatch.setattr(pretraining_data, "BLOCK_BYTES", 2000)
  monkeypatch.setattr(pretraining_data, "PILE_RECORDS", 64)


@pytest.fixture
def small_units(monkeypatch):
  _small_units(monkeypatch)


def _text_file(path, sentences, opener=open):
  with opener(path, "wb") as f:
    f.write("".join(s + "\n" for s in sentences).encode("utf-8"))
  return str(path)


def _args(vocab, **kwargs):
  return dict(
    dict(vocab_file=vocab, max_seq_length=24, num_shards=3, eval_fraction=0.1, num_workers=1),
    **kwargs,
  )


def _outputs(directory):
  """{name: bytes} of the shards and the vocab, and data_stats.json without its times."""
  files = {}
  for name in sorted(os.listdir(directory)):
    if name.endswith(".tfrecord") or name == "vocab.txt":
      with open(os.path.join(directory, name), "rb") as f:
        files[name] = f.read()
  stats = pretraining_data.io_utils.read_json_file(os.path.join(directory, "data_stats.json"))
  for key in ("seconds", "sentences_per_second"):
    stats.pop(key)
  files["data_stats.json"] = stats
  return files


@pytest.fixture(scope="module")
def corpus_600(tmp_path_factory):
  root = tmp_path_factory.mktemp("corpus_600")
  sentences = _sentences(600)
  return _text_file(root / "a.txt", sentences), sentences


@pytest.fixture(scope="module")
def corpus_600_outputs(corpus_600, reference_vocab, tmp_path_factory):
  """`_outputs` of one uninterrupted run on corpus_600 with `_args` and `_small_units`' shuffle
  units: what each run of it under `small_units` must end with, whatever its worker count or
  block size, stops and resumes, or jobs."""
  out = str(tmp_path_factory.mktemp("corpus_600_whole"))
  with pytest.MonkeyPatch.context() as patch:
    _small_units(patch)
    data_job.create_pretraining_data(corpus_600[0], out, **_args(reference_vocab))
  return _outputs(out)


def test_any_worker_count_and_block_size_give_the_same_bytes(
  corpus_600, corpus_600_outputs, reference_vocab, tmp_path, small_units, monkeypatch
):
  path, _ = corpus_600
  one = corpus_600_outputs  # one worker
  assert len([n for n in one if n.startswith("train-")]) == 3
  data_job.create_pretraining_data(
    path, str(tmp_path / "w2"), **_args(reference_vocab, num_workers=2)
  )
  assert one == _outputs(tmp_path / "w2")
  assert not os.path.exists(tmp_path / "w2" / data_job.PARTS_SUBDIR)
  # Blocks three times larger: other work units, the same records in the same order.
  monkeypatch.setattr(pretraining_data, "BLOCK_BYTES", 6000)
  data_job.create_pretraining_data(path, str(tmp_path / "big"), **_args(reference_vocab))
  assert one == _outputs(tmp_path / "big")


def _records(directory, split="train"):
  """[(shard, position, ids tuple)] of a split's records."""
  result = []
  for shard, path in enumerate(sorted(glob.glob(os.path.join(directory, f"{split}-*")))):
    for position, serialized in enumerate(tf.data.TFRecordDataset(path)):
      ids = tf.train.Example.FromString(serialized.numpy()).features.feature["input_ids"]
      result.append((shard, position, tuple(ids.int64_list.value)))
  return result


def test_records_are_every_sentence_once_spread_over_shards_and_shuffled(
  reference_vocab, tmp_path, small_units
):
  sentences = _sentences(1200, seed=1)
  path = _text_file(tmp_path / "c.txt", sentences)
  out = str(tmp_path / "out")
  stats = data_job.create_pretraining_data(
    path, out, **_args(reference_vocab, max_seq_length=256, num_shards=4, eval_fraction=0.0)
  )
  tokenizer = tokenization.FullTokenizer(reference_vocab)
  expected = {tuple(ids): i for i, ids in enumerate(tokenizer.encode_batch(sentences))}
  records = _records(out)
  # Every sentence exactly once (each is distinct: it names its line).
  assert collections.Counter(r[2] for r in records) == collections.Counter(list(expected))
  assert stats["train"]["sentences"] == 1200
  # Spread: each shard holds ~300 (binomial, sd 15); a run of consecutive lines spreads too.
  sizes = collections.Counter(r[0] for r in records)
  assert all(200 < sizes[s] < 400 for s in range(4)), sizes
  first_100 = collections.Counter(r[0] for r in records if expected[r[2]] < 100)
  assert len(first_100) == 4 and max(first_100.values()) < 50
  # Shuffled within a shard: position and line number are uncorrelated (|r| ~ 0.06 by chance).
  for shard in range(4):
    lines = [expected[r[2]] for r in records if r[0] == shard]
    r = np.corrcoef(lines, np.arange(len(lines)))[0, 1]
    assert abs(r) < 0.25, (shard, r)


def test_killed_block_work_resumes_without_redoing_blocks_and_ends_the_same(
  corpus_600, corpus_600_outputs, reference_vocab, tmp_path, small_units, monkeypatch
):
  path, _ = corpus_600
  make_block = pretraining_records.make_block
  calls = []

  def dies_after_5(block, data=None):
    if len(calls) == 5:
      raise KeyboardInterrupt  # as a kill: nothing after this block runs
    calls.append(block.index)
    return make_block(block, data)

  monkeypatch.setattr(pretraining_records, "make_block", dies_after_5)
  out = str(tmp_path / "resumed")
  with pytest.raises(KeyboardInterrupt):
    data_job.create_pretraining_data(path, out, **_args(reference_vocab))
  assert not os.path.exists(os.path.join(out, "data_stats.json"))
  done = calls[:]
  calls.clear()
  monkeypatch.setattr(pretraining_records, "make_block", _counting(make_block, calls))
  data_job.create_pretraining_data(path, out, **_args(reference_vocab))
  assert not set(done) & set(calls) and len(done) == 5 and calls  # only the rest was made
  assert _outputs(out) == corpus_600_outputs


def _counting(function, calls):
  def wrapped(block, data=None):
    calls.append(block.index)
    return function(block, data)

  return wrapped


def test_killed_assembly_resumes_after_the_finished_shards(
  corpus_600, corpus_600_outputs, reference_vocab, tmp_path, small_units, monkeypatch
):
  path, _ = corpus_600
  write_records = pretraining_records.write_records
  written = []

  def dies_in_shard_2(shard_path, examples):
    if len(written) == 2:
      next(iter(examples))
      raise KeyboardInterrupt
    written.append(shard_path)
    return write_records(shard_path, examples)

  monkeypatch.setattr(pretraining_records, "write_records", dies_in_shard_2)
  out = str(tmp_path / "resumed")
  with pytest.raises(KeyboardInterrupt):
    data_job.create_pretraining_data(path, out, **_args(reference_vocab))
  first = written[:]
  mtimes = [os.stat(p).st_mtime_ns for p in first]
  monkeypatch.setattr(pretraining_records, "write_records", write_records)
  data_job.create_pretraining_data(path, out, **_args(reference_vocab))
  assert [os.stat(p).st_mtime_ns for p in first] == mtimes  # not written again
  assert _outputs(out) == corpus_600_outputs


def test_jobs_merged_equal_one_job_and_the_merge_checks_its_parts(
  corpus_600, corpus_600_outputs, reference_vocab, tmp_path, small_units
):
  path, _ = corpus_600
  out = str(tmp_path / "jobs")
  jobs = _args(reference_vocab, num_jobs=2)
  with pytest.raises(cli.InputError, match=r"job-00000-of-00002 is missing: run .* --job_id=0"):
    data_job.create_pretraining_data(path, out, merge=True, **jobs)
  part = data_job.create_pretraining_data(path, out, job_id=1, **jobs)
  assert part["part"] == 1 and not os.path.exists(os.path.join(out, "data_stats.json"))
  with pytest.raises(cli.InputError, match=r"job-00000-of-00002 is missing"):
    data_job.create_pretraining_data(path, out, merge=True, **jobs)
  # Another job (another seed) is refused, in one line naming what differs.
  with pytest.raises(cli.InputError, match=r"holds unfinished parts of another job: .*overwrite"):
    data_job.create_pretraining_data(path, out, job_id=0, **dict(jobs, random_seed=7))
  data_job.create_pretraining_data(path, out, job_id=0, **jobs)
  data_job.create_pretraining_data(path, out, merge=True, **jobs)
  assert _outputs(out) == corpus_600_outputs


def _error_lines(result):
  """The command's refusals (its other stderr lines are the log)."""
  return [line for line in result.stderr.splitlines() if ": error: " in line]


def test_another_jobs_unfinished_dir_is_refused_on_one_line(
  corpus_600, reference_vocab, tmp_path, small_units, monkeypatch
):
  path, _ = corpus_600
  out = str(tmp_path / "out")
  make_block = pretraining_records.make_block

  def dies(block, data=None):
    raise KeyboardInterrupt

  monkeypatch.setattr(pretraining_records, "make_block", dies)
  with pytest.raises(KeyboardInterrupt):
    data_job.create_pretraining_data(path, out, **_args(reference_vocab))
  monkeypatch.setattr(pretraining_records, "make_block", make_block)
  result = commands.run(
    "create_pretraining_data.py",
    f"--input_file={path}",
    f"--output_dir={out}",
    f"--vocab_file={reference_vocab}",
    "--max_seq_length=32",
    "--num_shards=3",
    "--eval_fraction=0.1",
    "--num_workers=1",
    status=2,
  )
  (error,) = _error_lines(result)
  assert "holds unfinished parts of another job: args.max_seq_length 24 (this run: 32)" in error
  assert "--overwrite" in error
  commands.run(
    "create_pretraining_data.py",
    f"--input_file={path}",
    f"--output_dir={out}",
    f"--vocab_file={reference_vocab}",
    "--max_seq_length=32",
    "--num_shards=3",
    "--num_workers=1",
    "--overwrite",
    status=0,
  )
  assert len(glob.glob(os.path.join(out, "train-*-of-00003.tfrecord"))) == 3
  assert lock_files(out) == []  # the parts' and each part's, taken by the killed run too


def test_compressed_directory_and_glob_inputs_read_as_plain(
  corpus_600, reference_vocab, tmp_path, small_units
):
  _, sentences = corpus_600
  plain = tmp_path / "plain"
  plain.mkdir()
  halves = [sentences[:300], sentences[300:]]
  _text_file(plain / "part-0.txt", halves[0])
  _text_file(plain / "part-1.txt", halves[1])
  data_job.create_pretraining_data(
    str(plain / "part-*.txt"), str(tmp_path / "out_plain"), **_args(reference_vocab)
  )
  expected = _outputs(tmp_path / "out_plain")
  expected["data_stats.json"] = {
    k: v
    for k, v in expected["data_stats.json"].items()
    if k not in ("args", "input_sha256", "fingerprint", "key")
  }
  for name, opener in (("gz", gzip.open), ("bz2", bz2.open), ("xz", lzma.open)):
    directory = tmp_path / name
    directory.mkdir()
    _text_file(directory / f"part-0.txt.{name}", halves[0], opener)
    _text_file(directory / f"part-1.txt.{name}", halves[1], opener)
    out = tmp_path / f"out_{name}"
    stats = data_job.create_pretraining_data(str(directory), str(out), **_args(reference_vocab))
    assert len(stats["input_sha256"]) == 2
    got = _outputs(out)
    got["data_stats.json"] = {
      k: v
      for k, v in got["data_stats.json"].items()
      if k not in ("args", "input_sha256", "fingerprint", "key")
    }
    assert got == expected, name


def test_bad_byte_empty_and_missing_files_are_one_line_errors(reference_vocab, tmp_path):
  good = _text_file(tmp_path / "good.txt", ["a sentence", "another one"])
  bad = tmp_path / "bad.txt.gz"
  with gzip.open(bad, "wb") as f:
    f.write(b"fine\nalso fine\nCaf\xe9\n")
  empty = _text_file(tmp_path / "empty.txt", ["", "  "])
  cases = [
    (f"{good},{bad}", r"bad\.txt\.gz:3: not valid UTF-8"),
    (f"{good},{empty}", r"empty\.txt: no sentence"),
    (str(tmp_path / "missing.txt"), r"missing\.txt' matches no file"),
  ]
  for inputs, message in cases:
    result = commands.run(
      "create_pretraining_data.py",
      f"--input_file={inputs}",
      f"--output_dir={tmp_path / 'out'}",
      f"--vocab_file={reference_vocab}",
      status=2,
    )
    (error,) = _error_lines(result)
    assert re.search(message, error), error
    # A refused run leaves no (empty) --output_dir behind.
    assert not os.path.exists(tmp_path / "out"), inputs


def _damaged_gz(path, text):
  """Writes `text` as a .gz whose deflate stream breaks mid-way (a zlib.error, before gzip's own
  CRC check): stored blocks (level 0), the second's length no longer the complement of its check."""
  data = bytearray(gzip.compress(text, compresslevel=0, mtime=0))
  # The gzip header (10 bytes), the first block's header byte, LEN and NLEN, then its LEN bytes.
  second = 15 + int.from_bytes(data[11:13], "little")
  data[second + 1] ^= 0xFF
  with pytest.raises(zlib.error):
    gzip.decompress(bytes(data))
  path.write_bytes(bytes(data))


def _truncated_tar_xz(path, text):
  """Writes a Gutenberg-like .tar.xz of `text`, cut in the middle of its xz stream."""
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
    info = tarfile.TarInfo("texts/0001.txt")
    info.size = len(text)
    tar.addfile(info, io.BytesIO(text))
  path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])


@pytest.mark.parametrize(
  "name, damage", [("corpus.txt.gz", _damaged_gz), ("books.tar.xz", _truncated_tar_xz)]
)
def test_a_damaged_or_truncated_compressed_input_is_one_line_and_leaves_nothing(
  reference_vocab, tmp_path, name, damage
):
  """Issue 56: a zlib.error and a tarfile.ReadError were tracebacks that left --output_dir."""
  sentences = _sentences(3000)
  bad = tmp_path / name
  damage(bad, "".join(s + "\n" for s in sentences).encode("utf-8"))
  out = tmp_path / "out"
  result = commands.run(
    "create_pretraining_data.py",
    f"--input_file={bad}",
    f"--output_dir={out}",
    f"--vocab_file={reference_vocab}",
    status=2,
  )
  (error,) = _error_lines(result)
  assert f"create_pretraining_data.py: error: {bad}: cannot read (" in error, error
  assert not out.exists()


def test_an_output_dir_inside_an_input_dir_is_refused_from_the_first_run(
  corpus_600, reference_vocab, tmp_path
):
  """Issue 56: --input_file=DIR --output_dir=DIR/records was refused only on the re-run, whose
  expanded input list held the first run's records."""
  directory = tmp_path / "sentences"
  directory.mkdir()
  _text_file(directory / "a.txt", corpus_600[1])
  result = commands.run(
    "create_pretraining_data.py",
    f"--input_file={directory}",
    f"--output_dir={directory / 'records'}",
    f"--vocab_file={reference_vocab}",
    status=2,
  )
  (error,) = _error_lines(result)
  assert f"--output_dir {directory / 'records'} lies inside --input_file {directory}" in error
  assert os.listdir(directory) == ["a.txt"]


def test_a_folder_as_vocab_file_is_refused_while_parsing(tmp_path):
  """Issue 56's probes, third round (c19): --vocab_file=DIR was `[Errno 21] Is a directory`,
  after --output_dir had been made (and was left behind)."""
  text = tmp_path / "a.txt"
  _text_file(text, ["the cat sat"])
  folder = tmp_path / "vocab"
  folder.mkdir()
  out = tmp_path / "out"
  result = commands.run(
    "create_pretraining_data.py",
    f"--input_file={text}",
    f"--output_dir={out}",
    f"--vocab_file={folder}",
    status=2,
  )
  (error,) = _error_lines(result)
  assert f"--vocab_file={folder}: {folder}: is a directory; give a file" in error, error
  assert not out.exists()


def test_a_finished_part_cut_short_is_made_again_by_the_job_the_merge_names(
  corpus_600, corpus_600_outputs, reference_vocab, tmp_path, small_units
):
  """Issue 56: the merge refused such a part and advised its --job_id, which found its done marker
  and did nothing: the two refused each other in a loop."""
  path, _ = corpus_600
  out = str(tmp_path / "jobs")
  jobs = _args(reference_vocab, num_jobs=2)
  for job_id in range(2):
    data_job.create_pretraining_data(path, out, job_id=job_id, **jobs)
  part = os.path.join(out, data_job.PARTS_SUBDIR, "job-00001-of-00002")
  records = sorted(glob.glob(os.path.join(part, "block-*.rec")))[0]
  os.truncate(records, os.path.getsize(records) // 2)
  with pytest.raises(cli.InputError, match=r"1 blocks to do\): run .* --job_id=1 --num_jobs=2"):
    data_job.create_pretraining_data(path, out, merge=True, **jobs)
  data_job.create_pretraining_data(path, out, job_id=1, **jobs)  # as the refusal says
  data_job.create_pretraining_data(path, out, merge=True, **jobs)
  assert _outputs(out) == corpus_600_outputs


def _live_processes_of_group(group):
  """The processes of process group `group` that are not zombies (Linux /proc)."""
  live = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    except OSError:
      continue  # ended meanwhile
    if int(fields[2]) == group and fields[0] != "Z":
      live.append(int(pid))
  return live


@pytest.mark.slow(seconds=30)
def test_ctrl_c_with_two_workers_is_one_line_and_the_rerun_ends_as_an_uninterrupted_run(
  reference_vocab, tmp_path, small_units
):
  """Issue 56: Ctrl-C (SIGINT to the terminal's whole process group) printed the workers' and the
  parent's KeyboardInterrupt tracebacks and once hung on a worker the signal had killed."""
  path = _text_file(tmp_path / "a.txt", _sentences(6000))
  flags_ = [
    f"--input_file={path}",
    f"--vocab_file={reference_vocab}",
    "--max_seq_length=24",
    "--num_shards=3",
    "--eval_fraction=0.1",
    "--num_workers=2",
  ]
  out = tmp_path / "stopped"
  # The command with `small_units`' blocks (hundreds: the workers are busy when the signal comes),
  # in a session of its own, as a terminal runs it.
  code = (
    "import sys; sys.argv[0] = 'create_pretraining_data.py'; "
    "from pretraining import pretraining_data as p; p.BLOCK_BYTES, p.PILE_RECORDS = 2000, 64; "
    "import create_pretraining_data as c; from util import cli; c.define_flags(); cli.run(c.main)"
  )
  process = subprocess.Popen(
    [sys.executable, "-c", code, *flags_, f"--output_dir={out}"],
    cwd=commands.REPO,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
    text=True,
    start_new_session=True,
  )
  try:
    part = out / data_job.PARTS_SUBDIR / "job-00000-of-00001"
    while process.poll() is None and not list(part.glob("block-*.json")):
      time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    _, error = process.communicate(timeout=HANG_SECONDS)
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
  assert process.returncode == 130, error
  assert "Traceback" not in error, error
  last = error.strip().splitlines()[-1]
  assert last.startswith("create_pretraining_data.py: stopped by SIGINT: "), error
  deadline = time.monotonic() + 60
  while _live_processes_of_group(process.pid) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert not _live_processes_of_group(process.pid), "the workers outlived the command"
  commands.run("create_pretraining_data.py", *flags_, f"--output_dir={out}", status=0)
  commands.run(
    "create_pretraining_data.py", *flags_, f"--output_dir={tmp_path / 'whole'}", status=0
  )
  assert _outputs(out) == _outputs(tmp_path / "whole")


def test_length_stats_from_a_histogram_match_numpy():
  rng = np.random.default_rng(3)
  lengths = rng.integers(3, 140, size=997)
  stats = pretraining_records.length_stats(collections.Counter(lengths.tolist()))
  assert stats["max"] == lengths.max()
  assert stats["mean"] == round(float(lengths.mean()), 3)
  for p, value in stats["percentiles"].items():
    assert value == pytest.approx(np.percentile(lengths, int(p)))
  assert sum(stats["histogram"].values()) == 997
  assert stats["histogram"]["1-16"] == int((lengths <= 16).sum())


def test_workers_need_no_tensorflow():
  code = (
    "import sys; import create_pretraining_data; from pretraining import pretraining_records; "
    "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
  )
  subprocess.run([sys.executable, "-c", code], cwd=commands.REPO, check=True)


def test_vocab_learner_reads_a_seeded_sample_of_training_sentences(
  corpus_600, reference_vocab, tmp_path, small_units, monkeypatch
):
  path, sentences = corpus_600
  samples = []

  def learner(sample, vocab_size, **kwargs):
    samples.append(list(sample))
    return list(tokenization.load_vocab(reference_vocab))

  monkeypatch.setattr(tokenization, "build_vocab", learner)
  args = _args(None, vocab_file=None, vocab_size=100, vocab_max_sentences=200)
  data_job.create_pretraining_data(path, str(tmp_path / "a"), **args)
  data_job.create_pretraining_data(path, str(tmp_path / "b"), **dict(args, num_workers=2))
  first, second = samples
  assert first == second  # seeded
  # Each of the 600 lines kept with probability 1/3 (sd ~12), then the held-out 10% left out.
  assert 140 < len(first) < 230
  held_out = {s for s in sentences if pretraining_data.io_utils.unit_hash(12345, s) < 0.1}
  assert first and not set(first) & held_out and set(first) <= set(sentences)
  # Spread over the corpus, not its first lines.
  lines = sorted(sentences.index(s) for s in first)
  assert lines[0] < 30 and lines[-1] > 570


@pytest.mark.slow(seconds=15)
def test_kill_9_then_the_same_command_ends_as_an_uninterrupted_run(
  corpus_600, reference_vocab, tmp_path
):
  """A real SIGKILL of the command once it has started its parts (wherever it then is: in the
  blocks or the assembly); the same command then ends with the bytes of an uninterrupted run."""
  path, _ = corpus_600
  flags_ = [
    f"--input_file={path}",
    f"--vocab_file={reference_vocab}",
    "--max_seq_length=24",
    "--num_shards=3",
    "--eval_fraction=0.1",
    "--num_workers=2",
  ]
  out = tmp_path / "killed"
  process = subprocess.Popen(
    [sys.executable, "create_pretraining_data.py", *flags_, f"--output_dir={out}"],
    cwd=commands.REPO,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  part = out / data_job.PARTS_SUBDIR / "job-00000-of-00001" / "job.json"
  while process.poll() is None and not part.exists():
    time.sleep(0.05)
  process.kill()
  assert process.wait() == -9, "the run ended before it could be killed"
  commands.run("create_pretraining_data.py", *flags_, f"--output_dir={out}", status=0)
  commands.run(
    "create_pretraining_data.py", *flags_, f"--output_dir={tmp_path / 'whole'}", status=0
  )
  assert _outputs(out) == _outputs(tmp_path / "whole")


def test_parts_left_by_a_kill_after_the_stamp_are_removed_by_the_rerun(
  corpus_600, reference_vocab, tmp_path, monkeypatch
):
  path, _ = corpus_600
  out = str(tmp_path / "out")
  remove_parts = data_job._remove_parts

  def killed(directory):
    raise KeyboardInterrupt

  monkeypatch.setattr(data_job, "_remove_parts", killed)
  with pytest.raises(KeyboardInterrupt):
    data_job.create_pretraining_data(path, out, **_args(reference_vocab))
  parts = os.path.join(out, data_job.PARTS_SUBDIR)
  assert os.path.isdir(parts) and os.path.exists(os.path.join(out, "data_stats.json"))
  monkeypatch.setattr(data_job, "_remove_parts", remove_parts)
  again = data_job.create_pretraining_data(path, out, **_args(reference_vocab))
  assert again["reused"] is True and not os.path.exists(parts)


def test_parts_go_file_by_file_and_a_file_of_the_users_keeps_its_folder(
  corpus_600, reference_vocab, tmp_path
):
  # Issue 56: the whole parts/ folder went at the end, a README the user put in it too.
  path, _ = corpus_600
  parts = tmp_path / "out" / data_job.PARTS_SUBDIR
  parts.mkdir(parents=True)
  (parts / "README.txt").write_text("mine\n")
  data_job.create_pretraining_data(path, str(tmp_path / "out"), **_args(reference_vocab))
  assert os.listdir(parts) == ["README.txt"] and (parts / "README.txt").read_text() == "mine\n"


def test_an_input_read_once_or_a_refused_vocab_leaves_no_parts(tmp_path):
  # Issue 56's probes (F8): a pipe was "File or stream is not seekable." without its name (the
  # workers read the input a second time), and a refusal after the part began left parts/.
  text = _write_lines(tmp_path / "s.txt", [b"the cat sat on the mat\n"] * 3)
  with pytest.raises(ValueError, match=f"{os.devnull}: not a regular file"):
    data_job.create_pretraining_data(
      os.devnull, str(tmp_path / "piped"), vocab_size=30, input_format="sentences"
    )
  empty = tmp_path / "empty_vocab.txt"
  empty.write_text("")
  out = tmp_path / "out"
  out.mkdir()  # the user's: stays, empty
  with pytest.raises(ValueError, match="empty_vocab.txt"):
    data_job.create_pretraining_data(
      text, str(out), vocab_file=str(empty), eval_fraction=0.0, input_format="sentences"
    )
  assert sorted(os.listdir(tmp_path)) == ["empty_vocab.txt", "out", "s.txt"]
  assert os.listdir(out) == []

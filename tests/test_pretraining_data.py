# coding=utf-8
"""Tests for create_pretraining_data.py (its records are read back as tf.train.Examples; the
training reader, input_pipeline.make_dataset, is tested in test_input_pipeline.py)."""

import collections
import glob
import os

from conftest import data_dir_or_skip
import numpy as np
import pytest
import tensorflow as tf

from pretraining import pretraining_data
from pretraining import pretraining_records
from text import corpus
import tokenization

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
  stats = pretraining_data.create_pretraining_data(gutenberg_tar, out, **_GUTENBERG_ARGS)
  sentences = [
    s
    for _, s in pretraining_data.read_sentence_file(
      os.path.join(out, pretraining_data.CORPUS_SUBDIR, "train.txt")
    )
  ]
  tokenizer = tokenization.FullTokenizer(os.path.join(out, "vocab.txt"), do_lower_case=True)
  return out, stats, sentences, tokenizer


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
  out, stats, sentences, tokenizer = gutenberg
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
  # ones cut by truncate_ids (seeded by the default --random_seed): decoding a
  # record's ids gives a contiguous window of the sentence's pieces.
  pieces = tokenizer.tokenize_batch(sentences)
  expected = collections.defaultdict(list)  # ids -> pieces kept
  for sentence, sentence_pieces in zip(sentences, pieces):
    ids = [tokenizer.sos_id] + tokenizer.convert_tokens_to_ids(sentence_pieces) + [tokenizer.eos_id]
    ids = pretraining_records.truncate_ids(ids, max_len, 12345, sentence)
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
  again = pretraining_data.create_pretraining_data(gutenberg_tar, out, **_GUTENBERG_ARGS)
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
  rebuilt = pretraining_data.create_pretraining_data(gutenberg_tar, out, **args)
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
    pretraining_data.create_pretraining_data(
      bad, str(tmp_path / "strict"), vocab_file=vocab, eval_fraction=0.0
    )
  stats = pretraining_data.create_pretraining_data(
    bad, str(tmp_path / "lenient"), vocab_file=vocab, eval_fraction=0.0, skip_malformed=True
  )
  assert stats["train"]["sentences"] == 2
  assert stats["train"]["malformed_lines"] == 1
  assert stats["train"]["malformed_examples"] == [bad + ":3"]
  assert stats["train"]["empty_lines"] == 1
  assert stats["train"]["lines"] == 4


def test_sentence_files_held_out_by_hash_or_eval_file(gutenberg, tmp_path):
  out, _, sentences, _ = gutenberg
  vocab = os.path.join(out, "vocab.txt")
  text = [(s + "\n").encode("utf-8") for s in sentences[:400]]
  train = _write_lines(tmp_path / "train.txt", text)
  stats = pretraining_data.create_pretraining_data(
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
  stats = pretraining_data.create_pretraining_data(
    train, str(tmp_path / "b"), vocab_file=vocab, eval_files=evalf
  )
  assert stats["train"]["sentences"] == 400
  assert stats["eval"]["sentences"] == 10

  with pytest.raises(ValueError, match="normalization"):
    pretraining_data.create_pretraining_data(
      train, str(tmp_path / "c"), vocab_file=vocab, normalization="librispeech"
    )
  with pytest.raises(ValueError, match="matches no file"):
    pretraining_data.create_pretraining_data(
      str(tmp_path / "nothing*.txt"), str(tmp_path / "d"), vocab_file=vocab
    )

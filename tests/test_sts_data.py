"""Tests of evaluation/sts_data.py: the real STS-B / SICK files, malformed files, and the
correlations.

Expected counts come from stsb/SOURCE.md and sick/SOURCE.md.
"""

import math
import os

from conftest import data_dir_or_skip
import pytest
import scipy.stats

from evaluation import sts_data


@pytest.mark.parametrize("split, count", [("train", 5749), ("dev", 1500), ("test", 1379)])
def test_stsb_real_counts(split, count):
  data_dir_or_skip("stsb")
  pairs = sts_data.read_stsb(split)
  assert len(pairs) == count
  assert all(0.0 <= p.score <= 5.0 and p.sent1 and p.sent2 for p in pairs)


def test_stsb_real_content():
  data_dir_or_skip("stsb")
  dev = sts_data.read_stsb("dev")
  assert dev[0] == (
    "A man with a hard hat is dancing.",
    "A man wearing a hard hat is dancing.",
    5.0,
  )
  # SOURCE.md: 110 dev lines carry '"'; a quoting CSV reader would merge or drop rows.
  assert sum('"' in p.sent1 or '"' in p.sent2 for p in dev) == 110
  test = sts_data.read_stsb("test")
  assert test[0] == ("A girl is styling her hair.", "A girl is brushing her hair.", 2.5)


def test_sick_real_counts():
  root = data_dir_or_skip("sick")
  test = sts_data.read_sick()
  assert len(test) == 4906
  assert all(1.0 <= p.score <= 5.0 for p in test)
  path = os.path.join(root, sts_data.SICK_FILE)
  assert len(sts_data.read_sick_file(path, "TRAIN")) == 4439
  assert len(sts_data.read_sick_file(path, "TRIAL")) == 495
  everything = sts_data.read_sick_file(path, None)
  assert len(everything) == 9840
  # The first data row (a TRAIN pair) parses with its CR stripped from the last column.
  assert everything[0] == (
    "A group of kids is playing in a yard and an old man is standing in the background",
    "A group of boys in a yard is playing and a man is standing in the background",
    4.5,
  )


def _write_stsb(tmp_path, split, lines):
  folder = tmp_path / "stsb"
  folder.mkdir(exist_ok=True)
  path = folder / f"sts-{split}.csv"
  path.write_text("".join(line + "\n" for line in lines))
  return path


GOOD_STSB = 'main-news\tf\t2012\t0001\t3.800\tA "quoted" sentence.\tAnother one.'


def test_stsb_reader_small_files(tmp_path):
  _write_stsb(tmp_path, "dev", [GOOD_STSB, GOOD_STSB + "\textra\tlicense"])
  pairs = sts_data.read_stsb("dev", data_dir=str(tmp_path))
  assert pairs == [('A "quoted" sentence.', "Another one.", 3.8)] * 2


@pytest.mark.parametrize(
  "bad, message",
  [
    ("main-news\tf\t2012\t0002\t3.8\tonly one sentence", "at least 7"),
    ("main-news\tf\t2012\t0002\tabc\tA.\tB.", "expected a score in [0.0, 5.0]"),
    ("main-news\tf\t2012\t0002\t5.5\tA.\tB.", "expected a score in [0.0, 5.0]"),
    ("main-news\tf\t2012\t0002\tnan\tA.\tB.", "expected a score"),
    ("main-news\tf\t2012\t0002\t1.0\t  \tB.", "blank sentence in column 6"),
  ],
)
def test_stsb_reader_rejects_malformed(tmp_path, bad, message):
  path = _write_stsb(tmp_path, "test", [GOOD_STSB, bad])
  with pytest.raises(ValueError) as info:
    sts_data.read_stsb("test", data_dir=str(tmp_path))
  assert f"{path}:2:" in str(info.value) and message in str(info.value), str(info.value)


SICK_HEADER = (
  "pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\t"
  "entailment_AB\tentailment_BA\tsentence_A_original\tsentence_B_original\t"
  "sentence_A_dataset\tsentence_B_dataset\tSemEval_set"
)


def _sick_row(pair_id, score="3.5", split="TEST", sent_a="A dog runs"):
  return "\t".join(
    [pair_id, sent_a, "A cat runs", "NEUTRAL", score, "x", "y", "a", "b", "FLICKR", "FLICKR", split]
  )


def _write_sick(tmp_path, rows):
  folder = tmp_path / "sick"
  folder.mkdir(exist_ok=True)
  path = folder / "SICK.txt"
  path.write_bytes("\r\n".join([SICK_HEADER] + rows).encode("utf-8"))  # CRLF, no final newline
  return path


def test_sick_reader_small_file(tmp_path):
  _write_sick(tmp_path, [_sick_row("1", split="TRAIN"), _sick_row("2", "4.25")])
  assert sts_data.read_sick(str(tmp_path)) == [("A dog runs", "A cat runs", 4.25)]
  assert len(sts_data.read_sick(str(tmp_path), split=None)) == 2
  with pytest.raises(ValueError, match="unknown SICK split"):
    sts_data.read_sick(str(tmp_path), split="test")


@pytest.mark.parametrize(
  "bad, line, message",
  [
    (_sick_row("3", score="0.5"), 3, "expected a score in [1.0, 5.0]"),
    (_sick_row("3", split="DEV"), 3, "SemEval_set must be one of"),
    (_sick_row("3") + "\textra", 3, "expected 12 tab-separated fields"),
    (_sick_row("3", sent_a=" "), 3, "blank sentence in column 2"),
  ],
)
def test_sick_reader_rejects_malformed(tmp_path, bad, line, message):
  path = _write_sick(tmp_path, [_sick_row("1"), bad])
  with pytest.raises(ValueError) as info:
    sts_data.read_sick(str(tmp_path))
  assert f"{path}:{line}:" in str(info.value) and message in str(info.value), str(info.value)


def test_sick_reader_rejects_bad_header(tmp_path):
  folder = tmp_path / "sick"
  folder.mkdir()
  (folder / "SICK.txt").write_text("pair_ID\tsentence_A\tsentence_B\n1\ta\tb\n")
  with pytest.raises(ValueError, match=r"SICK.txt:1: header lacks columns"):
    sts_data.read_sick(str(tmp_path))


def test_pearson_spearman_hand_and_scipy():
  pred, gold = [1.0, 2.0, 3.0], [1.0, 2.0, 4.0]
  pearson, spearman = sts_data.pearson_spearman(pred, gold)
  # Deviations (-1, 0, 1) and (-4/3, -1/3, 5/3): r = 3 / sqrt(2 * 42/9) = 9 / sqrt(84).
  assert pearson == pytest.approx(100.0 * 9.0 / math.sqrt(84.0), abs=1e-9)
  assert spearman == pytest.approx(100.0)  # same order
  pred = [0.1, 0.9, 0.4, 0.35, 0.8, 0.2]
  gold = [1.0, 4.5, 2.0, 3.0, 4.0, 0.5]
  pearson, spearman = sts_data.pearson_spearman(pred, gold)
  assert pearson == 100.0 * scipy.stats.pearsonr(pred, gold).statistic
  assert spearman == 100.0 * scipy.stats.spearmanr(pred, gold).statistic
  with pytest.raises(ValueError, match="3 predictions for 2"):
    sts_data.pearson_spearman([1, 2, 3], [1, 2])

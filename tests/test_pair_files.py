"""evaluation/pair_files.py: a user's pairs file and SentEval's STS12-16 layout, on tiny files."""

import os

import pytest

from evaluation import pair_files
from util import cli


def write(path, text):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(text.encode("utf-8"))
  return str(path)


def read(source):
  return [tuple(p) for p in source]


def test_pairs_with_gold_header_detected_and_input_order(tmp_path):
  path = write(tmp_path / "p.tsv", "s1\ts2\tscore\r\nthe cat\ta dog\t4\r\n b \t c\t-1.5e0\r\n")
  source = pair_files.PairsFile(path)
  # The header is line 1; CRLF endings and surrounding spaces are not part of a sentence.
  assert read(source) == [(2, "the cat", "a dog", 4.0), (3, "b", "c", -1.5)]
  assert source.lines_read == 3
  # Each iteration reads afresh: the same pairs, and the same identity of what was read.
  first = source.sha256()
  assert read(source) == [(2, "the cat", "a dog", 4.0), (3, "b", "c", -1.5)]
  assert source.sha256() == first
  assert source.identity() == {"input": os.path.abspath(path), "header": "auto"}


def test_pairs_without_gold_have_no_header_unless_declared(tmp_path):
  path = write(tmp_path / "p.tsv", "sentence1\tsentence2\nthe cat\ta dog\n")
  assert read(pair_files.PairsFile(path)) == [
    (1, "sentence1", "sentence2", None),
    (2, "the cat", "a dog", None),
  ]
  assert read(pair_files.PairsFile(path, header="yes")) == [(2, "the cat", "a dog", None)]


def test_a_header_is_not_guessed_when_line_2_has_no_number_either(tmp_path):
  path = write(tmp_path / "p.tsv", "a\tb\tx\nc\td\ty\n")
  with pytest.raises(ValueError, match=r"p\.tsv:1: gold score 'x' is not a number \(a header"):
    read(pair_files.PairsFile(path))
  # Declared: line 1 goes, and line 2 is the error.
  with pytest.raises(ValueError, match=r"p\.tsv:2: gold score 'y' is not a number$"):
    read(pair_files.PairsFile(path, header="yes"))


def test_a_numeric_first_line_is_a_pair_even_with_a_header_declared_absent(tmp_path):
  path = write(tmp_path / "p.tsv", "s1\ts2\tscore\na\tb\t1\n")
  with pytest.raises(ValueError, match=r"p\.tsv:1: gold score 'score'"):
    read(pair_files.PairsFile(path, header="no"))


@pytest.mark.parametrize(
  "text, line, message",
  [
    ("", 1, "empty file"),
    ("a\tb\n\nc\td\n", 2, "blank line"),
    ("a\tb\nonly one column\n", 2, "found 1 tab-separated field"),
    ("a\tb\t1\tx\n", 1, "found 4 tab-separated field"),
    ("a\tb\t1\nc\td\tnan\n", 2, "gold score 'nan' is not a number"),
    ("a\tb\t1\nc\td\t\n", 2, "gold score '' is not a number"),
    ("a\t \t1\n", 1, "blank sentence in column 2"),
    ("a\tb\t1\nc\td\n", 2, "no gold score, but line 1 has one"),
    ("a\tb\nc\td\t1\n", 2, "a gold score, but line 1 has none"),
    ("s1\ts2\tscore\n", 2, "no pairs after the header line"),
  ],
)
def test_bad_pairs_files_name_file_and_line(tmp_path, text, line, message):
  path = write(tmp_path / "bad.tsv", text)
  with pytest.raises(ValueError) as error:
    read(pair_files.PairsFile(path, header="yes" if text.startswith("s1") else "auto"))
  assert str(error.value).startswith(f"{path}:{line}: ")
  assert message in str(error.value)


def test_bad_utf8_is_an_input_error_naming_the_line(tmp_path):
  path = tmp_path / "p.tsv"
  path.write_bytes(b"a\tb\nc\t\xff\n")
  with pytest.raises(cli.InputError, match=rf"^{path}:2: not valid UTF-8"):
    read(pair_files.PairsFile(str(path)))


def test_stdin_is_refused():
  with pytest.raises(ValueError, match="not from stdin"):
    pair_files.PairsFile("-")


def test_count_pairs_reads_the_whole_file(tmp_path):
  assert pair_files.count_pairs(pair_files.PairsFile(write(tmp_path / "a", "a\tb\nc\td\n"))) == (
    2,
    False,
  )
  path = write(tmp_path / "b", "a\tb\t1\n")
  with pytest.raises(ValueError, match="one pair with a gold score; a correlation needs"):
    pair_files.count_pairs(pair_files.PairsFile(path))
  # An error on the last line shows before anything is encoded.
  path = write(tmp_path / "c", "a\tb\n" * 5 + "x\n")
  with pytest.raises(ValueError, match=r":6: expected"):
    pair_files.count_pairs(pair_files.PairsFile(path))


# ---------------------------------------------------------------- SentEval's STS12-16 layout


@pytest.fixture
def senteval_dir(tmp_path):
  """data/downstream/STS as SentEval's script leaves it, two tiny tasks and STSBenchmark."""
  root = tmp_path / "STS"
  task = root / "STS12-en-test"
  write(task / "STS.input.MSRpar.txt", "the cat\ta cat\nthe dog\ta mat\nsat on\ton the mat\n")
  write(task / "STS.gs.MSRpar.txt", "4.2\n\n2.5\n")  # line 2 has no gold: skipped
  write(task / "STS.gs.ALL.txt", "1\n")  # a gold file without its input is not a subset
  # The STS16 download's names, and extra fields after the two sentences.
  write(task / "STS2016.input.headlines.txt", "a dog ran\tthe dog ran\tsrc1\tsrc2\n")
  write(task / "STS2016.gs.headlines.txt", "3.5\n")
  write(root / "STS13-en-test" / "STS.input.FNWN.txt", "a\tb\nc\td\n")
  write(root / "STS13-en-test" / "STS.gs.FNWN.txt", "0\n5\n")
  write(root / "STSBenchmark" / "sts-test.csv", "not this layout\n")
  return root


def test_senteval_layout_one_task_per_directory(senteval_dir):
  tasks = pair_files.senteval_tasks(str(senteval_dir))
  assert [(task, [name for name, _ in subsets]) for task, subsets in tasks] == [
    ("STS12-en-test", ["MSRpar", "headlines"]),
    ("STS13-en-test", ["FNWN"]),
  ]
  msrpar, headlines = (source for _, source in tasks[0][1])
  assert read(msrpar) == [(1, "the cat", "a cat", 4.2), (3, "sat on", "on the mat", 2.5)]
  assert read(headlines) == [(1, "a dog ran", "the dog ran", 3.5)]
  # A task directory alone, named by the caller or by itself.
  one = pair_files.senteval_tasks(str(senteval_dir / "STS13-en-test"), "sts13")
  assert [(t, [n for n, _ in s]) for t, s in one] == [("sts13", ["FNWN"])]
  with pytest.raises(ValueError, match="holds 2 tasks, named by their directories"):
    pair_files.senteval_tasks(str(senteval_dir), "mine")


def test_senteval_sha256_covers_the_gold_file(senteval_dir):
  (_, subsets), _ = pair_files.senteval_tasks(str(senteval_dir))
  source = subsets[0][1]
  read(source)
  before = source.sha256()
  write(senteval_dir / "STS12-en-test" / "STS.gs.MSRpar.txt", "4.0\n\n2.5\n")
  read(source)
  assert source.sha256() != before


@pytest.mark.parametrize(
  "gold, where, message",
  [
    ("4\n1\n", "input:3", "gold.txt ends at line 2"),  # the gold file is short
    ("4\n1\n2\n3\n", "gold:4", "input.txt ends at line 3"),  # the input file is short
    ("4\nx\n1\n", "gold:2", "expected a score in [0.0, 5.0], found 'x'"),
    ("4\n7\n1\n", "gold:2", "expected a score in [0.0, 5.0], found '7'"),
    ("\n\n\n", "gold:1", "no gold scores"),
  ],
)
def test_bad_senteval_files_name_file_and_line(tmp_path, gold, where, message):
  paths = {
    "input": write(tmp_path / "input.txt", "a\tb\nc\td\ne\tf\n"),
    "gold": write(tmp_path / "gold.txt", gold),
  }
  kind, line = where.split(":")
  with pytest.raises(ValueError) as error:
    read(pair_files.SentEvalSubset(paths["input"], paths["gold"]))
  assert str(error.value).startswith(f"{paths[kind]}:{line}: ")
  assert message in str(error.value)


def test_senteval_line_with_one_field_and_missing_gold_file(tmp_path):
  task = tmp_path / "task"
  write(task / "STS.input.x.txt", "a\tb\nonly one\n")
  write(task / "STS.gs.x.txt", "1\n2\n")
  (_, [(_, source)]) = pair_files.senteval_tasks(str(task))[0]
  with pytest.raises(ValueError, match=r"STS\.input\.x\.txt:2: expected sentence1<TAB>sentence2"):
    read(source)
  write(task / "STS.input.y.txt", "a\tb\n")
  with pytest.raises(ValueError, match=r"STS\.input\.y\.txt:1: its gold scores .*missing"):
    pair_files.senteval_tasks(str(task))
  write(tmp_path / "empty" / "README", "no STS files here\n")
  with pytest.raises(ValueError, match="no STS.input.<subset>.txt files in it or in its sub"):
    pair_files.senteval_tasks(str(tmp_path / "empty"))
  with pytest.raises(ValueError, match="no such directory"):
    pair_files.senteval_tasks(str(tmp_path / "absent"))


def test_pair_sets_names_and_groups(tmp_path, senteval_dir):
  a = write(tmp_path / "mine.tsv", "a\tb\n")
  b = write(tmp_path / "other.pairs.tsv", "a\tb\n")
  groups = pair_files.pair_sets([a, f"x={b}", f"senteval:{senteval_dir / 'STS13-en-test'}"])
  assert [(task, [name for name, _ in sets]) for task, sets in groups] == [
    (None, ["mine"]),
    (None, ["x"]),
    ("STS13-en-test", ["STS13-en-test/FNWN"]),
  ]
  with pytest.raises(ValueError, match="two pair sets are named 'mine'"):
    pair_files.pair_sets([a, f"mine={b}"])
  with pytest.raises(ValueError, match="cannot name a file"):
    pair_files.pair_sets([f"../x={a}"])

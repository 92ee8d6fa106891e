"""Tests for corpus.py: reading archives, one document end to end, the corpus job and its CLI."""

import io
import itertools
import json
import os
import subprocess
import sys
import tarfile

import commands
from conftest import HANG_SECONDS
from conftest import data_dir_or_skip
import pytest

from text import corpus
from text import text_cleaning

# ---------------------------------------------------------------------------------------------
# Synthetic archives and books
# ---------------------------------------------------------------------------------------------


def _make_tar(path, books):
  """Writes {name: text} as texts/<name>.txt into a tar.xz at path."""
  with tarfile.open(path, "w:xz") as tar:
    for name, text in books.items():
      data = text.encode("utf-8")
      info = tarfile.TarInfo(f"texts/{name}.txt")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))


def _book(title, sentences):
  body = "\n\n".join(sentences)
  return (
    f"*** START OF THIS PROJECT GUTENBERG EBOOK {title.upper()} ***\n\n"
    f"CHAPTER I\n\n{body}\n\n"
    f"*** END OF THIS PROJECT GUTENBERG EBOOK {title.upper()} ***\n"
  )


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def test_iter_gutenberg_books_streams_tar(tmp_path):
  tar_path = str(tmp_path / "books.tar.xz")
  _make_tar(tar_path, {"0001": "one\r\ntwo\r\n", "0002": "three\n"})
  books = list(corpus.iter_gutenberg_books(tar_path))
  assert books == [("0001", "one\ntwo\n"), ("0002", "three\n")]
  assert corpus.list_gutenberg_books(tar_path) == [("0001", 10), ("0002", 6)]


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------


def test_missing_markers_keep_text_and_are_counted():
  text = "Just some prose. Nothing else here at all.\n\nA second paragraph of prose here."
  stripped = text_cleaning.strip_gutenberg_boilerplate(text)
  assert stripped == (text, None, None)
  sentences, counts = corpus.process_document(text, gutenberg=True)
  assert counts["books/missing_start_marker"] == 1
  assert counts["books/missing_end_marker"] == 1
  assert sentences == [
    "Just some prose.",
    "Nothing else here at all.",
    "A second paragraph of prose here.",
  ]


def test_every_drop_reason_fires_and_counts_add_up():
  long_sentence = " ".join(["word"] * 120) + "."
  body = "\n\n".join(
    [
      "Produced by Jane Doe",
      "CONTENTS",
      "I. The Old House",
      "It was a quiet evening in the village and nothing moved.",
      "[Footnote 1: A note.]",
      "[Illustration]",
      "* * * * * * * * *",
      "CHAPTER II",
      "THE END OF THE FIRST PART",
      "{62a}",  # empty after cleaning
      "He wrote [Greek: logos] on the wall. We left it there.",  # foreign_script
      "See 12, 14, 16, 18, 20, 22 and 24. It was late at night.",  # non_letters
      "Then came a cry. HELP ME NOW PLEASE! Nobody answered it.",  # all_caps
      "It cost 5s. 6d. in all. The year was 1894 then.",  # digits
      "The word ἀθάνατος means deathless. The rest is English.",  # non_latin
      "Oh no! The quick brown fox ran off.",  # too_short
      long_sentence,  # too_long
      "It was a quiet evening in the village and nothing moved.",  # duplicate
    ]
  )
  text = _book("Reasons", [body])
  sentences, counts = corpus.process_document(text, normalization="librispeech")
  dropped_p = {k.split("/")[-1] for k in counts if k.startswith("paragraphs/dropped/")}
  dropped_s = {k.split("/")[-1] for k in counts if k.startswith("sentences/dropped/")}
  assert dropped_p == set(corpus.PARAGRAPH_REASONS)
  assert dropped_s == set(corpus.SENTENCE_REASONS)
  assert counts["paragraphs/candidates"] == counts["paragraphs/kept"] + sum(
    v for k, v in counts.items() if k.startswith("paragraphs/dropped/")
  )
  assert counts["sentences/candidates"] == len(sentences) + sum(
    v for k, v in counts.items() if k.startswith("sentences/dropped/")
  )
  assert "THE YEAR WAS EIGHTEEN NINETY FOUR THEN" in sentences
  assert "THE QUICK BROWN FOX RAN OFF" in sentences
  # Dedup is a corpus-level step: process_document keeps both copies.
  assert sentences.count("IT WAS A QUIET EVENING IN THE VILLAGE AND NOTHING MOVED") == 2


def test_html_book_is_converted():
  text = (
    "<html><body><pre>*** START OF THIS PROJECT GUTENBERG EBOOK X ***</pre>\n"
    + "".join(
      f"<p>\n  Paragraph {i} is here&mdash;truly it&rsquo;s fine.\n</p>\n" for i in range(25)
    )
    + "<pre>*** END OF THIS PROJECT GUTENBERG EBOOK X ***</pre></body></html>"
  )
  sentences, counts = corpus.process_document(text)
  assert counts["books/html_converted"] == 1
  assert sentences[0] == "Paragraph 0 is here — truly it’s fine."
  assert len(sentences) == 25


# ---------------------------------------------------------------------------------------------
# prepare_corpus
# ---------------------------------------------------------------------------------------------


def _read_lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().splitlines()


def _check_stats_add_up(stats):
  p, s = stats["paragraphs"], stats["sentences"]
  assert p["candidates"] == p["kept"] + sum(p["dropped"].values())
  assert s["candidates"] == s["kept"] + sum(s["dropped"].values()) + s["duplicates"]
  assert s["kept"] == stats["train"]["sentences"] + stats["eval"]["sentences"]
  assert stats["words"] == stats["train"]["words"] + stats["eval"]["words"]


@pytest.fixture
def plain_file(tmp_path):
  lines = [f"This is plain sentence number {i} of the test file." for i in range(200)]
  lines += ["THIS UPPER CASE LINE IS KEPT", "Too short.", "", lines[0], lines[1]]
  path = tmp_path / "plain.txt"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


def test_prepare_corpus_plain_lines(tmp_path, plain_file):
  out = str(tmp_path / "out")
  stats = corpus.prepare_corpus([plain_file], out, eval_fraction=0.2, seed=1, num_workers=1)
  train, evals = (
    _read_lines(os.path.join(out, "train.txt")),
    _read_lines(os.path.join(out, "eval.txt")),
  )
  assert stats["sentences"]["candidates"] == 204
  assert stats["sentences"]["duplicates"] == 2
  assert {k: v for k, v in stats["sentences"]["dropped"].items() if v} == {"too_short": 1}
  assert set(stats["sentences"]["dropped"]) == set(corpus.SENTENCE_REASONS)
  assert len(train) + len(evals) == 201
  assert 10 < len(evals) < 70  # about 20 % of 201
  assert not set(train) & set(evals)
  assert "THIS UPPER CASE LINE IS KEPT" in train + evals  # no all-caps check for lines
  assert stats["mean_words_per_sentence"] > 5
  _check_stats_add_up(stats)
  with open(os.path.join(out, "stats.json"), encoding="utf-8") as f:
    assert json.load(f)["sentences"] == stats["sentences"]
  assert not [n for n in os.listdir(out) if ".tmp" in n]


def test_prepare_corpus_is_deterministic_and_seeded(tmp_path, plain_file):
  outputs = {}
  for name, seed in (("a", 7), ("b", 7), ("c", 8)):
    out = str(tmp_path / name)
    corpus.prepare_corpus(
      [plain_file], out, normalization="librispeech", eval_fraction=0.3, seed=seed, num_workers=1
    )
    outputs[name] = tuple(
      open(os.path.join(out, f), "rb").read() for f in ("train.txt", "eval.txt")
    )
  assert outputs["a"] == outputs["b"]
  assert outputs["a"] != outputs["c"]
  assert outputs["a"][0].startswith(b"THIS IS PLAIN SENTENCE NUMBER ")


def test_prepare_corpus_skips_complete_output(tmp_path, plain_file):
  out = str(tmp_path / "out")
  first = corpus.prepare_corpus([plain_file], out, num_workers=1)
  train = os.path.join(out, "train.txt")
  os.utime(train, (1, 1))
  again = corpus.prepare_corpus([plain_file], out, num_workers=1)
  assert again == first
  assert os.stat(train).st_mtime == 1  # not rewritten
  changed = corpus.prepare_corpus([plain_file], out, min_words=1, num_workers=1)
  assert changed["args"]["min_words"] == 1
  assert os.stat(train).st_mtime != 1  # different arguments: rebuilt
  forced = corpus.prepare_corpus([plain_file], out, min_words=1, num_workers=1, force=True)
  assert forced["sentences"] == changed["sentences"]


def test_prepare_corpus_gutenberg_tar_holds_out_books(tmp_path):
  books = {
    f"{i:04d}": _book(
      f"Book {i}",
      [
        f"Book {i} begins on a cold and windy morning in the hills.",
        f"Its hero, named Hero{i}, walks far into the woods alone.",
        "Everyone agrees that the same sentence appears in every book.",
      ],
    )
    for i in range(1, 9)
  }
  tar_path = str(tmp_path / "texts.tar.xz")
  _make_tar(tar_path, books)
  results = {}
  for workers in (1, 2):
    out = str(tmp_path / f"out{workers}")
    stats = corpus.prepare_corpus(
      [tar_path], out, eval_fraction=0.25, seed=3, num_workers=workers, log_every=2
    )
    results[workers] = (
      stats,
      _read_lines(os.path.join(out, "train.txt")),
      _read_lines(os.path.join(out, "eval.txt")),
    )
  stats, train, evals = results[1]
  assert results[2][1:] == results[1][1:]  # the worker pool changes nothing
  assert stats["books"]["total"] == 8
  assert stats["books"]["eval"] == len(stats["books"]["eval_ids"]) == 2
  for book_id in stats["books"]["eval_ids"]:
    i = int(book_id)
    assert f"Book {i} begins on a cold and windy morning in the hills." in evals
    assert not [s for s in train if f"Hero{i}," in s]
  assert stats["sentences"]["duplicates"] == 7
  assert {k: v for k, v in stats["paragraphs"]["dropped"].items() if v} == {"heading": 8}
  _check_stats_add_up(stats)


def test_a_truncated_archive_is_one_line_naming_it_and_leaves_no_output(tmp_path):
  """A .tar.xz cut short (a tarfile.ReadError) is refused as the user's input, not a traceback
  (issue 56); nothing is left for a corrected re-run to find."""
  books = {
    f"{i:04d}": _book(f"Book {i}", [f"Book {i} is long enough to read."] * 40) for i in (1, 2)
  }
  whole = tmp_path / "texts.tar.xz"
  _make_tar(str(whole), books)
  cut = tmp_path / "cut.tar.xz"
  cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
  out = tmp_path / "out"
  result = commands.run("corpus.py", f"--input={cut}", f"--output_dir={out}", status=2)
  (error,) = [line for line in result.stderr.splitlines() if ": error: " in line]
  assert error.startswith(f"corpus.py: error: {cut}: cannot read ("), error
  assert not out.exists()


def test_cli_runs(tmp_path, plain_file):
  out = str(tmp_path / "cli")
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
    [
      sys.executable,
      os.path.join(repo, "corpus.py"),
      f"--input={plain_file}",
      f"--output_dir={out}",
      "--normalization=librispeech",
      "--num_workers=1",
    ],
    capture_output=True,
    text=True,
    timeout=HANG_SECONDS,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  assert json.loads(proc.stdout)["sentences"]["kept"] == 201
  assert _read_lines(os.path.join(out, "train.txt"))[0].isupper()


# ---------------------------------------------------------------------------------------------
# Real data
# ---------------------------------------------------------------------------------------------


def test_real_gutenberg_excerpt(tmp_path):
  real_tar = corpus.default_gutenberg_tar(data_dir_or_skip(corpus.GUTENBERG_SUBDIR))
  first = list(itertools.islice(corpus.iter_gutenberg_books(real_tar), 3))
  assert [book_id for book_id, _ in first] == ["0001", "0002", "0003"]
  assert all("PROJECT GUTENBERG" in text.upper() for _, text in first)

  out = str(tmp_path / "real")
  stats = corpus.prepare_corpus([real_tar], out, max_books=3, num_workers=1)
  lines = _read_lines(os.path.join(out, "train.txt")) + _read_lines(os.path.join(out, "eval.txt"))
  assert stats["books"]["total"] == 3
  assert stats["books"]["missing_start_marker"] == []
  assert len(lines) > 5000
  assert all(line.strip() == line and line for line in lines)
  assert not [l for l in lines if "gutenberg" in l.lower() or "http" in l.lower()]
  assert not [l for l in lines if l.upper().startswith("CHAPTER ")]
  assert not [l for l in lines if "[Illustration" in l]
  words = [len(l.split()) for l in lines]
  assert min(words) >= 3 and max(words) <= 100
  _check_stats_add_up(stats)
  assert stats["paragraphs"]["dropped"]["boilerplate"] >= 3  # "Produced by ..." credits


@pytest.mark.parametrize("kind", ["dir", "devnull", "fifo"])
def test_an_input_that_is_no_regular_file_is_named_as_such(tmp_path, kind):
  # Issue 56's probes (F9): a pipe, /dev/null or a directory was "input ... not found".
  path = {"dir": str(tmp_path), "devnull": os.devnull, "fifo": str(tmp_path / "fifo")}[kind]
  if kind == "fifo":
    os.mkfifo(path)  # a pipe's stand-in: opening it here would block
  why = "is a directory" if kind == "dir" else "not a regular file"
  with pytest.raises(ValueError, match=f"{path}: {why}"):
    corpus.prepare_corpus([path], str(tmp_path / "out"), num_workers=1)
  assert not (tmp_path / "out").exists()


def test_a_compressed_text_is_refused_and_leaves_no_output(tmp_path):
  # Issue 56's probes, third round: a .gz was read as text, its compressed bytes as "sentences"
  # of U+FFFD ("no sentence kept of 111 candidate(s)" for a valid file of 3000 sentences).
  import gzip  # pylint: disable=g-import-not-at-top

  from util import cli  # pylint: disable=g-import-not-at-top

  path = tmp_path / "sentences.txt.gz"
  path.write_bytes(gzip.compress(b"the cat sat on the mat\n" * 100))
  with pytest.raises(cli.InputError, match=f"{path}: gzip-compressed"):
    corpus.prepare_corpus([str(path)], str(tmp_path / "out"), num_workers=1)
  assert not (tmp_path / "out").exists()


def test_an_input_without_a_sentence_is_refused_and_leaves_no_output(tmp_path):
  # Issue 56's probes (F10): blank lines only succeeded with 0 sentences (exit 0).
  blank = tmp_path / "blank.txt"
  blank.write_text("\n\n  \n")
  out = tmp_path / "out"
  result = commands.run("corpus.py", f"--input={blank}", f"--output_dir={out}", status=2)
  (error,) = [line for line in result.stderr.splitlines() if ": error: " in line]
  assert f"{blank}" in error and "no sentence" in error, error
  assert not out.exists()

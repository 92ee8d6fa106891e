"""Tests for corpus.py: boilerplate, paragraphs, sentences, junk filter, corpus."""

import collections
import io
import itertools
import json
import os
import subprocess
import sys
import tarfile

from conftest import data_dir_or_skip
import pytest

import corpus

# ---------------------------------------------------------------------------------------------
# Synthetic books
# ---------------------------------------------------------------------------------------------

MODERN_BOOK = """\
The Project Gutenberg EBook of A Test Book, by Nobody

This eBook is for the use of anyone anywhere at no cost.

*** START OF THIS PROJECT GUTENBERG EBOOK A TEST BOOK ***




Produced by Some Volunteer and the Online Distributed
Proofreading Team at http://www.pgdp.net




CHAPTER I

The Beginning

It was a dark and stormy night. The rain fell in
torrents, except at occasional intervals.

End of the Project Gutenberg EBook of A Test Book, by Nobody

*** END OF THIS PROJECT GUTENBERG EBOOK A TEST BOOK ***

***** This file should be named 12345.txt or 12345.zip *****
Section 1. General Terms of Use and Redistributing Project Gutenberg-tm
"""

VARIANT_BOOK = """\
The Project Gutenberg eBook, Another Book

***START OF THE PROJECT GUTENBERG EBOOK ANOTHER BOOK***

The body is here. It has two sentences.

***END OF THE PROJECT GUTENBERG EBOOK ANOTHER BOOK***

Licence text that must go.
"""

LEGACY_BOOK = """\
***The Project Gutenberg Etext of Old Book***
Please take a look at the important information in this header.

***START**THE SMALL PRINT!**FOR PUBLIC DOMAIN ETEXTS**START***
Why is this "Small Print!" statement here? You know: lawyers.
*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*




Old Book

The legacy body starts here. It ends there.




End of The Project Gutenberg Etext of Old Book
"""


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
# Boilerplate
# ---------------------------------------------------------------------------------------------


def test_strip_modern_markers():
  stripped = corpus.strip_gutenberg_boilerplate(MODERN_BOOK)
  assert stripped.start_marker == "modern"
  assert stripped.end_marker == "modern"
  assert "It was a dark and stormy night." in stripped.body
  assert "This eBook is for the use" not in stripped.body
  assert "General Terms of Use" not in stripped.body
  # The "End of the Project Gutenberg EBook" line above the END marker goes too.
  assert "End of the Project Gutenberg" not in stripped.body


def test_strip_variant_markers_without_spaces():
  stripped = corpus.strip_gutenberg_boilerplate(VARIANT_BOOK)
  assert (stripped.start_marker, stripped.end_marker) == ("modern", "modern")
  assert stripped.body.strip() == "The body is here. It has two sentences."


def test_strip_legacy_small_print_markers():
  stripped = corpus.strip_gutenberg_boilerplate(LEGACY_BOOK)
  assert (stripped.start_marker, stripped.end_marker) == ("legacy", "legacy")
  assert "lawyers" not in stripped.body
  assert "The legacy body starts here." in stripped.body
  assert "End of The Project" not in stripped.body


def test_missing_markers_keep_text_and_are_counted():
  text = "Just some prose. Nothing else here at all.\n\nA second paragraph of prose here."
  stripped = corpus.strip_gutenberg_boilerplate(text)
  assert stripped == (text, None, None)
  sentences, counts = corpus.process_document(text, gutenberg=True)
  assert counts["books/missing_start_marker"] == 1
  assert counts["books/missing_end_marker"] == 1
  assert sentences == [
    "Just some prose.",
    "Nothing else here at all.",
    "A second paragraph of prose here.",
  ]


def test_iter_gutenberg_books_streams_tar(tmp_path):
  tar_path = str(tmp_path / "books.tar.xz")
  _make_tar(tar_path, {"0001": "one\r\ntwo\r\n", "0002": "three\n"})
  books = list(corpus.iter_gutenberg_books(tar_path))
  assert books == [("0001", "one\ntwo\n"), ("0002", "three\n")]
  assert corpus.list_gutenberg_books(tar_path) == [("0001", 10), ("0002", 6)]


# ---------------------------------------------------------------------------------------------
# Paragraphs and sentences
# ---------------------------------------------------------------------------------------------


def test_paragraphs_unwrap_hard_wrapped_lines():
  text = (
    "  It was the best of times,\nit was the worst of times; a fore-\nground and a"
    " back--\nground.\n\n\n   \nSecond paragraph\n  here.\n"
  )
  assert corpus.paragraphs(text) == [
    "It was the best of times, it was the worst of times; a fore-ground and a back--ground.",
    "Second paragraph here.",
  ]


@pytest.mark.parametrize(
  "paragraph, expected",
  [
    (
      "Mr. and Mrs. Smith went to St. Paul's. They stayed there.",
      ["Mr. and Mrs. Smith went to St. Paul's.", "They stayed there."],
    ),
    (
      "J. M. Barrie wrote it in 1904. Dr. Watson read it.",
      ["J. M. Barrie wrote it in 1904.", "Dr. Watson read it."],
    ),
    (
      "Pi is 3.14 or so. The price was 2.50 dollars.",
      ["Pi is 3.14 or so.", "The price was 2.50 dollars."],
    ),
    ('He said, "Go home." Then he left.', ['He said, "Go home."', "Then he left."]),
    ("“Stop!” he cried. “Why?” “Because.”", ["“Stop!” he cried.", "“Why?”", "“Because.”"]),
    ("'Where?' said she. 'Here,' said I.", ["'Where?' said she.", "'Here,' said I."]),
    (
      "I waited... Nothing happened. Well... perhaps not.",
      ["I waited...", "Nothing happened.", "Well... perhaps not."],
    ),
    ("I waited . . . Nothing happened.", ["I waited . . .", "Nothing happened."]),
    (
      "Some towns, e.g. London and i.e. Paris, are big. Others are not.",
      ["Some towns, e.g. London and i.e. Paris, are big.", "Others are not."],
    ),
    (
      "He lived at No. 7 on the street. See p. 12 for more. Fine.",
      ["He lived at No. 7 on the street.", "See p. 12 for more.", "Fine."],
    ),
    ("Is it? Yes! It is.", ["Is it?", "Yes!", "It is."]),
    (
      "It was I. Then he came (and went.) Then more.",
      ["It was I.", "Then he came (and went.)", "Then more."],
    ),
    (
      "Apples, pears, etc. are fruit. We ate them, etc. Then we slept.",
      ["Apples, pears, etc. are fruit.", "We ate them, etc.", "Then we slept."],
    ),
    ("", []),
  ],
)
def test_split_sentences_hard_cases(paragraph, expected):
  assert corpus.split_sentences(paragraph) == expected


def test_clean_paragraph_removes_inline_markup():
  counts = collections.Counter()
  text = (
    "He saw _the_ ship[1] and the sea{2}. [Illustration: A ship at sea] It was"
    " grand--very grand. [Footnote 3: A note.] *Truly* so. . . . &c."
  )
  cleaned = corpus.clean_paragraph(text, counts)
  assert cleaned == "He saw the ship and the sea. It was grand -- very grand. Truly so... &c."
  assert counts["edits/illustration_tags_removed"] == 1
  assert counts["edits/footnote_markers_removed"] == 1
  assert counts["edits/brace_tags_removed"] == 1
  assert counts["edits/footnotes_removed"] == 1


# ---------------------------------------------------------------------------------------------
# Junk filter
# ---------------------------------------------------------------------------------------------


def _paragraph_reasons(text):
  pf = corpus.ParagraphFilter()
  return [pf.reason(block) for block in corpus.paragraph_blocks(text)]


def test_paragraph_filter_reasons():
  text = "\n\n".join(
    [
      "Produced by Jane Doe and the Online Distributed\nProofreading Team",  # boilerplate
      "CONTENTS",  # toc
      "I. The Old House\nII. The Drop of Water\nIII. The Happy Family",  # toc (entries)
      "It was a fine day, and the sun shone on the old house.",  # kept, ends toc
      "CHAPTER IV",  # heading
      "The Dream of Little Tuk",  # heading (title)
      "BOOK II.",  # heading
      "Chapter 12: The Beginning",  # heading
      "XIV.",  # heading
      "THE ADVENTURES OF TOM SAWYER\nBY MARK TWAIN",  # all_caps
      "[Illustration: A man with\na hat]",  # illustration
      "[Footnote 1: See the appendix\nfor details.]",  # footnote
      "[12] Another footnote body.",  # footnote
      "*       *       *       *       *",  # non_letters
      "1894 | 23 | 45 | 67 | 89",  # non_letters
      "Letter I wrote to her yesterday was long.",  # kept
      "The Beginning of Things ........ 5",  # toc (page ref)
      "Introductory Remarks          11\nConclusion           56",  # toc (page refs)
    ]
  )
  assert _paragraph_reasons(text) == [
    "boilerplate",
    "toc",
    "toc",
    None,
    "heading",
    "heading",
    "heading",
    "heading",
    "heading",
    "all_caps",
    "illustration",
    "footnote",
    "footnote",
    "non_letters",
    "non_letters",
    None,
    "toc",
    "toc",
  ]


def test_toc_mode_ends_at_prose():
  text = (
    "CONTENTS\n\nMAY FLOWERS\n\nPANSIES\n\nPREFACE\n\n"
    "These stories were written for my own amusement during a period of\n"
    "enforced seclusion.\n\nWATER-LILIES"
  )
  assert _paragraph_reasons(text) == ["toc", "toc", "toc", "toc", None, "all_caps"]


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
    timeout=60,
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

"""Tests for text/text_cleaning.py: boilerplate, paragraphs, sentences, junk filter."""

import collections

import pytest

from text import text_cleaning

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


# ---------------------------------------------------------------------------------------------
# Boilerplate
# ---------------------------------------------------------------------------------------------


def test_strip_modern_markers():
  stripped = text_cleaning.strip_gutenberg_boilerplate(MODERN_BOOK)
  assert stripped.start_marker == "modern"
  assert stripped.end_marker == "modern"
  assert "It was a dark and stormy night." in stripped.body
  assert "This eBook is for the use" not in stripped.body
  assert "General Terms of Use" not in stripped.body
  # The "End of the Project Gutenberg EBook" line above the END marker goes too.
  assert "End of the Project Gutenberg" not in stripped.body


def test_strip_variant_markers_without_spaces():
  stripped = text_cleaning.strip_gutenberg_boilerplate(VARIANT_BOOK)
  assert (stripped.start_marker, stripped.end_marker) == ("modern", "modern")
  assert stripped.body.strip() == "The body is here. It has two sentences."


def test_strip_legacy_small_print_markers():
  stripped = text_cleaning.strip_gutenberg_boilerplate(LEGACY_BOOK)
  assert (stripped.start_marker, stripped.end_marker) == ("legacy", "legacy")
  assert "lawyers" not in stripped.body
  assert "The legacy body starts here." in stripped.body
  assert "End of The Project" not in stripped.body


# ---------------------------------------------------------------------------------------------
# Paragraphs and sentences
# ---------------------------------------------------------------------------------------------


def test_paragraphs_unwrap_hard_wrapped_lines():
  text = (
    "  It was the best of times,\nit was the worst of times; a fore-\nground and a"
    " back--\nground.\n\n\n   \nSecond paragraph\n  here.\n"
  )
  assert [text_cleaning.unwrap(block) for block in text_cleaning.paragraph_blocks(text)] == [
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
  assert text_cleaning.split_sentences(paragraph) == expected


def test_clean_paragraph_removes_inline_markup():
  counts = collections.Counter()
  text = (
    "He saw _the_ ship[1] and the sea{2}. [Illustration: A ship at sea] It was"
    " grand--very grand. [Footnote 3: A note.] *Truly* so. . . . &c."
  )
  cleaned = text_cleaning.clean_paragraph(text, counts)
  assert cleaned == "He saw the ship and the sea. It was grand -- very grand. Truly so... &c."
  assert counts["edits/illustration_tags_removed"] == 1
  assert counts["edits/footnote_markers_removed"] == 1
  assert counts["edits/brace_tags_removed"] == 1
  assert counts["edits/footnotes_removed"] == 1


# ---------------------------------------------------------------------------------------------
# Junk filter
# ---------------------------------------------------------------------------------------------


def _paragraph_reasons(text):
  pf = text_cleaning.ParagraphFilter()
  return [pf.reason(block) for block in text_cleaning.paragraph_blocks(text)]


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

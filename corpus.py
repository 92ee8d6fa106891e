# coding=utf-8
"""Corpus preparation: raw text -> clean sentences, one per line.

This is the text half of the pretraining pipeline (docs/DESIGN.md §3). It turns Project
Gutenberg books (the `texts.tar.xz` of `gutenberg-books-subset`, read as a stream) or plain text
files into `train.txt` and `eval.txt` with one sentence per line, plus `stats.json` that accounts
for every paragraph and sentence that was dropped and why. `create_pretraining_data.py` tokenizes
these files; the KenLM 5-gram is trained on the same `train.txt`.

Pipeline for one Gutenberg book:

  raw text
    -> strip_gutenberg_boilerplate()   licence header/footer (START/END markers, legacy variants)
    -> paragraph blocks                 blank-line separated groups of hard-wrapped lines
    -> paragraph filter                 boilerplate, tables of contents, headings, banners, ... (*)
    -> unwrap + inline cleaning         [Illustration: ...] tags, footnote markers, _italics_
    -> split_sentences()                rule based (abbreviations, initials, quotes, ellipses)
    -> sentence filter                  non-letters, all caps, too short/long, ... (*)
    -> normalization                    "none" (cleaned text) or "librispeech" (normalization.py)
    -> dedup, train/eval split          held-out BOOKS for Gutenberg, line hash for plain files

(*) every drop is counted under its reason, so that for both levels
    candidates == kept + sum(dropped) (+ duplicates for sentences).

stats.json is the stage's stamp (io_utils.write_stamp): written last, it records the arguments,
so a rerun with the same arguments finds the output complete and returns at once.

Example:
  python corpus.py --output_dir=/tmp/tta_corpus_librispeech --normalization=librispeech
"""

import collections
import contextlib
import hashlib
import html
import json
import multiprocessing
import os
import re
import tarfile
import time
from typing import Dict
from typing import Iterator
from typing import List
from typing import NamedTuple
from typing import Optional
from typing import Sequence
from typing import Tuple
import unicodedata

from absl import app
from absl import flags
from absl import logging

import cli
import io_utils
import normalization as normalization_lib
import progress

# Bumped whenever a rule changes the output, so that an existing output directory built by an
# older rule set is not mistaken for a complete, up-to-date one (see `prepare_corpus`).
PIPELINE_VERSION = 1

STATS_FILE = "stats.json"
INPUT_FORMATS = ("lines", "paragraphs")

GUTENBERG_SUBDIR = "gutenberg-books-subset"
GUTENBERG_TAR = "texts.tar.xz"

# Paragraph-level drop reasons, in the order the filter tries them.
PARAGRAPH_REASONS = (
  "boilerplate",
  "toc",
  "footnote",
  "illustration",
  "non_letters",
  "heading",
  "all_caps",
  "empty",
)
# Sentence-level drop reasons, in the order the filter tries them. "digits" only fires with
# normalization="librispeech"; "non_latin" fires in both modes for mostly non-Latin sentences
# (Greek, Cyrillic) and with "librispeech" also for any letter that does not fold to A-Z.
SENTENCE_REASONS = (
  "foreign_script",
  "non_letters",
  "non_latin",
  "all_caps",
  "digits",
  "too_short",
  "too_long",
)


def default_gutenberg_tar(data_dir: Optional[str] = None) -> str:
  """Returns the path of the Gutenberg `texts.tar.xz` under `io_utils.data_root(data_dir)`."""
  return os.path.join(io_utils.data_root(data_dir), GUTENBERG_SUBDIR, GUTENBERG_TAR)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _decode(data: bytes) -> str:
  # Some books have CRLF line ends (the data card says LF, 0004.txt is CRLF); every rule below
  # works on "\n" only. "utf-8-sig" drops a BOM; "replace" keeps a stray bad byte from killing a
  # 100 MB run (all files are valid UTF-8 today, so this never fires on the shipped data).
  text = data.decode("utf-8-sig", errors="replace")
  return text.replace("\r\n", "\n").replace("\r", "\n")


def _book_id(member_name: str) -> str:
  return os.path.splitext(os.path.basename(member_name))[0]


def iter_gutenberg_books(tar_path: str) -> Iterator[Tuple[str, str]]:
  """Yields the books of a Gutenberg tar archive, streaming (nothing is extracted to disk).

  Args:
    tar_path: path of a `.tar.xz` (or any compression `tarfile` knows) holding `*.txt` books.

  Yields:
    (book_id, raw_text): `book_id` is the file name without extension ("0001"); `raw_text` is the
    decoded file with "\n" line ends, boilerplate included.
  """
  # "r|*" is tarfile's stream mode: members are decompressed in order and never seeked, so a
  # consumer that stops after three books only pays for three books.
  with tarfile.open(tar_path, mode="r|*") as tar:
    for member in tar:
      if not member.isfile() or not member.name.endswith(".txt"):
        continue
      fileobj = tar.extractfile(member)
      if fileobj is None:
        continue
      yield _book_id(member.name), _decode(fileobj.read())


def list_gutenberg_books(tar_path: str) -> List[Tuple[str, int]]:
  """Returns [(book_id, size_in_bytes)] for the books of a tar archive, in archive order.

  Costs one decompression pass (about 3 s for the 26 MB archive); used for the ETA and to choose
  the held-out books before the main pass.
  """
  books = []
  with tarfile.open(tar_path, mode="r|*") as tar:
    for member in tar:
      if member.isfile() and member.name.endswith(".txt"):
        books.append((_book_id(member.name), member.size))
  return books


# One book of the subset (0184.txt, Conrad's "A Set of Six") is an HTML file saved as .txt.
_HTML_PARAGRAPH_TAGS_RE = re.compile(r"<p[\s>]|</p>", re.IGNORECASE)
_HTML_BLOCK_TAG_RE = re.compile(
  r"</?(?:p|div|h[1-6]|pre|blockquote|li|ul|ol|table|tr|td|hr|body|html|head|title)\b[^>]*>",
  re.IGNORECASE,
)
_HTML_BREAK_RE = re.compile(r"<br\s*/?>", re.IGNORECASE)
_HTML_TAG_RE = re.compile(r"</?[A-Za-z][^<>]*>")
_HTML_STYLE_RE = re.compile(r"<(style|script)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
# Only entities with their semicolon: html.unescape alone would also turn the "&not" of
# "&nothing" into "¬hing" (HTML5 accepts a few legacy names without one).
_HTML_ENTITY_RE = re.compile(r"&(?:#\d+|#[xX][0-9a-fA-F]+|[A-Za-z]+\d*);")


def looks_like_html(text: str, min_paragraph_tags: int = 20) -> bool:
  """True when `text` is an HTML page (many <p> tags) rather than plain text."""
  return len(_HTML_PARAGRAPH_TAGS_RE.findall(text, 0, 200000)) >= min_paragraph_tags


def html_to_text(text: str) -> str:
  """Turns an HTML book into plain text: block tags -> blank lines, <br> -> line breaks."""
  text = _HTML_STYLE_RE.sub("", text)
  text = _HTML_BLOCK_TAG_RE.sub("\n\n", text)
  text = _HTML_BREAK_RE.sub("\n", text)
  text = _HTML_TAG_RE.sub("", text)
  return unescape_entities(text)


def unescape_entities(text: str) -> str:
  """Decodes HTML character references that carry their semicolon ("&mdash;", "&#244;")."""
  if "&" not in text:
    return text
  return _HTML_ENTITY_RE.sub(lambda m: html.unescape(m.group(0)), text)


def is_tar(path: str) -> bool:
  """True for a path read as a Gutenberg archive (a tar, compressed or not)."""
  return bool(re.search(r"\.(tar|tar\.xz|txz|tar\.gz|tgz|tar\.bz2|tbz2)$", path))


# ---------------------------------------------------------------------------------------------
# Boilerplate
# ---------------------------------------------------------------------------------------------

# Modern markers: "*** START OF THIS PROJECT GUTENBERG EBOOK X ***", "***START OF THE PROJECT
# GUTENBERG EBOOK X***", "*** END OF THE PROJECT GUTENBERG EBOOK X ***" (224 + 57 of 288 books).
_START_RE = re.compile(
  r"^[ \t]*\*{3}[ \t]*START OF (?:THE|THIS) PROJECT GUTENBERG[^\n]*$", re.IGNORECASE | re.MULTILINE
)
_END_RE = re.compile(
  r"^[ \t]*\*{3}[ \t]*END OF (?:THE|THIS) PROJECT GUTENBERG[^\n]*$", re.IGNORECASE | re.MULTILINE
)
# Legacy files (1990s etexts, 7 of 288 books) have no START marker; their licence ends with a line
# like "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*" (or a "Small Print"
# version line). Only looked for where the header lives: the first quarter, or first 30 kB.
_LEGACY_START_RE = re.compile(r"^[^\n]*small print[^\n]*$", re.IGNORECASE | re.MULTILINE)
# Legacy footers: "End of The Project Gutenberg Etext of ...", "End of Project Gutenberg's ...",
# "End Project Gutenberg's ...", "End of this Etext of ...", even "Project Gutenburg". Modern books
# also carry an "End of the Project Gutenberg EBook of X" line just above the END marker; taking the
# earliest footer line removes it too.
_LEGACY_END_RE = re.compile(
  r"^\W*end\W+(?:of\W+)?(?:the\W+|this\W+)?(?:project\W+gutenb[eu]rg|e-?text|e-?book)[^\n]*$",
  re.IGNORECASE | re.MULTILINE,
)


class StrippedText(NamedTuple):
  """Result of `strip_gutenberg_boilerplate`.

  Attributes:
    body: the text between the header and the footer.
    start_marker: "modern", "legacy" or None when no header end was found.
    end_marker: "modern", "legacy" or None when no footer start was found.
  """

  body: str
  start_marker: Optional[str]
  end_marker: Optional[str]


def strip_gutenberg_boilerplate(text: str) -> StrippedText:
  """Cuts the Project Gutenberg licence header and footer off a book.

  The header ends at the "*** START OF THE/THIS PROJECT GUTENBERG ..." line, or for legacy etexts
  at the last "SMALL PRINT" line of the first quarter (or 30 kB). The footer starts at the earliest
  line after the header that is "*** END OF ...", "End of (the) Project Gutenberg ..." or "End of
  this Etext ...".

  A missing marker is reported (`start_marker` / `end_marker` is None) and the text on that side
  is KEPT. Choice: dropping the book would silently lose a whole book of prose to a wording we do
  not know, while the paragraph filter drops any paragraph that mentions Project Gutenberg, etexts
  or URLs anyway; `prepare_corpus` lists such books in stats.json and logs a warning.

  Args:
    text: a whole book, "\n" line ends.

  Returns:
    A `StrippedText`.
  """
  start = 0
  start_marker = None
  match = _START_RE.search(text)
  if match:
    start, start_marker = match.end(), "modern"
  else:
    last = None
    for last in _LEGACY_START_RE.finditer(text, 0, max(len(text) // 4, 30000)):
      pass
    if last is not None:
      start, start_marker = last.end(), "legacy"

  end = len(text)
  end_marker = None
  candidates = []
  match = _END_RE.search(text, start)
  if match:
    candidates.append((match.start(), "modern"))
  match = _LEGACY_END_RE.search(text, start)
  if match:
    candidates.append((match.start(), "legacy"))
  if candidates:
    end, end_marker = min(candidates)
    # Name the marker after the kind of book: a modern book's "End of the Project Gutenberg EBook"
    # line sits just above its "*** END" marker.
    if start_marker == "modern" and any(kind == "modern" for _, kind in candidates):
      end_marker = "modern"
  return StrippedText(text[start:end], start_marker, end_marker)


# ---------------------------------------------------------------------------------------------
# Paragraphs
# ---------------------------------------------------------------------------------------------


def paragraph_blocks(text: str) -> Iterator[List[str]]:
  """Yields blank-line separated paragraphs as lists of their (right-stripped) lines."""
  block = []
  for line in text.split("\n"):
    if line.strip():
      block.append(line.rstrip())
    elif block:
      yield block
      block = []
  if block:
    yield block


def unwrap(lines: Sequence[str]) -> str:
  """Joins the hard-wrapped lines of one paragraph into one line.

  A line that ends in a single hyphen is joined WITHOUT a space and keeps its hyphen: Gutenberg
  transcribers already rejoined words split by the printer, so a hyphen left at a line end is
  nearly always a real compound ("fore-" + "ground" -> "fore-ground"). A dash ("--") is joined
  without a space too; dash spacing is settled by the inline cleaning.
  """
  out = []
  for line in lines:
    line = line.strip()
    if not line:
      continue
    if out and not out[-1].endswith("-"):
      out.append(" ")
    out.append(line)
  return "".join(out)


def paragraphs(text: str) -> List[str]:
  """Unwraps hard-wrapped text into paragraphs (blank-line separated), one string each."""
  return [unwrap(block) for block in paragraph_blocks(text)]


# ---------------------------------------------------------------------------------------------
# Sentence splitting
# ---------------------------------------------------------------------------------------------
# Why hand-written: nltk's punkt needs a model download at run time (not allowed here). Measured on
# 200 kB of Jane Eyre against the PyPI rule-based splitters: pysbd 0.3.4 took 9.5 s (this splitter
# 0.05 s, i.e. ~80 min instead of ~25 s for the corpus), segtok 0.8 s; pysbd and sentencex keep a
# multi-sentence quotation as ONE sentence ('"I don't know. I asked Aunt Reed once..."'), where
# this splitter, like punkt, splits it. Any of them would also be a new dependency for a rule set
# of ~60 lines. The rules are tuned to Gutenberg prose (curly quotes, "--" dashes, abbreviations).

# Abbreviations after which a period does not end a sentence: titles and words that are followed by
# a name ("Mr. Smith", "St. Paul"), and Latin connectives ("e.g. London").
_NON_FINAL_ABBREVS = frozenset(
  "mr mrs messrs mme mlle mmes dr drs st ste mt ft prof rev revd capt col gen lieut lt maj "
  "sgt cpl adm gov hon sen pres supt rt e.g i.e viz cf vs ca".split()
)
# Abbreviations that precede a number ("No. 7", "p. 12", "Feb. 26"): no split before a digit.
_NUMBER_ABBREVS = frozenset(
  "no nos vol vols p pp ch chap fig figs art sec sect par op l ll jan feb mar apr jun jul aug "
  "sep sept oct nov dec".split()
)
_OPENERS = "\"'“‘«([_"
# A run of terminal punctuation (".", "?", "!", "...", "…"), then any closing quotes/brackets,
# then the whitespace a boundary needs.
_TERMINAL_RE = re.compile(r"([.?!…]+)([\"'”’»)\]_]*)\s+")


def _is_boundary(text: str, match: "re.Match[str]") -> bool:
  """Decides whether the terminal punctuation `match` in `text` ends a sentence."""
  # The first letter or digit of what follows, past opening quotes/brackets.
  j = match.end()
  while j < len(text) and text[j] in _OPENERS:
    j += 1
  if j >= len(text):
    return False
  nxt = text[j]
  # A lower-case continuation is never a new sentence: "e.g. the", "etc. and", '"Stop!" he cried',
  # "well... perhaps". Neither is a dash or other punctuation.
  if not (nxt.isupper() or nxt.isdigit()):
    return False
  punct, closers = match.group(1), match.group(2)
  if "?" in punct or "!" in punct or "…" in punct or ".." in punct:
    return True
  if closers:
    # 'He said "Go." Then': a period inside closing quotes ends the sentence.
    return True
  word = text[text.rfind(" ", 0, match.start()) + 1 : match.start()].lstrip(_OPENERS)
  lower = word.lower()
  if lower in _NON_FINAL_ABBREVS:
    return False
  if lower in _NUMBER_ABBREVS and nxt.isdigit():
    return False
  # Initials: "J. M. Barrie". "I." is left out: the pronoun ending a sentence is far more common
  # than the initial I.
  if len(word) == 1 and word.isupper() and word != "I":
    return False
  return True


def split_sentences(paragraph: str) -> List[str]:
  """Splits one unwrapped paragraph into sentences.

  Rules: a sentence ends at ".", "?", "!", "..." or "…" (plus any closing quotes or brackets)
  followed by whitespace and then an upper-case letter or a digit (past opening quotes). A period
  does not end a sentence after a title-like abbreviation (Mr., Mrs., Dr., St., e.g., i.e., ...),
  after "No."/"p."/"Feb." before a number, or after a single-letter initial. Decimals ("3.14") and
  dotted abbreviations never match because the period is not followed by whitespace.

  Args:
    paragraph: one paragraph on one line (see `unwrap`).

  Returns:
    The sentences, stripped, in order; [] for an empty paragraph.
  """
  text = " ".join(paragraph.split())
  sentences = []
  start = 0
  for match in _TERMINAL_RE.finditer(text):
    if _is_boundary(text, match):
      sentences.append(text[start : match.end(2)])
      start = match.end()
  if start < len(text):
    sentences.append(text[start:])
  return [s.strip() for s in sentences if s.strip()]


# ---------------------------------------------------------------------------------------------
# Junk filtering
# ---------------------------------------------------------------------------------------------

# Licence and production notes that survive outside the markers (legacy books, "Produced by ..."
# credits at the top of modern bodies, transcriber notes, the Shakespeare CD-ROM notice).
_BOILERPLATE_RE = re.compile(
  r"gutenb[eu]rg|\be-?texts?\b|\be-?books?\b|https?:|www\.|\w@\w|small print|\bISBN\b"
  r"|^\W*(?:produced|prepared|transcribed|digitized|scanned|proofread|e-text prepared)"
  r"\s+(?:by|from)\b"
  r"|proofreading team|transcriber'?’?s?\s+note|^\W*copyright\b|all rights reserved",
  re.IGNORECASE,
)
_CONTENTS_RE = re.compile(
  r"^\W*(?:table of contents|contents|list of illustrations|illustrations|index)\W*$", re.IGNORECASE
)
_NUMERAL = r"(?:[IVXLCDM]+|[ivxlcdm]+|\d+)"
_NUMBER_WORDS = (
  r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|"
  r"fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|first|second|"
  r"third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|"
  r"the\s+(?:first|second|third|last|\w+th))"
)
# "CHAPTER IV", "Chapter 12: The Beginning", "BOOK II.", "ACT I. SCENE 2", "STAVE ONE", "Canto XX".
_HEADING_RE = re.compile(
  r"^\W*(?:chapter|chap|book|part|section|sect|canto|act|scene|volume|vol|stave|letter|lecture|"
  r"article|psalm|sonnet|fytte|adventure|story|essay)\.?\s+(?:"
  + _NUMERAL
  + "|"
  + _NUMBER_WORDS
  + r")\b",
  re.IGNORECASE,
)
# A paragraph that is only a numeral ("IV.", "12") or a structural word ("PREFACE", "The End.").
_BARE_HEADING_RE = re.compile(
  r"^\W*(?:" + _NUMERAL + r"|preface|introduction|introductory|prologue|epilogue|appendix|"
  r"conclusion|dedication|postscript|afterword|foreword|glossary|notes|footnotes|the end|finis|"
  r"contents|index)\W*$",
  re.IGNORECASE,
)
_FOOTNOTE_START_RE = re.compile(
  r"^\W{0,2}(?:\[?footnotes?\b|\[\s*(?:\d+|[A-Za-z]|\*+|†|‡)\s*\]|\{\d+\})", re.IGNORECASE
)
# Page references in a table of contents: a page number after dot leaders or a column gap.
# An index entry ends in page numbers after a comma ("Abbott, Lyman, 23, 45-47").
_PAGE_REF_RE = re.compile(
  r"(?:\.\s?){3,}\s*(?:\d+|[ivxlc]+)\s*$|\s{2,}(?:\d+|[ivxlc]+)\s*$|^\s*page\s*$"
  r"|,\s*\d+(?:\s*[-–,]\s*\d+)*\.?\s*$",
  re.IGNORECASE,
)
# "I. The Old House", "XIV  A Duel to the Death", "12) Notes": the numeral needs punctuation or
# a column gap after it, so that a line of prose such as "I went home" or "did he" is no entry.
_NUMBERED_ENTRY_RE = re.compile(r"^\W*(?:[IVXLCDM]+|[ivxlcdm]+|\d+)(?:[.):]\s*|\s{2,})\S")
# Tags that are removed from the running text in place.
_ILLUSTRATION_TAG_RE = re.compile(
  r"\[\s*(?:illustration|sidenote|side-note|map|decoration|frontispiece|plate|picture|image|"
  r"transcriber'?’?s?\s+note)\b[^\]]*\]",
  re.IGNORECASE,
)
_FOOTNOTE_BLOCK_RE = re.compile(r"\[\s*footnote\b[^\]]*\]", re.IGNORECASE)
_FOOTNOTE_MARKER_RE = re.compile(r"\[\s*(?:\d{1,3}|[A-Za-z]|\*+|†|‡)\s*\]")
# Curly braces never occur in prose: page anchors ("{62a}") and image notes ("{... p184.jpg}").
_BRACE_TAG_RE = re.compile(r"\{[^{}]{0,300}\}")
# Transliterations of other scripts ("[Greek: logos]"): removing them leaves a sentence with a
# hole, so the sentence is dropped instead.
_FOREIGN_TAG_RE = re.compile(
  r"\[\s*(?:greek|hebrew|arabic|sanskrit|syriac|coptic)\s*:", re.IGNORECASE
)
# A dash glued between two words ("word--word", "word—word").
_DASH_RE = re.compile(r"(?<=\w)(-{2,}|—+|―)(?=\w)")
_SPACED_ELLIPSIS_RE = re.compile(r"\.(?:\s\.){2,}")
# "=Bold=" markup of transcribers.
_BOLD_RE = re.compile(r"(?<=[\w.!?])=|=(?=\w)")
# Latin-script letters (ASCII, Latin-1, Latin Extended-A/B, Latin Extended Additional).
_LATIN_RE = re.compile("[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff]")


# Character classes for counting letters by case. A per-character Python loop was 40 % of the
# run time; `re` counts in C. Code points below U+3000 cover Latin, Greek and Cyrillic.
def _char_class(predicate) -> "re.Pattern[str]":
  return re.compile(
    "[" + "".join(re.escape(chr(i)) for i in range(0x3000) if predicate(chr(i))) + "]"
  )


_UPPER_RE = _char_class(str.isupper)
_LOWER_RE = _char_class(str.islower)
_NON_LETTER_RE = re.compile(r"[\W\d_]+")
_SPACE_RE = re.compile(r"\s+")


def _mostly_non_letters(text: str, min_letter_ratio: float = 0.5, min_chars: int = 8) -> bool:
  # Below min_chars ('"No."') the ratio says little; such fragments fall to "too_short" unless
  # they have no letter at all ("* * *").
  nonspace = len(_SPACE_RE.sub("", text))
  letters = len(_NON_LETTER_RE.sub("", text))
  return (
    nonspace > 0
    and letters < min_letter_ratio * nonspace
    and (nonspace >= min_chars or letters == 0)
  )


def _is_all_caps(text: str, min_cased: int = 4) -> bool:
  # 90 % rather than 100 % so that "LETTER FROM Mr. JONES" or "THE END OF BOOK Ii" still count.
  upper = len(_UPPER_RE.findall(text))
  lower = len(_LOWER_RE.findall(text))
  return upper + lower >= min_cased and upper >= 0.9 * (upper + lower)


def _is_title_like(line: str, max_words: int = 12, min_capitalised: float = 0.6) -> bool:
  """True for a short line whose longer words are mostly capitalised ("The Old Street-Lamp")."""
  words = line.split()
  if not words or len(words) > max_words:
    return False
  long_words = [w.strip(_OPENERS + "\"'”’.,;:!?)]-") for w in words]
  long_words = [w for w in long_words if len(w) > 3 and w[:1].isalpha()]
  if not long_words:
    return False
  capitalised = sum(1 for w in long_words if w[0].isupper())
  return capitalised >= min_capitalised * len(long_words)


def _is_heading(text: str) -> bool:
  """True for "CHAPTER IV", "Chapter 12: The Beginning", "BOOK II.", "IV.", "PREFACE".

  After "<keyword> <numeral>" only punctuation or a title may follow, so that prose such as
  "Letter I wrote to her." is not taken for a heading.
  """
  if _BARE_HEADING_RE.match(text):
    return True
  match = _HEADING_RE.match(text)
  if not match:
    return False
  rest = text[match.end() :].strip()
  return not rest or rest[0] in ".:,;—–-)" or _is_title_like(rest) or _is_all_caps(rest, 2)


def _is_toc_entry(line: str) -> bool:
  """True for a line that can be part of a table of contents (see `ParagraphFilter`)."""
  if _PAGE_REF_RE.search(line) or _NUMBERED_ENTRY_RE.match(line):
    return True
  line = " ".join(line.split())
  if len(line.split()) > 14:
    return False
  return bool(_is_heading(line) or _is_title_like(line) or _is_all_caps(line, 2))


class ParagraphFilter:
  """Classifies the paragraphs of ONE document as kept (None) or dropped with a reason.

  Stateful because two kinds of junk are only recognisable from their neighbours: the entries
  after a "CONTENTS" heading (until the first paragraph that is not entry-like), and a title line
  right after a chapter heading ("CHAPTER I" / "The Beginning").
  """

  # Safety valve: a table of contents longer than this many lines is not one.
  _MAX_TOC_LINES = 400

  def __init__(self):
    self._in_toc = False
    self._toc_lines = 0
    self._after_heading = False

  def reason(self, lines: Sequence[str]) -> Optional[str]:
    """Returns the drop reason for a paragraph block (list of lines), or None to keep it."""
    after_heading, self._after_heading = self._after_heading, False
    text = " ".join(" ".join(lines).split())
    if _BOILERPLATE_RE.search(text):
      return "boilerplate"

    if _CONTENTS_RE.match(lines[0]):
      self._in_toc, self._toc_lines = True, len(lines)
      return "toc"
    if self._in_toc:
      if self._toc_lines + len(lines) <= self._MAX_TOC_LINES and all(
        _is_toc_entry(line) for line in lines
      ):
        self._toc_lines += len(lines)
        return "toc"
      self._in_toc = False

    if _FOOTNOTE_START_RE.match(text):
      return "footnote"
    if not _ILLUSTRATION_TAG_RE.sub("", text).strip():
      return "illustration"
    if _mostly_non_letters(text):
      return "non_letters"
    short = len(lines) <= 3 and len(text.split()) <= 15
    if short and _is_heading(text):
      self._after_heading = True
      return "heading"
    if _is_all_caps(text):
      self._after_heading = after_heading
      return "all_caps"
    if len(lines) >= 2 and sum(bool(_PAGE_REF_RE.search(l)) for l in lines) >= 0.6 * len(lines):
      return "toc"
    if len(lines) == 1 and _PAGE_REF_RE.search(lines[0]) and len(text.split()) <= 14:
      return "toc"
    # A list of titles without sentence punctuation (an index of characters, a list of works):
    # unwrapped, it would become one long pseudo-sentence.
    if len(lines) >= 3 and all(
      _is_title_like(l, 8) and not re.search(r"[.?!;:]\W*$", l) for l in lines
    ):
      return "toc"
    # A lone title line: after a heading ("CHAPTER I" / "The Dream of Little Tuk"), or anywhere
    # when it has no sentence punctuation ("By Louisa May Alcott", "The Old Street-Lamp").
    if len(lines) <= 2 and _is_title_like(text):
      if after_heading or (
        _is_title_like(text, 10, 0.75) and not re.search(r"[.?!:;,\"'”’]\W*$", text)
      ):
        return "heading"
    return None


def clean_paragraph(text: str, counts: Optional[collections.Counter] = None) -> str:
  """Removes inline markup from an unwrapped paragraph; counts the edits in `counts`.

  Removes illustration/sidenote tags, footnote blocks and markers ("[12]", "[*]"), curly-brace
  tags ("{62a}"), italics underscores, asterisks, "=bold=" equals signs; spaces out dashes glued
  between two words ("word--word" -> "word -- word") so that whitespace-tokenised models (KenLM)
  see two words; turns ". . ." into "...". Case and other punctuation are left alone (that is
  `normalization.normalize_librispeech`'s job).
  """
  counts = counts if counts is not None else collections.Counter()
  text, n = _ILLUSTRATION_TAG_RE.subn(" ", text)
  counts["edits/illustration_tags_removed"] += n
  text, n = _FOOTNOTE_BLOCK_RE.subn(" ", text)
  counts["edits/footnotes_removed"] += n
  text, n = _FOOTNOTE_MARKER_RE.subn("", text)
  counts["edits/footnote_markers_removed"] += n
  text, n = _BRACE_TAG_RE.subn("", text)
  counts["edits/brace_tags_removed"] += n
  # Underscores only ever mark italics in Gutenberg plain text ("_Household Words._"); asterisks
  # are emphasis ("*ALI PACHA*"), footnote references ("me.*") or separators ("* * *").
  text = text.replace("_", "").replace("*", "")
  text = _BOLD_RE.sub("", text)
  text = _SPACED_ELLIPSIS_RE.sub("...", text)
  text = _DASH_RE.sub(lambda m: " " + m.group(1) + " ", text)
  return unicodedata.normalize("NFC", " ".join(text.split()))


def sentence_reason(sentence: str, check_caps: bool = True) -> Optional[str]:
  """Returns the normalization-independent drop reason for a sentence, or None.

  Word-count limits are applied later, to the normalized sentence (see `prepare_corpus`).
  """
  if _FOREIGN_TAG_RE.search(sentence):
    return "foreign_script"
  if _mostly_non_letters(sentence):
    return "non_letters"
  if not sentence.isascii():
    letters = len(_NON_LETTER_RE.sub("", sentence))
    if len(_LATIN_RE.findall(sentence)) < 0.5 * letters:
      return "non_latin"  # Greek or Cyrillic quotations.
  if check_caps and _is_all_caps(sentence):
    return "all_caps"
  return None


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------


def _check_formats(normalization: str, input_format: str) -> None:
  """Raises ValueError for an unknown normalization or input format."""
  if normalization not in normalization_lib.NORMALIZATIONS:
    raise ValueError(
      f"normalization: expected one of {normalization_lib.NORMALIZATIONS}, got {normalization!r}"
    )
  if input_format not in INPUT_FORMATS:
    raise ValueError(f"input_format: expected one of {INPUT_FORMATS}, got {input_format!r}")


def _finish_sentence(
  sentence: str,
  normalization: str,
  min_words: int,
  max_words: int,
  counts: collections.Counter,
  check_caps: bool,
) -> Optional[str]:
  """Filters and normalizes one candidate sentence; counts it; returns the output line or None."""
  counts["sentences/candidates"] += 1
  reason = sentence_reason(sentence, check_caps=check_caps)
  out = sentence
  if reason is None and normalization == "librispeech":
    try:
      out = normalization_lib.normalize_librispeech(sentence, counts)
    except normalization_lib.NormalizationError as e:
      reason = e.reason
  if reason is None:
    n_words = len(out.split())
    if n_words < min_words:
      reason = "too_short"
    elif n_words > max_words:
      reason = "too_long"
  if reason is not None:
    counts["sentences/dropped/" + reason] += 1
    return None
  return out


def process_document(
  text: str,
  gutenberg: bool = True,
  input_format: str = "paragraphs",
  normalization: str = "none",
  min_words: int = 3,
  max_words: int = 100,
) -> Tuple[List[str], collections.Counter]:
  """Turns one document into output sentences (before dedup and the train/eval split).

  Args:
    text: the document ("\n" line ends).
    gutenberg: strip the Project Gutenberg header and footer first.
    input_format: "paragraphs" (blank-line separated, hard-wrapped: the full paragraph filter and
      sentence splitter run) or "lines" (already one sentence per line: only the sentence filter
      runs, without the all-caps check so that upper-case corpora such as LibriSpeech-LM pass).
    normalization: "none" or "librispeech".
    min_words: sentences with fewer words (after normalization) are dropped ("too_short").
    max_words: sentences with more words are dropped ("too_long").

  Returns:
    (sentences, counts): the kept sentences in order, and a Counter with keys
    "paragraphs/candidates", "paragraphs/kept", "paragraphs/dropped/<reason>",
    "sentences/candidates", "sentences/dropped/<reason>", "edits/<kind>", "books/...".
  """
  _check_formats(normalization, input_format)
  counts = collections.Counter()
  out = []
  if input_format == "lines":
    for line in text.split("\n"):
      if not line.strip():
        continue
      sentence = clean_paragraph(line, counts)
      kept = _finish_sentence(sentence, normalization, min_words, max_words, counts, False)
      if kept is not None:
        out.append(kept)
    return out, counts

  if looks_like_html(text):
    text = html_to_text(text)
    counts["books/html_converted"] += 1
  else:
    text = unescape_entities(text)
  if gutenberg:
    stripped = strip_gutenberg_boilerplate(text)
    text = stripped.body
    if stripped.start_marker is None:
      counts["books/missing_start_marker"] += 1
    if stripped.end_marker is None:
      counts["books/missing_end_marker"] += 1
  para_filter = ParagraphFilter()
  for block in paragraph_blocks(text):
    counts["paragraphs/candidates"] += 1
    reason = para_filter.reason(block)
    if reason is None:
      cleaned = clean_paragraph(unwrap(block), counts)
      if not cleaned:
        reason = "empty"
    if reason is not None:
      counts["paragraphs/dropped/" + reason] += 1
      continue
    counts["paragraphs/kept"] += 1
    for sentence in split_sentences(cleaned):
      kept = _finish_sentence(sentence, normalization, min_words, max_words, counts, True)
      if kept is not None:
        out.append(kept)
  return out, counts


def _process_job(job):
  """Pool worker: (key, text, kwargs) -> (key, sentences, counts)."""
  key, text, kwargs = job
  sentences, counts = process_document(text, **kwargs)
  return key, sentences, counts


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------


def choose_eval_books(
  books: Sequence[Tuple[str, int]], eval_fraction: float, seed: int
) -> List[str]:
  """Chooses the held-out books: a seeded random order, taken until eval_fraction of the bytes.

  Args:
    books: [(book_id, size_in_bytes)].
    eval_fraction: target share of the bytes in the eval set; 0 -> no eval books.
    seed: the seed.

  Returns:
    The chosen book ids (at least one when eval_fraction > 0 and there are 2+ books).
  """
  if eval_fraction <= 0 or len(books) < 2:
    return []
  target = eval_fraction * sum(size for _, size in books)
  ordered = sorted(books, key=lambda b: io_utils.unit_hash(seed, "book:" + b[0]))
  # Take every book that still fits under the target, in the seeded order; skipping one that does
  # not fit (rather than stopping) keeps the eval share close to the target.
  chosen, size_sum = [], 0
  for book_id, size in ordered:
    if size_sum + size <= target:
      chosen.append(book_id)
      size_sum += size
  return chosen or [ordered[0][0]]


def _nest(counts: collections.Counter, prefix: str, keys: Sequence[str] = ()) -> Dict[str, int]:
  """{suffix: count} for the keys under `prefix`; every name in `keys` appears, 0 if unseen."""
  nested = {key: 0 for key in keys}
  nested.update((k[len(prefix) :], v) for k, v in counts.items() if k.startswith(prefix))
  return dict(sorted(nested.items()))


def _corpus_args(
  inputs: Sequence[str],
  normalization: str,
  eval_fraction: float,
  seed: int,
  dedup: bool,
  min_words: int,
  max_words: int,
  input_format: str,
  max_books: Optional[int],
) -> dict:
  """Checks the arguments of `prepare_corpus`; returns them as stats.json records them.

  Raises:
    ValueError: naming a bad argument; FileNotFoundError for a missing input.
  """
  _check_formats(normalization, input_format)
  if not inputs:
    raise ValueError("inputs: expected at least one path, got none")
  if not 0 <= eval_fraction < 1:
    raise ValueError(f"eval_fraction: expected 0 <= f < 1, got {eval_fraction}")
  if not 0 <= min_words <= max_words:
    raise ValueError(f"min_words/max_words: expected 0 <= {min_words} <= {max_words}")
  for path in inputs:
    if not os.path.isfile(path):
      raise FileNotFoundError(
        f"input {path!r} not found (pass --input, or --data_dir / "
        "$TTA_DATA for the default archive)"
      )
  return {
    "inputs": [{"path": os.path.abspath(p), "bytes": os.path.getsize(p)} for p in inputs],
    "normalization": normalization,
    "eval_fraction": eval_fraction,
    "seed": seed,
    "dedup": dedup,
    "min_words": min_words,
    "max_words": max_words,
    "input_format": input_format,
    "max_books": max_books,
    "pipeline_version": PIPELINE_VERSION,
  }


class _Source(NamedTuple):
  """One input of `prepare_corpus`.

  Attributes:
    path: the file.
    is_tar: a Gutenberg archive (else a plain text file).
    items: [(book_id, bytes)] of the books read (a tar), or [(path, bytes)] (a plain file).
    eval_ids: the held-out book ids (a tar; chosen among ALL its books, before max_books).
  """

  path: str
  is_tar: bool
  items: List[Tuple[str, int]]
  eval_ids: frozenset


def _list_sources(
  inputs: Sequence[str], eval_fraction: float, seed: int, max_books: Optional[int]
) -> List[_Source]:
  """Lists every input; costs one decompression pass per tar (sizes for the ETA, held-out books)."""
  sources = []
  for path in inputs:
    if is_tar(path):
      books = list_gutenberg_books(path)
      eval_ids = frozenset(choose_eval_books(books, eval_fraction, seed))
      sources.append(_Source(path, True, books[:max_books], eval_ids))
    else:
      sources.append(_Source(path, False, [(path, os.path.getsize(path))], frozenset()))
  return sources


def _jobs(sources: Sequence[_Source], doc_kwargs: dict, input_format: str):
  """Yields the pool jobs (key, text, kwargs): one per book or plain file, in input order."""
  for source in sources:
    if source.is_tar:
      kwargs = dict(doc_kwargs, gutenberg=True, input_format="paragraphs")
      # zip stops reading the stream after the last book wanted (max_books).
      for _, (book_id, text) in zip(source.items, iter_gutenberg_books(source.path)):
        yield (source.path, book_id), text, kwargs
    else:
      with open(source.path, "rb") as f:
        text = _decode(f.read())
      yield (source.path, None), text, dict(doc_kwargs, gutenberg=False, input_format=input_format)


@contextlib.contextmanager
def _mapper(num_workers: int):
  """An ordered `map` over the jobs: in-process for one worker, else a pool of processes."""
  if num_workers <= 1:
    yield map
    return
  # "spawn", not the Linux default "fork": callers such as create_pretraining_data.py import
  # TensorFlow first, and forking a process that runs TF's thread pools can deadlock.
  pool = multiprocessing.get_context("spawn").Pool(num_workers)
  try:
    yield pool.imap
  finally:
    pool.terminate()
    pool.join()


class _Collector:
  """Merges the per-document results in input order into train.txt and eval.txt.

  Dedup is global and exact (first occurrence wins); a Gutenberg sentence goes where its book
  goes, a plain-file sentence by a seeded hash of its text.
  """

  def __init__(
    self,
    files: Dict[str, object],
    sources: Sequence[_Source],
    dedup: bool,
    eval_fraction: float,
    seed: int,
  ):
    self._files = files
    self._eval_books = {(s.path, b) for s in sources if s.is_tar for b in s.eval_ids}
    self._dedup = dedup
    self._eval_fraction = eval_fraction
    self._seed = seed
    self._seen = set()
    self.counts = collections.Counter()
    self.missing = {"start": [], "end": []}
    self.eval_ids = []
    self.sentences = collections.Counter()  # per split
    self.words = collections.Counter()  # per split

  def add(
    self,
    path: str,
    book_id: Optional[str],
    sentences: Sequence[str],
    doc_counts: collections.Counter,
  ) -> None:
    """Adds one document's sentences (book_id None for a plain file)."""
    self.counts.update(doc_counts)
    if book_id is not None:
      self._count_book(book_id, doc_counts)
    is_eval_book = (path, book_id) in self._eval_books
    if is_eval_book:
      self.eval_ids.append(book_id)
    for sentence in sentences:
      if self._is_duplicate(sentence):
        continue
      if book_id is not None:
        split = "eval" if is_eval_book else "train"
      else:
        held_out = io_utils.unit_hash(self._seed, "line:" + sentence) < self._eval_fraction
        split = "eval" if held_out else "train"
      self._files[split].write(sentence + "\n")
      self.sentences[split] += 1
      self.words[split] += len(sentence.split())

  def _count_book(self, book_id: str, doc_counts: collections.Counter) -> None:
    self.counts["books/total"] += 1
    if doc_counts["books/missing_start_marker"]:
      self.missing["start"].append(book_id)
      logging.warning(
        "corpus: %s: no Gutenberg START marker; header kept (the boilerplate "
        "filter still drops licence paragraphs)",
        book_id,
      )
    if doc_counts["books/missing_end_marker"]:
      self.missing["end"].append(book_id)
      logging.warning("corpus: %s: no Gutenberg END marker; footer kept", book_id)

  def _is_duplicate(self, sentence: str) -> bool:
    if not self._dedup:
      return False
    digest = hashlib.blake2b(sentence.encode("utf-8"), digest_size=8).digest()
    if digest in self._seen:
      self.counts["sentences/duplicates"] += 1
      return True
    self._seen.add(digest)
    return False


def _log_corpus_progress(bar, docs, total_docs, log_every, collector):
  """Every `log_every` documents (and after the last), the MB done with rate and ETA (books
  differ in size by 100x: bytes predict the time left, documents do not) and the counts."""
  if docs % log_every and docs != total_docs:
    return
  bar.log(
    f"{docs}/{total_docs} documents, {sum(collector.sentences.values())} sentences kept, "
    f"{collector.counts['sentences/duplicates']} duplicates"
  )


def _corpus_stats(args: dict, collector: _Collector, elapsed: float) -> dict:
  """The stats.json record: every candidate accounted for as kept or dropped (with its reason)."""
  counts, sentences, words = collector.counts, collector.sentences, collector.words
  kept = sum(sentences.values())
  total_words = sum(words.values())
  return {
    "args": args,
    "books": {
      "total": counts["books/total"],
      "eval": len(collector.eval_ids),
      "eval_ids": sorted(collector.eval_ids),
      "missing_start_marker": sorted(collector.missing["start"]),
      "missing_end_marker": sorted(collector.missing["end"]),
    },
    "paragraphs": {
      "candidates": counts["paragraphs/candidates"],
      "kept": counts["paragraphs/kept"],
      "dropped": _nest(counts, "paragraphs/dropped/", PARAGRAPH_REASONS),
    },
    "sentences": {
      "candidates": counts["sentences/candidates"],
      "kept": kept,
      "dropped": _nest(counts, "sentences/dropped/", SENTENCE_REASONS),
      "duplicates": counts["sentences/duplicates"],
    },
    "edits": _nest(counts, "edits/"),
    "train": {"sentences": sentences["train"], "words": words["train"]},
    "eval": {"sentences": sentences["eval"], "words": words["eval"]},
    "words": total_words,
    "mean_words_per_sentence": round(total_words / kept, 3) if kept else 0.0,
    "elapsed_s": round(elapsed, 1),
  }


def prepare_corpus(
  inputs: Sequence[str],
  output_dir: str,
  normalization: str = "none",
  eval_fraction: float = 0.01,
  seed: int = 12345,
  dedup: bool = True,
  min_words: int = 3,
  max_words: int = 100,
  input_format: str = "lines",
  num_workers: Optional[int] = None,
  log_every: int = 20,
  max_books: Optional[int] = None,
  force: bool = False,
) -> dict:
  """Builds train.txt, eval.txt and stats.json in `output_dir` from raw text.

  Inputs are processed in the given order; within a tar archive, books in archive order; output
  lines keep that order (shuffling is create_pretraining_data's job). The result is deterministic
  for given arguments (the worker pool preserves order; hashes are seeded sha256).

  Held-out split: for a Gutenberg tar, whole BOOKS (`choose_eval_books`, about eval_fraction of the
  bytes), so that eval sentences are not near-duplicates of train sentences from the same book;
  for plain files, each sentence by a seeded hash of its output text. Dedup is global and exact
  (on the output line, first occurrence wins), so no eval line also appears in train.

  Files are written to temporaries and renamed when complete; stats.json is the stage's stamp
  (`io_utils.write_stamp`), written last. If `output_dir` already holds a complete output whose
  stamp records the same arguments (and file sizes), nothing is recomputed unless `force`.

  Args:
    inputs: paths; a `.tar.xz` (or other tar) is read as a Gutenberg archive, anything else as a
      plain UTF-8 text file in `input_format`.
    output_dir: created if needed.
    normalization: "none" (cleaned text, case and punctuation kept) or "librispeech".
    eval_fraction: share held out (bytes of books for a tar, sentences for plain files).
    seed: seed of the held-out choice.
    dedup: drop exact duplicate output lines.
    min_words: drop sentences with fewer words (after normalization).
    max_words: drop sentences with more words (after normalization). 100 words is about 128
      WordPiece tokens, T-TA's max_seq_length.
    input_format: for plain files: "lines" (one sentence per line) or "paragraphs".
    num_workers: processes for the per-book work (default: all cores); 1 runs in-process.
    log_every: log progress every this many books (or plain files).
    max_books: stop after this many books per tar (for quick runs); recorded in the args.
    force: rebuild even if a matching complete output exists.

  Returns:
    The stats dict that is also written to stats.json.
  """
  args = _corpus_args(
    inputs, normalization, eval_fraction, seed, dedup, min_words, max_words, input_format, max_books
  )
  os.makedirs(output_dir, exist_ok=True)
  stamp_path = os.path.join(output_dir, STATS_FILE)
  stats = None if force else io_utils.read_stamp(stamp_path, args)
  if stats is not None:
    logging.info(
      "corpus: %s is complete for these arguments; skipping (force=True rebuilds)", output_dir
    )
    return stats
  io_utils.remove_stamp(stamp_path)

  start_time = time.time()
  sources = _list_sources(inputs, eval_fraction, seed, max_books)
  doc_kwargs = {"normalization": normalization, "min_words": min_words, "max_words": max_words}
  paths = {split: os.path.join(output_dir, split + ".txt") for split in ("train", "eval")}
  with contextlib.ExitStack() as stack:
    files = {
      split: stack.enter_context(io_utils.atomic_open(path)) for split, path in paths.items()
    }
    collector = _Collector(files, sources, dedup, eval_fraction, seed)
    sizes = {(s.path, key if s.is_tar else None): size for s in sources for key, size in s.items}
    total_docs = sum(len(s.items) for s in sources)
    bar = progress.Progress("corpus", total=sum(sizes.values()) / 1e6, unit="MB")
    results = stack.enter_context(_mapper(num_workers or os.cpu_count() or 1))(
      _process_job, _jobs(sources, doc_kwargs, input_format)
    )
    for docs, ((path, book_id), sentences, doc_counts) in enumerate(results, 1):
      collector.add(path, book_id, sentences, doc_counts)
      bar.done += sizes[(path, book_id)] / 1e6
      _log_corpus_progress(bar, docs, total_docs, log_every, collector)

  stats = _corpus_stats(args, collector, time.time() - start_time)
  stats = io_utils.write_stamp(stamp_path, args, outputs=paths.values(), record=stats)
  logging.info(
    "corpus: wrote %s: %d sentences (%d train, %d eval), %d words, %.1f s",
    output_dir,
    stats["sentences"]["kept"],
    stats["train"]["sentences"],
    stats["eval"]["sentences"],
    stats["words"],
    stats["elapsed_s"],
  )
  return stats


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (called under __main__ only).

  Not at import time: create_pretraining_data.py has flags of the same names (--output_dir,
  --normalization), so importing this module there would raise DuplicateFlagError.
  """
  flags.DEFINE_list(
    "input",
    None,
    "Comma-separated input paths: Gutenberg .tar.xz archives and/or plain text "
    "files. Default: <data_dir>/gutenberg-books-subset/texts.tar.xz.",
  )
  io_utils.define_data_dir_flag()
  flags.DEFINE_string("output_dir", None, "Where train.txt, eval.txt and stats.json go.")
  flags.DEFINE_enum(
    "normalization",
    "none",
    normalization_lib.NORMALIZATIONS,
    "none: cleaned text; librispeech: upper case, no punctuation but apostrophes, "
    "numbers spelled out.",
  )
  flags.DEFINE_enum(
    "input_format",
    "lines",
    INPUT_FORMATS,
    "Format of plain text inputs: one sentence per line, or blank-line separated paragraphs.",
  )
  flags.DEFINE_float("eval_fraction", 0.01, "Share held out for eval.txt.")
  flags.DEFINE_integer("seed", 12345, "Seed of the held-out choice.")
  flags.DEFINE_bool("dedup", True, "Drop exact duplicate sentences.")
  flags.DEFINE_integer("min_words", 3, "Drop sentences with fewer words.")
  flags.DEFINE_integer("max_words", 100, "Drop sentences with more words.")
  flags.DEFINE_integer("num_workers", None, "Worker processes (default: all cores).")
  flags.DEFINE_integer("log_every", 20, "Log progress every this many books.")
  flags.DEFINE_integer("max_books", None, "Stop after this many books per archive.")
  flags.DEFINE_bool("force", False, "Rebuild even if output_dir is complete for these arguments.")


def main(argv):
  del argv  # Unused.
  if not FLAGS.output_dir:
    raise app.UsageError("--output_dir is required")
  with cli.user_input():
    inputs = FLAGS.input or [default_gutenberg_tar(FLAGS.data_dir)]
    stats = prepare_corpus(
      inputs,
      FLAGS.output_dir,
      normalization=FLAGS.normalization,
      eval_fraction=FLAGS.eval_fraction,
      seed=FLAGS.seed,
      dedup=FLAGS.dedup,
      min_words=FLAGS.min_words,
      max_words=FLAGS.max_words,
      input_format=FLAGS.input_format,
      num_workers=FLAGS.num_workers,
      log_every=FLAGS.log_every,
      max_books=FLAGS.max_books,
      force=FLAGS.force,
    )
  print(
    json.dumps(
      {
        k: stats[k]
        for k in (
          "books",
          "paragraphs",
          "sentences",
          "train",
          "eval",
          "words",
          "mean_words_per_sentence",
          "elapsed_s",
        )
      },
      indent=2,
    )
  )


if __name__ == "__main__":
  define_flags()
  cli.run(main)

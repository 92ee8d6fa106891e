# coding=utf-8
"""Cleaning of one document, the rules `corpus.process_document` chains (docs/DESIGN.md §3.1): HTML
to text, the Gutenberg licence, unwrapping, inline markup, sentences, junk filters with reasons.
"""

import collections
import html
import re
from typing import Iterator
from typing import List
from typing import NamedTuple
from typing import Optional
from typing import Sequence
import unicodedata

# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------


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
  return len(_HTML_PARAGRAPH_TAGS_RE.findall(text, 0, 200000)) >= min_paragraph_tags


def html_to_text(text: str) -> str:
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
  """`strip_gutenberg_boilerplate`'s body; start_marker and end_marker are "modern", "legacy" or
  None (not found).
  """

  body: str
  start_marker: Optional[str]
  end_marker: Optional[str]


def strip_gutenberg_boilerplate(text: str) -> StrippedText:
  """Cuts the Project Gutenberg licence header and footer off a book ("\n" line ends).

  A missing marker (None) KEEPS the text on its side: dropping the book would lose it to a wording
  we do not know, and the paragraph filter drops Gutenberg notices anyway.
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
  """The hard-wrapped lines of one paragraph as one line. A hyphen at a line end is kept and joined
  without a space: Gutenberg transcribers rejoined the printer's splits, so it is nearly always a
  compound ("fore-" + "ground").
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


# ---------------------------------------------------------------------------------------------
# Sentence splitting
# ---------------------------------------------------------------------------------------------
# Why hand-written: nltk's punkt needs a model download at run time (not allowed here); the PyPI
# rule-based splitters are far slower on this prose (timings: docs/DESIGN.md §6), and pysbd and
# sentencex keep a multi-sentence quotation as ONE sentence ('"I don't know. I asked Aunt Reed
# once..."'), where this splitter, like punkt, splits it. Any of them would also be a new
# dependency for a rule set of ~60 lines. The rules are tuned to Gutenberg prose (curly quotes,
# "--" dashes, abbreviations).

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
  """The sentences of one unwrapped paragraph: each ends at ".", "?", "!" or "…" (and closers)
  before an upper-case letter or digit, but not after a title, "No."-like before a number, or an
  initial.
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
  """ "CHAPTER IV", "Chapter 12: The Beginning", "BOOK II.", "IV.", "PREFACE"; after "<keyword>
  <numeral>" only punctuation or a title may follow ("Letter I wrote to her." is prose).
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
  """Drop reasons of the paragraphs of ONE document, stateful: a table of contents' entries and a
  title after a chapter heading are junk only by their neighbours.
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
  """An unwrapped paragraph without inline markup (tags, footnotes, italics, "=bold="), counting the
  edits in `counts`. A dash glued between words is spaced ("word -- word") so that
  whitespace-tokenised models (KenLM) see two words; case and punctuation are normalization's job.
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
  """The normalization-independent drop reason of a sentence, or None; word-count limits apply
  later, to the normalized sentence.
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

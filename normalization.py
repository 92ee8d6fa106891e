# coding=utf-8
"""Text normalization: the one owner of how training and evaluation text is normalized.

A model trained on normalized text must see its evaluation text normalized the same way, so the
rules live here once and every user imports them: `corpus.py` (training sentences),
`create_pretraining_data.py` and `ngram.py` (the `--normalization` flag values), and
`inference.py` (STS pairs, N-best hypotheses and WMT candidates, through `normalizer`).

Normalizations (`NORMALIZATIONS`):
  none         the text as given.
  librispeech  LibriSpeech transcript style (`normalize_librispeech`): upper case, numbers and
               abbreviations spelled as read, accents folded to A-Z, no punctuation except
               apostrophes inside words.

Example:
  normalize_librispeech("Mr. O'Brien's café, 1894!")
  # -> "MISTER O'BRIEN'S CAFE EIGHTEEN NINETY FOUR"
"""

import collections
import re
from typing import Callable
from typing import Optional
import unicodedata

NORMALIZATIONS = ("none", "librispeech")


class NormalizationError(ValueError):
  """Raised by `normalize_librispeech` for a sentence that cannot be normalized.

  Attributes:
    reason: "digits" (a number we do not spell out) or "non_latin" (letters that do not fold to
      A-Z, e.g. Greek or Cyrillic).
  """

  def __init__(self, reason: str, detail: str):
    super().__init__(f"{reason}: {detail}")
    self.reason = reason


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------

_ONES = (
  "ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE TEN ELEVEN TWELVE THIRTEEN FOURTEEN "
  "FIFTEEN SIXTEEN SEVENTEEN EIGHTEEN NINETEEN"
).split()
_TENS = "_ _ TWENTY THIRTY FORTY FIFTY SIXTY SEVENTY EIGHTY NINETY".split()
_ORDINAL_IRREGULAR = {
  "ONE": "FIRST",
  "TWO": "SECOND",
  "THREE": "THIRD",
  "FIVE": "FIFTH",
  "EIGHT": "EIGHTH",
  "NINE": "NINTH",
  "TWELVE": "TWELFTH",
}


def _below_thousand(n: int) -> list[str]:
  words = []
  hundreds, rest = divmod(n, 100)
  if hundreds:
    words += [_ONES[hundreds], "HUNDRED"]
    if rest:
      words.append("AND")
  if rest >= 20:
    words.append(_TENS[rest // 10])
    if rest % 10:
      words.append(_ONES[rest % 10])
  elif rest or not hundreds:
    words.append(_ONES[rest])
  return words


def spell_number(n: int, ordinal: bool = False) -> str:
  """Spells an integer 0..999999 the way LibriSpeech transcripts do.

  British "AND" after hundreds and before a final part under 100 ("ONE HUNDRED AND FIFTY",
  "TWO THOUSAND AND FIVE"), no hyphens ("TWENTY ONE"): both as in the LibriSpeech references.

  Args:
    n: the number.
    ordinal: spell "FIRST", "TWENTY SECOND", "ONE HUNDREDTH" instead.

  Returns:
    Upper-case words separated by single spaces.

  Raises:
    ValueError: n outside 0..999999.
  """
  if not 0 <= n <= 999999:
    raise ValueError(f"spell_number: expected 0..999999, got {n}")
  thousands, rest = divmod(n, 1000)
  words = []
  if thousands:
    words += _below_thousand(thousands) + ["THOUSAND"]
    if rest and rest < 100:
      words.append("AND")
  if rest or not thousands:
    words += _below_thousand(rest)
  if ordinal:
    last = words[-1]
    if last in _ORDINAL_IRREGULAR:
      last = _ORDINAL_IRREGULAR[last]
    elif last.endswith("Y"):
      last = last[:-1] + "IETH"
    else:
      last += "TH"
    words[-1] = last
  return " ".join(words)


def spell_year(n: int) -> str:
  """Spells a year 1100..1999 in pairs: 1894 -> EIGHTEEN NINETY FOUR, 1707 -> SEVENTEEN O SEVEN."""
  high, low = divmod(n, 100)
  if low == 0:
    return f"{_ONES[high]} HUNDRED"
  if low < 10:
    return f"{_ONES[high]} O {_ONES[low]}"
  return f"{_ONES[high]} {spell_number(low)}"


# ---------------------------------------------------------------------------------------------
# LibriSpeech normalization
# ---------------------------------------------------------------------------------------------

# Spoken forms, as the LibriSpeech references write them (MISTER, MISSUS, DOCTOR, SAINT).
_ABBREVIATIONS = {
  "Mr": "MISTER",
  "Mrs": "MISSUS",
  "Messrs": "MESSIEURS",
  "Dr": "DOCTOR",
  "Mt": "MOUNT",
  "Ft": "FORT",
  "Prof": "PROFESSOR",
  "Rev": "REVEREND",
  "Capt": "CAPTAIN",
  "Col": "COLONEL",
  "Gen": "GENERAL",
  "Lieut": "LIEUTENANT",
  "Lt": "LIEUTENANT",
  "Maj": "MAJOR",
  "Sgt": "SERGEANT",
  "Hon": "HONOURABLE",
  "Gov": "GOVERNOR",
  "Mme": "MADAME",
  "Mlle": "MADEMOISELLE",
  "Jr": "JUNIOR",
  "Sr": "SENIOR",
  "Esq": "ESQUIRE",
  "Bros": "BROTHERS",
  "Co": "COMPANY",
  "e.g": "FOR EXAMPLE",
  "i.e": "THAT IS",
  "etc": "ET CETERA",
  "&c": "ET CETERA",
  "viz": "NAMELY",
  "vs": "VERSUS",
  "cf": "COMPARE",
}
_ABBREV_RE = re.compile(
  r"(?<![\w.])("
  + "|".join(re.escape(k) for k in sorted(_ABBREVIATIONS, key=len, reverse=True))
  + r")\.|(?<![\w.])(Mr|Mrs|Dr)\b(?=\s+[A-Z])"
)
# "St." is SAINT before a name ("St. Paul"), STREET after one ("Baker St.").
_SAINT_RE = re.compile(r"(?<![\w.])St\.(?=\s*[A-Z])")
_STREET_RE = re.compile(r"(?<![\w.])St\.")
_NUMBER_ABBREV_RE = re.compile(r"(?<![\w.])No\.?(?=\s*\d)|(?<![\w.])Nos\.(?=\s*\d)")
_FRACTIONS = {
  "1/2": "ONE HALF",
  "1/3": "ONE THIRD",
  "2/3": "TWO THIRDS",
  "1/4": "ONE QUARTER",
  "3/4": "THREE QUARTERS",
  "1/8": "ONE EIGHTH",
}
_FRACTION_RE = re.compile(r"(?<![\w/])(\d+)/(\d+)(?![\w/])")
_CURRENCY = {"$": ("DOLLAR", "DOLLARS"), "£": ("POUND", "POUNDS")}
# An integer (optionally with thousands commas), with a currency sign before, and a decimal part
# or an ordinal suffix after. Letters glued on ("6d", "8vo", "10s") make it unspellable.
_NUMBER_RE = re.compile(
  r"(?P<cur>[$£]\s?)?(?<![\w.,])(?P<int>\d{1,3}(?:,\d{3})+|\d+|(?=\.\d))"
  r"(?:(?P<dec>\.\d+)|(?P<ord>st|nd|rd|th|d))?(?![\w])"
)
# Letters that NFKD does not decompose into ASCII + combining marks.
_FOLD = str.maketrans(
  {
    "Æ": "AE",
    "æ": "ae",
    "Œ": "OE",
    "œ": "oe",
    "Ø": "O",
    "ø": "o",
    "ß": "ss",
    "Ł": "L",
    "ł": "l",
    "Đ": "D",
    "đ": "d",
    "Ð": "D",
    "ð": "d",
    "Þ": "TH",
    "þ": "th",
    "ı": "i",
    "ſ": "s",
  }
)
_QUOTES = str.maketrans(
  {"’": "'", "‘": "'", "ʼ": "'", "`": "'", "´": "'", "“": '"', "”": '"', "«": '"', "»": '"'}
)
_WORD_APOSTROPHE_RE = re.compile(r"(?<=[A-Z])'(?=[A-Z])")
_DIGIT_RE = re.compile(r"\d")
_COMBINING_RE = re.compile(
  "[" + "".join(re.escape(chr(i)) for i in range(0x3000) if unicodedata.combining(chr(i))) + "]"
)
# A letter (word character that is not a digit or "_") outside A-Z, after upper-casing.
_NON_ASCII_LETTER_RE = re.compile(r"[^\W\d_A-Z]")


def _spell_digits(digits: str) -> str:
  """Reads digits one by one ("14" -> "ONE FOUR"), as after a decimal point."""
  return " ".join(_ONES[int(d)] for d in digits)


def _spell_number_match(match: "re.Match[str]") -> str:
  """Spells one `_NUMBER_RE` match, padded with spaces; raises for what is not read aloud."""
  text = match.group(0)
  digits = match.group("int").replace(",", "")
  if not digits:  # ".55 of an inch"
    if match.group("cur"):
      raise NormalizationError("digits", text)
    return f" POINT {_spell_digits(match.group('dec')[1:])} "
  value = int(digits)
  currency = (match.group("cur") or "").strip()
  suffix = match.group("ord")
  decimal = match.group("dec")
  if value > 999999:
    raise NormalizationError("digits", text)
  if suffix:
    # "2d"/"3d" are old ordinals; "6d" is pence and must not become SIXTH.
    if suffix == "d" and not (value % 10 in (2, 3) and value % 100 not in (12, 13)):
      raise NormalizationError("digits", text)
    if currency:
      raise NormalizationError("digits", text)
    return " " + spell_number(value, ordinal=True) + " "
  if decimal:
    if currency:
      raise NormalizationError("digits", text)
    return f" {spell_number(value)} POINT {_spell_digits(decimal[1:])} "
  if currency:
    singular, plural = _CURRENCY[currency]
    return f" {spell_number(value)} {singular if value == 1 else plural} "
  # A 4-digit number without a comma in 1100..1999 is read as a year or in hundreds, which is
  # also how "1500 men" is read aloud (FIFTEEN HUNDRED).
  if len(digits) == 4 and "," not in match.group("int") and 1100 <= value <= 1999:
    return " " + spell_year(value) + " "
  return " " + spell_number(value) + " "


def _expand_abbreviations(text: str) -> tuple[str, int]:
  """Spells the abbreviations of `text` as read; returns (text, number expanded)."""
  text, n_saint = _SAINT_RE.subn(" SAINT ", text)
  text, n_street = _STREET_RE.subn(" STREET ", text)
  text, n_number = _NUMBER_ABBREV_RE.subn(" NUMBER ", text)
  text, n_other = _ABBREV_RE.subn(
    lambda m: " " + _ABBREVIATIONS[m.group(1) or m.group(2)] + " ", text
  )
  return text, n_saint + n_street + n_number + n_other


def _fraction(match: "re.Match[str]") -> str:
  key = match.group(0)
  if key not in _FRACTIONS:
    raise NormalizationError("digits", key)
  return " " + _FRACTIONS[key] + " "


def _spell_numbers(text: str, sentence: str) -> tuple[str, int]:
  """Spells the fractions and numbers of `text`; returns (text, number spelled).

  Raises:
    NormalizationError: "digits" (naming `sentence`) for a digit left unspelled.
  """
  text, n_fractions = _FRACTION_RE.subn(_fraction, text)
  text, n_numbers = _NUMBER_RE.subn(_spell_number_match, text)
  if _DIGIT_RE.search(text):
    raise NormalizationError("digits", sentence)
  return text, n_fractions + n_numbers


def _upper_ascii_words(text: str, sentence: str) -> str:
  """Folds accents, upper-cases and keeps only A-Z words with inner apostrophes.

  Raises:
    NormalizationError: "non_latin" (naming `sentence`) for a letter that does not fold to A-Z.
  """
  if not text.isascii():
    # Fold accents: NFKD splits "é" into "e" + a combining mark, which is then dropped.
    text = unicodedata.normalize("NFKD", text.translate(_FOLD))
    text = _COMBINING_RE.sub("", text)
  text = text.upper()
  if _NON_ASCII_LETTER_RE.search(text):
    raise NormalizationError("non_latin", sentence)
  # Keep apostrophes only inside words; everything that is not A-Z becomes a space (this also
  # turns hyphens and dashes into spaces: "TO-MORROW" -> "TO MORROW", as in the references).
  text = _WORD_APOSTROPHE_RE.sub("\x00", text)
  text = re.sub(r"[^A-Z\x00]+", " ", text).replace("\x00", "'")
  return " ".join(text.split())


def normalize_librispeech(sentence: str, counts: Optional[collections.Counter] = None) -> str:
  """Normalizes a sentence to LibriSpeech transcript style.

  Upper case; abbreviations spelled as read (Mr. -> MISTER, Mrs. -> MISSUS, Dr. -> DOCTOR,
  St. -> SAINT/STREET, e.g. -> FOR EXAMPLE, etc. -> ET CETERA, No. 7 -> NUMBER SEVEN);
  numbers spelled out: integers 0..999999 ("ONE HUNDRED AND FIFTY"), years 1100..1999 in pairs
  ("EIGHTEEN NINETY FOUR", "SEVENTEEN O SEVEN"), ordinals 1st/2nd/3rd/4th/2d ("TWENTY FIRST"),
  decimals ("THREE POINT ONE FOUR"), $/£ amounts, common fractions; "&" -> AND, "%" -> PERCENT;
  accented letters folded to ASCII (café -> CAFE, Æ -> AE); hyphens and dashes -> spaces; all
  other punctuation removed, except apostrophes between two letters (O'BRIEN'S, DON'T); a leading
  or trailing apostrophe ('TIS, SOLDIERS') is removed, as in the LibriSpeech references.
  Why spell numbers rather than drop sentences with digits: the references spell them
  ("EIGHTEEN SIXTY THREE", "FIVE HUNDRED AND SIXTY") and dropping would bias the corpus against
  dates and quantities; numbers we cannot say with confidence are dropped instead (see Raises).

  Example: "Mr. O'Brien's café, 1894!" -> "MISTER O'BRIEN'S CAFE EIGHTEEN NINETY FOUR".

  Args:
    sentence: one cleaned sentence.
    counts: optional Counter; "edits/abbreviations_expanded" and "edits/numbers_spelled" are
      added to it.

  Returns:
    The normalized sentence: words of [A-Z'] separated by single spaces (possibly "").

  Raises:
    NormalizationError: reason "digits" for a number that is not spelled (over 999999, "6d",
      "8vo", "3/7", "$3.50"); reason "non_latin" for letters that do not fold to A-Z.
  """
  text = unicodedata.normalize("NFKC", sentence).translate(_QUOTES)
  text, n_abbrev = _expand_abbreviations(text)
  text, n_numbers = _spell_numbers(text, sentence)
  text = text.replace("&", " AND ").replace("%", " PERCENT ")
  text = _upper_ascii_words(text, sentence)
  if counts is not None:
    counts["edits/abbreviations_expanded"] += n_abbrev
    counts["edits/numbers_spelled"] += n_numbers
  return text


# ---------------------------------------------------------------------------------------------
# Evaluation text
# ---------------------------------------------------------------------------------------------


def _lenient_librispeech(text: str) -> str:
  """`normalize_librispeech` for a sentence it refuses: digits read one by one, ASCII folding.

  The reader says "$3.50" or "1,000,000" somehow; digit by digit is the reading that keeps every
  token, and ASCII folding drops what cannot be spelled in A-Z.
  """
  spelled = re.sub(r"\d", lambda m: f" {spell_number(int(m.group()))} ", text)
  folded = unicodedata.normalize("NFKD", spelled).encode("ascii", "ignore").decode("ascii")
  return normalize_librispeech(folded)


def normalizer(name: str, stats: dict) -> Callable[[str], str]:
  """A function str -> str applying the named normalization to evaluation text.

  Unlike corpus preparation, which drops a sentence `normalize_librispeech` refuses, evaluation
  must score every sentence: a refused one goes through a lenient reading instead.

  Args:
    name: one of NORMALIZATIONS.
    stats: dict; "normalization_fallbacks" counts the sentences that needed the lenient path.

  Raises:
    ValueError: for an unknown name.
  """
  if name not in NORMALIZATIONS:
    raise ValueError(f"unknown normalization {name!r}; expected one of {NORMALIZATIONS}")
  if name == "none":
    return lambda text: text

  def librispeech(text):
    try:
      return normalize_librispeech(text)
    except NormalizationError:
      stats["normalization_fallbacks"] = stats.get("normalization_fallbacks", 0) + 1
      return _lenient_librispeech(text)

  return librispeech

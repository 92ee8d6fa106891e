# coding=utf-8
"""Text normalization: the one owner of how training and evaluation text is normalized.

"librispeech" (`normalize_librispeech`) writes text as the LibriSpeech references do. Corpus
preparation drops a sentence the rules cannot spell (`NormalizationError`); evaluation
(`normalizer`) never raises nor drops text.
"""

import collections
import dataclasses
import re
from typing import Callable
from typing import Optional
import unicodedata

import num2words

NORMALIZATIONS = ("none", "librispeech")
# Bump when a rule changes what some sentence normalizes to: score caches are keyed on it
# (`inference.describe`), so scores of text normalized by older rules are recomputed.
RULES_VERSION = 2


class NormalizationError(ValueError):
  """A sentence `normalize_librispeech` cannot spell: reason "digits" (a number it does not spell)
  or "non_latin" (letters that do not fold to A-Z, e.g. Greek or Cyrillic).
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


def _words(spelled: str) -> str:
  """num2words output -> LibriSpeech words: "twenty-one, five" -> "TWENTY ONE FIVE"."""
  return " ".join(re.sub(r"[-,]", " ", spelled).upper().split())


def spell_number(n: int, ordinal: bool = False) -> str:
  """n in 0..999999 in upper-case words as the LibriSpeech references spell it (num2words): British
  "AND" ("ONE HUNDRED AND FIFTY", "TWO THOUSAND AND FIVE"), no hyphens; ordinal: "TWENTY SECOND".
  ValueError outside that range (the one read with confidence).
  """
  if not 0 <= n <= 999999:
    raise ValueError(f"spell_number: expected 0..999999, got {n}")
  return _words(num2words.num2words(n, to="ordinal" if ordinal else "cardinal"))


def spell_year(n: int) -> str:
  """Spells a year in pairs, as LibriSpeech does: 1894 -> EIGHTEEN NINETY FOUR, 1707 ->
  SEVENTEEN O SEVEN, 1900 -> NINETEEN HUNDRED, 2013 -> TWENTY THIRTEEN, 2005 -> TWO THOUSAND AND
  FIVE."""
  return re.sub(r"\bOH\b", "O", _words(num2words.num2words(n, to="year")))


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
# Denominators read as a fraction by the lenient reading ("3/7" -> THREE SEVENTHS); with any other
# the numbers are read one after the other ("9/11" -> NINE ELEVEN, "24/7").
_FRACTION_DENOMINATORS = (2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 32, 64, 100)
# Digits as symbols (superscripts, subscripts, circled or parenthesized numbers): each is read on
# its own ("x²" -> X TWO, "①②③" -> ONE TWO THREE); NFKC would glue a run into one number.
_DIGIT_SYMBOL_RE = re.compile(
  "["
  + "".join(
    re.escape(chr(i))
    for i in range(0x80, 0x3300)
    if unicodedata.category(chr(i)) == "No"
    and unicodedata.normalize("NFKC", chr(i)).strip("().").isdecimal()
  )
  + "]"
)
# "½", "1½" (NFKC would make "1½" the number 11 over 2): a space-separated n/d, "and" after a
# whole number, as the references read "ONE AND ONE HALF CUPS".
_VULGAR_FRACTION_RE = re.compile(r"(\d?)([\u00bc-\u00be\u2150-\u215e])")
_ISO_DATE_RE = re.compile(r"(?<![\w.,/-])(\d{4})-(\d\d)-(\d\d)(?![\w/-])")
_MONTHS = (
  "JANUARY FEBRUARY MARCH APRIL MAY JUNE JULY AUGUST SEPTEMBER OCTOBER NOVEMBER DECEMBER".split()
)
# "1990s", "1800s", "'60s" (not "10s", which is shillings).
_DECADE_RE = re.compile(r"(?<![\w.,])'?(1\d[1-9]0|1\d00|20[0-9]0|[2-9]0)'?s\b")
_CURRENCY = {
  "$": ("DOLLAR", "DOLLARS", "CENT", "CENTS"),
  "£": ("POUND", "POUNDS", "PENNY", "PENCE"),
  "€": ("EURO", "EUROS", "CENT", "CENTS"),
}
_CURRENCY_RE = re.compile(
  r"(?<![\w.,])(?P<cur>[$£€])\s?(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?P<dec>\.\d+)?(?![\w])"
  r"(?:\s+(?P<scale>thousand|million|billion|trillion)\b)?",
  re.IGNORECASE,
)
# An integer (optionally with thousands commas) with a decimal part or an ordinal suffix after.
# Letters glued on ("6d", "8vo", "10s") make it unspellable.
_NUMBER_RE = re.compile(
  r"(?<![\w.,])(?P<int>\d{1,3}(?:,\d{3})+|\d+|(?=\.\d))"
  r"(?:(?P<dec>\.\d+)|(?P<ord>st|nd|rd|th|d))?(?![\w])"
)
# From here on a number is read digit by digit, as card or serial numbers are (num2words also
# overflows past 10**303).
_READ_DIGIT_BY_DIGIT = 10**15
# Digits left after every reading above: glued to letters ("8vo", "B2B").
_DIGITS_RE = re.compile(r"\d+")
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
  return " ".join(_ONES[int(d)] for d in digits)


def _cardinal(digits: str, lenient: bool) -> str:
  """An integer with optional thousands commas; over 999999 only when lenient (else "digits")."""
  value = int(digits.replace(",", ""))
  if value > 999999 and not lenient:
    raise NormalizationError("digits", digits)
  if value >= _READ_DIGIT_BY_DIGIT:
    return _spell_digits(str(value))
  return _words(num2words.num2words(value))


def _plural(words: str) -> str:
  """ "NINETEEN NINETY" -> "NINETEEN NINETIES", "EIGHTEEN HUNDRED" -> "EIGHTEEN HUNDREDS"."""
  head, _, last = words.rpartition(" ")
  last = last[:-1] + "IES" if last.endswith("Y") else last + "S"
  return f"{head} {last}".strip()


def _vulgar_fraction(match: "re.Match[str]") -> str:
  whole, fraction = match.groups()
  spelled = unicodedata.normalize("NFKC", fraction).replace("\u2044", "/")
  return f" {whole} and {spelled} " if whole else f" {spelled} "


def _digit_symbol(match: "re.Match[str]") -> str:
  return " " + spell_number(int(unicodedata.normalize("NFKC", match.group(0)).strip("()."))) + " "


def _iso_date(match: "re.Match[str]", lenient: bool) -> str:
  """ "2013-01-05" -> JANUARY FIFTH TWENTY THIRTEEN; not a date: the three numbers (lenient)."""
  year, month, day = (int(g) for g in match.groups())
  if 1 <= month <= 12 and 1 <= day <= 31:
    return f" {_MONTHS[month - 1]} {spell_number(day, ordinal=True)} {spell_year(year)} "
  if not lenient:
    raise NormalizationError("digits", match.group(0))
  return " " + " ".join(_cardinal(g, lenient) for g in match.groups()) + " "


def _decade(match: "re.Match[str]") -> str:
  """ "1990s" -> NINETEEN NINETIES, "60s" -> SIXTIES."""
  digits = match.group(1)
  return (
    " " + _plural(spell_year(int(digits)) if len(digits) == 4 else spell_number(int(digits))) + " "
  )


def _currency(match: "re.Match[str]", lenient: bool) -> str:
  """ "$5" -> FIVE DOLLARS, "$3.50" -> THREE DOLLARS FIFTY CENTS, "$6.6 billion" -> SIX POINT SIX
  BILLION DOLLARS."""
  one, many, one_cent, many_cents = _CURRENCY[match.group("cur")]
  amount = _cardinal(match.group("int"), lenient)
  decimal, scale = match.group("dec"), match.group("scale")
  cents = 0
  if decimal and len(decimal) == 3 and not scale:
    cents = int(decimal[1:])
  elif decimal:
    amount += " POINT " + _spell_digits(decimal[1:])
  if scale:
    return f" {amount} {scale.upper()} {many} "
  spoken = f"{amount} {one if amount == 'ONE' else many}"
  if cents:
    spoken += f" {spell_number(cents)} {one_cent if cents == 1 else many_cents}"
  return f" {spoken} "


def _fraction(match: "re.Match[str]", lenient: bool) -> str:
  """ "3/4" -> THREE QUARTERS; lenient: "3/7" -> THREE SEVENTHS, "9/11" -> NINE ELEVEN."""
  key = match.group(0)
  if key in _FRACTIONS:
    return " " + _FRACTIONS[key] + " "
  if not lenient:
    raise NormalizationError("digits", key)
  numerator, denominator = (int(g) for g in match.groups())
  if not 0 < numerator < denominator or denominator not in _FRACTION_DENOMINATORS:
    return f" {_cardinal(match.group(1), lenient)} {_cardinal(match.group(2), lenient)} "
  part = {2: "HALF", 4: "QUARTER"}.get(denominator) or spell_number(denominator, ordinal=True)
  if numerator > 1:
    part = "HALVES" if part == "HALF" else _plural(part)
  return f" {spell_number(numerator)} {part} "


def _spell_number_match(match: "re.Match[str]", lenient: bool) -> str:
  """One `_NUMBER_RE` match spelled, padded with spaces; "digits" for what is not read aloud with
  confidence, unless lenient.
  """
  digits = match.group("int").replace(",", "")
  decimal = match.group("dec")
  if not digits:  # ".55 of an inch"; or nothing at all where ".55" is glued to letters
    return f" POINT {_spell_digits(decimal[1:])} " if decimal else match.group(0)
  value = int(digits)
  suffix = match.group("ord")
  if suffix:
    # "2d"/"3d" are old ordinals; "6d" is pence and must not become SIXTH.
    if suffix == "d" and not (value % 10 in (2, 3) and value % 100 not in (12, 13)):
      if not lenient:
        raise NormalizationError("digits", match.group(0))
      return f" {_cardinal(digits, lenient)} D "
    if value > 999999 and not lenient:
      raise NormalizationError("digits", match.group(0))
    if value >= _READ_DIGIT_BY_DIGIT:
      return f" {_cardinal(digits, lenient)} "
    return " " + _words(num2words.num2words(value, to="ordinal")) + " "
  if decimal:
    return f" {_cardinal(digits, lenient)} POINT {_spell_digits(decimal[1:])} "
  # A 4-digit number without a comma in 1100..1999 is read as a year or in hundreds, which is
  # also how "1500 men" is read aloud (FIFTEEN HUNDRED).
  if len(digits) == 4 and "," not in match.group("int") and 1100 <= value <= 1999:
    return " " + spell_year(value) + " "
  return " " + _cardinal(digits, lenient) + " "


def _glued_digits(match: "re.Match[str]") -> str:
  """Digits glued to letters ("8vo", "x2345678"): a short run as a number, a long one digit by
  digit (no one reads an exponent "²³⁴⁵⁶⁷⁸" as two million)."""
  digits = match.group(0)
  return f" {_cardinal(digits, True) if len(digits) <= 4 else _spell_digits(digits)} "


def _expand_abbreviations(text: str) -> tuple[str, int]:
  text, n_saint = _SAINT_RE.subn(" SAINT ", text)
  text, n_street = _STREET_RE.subn(" STREET ", text)
  text, n_number = _NUMBER_ABBREV_RE.subn(" NUMBER ", text)
  text, n_other = _ABBREV_RE.subn(
    lambda m: " " + _ABBREVIATIONS[m.group(1) or m.group(2)] + " ", text
  )
  return text, n_saint + n_street + n_number + n_other


def _spell_numbers(text: str, sentence: str, lenient: bool) -> tuple[str, int]:
  """(text, readings) with dates, decades, amounts, fractions and numbers spelled; "digits" for a
  digit left unspelled, unless lenient: then every digit is read somehow.
  """
  count = 0
  readings = (
    (_ISO_DATE_RE, lambda m: _iso_date(m, lenient)),
    (_DECADE_RE, _decade),
    (_CURRENCY_RE, lambda m: _currency(m, lenient)),
    (_FRACTION_RE, lambda m: _fraction(m, lenient)),
    (_NUMBER_RE, lambda m: _spell_number_match(m, lenient)),
  )
  for pattern, read in readings:
    text, n = pattern.subn(read, text)
    count += n
  if lenient:
    text, n = _DIGITS_RE.subn(_glued_digits, text)
    count += n
  elif _DIGIT_RE.search(text):
    raise NormalizationError("digits", sentence)
  return text, count


def _unrepresentable(char: str) -> bool:
  """A character A-Z cannot spell and that is not punctuation: a letter, digit or symbol outside
  ASCII (CJK, Greek, emoji, ©), but not a modifier (skin tones) or a mark."""
  category = unicodedata.category(char)
  return not char.isascii() and category[0] in "LNS" and category != "Sk"


def _upper_ascii_words(text: str, sentence: str, keep_unknown: bool) -> tuple[str, int]:
  """(A-Z words with inner apostrophes, characters kept). keep_unknown keeps each character A-Z
  cannot spell as a word of its own (the tokenizer's [UNK]), where "non_latin" would be raised.
  """
  if not text.isascii():
    # Fold accents: NFKD splits "é" into "e" + a combining mark, which is then dropped.
    text = unicodedata.normalize("NFKD", text.translate(_FOLD))
    text = _COMBINING_RE.sub("", text)
  text = text.upper()
  unknown = 0
  if not text.isascii():
    if not keep_unknown and _NON_ASCII_LETTER_RE.search(text):
      raise NormalizationError("non_latin", sentence)
    if keep_unknown:
      # \x01 fences each kept character through the A-Z filter below.
      unknown = sum(map(_unrepresentable, text))
      text = "".join(f" \x01{c}\x01 " if _unrepresentable(c) else c for c in text)
  # Keep apostrophes only inside words; everything that is not A-Z becomes a space (this also
  # turns hyphens and dashes into spaces: "TO-MORROW" -> "TO MORROW", as in the references).
  text = _WORD_APOSTROPHE_RE.sub("\x00", text)
  text = re.sub(r"[^A-Z\x00\x01]+|\x01[^\x01]\x01", _keep_fenced, text).replace("\x00", "'")
  return " ".join(text.split()), unknown


def _keep_fenced(match: "re.Match[str]") -> str:
  """A fenced kept character -> itself; anything else the filter matched -> a space."""
  piece = match.group(0)
  return piece[1] if piece.startswith("\x01") else " "


def _librispeech(
  sentence: str, lenient: bool, keep_unknown: bool, counts: Optional[collections.Counter] = None
) -> tuple[str, int]:
  """`normalize_librispeech` with the evaluation options; returns (text, unknown characters)."""
  # \x00 and \x01 mark apostrophes and kept characters in `_upper_ascii_words`.
  text = re.sub("[\x00\x01]", " ", sentence)
  text = _VULGAR_FRACTION_RE.sub(_vulgar_fraction, text)
  text = _DIGIT_SYMBOL_RE.sub(_digit_symbol, text)
  text = unicodedata.normalize("NFKC", text).translate(_QUOTES)
  text, n_abbrev = _expand_abbreviations(text)
  text, n_numbers = _spell_numbers(text, sentence, lenient)
  text = text.replace("&", " AND ").replace("%", " PERCENT ")
  text, unknown = _upper_ascii_words(text, sentence, keep_unknown)
  if counts is not None:
    counts["edits/abbreviations_expanded"] += n_abbrev
    counts["edits/numbers_spelled"] += n_numbers
  return text, unknown


def normalize_librispeech(sentence: str, counts: Optional[collections.Counter] = None) -> str:
  """A sentence in LibriSpeech transcript style: words of [A-Z'] separated by single spaces.

  Abbreviations, numbers (not dropped: that would bias the corpus against dates and quantities),
  "&" and "%" spelled as read; accents folded; apostrophes kept only inside words. "Mr. O'Brien's
  café, 1894!" -> "MISTER O'BRIEN'S CAFE EIGHTEEN NINETY FOUR". NormalizationError "digits" (over
  999999, "6d", "8vo", "3/7") or "non_latin". counts, a Counter, gets the "edits/..." counts.
  """
  return _librispeech(sentence, lenient=False, keep_unknown=False, counts=counts)[0]


# ---------------------------------------------------------------------------------------------
# Evaluation text
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Normalized:
  """One evaluation sentence after normalization. fallback: the strict reading refused a number,
  which the lenient one spelled (a guess: "x²³⁴⁵⁶⁷⁸", "12,000,000", "6d"); unknown: characters A-Z
  cannot spell kept as words of their own, so that as [UNK] they cost probability.
  """

  text: str
  fallback: bool = False
  unknown: int = 0


def _normalize_for_scoring(text: str) -> Normalized:
  """LibriSpeech normalization that never raises and never drops a character silently."""
  try:
    spelled, unknown = _librispeech(text, lenient=False, keep_unknown=True)
    return Normalized(spelled, False, unknown)
  except NormalizationError:
    spelled, unknown = _librispeech(text, lenient=True, keep_unknown=True)
    return Normalized(spelled, True, unknown)


def normalizer(name: str) -> Callable[[str], Normalized]:
  """str -> `Normalized` for evaluation text, which must all be scored: it never raises, reads a
  number the strict rules refuse leniently, and keeps what A-Z cannot spell for [UNK] ("😀😀😀" is
  no empty sentence).
  """
  if name not in NORMALIZATIONS:
    raise ValueError(f"unknown normalization {name!r}; expected one of {NORMALIZATIONS}")
  if name == "none":
    return Normalized
  return _normalize_for_scoring

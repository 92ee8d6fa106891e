"""Tests for normalization.py: LibriSpeech normalization, numbers, the evaluation normalizer."""

import pytest

import normalization


@pytest.mark.parametrize(
  "sentence, expected",
  [
    ("Mr. O'Brien's café, 1894!", "MISTER O'BRIEN'S CAFE EIGHTEEN NINETY FOUR"),
    (
      "Mrs. Smith met Dr. Jones at St. Paul's on Baker St. today.",
      "MISSUS SMITH MET DOCTOR JONES AT SAINT PAUL'S ON BAKER STREET TODAY",
    ),
    (
      "“Don’t,” said he; “’tis the soldiers’ well-known to-morrow—naïve Zoë.”",
      "DON'T SAID HE TIS THE SOLDIERS WELL KNOWN TO MORROW NAIVE ZOE",
    ),
    (
      "He paid $5 and £1 for 3/4 of it, 100% of 1,250 men.",
      "HE PAID FIVE DOLLARS AND ONE POUND FOR THREE QUARTERS OF IT ONE HUNDRED PERCENT OF ONE "
      "THOUSAND TWO HUNDRED AND FIFTY MEN",
    ),
    (
      "On the 21st, the 2d and 3rd of May 1707, at No. 12.",
      "ON THE TWENTY FIRST THE SECOND AND THIRD OF MAY SEVENTEEN O SEVEN AT NUMBER TWELVE",
    ),
    (
      "It was 3.14 or .5 of an inch, e.g. small, etc.",
      "IT WAS THREE POINT ONE FOUR OR POINT FIVE OF AN INCH FOR EXAMPLE SMALL ET CETERA",
    ),
    (
      "Æsop & Œdipus met in 1900 and 2000.",
      "AESOP AND OEDIPUS MET IN NINETEEN HUNDRED AND TWO THOUSAND",
    ),
    ("B.C. 55 -- the end (really) [sic]!", "B C FIFTY FIVE THE END REALLY SIC"),
  ],
)
def test_normalize_librispeech(sentence, expected):
  assert normalization.normalize_librispeech(sentence) == expected


@pytest.mark.parametrize(
  "sentence, reason",
  [
    ("It cost £5 10s. 6d. in all.", "digits"),
    ("A population of 12,000,000 souls.", "digits"),
    ("Printed in 8vo at 3/7 the price.", "digits"),
    ("The word λόγος means word.", "non_latin"),
  ],
)
def test_normalize_librispeech_errors(sentence, reason):
  with pytest.raises(normalization.NormalizationError) as e:
    normalization.normalize_librispeech(sentence)
  assert e.value.reason == reason


@pytest.mark.parametrize(
  "n, ordinal, expected",
  [
    (0, False, "ZERO"),
    (13, False, "THIRTEEN"),
    (21, False, "TWENTY ONE"),
    (100, False, "ONE HUNDRED"),
    (150, False, "ONE HUNDRED AND FIFTY"),
    (1000, False, "ONE THOUSAND"),
    (1005, False, "ONE THOUSAND AND FIVE"),
    (999999, False, "NINE HUNDRED AND NINETY NINE THOUSAND NINE HUNDRED AND NINETY NINE"),
    (1, True, "FIRST"),
    (2, True, "SECOND"),
    (12, True, "TWELFTH"),
    (20, True, "TWENTIETH"),
    (23, True, "TWENTY THIRD"),
    (100, True, "ONE HUNDREDTH"),
    (105, True, "ONE HUNDRED AND FIFTH"),
  ],
)
def test_spell_number(n, ordinal, expected):
  assert normalization.spell_number(n, ordinal=ordinal) == expected


def test_spell_number_out_of_range():
  with pytest.raises(ValueError, match="0..999999"):
    normalization.spell_number(1000000)


def test_librispeech_normalizer_matches_corpus_and_falls_back_on_digits():
  stats = {}
  normalize = normalization.normalizer("librispeech", stats)
  assert normalize("Mr. Smith's café, 1894!") == "MISTER SMITH'S CAFE EIGHTEEN NINETY FOUR"
  assert stats.get("normalization_fallbacks", 0) == 0
  # normalize_librispeech refuses "$3.50"; the fallback reads digits.
  assert normalize("It costs $3.50.") == "IT COSTS THREE FIVE ZERO"
  assert stats["normalization_fallbacks"] == 1
  assert normalization.normalizer("none", stats)("Keep It.") == "Keep It."
  with pytest.raises(ValueError, match="unknown normalization"):
    normalization.normalizer("nfc", stats)

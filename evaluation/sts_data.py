"""STS-B and SICK readers (gold scores: STS-B in [0, 5], SICK relatedness in [1, 5]) and the
paper's correlations. Malformed input raises ValueError naming `file:line`."""

import collections
import math
import os

import scipy.stats

from util import io_utils

STSB_DIR = "stsb"
STSB_SPLITS = ("train", "dev", "test")
SICK_FILE = os.path.join("sick", "SICK.txt")
SICK_SPLITS = ("TRAIN", "TRIAL", "TEST")
# Columns the SICK reader needs, located by name in the header.
_SICK_COLUMNS = ("sentence_A", "sentence_B", "relatedness_score", "SemEval_set")

StsPair = collections.namedtuple("StsPair", ["sent1", "sent2", "score"])


def score_field(text, where, low, high):
  """float(text), raising ValueError naming `where` (file:line) unless it is in [low, high]."""
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not low <= value <= high:  # NaN fails this too
    raise ValueError(f"{where}: expected a score in [{low}, {high}], found {text!r}")
  return value


def sentence_field(text, where, column):
  """text stripped, raising ValueError naming `where` and the column when it is blank."""
  text = text.strip()
  if not text:
    raise ValueError(f"{where}: blank sentence in column {column}")
  return text


def _lines(path):
  """Lines of a UTF-8 file split on '\\n' only, with a CR before it removed."""
  with open(path, encoding="utf-8", newline="") as f:
    lines = f.read().split("\n")
  if lines[-1] == "":
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_stsb_file(path):
  """list[StsPair] of an STS Benchmark file (`stsb/sts-dev.csv`): tab-separated, no header, no
  quoting (sentences may hold `"`, so no CSV reader): genre, file, year, id, score, sentence1,
  sentence2, on some lines 2 extra fields, ignored."""
  pairs = []
  for lineno, line in enumerate(_lines(path), 1):
    where = f"{path}:{lineno}"
    fields = line.split("\t")
    if len(fields) < 7:
      raise ValueError(
        f"{where}: expected at least 7 tab-separated fields "
        f"(genre file year id score sent1 sent2), found {len(fields)}"
      )
    pairs.append(
      StsPair(
        sentence_field(fields[5], where, 6),
        sentence_field(fields[6], where, 7),
        score_field(fields[4], where, 0.0, 5.0),
      )
    )
  if not pairs:
    raise ValueError(f"{path}:1: no pairs")
  return pairs


def read_stsb(split, data_dir=None):
  """STS-B `split` ("train" 5749, "dev" 1500, "test" 1379 pairs) of the data root."""
  if split not in STSB_SPLITS:
    raise ValueError(f"unknown STS-B split {split!r}; expected one of {STSB_SPLITS}")
  return read_stsb_file(os.path.join(io_utils.data_root(data_dir), STSB_DIR, f"sts-{split}.csv"))


def read_sick_file(path, split="TEST"):
  """list[StsPair] (relatedness) of the SemEval `split` (None: every row) of `SICK.txt`:
  tab-separated, a header row naming the columns, CRLF line endings as shipped."""
  if split is not None and split not in SICK_SPLITS:
    raise ValueError(f"unknown SICK split {split!r}; expected one of {SICK_SPLITS} or None")
  lines = _lines(path)
  if not lines:
    raise ValueError(f"{path}:1: empty file, expected a header row")
  header = lines[0].split("\t")
  missing = [name for name in _SICK_COLUMNS if name not in header]
  if missing:
    raise ValueError(f"{path}:1: header lacks columns {missing}: {lines[0]!r}")
  a, b, score, semeval = (header.index(name) for name in _SICK_COLUMNS)
  pairs = []
  for lineno, line in enumerate(lines[1:], 2):
    where = f"{path}:{lineno}"
    fields = line.split("\t")
    if len(fields) != len(header):
      raise ValueError(
        f"{where}: expected {len(header)} tab-separated fields like the header, found {len(fields)}"
      )
    if fields[semeval] not in SICK_SPLITS:
      raise ValueError(
        f"{where}: SemEval_set must be one of {SICK_SPLITS}, found {fields[semeval]!r}"
      )
    if split is None or fields[semeval] == split:
      pairs.append(
        StsPair(
          sentence_field(fields[a], where, a + 1),
          sentence_field(fields[b], where, b + 1),
          score_field(fields[score], where, 1.0, 5.0),
        )
      )
  if not pairs:
    raise ValueError(f"{path}: no rows with SemEval_set == {split!r}")
  return pairs


def read_sick(data_dir=None, split="TEST"):
  """SICK's `split` of `<data_root>/sick/SICK.txt`; TEST has the paper's 4906 pairs."""
  return read_sick_file(os.path.join(io_utils.data_root(data_dir), SICK_FILE), split)


def pearson_spearman(pred, gold):
  """(Pearson r, Spearman ρ) x 100 (scipy) of `pred` against `gold`, as the paper reports them;
  a constant input gives NaN, reported as is."""
  if len(pred) != len(gold):
    raise ValueError(f"{len(pred)} predictions for {len(gold)} gold scores")
  if len(pred) < 2:
    raise ValueError(f"correlation needs at least 2 pairs, got {len(pred)}")
  pearson = scipy.stats.pearsonr(pred, gold).statistic
  spearman = scipy.stats.spearmanr(pred, gold).statistic
  return 100.0 * float(pearson), 100.0 * float(spearman)

"""Lazy readers of run_sts.py's --pairs_file sets (a user's TSV, SentEval's STS12-16) that tell
the part read so far, so that an output made from them resumes (util/resumable.py). Malformed
input raises ValueError naming `file:line` (bad UTF-8: cli.InputError)."""

import collections
import hashlib
import itertools
import math
import os
import re

from evaluation import sts_data
from util import io_utils
from util import resumable

# line: 1-based line of the input file; score: the gold score, None when the file has none.
NumberedPair = collections.namedtuple("NumberedPair", ["line", "sent1", "sent2", "score"])
# --pairs_header of run_sts.py: whether a user's pairs file starts with a header line.
PAIRS_HEADER = ("auto", "yes", "no")
_PAIRS_FORMAT = "sentence1<TAB>sentence2[<TAB>gold score]"


def _number(text):
  """float(text) when it is a finite number, else None."""
  try:
    value = float(text)
  except ValueError:
    return None
  return value if math.isfinite(value) else None


class PairsFile:
  """A user's pairs, `_PAIRS_FORMAT` per line, each iteration reading the file afresh; every
  line has a gold score (any finite number: the scale is the user's) or none does.
  header="auto": line 1 is a header when its third field is not a number while line 2's is."""

  def __init__(self, path, header="auto"):
    if header not in PAIRS_HEADER:
      raise ValueError(f"header must be one of {PAIRS_HEADER}, got {header!r}")
    if path == "-":
      # run_sts.py reads a file twice: whole to check it, then batch by batch to encode it.
      raise ValueError("pairs are read from a file, not from stdin ('-')")
    if io_utils.exists(path) and not io_utils.reads_twice(path):
      raise ValueError(f"{path}: not a regular file (a pipe?); pairs are read twice: give a file")
    self.path = path
    self.header = header
    self._lines = resumable.InputLines(path, strip=False)

  @property
  def lines_read(self):
    return self._lines.lines_read

  def sha256(self):
    return self._lines.sha256()

  def identity(self):
    """What the pairs depend on besides the file's content: its path and the header rule."""
    return {"input": io_utils.absolute(self.path), "header": self.header}

  def __iter__(self):
    self._lines = resumable.InputLines(self.path, strip=False)
    return self._pairs()

  def _pairs(self):
    lines = iter(self._lines)
    head = list(itertools.islice(lines, 2))
    if not head:
      raise ValueError(f"{self.path}:1: empty file, expected {_PAIRS_FORMAT} lines")
    if self._starts_with_header([text for _, text in head]):
      head = head[1:]
    first = None
    for number, text in itertools.chain(head, lines):
      pair = self._pair(number + 1, text)
      if first is None:
        first = pair
      elif (pair.score is None) != (first.score is None):
        raise ValueError(
          f"{self.path}:{pair.line}: {'no' if pair.score is None else 'a'} gold score, but line "
          f"{first.line} has {'none' if first.score is None else 'one'}: every line has one or none"
        )
      yield pair
    if first is None:
      raise ValueError(f"{self.path}:2: no pairs after the header line")

  def _starts_with_header(self, texts):
    if self.header != "auto":
      return self.header == "yes"
    fields = [text.split("\t") for text in texts]
    return (
      len(fields) == 2
      and all(len(f) == 3 for f in fields)
      and _number(fields[0][2]) is None
      and _number(fields[1][2]) is not None
    )

  def _pair(self, number, text):
    where = f"{self.path}:{number}"
    if not text.strip():
      raise ValueError(f"{where}: blank line, expected {_PAIRS_FORMAT}")
    fields = text.split("\t")
    if len(fields) not in (2, 3):
      raise ValueError(
        f"{where}: expected {_PAIRS_FORMAT}, found {len(fields)} tab-separated field(s)"
      )
    score = None
    if len(fields) == 3:
      score = _number(fields[2])
      if score is None:
        hint = " (a header line? --pairs_header=yes skips it)" if number == 1 else ""
        raise ValueError(f"{where}: gold score {fields[2]!r} is not a number{hint}")
    return NumberedPair(
      number,
      sts_data.sentence_field(fields[0], where, 1),
      sts_data.sentence_field(fields[1], where, 2),
      score,
    )


# SentEval's STS12-16 layout: STS.input.<subset>.txt beside STS.gs.<subset>.txt; the STS16
# download names them STS2016.input.<subset>.txt and STS2016.gs.<subset>.txt (SentEval's script
# renames them).
_SENTEVAL_INPUT = re.compile(r"STS(\d{4})?\.input\.(.+)\.txt")


class SentEvalSubset:
  """One subset of SentEval's STS12-16, read lazily as `PairsFile`: `STS.input.<subset>.txt`
  (sentence1<TAB>sentence2, further fields ignored) beside `STS.gs.<subset>.txt` (a score in
  [0, 5] per line; a blank one skips its pair, as SentEval does). `sha256()` covers both."""

  def __init__(self, input_path, gold_path):
    self.path = input_path
    self.gold_path = gold_path
    self._input = resumable.InputLines(input_path, strip=False)
    self._gold = resumable.InputLines(gold_path, strip=False)

  @property
  def lines_read(self):
    return self._input.lines_read

  def sha256(self):
    both = self._input.sha256() + self._gold.sha256()
    return hashlib.sha256(both.encode("ascii")).hexdigest()

  def identity(self):
    """What the pairs depend on besides the files' content: their paths."""
    return {"input": io_utils.absolute(self.path), "gold": io_utils.absolute(self.gold_path)}

  def __iter__(self):
    self._input = resumable.InputLines(self.path, strip=False)
    self._gold = resumable.InputLines(self.gold_path, strip=False)
    return self._pairs()

  def _pairs(self):
    count = 0
    for line, gold in itertools.zip_longest(self._input, self._gold):
      if line is None or gold is None:
        shorter, longer = (
          (self.path, self.gold_path) if line is None else (self.gold_path, self.path)
        )
        number = (gold or line)[0] + 1
        raise ValueError(
          f"{longer}:{number}: {shorter} ends at line {number - 1}: the input and gold files "
          "must have one line per pair each"
        )
      number, text = line[0] + 1, line[1]
      if not gold[1].strip():
        continue
      score = sts_data.score_field(gold[1].strip(), f"{self.gold_path}:{number}", 0.0, 5.0)
      where = f"{self.path}:{number}"
      fields = text.split("\t")
      if len(fields) < 2:
        raise ValueError(f"{where}: expected sentence1<TAB>sentence2, found {len(fields)} field")
      count += 1
      yield NumberedPair(
        number,
        sts_data.sentence_field(fields[0], where, 1),
        sts_data.sentence_field(fields[1], where, 2),
        score,
      )
    if not count:
      raise ValueError(f"{self.gold_path}:1: no gold scores (an empty file, or only blank lines)")


def _senteval_subsets(directory):
  """[(subset, SentEvalSubset)] of the STS.input files in `directory`, by name."""
  subsets = []
  for entry in io_utils.listdir(directory):
    match = _SENTEVAL_INPUT.fullmatch(entry)
    if match:
      year, subset = match.groups()
      path = os.path.join(directory, entry)
      gold = os.path.join(directory, f"STS{year or ''}.gs.{subset}.txt")
      if not io_utils.exists(gold) or io_utils.isdir(gold):
        raise ValueError(f"{path}:1: its gold scores {gold} are missing")
      subsets.append((subset, SentEvalSubset(path, gold)))
  return subsets


def senteval_tasks(directory, name=None):
  """[(task name, [(subset name, SentEvalSubset)])], sorted: one task when `directory` holds
  `STS.input.<subset>.txt` files (named `name`, default the directory's), else one per
  subdirectory that does (SentEval's data/downstream/STS). ValueError when it cannot."""
  if not io_utils.isdir(directory):
    raise ValueError(f"{directory}: no such directory (SentEval's STS layout expected)")
  subsets = _senteval_subsets(directory)
  if subsets:
    return [(name or os.path.basename(os.path.normpath(directory)), subsets)]
  tasks = [
    (entry, subsets)
    for entry in io_utils.listdir(directory)
    if io_utils.isdir(os.path.join(directory, entry))
    and (subsets := _senteval_subsets(os.path.join(directory, entry)))
  ]
  if not tasks:
    raise ValueError(
      f"{directory}: no STS.input.<subset>.txt files in it or in its subdirectories "
      "(SentEval's STS layout)"
    )
  if name:
    raise ValueError(
      f"{directory} holds {len(tasks)} tasks, named by their directories: name one task's "
      f"directory, not {name!r}"
    )
  return tasks


# A set's name is a file name under the output's pairs/: no path separator, not "." or "..".
_SET_NAME = re.compile(r"[^/\\]+")
SENTEVAL_PREFIX = "senteval:"


def _set_name(name, spec):
  if not _SET_NAME.fullmatch(name) or name in (".", ".."):
    raise ValueError(f"pairs {spec}: {name!r} cannot name a file")
  return name


def pair_sets(specs, header="auto"):
  """[(SentEval task or None, [(set name, reader)])] of --pairs_file `specs`, in order: FILE (a
  `PairsFile` named by its stem) or senteval:DIR (subsets named "<task>/<subset>"), either as
  NAME=SPEC. ValueError for a bad or repeated name, or no SentEval layout; the readers' come later.
  """
  groups = []
  for spec in specs:
    name, _, path = spec.rpartition("=")
    if path.startswith(SENTEVAL_PREFIX):
      name = name and _set_name(name, spec)
      for task, subsets in senteval_tasks(path[len(SENTEVAL_PREFIX) :], name or None):
        groups.append((task, [(f"{task}/{subset}", source) for subset, source in subsets]))
    else:
      name = _set_name(name or os.path.splitext(os.path.basename(path))[0], spec)
      groups.append((None, [(name, PairsFile(path, header))]))
  names = [name for _, sets in groups for name, _ in sets]
  for name in names:
    if names.count(name) > 1:
      raise ValueError(f"two pair sets are named {name!r}: name them NAME=FILE")
  return groups


def count_pairs(source):
  """(pairs, has gold scores) of a reader read whole, so that its errors show before any
  encoding; ValueError for one pair with a gold score (no correlation)."""
  count, has_gold = 0, False
  for pair in source:
    count, has_gold = count + 1, pair.score is not None
  if has_gold and count < 2:
    raise ValueError(f"{source.path}: one pair with a gold score; a correlation needs at least 2")
  return count, has_gold

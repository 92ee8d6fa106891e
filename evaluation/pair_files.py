"""Readers of sentence pairs for run_sts.py beyond its sets: a user's file, SentEval's STS12-16.

`PairsFile` reads `sentence1<TAB>sentence2[<TAB>gold score]` lines; `senteval_tasks` finds the
`SentEvalSubset`s of SentEval's STS12-16 layout (`STS.input.<subset>.txt` + `STS.gs.<subset>.txt`).
Both read lazily, for big files: iterating yields `NumberedPair(line, sent1, sent2, score)`, and
`lines_read`, `sha256()` and `identity()` tell the part read so far, so that an output made from
them resumes (util/resumable.py). Sentences are stripped of surrounding whitespace and otherwise
untouched. Malformed input raises ValueError naming `file:line` (bad UTF-8: cli.InputError).
"""

import collections
import hashlib
import itertools
import math
import os
import re

from evaluation import sts_data
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
  """A user's sentence pairs, read lazily: `sentence1<TAB>sentence2[<TAB>gold score]` per line.

  Every line has a gold score (any finite number: the scale is the user's) or none does. A header
  line is skipped with header="yes"; with "auto" line 1 is one when its third field is not a
  number while line 2's is (a file without gold scores has no header then).

  Iterating yields `NumberedPair` in file order (score None without gold scores); each iteration
  reads the file afresh. `path`, `lines_read` and `sha256()` are those of the lines read so far
  by the current iteration (resumable.InputLines), `identity()` the rest of what an output made
  from the pairs depends on.

  Raises (while iterating) ValueError naming `file:line`: an empty file or no pair after the
  header, a blank line, other than 2 or 3 tab-separated fields, a blank sentence, a gold score
  that is not a number, a line with a gold score in a file without (or the reverse); bad UTF-8
  raises cli.InputError.
  """

  def __init__(self, path, header="auto"):
    if header not in PAIRS_HEADER:
      raise ValueError(f"header must be one of {PAIRS_HEADER}, got {header!r}")
    if path == "-":
      # run_sts.py reads a file twice: whole to check it, then batch by batch to encode it.
      raise ValueError("pairs are read from a file, not from stdin ('-')")
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
    return {"input": os.path.abspath(self.path), "header": self.header}

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
  """One subset of SentEval's STS12-16 test sets, read lazily.

  `STS.input.<subset>.txt` has sentence1<TAB>sentence2 per line (further fields, as in the raw
  STS16 files, are ignored); `STS.gs.<subset>.txt` has the gold score in [0, 5] of the same line,
  or a blank line for a pair without one, which is skipped with its input line (as SentEval
  does). Iterating yields `NumberedPair` (the input file's line); `path` (the input file),
  `lines_read` and `sha256()` (of both files) are those of the current iteration, as
  `PairsFile`'s.

  Raises (while iterating) ValueError naming `file:line`: the files' lengths differ, a line
  with fewer than 2 fields, a blank sentence, a bad gold score, no gold score at all.
  """

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
    return {"input": os.path.abspath(self.path), "gold": os.path.abspath(self.gold_path)}

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
  for entry in sorted(os.listdir(directory)):
    match = _SENTEVAL_INPUT.fullmatch(entry)
    if match:
      year, subset = match.groups()
      path = os.path.join(directory, entry)
      gold = os.path.join(directory, f"STS{year or ''}.gs.{subset}.txt")
      if not os.path.isfile(gold):
        raise ValueError(f"{path}:1: its gold scores {gold} are missing")
      subsets.append((subset, SentEvalSubset(path, gold)))
  return subsets


def senteval_tasks(directory, name=None):
  """The STS tasks of SentEval's layout in `directory`.

  Args:
    directory: str, a directory with `STS.input.<subset>.txt` files (one task, e.g. SentEval's
      `data/downstream/STS/STS12-en-test`), or one whose subdirectories have them (SentEval's
      `data/downstream/STS`: one task per subdirectory; STSBenchmark and others without such
      files are skipped).
    name: str or None, the task's name in the first case; default the directory's name.

  Returns:
    list of (task name, [(subset name, SentEvalSubset)]), tasks and subsets sorted by name.

  Raises:
    ValueError: no such directory, no STS.input files, a missing gold file, a name for a
      directory of tasks.
  """
  if not os.path.isdir(directory):
    raise ValueError(f"{directory}: no such directory (SentEval's STS layout expected)")
  subsets = _senteval_subsets(directory)
  if subsets:
    return [(name or os.path.basename(os.path.normpath(directory)), subsets)]
  tasks = [
    (entry, subsets)
    for entry in sorted(os.listdir(directory))
    if os.path.isdir(os.path.join(directory, entry))
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
  """The pair sets of run_sts.py's --pairs_file entries, in their order.

  Args:
    specs: list of str: FILE (a `PairsFile`, named by the file's name without its extension),
      senteval:DIR (`senteval_tasks`), either as NAME=SPEC to name the set or task.
    header: the `PairsFile` header rule.

  Returns:
    list of (SentEval task name or None, [(set name, reader)]): a TSV is one set of its own; a
    SentEval task groups its subsets, named "<task>/<subset>".

  Raises:
    ValueError: a name that cannot name a file, two sets of one name, a SentEval directory
      without its layout (the readers' errors while reading come later).
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
  """(pairs, whether they have gold scores) of a reader, read whole, so that its errors show
  before any encoding.

  Raises:
    ValueError: the reader's, or a single pair with a gold score (no correlation).
  """
  count, has_gold = 0, False
  for pair in source:
    count, has_gold = count + 1, pair.score is not None
  if has_gold and count < 2:
    raise ValueError(f"{source.path}: one pair with a gold score; a correlation needs at least 2")
  return count, has_gold

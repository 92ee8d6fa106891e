"""Sockeye's n-best JSON lines ("sockeye")."""

import json
import re

from nbest import formats
from nbest import text_files
from nbest import types
from util import io_utils

# A feature's field: `<name>_scores`, a list beside "translations" (Sockeye writes no such field).
_FEATURE_SUFFIX = "_scores"
# Half of a UTF-16 pair (\ud83d alone) is valid JSON but no character: no file takes it.
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _sockeye_costs(data, where):
  """{score name: [value as written, one per translation]} of a line's JSON object."""
  count = len(data["translations"])
  rows = data.get("scores")
  if not isinstance(rows, list) or len(rows) != count:
    raise ValueError(f"{where}: expected 'scores', a list of {count} (one per translation)")
  rows = [row if isinstance(row, list) else [row] for row in rows]
  if not rows[0] or any(len(row) != len(rows[0]) for row in rows):
    raise ValueError(f"{where}: 'scores' entries must be numbers, or lists of one length")
  columns = {"score": [row[0] for row in rows]}
  columns.update({f"factor{i}_score": [row[i] for row in rows] for i in range(1, len(rows[0]))})
  for field, values in data.items():
    if field.endswith(_FEATURE_SUFFIX):
      name = text_files.check_name(field[: -len(_FEATURE_SUFFIX)], where, "feature")
      if name in columns or not isinstance(values, list) or len(values) != count:
        raise ValueError(
          f"{where}: {field!r} must be a list of {count} (one per translation) for a score name "
          "of its own"
        )
      columns[name] = values
  return columns


def _sockeye_lists(path, lines):
  """(lists, wheres, JSON object per line) of a Sockeye n-best output, keys "0", "1", ..."""
  lists, wheres, objects = [], {}, []
  for index, line in enumerate(lines):
    where = f"{path}:{index + 1}"
    try:
      data = json.loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer of over 4300 digits
      data = None
    if not isinstance(data, dict):
      raise ValueError(f"{where}: expected a JSON object, found {line!r}")
    texts = data.get("translations")
    if not isinstance(texts, list) or not texts:
      raise ValueError(
        f"{where}: no 'translations' list (Sockeye writes one with --nbest-size > 1, but none "
        "for an input it could not translate, an empty line)"
      )
    columns = _sockeye_costs(data, where)
    if lists and set(columns) != set(lists[0].hyps[0].scores):
      raise ValueError(
        f"{where}: scores {sorted(columns)}, line 1 {sorted(lists[0].hyps[0].scores)}"
      )
    hyps = []
    for j, text in enumerate(texts):
      if not isinstance(text, str) or _SURROGATE_RE.search(text):
        raise ValueError(f"{where}: translation {j + 1} is not a string of characters: {text!r}")
      scores = {n: -text_files.parse_number(v[j], where, n) for n, v in columns.items()}
      hyps.append(types.Hypothesis(text=text.strip(), scores=scores))
    lists.append(types.NBestList(str(index), [], hyps))
    wheres[str(index)] = where
    objects.append(data)
  if not lists:
    raise ValueError(f"{path}:1: no n-best lines")
  return lists, wheres, objects


def read_sockeye(path, refs_path=None):
  """Reads the output of `sockeye-translate --nbest-size N` (N > 1).

  Sources (awslabs/sockeye at 871d986, 3.1.39): sockeye/translate.py turns --output-type into
  `json` whenever --nbest-size > 1, so n-best output is always JSON lines; output_handler.py's
  JSONOutputHandler prints, per input line in order, `json.dumps(TranslatorOutput.json(),
  sort_keys=True)`; inference.py's TranslatorOutput.json() writes "sentence_id" (1, 2, ...),
  the 1-best "translation" and "score", and, when there is more than one translation,
  "translations" (best first) with "scores" beside it; with target factors also "factor<i>",
  "factor<i>_score" and "translations_factors"; the fields of a --json-input line pass through.
  An input it could not translate (an empty line) gets no "translations" and a score of
  -Infinity. Each entry of "scores" is a number up to Sockeye 3.0 (docs/inference.md, "N-best
  translations"); since 3.0.2 (CHANGELOG; inference.py's NBestTranslations) a list, the
  primary score then one per target factor. The score is the negative natural-log probability
  (TranslatorOutput: "Negative log probability"; beam_search.py sums -log_softmax), so lower is
  better, divided by the length penalty ((beta + |y|) / (beta + 1)) ** alpha, by default
  (--length-penalty-alpha 1, beta 0) the length, less a brevity penalty if one is set
  (CandidateScorer); factor scores are not length-normalised (CHANGELOG 3.0.2).

  Conversions (each once, here): "score" = -(primary score), natural log, higher is better,
  still length-normalised as Sockeye made it; "factor<i>_score" = -(factor i's score); a field
  `<name>_scores` (a list beside "translations", as `write_sockeye` adds a feature) is score
  `name` = -(value). Other fields are kept by the writer, not read. A file that sockeye.rerank
  wrote with --return-score holds metric scores (higher is better) in "scores": not this format.

  Args:
    path: str, the output (one JSON object a line).
    refs_path: str, sequence of str or None: line-aligned references (line i + 1 for line i +
      1 of the output), one file per reference set.

  Returns:
    (list[NBestList], dict[str, str]): lists in line order, keys "0", "1", ... (the line, from
    0, as in the reference files; not Sockeye's sentence_id); key -> 'file:line'.

  Raises:
    ValueError: a line that is not a JSON object or has no "translations", "scores" or a
      `<name>_scores` field not one per translation, a non-number score, a line with other
      score names than the first, references not matching; `file:line`.
  """
  lists, wheres, _ = _sockeye_lists(path, text_files.read_lines(path))
  return text_files.attach_aligned_refs(lists, wheres, refs_path)


def write_sockeye(lists, source_path, out_path, feature_names, kept=None):
  """Writes the lines of `source_path` of the lists (those at `kept`, else all) with each new
  feature as a field `<name>_scores` beside "translations", one value per translation, the sign
  of Sockeye's scores (-value: lower is better); written as Sockeye writes its lines
  (sort_keys), so sockeye.rerank reorders the new lists with the translations."""
  source_lists, wheres, objects = _sockeye_lists(source_path, text_files.read_lines(source_path))
  chosen = text_files.kept_indices(len(source_lists), kept, source_path)
  allowed = {source_lists[i].key: [(h.text,) for h in source_lists[i].hyps] for i in chosen}
  text_files.check_source(lists, allowed, source_path, wheres)
  out = []
  for i, nbest in zip(chosen, lists):
    added = {f"{n}{_FEATURE_SUFFIX}": [-h.scores[n] for h in nbest.hyps] for n in feature_names}
    out.append(json.dumps({**objects[i], **added}, sort_keys=True))
  io_utils.write_atomically(out_path, text_files.lines_text(out))


formats.register(
  "sockeye",
  formats.Format(
    read=read_sockeye,
    write=write_sockeye,
    path="sockeye-translate's output with --nbest-size > 1 (JSON lines)",
    refs="line-aligned reference file(s), line i + 1 for output line i + 1",
    options="none",
    scores=f"'score', 'factor<i>_score' (negated: {formats.SCORE_NOTE})",
    features="a field `<name>_scores` of each line, a list beside 'translations', negated",
    aligned_refs=True,
  ),
)

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
  """Reads `sockeye-translate --nbest-size N` output (N > 1 makes it JSON lines).

  Sources (awslabs/sockeye 3.1.39, 871d986): output_handler.py prints one
  `json.dumps(TranslatorOutput.json(), sort_keys=True)` per input line: "translations" best first
  and "scores" beside them, each a number up to 3.0, since 3.0.2 a list of the primary score and
  one per target factor (CHANGELOG); none for an input it could not translate. A score is -ln p
  (beam_search.py sums -log_softmax) divided by the length penalty, by default the length; factor
  scores are not normalised. sockeye.rerank --return-score writes metric scores: not this format.

  Scores: "score" = -primary, "factor<i>_score", and `name` of a `<name>_scores` list (written by
  `write_sockeye`), all negated. Keys "0", "1", ... are the line from 0, as the references'.
  """
  lists, wheres, _ = _sockeye_lists(path, text_files.read_lines(path))
  return text_files.attach_aligned_refs(lists, wheres, refs_path)


def write_sockeye(lists, source_path, out_path, feature_names, kept=None):
  """Writes the source's lines of the lists with each feature a field `<name>_scores` beside
  "translations", negated as Sockeye's scores; sorted keys as Sockeye's, so sockeye.rerank
  reorders it with the translations."""
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

"""This repository's plain N-best TSV ("tsv")."""

import os

from nbest import formats
from nbest import text_files
from nbest import types
from util import io_utils


def read_tsv_nbest(path):
  """Reads N-best lists from this repository's TSV (no quoting, no blank lines):
    optional header `#key<TAB>rank<TAB><name_1>...<TAB><name_k><TAB>text` naming the k >= 0 score
      columns; without one the columns are key, rank, score, text;
    reference rows `<key><TAB>ref<TAB><reference>`, none or several per key (every key or none);
    hypothesis rows `<key><TAB><rank><TAB><score_1>...<TAB><score_k><TAB><text>`, ranks 1, 2, ...
  Keys may interleave; lists come in order of each key's first row.
  """
  text = text_files.read_text_file(path)
  text_files.check_final_newline(path, text)
  lines = text_files.split_lines(text)
  score_names = ["score"]
  first = 1
  if lines and lines[0].startswith("#"):
    score_names = _parse_tsv_header(lines[0], f"{path}:1")
    first = 2
  refs, hyps, where_first = {}, {}, {}
  for lineno, line in enumerate(lines[first - 1 :], first):
    where = f"{path}:{lineno}"
    fields = line.split("\t")
    if not fields[0].strip():
      raise ValueError(f"{where}: expected '<key><TAB>...', found {line!r}")
    key = fields[0]
    where_first.setdefault(key, where)
    if len(fields) >= 2 and fields[1] == "ref":
      if len(fields) != 3:
        raise ValueError(f"{where}: a ref row has 3 fields (key, ref, text), found {len(fields)}")
      refs.setdefault(key, []).append(text_files.check_reference(fields[2], where))
      continue
    hyps.setdefault(key, [])
    hyps[key].append(_parse_tsv_hyp(fields, score_names, len(hyps[key]) + 1, where))
  if not where_first:
    raise ValueError(f"{path}:1: no rows")
  lists = []
  for key, where in where_first.items():
    if key not in hyps:
      raise ValueError(f"{where}: key {key!r} has references but no hypotheses")
    if refs and key not in refs:
      raise ValueError(f"{where}: key {key!r} has hypotheses but no reference")
    lists.append(types.NBestList(key=key, refs=refs.get(key, []), hyps=hyps[key]))
  return lists


def _parse_tsv_header(line, where):
  names = line[1:].split("\t")
  if len(names) < 3 or names[:2] != ["key", "rank"] or names[-1] != "text":
    raise ValueError(
      f"{where}: header must be '#key<TAB>rank<TAB>[scores...]<TAB>text', found {line!r}"
    )
  score_names = names[2:-1]
  if len(set(score_names)) != len(score_names) or not all(score_names):
    raise ValueError(f"{where}: score column names must be distinct and non-empty: {line!r}")
  return score_names


def _parse_tsv_hyp(fields, score_names, expected_rank, where):
  if len(fields) != len(score_names) + 3:
    raise ValueError(
      f"{where}: a hypothesis row has {len(score_names) + 3} fields "
      f"(key, rank, {', '.join(score_names + ['text'])}), found {len(fields)}"
    )
  if fields[1] != str(expected_rank):
    raise ValueError(
      f"{where}: expected rank {expected_rank} for key {fields[0]!r} "
      f"(or 'ref'), found {fields[1]!r}"
    )
  scores = {
    name: text_files.parse_number(value, where, name)
    for name, value in zip(score_names, fields[2:-1])
  }
  return types.Hypothesis(text=fields[-1].strip(), scores=scores)


def write_tsv_nbest(lists, path, score_names=("score",)):
  """Writes lists as `read_tsv_nbest` reads them, with the scores `score_names`, atomically."""
  rows = ["#" + "\t".join(["key", "rank", *score_names, "text"])]
  for nbest in lists:
    rows.extend(f"{nbest.key}\tref\t{ref}" for ref in nbest.refs)
    for rank, hyp in enumerate(nbest.hyps, 1):
      scores = [repr(float(hyp.scores[name])) for name in score_names]
      rows.append("\t".join([nbest.key, str(rank), *scores, hyp.text]))
  for row in rows:
    if "\n" in row or "\r" in row or row.count("\t") > len(score_names) + 2:
      raise ValueError(f"cannot write {row!r} to TSV: tab or newline inside a field")
  io_utils.write_atomically(path, "\n".join(rows) + "\n")


def _write_tsv(lists, source_path, out_path, feature_names):
  del source_path, feature_names  # every score is a column
  write_tsv_nbest(lists, out_path, score_names=text_files.score_names(lists, out_path))


def _export_tsv(lists, out_dir):
  _write_tsv(lists, None, os.path.join(out_dir, "nbest.tsv"), ())
  return {}


formats.register(
  "tsv",
  formats.Format(
    read=formats.with_refs_file(read_tsv_nbest),
    write=_write_tsv,
    path="the TSV of tsv.read_tsv_nbest",
    refs="a Kaldi text file, for a file without ref rows",
    options="none",
    scores="the header's score columns, as written",
    features="a new score column",
    refs_in_file=True,
    paper_table=True,
    export=formats.Export(_export_tsv, "nbest.tsv"),
  ),
)

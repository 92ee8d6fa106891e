"""Similarity of sentence pairs (each distinct sentence encoded once, each pair's cosine), their
correlations with gold scores, SentEval's aggregates and the tables of run_sts.py."""

import collections
import itertools
import os

from absl import logging
import numpy as np

from evaluation import significance
from evaluation import sts_data
from lm import inference
from util import io_utils
from util import progress
from util import resumable

# Sentences per sentence_vectors call; progress (rate, ETA) is reported between calls.
ENCODE_CHUNK = 1000
# Pairs read, encoded and appended to the output at a time: each distinct sentence of a batch
# is encoded once, and an interrupted run resumes after its last complete batch.
DEFAULT_BATCH_SIZE = 10000
# The columns of a pairs output before the cosines, and the last one: 1 when either sentence
# was truncated to fit a model (the log counts them; this says which pairs).
COLUMNS = ("line", "sentence1", "sentence2", "gold")
TRUNCATED = "truncated"


def parse_representation(name):
  """ "context\\M" -> ("context", False); "embed" -> ("embed", True)."""
  pooling, _, variant = name.partition("\\")
  if pooling not in inference.POOLINGS or variant not in ("", "M"):
    raise ValueError(
      f"unknown representation {name!r}; expected one of {inference.POOLINGS}, optionally with \\M"
    )
  return pooling, variant != "M"


def encode(lm, sentences, pooling, masked, label):
  """(float32 [N, D], truncated bool [N]) of `sentences`, in chunks with progress lines."""
  bar = progress.Progress(label, total=len(sentences), unit="sentences")
  parts, truncated = [], []
  for begin in range(0, max(len(sentences), 1), ENCODE_CHUNK):  # no sentence: one call, [0, D]
    chunk = sentences[begin : begin + ENCODE_CHUNK]
    vectors, cut = lm.sentence_vectors(chunk, pooling=pooling, masked=masked, return_truncated=True)
    parts.append(vectors)
    truncated.extend(cut)
    bar.update(len(chunk))
  return np.concatenate(parts), np.array(truncated, bool)


def pair_vectors(lm, pairs, representation, label="encoding"):
  """(first float32 [P, D], second float32 [P, D], truncated bool [P]: either sentence cut to
  fit the model), each distinct sentence encoded once."""
  pooling, masked = parse_representation(representation)
  sentences = sorted({s for p in pairs for s in (p.sent1, p.sent2)})
  index = {s: i for i, s in enumerate(sentences)}
  vectors, truncated = encode(lm, sentences, pooling, masked, label)
  first = [index[p.sent1] for p in pairs]
  second = [index[p.sent2] for p in pairs]
  return vectors[first], vectors[second], truncated[first] | truncated[second]


def whitened_name(representation, dim):
  """ "context+W256": `representation` whitened to `dim` dimensions."""
  return f"{representation}+W{dim:d}"


def whitened_cosines(first, second, transform):
  """float [P]: cosines of `first`, `second` (float [P, D]) after `transform`."""
  return inference.cosine(transform.apply(first), transform.apply(second))


def undefined_reason(cosines, gold):
  """Why the correlations of `cosines` against `gold` are undefined (either side constant: 0/0,
  which scipy gives as NaN), or None."""
  for values, what in ((gold, "gold scores"), (cosines, "cosines")):
    values = np.asarray(values, np.float64)
    if np.all(values == values[0]):
      return f"constant {what}"
  return None


def correlations(cosines, gold, bootstrap=(significance.DEFAULT_RESAMPLES, 0)):
  """{"scores": [Pearson, Spearman] x 100, "pearson_ci": [low, high] (95%, `bootstrap` =
  (resamples, seed))} of `cosines` float [P] against `gold` float [P]; None where undefined, not
  NaN, which JSON lacks."""
  if undefined_reason(cosines, gold):
    return {"scores": [None, None], "pearson_ci": [None, None]}
  scores = sts_data.pearson_spearman(cosines, gold)
  resamples, seed = bootstrap
  ci = significance.pearson_interval(cosines, gold, num_resamples=resamples, seed=seed)
  return {"scores": list(scores), "pearson_ci": [ci.low, ci.high]}


def score_cell(scores, ci, reason=None):
  """ "Pearson [low, high] (Spearman)" x 100, or "undefined (`reason`)"."""
  pearson, spearman = scores
  if pearson is None:
    return f"undefined ({reason})" if reason else "undefined"
  return f"{pearson:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] ({spearman:.2f})"


def column_name(model, representation):
  """ "tta context": the cosine column of a model's row name and representation."""
  return f"{model} {representation}"


def _batches(items, size):
  iterator = iter(items)
  while batch := list(itertools.islice(iterator, size)):
    yield batch


def _line(pair, cosines, truncated):
  gold = "" if pair.score is None else repr(pair.score)
  # repr: the shortest text that reads back as the same float.
  cosines = [repr(float(c)) for c in cosines]
  return "\t".join([str(pair.line), pair.sent1, pair.sent2, gold, *cosines, str(int(truncated))])


class CosineWriter:
  """Writes the cosines of pairs read from files into resumable TSVs, one line per pair in input
  order: `COLUMNS`, a cosine column per model (`models`: [(unique name, NeuralLM)]) and
  representation, followed by its whitened one when `whiten` > 0, then `TRUNCATED`."""

  def __init__(
    self, models, representations, batch_size=DEFAULT_BATCH_SIZE, overwrite=False, whiten=0
  ):
    self.models = models
    self.representations = list(representations)
    self.whiten = whiten
    self.columns = [
      column_name(name, r)
      for name, _ in models
      for rep in self.representations
      for r in ([rep, whitened_name(rep, whiten)] if whiten else [rep])
    ]
    self.overwrite = overwrite
    # What every output's lines depend on but its input; worked out once, as it hashes weights.
    self.job = {
      "models": [dict(name=name, **inference.run_identity(lm)) for name, lm in models],
      "representations": self.representations,
      "batch_size": batch_size,
      # A partial file of the layout before the truncated column is another job's, not resumed.
      "truncated_column": True,
    }

  def write(self, source, target, label, total=None, transforms=None):
    """Streams `source` (a PairsFile or SentEvalSubset) into the TSV `target`, resuming its
    partial file, keeping a target this job finished on the same input; cli.InputError for
    another job's or input's partial file or a failed write. `transforms`: with `whiten`,
    {(model name, representation): whitening.Whitening}."""
    job = dict(self.job, **source.identity())
    if self.whiten:
      job["whitening"] = {" ".join(key): t.digest() for key, t in transforms.items()}
    if not self.overwrite and resumable.is_done(target, job, source):
      logging.info("%s: %s is complete (the same job and input), kept", label, target)
      return
    io_utils.makedirs(os.path.dirname(io_utils.absolute(target)))
    partial = resumable.Partial(target, job, self.overwrite)
    pairs = iter(source)
    done = max(partial.lines - 1, 0)  # the first line is the header
    if partial.lines:
      # Skips the pairs the partial file holds, reading (and hashing) the input up to their end.
      collections.deque(itertools.islice(pairs, done), maxlen=0)
      partial.check_input(source)
    else:
      partial.append(["\t".join([*COLUMNS, *self.columns, TRUNCATED])], source)
    bar = progress.Progress(label, total=None if total is None else total - done, unit="pairs")
    for batch in _batches(pairs, self.job["batch_size"]):
      cosines, truncated = [], np.zeros(len(batch), bool)
      for name, lm in self.models:
        for r in self.representations:
          first, second, cut = pair_vectors(lm, batch, r, f"{name} {r} {label}")
          cosines.append(inference.cosine(first, second))
          if self.whiten:
            cosines.append(whitened_cosines(first, second, transforms[name, r]))
          # Truncated for any model: each model's vectors are of what it read.
          truncated |= cut
      lines = [_line(p, row, t) for p, row, t in zip(batch, zip(*cosines), truncated)]
      partial.append(lines, source)
      bar.update(len(batch))
    partial.finish(target, source)


def read_cosines(path, return_truncated=False):
  """(gold float [P] or None, {column: cosines float [P]}) of a `CosineWriter` output; with
  `return_truncated`, also the number of pairs with a truncated sentence."""
  gold, columns, truncated = [], None, 0
  # Binary lines: split on "\n" only, as written (a sentence may hold a lone "\r").
  with io_utils.open_file(path, "rb") as f:
    for number, raw in enumerate(f):
      fields = raw.decode("utf-8").removesuffix("\n").split("\t")[len(COLUMNS) - 1 :]
      if number == 0:
        names, columns = fields[1:-1], [[] for _ in fields[1:-1]]
        continue
      gold.append(float(fields[0]) if fields[0] else None)
      for column, value in zip(columns, fields[1:-1]):
        column.append(float(value))
      truncated += fields[-1] == "1"
  result = (None if None in gold else gold), dict(zip(names, columns))
  return (*result, truncated) if return_truncated else result


def add_correlations(rows, name, path, bootstrap=(significance.DEFAULT_RESAMPLES, 0)):
  """Fills set `name` into each row's "scores", "pearson_ci", "cosines" and "gold" dicts from
  its `CosineWriter` output `path` (with gold scores)."""
  gold, cosines = read_cosines(path)
  for row in rows:
    column = column_name(row["model"], row["representation"])
    row["cosines"][name], row["gold"][name] = cosines[column], gold
    result = correlations(cosines[column], gold, bootstrap)
    row["scores"][name], row["pearson_ci"][name] = result["scores"], result["pearson_ci"]
    reason = undefined_reason(cosines[column], gold)
    if reason:
      # The cosines are still written; only the correlations are reported as undefined.
      logging.warning("%s %s: Pearson and Spearman are undefined (%s)", column, name, reason)
      continue
    logging.info(
      "%s %s: Pearson %.2f [%.2f, %.2f] Spearman %.2f",
      column,
      name,
      result["scores"][0],
      *result["pearson_ci"],
      result["scores"][1],
    )


def senteval_aggregates(rows, subsets, bootstrap=(significance.DEFAULT_RESAMPLES, 0)):
  """Per row, {"pairs": int, each of significance.AGGREGATES over the task's `subsets`:
  `subset_aggregates`' entry, or None when a subset's correlations are undefined}."""
  resamples, seed = bootstrap
  out = []
  for row in rows:
    cosines = [row["cosines"][s] for s in subsets]
    gold = [row["gold"][s] for s in subsets]
    entry = {"pairs": sum(len(g) for g in gold)}
    if any(undefined_reason(c, g) for c, g in zip(cosines, gold)):
      entry.update(dict.fromkeys(significance.AGGREGATES))
    else:
      entry.update(
        significance.subset_aggregates(cosines, gold, num_resamples=resamples, seed=seed)
      )
    out.append(entry)
  return out


# SimCSE's "Avg.": the Spearman x 100 of STS12-16 ("all" each), STS-B test and SICK-R test.
AVERAGED_SETS = ("stsb_test", "sick_test")


def senteval_average(row, tasks, paper_row=None):
  """{"spearman": mean over `tasks`' "all" and, in `paper_row`, `AVERAGED_SETS`, or None where
  any is undefined; "over": their names}."""
  values = {
    task: (row["all"][task]["all"] or {"scores": [None, None]})["scores"][1] for task in tasks
  }
  for name in AVERAGED_SETS:
    if paper_row is not None and name in paper_row["scores"]:
      values[name] = paper_row["scores"][name][1]
  defined = None not in values.values()
  return {
    "spearman": float(np.mean(list(values.values()))) if defined else None,
    "over": list(values),
  }


def _aggregate_cell(entry):
  """ "Spearman [low, high] (Pearson [low, high])" x 100 of a `senteval_aggregates` entry."""
  if entry is None:
    return "undefined"
  (pearson, spearman), (p_ci, s_ci) = entry["scores"], entry["ci"]
  return (
    f"{spearman:.2f} [{s_ci[0]:.2f}, {s_ci[1]:.2f}] ({pearson:.2f} [{p_ci[0]:.2f}, {p_ci[1]:.2f}])"
  )


def markdown_table(rows, groups):
  """Rows the pair sets of `groups` ([(task or None, [set names])]), a task's followed by its
  aggregates (Spearman first, as the field prints them) and SimCSE's average last; columns
  "model representation": Pearson [95% CI] (Spearman) x 100."""
  lines = [
    "| pairs | n | "
    + " | ".join(column_name(r["model"], r["representation"]) for r in rows)
    + " |",
    "|---|---:|" + "---|" * len(rows),
  ]
  for task, names in groups:
    for name in names:
      cells = [
        score_cell(
          r["scores"][name],
          r["pearson_ci"][name],
          undefined_reason(r["cosines"][name], r["gold"][name]),
        )
        for r in rows
      ]
      lines.append(f"| {name} | {len(rows[0]['gold'][name])} | {' | '.join(cells)} |")
    if task is None:
      continue
    for kind in significance.AGGREGATES:
      cells = [_aggregate_cell(r["all"][task][kind]) for r in rows]
      lines.append(f"| {task}/{kind} | {rows[0]['all'][task]['pairs']} | {' | '.join(cells)} |")
  if rows and "avg" in rows[0]:
    cells = [
      "undefined" if r["avg"]["spearman"] is None else f"{r['avg']['spearman']:.2f}" for r in rows
    ]
    lines.append(f"| avg ({', '.join(rows[0]['avg']['over'])}) | | {' | '.join(cells)} |")
  return "\n".join(lines) + "\n"

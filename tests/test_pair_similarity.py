"""evaluation/pair_similarity.py and run_sts.py --pairs_file: cosines of each pair in input order,
each distinct sentence encoded once, resume, correlations and comparisons; tiny models and files."""

import collections
import json
import os
import re

import commands
from conftest import PAIRS
from conftest import WORDS
from conftest import tiny_config
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from evaluation import pair_files
from evaluation import pair_similarity
from evaluation import significance
from evaluation import whitening
from lm import inference
from lm import model_dir
import modeling
import tokenization
from util import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPRESENTATIONS = ["context", "embed"]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
  """A tiny random T-TA and biLM (whose "context" runs masked copies) on one vocab."""
  root = tmp_path_factory.mktemp("models")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(WORDS)) + "\n")
  dirs = {}
  for seed, kind in ((3, "tta"), (4, "bilm")):
    tf.keras.utils.set_random_seed(seed)
    config = tiny_config(vocab_size=len(tokenization.SPECIAL_TOKENS) + len(WORDS))
    dirs[kind] = str(root / kind)
    model_dir.save_model_dir(modeling.build_model(config, kind), str(vocab), dirs[kind])
  return dirs


@pytest.fixture(scope="module")
def models(model_dirs):
  return [(kind, inference.load_lm(path)) for kind, path in model_dirs.items()]


def pairs_file(directory, pairs=PAIRS, header=True):
  path = directory / "mine.tsv"
  lines = ["s1\ts2\tscore"] if header else []
  lines += ["\t".join([a, b] + ([] if gold is None else [f"{gold:g}"])) for a, b, gold in pairs]
  path.write_text("\n".join(lines) + "\n")
  return str(path)


def write(models, source, out, batch_size=3, representations=REPRESENTATIONS, overwrite=False):
  writer = pair_similarity.CosineWriter(models, representations, batch_size, overwrite)
  writer.write(source, out, "mine", total=len(PAIRS))


def read_lines(path):
  with open(path, encoding="utf-8", newline="") as f:
    return f.read().split("\n")[:-1]


def direct_cosine(lm, a, b, pooling):
  """The cosine of two sentences' vectors, each encoded alone, in float64 (no batching, no
  dedupe, no inference.cosine)."""
  u, v = (lm.sentence_vectors([s], pooling=pooling)[0].astype(np.float64) for s in (a, b))
  return float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))


def test_cosines_in_input_order_equal_the_vectors_cosines(models, tmp_path):
  out = str(tmp_path / "out" / "mine.tsv")
  write(models, pair_files.PairsFile(pairs_file(tmp_path)), out)
  lines = [line.split("\t") for line in read_lines(out)]
  assert lines[0] == ["line", "sentence1", "sentence2", "gold"] + [
    f"{kind} {r}" for kind in ("tta", "bilm") for r in REPRESENTATIONS
  ] + ["truncated"]
  assert {row[-1] for row in lines[1:]} == {"0"}
  assert [row[:4] for row in lines[1:]] == [
    [str(i + 2), a, b, repr(gold)] for i, (a, b, gold) in enumerate(PAIRS)
  ]
  for row, (a, b, _) in zip(lines[1:], PAIRS):
    want = [direct_cosine(lm, a, b, r) for _, lm in models for r in REPRESENTATIONS]
    assert [float(x) for x in row[4:-1]] == pytest.approx(want, abs=1e-5)
  # The embedding cosines of a random model spread out, so a pair in the wrong place would show.
  embed = [float(row[5]) for row in lines[1:]]
  assert max(embed) - min(embed) > 0.05
  gold, cosines = pair_similarity.read_cosines(out)
  assert gold == [gold for _, _, gold in PAIRS]
  assert cosines["bilm embed"] == [float(row[7]) for row in lines[1:]]


def test_pairs_without_gold_leave_the_gold_column_empty(models, tmp_path):
  out = str(tmp_path / "plain.tsv")
  # A lone carriage return inside a sentence stays in it, and in its line.
  pairs = [("the cat\rsat", "a dog", None), (PAIRS[1][0], PAIRS[1][1], None)]
  write(models[:1], pair_files.PairsFile(pairs_file(tmp_path, pairs, header=False)), out)
  lines = read_lines(out)
  assert [line.split("\t")[:4] for line in lines[1:]] == [
    ["1", "the cat\rsat", "a dog", ""],
    ["2", PAIRS[1][0], PAIRS[1][1], ""],
  ]
  gold, cosines = pair_similarity.read_cosines(out)
  assert gold is None
  assert cosines["tta embed"] == [float(line.split("\t")[5]) for line in lines[1:]]


@pytest.mark.parametrize("batch_size", [100, 3])
def test_each_distinct_sentence_is_encoded_once(models, tmp_path, monkeypatch, batch_size):
  kind, lm = models[0]
  encoded = collections.Counter()
  sentence_vectors = lm.sentence_vectors

  def counting(sentences, pooling="context", masked=True, **kwargs):
    encoded.update((pooling, s) for s in sentences)
    return sentence_vectors(sentences, pooling=pooling, masked=masked, **kwargs)

  monkeypatch.setattr(lm, "sentence_vectors", counting)
  out = str(tmp_path / "out.tsv")
  write([(kind, lm)], pair_files.PairsFile(pairs_file(tmp_path)), out, batch_size)
  want = collections.Counter()
  for begin in range(0, len(PAIRS), batch_size):
    batch = {s for a, b, _ in PAIRS[begin : begin + batch_size] for s in (a, b)}
    want.update((r, s) for r in REPRESENTATIONS for s in batch)
  assert encoded == want
  if batch_size >= len(PAIRS):  # the whole file in one batch: every sentence once
    assert set(encoded.values()) == {1} and len(encoded) == 2 * 8


class Killed(Exception):
  """Stands for the end of a process killed in the middle of a batch."""


def run_killed(models, source, out, monkeypatch, batches, **kwargs):
  """CosineWriter.write killed during batch `batches` + 1; returns the partial file."""
  pair_vectors = pair_similarity.pair_vectors
  calls = []

  def vectors_then_die(*args, **kw):
    calls.append(1)
    if len(calls) > batches * len(models) * len(REPRESENTATIONS):
      raise Killed
    return pair_vectors(*args, **kw)

  with monkeypatch.context() as patched:
    patched.setattr(pair_similarity, "pair_vectors", vectors_then_die)
    with pytest.raises(Killed):
      write(models, source, out, **kwargs)
  assert not os.path.exists(out)
  return out + ".partial"


def test_interrupted_run_resumes_to_the_same_file(models, tmp_path, monkeypatch):
  source = pair_files.PairsFile(pairs_file(tmp_path))
  whole = str(tmp_path / "whole.tsv")
  write(models, source, whole)
  full = read_lines(whole)
  out = str(tmp_path / "resumed.tsv")
  partial = run_killed(models, source, out, monkeypatch, batches=2)
  assert read_lines(partial) == full[:7]  # the header and two batches of 3
  with open(partial, "a", encoding="utf-8") as f:  # a torn line of the third batch
    f.write(full[7][:10])
  write(models, source, out)
  assert read_lines(out) == full
  assert not os.path.exists(partial) and not os.path.exists(partial + ".json")


def test_resume_of_another_job_or_input_is_refused_until_overwrite(models, tmp_path, monkeypatch):
  path = pairs_file(tmp_path)
  source = pair_files.PairsFile(path)
  out = str(tmp_path / "out.tsv")
  partial = run_killed(models, source, out, monkeypatch, batches=1)
  kept = read_lines(partial)
  with pytest.raises(cli.InputError, match=r"holds records of another job: representations"):
    write(models, source, out, representations=["embed"])
  with pytest.raises(cli.InputError, match=r"holds records of another job: batch_size 3"):
    write(models, source, out, batch_size=2)
  # The pairs the partial file holds were read from other lines.
  with open(path, encoding="utf-8") as f:
    edited = f.read().replace("a dog ran\tthe cat", "a dog ran\tthe mat")
  with open(path, "w", encoding="utf-8") as f:
    f.write(edited)
  with pytest.raises(cli.InputError, match=r"mine\.tsv is not the input .* was scored from"):
    write(models, source, out)
  assert read_lines(partial) == kept and not os.path.exists(out)
  write(models, source, out, overwrite=True)
  assert read_lines(out)[2].split("\t")[2] == "the mat sat on the mat"


def test_a_finished_output_of_the_same_job_and_input_is_kept(models, tmp_path, monkeypatch):
  path = pairs_file(tmp_path)
  source = pair_files.PairsFile(path)
  out = str(tmp_path / "out.tsv")
  write(models, source, out)
  finished = read_lines(out)

  def encoding_again(*args, **kwargs):
    raise Killed

  with monkeypatch.context() as patched:
    patched.setattr(pair_similarity, "pair_vectors", encoding_again)
    write(models, source, out)  # kept: nothing encoded
    assert read_lines(out) == finished
    with pytest.raises(Killed):  # --overwrite encodes again
      write(models, source, out, overwrite=True)
    with open(path, "a", encoding="utf-8") as f:
      f.write("the mat\ta dog\t2\n")
    with pytest.raises(Killed):  # another input: encoded again
      write(models, source, out)
  write(models, source, out)
  lines = read_lines(out)
  # The same first two batches of 3, then the last batch with the new pair.
  assert lines[:7] == finished[:7] and len(lines) == len(finished) + 1
  assert lines[-1].startswith("9\tthe mat\ta dog\t2.0\t")


# ----------------------------------------------------------------------- run_sts.py --pairs_file


def run_sts(*args):
  # Every progress line is logged (not one per 10 s), so that the tests see them.
  return commands.run("run_sts.py", *args, env={"TTA_PROGRESS_SECONDS": "0"})


def error_lines(stderr):
  """stderr without info lines and TensorFlow's start-up notes."""
  return [
    l for l in stderr.splitlines() if l and not re.match(r"^(WARNING: All log|E0000 |I\d{4} )", l)
  ]


@pytest.fixture
def senteval_dir(tmp_path):
  """SentEval's layout of one task with two subsets (a blank gold line is skipped)."""
  task = tmp_path / "STS" / "STS12-en-test"
  task.mkdir(parents=True)
  (task / "STS.input.MSRpar.txt").write_text(
    "the cat sat\ta dog ran\nthe mat\ta cat\nthe cat\tthe cat sat on the mat\na dog\tthe dog ran\n"
  )
  (task / "STS.gs.MSRpar.txt").write_text("1.0\n\n4.5\n2.0\n")
  (task / "STS.input.OnWN.txt").write_text(
    "a dog ran\ta dog\nthe mat\tthe cat\nthe dog\ta cat\na cat walked\tthe mat\n"
  )
  (task / "STS.gs.OnWN.txt").write_text("4.0\n0.5\n3.0\n1.5\n")
  return tmp_path / "STS"


def scipy_scores(cosines, gold):
  return [
    100 * scipy.stats.pearsonr(cosines, gold).statistic,
    100 * scipy.stats.spearmanr(cosines, gold).statistic,
  ]


@pytest.mark.slow(seconds=3)
def test_run_sts_on_pairs_files_and_senteval(model_dirs, senteval_dir, tmp_path):
  plain = tmp_path / "plain.tsv"
  plain.write_text("the cat\ta dog\n")
  out = tmp_path / "out"
  result = run_sts(
    f"--model_dir=tta={model_dirs['tta']},bilm={model_dirs['bilm']}",
    f"--pairs_file=mine={pairs_file(tmp_path)},{plain}",
    f"--pairs_file=senteval:{senteval_dir}",
    "--pairs_batch_size=2",
    f"--output_dir={out}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert not (out / "sts_results.json").exists()  # the paper's sets run only when asked for
  report = json.loads((out / "pairs_results.json").read_text())
  subsets = ["STS12-en-test/MSRpar", "STS12-en-test/OnWN"]
  assert [(s["name"], s["pairs"], s["gold"], s["output"]) for s in report["sets"]] == [
    ("mine", 7, True, "pairs/mine.tsv"),
    ("plain", 1, False, "pairs/plain.tsv"),
    (subsets[0], 3, True, "pairs/STS12-en-test/MSRpar.tsv"),
    (subsets[1], 4, True, "pairs/STS12-en-test/OnWN.tsv"),
  ]
  msrpar = read_lines(out / "pairs" / "STS12-en-test" / "MSRpar.tsv")
  assert [l.split("\t")[0] for l in msrpar[1:]] == ["1", "3", "4"]  # line 2 had no gold
  rows = {(r["model"], r["representation"]): r for r in report["rows"]}
  assert list(rows) == [
    ("tta", "context"),
    ("tta", "embed"),
    ("bilm", "context"),
    ("bilm", "embed"),
  ]
  table = (out / "pairs_results.md").read_text()
  cosines = {}
  for name in ["mine", *subsets]:
    gold, cosines[name] = pair_similarity.read_cosines(out / "pairs" / f"{name}.tsv")
    for (model, representation), row in rows.items():
      column = cosines[name][f"{model} {representation}"]
      assert row["scores"][name] == pytest.approx(scipy_scores(column, gold), abs=1e-9)
      low, high = row["pearson_ci"][name]
      assert low <= row["scores"][name][0] <= high
      assert f"| {pair_similarity.score_cell(row['scores'][name], [low, high])} |" in table
  # SentEval's aggregates: the correlations over the subsets' pairs joined, the mean and the
  # pair-weighted mean of the subsets' correlations; SimCSE's average of the task's "all".
  for (model, representation), row in rows.items():
    task = row["all"]["STS12-en-test"]
    column = f"{model} {representation}"
    joined = [v for s in subsets for v in cosines[s][column]]
    gold = [v for s in subsets for v in pair_similarity.read_cosines(out / "pairs" / f"{s}.tsv")[0]]
    assert task["all"]["scores"] == pytest.approx(scipy_scores(joined, gold), abs=1e-9)
    scores = np.array([row["scores"][s] for s in subsets])
    assert task["mean"]["scores"] == pytest.approx(list(scores.mean(0)))
    assert task["wmean"]["scores"] == pytest.approx(list((3 * scores[0] + 4 * scores[1]) / 7))
    assert row["avg"] == {
      "spearman": pytest.approx(task["all"]["scores"][1]),
      "over": ["STS12-en-test"],
    }
  for kind in ("all", "mean", "wmean"):
    assert f"| STS12-en-test/{kind} | 7 |" in table
  assert "| avg (STS12-en-test) | |" in table
  # tta minus bilm on the same pairs, for each set and representation.
  comparisons = {(c["set"], c["representation"]): c for c in report["comparisons"]}
  assert set(comparisons) == {(s, r) for s in ["mine", *subsets] for r in REPRESENTATIONS}
  for (name, representation), c in comparisons.items():
    assert (c["a"], c["b"]) == ("tta", "bilm")
    tta, bilm = rows[("tta", representation)], rows[("bilm", representation)]
    assert c["difference"] == pytest.approx(tta["scores"][name][0] - bilm["scores"][name][0])
  gold, _ = pair_similarity.read_cosines(out / "pairs" / "mine.tsv")
  again = significance.compare_pearson(
    cosines["mine"]["tta embed"], cosines["mine"]["bilm embed"], gold
  )
  assert comparisons[("mine", "embed")]["p_value"] == again.p_value
  assert re.search(r"\] mine: 7/7 pairs \(100%\), [\d.]+/s", result.stderr)


@pytest.mark.slow(seconds=3)
def test_run_sts_into_the_output_dir_of_another_job_is_refused_until_overwrite(
  model_dirs, tmp_path
):
  out = tmp_path / "out"

  def run(model, *args):
    return run_sts(
      f"--model_dir=m={model_dirs[model]}",
      f"--pairs_file=mine={pairs_file(tmp_path)}",
      f"--output_dir={out}",
      *args,
    )

  assert run("tta").returncode == 0
  finished = read_lines(out / "pairs" / "mine.tsv")
  result = run("bilm")
  assert result.returncode == 2 and error_lines(result.stderr) == [
    f"run_sts.py: error: --output_dir {out} holds another job: model_dir {model_dirs['tta']} "
    f"(this run: {model_dirs['bilm']}); add --overwrite to start over"
  ]
  result = run("tta", "--representations=embed")
  assert result.returncode == 2 and "representations" in error_lines(result.stderr)[0]
  assert read_lines(out / "pairs" / "mine.tsv") == finished
  assert run("bilm", "--overwrite").returncode == 0
  assert read_lines(out / "pairs" / "mine.tsv") != finished
  report = json.loads((out / "pairs_results.json").read_text())
  assert {r["model_type"] for r in report["rows"]} == {"bilm"}
  assert run("bilm").returncode == 0  # the same job: the finished set is kept


@pytest.mark.parametrize(
  "content, where",
  [
    ("a\tb\nonly one column\n", "bad.tsv:2: expected sentence1<TAB>sentence2"),
    ("senteval", "STS.input.x.txt:3: "),
  ],
)
@pytest.mark.slow(seconds=3)
def test_bad_input_is_one_line_naming_file_and_line(model_dirs, tmp_path, content, where):
  if content == "senteval":
    (tmp_path / "senteval").mkdir()  # apart from --output_dir, which may not lie inside an input
    (tmp_path / "senteval" / "STS.input.x.txt").write_text("a\tb\nc\td\ne\tf\n")
    (tmp_path / "senteval" / "STS.gs.x.txt").write_text("1\n2\n")  # one line short
    spec = f"senteval:{tmp_path}/senteval"
  else:
    (tmp_path / "bad.tsv").write_text(content)
    spec = str(tmp_path / "bad.tsv")
  result = run_sts(
    f"--model_dir={model_dirs['tta']}", f"--pairs_file={spec}", f"--output_dir={tmp_path / 'o'}"
  )
  lines = error_lines(result.stderr)
  assert result.returncode == 2 and len(lines) == 1, result.stderr
  assert lines[0].startswith(f"run_sts.py: error: {tmp_path}/") and where in lines[0]


@pytest.mark.slow(seconds=3)
def test_constant_gold_scores_give_undefined_correlations_not_nan(model_dirs, tmp_path):
  (tmp_path / "d").mkdir()
  constant = pairs_file(tmp_path, [(a, b, 3.0) for a, b, _ in PAIRS])
  out = tmp_path / "out"
  result = run_sts(
    f"--model_dir=tta={model_dirs['tta']},bilm={model_dirs['bilm']}",
    f"--pairs_file=flat={constant},mine={pairs_file(tmp_path / 'd', PAIRS)}",
    "--representations=embed",
    f"--output_dir={out}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  text = (out / "pairs_results.json").read_text()
  assert "NaN" not in text
  report = json.loads(text)
  for row in report["rows"]:
    assert row["scores"]["flat"] == [None, None] and row["pearson_ci"]["flat"] == [None, None]
    assert None not in row["scores"]["mine"]
  # No comparison stands on a set without correlations.
  assert {c["set"] for c in report["comparisons"]} == {"mine"}
  table = (out / "pairs_results.md").read_text()
  assert (
    "| flat | 7 | undefined (constant gold scores) | undefined (constant gold scores) |" in table
  )
  assert "nan" not in table.lower()
  assert re.search(
    r"flat: Pearson and Spearman are undefined \(constant gold scores\)", result.stderr
  )
  assert len(read_lines(out / "pairs" / "flat.tsv")) == 8  # the cosines are still written


def test_constant_cosines_give_undefined_correlations():
  assert pair_similarity.correlations([0.5] * 4, [1.0, 2.0, 3.0, 4.0]) == {
    "scores": [None, None],
    "pearson_ci": [None, None],
  }
  assert pair_similarity.undefined_reason([0.5] * 4, [1.0, 2.0, 3.0, 4.0]) == "constant cosines"
  cell = pair_similarity.score_cell([None, None], [None, None], "constant cosines")
  assert cell == "undefined (constant cosines)"


LONG = " ".join(["the cat sat"] * 10)  # more word pieces than the tiny models' 16 positions
LONG_PAIRS = [PAIRS[0], (PAIRS[1][0], LONG, 2.0), (LONG, "the mat", 3.0), *PAIRS[3:]]


def run_long_pairs(model_dirs, tmp_path, *flags):
  """run_sts.py --pairs_file of LONG_PAIRS with the T-TA: (the TSV's last column, header first;
  pairs_results.json's first set; pairs_results.md)."""
  out = tmp_path / "out"
  result = run_sts(
    f"--model_dir=tta={model_dirs['tta']}",
    f"--pairs_file={pairs_file(tmp_path, LONG_PAIRS)}",
    f"--output_dir={out}",
    *flags,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  column = [l.split("\t")[-1] for l in read_lines(out / "pairs" / "mine.tsv")]
  report = json.loads((out / "pairs_results.json").read_text())
  return column, report["sets"][0], (out / "pairs_results.md").read_text()


@pytest.mark.slow(seconds=3)
def test_pairs_with_a_truncated_sentence_are_flagged(model_dirs, tmp_path):
  column, counts, table = run_long_pairs(model_dirs, tmp_path, "--long_inputs=truncate")
  assert column == ["truncated", "0", "1", "1", "0", "0", "0", "0"]
  assert counts["truncated"] == 2 and counts["windowed"] == {"tta": 0}
  assert "truncated to fit a model (column `truncated` of its TSV): mine 2 of 7." in table


@pytest.mark.slow(seconds=3)
def test_long_sentences_are_read_in_windows_by_default_and_counted(model_dirs, tmp_path):
  column, counts, table = run_long_pairs(model_dirs, tmp_path)
  assert column == ["truncated"] + ["0"] * 7  # nothing truncated
  # One distinct long sentence, read in windows (once per representation).
  assert counts["truncated"] == 0 and counts["windowed"] == {"tta": 1}
  assert "read in sliding windows: mine: tta 1." in table


def test_senteval_average_is_simcses_mean_spearman_with_stsb_and_sick_test():
  row = {"all": {t: {"all": {"scores": [0.0, s]}} for t, s in (("STS12", 40.0), ("STS13", 50.0))}}
  paper = {"scores": {"stsb_dev": [0.0, 99.0], "stsb_test": [0.0, 60.0], "sick_test": [0.0, 70.0]}}
  assert pair_similarity.senteval_average(row, ["STS12", "STS13"], paper) == {
    "spearman": 55.0,
    "over": ["STS12", "STS13", "stsb_test", "sick_test"],
  }
  assert pair_similarity.senteval_average(row, ["STS12", "STS13"])["spearman"] == 45.0
  row["all"]["STS13"]["all"] = None  # undefined there
  assert pair_similarity.senteval_average(row, ["STS12", "STS13"])["spearman"] is None


def hand_whitened_cosines(lm, fit_sentences, pairs, representation, dim):
  """BERT-whitening computed apart from evaluation/whitening.py: the covariance's eigenvectors
  (numpy's eigh) of the vectors of `fit_sentences`, the `dim` of largest variance, each scaled
  to unit variance; the cosine of each pair after it."""
  fit = lm.sentence_vectors(fit_sentences, pooling=representation).astype(np.float64)
  values, vectors = np.linalg.eigh(np.cov(fit.T))
  top = np.argsort(values)[::-1][:dim]
  kernel = vectors[:, top] / np.sqrt(values[top])
  first, second = (
    (lm.sentence_vectors([p[k] for p in pairs], pooling=representation) - fit.mean(0)) @ kernel
    for k in (0, 1)
  )
  return (first * second).sum(1) / np.linalg.norm(first, axis=1) / np.linalg.norm(second, axis=1)


@pytest.mark.slow(seconds=4)
def test_whiten_fits_on_the_sets_sentences_and_the_saved_transform_whitens_one_pair(
  model_dirs, models, tmp_path
):
  out = tmp_path / "out"
  result = run_sts(
    f"--model_dir=tta={model_dirs['tta']}",
    f"--pairs_file={pairs_file(tmp_path)}",
    "--whiten=4",
    f"--output_dir={out}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  gold, cosines = pair_similarity.read_cosines(out / "pairs" / "mine.tsv")
  assert list(cosines) == ["tta context", "tta context+W4", "tta embed", "tta embed+W4"]
  tta = models[0][1]
  # BERT-whitening's protocol: fitted on both sentences of every pair of the set.
  sentences = [p[0] for p in PAIRS] + [p[1] for p in PAIRS]
  for representation in REPRESENTATIONS:
    want = hand_whitened_cosines(tta, sentences, PAIRS, representation, 4)
    np.testing.assert_allclose(cosines[f"tta {representation}+W4"], want, rtol=0, atol=1e-6)
    assert not np.allclose(cosines[f"tta {representation}"], want, atol=1e-3)
  rows = json.loads((out / "pairs_results.json").read_text())["rows"]
  white = next(r for r in rows if r["representation"] == "context+W4")
  assert white["scores"]["mine"] == pytest.approx(
    scipy_scores(cosines["tta context+W4"], gold), abs=1e-9
  )
  # The saved transform whitens a single pair (no covariance of its own) as it whitened the set.
  saved = out / "whitening" / "mine.npz"
  one = tmp_path / "one"
  one.mkdir()
  result = run_sts(
    f"--model_dir=tta={model_dirs['tta']}",
    f"--pairs_file={pairs_file(one, [(*PAIRS[1][:2], None)], header=False)}",
    f"--whiten_load={saved}",
    f"--output_dir={tmp_path / 'out_one'}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  _, single = pair_similarity.read_cosines(tmp_path / "out_one" / "pairs" / "mine.tsv")
  assert single["tta context+W4"] == pytest.approx([cosines["tta context+W4"][1]], abs=1e-6)


@pytest.mark.slow(seconds=2)
def test_whiten_fit_on_a_reference_file_whitens_a_single_pair(model_dirs, models, tmp_path):
  reference = [a for a, _, _ in PAIRS] + ["the dog sat on a mat", "cats ran far away"]
  (tmp_path / "corpus.txt").write_text("\n".join(reference) + "\n\n")
  out = tmp_path / "out"
  result = run_sts(
    f"--model_dir=tta={model_dirs['tta']}",
    f"--pairs_file={pairs_file(tmp_path, [(*PAIRS[0][:2], None)], header=False)}",
    "--representations=embed",
    "--whiten=3",
    f"--whiten_fit={tmp_path / 'corpus.txt'}",
    f"--output_dir={out}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  _, cosines = pair_similarity.read_cosines(out / "pairs" / "mine.tsv")
  want = hand_whitened_cosines(models[0][1], reference, PAIRS[:1], "embed", 3)
  np.testing.assert_allclose(cosines["tta embed+W3"], want, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
  "flags,message",
  [
    (["--whiten=64"], "--whiten=64: 64 dimensions asked of tta's 32-dimensional vectors"),
    (["--whiten=4", "--whiten_fit={tmp}/missing.txt"], "--whiten_fit={tmp}/missing.txt: "),
    (["--whiten=4", "--whiten_fit={tmp}/empty.txt"], "0 sentence(s); a whitening needs at least 2"),
    (["--whiten_fit={tmp}/empty.txt"], "needs --whiten=DIM"),
    (["--whiten_load={tmp}/d8.npz"], "'tta context' takes 8-dimensional vectors; tta's have 32"),
    (["--whiten=3", "--whiten_load={tmp}/d8.npz"], "give [2] dimensions, not --whiten=3"),
    (["--whiten_load={tmp}/empty.txt"], "not a file of whitening transforms"),
    (["--whiten=2", "--pairs_file=same={tmp}/same.tsv"], "span 0 direction(s), fewer than the 2"),
  ],
)
def test_bad_whitening_input_is_one_line(model_dirs, tmp_path, flags, message):
  (tmp_path / "empty.txt").write_text("\n")
  (tmp_path / "same.tsv").write_text("the cat\tthe cat\t1\nthe cat\tthe cat\t2\n")
  rng = np.random.default_rng(0)
  fitted_for = {"model": {}, "representation": "context"}
  whitening.save(
    str(tmp_path / "d8.npz"),
    {"tta context": whitening.fit(rng.normal(size=(20, 8)), 2, fitted_for)},
  )
  flags = [f.format(tmp=tmp_path) for f in flags]
  if not any(f.startswith("--pairs_file") for f in flags):
    flags.append(f"--pairs_file={pairs_file(tmp_path)}")
  result = run_sts(
    f"--model_dir=tta={model_dirs['tta']}",
    "--representations=context",
    *flags,
    f"--output_dir={tmp_path / 'out'}",
  )
  lines = error_lines(result.stderr)
  assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
  assert message.format(tmp=tmp_path) in lines[0]

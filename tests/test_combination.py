"""nbest/combination.py and nbest/tuning.py: the weighted combination, its tuning on dev and
its metrics, on small synthetic lists (mechanics; each expected value is counted by hand or
recomputed with jiwer/sacrebleu directly)."""

import json

import jiwer
import nbest_fixtures
import numpy as np
import pytest
import sacrebleu

from evaluation import metrics
from nbest import combination
from nbest import formats
from nbest import rescoring
from nbest import tuning
from nbest import types


def _lists(rows):
  """NBestLists of [(reference, [(text, score), ...])]; keys u0, u1, ..."""
  return [
    types.NBestList(
      key=f"u{i}", refs=[ref], hyps=[types.Hypothesis(t, {"score": s}) for t, s in hyps]
    )
    for i, (ref, hyps) in enumerate(rows)
  ]


def test_wer_report_counts_substitutions_deletions_insertions_by_hand():
  lists = _lists([("a b c d", [("a x c d e", 0.0)]), ("a b c", [("a c", 0.0)])])
  report = metrics.wer_report(lists, [0, 0], cer=True)
  # "a x c d e" vs "a b c d": b->x, +e; "a c" vs "a b c": -b.
  assert (report["substitutions"], report["deletions"], report["insertions"]) == (1, 1, 1)
  assert report["reference_words"] == 7
  assert report["wer"] == pytest.approx(100 * 3 / 7)
  # Characters: "a x c d e" vs "a b c d" is 1 substitution + 2 insertions (" e") of 7;
  # "a c" vs "a b c" 2 deletions of 5.
  assert report["cer"] == pytest.approx(100 * 5 / 12)


def _random_lists(seed, count=40, size=6):
  """Lists whose 'lm1' column prefers the reference, and a noisy first pass ('score')."""
  rng = np.random.default_rng(seed)
  vocab = ["a", "b", "c", "d", "e", "f"]
  lists, lm = [], []
  for i in range(count):
    ref = " ".join(rng.choice(vocab, size=rng.integers(2, 6)))
    hyps = [ref] + [" ".join(rng.choice(vocab, size=rng.integers(1, 7))) for _ in range(size - 1)]
    rng.shuffle(hyps)
    first = rng.normal(size=size)
    truth = [-jiwer.wer(ref, h) + rng.normal(scale=0.3) for h in hyps]
    lists.append(
      types.NBestList(
        key=f"u{i}",
        refs=[ref],
        hyps=[types.Hypothesis(h, {"score": float(s)}) for h, s in zip(hyps, first)],
      )
    )
    lm.append([float(t) for t in truth])
  return lists, {"lm1": lm, "lm2": [list(rng.normal(size=size)) for _ in range(count)]}


def _jiwer_wer(lists, choice):
  refs = [l.refs[0] for l in lists]
  return 100 * jiwer.wer(refs, [l.hyps[c].text for l, c in zip(lists, choice)])


def _grid_start(seed):
  """(lists, initial weights, tables, dev WER objective, grid start, its WER) of _random_lists."""
  lists, lm = _random_lists(seed)
  weights = rescoring.initial_weights(lists, ["lm1", "lm2"], [])
  tables = combination.tables(lists, weights, lm)
  objective = tuning.Objective(lists, "wer")
  return (lists, weights, tables, objective, *tuning.grid_start(objective, tables, weights))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_optimiser_never_ends_worse_on_dev_than_its_grid_start(seed):
  lists, weights, tables, objective, start, start_wer = _grid_start(seed)
  tuned, tuned_wer = tuning.optimise(objective, tables, start)
  start_choice = combination.choose(tables, start.vector())
  tuned_choice = combination.choose(tables, tuned.vector())
  assert start_wer == pytest.approx(_jiwer_wer(lists, start_choice))
  assert tuned_wer == pytest.approx(_jiwer_wer(lists, tuned_choice))
  assert tuned_wer <= start_wer
  if seed == 0:  # the search moves: the second LM and the length bonus help these lists
    assert tuned_wer < start_wer
  # The grid start is the paper's protocol: only the first LM, weights (1 - λ, λ).
  assert start.lms["lm2"] == 0.0 and start.first_pass["score"] + start.lms["lm1"] == 1.0
  first_wer = _jiwer_wer(lists, combination.choose(tables, weights.vector()))
  assert start_wer <= first_wer


def test_ties_go_to_the_better_first_pass_rank():
  lists = _lists([("a", [("b", -1.0), ("a", -1.0)])])
  weights = combination.Weights({"score": 1.0}, {})
  assert combination.choose(combination.tables(lists, weights, {}), weights.vector()) == [0]


def test_length_bonus_counts_words():
  lists = _lists([("a b c", [("a b", -1.0), ("a b c", -1.5)])])
  tables = combination.tables(lists, combination.Weights({"score": 1.0}, {}), {})
  assert tables[0].tolist() == [[-1.0, 2.0], [-1.5, 3.0]]
  assert combination.choose(tables, np.array([1.0, 0.4])) == [0]
  assert combination.choose(tables, np.array([1.0, 0.6])) == [1]


def test_weights_file_round_trip_and_toolkit_alpha(tmp_path):
  weights = combination.Weights({"score": 0.75}, {"tta": 0.25}, 0.5)
  path = str(tmp_path / "weights.json")
  combination.save_weights(path, weights, {"metric": "wer"})
  again = combination.load_weights(path)
  assert again == weights
  toolkit = again.toolkit_weights()
  assert toolkit["alpha"] == pytest.approx(0.25 / (1 - 0.25))
  assert toolkit["beta"] == pytest.approx(0.5 / 0.75)
  assert combination.Weights({"a": 1.0, "b": 1.0}, {"tta": 0.5}).toolkit_weights() is None


def test_the_weights_file_has_a_version_and_the_files_before_versions_still_read(tmp_path):
  weights = combination.Weights({"score": 0.75}, {"tta": 0.25}, 0.5)
  path = tmp_path / "weights.json"
  combination.save_weights(str(path), weights, {"metric": "wer"})
  written = json.loads(path.read_text())
  assert (written["format"], written["version"]) == ("tta-nbest-weights", 2)
  # run_rescoring's weights.json before versions.
  path.write_text(
    '{"metric": "wer", "first_pass": {"score": 0.75}, "lms": {"tta": 0.25}, "length": 0.5}\n'
  )
  assert combination.load_weights(str(path)) == weights
  # run_mwer's mwer_weights.json before versions: its one LM is "mwer".
  path.write_text(
    '{"first_pass_weights": {"decoder": 0.6, "ctc": 0.4}, "lm_weight": 0.3, '
    '"length_weight": -0.1, "training": {}}\n'
  )
  assert combination.load_weights(str(path)) == combination.Weights(
    {"decoder": 0.6, "ctc": 0.4}, {"mwer": 0.3}, -0.1
  )
  # A later version (or another format) is refused, not half read.
  path.write_text(
    '{"format": "tta-nbest-weights", "version": 3, "first_pass": {}, "lms": {}, "length": 0}\n'
  )
  with pytest.raises(ValueError, match=f"^{path}:1: a weights file of format .* version 3"):
    combination.load_weights(str(path))


def test_a_bad_weights_file_names_the_file(tmp_path):
  path = tmp_path / "w.json"
  path.write_text('{"first_pass": {}}\n')
  with pytest.raises(ValueError, match=f"^{path}:1: not a weights file"):
    combination.load_weights(str(path))
  path.write_text("{\n  oops\n")
  with pytest.raises(ValueError, match=f"^{path}:2: not JSON"):
    combination.load_weights(str(path))


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", '"0.5"', "true", "null"])
def test_a_weight_that_is_not_a_finite_number_is_refused(tmp_path, value):
  # JSON from Python's json module may hold NaN and Infinity; a NaN weight picked rank 1 in
  # every list.
  path = tmp_path / "w.json"
  path.write_text(f'{{"first_pass": {{"score": 1.0}}, "lms": {{"tta": {value}}}, "length": 0}}\n')
  with pytest.raises(ValueError, match=rf"^{path}:1: weight lms.tta must be a finite number"):
    combination.load_weights(str(path))


@pytest.mark.parametrize("seed", range(6))
def test_lm_weights_stay_non_negative_unless_allowed(seed):
  lists, weights, tables, objective, start, _ = _grid_start(seed)
  kept, _ = tuning.optimise(objective, tables, start)
  assert min(kept.lms.values()) >= 0, kept.lms
  if seed == 0:  # here the unbounded search gives lm2 a negative weight
    free, _ = tuning.optimise(objective, tables, start, negative_lms=True)
    assert free.lms["lm2"] < 0, free.lms
  tuned, info = rescoring.tune(lists, tables, weights, "wer")
  assert min(tuned.lms.values()) >= 0
  assert info["dev_lists"] == len(lists) and info["negative_lm_weights_allowed"] is False


def test_mt_report_uses_every_reference_and_prints_the_signature():
  lists = [
    types.NBestList(
      key=str(i),
      refs=[a, b],
      hyps=[types.Hypothesis(h, {"score": 0.0}) for h in hyps],
    )
    for i, (a, b, hyps) in enumerate(
      [
        ("the cat sat on the mat", "a cat sat on a mat", ["the cat sat on a mat", "cat"]),
        ("the dog ran far away", "a dog ran away", ["a dog ran far away", "dog"]),
      ]
    )
  ]
  report = metrics.mt_report(lists, [0, 0])
  hyps = ["the cat sat on a mat", "a dog ran far away"]
  refs = [[l.refs[0] for l in lists], [l.refs[1] for l in lists]]
  assert report["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, refs).score)
  assert report["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, refs).score)
  assert "nrefs:2" in report["bleu_signature"] and "nrefs:2" in report["chrf_signature"]


@pytest.mark.parametrize("fmt", sorted(nbest_fixtures.WRITERS))
def test_rescored_lists_read_back_in_their_format_with_the_lm_feature(fmt, tmp_path):
  path, refs, options = nbest_fixtures.WRITERS[fmt](
    nbest_fixtures.toy_lists([["a b c", "a b", "a"], ["d e", "d f", "d"], ["g", "h", "g h"]]),
    str(tmp_path / "in"),
  )
  lists, _ = formats.read_set(fmt, path, [refs] if refs else [], options)
  values = [[-3.0 - 2 * j - i for j in range(len(n.hyps))] for i, n in enumerate(lists)]
  choice = [2, 0, 1]
  paths = rescoring.write_outputs(
    fmt, lists, path, str(tmp_path / "out"), {"tta": values}, choice, bool(refs)
  )
  again_options = dict(options)
  if fmt == "nemo":
    again_options.update(columns=("score", "tta"), beam_size=3)
  again = formats.read_nbest(fmt, paths["rescored"], **again_options)
  assert [[h.text for h in n.hyps] for n in again] == [[h.text for h in n.hyps] for n in lists]
  got = [[h.scores["tta"] for h in n.hyps] for n in again]
  assert np.allclose(got, values, atol=1e-6)
  chosen = [n.hyps[c].text for n, c in zip(lists, choice)]
  text = (tmp_path / "out" / "text").read_text().splitlines()
  assert [line.split(" ", 1)[1] for line in text] == chosen

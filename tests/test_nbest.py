"""Tests of the nbest package and evaluation/metrics.py: readers on the shared data and on small
bad files, metrics, reranking.

Expected counts come from the data folders' SOURCE.md files; first-pass and oracle WERs are
recomputed here with jiwer directly, not through nbest's helpers.
"""

import io
import json
import math
import random
import statistics
import tarfile

import conftest
import jiwer
import pytest
import sacrebleu

from evaluation import metrics
from evaluation import score_cache
from nbest import combination
from nbest import settings
from nbest import shared_data
from nbest import tuning
from nbest import types
from nbest.formats import espnet
from nbest.formats import mlm_json
from nbest.formats import tsv

# From asr-librispeech-espnet2-30best/SOURCE.md: utterances, reference words, and the WERs it
# reports (1-best with LM, 30-best oracle, AM-only rerank), to 2 decimals.
ESPNET_EXPECTED = {
  "dev_clean": (2703, 54402, 1.70, 0.59, 1.88),
  "dev_other": (2864, 50948, 3.61, 1.76, 4.04),
  "test_clean": (2620, 52576, 1.81, 0.67, 1.92),
  "test_other": (2939, 52343, 3.71, 1.83, 4.11),
}


_data_dir_or_skip = conftest.data_dir_or_skip


@pytest.fixture(scope="module")
def espnet_sets():
  _data_dir_or_skip(shared_data.ESPNET_DIR)
  return {name: espnet.read_espnet_nbest(name) for name in shared_data.ESPNET_SETS}


def _jiwer_percent(refs, hyps):
  return 100.0 * jiwer.wer(refs, hyps)


# ---------------------------------------------------------------------------------------------
# Real ESPnet2 LibriSpeech lists.


@pytest.mark.parametrize("name", shared_data.ESPNET_SETS)
@pytest.mark.slow(seconds=15)
def test_espnet_counts(espnet_sets, name):
  lists = espnet_sets[name]
  utterances, ref_words, _, _, _ = ESPNET_EXPECTED[name]
  assert len(lists) == utterances
  assert sum(len(nbest_list.refs[0].split()) for nbest_list in lists) == ref_words
  assert all(len(nbest_list.hyps) == 30 for nbest_list in lists)
  assert len({nbest_list.key for nbest_list in lists}) == utterances
  for nbest_list in lists:
    assert len(nbest_list.refs) == 1
    for hyp in nbest_list.hyps:
      assert set(hyp.scores) == {"decoder", "ctc", "lm", "score"}


@pytest.mark.parametrize("name", shared_data.ESPNET_SETS)
def test_espnet_full_score_is_weighted_sum_and_lists_are_sorted(espnet_sets, name):
  for nbest_list in espnet_sets[name]:
    full = [hyp.scores["score"] for hyp in nbest_list.hyps]
    assert full == sorted(full, reverse=True), nbest_list.key
    for hyp in nbest_list.hyps:
      parts = sum(w * hyp.scores[k] for k, w in settings.SETTINGS["full"].parts.items())
      assert abs(parts - hyp.scores["score"]) < 3e-4  # the files round to 4 decimals


def test_espnet_first_key_and_text(espnet_sets):
  first = espnet_sets["dev_clean"][0]
  assert first.key == "1272-128104-0000"
  assert first.refs == [
    "MISTER QUILTER IS THE APOSTLE OF THE MIDDLE CLASSES AND WE ARE GLAD TO WELCOME HIS GOSPEL"
  ]
  assert first.hyps[0].scores == {
    "decoder": -0.3654,
    "ctc": -0.0041,
    "lm": -77.3508,
    "score": -46.6314,
  }


def test_espnet_keeps_empty_hypotheses(espnet_sets):
  # dev_other has utterances whose 1-best is empty (everything deleted); they must survive.
  empty = [
    (l.key, i) for l in espnet_sets["dev_other"] for i, h in enumerate(l.hyps) if h.text == ""
  ]
  assert ("1651-136854-0012", 0) in empty
  assert len(empty) == 5


@pytest.mark.parametrize("name", shared_data.ESPNET_SETS)
@pytest.mark.slow(seconds=7)
def test_lambda_zero_reproduces_first_pass(espnet_sets, name):
  lists = espnet_sets[name]
  refs = [l.refs[0] for l in lists]
  _, _, full_wer, _, am_wer = ESPNET_EXPECTED[name]
  lm = [[h.scores["lm"] for h in l.hyps] for l in lists]

  # Full setting: the hypothesis with the max stored beam score, earliest on ties.
  best_full = [
    max(range(len(l.hyps)), key=lambda i, l=l: (l.hyps[i].scores["score"], -i)) for l in lists
  ]
  assert best_full == [0] * len(lists)
  expected = _jiwer_percent(refs, [l.hyps[0].text for l in lists])
  choice = combination.rerank(lists, lm, 0.0, "full")
  assert choice == best_full
  assert metrics.evaluate(lists, choice, "wer") == expected
  assert round(expected, 2) == full_wer

  # AM-only setting: max of 0.6*decoder + 0.4*ctc, computed here independently.
  best_am = [
    max(
      range(len(l.hyps)),
      key=lambda i, l=l: (0.6 * l.hyps[i].scores["decoder"] + 0.4 * l.hyps[i].scores["ctc"], -i),
    )
    for l in lists
  ]
  choice = combination.rerank(lists, None, 0.0, "am")
  assert choice == best_am
  assert metrics.evaluate(lists, choice, "wer") == _jiwer_percent(
    refs, [l.hyps[i].text for l, i in zip(lists, best_am)]
  )
  assert round(metrics.evaluate(lists, choice, "wer"), 2) == am_wer


def test_oracle_wer_real(espnet_sets):
  lists = espnet_sets["test_clean"]
  value, choice = metrics.oracle(lists, "wer")
  refs = [l.refs[0] for l in lists]
  assert value == _jiwer_percent(refs, [l.hyps[i].text for l, i in zip(lists, choice)])
  assert round(value, 2) == ESPNET_EXPECTED["test_clean"][3]
  # No single utterance can do better than its oracle pick.
  for l, i in list(zip(lists, choice))[:40]:
    errors = [jiwer.process_words(l.refs[0], h.text) for h in l.hyps]
    counts = [o.substitutions + o.deletions + o.insertions for o in errors]
    assert counts[i] == min(counts)


def test_sweep_with_espnet_lm_beats_am_only(espnet_sets):
  # The first pass's own Transformer LM scores are a real "second-pass LM": interpolating them
  # with the AM score must help, and λ=0 of the curve is the AM-only first pass.
  lists = espnet_sets["dev_other"][:1000]  # a subset keeps the 21-point sweep fast
  lm = [[h.scores["lm"] for h in l.hyps] for l in lists]
  sweep = tuning.sweep_lambda(lists, lm, "wer", setting="am")
  assert [lam for lam, _ in sweep.curve] == list(tuning.DEFAULT_GRID)
  assert sweep.curve[0][1] == metrics.evaluate(
    lists, combination.rerank(lists, None, 0.0, "am"), "wer"
  )
  assert 0.0 < sweep.best_lam < 1.0
  assert sweep.best_value < sweep.curve[0][1]
  assert sweep.best_value == min(value for _, value in sweep.curve)


# ---------------------------------------------------------------------------------------------
# Real WMT21 candidates.


def test_wmt_candidates_real():
  _data_dir_or_skip(shared_data.WMT_DIR)
  lists = shared_data.read_wmt_candidates()
  assert len(lists) == 1000
  assert all(len(l.hyps) == 19 and len(l.refs) == 2 for l in lists)
  systems = [h.system for h in lists[0].hyps]
  assert systems[0] == "Borderline" and "Facebook-AI" in systems and len(set(systems)) == 19
  assert lists[0].refs[0] == "Biker reacts lightning fast and prevents worse."
  assert all(h.scores == {} for h in lists[0].hyps)
  hyps = [l.hyps[0].text for l in lists]
  direct = sacrebleu.corpus_bleu(hyps, [[l.refs[0] for l in lists], [l.refs[1] for l in lists]])
  assert metrics.evaluate(lists, [0] * len(lists), "bleu") == direct.score
  assert 20.0 < direct.score < 60.0


# ---------------------------------------------------------------------------------------------
# Metrics on constructed cases.


def test_corpus_wer_hand_and_jiwer():
  assert metrics.corpus_wer(["a b c d"], ["a b x d"]) == 25.0  # 1 substitution in 4 words
  refs, hyps = ["a b c d", "e f"], ["a b c", "e f g"]
  details = metrics.wer_details(refs, hyps)
  assert (details.substitutions, details.deletions, details.insertions, details.hits) == (
    0,
    1,
    1,
    5,
  )
  assert details.ref_words == 6
  assert details.wer == pytest.approx(100.0 * 2 / 6, abs=1e-12)
  assert details.wer == _jiwer_percent(refs, hyps)
  assert metrics.corpus_wer(["a b"], [""]) == 100.0  # an empty hypothesis deletes everything


def test_corpus_bleu_hand_and_sacrebleu():
  hyp = "the cat sat on the mat"
  refs = ["the cat sat on a mat"]
  # Precisions 5/6, 3/5, 2/4, 1/3, equal lengths (BP = 1): BLEU = (1/12) ** (1/4).
  assert metrics.corpus_bleu([refs], [hyp]) == pytest.approx(100.0 * (1 / 12) ** 0.25, abs=1e-9)
  refs_list = [
    ["the cat sat on a mat", "a cat was sitting on the mat"],
    ["it is raining today", "today it rains"],
  ]
  hyps = ["the cat sat on the mat", "it rains today"]
  direct = sacrebleu.corpus_bleu(hyps, [[r[0] for r in refs_list], [r[1] for r in refs_list]])
  assert metrics.corpus_bleu(refs_list, hyps) == direct.score
  with pytest.raises(ValueError, match="same, non-zero number of references"):
    metrics.corpus_bleu([["a"], ["b", "c"]], ["a", "b"])


def test_pseudo_perplexity():
  sums, counts = [-2.0, -6.0, -3.0], [2, 3, 1]
  values = metrics.pseudo_perplexity(sums, counts)
  assert values == [math.e, math.exp(2.0), math.exp(3.0)]
  summary = metrics.pppl_summary(sums, counts)
  assert summary["mean"] == pytest.approx((math.e + math.exp(2) + math.exp(3)) / 3)
  assert summary["median"] == math.exp(2.0)
  assert summary["corpus"] == pytest.approx(math.exp(11 / 6))
  assert metrics.pppl_summary([-1.0, -3.0], [1, 1])["median"] == statistics.median(
    [math.e, math.exp(3)]
  )
  with pytest.raises(ValueError, match="positive"):
    metrics.pseudo_perplexity([-1.0], [0])


# ---------------------------------------------------------------------------------------------
# Reranking on constructed lists.


def _toy_lists():
  # Three hypotheses each; s2s prefers rank 1, the LM prefers the correct rank 2 or 3.
  def hyp(text, score):
    return types.Hypothesis(text=text, scores={"score": score, "decoder": score, "ctc": 0.0})

  return [
    types.NBestList(
      "u1", ["a b c d e"], [hyp("a b c d x", -1.0), hyp("a b c d e", -1.5), hyp("x y z w v", -3.0)]
    ),
    types.NBestList(
      "u2", ["f g h i"], [hyp("f g h x", -2.0), hyp("f g h y", -2.1), hyp("f g h i", -4.0)]
    ),
  ]


def test_rerank_lambda_extremes_and_formula():
  lists = _toy_lists()
  lm = [[-10.0, -4.0, -20.0], [-9.0, -9.0, -2.0]]
  assert combination.rerank(lists, lm, 0.0) == [0, 0]
  assert combination.rerank(lists, None, 0.0) == [0, 0]
  assert combination.rerank(lists, lm, 1.0) == [1, 2]
  # λ=0.5: u1 -> (-5.5, -2.75, -11.5) picks 1; u2 -> (-5.5, -5.55, -3.0) picks 2.
  assert combination.rerank(lists, lm, 0.5) == [1, 2]
  # Equal combined scores go to the better first-pass rank.
  assert combination.rerank(lists, [[-1.0, -1.0, -1.0], [0.0, 0.0, 0.0]], 1.0) == [0, 0]
  assert combination.rerank(lists, lm, 0.0, "am") == [0, 0]
  with pytest.raises(ValueError, match="LM scores for 3 hypotheses"):
    combination.rerank(lists, [[0.0], [0.0, 0.0, 0.0]], 0.5)
  with pytest.raises(ValueError, match="not finite"):
    combination.rerank(lists, [[math.nan, 0.0, 0.0], [0.0, 0.0, 0.0]], 0.5)
  with pytest.raises(ValueError, match="unknown setting"):
    combination.rerank(lists, lm, 0.5, "lm-only")


def test_sweep_and_tie_rule():
  lists = _toy_lists()
  lm = [[-10.0, -4.0, -20.0], [-9.0, -9.0, -2.0]]
  sweep = tuning.sweep_lambda(lists, lm, "wer")
  # First pass: 1 error in 5 words + 1 in 4. The LM's choice wins u1 once
  # (1-λ)(-0.5) + λ·6 > 0 (λ > 0.077) and u2 once (1-λ)(-2) + λ·7 > 0 (λ > 0.222).
  values = dict(sweep.curve)
  assert values[0.0] == pytest.approx(100.0 * 2 / 9)
  assert values[0.1] == values[0.2] == pytest.approx(100.0 / 9)
  assert values[0.25] == 0.0 and values[1.0] == 0.0
  assert sweep.best_lam == 0.25 and sweep.best_value == 0.0  # smallest λ among the ties
  bleu_sweep = tuning.sweep_lambda(lists, lm, "bleu", grid=(1.0, 0.5, 0.0))
  assert bleu_sweep.best_lam == 0.5  # the grid order does not matter for the tie rule
  with pytest.raises(ValueError, match="unknown metric"):
    tuning.sweep_lambda(lists, lm, "ter")


def test_oracle_toy():
  lists = _toy_lists()
  value, choice = metrics.oracle(lists, "wer")
  assert choice == [1, 2] and value == 0.0
  # Ties between equally good hypotheses go to the better rank.
  tied = [types.NBestList("u", ["a b"], [types.Hypothesis("a x"), types.Hypothesis("x b")])]
  assert metrics.oracle(tied, "wer") == (50.0, [0])
  bleu_value, bleu_choice = metrics.oracle(lists, "bleu")
  assert bleu_choice == [1, 2] and bleu_value == pytest.approx(100.0)


@pytest.mark.parametrize("name", list(settings.SETTINGS))
def test_every_setting_ranks_by_its_weighted_parts_at_lambda_zero(name):
  """Each score column alone prefers another hypothesis, so only the setting's own weighted sum
  of parts (summed here from its row) picks the one rerank picks; λ = 1 leaves the LM alone."""
  setting = settings.get(name)
  columns = sorted({"decoder", "ctc", "lm", *setting.parts})
  rng = random.Random(0)
  lists = []
  for u in range(20):
    hyps = [
      types.Hypothesis(f"h{i}", {c: rng.gauss(0, 1) for c in columns})
      for i in range(len(columns) + 1)
    ]
    lists.append(types.NBestList(f"u{u}", ["h0"], hyps))

  def first_pass(hyp):
    return sum(w * hyp.scores[k] for k, w in setting.parts.items())

  want = [max(range(len(l.hyps)), key=lambda i, l=l: first_pass(l.hyps[i])) for l in lists]
  assert combination.rerank(lists, None, 0.0, name) == want
  lm = [[float(i) for i in range(len(l.hyps))] for l in lists]
  assert combination.rerank(lists, lm, 1.0, name) == [len(l.hyps) - 1 for l in lists]
  assert f"{name} = {setting.description}" in settings.describe()


def test_each_setting_combines_its_first_pass_scores():
  every = {"decoder": -1.0, "ctc": -2.0, "lm": -3.0, "score": -4.2}
  assert settings.first_pass_weights("am", every) == {"decoder": 0.6, "ctc": 0.4}
  # A reranker takes the stored total (what the beam ranked by), MWER the parts it can weigh.
  assert settings.first_pass_weights("full", every) == {"score": 1.0}
  full_parts = {"decoder": 0.6, "ctc": 0.4, "lm": 0.6}
  assert settings.first_pass_weights("full", every, prefer_parts=True) == full_parts
  # Lists with only one of them (mlm-scoring JSON: a score; ESPnet2 without `score` files: parts).
  assert settings.first_pass_weights("full", {"score": 1.0}, prefer_parts=True) == {"score": 1.0}
  assert settings.first_pass_weights("full", {"decoder": 0, "ctc": 0, "lm": 0}) == full_parts
  assert settings.first_pass_weights(None, every) == {}
  with pytest.raises(ValueError, match="setting 'am' needs scores"):
    settings.first_pass_weights("am", {"score": 1.0})
  with pytest.raises(ValueError, match="unknown setting 'nosuch'"):
    settings.first_pass_weights("nosuch", every)


# ---------------------------------------------------------------------------------------------
# Readers on small files.


def _espnet_files(texts=None, scores=None, totals=None, trn=None):
  texts = texts or [["u-1 A B", "u-2 C"], ["u-1 A", "u-2 "]]
  scores = (
    scores
    or [
      [
        'u-1 {"decoder": "tensor(-1.0)", "ctc": "tensor(-2.0)", "lm": "tensor(-3.0)"}',
        'u-2 {"decoder": "tensor(-0.5)", "ctc": "tensor(-0.1)", "lm": "tensor(-1.0)"}',
      ]
    ]
    * 2
  )
  totals = totals or [
    ["u-1 tensor(-3.2)", "u-2 tensor(-1.54)"],
    ["u-1 tensor(-4.0)", "u-2 tensor(-2.0)"],
  ]
  trn = trn or ["A B\t(s-u-1)", "C\t(s-u-2)"]
  files = {"references/ref_wer.trn": trn}
  for rank, (t, s, total) in enumerate(zip(texts, scores, totals), 1):
    files[f"raw_hypotheses/{rank}best_recog/text"] = t
    files[f"raw_hypotheses/{rank}best_recog/scores"] = s
    if total is not None:
      files[f"raw_hypotheses/{rank}best_recog/score"] = total
  return files


def _write_espnet_tar(path, files, root="toy"):
  with tarfile.open(path, "w:xz") as tar:
    for name, lines in files.items():
      data = ("\n".join(lines) + "\n").encode("utf-8")
      info = tarfile.TarInfo(f"{root}/{name}")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return str(path)


def test_espnet_reader_small_archive_and_directory(tmp_path):
  path = _write_espnet_tar(tmp_path / "toy.tar.xz", _espnet_files())
  lists = espnet.read_espnet_nbest(path)
  assert [l.key for l in lists] == ["u-1", "u-2"]
  assert lists[0].refs == ["A B"]
  assert [h.text for h in lists[1].hyps] == ["C", ""]
  assert lists[0].hyps[0].scores == {"decoder": -1.0, "ctc": -2.0, "lm": -3.0, "score": -3.2}
  directory = tmp_path / "unpacked"
  for name, lines in _espnet_files().items():
    (directory / name).parent.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("\n".join(lines) + "\n")
  assert espnet.read_espnet_nbest(str(directory)) == lists


def test_a_truncated_espnet_archive_is_one_line_naming_it(tmp_path):
  # Issue 56's probes, third round (n10): an EOFError traceback (convert_nbest.py and the
  # rescoring commands).
  whole = _write_espnet_tar(tmp_path / "toy.tar.xz", _espnet_files())
  cut = tmp_path / "cut.tar.xz"
  data = open(whole, "rb").read()
  cut.write_bytes(data[: len(data) // 2])
  with pytest.raises(ValueError, match=f"{cut}: cannot read"):
    espnet.read_espnet_nbest(str(cut))


@pytest.mark.parametrize(
  "change, member, line, message",
  [
    (
      dict(totals=[["u-1 tensor(-3.2)", "u-2 tensor(abc)"], ["u-1 -4.0", "u-2 -2.0"]]),
      "1best_recog/score",
      2,
      "expected a finite number",
    ),
    (
      dict(totals=[["u-1 tensor(nan)", "u-2 -1.0"], ["u-1 -4.0", "u-2 -2.0"]]),
      "1best_recog/score",
      1,
      "expected a finite number",
    ),
    (
      dict(
        scores=[
          [
            'u-1 {"decoder": "tensor(-1.0)", "ctc": "tensor(-2.0)"}',
            'u-2 {"decoder": "tensor(-1.0)", "lm": "tensor(-2.0)"}',
          ]
        ]
        * 2
      ),
      "1best_recog/scores",
      2,
      "lack the 'ctc' field",
    ),
    (
      dict(scores=[['u-1 {"decoder": "tensor(-1.0)", "ctc": "tensor(-2.0)"}', "u-2 oops"]] * 2),
      "1best_recog/scores",
      2,
      "not a JSON object",
    ),
    (dict(texts=[["u-1 A B", "u-3 C"], ["u-1 A", "u-2 "]]), "1best_recog/text", 2, "missing from"),
    (
      dict(trn=["A B\t(s-u-1)", "C\t(s-u-9)"]),
      "references/ref_wer.trn",
      2,
      "matches no hypothesis",
    ),
    (dict(trn=["A B\t(s-u-1)"]), "1best_recog/text", 2, "has no reference"),
    (dict(trn=["A B\t(s-u-1)", "   \t(s-u-2)"]), "references/ref_wer.trn", 2, "blank reference"),
    (dict(trn=["A B (s-u-1)", "C without id"]), "references/ref_wer.trn", 2, "expected 'TEXT"),
    (dict(texts=[["u-1 A B", "u-2 C"], ["u-1 A", "u-1 B"]]), "2best_recog/text", 2, "repeated"),
  ],
)
def test_espnet_reader_rejects_malformed(tmp_path, change, member, line, message):
  path = _write_espnet_tar(tmp_path / "bad.tar.xz", _espnet_files(**change))
  with pytest.raises(ValueError) as info:
    espnet.read_espnet_nbest(path)
  text = str(info.value)
  assert f"{path}:toy/" in text and f"{member}:{line}:" in text, text
  assert message in text


def test_espnet_reader_rejects_rank_gap_and_missing_files(tmp_path):
  files = _espnet_files()
  for kind in ("text", "scores", "score"):
    files[f"raw_hypotheses/3best_recog/{kind}"] = files.pop(f"raw_hypotheses/2best_recog/{kind}")
  with pytest.raises(ValueError, match="ranks must be 1..R"):
    espnet.read_espnet_nbest(_write_espnet_tar(tmp_path / "gap.tar.xz", files))
  files = _espnet_files()
  del files["raw_hypotheses/2best_recog/score"]
  with pytest.raises(ValueError, match="missing raw_hypotheses/2best_recog/score"):
    espnet.read_espnet_nbest(_write_espnet_tar(tmp_path / "nototal.tar.xz", files))
  files = _espnet_files(
    texts=[["u-1 A B", "u-2 C"], ["u-2 D"]],
    scores=[
      ['u-1 {"decoder": "-1", "ctc": "-2"}', 'u-2 {"decoder": "-1", "ctc": "-2"}'],
      ['u-2 {"decoder": "-1", "ctc": "-2"}'],
    ],
    totals=[None, None],
  )
  lists = espnet.read_espnet_nbest(_write_espnet_tar(tmp_path / "short.tar.xz", files))
  assert [len(l.hyps) for l in lists] == [1, 2]  # a shorter list is fine
  assert "score" not in lists[0].hyps[0].scores
  with pytest.raises(FileNotFoundError, match="neither an existing path"):
    espnet.read_espnet_nbest("dev_nonexistent")


def _shin_json():
  return {
    "utt-a": {
      "ref": "the cat sat",
      "hyp_2": {"score": -7.5, "text": " the cat sad"},
      "hyp_1": {"score": -5.0, "text": " the cat sat"},
    },
    "utt-b": {"ref": "hello", "hyp_1": {"score": -1.0, "text": ""}},
  }


def test_json_reader_valid(tmp_path):
  path = tmp_path / "dev.am.json"
  path.write_text(json.dumps(_shin_json(), indent=2))
  lists = mlm_json.read_json_nbest(str(path))
  assert [l.key for l in lists] == ["utt-a", "utt-b"]
  assert lists[0].refs == ["the cat sat"]
  assert [(h.text, h.scores) for h in lists[0].hyps] == [
    ("the cat sat", {"score": -5.0}),
    ("the cat sad", {"score": -7.5}),
  ]
  assert lists[1].hyps[0].text == ""
  assert combination.rerank(lists, None, 0.0, "full") == [0, 0]


@pytest.mark.parametrize(
  "mutate, line, message",
  [
    (lambda d: d["utt-b"]["hyp_1"].pop("score"), 15, "missing 'score'"),
    (lambda d: d["utt-b"]["hyp_1"].update(score="high"), 15, "not a finite number"),
    (lambda d: d["utt-a"]["hyp_1"].update(score=True), 8, "not a finite number"),
    (lambda d: d["utt-a"]["hyp_2"].pop("text"), 4, "missing 'text'"),
    (lambda d: d["utt-b"].pop("ref"), 13, "has no 'ref' but 'utt-a' has one"),
    (lambda d: d["utt-b"].update(ref=7), 14, "non-string 'ref'"),
    (lambda d: d["utt-b"].update(ref="  "), 14, "blank reference"),
    (lambda d: d["utt-b"].pop("hyp_1"), 13, "no hyp_<n> entries"),
    (lambda d: d["utt-a"].update(hyp_4={"score": 1.0, "text": "x"}), 2, "hyp_1..hyp_N"),
    (lambda d: d["utt-a"].update(note="x"), 12, "unknown field 'note'"),
    # Lone surrogates crashed the cache writer after scoring, naming no file.
    (lambda d: d["utt-b"]["hyp_1"].update(text="oops \ud83d"), 15, "lone UTF-16 surrogate"),
    (lambda d: d["utt-b"].update(ref="\ud83d hello"), 14, "ref: '\\ud83d' at character 0"),
  ],
)
def test_json_reader_rejects_malformed(tmp_path, mutate, line, message):
  data = _shin_json()
  mutate(data)
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(data, indent=2))
  with pytest.raises(ValueError) as info:
    mlm_json.read_json_nbest(str(path))
  assert f"{path}:{line}:" in str(info.value) and message in str(info.value), str(info.value)


def test_json_reader_rejects_syntax_duplicates_and_empty(tmp_path):
  path = tmp_path / "bad.json"
  path.write_text('{\n  "u": {"ref": "a",\n  "hyp_1": {"score": -1.0 "text": "a"}}}\n')
  with pytest.raises(ValueError, match=f"{path}:3: invalid JSON"):
    mlm_json.read_json_nbest(str(path))
  path.write_text(
    '{"u": {"ref": "a", "hyp_1": {"score": 1, "text": "a"}},\n'
    ' "u": {"ref": "b", "hyp_1": {"score": 1, "text": "b"}}}\n'
  )
  with pytest.raises(ValueError, match=f"{path}:2: key 'u' appears twice"):
    mlm_json.read_json_nbest(str(path))
  path.write_text("{}")
  with pytest.raises(ValueError, match=f"{path}:1: expected a non-empty object"):
    mlm_json.read_json_nbest(str(path))


TSV_OK = (
  "#key\trank\tdecoder\tctc\ttext\n"
  "u1\tref\tA B C\n"
  "u1\t1\t-1.0\t-2.0\tA B X\n"
  "u2\tref\tD\n"
  "u2\tref\tD E\n"
  "u1\t2\t-1.5\t-2.5\tA B C\n"
  "u2\t1\t-0.5\t-1e1\t\n"
)


def test_tsv_reader_valid_and_round_trip(tmp_path):
  path = tmp_path / "lists.tsv"
  path.write_text(TSV_OK)
  lists = tsv.read_tsv_nbest(str(path))
  assert [l.key for l in lists] == ["u1", "u2"]
  assert lists[1].refs == ["D", "D E"]
  assert [h.text for h in lists[0].hyps] == ["A B X", "A B C"]
  assert lists[0].hyps[1].scores == {"decoder": -1.5, "ctc": -2.5}
  assert lists[1].hyps[0] == types.Hypothesis("", {"decoder": -0.5, "ctc": -10.0})
  copy = tmp_path / "copy.tsv"
  tsv.write_tsv_nbest(lists, str(copy), score_names=("decoder", "ctc"))
  assert tsv.read_tsv_nbest(str(copy)) == lists
  plain = tmp_path / "plain.tsv"
  plain.write_text("k\tref\thello world\nk\t1\t-3.25\thello word\n")
  assert tsv.read_tsv_nbest(str(plain)) == [
    types.NBestList("k", ["hello world"], [types.Hypothesis("hello word", {"score": -3.25})])
  ]


@pytest.mark.parametrize(
  "content, line, message",
  [
    ("k\tref\ta\nk\t1\tnan\ta\n", 2, "expected a number"),
    ("k\tref\ta\nk\t1\t-1\n", 2, "has 4 fields"),
    ("k\tref\ta\nk\t2\t-1\ta\n", 2, "expected rank 1"),
    ("k\tref\ta\nk\t1\t-1\ta\nj\t1\t-1\tb\n", 3, "has hypotheses but no reference"),
    ("k\tref\ta\n", 1, "has references but no hypotheses"),
    ("k\tref\t \nk\t1\t-1\ta\n", 1, "blank reference"),
    ("k\tref\ta\n\nk\t1\t-1\ta\n", 2, "expected '<key><TAB>"),
    ("#key\tscore\ttext\nk\tref\ta\n", 1, "header must be"),
    ("", 1, "no rows"),
  ],
)
def test_tsv_reader_rejects_malformed(tmp_path, content, line, message):
  path = tmp_path / "bad.tsv"
  path.write_text(content)
  with pytest.raises(ValueError) as info:
    tsv.read_tsv_nbest(str(path))
  assert f"{path}:{line}:" in str(info.value) and message in str(info.value), str(info.value)


def test_wmt_reader_rejects_misaligned_files(tmp_path):
  root = tmp_path / shared_data.WMT_DIR
  (root / "references").mkdir(parents=True)
  (root / "system-outputs").mkdir()
  (root / "references" / "newstest2021.de-en.ref.A.en").write_text("one\ntwo\n")
  (root / "system-outputs" / "newstest2021.de-en.hyp.S1.en").write_text("uno\n\n")
  (root / "system-outputs" / "newstest2021.de-en.hyp.S2.en").write_text("eins\n")
  with pytest.raises(ValueError, match=r"hyp\.S2\.en:2: 1 lines, but .* has 2"):
    shared_data.read_wmt_candidates(str(tmp_path))
  (root / "system-outputs" / "newstest2021.de-en.hyp.S2.en").write_text("eins\nzwei\n")
  lists = shared_data.read_wmt_candidates(str(tmp_path))
  assert [h.text for h in lists[1].hyps] == ["", "zwei"]  # an empty output is kept
  assert [h.system for h in lists[1].hyps] == ["S1", "S2"]
  (root / "references" / "newstest2021.de-en.ref.A.en").write_text("one\n\n")
  with pytest.raises(ValueError, match=r"ref\.A\.en:2: blank reference"):
    shared_data.read_wmt_candidates(str(tmp_path))


# ---------------------------------------------------------------------------------------------
# Score cache.


def test_score_cache_survives_reopen_and_truncated_tail(tmp_path):
  path = str(tmp_path / "cache" / "scores.jsonl")
  cache = score_cache.ScoreCache(path)
  assert len(cache) == 0
  cache.put_many("tta-1", {"the cat": {"sum": -3.5, "tokens": [-1.0, -2.5]}, "": {"sum": 0.0}})
  cache.put_many("bilm-1", [("the cat", {"sum": -4.0})])
  cache.put_many("tta-1", {"the cat": {"sum": -3.25}})  # the last write wins
  reopened = score_cache.ScoreCache(path)
  assert len(reopened) == 3
  assert reopened.get_many("tta-1", ["the cat", "", "missing"]) == {
    "the cat": {"sum": -3.25},
    "": {"sum": 0.0},
  }
  assert reopened.get_many("bilm-1", ["the cat"]) == {"the cat": {"sum": -4.0}}
  assert ("bilm-1", "the cat") in reopened
  with open(path, "a", encoding="utf-8") as f:
    f.write('{"model": "tta-1", "text": "cut of')  # a run killed in the middle of a write
  again = score_cache.ScoreCache(path)
  assert len(again) == 3
  again.put_many("tta-1", {"new": {"sum": -1.0}})
  assert score_cache.ScoreCache(path).get_many("tta-1", ["new"]) == {"new": {"sum": -1.0}}


def test_score_cache_rejects_corrupt_middle_line(tmp_path):
  path = tmp_path / "scores.jsonl"
  path.write_text(
    '{"model": "m", "text": "a", "value": 1}\nnot json\n{"model": "m", "text": "b", "value": 2}\n'
  )
  with pytest.raises(ValueError, match=f"{path}:2: not a JSON cache record"):
    score_cache.ScoreCache(str(path))


def test_score_cache_never_loses_a_batch_to_one_text(tmp_path):
  # A text UTF-8 cannot encode (a lone surrogate) once cut the write short: an empty or partial
  # cache for the whole batch. Every line is written, and reads back as the same text.
  path = str(tmp_path / "scores.jsonl")
  cache = score_cache.ScoreCache(path)
  cache.put_many("m", {"before": 1})
  cache.put_many("m", {"a": 2, "bad \ud83d": 3, "😀 ok": 4})
  reopened = score_cache.ScoreCache(path)
  assert reopened.get_many("m", ["before", "a", "bad \ud83d", "😀 ok"]) == {
    "before": 1,
    "a": 2,
    "bad \ud83d": 3,
    "😀 ok": 4,
  }
  with open(path, encoding="utf-8") as f:
    assert "😀 ok" in f.read()  # readable UTF-8 wherever it can be


def test_score_cache_writes_each_model_identity_once_beside_it(tmp_path):
  path = str(tmp_path / "cache" / "lm_scores.jsonl")
  cache = score_cache.ScoreCache(path)
  cache.register("tta-0123", {"kind": "tta", "vocab_sha256": "ab"})
  cache.register("kenlm-4567", {"kind": "kenlm"})
  cache.put_many("tta-0123", {"a": 1})
  with open(cache.models_path, encoding="utf-8") as f:
    assert json.load(f) == {
      "tta-0123": {"kind": "tta", "vocab_sha256": "ab"},
      "kenlm-4567": {"kind": "kenlm"},
    }
  assert cache.models_path == str(tmp_path / "cache" / "lm_scores.models.json")


def test_utterance_errors_count_each_chosen_hypothesis_and_add_up_to_the_wer():
  lists = [
    types.NBestList("u1", ["a b c"], [types.Hypothesis("a x c d"), types.Hypothesis("a b c")]),
    types.NBestList("u2", ["d e"], [types.Hypothesis("d e"), types.Hypothesis("")]),
  ]
  # u1 rank 1: one substitution (b -> x) and one insertion (d); u2 rank 2: two deletions.
  errors, words = metrics.utterance_errors(lists, [0, 1])
  assert errors == [2, 2] and words == [3, 2]
  assert metrics.evaluate(lists, [0, 1], "wer") == pytest.approx(100 * 4 / 5)
  assert metrics.utterance_errors(lists, [1, 0]) == ([0, 0], [3, 2])


def test_sample_lists_is_seeded_ordered_and_without_repeats():
  lists = list(range(100))  # stands for NBestList objects: only their order matters
  sample = types.sample_lists(lists, 30, seed=5)
  assert sample == sorted(set(sample)) and len(sample) == 30
  assert types.sample_lists(lists, 30, seed=5) == sample  # same for every LM and run
  assert types.sample_lists(lists, 30, seed=6) != sample
  assert types.sample_lists(lists, 200, seed=5) == lists


@pytest.mark.parametrize(
  "max_lists, sample, seed", [(6, None, 0), (None, 5, 3), (40, 7, 1), (5000, 3, 2)]
)
def test_a_selection_reads_what_cutting_the_whole_set_gives(espnet_sets, max_lists, sample, seed):
  # run_rescoring's --max_lists / --sample_lists parse only the lists they keep.
  want = espnet_sets["dev_clean"][:max_lists]
  if sample:
    want = types.sample_lists(want, sample, seed)
  select = types.list_selection(max_lists, sample, seed)
  assert espnet.read_espnet_nbest("dev_clean", select=select) == want

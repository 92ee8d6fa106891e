"""N-best files the toolkits wrote themselves, read with formats.read_nbest.

tests/nbest_fixtures.py writes every format from our reading of its rules, so a rule misread
there and in the reader passes test_nbest_formats.py. The samples here come from the toolkits'
own repositories (tests/fixtures/toolkits/SOURCES.md: source, commit, licence, what was cut).
Every expected value is copied by hand from the sample file, never from the reader's output.
"""

import os

from nbest import formats

SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "toolkits")


def _sample(name):
  return os.path.join(SAMPLES, name)


def test_sources_name_every_sample():
  """A sample whose source is not written down could not be checked or re-cut."""
  with open(_sample("SOURCES.md"), encoding="utf-8") as f:
    sources = f.read()
  samples = [
    os.path.relpath(os.path.join(root, name), SAMPLES)
    for root, _, names in os.walk(SAMPLES)
    for name in names
    if name != "SOURCES.md"
  ]
  assert samples
  for sample in samples:
    directory, name = os.path.split(sample)
    assert f"## {directory.capitalize()} (`{directory}/`)" in sources, sample
    assert f"| `{name}` |" in sources, sample


# ---------------------------------------------------------------------------------------------
# Marian (marian-regression-tests): `id ||| text [||| alignment] ||| F0= v ||| total`.


def test_marian_nbest():
  lists = formats.read_nbest("moses", _sample("marian/wmt16_nbest.txt"), nbest=5)
  assert [n.key for n in lists] == ["0", "1"]
  assert [len(n.hyps) for n in lists] == [5, 5]
  assert [n.refs for n in lists] == [[], []]  # the regression test keeps no references
  first = lists[0].hyps[0]
  assert first.text == "Indien und Japan Ministerpräsidenten treffen sich in Tokio"
  # Marian's scores are natural-log model scores, higher is better: taken as written.
  assert first.scores == {"F0": -1.66407, "score": -1.66407}
  last = lists[1].hyps[4]
  assert last.text.startswith("der neue Premierminister Indiens , Nar@@ endra Modi , ")
  assert last.text.endswith(" zu seinem ersten wichtigen Auslands@@ besuch seit der Wahl im Mai .")
  assert last.scores == {"F0": -20.6391, "score": -20.6391}


def test_marian_nbest_with_alignment():
  """--alignment puts its field before the features: neither text nor a score."""
  lists = formats.read_nbest("moses", _sample("marian/align_nbest.txt"), nbest=3)
  assert [n.key for n in lists] == ["0", "1"]
  assert [len(n.hyps) for n in lists] == [3, 3]
  first = lists[0].hyps[0]
  assert first.text == "Indien und Japan Ministerpräsidenten treffen sich in Tokio"
  assert first.scores == {"F0": -1.66408, "score": -1.66408}
  third = lists[1].hyps[2]
  assert third.text == (
    "auf der Tagesordnung stehen die Pläne für eine stärkere Zusammenarbeit im Nuklear@@ sektor ."
  )
  assert third.scores == {"F0": -8.0886, "score": -8.0886}


def test_marian_scorer_adds_a_feature():
  """marian-scorer appends its score as `Score=` and leaves the total: a rescoring feature."""
  lists = formats.read_nbest("moses", _sample("marian/scorer_nbest.txt"), nbest=5)
  assert [n.key for n in lists] == ["0", "1"]
  assert [len(n.hyps) for n in lists] == [5, 5]
  first = lists[0].hyps[0]
  assert first.text == (
    "kein Wort konnte über die Schall@@ dämmung der riesigen Kab@@ ar@@ ett wie Blätter hinaus "
    "kommen ."
  )
  assert first.scores == {"F0": -9.14746, "Score": -13.1597, "score": -9.14746}
  assert lists[1].hyps[0].text == "es kam falsch ."
  assert lists[1].hyps[0].scores == {"F0": -2.34179, "Score": -2.85502, "score": -2.34179}


def test_marian_nbest_with_word_scores():
  """--word-scores puts a field of per-word scores before the features; the features and the
  total are still the last two fields."""
  lists = formats.read_nbest("moses", _sample("marian/word_scores_nbest.txt"), nbest=3)
  assert [n.key for n in lists] == ["0", "1"]
  assert [len(n.hyps) for n in lists] == [3, 3]
  first = lists[0].hyps[0]
  assert first.text == "Indien und Japan Ministerpräsidenten treffen sich in Tokio"
  # What the reader makes of the per-word scores is its choice; F0 and the total are not.
  assert first.scores["F0"] == -1.66407
  assert first.scores["score"] == -1.66407
  first = lists[1].hyps[0]
  assert first.text == (
    "auf der Tagesordnung stehen die Pläne für eine verstärkte nukleare Zusammenarbeit ."
  )
  assert first.scores["F0"] == -6.50603
  assert first.scores["score"] == -6.50603


# ---------------------------------------------------------------------------------------------
# Moses (mosesdecoder's MERT example): `id||| text ||| d: v ... lm: v v tm: v ... w: v ||| total`.


def test_moses_mert_example():
  lists = formats.read_nbest(
    "moses", _sample("moses/NBEST"), refs_path=_sample("moses/REF"), nbest=3
  )
  assert [n.key for n in lists] == ["0", "1"]
  assert [len(n.hyps) for n in lists] == [3, 3]
  assert lists[0].refs == ["this should also be there is looking further ."]
  first = lists[0].hyps[0]
  assert first.text == "this should also be there is looking further ."
  # Moses' features are natural-log model scores and counts, the total their weighted sum,
  # higher is better: taken as written. `w:` (word penalty) has one value.
  assert first.scores["score"] == -14.6262
  assert first.scores["w"] == -9
  third = lists[1].hyps[2]
  assert third.text == (
    "politicians have not least to pursue progress against the odds , from the receiving public "
    "opinion in each country ."
  )
  assert third.scores["score"] == -30.1231
  assert third.scores["w"] == -20


def test_moses_segment_left_out_is_scored_against_the_other_lines(tmp_path):
  # A decoder that printed nothing for segment 0: the test set's REF keeps both lines.
  with open(_sample("moses/NBEST"), encoding="utf-8") as f:
    lines = [l for l in f if l.startswith("1|||")]
  path = tmp_path / "NBEST"
  path.write_text("".join(lines), encoding="utf-8")
  lists = formats.read_nbest("moses", str(path), refs_path=_sample("moses/REF"), nbest=3)
  assert [n.key for n in lists] == ["1"]
  assert lists[0].refs == [
    "people have not least to pursue progress against the odds , from the receiving public "
    "opinion in each country ."
  ]


# ---------------------------------------------------------------------------------------------
# Sockeye (its unit test of JSONOutputHandler): a JSON object a line, scores negative log-probs.


def test_sockeye_json_output_handler_line():
  (nbest,) = formats.read_nbest("sockeye", _sample("sockeye/output_handler_nbest.jsonl"))
  assert nbest.key == "0"  # the line, from 0 (the sample's sentence_id is 0 too)
  assert nbest.refs == []
  assert [h.text for h in nbest.hyps] == ["ein Test", "der Test"]
  # "scores": [0.0, 0.1] are costs, lower is better: negated. The factor scores beside them
  # ("factor1_score": 0.1, ...) are the 1-best's only, so no hypothesis gets one.
  assert [h.scores for h in nbest.hyps] == [{"score": -0.0}, {"score": -0.1}]

"""evaluation/formats.py: the toolkits' N-best formats read, written back, and fuzzed.

(a) A few lists of the shared LibriSpeech data, written in every format by tests/nbest_fixtures.py
    (by hand from each format's rules, not by the library's writers), read back the same.
(b) A sample per toolkit written by hand from its docs or code, read to known values; and its
    malformed variants, refused with one `file:line` message.
(c) Every reader fuzzed (hypothesis): random lines, truncated files, bad UTF-8, swapped columns.
(d) write_rescored, read back: the lists plus the new features; the 1-best writers.
"""

import dataclasses
import json
import math
import os
import re

import conftest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import nbest_fixtures
import pytest

from nbest import formats
from nbest import shared_data
from nbest import types
from nbest.formats import espnet

LN2 = math.log(2)
FORMATS = sorted(nbest_fixtures.WRITERS)


def _hyp(text, **scores):
  return types.Hypothesis(text=text, scores=scores)


def _toy_lists():
  """Three lists of three hypotheses, one of them empty."""
  return nbest_fixtures.toy_lists([["A B C", "A B", ""], ["D E", "D F", "D"], ["G", "H", "G H"]])


def _assert_same(fmt, original, lists):
  """`lists` (read back) are `original` as the format keeps them (nbest_fixtures.EXPECTED)."""
  names, keys_kept, refs_kept = nbest_fixtures.EXPECTED[fmt]
  if fmt == "espnet2":  # read in key order
    original = sorted(original, key=lambda n: n.key)
  assert len(lists) == len(original)
  for i, (want, got) in enumerate(zip(original, lists)):
    assert got.key == (want.key if keys_kept else str(i))
    assert got.refs == (want.refs if refs_kept else [])
    assert [h.text for h in got.hyps] == [h.text for h in want.hyps]
    for w, g in zip(want.hyps, got.hyps):
      expected = {name: w.scores[source] for name, source in names.items()}
      if fmt == "fairseq":  # base 2 in the file: equal up to rounding
        assert g.scores == pytest.approx(expected, rel=1e-12)
      else:
        assert g.scores == expected


# ---------------------------------------------------------------------------------------------
# (a) The shared LibriSpeech lists in every format.


@pytest.fixture(scope="module")
def librispeech_lists():
  conftest.data_dir_or_skip(shared_data.ESPNET_DIR)
  lists = espnet.read_espnet_nbest("dev_other")
  with_empty = next(n for n in lists if any(h.text == "" for h in n.hyps))
  return lists[:3] + [with_empty]


@pytest.mark.parametrize("fmt", FORMATS)
def test_librispeech_lists_read_back_from_every_format(fmt, librispeech_lists, tmp_path):
  path, refs, options = nbest_fixtures.WRITERS[fmt](librispeech_lists, str(tmp_path))
  lists = formats.read_nbest(fmt, path, refs_path=refs, **options)
  _assert_same(fmt, librispeech_lists, lists)


@pytest.mark.parametrize("fmt", ["kaldi", "espnet2", "moses", "sockeye"])
def test_without_references_the_lists_are_blind(fmt, librispeech_lists, tmp_path):
  path, _, options = nbest_fixtures.WRITERS[fmt](librispeech_lists, str(tmp_path))
  lists = formats.read_nbest(fmt, path, **options)
  assert lists and all(n.refs == [] for n in lists)
  _assert_same(fmt, [types.NBestList(n.key, [], n.hyps) for n in librispeech_lists], lists)


# ---------------------------------------------------------------------------------------------
# (b) Samples written by hand from each toolkit's docs and code.


def _write(path, text):
  os.makedirs(os.path.dirname(str(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


def _rejects(fmt, path, where, message, **kwargs):
  with pytest.raises(ValueError) as info:
    formats.read_nbest(fmt, path, **kwargs)
  assert str(info.value).startswith(f"{where}: ") and message in str(info.value), str(info.value)


def _kaldi_sample(tmp_path, words=None, acwt=None, refs=None):
  # egs/wsj/s5/steps/rnnlmrescore.sh: nbest-to-linear writes `words` and the cost archives
  # `lmwt.withlm` (graph cost) and `acwt` (acoustic cost), int2sym.pl -f 2- gives `words_text`;
  # keys <utt>-<n> from lattice-to-nbest.cc.
  words = words or "s1-u1-1 the cat sat\ns1-u1-2 the cat sad\ns1-u1-3 \ns1-u2-1 yes\n"
  acwt = acwt or "s1-u1-1 3120.25\ns1-u1-2 3121.5\ns1-u1-3 3300\ns1-u2-1 512.0\n"
  lm = "s1-u1-1 40.5\ns1-u1-2 44\ns1-u1-3 12.75\ns1-u2-1 7.5e0\n"
  costs = {
    "acoustic": _write(tmp_path / "acwt", acwt),
    "lm": _write(tmp_path / "lmwt.withlm", lm),
  }
  refs = _write(tmp_path / "text", refs or "s1-u1 the cat sat\ns1-u2 yes\n")
  return _write(tmp_path / "words_text", words), costs, refs


def test_kaldi_sample(tmp_path):
  words, costs, refs = _kaldi_sample(tmp_path)
  lists = formats.read_nbest("kaldi", words, refs_path=refs, costs=costs)
  assert lists == [
    types.NBestList(
      "s1-u1",
      ["the cat sat"],
      [
        _hyp("the cat sat", acoustic=-3120.25, lm=-40.5),
        _hyp("the cat sad", acoustic=-3121.5, lm=-44.0),
        _hyp("", acoustic=-3300.0, lm=-12.75),
      ],
    ),
    types.NBestList("s1-u2", ["yes"], [_hyp("yes", acoustic=-512.0, lm=-7.5)]),
  ]


@pytest.mark.parametrize(
  "change, file, line, message",
  [
    ({"acwt": "s1-u1-1 3120.25\ns1-u1-2 3121.5\ns1-u2-1 512.0\n"}, "words_text", 3, "missing from"),
    ({"acwt": "s1-u1-1 1\ns1-u1-2 x\ns1-u1-3 1\ns1-u2-1 1\n"}, "acwt", 2, "expected a number"),
    ({"words": "s1-u1-1 a\ns1-u1-3 b\ns1-u2-1 c\n"}, "words_text", 2, "rank 3 but no rank 2"),
    ({"words": "s1-u1 a\n"}, "words_text", 1, "expected a key '<utt>-<n>'"),
    ({"refs": "s1-u1 the cat sat\n"}, "words_text", 4, "'s1-u2' has no reference"),
    ({"refs": "s1-u1 a\ns1-u2 b\ns1-u3 c\n"}, "text", 3, "'s1-u3', which has no hypotheses"),
    ({"refs": "s1-u1 a\ns1-u2  \n"}, "text", 2, "blank reference"),
    ({"words": "s1-u1-1 a\ns1-u1-2 b\ns1-u1-3 c\ns1-u2-1 d"}, "words_text", 4, "no newline"),
  ],
)
def test_kaldi_rejects(tmp_path, change, file, line, message):
  words, costs, refs = _kaldi_sample(tmp_path, **change)
  if "words" in change:
    acwt = "".join(f"{k.split()[0]} 1\n" for k in change["words"].split("\n") if k)
    costs = {"acoustic": _write(tmp_path / "acwt", acwt)}
  where = f"{tmp_path / file}:{line}"
  _rejects("kaldi", words, where, message, refs_path=refs, costs=costs)


def test_kaldi_word_ids_before_int2sym_are_refused_but_numbers_in_words_are_read(tmp_path):
  # rnnlmrescore.sh's `words` archive before `utils/int2sym.pl -f 2- words.txt`: word ids.
  ids = "s1-u1-1 2519 412 9001\ns1-u1-2 2519 412 9000\ns1-u1-3 \ns1-u2-1 88\n"
  words, costs, refs = _kaldi_sample(tmp_path, words=ids)
  for message in ("word ids", "utils/int2sym.pl", "words.txt"):
    _rejects("kaldi", words, f"{words}:1", message, refs_path=refs, costs=costs)
  # Real transcripts that hold numbers, one of them numerals only, are words.
  numbers = "s1-u1-1 call 911\ns1-u1-2 call 9 1 1\ns1-u1-3 \ns1-u2-1 2020\n"
  words, costs, refs = _kaldi_sample(tmp_path, words=numbers)
  lists = formats.read_nbest("kaldi", words, costs=costs)
  assert [[h.text for h in n.hyps] for n in lists] == [["call 911", "call 9 1 1", ""], ["2020"]]


def test_line_aligned_references_of_inputs_the_toolkit_left_out_are_counted(tmp_path):
  # fairseq-generate --skip-invalid-size-inputs-valid-test prints no record for a too-long
  # input: id 1 of a three-line test set is missing; its reference file keeps all three lines.
  lists = nbest_fixtures.toy_lists([["A B", "A"], ["C D", "C"], ["E F", "E"]])
  path, refs, options = nbest_fixtures.write_fairseq(lists, str(tmp_path / "all"))
  skipped = [l for l in open(path).read().splitlines() if not re.match(r"[STHDP]-1\t", l)]
  path = _write(tmp_path / "skipped.txt", "\n".join(skipped) + "\n")
  got = formats.read_nbest("fairseq", path, refs_path=refs, **options)
  assert [(n.key, n.refs) for n in got] == [("0", ["A B"]), ("2", ["E F"])]
  assert formats.read_set("fairseq", path, [refs], options)[1] == 1
  # The same rule for every format with line-aligned references; a list without its line stays
  # refused.
  for fmt in sorted(f for f, spec in formats.FORMATS.items() if spec.aligned_refs):
    path, refs, options = nbest_fixtures.WRITERS[fmt](lists[:2], str(tmp_path / fmt))
    longer = _write(tmp_path / fmt / "refs3.txt", "A B\nC D\nE F\n")
    got = formats.read_nbest(fmt, path, refs_path=longer, **options)
    assert [n.refs for n in got] == [["A B"], ["C D"]], fmt
    assert formats.read_set(fmt, path, [longer], options)[1] == 1
    shorter = _write(tmp_path / fmt / "refs1.txt", "A B\n")
    with pytest.raises(ValueError, match="'1' has no reference"):
      formats.read_set(fmt, path, [shorter], options)


def test_espnet2_decode_dir_sample(tmp_path):
  # espnet2/bin/asr_inference.py writes <n>best_recog/{token,token_int,score,text} under each
  # job's --output_dir logdir/output.JOB (egs2/TEMPLATE/asr1/asr.sh); score = str(hyp.score).
  decode = tmp_path / "exp" / "decode_asr_lm" / "test_clean"
  job1, job2 = decode / "logdir" / "output.1", decode / "logdir" / "output.2"
  _write(job1 / "1best_recog" / "text", "u2 THE CAT\n")
  _write(job1 / "1best_recog" / "score", "u2 tensor(-3.25)\n")
  _write(job1 / "1best_recog" / "token", "u2 ▁THE ▁CAT\n")
  _write(job1 / "2best_recog" / "text", "u2 THE CAP\n")
  _write(job1 / "2best_recog" / "score", "u2 tensor(-4.5, device='cuda:0')\n")
  _write(job2 / "1best_recog" / "text", "u1 \n")
  _write(job2 / "1best_recog" / "score", "u1 -7.0\n")
  _write(decode / "1best_recog" / "text", "u1 ignored: asr.sh's merged 1-best\n")
  refs = _write(tmp_path / "data" / "test_clean" / "text", "u1 A\nu2 THE CAT\n")
  lists = formats.read_nbest("espnet2", str(decode), refs_path=refs)
  assert lists == [
    types.NBestList("u1", ["A"], [_hyp("", score=-7.0)]),
    types.NBestList("u2", ["THE CAT"], [_hyp("THE CAT", score=-3.25), _hyp("THE CAP", score=-4.5)]),
  ]
  _write(job2 / "1best_recog" / "score", "u3 -7.0\n")
  _rejects("espnet2", str(decode), f"{job2 / '1best_recog' / 'text'}:1", "missing from")
  _write(job2 / "1best_recog" / "score", "u1 -7.0\n")
  _write(job2 / "1best_recog" / "text", "u2 again\n")
  _write(job2 / "1best_recog" / "score", "u2 -7.0\n")
  _rejects("espnet2", str(decode), f"{job2 / '1best_recog' / 'text'}:1", "also decoded in")
  _write(job2 / "1best_recog" / "text", "u1 \n")
  _write(job2 / "1best_recog" / "score", "u1 -7.0\n")
  _write(job2 / "2best_recog" / "text", "u9 X\n")
  _write(job2 / "2best_recog" / "score", "u9 -1\n")
  _rejects("espnet2", str(decode), f"{job2 / '2best_recog' / 'text'}:1", "at rank 2 but not")


def test_nemo_beams_sample(tmp_path):
  # scripts/asr_language_modeling/ngram_lm/eval_beamsearch_ngram.py writes '{text}\t{score}'
  # rows, beam_width per manifest entry in manifest order; the manifest has audio_filepath/text.
  beams = _write(
    tmp_path / "preds_out_width2.tsv", "hello world\t-3.5\nhello word\t-4.25\n\t-9\nyes\t-1e1\n"
  )
  manifest = _write(
    tmp_path / "test_manifest.json",
    '{"audio_filepath": "wavs/a1.wav", "duration": 1.5, "text": "hello world"}\n'
    '{"audio_filepath": "/abs/b2.flac", "duration": 0.5, "text": "yes"}\n',
  )
  expected = [
    types.NBestList(
      "a1", ["hello world"], [_hyp("hello world", score=-3.5), _hyp("hello word", score=-4.25)]
    ),
    types.NBestList("b2", ["yes"], [_hyp("", score=-9.0), _hyp("yes", score=-10.0)]),
  ]
  assert formats.read_nbest("nemo", beams, refs_path=manifest) == expected
  assert formats.read_nbest("nemo", beams, refs_path=manifest, beam_size=2) == expected
  blind = formats.read_nbest("nemo", beams, beam_size=2)
  assert [n.key for n in blind] == ["0", "1"] and all(n.refs == [] for n in blind)
  _rejects("nemo", beams, f"{beams}:4", "4 rows, not a multiple of beam_size 3", beam_size=3)
  _rejects(
    "nemo",
    beams,
    f"{beams}:4",
    "4 rows, not 2 utterances x beam_size 1 = 2",
    beam_size=1,
    refs_path=manifest,
  )
  # No width in the name and no beam_size: the rows are never split by the manifest's count.
  odd = _write(tmp_path / "beams.tsv", "a\t-1\nb\t-2\nc\t-3\nd\t-4\n")
  _rejects("nemo", odd, str(odd), "needs the beam width", refs_path=manifest)


def test_a_byte_order_mark_is_not_part_of_the_first_key(tmp_path):
  words, costs, refs = _kaldi_sample(tmp_path)
  plain = formats.read_nbest("kaldi", words, refs_path=refs, costs=costs)
  for path in (words, refs):  # a BOM on the words file, then on the references too
    with open(path, encoding="utf-8") as f:
      text = f.read()
    with open(path, "w", encoding="utf-8") as f:
      f.write("\ufeff" + text)
    assert formats.read_nbest("kaldi", words, refs_path=refs, costs=costs) == plain


def test_an_unknown_format_option_is_named(tmp_path):
  beams = _write(tmp_path / "preds_out_width1.tsv", "a\t-1\n")
  with pytest.raises(ValueError, match="--format_option beam: not an option of the nemo format; "):
    formats.read_nbest("nemo", beams, beam=2)


def test_nemo_beams_that_are_not_full_are_refused_not_split_wrongly(tmp_path):
  # eval_beamsearch_ngram writes one row per candidate its decoder returned: at width 3, an
  # utterance with 1 candidate makes the file two rows short. 4 rows for 2 utterances must not
  # become beams of 2 (the second utterance would get the first one's third candidate).
  beams = _write(
    tmp_path / "preds_out_width3_alpha0.5_beta1.0.tsv", "a b\t-1\na c\t-2\na d\t-3\nyes\t-1\n"
  )
  manifest = _write(
    tmp_path / "manifest.json",
    '{"audio_filepath": "u1.wav", "text": "a b"}\n{"audio_filepath": "u2.wav", "text": "yes"}\n',
  )
  _rejects(
    "nemo",
    beams,
    f"{beams}:4",
    "4 rows, not 2 utterances x the width in the file name 3 = 6: NeMo writes fewer rows",
    refs_path=manifest,
  )
  # A manifest of other utterances (here only the first) does not fit the beams either.
  one = _write(tmp_path / "one.json", '{"audio_filepath": "u1.wav", "text": "a b"}\n')
  full = _write(tmp_path / "preds_out_width2_alpha0.5_beta1.0.tsv", "a\t-1\nb\t-2\nc\t-1\nd\t-2\n")
  _rejects("nemo", full, f"{full}:4", "4 rows, not 1 utterances x the width", refs_path=one)
  # The width in the name splits a file whose rows do fill the beams.
  lists = formats.read_nbest("nemo", full)
  assert [[h.text for h in n.hyps] for n in lists] == [["a", "b"], ["c", "d"]]

  bad = _write(tmp_path / "bad.tsv", "a\t-1\nb -2\n")
  _rejects("nemo", bad, f"{bad}:2", "expected 2 tab-separated fields", beam_size=2)
  half = _write(
    tmp_path / "half.json",
    '{"audio_filepath": "a.wav", "text": "a"}\n{"audio_filepath": "b.wav"}\n',
  )
  _rejects("nemo", beams, f"{half}:2", "'text' in some entries only", refs_path=half)


def _fairseq_sample(tmp_path, lines=None):
  # fairseq_cli/generate.py: S-/T- per sample, then per hypothesis H- (score, tokenized text),
  # D- (score, detokenized), P- (positional scores); all scores base 2; log lines in between.
  lines = lines or [
    "2024-05-01 10:00:00 | INFO | fairseq.tasks.translation | [de] dictionary: 8000 types",
    "S-1\tdas ist gut .",
    "T-1\tthat is good .",
    "H-1\t-0.5\tthat is good .",
    "D-1\t-0.5\tthat is good.",
    "P-1\t-0.2500 -0.5000 -0.7500",
    "H-1\t-1.25\tthis is good .",
    "D-1\t-1.25\tthis is good.",
    "P-1\t-1.0000 -1.5000 -1.2500",
    "S-0\tja",
    "T-0\tyes",
    "H-0\t-0.125\tyes",
    "D-0\t-0.125\tyes",
    "P-0\t-0.1250",
    "H-0\t-2\tyeah",
    "D-0\t-2\tyeah",
    "P-0\t-2.0000 -2.0000",
    "Generate test with beam=2: BLEU4 = 50.00, 75.0/50.0/50.0/50.0",
  ]
  return _write(tmp_path / "generate-test.txt", "".join(line + "\n" for line in lines))


def test_fairseq_sample(tmp_path):
  path = _fairseq_sample(tmp_path)
  lists = formats.read_nbest("fairseq", path)
  expected = [
    types.NBestList(
      "0",
      ["yes"],
      [
        _hyp("yes", score=-0.125 * LN2, logprob=-0.125 * LN2),
        _hyp("yeah", score=-2 * LN2, logprob=-4 * LN2),
      ],
    ),
    types.NBestList(
      "1",
      ["that is good ."],
      [
        _hyp("that is good.", score=-0.5 * LN2, logprob=-1.5 * LN2),
        _hyp("this is good.", score=-1.25 * LN2, logprob=-3.75 * LN2),
      ],
    ),
  ]
  assert [n.key for n in lists] == ["0", "1"] and [n.refs for n in lists] == [
    ["yes"],
    ["that is good ."],
  ]
  for got, want in zip(lists, expected):
    assert [h.text for h in got.hyps] == [h.text for h in want.hyps]
    assert [h.scores for h in got.hyps] == [pytest.approx(h.scores, rel=1e-12) for h in want.hyps]
  tokenized = formats.read_nbest("fairseq", path, detok=False)
  assert [h.text for h in tokenized[1].hyps] == ["that is good .", "this is good ."]
  refs = _write(tmp_path / "ref.en", "yes\nit is good\n")
  assert formats.read_nbest("fairseq", path, refs_path=refs)[1].refs == ["it is good"]


def _base_warnings(caplog):
  return [r.getMessage() for r in caplog.records if "log-probs (log_base)" in r.getMessage()]


def test_fairseq_log_base_and_the_warning_when_the_file_says_otherwise(tmp_path, caplog):
  # fairseq before its commit 660d69f (2020-01-13) printed natural-log scores, and its summary
  # line without the base-2 note. Sample 0's two hypotheses, e ** -0.5 + e ** -1.5 = 0.83, would
  # total 2 ** -0.5 + 2 ** -1.5 = 1.06 read as base 2: no probabilities.
  old = [
    "| loading model(s) from checkpoint_best.pt",
    "S-0\tja",
    "H-0\t-0.25\tyes",
    "P-0\t-0.2500 -0.2500",
    "H-0\t-0.75\tyeah",
    "P-0\t-0.7500 -0.7500",
    "| Translated 1 sentences (4 tokens) in 0.1s (10.00 sentences/s, 40.00 tokens/s)",
  ]
  path = _fairseq_sample(tmp_path, old)
  caplog.set_level("WARNING")
  natural = formats.read_nbest("fairseq", path, log_base="e")
  assert [h.scores for h in natural[0].hyps] == [
    {"score": -0.25, "logprob": -0.5},
    {"score": -0.75, "logprob": -1.5},
  ]
  assert _base_warnings(caplog) == []
  formats.read_nbest("fairseq", path)  # base 2, the default: one warning for the file
  assert _base_warnings(caplog) == [
    f"{path}: read as base-2 log-probs (log_base), but its log has generate.py's summary "
    "without the base-2 note (fairseq before 2020-01-13)"
  ]
  caplog.clear()
  path = _fairseq_sample(tmp_path, old[1:-1])  # no log lines: the probabilities tell
  formats.read_nbest("fairseq", path, log_base=2)
  assert _base_warnings(caplog) == [
    f"{path}: read as base-2 log-probs (log_base), but the hypotheses of id 0 would together "
    "have probability 1.06 > 1"
  ]
  caplog.clear()
  # Since 660d69f: base 2, and the note in the same stream.
  note = "2024-05-01 10:00:01 | INFO | fairseq_cli.generate | NOTE: hypothesis and token scores "
  path = _fairseq_sample(tmp_path, old[1:-1] + [note + "are output in base 2"])
  assert [h.scores for h in formats.read_nbest("fairseq", path)[0].hyps] == [
    pytest.approx({"score": -0.25 * LN2, "logprob": -0.5 * LN2}, rel=1e-12),
    pytest.approx({"score": -0.75 * LN2, "logprob": -1.5 * LN2}, rel=1e-12),
  ]
  assert len(_base_warnings(caplog)) == 1  # the probabilities, not the note
  caplog.clear()
  formats.read_nbest("fairseq", path, log_base="e")
  assert _base_warnings(caplog) == [
    f"{path}: read as base-e log-probs (log_base), but its log says "
    "'hypothesis and token scores are output in base 2'"
  ]
  with pytest.raises(ValueError, match="log_base must be 2 or e, found 10"):
    formats.read_nbest("fairseq", path, log_base=10)


def test_fairseq_features_are_written_in_the_file_s_base(tmp_path):
  path = _fairseq_sample(tmp_path)
  lists = formats.read_nbest("fairseq", path, log_base="e")
  out = str(tmp_path / "out.txt")
  features = {"tta": [[-1.5, -2.5], [-3.5, -4.5]]}
  formats.write_rescored("fairseq", lists, path, out, features, log_base="e", nbest=2)
  with open(out, encoding="utf-8") as f:
    assert "F-0\ttta\t-1.5\n" in f.read()
  back = formats.read_nbest("fairseq", out, log_base="e")
  assert [h.scores["tta"] for n in back for h in n.hyps] == [-1.5, -2.5, -3.5, -4.5]


@pytest.mark.parametrize(
  "drop, replace, line, message",
  [
    ([15, 16, 17], None, 10, "id 0 has 1 H- lines, expected 2 (a missing H- line?)"),
    ([12, 13, 14, 15, 16, 17], None, 10, "id 0 has 0 H- lines"),
    ([5], None, 4, "an H- line without its D- line"),
    ([], (5, "P-1\t-0.25\nP-1\t-0.5"), 6, "expected one 'P-<id>"),
    ([], (4, "H-1 -0.5 that is good ."), 4, "expected '<type>-<id><TAB>...'"),
    ([], (4, "H-1\tgood\tthat is good ."), 4, "score: expected a number"),
    ([], (2, "D-7\t-1\tstray"), 2, "a D- line before any H- line of id 7"),
    ([11], None, 10, "id 0 has no T- line (others have one)"),
  ],
)
def test_fairseq_rejects(tmp_path, drop, replace, line, message):
  lines = _fairseq_sample(tmp_path)
  lines = open(lines, encoding="utf-8").read().split("\n")[:-1]
  for number in sorted(drop, reverse=True):
    del lines[number - 1]
  if replace is not None:
    lines[replace[0] - 1] = replace[1]
  path = _fairseq_sample(tmp_path, "\n".join(lines).split("\n"))
  _rejects("fairseq", path, f"{path}:{line}", message)


def test_moses_and_marian_samples(tmp_path):
  # The Moses manual ("Generating n-Best Lists") and moses/BaseManager.cpp OutputFeatureScores:
  # id ||| output ||| Name= values ... ||| total, a label once per feature function.
  moses = _write(
    tmp_path / "nbest.moses",
    "0 ||| das haus ||| LM0= -12.5 TM0= -3.25 -4.5 WordPenalty0= -2 ||| -2.75\n"
    "0 ||| ein haus ||| LM0= -14 TM0= -3 -5 WordPenalty0= -2 ||| -3.5 ||| 0-0 1-1\n"
    "1 ||| ja ||| LM0= -3 TM0= -1 -1 WordPenalty0= -1 ||| -1.25\n",
  )
  refs = _write(tmp_path / "ref.de", "das haus\nja\n")
  lists = formats.read_nbest("moses", moses, refs_path=refs, nbest=None)
  assert lists == [
    types.NBestList(
      "0",
      ["das haus"],
      [
        _hyp("das haus", LM0=-12.5, TM0_0=-3.25, TM0_1=-4.5, WordPenalty0=-2.0, score=-2.75),
        _hyp("ein haus", LM0=-14.0, TM0_0=-3.0, TM0_1=-5.0, WordPenalty0=-2.0, score=-3.5),
      ],
    ),
    types.NBestList(
      "1", ["ja"], [_hyp("ja", LM0=-3.0, TM0_0=-1.0, TM0_1=-1.0, WordPenalty0=-1.0, score=-1.25)]
    ),
  ]
  # Marian, src/translator/output_printer.h: "F<j>= " per scorer, "F0=<score>" without a
  # breakdown, the alignment field before the scores.
  marian = _write(
    tmp_path / "nbest.marian",
    "0 ||| a house ||| F0= -1.5 F1= -2.25 ||| -0.75\n"
    "1 ||| yes ||| 0-0 ||| F0=-3.5 F1= -1 ||| -3.5\n",
  )
  lists = formats.read_nbest("moses", marian)
  assert [h.scores for n in lists for h in n.hyps] == [
    {"F0": -1.5, "F1": -2.25, "score": -0.75},
    {"F0": -3.5, "F1": -1.0, "score": -3.5},
  ]
  _rejects("moses", moses, f"{moses}:1", "segment 0 has 2 hypotheses, not 1", nbest=1)


def test_marian_word_scores_are_kept_not_weighed(tmp_path):
  # Marian --word-scores, src/translator/output_printer.h: " ||| WordScores=" and each word's
  # score (5 decimals) in a field of its own, after the alignment and before the features.
  lines = [
    "0 ||| a house ||| WordScores= -0.50000 -0.30000 ||| F0= -1.66 F1= -2.5 ||| -1.66",
    "0 ||| the house ||| 0-0 1-1 ||| WordScores= -0.86000 -1.00000 ||| F0= -1.86 F1= -2 ||| -1.86",
    "1 ||| yes ||| WordScores= -0.25000 ||| F0= -0.25 F1= -1 ||| -0.25",
  ]
  path = _write(tmp_path / "nbest.marian", "".join(line + "\n" for line in lines))
  lists = formats.read_nbest("moses", path)
  assert [h.scores for n in lists for h in n.hyps] == [
    {"F0": -1.66, "F1": -2.5, "score": -1.66},
    {"F0": -1.86, "F1": -2.0, "score": -1.86},
    {"F0": -0.25, "F1": -1.0, "score": -0.25},
  ]
  out = str(tmp_path / "out")
  formats.write_rescored("moses", lists, path, out, {"tta": [[-1.0, -2.0], [-3.0]]})
  with open(out, encoding="utf-8") as f:
    assert f.read().splitlines() == [
      "0 ||| a house ||| WordScores= -0.50000 -0.30000 ||| F0= -1.66 F1= -2.5 tta= -1.0 ||| -1.66",
      "0 ||| the house ||| 0-0 1-1 ||| WordScores= -0.86000 -1.00000 ||| F0= -1.86 F1= -2 "
      "tta= -2.0 ||| -1.86",
      "1 ||| yes ||| WordScores= -0.25000 ||| F0= -0.25 F1= -1 tta= -3.0 ||| -0.25",
    ]
  bad = _write(tmp_path / "bad.marian", "0 ||| a ||| WordScores= -0.5 high ||| F0= -1 ||| -1\n")
  _rejects("moses", bad, f"{bad}:1", "WordScores: expected a number")


@pytest.mark.parametrize(
  "text, line, message",
  [
    ("0 ||| a ||| LM0= -1\n", 1, "expected 'id ||| hypothesis ||| features ||| total'"),
    ("0 ||| a ||| -1 LM0= -1 ||| -1\n", 1, "no feature field: expected labelled values"),
    (
      "0 ||| a ||| LM0= -1 ||| -1\n1 ||| b ||| LM0= -1 ||| -1\n0 ||| c ||| LM0= -1 ||| -1\n",
      3,
      "segment 0 again",
    ),
    ("0 ||| a ||| TM0= -1 -2 ||| -1\n0 ||| b ||| TM0= -1 ||| -1\n", 2, "has 1 values, expected 2"),
    ("0 ||| a ||| LM0= -1 ||| high\n", 1, "total: expected a number"),
    ("0 ||| a ||| score= -1 ||| -1\n", 1, "named like the total"),
  ],
)
def test_moses_rejects(tmp_path, text, line, message):
  path = _write(tmp_path / "nbest.txt", text)
  _rejects("moses", path, f"{path}:{line}", message)


def test_sockeye_samples(tmp_path):
  # sockeye/inference.py TranslatorOutput.json(), printed by output_handler.py's
  # JSONOutputHandler with sort_keys: negative log-probs, a number per translation up to
  # Sockeye 3.0, [score, factor scores] since 3.0.2; the fields of a JSON input pass through.
  old = _write(
    tmp_path / "old.jsonl",
    '{"score": 0.5, "scores": [0.5, 0.75], "sentence_id": 1, "topic": "x", '
    '"translation": "das haus", "translations": ["das haus", " ein haus "]}\n'
    '{"score": 0.0, "scores": [0.0, 2], "sentence_id": 2, "translation": "ja", '
    '"translations": ["ja", ""]}\n',
  )
  refs = _write(tmp_path / "ref.de", "das Haus\nja\n")
  assert formats.read_nbest("sockeye", old, refs_path=refs) == [
    types.NBestList(
      "0", ["das Haus"], [_hyp("das haus", score=-0.5), _hyp("ein haus", score=-0.75)]
    ),
    types.NBestList("1", ["ja"], [_hyp("ja", score=-0.0), _hyp("", score=-2.0)]),
  ]
  factored = _write(
    tmp_path / "new.jsonl",
    '{"factor1": "O", "factor1_score": 1.5, "score": 0.25, "scores": [[0.25, 1.5], [1.0, 0.5]], '
    '"sentence_id": 1, "translation": "\\u00e9t\\u00e9", '
    '"translations": ["\\u00e9t\\u00e9", "ete"], '
    '"translations_factors": [{"factor1": "O"}, {"factor1": "B"}]}\n',
  )
  (nbest,) = formats.read_nbest("sockeye", factored)
  assert nbest == types.NBestList(
    "0",
    [],
    [_hyp("été", score=-0.25, factor1_score=-1.5), _hyp("ete", score=-1.0, factor1_score=-0.5)],
  )
  # A feature is a list beside "translations", in Sockeye's sign; the rest of the line is kept.
  out = str(tmp_path / "out.jsonl")
  formats.write_rescored("sockeye", [nbest], factored, out, {"tta": [[-2.5, 0.0]]})
  with open(out, encoding="utf-8") as f:
    assert json.loads(f.read()) == {
      **json.loads(open(factored, encoding="utf-8").read()),
      "tta_scores": [2.5, -0.0],
    }
  (back,) = formats.read_nbest("sockeye", out)
  assert [h.scores["tta"] for h in back.hyps] == [-2.5, 0.0]
  short_refs = _write(tmp_path / "short.de", "das Haus\n")
  _rejects("sockeye", old, f"{old}:2", "'1' has no reference", refs_path=short_refs)
  # run_rescoring.py --test_refs=a,b: line-aligned reference sets, two references a segment.
  other = _write(tmp_path / "ref2.de", "ein Haus\nja doch\n")
  lists, _ = formats.read_set("sockeye", old, [refs, other], {})
  assert [n.refs for n in lists] == [["das Haus", "ein Haus"], ["ja", "ja doch"]]


_SOCKEYE_LINE = '{"scores": [1.0, 2.0], "translations": ["a", "b"]}\n'


@pytest.mark.parametrize(
  "text, line, message",
  [
    ("a\tb\n", 1, "expected a JSON object"),
    ("[1, 2]\n", 1, "expected a JSON object"),
    # Sockeye's line for an empty input: no "translations", a score of -Infinity.
    ('{"score": -Infinity, "sentence_id": 1, "translation": ""}\n', 1, "no 'translations'"),
    (_SOCKEYE_LINE + '{"scores": [1.0], "translations": ["a", "b"]}\n', 2, "one per translation"),
    ('{"translations": ["a"]}\n', 1, "expected 'scores'"),
    ('{"scores": [[1.0, 2.0], [1.0]], "translations": ["a", "b"]}\n', 1, "lists of one length"),
    ('{"scores": [1.0, "x"], "translations": ["a", "b"]}\n', 1, "score: expected a number"),
    ('{"scores": [1.0, NaN], "translations": ["a", "b"]}\n', 1, "expected a finite number"),
    ('{"scores": [1.0, 2.0], "translations": ["a", 2]}\n', 1, "translation 2 is not a string"),
    ('{"scores": [1.0], "translations": ["\\ud83d"]}\n', 1, "not a string of characters"),
    ('{"scores": [1.0], "translations": ["a"], "lm_scores": [1.0, 2.0]}\n', 1, "'lm_scores'"),
    ('{"scores": [1.0], "translations": ["a"], "a b_scores": [1.0]}\n', 1, "feature name 'a b'"),
    ('{"scores": [1.0], "translations": ["a"], "score_scores": [1.0]}\n', 1, "of its own"),
    (_SOCKEYE_LINE + '{"scores": [[1.0, 2.0]], "translations": ["a"]}\n', 2, "line 1 ['score']"),
    (_SOCKEYE_LINE + "\n", 2, "expected a JSON object"),
    ("", 1, "no n-best lines"),
    (_SOCKEYE_LINE[:-1], 1, "the last line has no newline"),
  ],
)
def test_sockeye_rejects(tmp_path, text, line, message):
  path = _write(tmp_path / "nbest.jsonl", text)
  _rejects("sockeye", path, f"{path}:{line}", message)


def test_json_and_tsv_blind_sets_take_a_references_file(tmp_path):
  data = {
    "u1": {"hyp_1": {"text": "a b", "score": -1.0}},
    "u2": {"hyp_1": {"text": "c", "score": -2}},
  }
  blind_json = _write(tmp_path / "blind.json", json.dumps(data, indent=1) + "\n")
  blind_tsv = _write(tmp_path / "blind.tsv", "u1\t1\t-1.0\ta b\nu2\t1\t-2\tc\n")
  refs = _write(tmp_path / "text", "u2 C\nu1 A B\n")
  for fmt, path in (("json", blind_json), ("tsv", blind_tsv)):
    assert [n.refs for n in formats.read_nbest(fmt, path)] == [[], []]
    lists = formats.read_nbest(fmt, path, refs_path=refs)
    assert [(n.key, n.refs) for n in lists] == [("u1", ["A B"]), ("u2", ["C"])]
  short_refs = _write(tmp_path / "short", "u1 A B\n")
  _rejects("tsv", blind_tsv, f"{blind_tsv}:2", "'u2' has no reference", refs_path=short_refs)
  _rejects("json", blind_json, f"{blind_json}:8", "'u2' has no reference", refs_path=short_refs)
  with pytest.raises(ValueError, match="unknown N-best format 'srt'"):
    formats.read_nbest("srt", blind_tsv)


# ---------------------------------------------------------------------------------------------
# (c) Fuzzing: random lines, truncated files, bad UTF-8, swapped columns.

# Separators and tokens of the formats, so that random lines come near to valid ones, and
# characters that trouble line-based parsers (NUL, CR, a Unicode line separator, non-ASCII).
_TOKENS = [
  " ",
  "\t",
  " ||| ",
  "=",
  "= ",
  "-",
  "spk-utt0",
  "spk-utt0-1",
  "-1",
  "1",
  "0",
  "2",
  "-2.5",
  "1e999",
  "nan",
  "tensor(",
  ")",
  "H-0",
  "D-0",
  "P-0",
  "S-0",
  "T-0",
  "F-0",
  "LM0=",
  "A",
  "é",
  '{"audio_filepath": "a.wav"}',
  "#key\trank\tscore\ttext",
  "ref",
  '"',
  "{",
  "}",
  ":",
  "\\",
]
_CHARS = "ab -=|\t\r\x00\x1c\u2028é€😀0.9"
_LINES = st.lists(
  # Characters drawn one by one: st.text would build (and store in .hypothesis/) a Unicode map.
  st.lists(st.sampled_from(_TOKENS) | st.sampled_from(_CHARS), max_size=6),
  max_size=6,
)
_FUZZ = settings(
  max_examples=50,
  deadline=None,
  derandomize=True,
  database=None,
  suppress_health_check=[HealthCheck.too_slow],
)
# The formats whose files tell a cut one from a whole one; a TSV cut at a line end is a valid
# shorter TSV (no count, no end mark), so there the check is that what comes back is a prefix.
_CUT_DETECTED = [f for f in FORMATS if f != "tsv"]
_SEPARATORS = {
  "moses": "|||",
  "nemo": "\t",
  "fairseq": "\t",
  "tsv": "\t",
  "json": ": ",
  "sockeye": ", ",
}


def _files_of(root):
  return sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names)


@dataclasses.dataclass
class _FuzzSet:
  """The toy lists written in one format, and the bytes of each of its files."""

  fmt: str
  root: str
  path: str
  refs: str
  options: dict
  lists: list
  contents: dict

  @property
  def main_file(self):
    return self.path if os.path.isfile(self.path) else _files_of(self.path)[0]

  def read(self, victim, content, checked=True):
    """Reads the set with `victim` holding `content` (restored after): the lists, or (checked)
    None after a ValueError that is one line naming `file:line` of a file of the set."""
    with open(victim, "wb") as f:
      f.write(content)
    try:
      if not checked:
        return formats.read_nbest(self.fmt, self.path, refs_path=self.refs, **self.options)
      return self._read()
    finally:
      with open(victim, "wb") as f:
        f.write(self.contents[victim])

  def _read(self):
    try:
      lists = formats.read_nbest(self.fmt, self.path, refs_path=self.refs, **self.options)
    except ValueError as e:
      message = str(e)
      match = re.match(r"(.+?):(\d+): ", message)
      assert "\n" not in message and match and match.group(1) in self.contents, message
      return None
    assert lists and len({n.key for n in lists}) == len(lists)
    assert len({bool(n.refs) for n in lists}) == 1  # references for all or none
    names = set(lists[0].hyps[0].scores)
    for nbest in lists:
      assert nbest.hyps and all(isinstance(r, str) and r for r in nbest.refs)
      for hyp in nbest.hyps:
        assert isinstance(hyp.text, str) and set(hyp.scores) == names
        assert all(isinstance(v, float) and math.isfinite(v) for v in hyp.scores.values())
    return lists


@pytest.fixture(scope="module")
def fuzz_sets(tmp_path_factory):
  sets = {}
  for fmt in FORMATS:
    root = str(tmp_path_factory.mktemp(f"fuzz_{fmt}"))
    path, refs, options = nbest_fixtures.WRITERS[fmt](_toy_lists(), root)
    if fmt == "nemo":
      options = {**options, "beam_size": 3}
    lists = formats.read_nbest(fmt, path, refs_path=refs, **options)
    contents = {}
    for name in _files_of(root):
      with open(name, "rb") as f:
        contents[name] = f.read()
    sets[fmt] = _FuzzSet(fmt, root, path, refs, options, lists, contents)
  return sets


@pytest.mark.parametrize("fmt", FORMATS)
@_FUZZ
@given(lines=_LINES)
def test_fuzz_random_lines(fmt, fuzz_sets, lines):
  fuzz = fuzz_sets[fmt]
  fuzz.read(fuzz.main_file, "".join("".join(line) + "\n" for line in lines).encode("utf-8"))


@pytest.mark.parametrize("fmt", FORMATS)
@_FUZZ
@given(data=st.data())
def test_fuzz_truncated_file(fmt, fuzz_sets, data):
  fuzz = fuzz_sets[fmt]
  victim = data.draw(st.sampled_from(sorted(fuzz.contents)))
  content = fuzz.contents[victim]
  lists = fuzz.read(victim, content[: data.draw(st.integers(0, max(len(content) - 1, 0)))])
  if lists is None or lists == fuzz.lists:
    return
  if formats.FORMATS[fmt].aligned_refs:
    # Line-aligned references: ids the toolkit left out are counted, not refused
    # (text_files.add_aligned_refs), so a file cut between two whole lists reads as the lists
    # before the cut, each whole.
    whole = {nbest.key: nbest for nbest in fuzz.lists}
    assert all(got == whole[got.key] for got in lists), f"a cut {victim} read as other lists"
    return
  assert fmt not in _CUT_DETECTED, f"a cut {victim} read as other lists"
  for got, want in zip(lists, fuzz.lists):
    assert got.key == want.key and got.hyps == want.hyps[: len(got.hyps)]


@pytest.mark.parametrize("fmt", FORMATS)
@_FUZZ
@given(data=st.data())
def test_fuzz_bad_utf8(fmt, fuzz_sets, data):
  fuzz = fuzz_sets[fmt]
  victim = fuzz.main_file
  content = fuzz.contents[victim]
  at = data.draw(st.integers(0, len(content)))
  bad = data.draw(st.sampled_from([b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xe2\x82"]))
  with pytest.raises(ValueError) as info:
    fuzz.read(victim, content[:at] + bad + content[at:], checked=False)
  line = content[:at].count(b"\n") + 1
  assert str(info.value).startswith(f"{victim}:{line}: not UTF-8"), str(info.value)


@pytest.mark.parametrize("fmt", FORMATS)
@_FUZZ
@given(data=st.data())
def test_fuzz_swapped_columns(fmt, fuzz_sets, data):
  fuzz = fuzz_sets[fmt]
  victim = data.draw(st.sampled_from(sorted(fuzz.contents)))
  lines = fuzz.contents[victim].decode("utf-8").split("\n")[:-1]
  index = data.draw(st.integers(0, len(lines) - 1))
  separator = _SEPARATORS.get(fmt, " ")
  fields = lines[index].split(separator)
  if len(fields) < 2:
    return
  i, j = data.draw(st.lists(st.integers(0, len(fields) - 1), min_size=2, max_size=2, unique=True))
  fields[i], fields[j] = fields[j], fields[i]
  lines[index] = separator.join(fields)
  lists = fuzz.read(victim, "".join(line + "\n" for line in lines).encode("utf-8"))
  if lists is not None:  # a swap may make another valid file, never a shorter one
    assert [len(n.hyps) for n in lists] == [len(n.hyps) for n in fuzz.lists]


# ---------------------------------------------------------------------------------------------
# (d) Writers.


@pytest.mark.parametrize("fmt", FORMATS)
def test_write_rescored_reads_back_with_the_features(fmt, tmp_path):
  path, refs, options = nbest_fixtures.WRITERS[fmt](_toy_lists(), str(tmp_path / "in"))
  lists = formats.read_nbest(fmt, path, refs_path=refs, **options)
  before = [types.NBestList(n.key, list(n.refs), list(n.hyps)) for n in lists]
  features = {
    "tta": [[-3.5 * i - j - 0.1 for j in range(len(n.hyps))] for i, n in enumerate(lists)],
    "kenlm.5gram": [[-7.25] * len(n.hyps) for n in lists],
  }
  out = str(
    tmp_path / "out" / ("rescored" if fmt in ("kaldi", "espnet2", "espnet") else "rescored.txt")
  )
  formats.write_rescored(fmt, lists, path, out, features)
  assert lists == before  # the caller's lists are left as they were
  if fmt == "kaldi":
    options = {}  # the output is a directory of `text` and `<name>.cost` archives
  if fmt == "nemo":  # the output is named by the test, without NeMo's width
    options = {**options, "columns": ("score", "tta", "kenlm.5gram"), "beam_size": 3}
  back = formats.read_nbest(fmt, out, refs_path=refs, **options)
  assert [(n.key, n.refs, [h.text for h in n.hyps]) for n in back] == [
    (n.key, n.refs, [h.text for h in n.hyps]) for n in lists
  ]
  for i, (got, want) in enumerate(zip(back, lists)):
    for j, (g, w) in enumerate(zip(got.hyps, want.hyps)):
      expected = {**w.scores, "tta": features["tta"][i][j], "kenlm.5gram": -7.25}
      assert g.scores == pytest.approx(expected, rel=1e-12)
      if fmt != "fairseq":  # the others write exact decimal forms of the floats
        assert g.scores == expected


def test_write_rescored_kaldi_costs_and_moses_labels(tmp_path):
  path, refs, options = nbest_fixtures.write_moses(_toy_lists()[:1], str(tmp_path))
  lists = formats.read_nbest("moses", path)
  formats.write_rescored(
    "moses", lists, path, str(tmp_path / "out.txt"), {"tta": [[-1.5, 0.0, 2.0]]}
  )
  first = open(tmp_path / "out.txt", encoding="utf-8").readline()
  assert first == "0 ||| A B C ||| decoder= -0.0 ctc= -0.0 lm= -10.0 tta= -1.5 ||| -0.0\n"
  words, costs, _ = _kaldi_sample(tmp_path / "kaldi")
  lists = formats.read_nbest("kaldi", words, costs=costs)
  formats.write_rescored(
    "kaldi", lists, words, str(tmp_path / "k"), {"tta": [[-1.5, 0.0, 2.0], [-3.0]]}
  )
  with open(tmp_path / "k" / "tta.cost", encoding="utf-8") as f:  # cost = -value
    assert f.read() == "s1-u1-1 1.5\ns1-u1-2 -0.0\ns1-u1-3 -2.0\ns1-u2-1 3.0\n"
  # An output directory is replaced as a whole, so never one that holds other files.
  with pytest.raises(ValueError, match="holds acwt, which is not an output of this writer"):
    formats.write_rescored("kaldi", lists, words, str(tmp_path / "kaldi"), {})
  assert sorted(os.listdir(tmp_path / "kaldi")) == ["acwt", "lmwt.withlm", "text", "words_text"]


@pytest.mark.parametrize(
  "features, message",
  [
    ({"score": [[0.0] * 3] * 3}, "'score' is already a score"),
    ({"a b": [[0.0] * 3] * 3}, "feature name 'a b'"),
    ({"text": [[0.0] * 3] * 3}, "'text' names another field"),
    ({"tta": [[0.0] * 3] * 2}, "not aligned"),
    ({"tta": [[0.0] * 3, [0.0] * 2, [0.0] * 3]}, "not aligned"),
    ({"tta": [[0.0, math.nan, 0.0]] + [[0.0] * 3] * 2}, "is not finite"),
  ],
)
def test_write_rescored_refuses_bad_features(tmp_path, features, message):
  path, refs, options = nbest_fixtures.write_nemo(_toy_lists(), str(tmp_path))
  lists = formats.read_nbest("nemo", path, refs_path=refs)
  with pytest.raises(ValueError, match=re.escape(message)):
    formats.write_rescored("nemo", lists, path, str(tmp_path / "out.tsv"), features)
  assert not os.path.exists(tmp_path / "out.tsv")


@pytest.mark.parametrize("fmt", ["nemo", "fairseq", "moses", "sockeye"])
def test_write_rescored_refuses_lists_of_another_file(fmt, tmp_path):
  path, refs, options = nbest_fixtures.WRITERS[fmt](_toy_lists(), str(tmp_path))
  lists = formats.read_nbest(fmt, path, refs_path=refs, **options)
  lists[1].hyps[2] = types.Hypothesis("not in the file", lists[1].hyps[2].scores)
  with pytest.raises(ValueError, match="not read from this file|not the hypothesis"):
    formats.write_rescored(fmt, lists, path, str(tmp_path / "out"), {"tta": [[0.0] * 3] * 3})


@pytest.mark.parametrize("fmt", ["nemo", "fairseq", "moses", "sockeye"])
def test_write_rescored_of_some_lists_writes_their_lines_only(fmt, tmp_path):
  # run_rescoring.py --max_lists / --sample_lists: the lists kept, by their index in the file.
  path, refs, options = nbest_fixtures.WRITERS[fmt](_toy_lists(), str(tmp_path))
  lists = formats.read_nbest(fmt, path, refs_path=refs, **options)
  out = str(tmp_path / "out")
  features = {"tta": [[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]]}
  formats.write_rescored(fmt, [lists[0], lists[2]], path, out, features, kept=[0, 2])
  back = formats.read_nbest(
    fmt, out, **({"beam_size": 3, "columns": ("score", "tta")} if fmt == "nemo" else {})
  )
  assert [[h.text for h in n.hyps] for n in back] == [
    [h.text for h in n.hyps] for n in (lists[0], lists[2])
  ]
  assert [h.scores["tta"] for n in back for h in n.hyps] == pytest.approx([-1, -2, -3, -4, -5, -6])
  with open(out, encoding="utf-8") as f:
    text = f.read()
  if fmt == "fairseq":  # the log lines stay, the other sample's records go
    assert "| INFO |" in text and "BLEU4" in text and "\nS-1\t" not in text
  for kept, message in (([0, 3], "has 3 lists, no list 4"), ([2, 0], "indices must increase")):
    with pytest.raises(ValueError, match=message):
      formats.write_rescored(fmt, [lists[0], lists[2]], path, out, features, kept=kept)


def test_one_best_as_kaldi_text_and_trn(tmp_path):
  lists = _toy_lists()
  formats.write_kaldi_text(lists, [1, 2, 0], str(tmp_path / "text"))
  formats.write_trn(lists, [1, 2, 0], str(tmp_path / "hyp.trn"))
  assert (tmp_path / "text").read_text() == "spk-utt0 A B\nspk-utt1 D\nspk-utt2 G\n"
  assert (tmp_path / "hyp.trn").read_text() == "A B (spk-utt0)\nD (spk-utt1)\nG (spk-utt2)\n"
  formats.write_kaldi_text(lists, [2, 0, 0], str(tmp_path / "text"))
  assert (tmp_path / "text").read_text().startswith("spk-utt0\nspk-utt1 D E\n")
  for choice in ([0, 0], [0, 3, 0], [0, True, 0], [0, 1.0, 0]):
    with pytest.raises(ValueError, match="choice"):
      formats.write_trn(lists, choice, str(tmp_path / "bad.trn"))
  assert not os.path.exists(tmp_path / "bad.trn")

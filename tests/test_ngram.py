"""Tests for lm/ngram_lm.py and ngram.py: natural-log KenLM scores against a hand-written ARPA, and
lmplz training."""

import math
import os
import sys

import commands
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lm import ngram_lm  # pylint: disable=g-import-not-at-top,wrong-import-position
from util import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from util import io_utils  # pylint: disable=g-import-not-at-top,wrong-import-position

kenlm = pytest.importorskip("kenlm")

# A bigram model with hand-picked log10 probabilities and backoffs.
# Unigram lines: log10 p, word, log10 backoff. Bigram lines: log10 p, context word, word.
_ARPA = """\\data\\
ngram 1=5
ngram 2=4

\\1-grams:
-1.0\t<unk>
-99\t<s>\t-0.5
-0.6\t</s>
-0.4\ta\t-0.3
-0.7\tb\t-0.2

\\2-grams:
-0.2\t<s> a
-0.3\ta b
-0.25\tb </s>
-0.5\ta </s>

\\end\\
"""

_LOG10 = {  # the same numbers, for computing expected scores by hand
  "p": {"<unk>": -1.0, "</s>": -0.6, "a": -0.4, "b": -0.7},
  "bo": {"<s>": -0.5, "a": -0.3, "b": -0.2, "<unk>": 0.0, "</s>": 0.0},
  "p2": {("<s>", "a"): -0.2, ("a", "b"): -0.3, ("b", "</s>"): -0.25, ("a", "</s>"): -0.5},
}


def _hand_log10(prev, word):
  """log10 p(word | prev) by the ARPA backoff rule: bigram if listed, else bo(prev) + p(word)."""
  if prev is not None and (prev, word) in _LOG10["p2"]:
    return _LOG10["p2"][(prev, word)]
  backoff = _LOG10["bo"].get(prev, 0.0) if prev is not None else 0.0
  return backoff + _LOG10["p"][word]


@pytest.fixture(name="arpa_path")
def fixture_arpa_path(tmp_path):
  path = tmp_path / "toy.arpa"
  path.write_text(_ARPA)
  return str(path)


def test_ln10_converts_log10_to_ln():
  assert ngram_lm.LN10 == pytest.approx(math.log(10.0), abs=1e-15)
  for v in (0.0, -1.0, -0.25, -3.7):
    # ln p = log10 p * ln 10, i.e. 10**v == e**(converted)
    assert v * ngram_lm.LN10 == pytest.approx(math.log(10.0**v), abs=1e-12)
    assert math.exp(v * ngram_lm.LN10) == pytest.approx(10.0**v, rel=1e-12)


@pytest.mark.parametrize(
  "text,expected_words",
  [
    # <s> a b </s>: three listed bigrams.
    ("a b", [("<s>", "a"), ("a", "b"), ("b", "</s>")]),
    # <s> b a </s>: p(b|<s>) and p(a|b) back off; p(</s>|a) is listed.
    ("b a", [("<s>", "b"), ("b", "a"), ("a", "</s>")]),
    # <s> a a </s>: p(a|a) backs off through bo(a).
    ("a a", [("<s>", "a"), ("a", "a"), ("a", "</s>")]),
  ],
)
def test_scores_match_hand_computed_arpa(arpa_path, text, expected_words):
  scorer = ngram_lm.NgramScorer(arpa_path)
  assert scorer.order == 2
  (score,) = scorer.score_sentences([text])
  logprob, word_logprobs, n_words = score  # unpacks as a 3-tuple
  expected = [_hand_log10(prev, w) * math.log(10.0) for prev, w in expected_words]
  assert n_words == len(expected) == len(text.split()) + 1  # </s> counts as a word
  assert word_logprobs == pytest.approx(expected, abs=1e-5)
  assert logprob == pytest.approx(sum(expected), abs=1e-5)
  assert score.n_oov == 0
  # Same number as kenlm's own log10 sentence score, converted.
  assert logprob == pytest.approx(kenlm.Model(arpa_path).score(text) * math.log(10.0), abs=1e-5)


def test_hand_values_spelled_out(arpa_path):
  """The backoff case written out in numbers, so the expectation is not only code."""
  scorer = ngram_lm.NgramScorer(arpa_path)
  ((logprob, word_logprobs, _),) = scorer.score_sentences(["b a"])
  ln10 = math.log(10.0)
  # p(b|<s>) = bo(<s>) + p(b) = -0.5 - 0.7; p(a|b) = bo(b) + p(a) = -0.2 - 0.4; p(</s>|a) = -0.5
  assert word_logprobs == pytest.approx([-1.2 * ln10, -0.6 * ln10, -0.5 * ln10], abs=1e-5)
  assert logprob == pytest.approx(-2.3 * ln10, abs=1e-5)


def test_bos_eos_flags(arpa_path):
  scorer = ngram_lm.NgramScorer(arpa_path)
  ln10 = math.log(10.0)
  # No <s> context: p(a) unigram, then p(b|a); no </s>.
  ((logprob, word_logprobs, n_words),) = scorer.score_sentences(["a b"], bos=False, eos=False)
  assert n_words == 2
  assert word_logprobs == pytest.approx([-0.4 * ln10, -0.3 * ln10], abs=1e-5)
  assert logprob == pytest.approx(-0.7 * ln10, abs=1e-5)
  # bos only: p(a|<s>) p(b|a).
  ((logprob, _, n_words),) = scorer.score_sentences(["a b"], bos=True, eos=False)
  assert n_words == 2
  assert logprob == pytest.approx(-0.5 * ln10, abs=1e-5)
  # Empty sentence with eos: just p(</s>|<s>) = bo(<s>) + p(</s>).
  ((logprob, _, n_words),) = scorer.score_sentences([""])
  assert n_words == 1
  assert logprob == pytest.approx(-1.1 * ln10, abs=1e-5)
  with pytest.raises(ValueError, match="<s>"):
    scorer.score_sentences(["<s> a b"])


def test_oov_uses_unk(arpa_path):
  scorer = ngram_lm.NgramScorer(arpa_path)
  ln10 = math.log(10.0)
  (s,) = scorer.score_sentences(["a zebra"])
  # p(<unk>|a) = bo(a) + p(<unk>) = -0.3 - 1.0; after an OOV KenLM's context is empty: p(</s>).
  assert s.word_logprobs == pytest.approx([-0.2 * ln10, -1.3 * ln10, -0.6 * ln10], abs=1e-5)
  assert s.n_oov == 1
  assert s.oov == [False, True, False]
  assert scorer.total_oov == 1
  assert "a" in scorer and "zebra" not in scorer


def test_missing_model_names_file(tmp_path):
  missing = str(tmp_path / "no_such_model.bin")
  with pytest.raises(FileNotFoundError, match="no_such_model.bin"):
    ngram_lm.NgramScorer(missing)


def test_malformed_arpa_names_file(tmp_path):
  bad = tmp_path / "broken.arpa"
  bad.write_text("this is not an ARPA file\n")
  with pytest.raises(ValueError, match="broken.arpa"):
    ngram_lm.NgramScorer(str(bad))
  truncated = tmp_path / "truncated.arpa"
  truncated.write_text(_ARPA[: _ARPA.index("\\2-grams:")])  # promises bigrams, has none
  with pytest.raises(ValueError, match="truncated.arpa"):
    ngram_lm.NgramScorer(str(truncated))


def test_find_kenlm_bin_error_mentions_build_script(monkeypatch, tmp_path):
  monkeypatch.setattr(ngram_lm, "KENLM_BIN_DIR", str(tmp_path))
  monkeypatch.setenv("PATH", str(tmp_path))
  with pytest.raises(FileNotFoundError, match="build_kenlm.sh"):
    ngram_lm.find_kenlm_bin("lmplz")


def _have_lmplz():
  try:
    ngram_lm.find_kenlm_bin("lmplz")
    ngram_lm.find_kenlm_bin("build_binary")
    return True
  except FileNotFoundError:
    return False


_CORPUS = [
  "the cat sat on the mat",
  "the dog sat on the log",
  "a cat and a dog sat together",
  "the cat ate the fish",
  "the dog ate the bone",
  "on the mat the cat sat",
  "the bird sang on the tree",
  "a dog barked at the cat",
]


@pytest.mark.skipif(
  not _have_lmplz(), reason="KenLM's lmplz/build_binary not built: run bash scripts/build_kenlm.sh"
)
@pytest.mark.parametrize("binary", [True, False])
def test_train_ngram_tiny_corpus(tmp_path, binary):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(_CORPUS * 3) + "\n")
  out = str(tmp_path / ("lm.bin" if binary else "lm.arpa"))
  assert (
    ngram_lm.train_ngram(
      str(corpus), out, order=3, memory="64M", discount_fallback=True, binary=binary
    )
    == out
  )
  assert os.path.isfile(out)
  # Atomic write: nothing temporary left beside the model.
  assert sorted(os.listdir(tmp_path)) == sorted(["corpus.txt", os.path.basename(out)])
  with open(out, "rb") as f:
    head = f.read(16)
  assert head.startswith(b"mmap lm") if binary else head.lstrip().startswith(b"\\data\\")

  scorer = ngram_lm.NgramScorer(out)
  assert scorer.order == 3
  sentence = "the cat sat on the mat"
  shuffled = "mat on the sat cat the"  # same words, different order
  ours, theirs = scorer.score_sentences([sentence, shuffled])
  for s in (ours, theirs):
    assert all(math.isfinite(v) and v < 0 for v in s.word_logprobs)
    assert s.n_words == 7 and s.n_oov == 0
  assert ours.logprob > theirs.logprob


@pytest.mark.skipif(
  not _have_lmplz(), reason="KenLM's lmplz/build_binary not built: run bash scripts/build_kenlm.sh"
)
def test_train_ngram_failure_reports_lmplz_output(tmp_path):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(_CORPUS) + "\n")
  out = tmp_path / "lm.bin"
  # Without --discount_fallback lmplz can't estimate discounts from 8 sentences and fails.
  with pytest.raises(RuntimeError, match="lmplz failed") as info:
    ngram_lm.train_ngram(str(corpus), str(out), order=3, memory="64M", discount_fallback=False)
  assert "discount" in str(info.value)
  assert not out.exists()
  assert os.listdir(tmp_path) == ["corpus.txt"]


def test_train_ngram_missing_text(tmp_path):
  with pytest.raises(ValueError, match="nope.txt: no such file"):
    ngram_lm.train_ngram(str(tmp_path / "nope.txt"), str(tmp_path / "lm.bin"))


def test_a_training_text_that_is_no_file_or_holds_no_word_is_refused_before_lmplz(tmp_path):
  # Issue 56's probes: a pipe or a dir was "training text not found" (F9); an empty text was
  # build_binary's RuntimeError traceback, blank lines a model of <unk> <s> </s> alone (F13).
  (tmp_path / "empty.txt").write_text("")
  (tmp_path / "blank.txt").write_text("\n \n\t\n")
  os.mkfifo(tmp_path / "fifo")
  for path, why in (
    (tmp_path, "is a directory"),
    (tmp_path / "fifo", "not a regular file"),
    (tmp_path / "empty.txt", "holds no word"),
    (tmp_path / "blank.txt", "holds no word"),
  ):
    with pytest.raises(ValueError, match=f"{path}: {why}"):
      ngram_lm.train_ngram(str(path), str(tmp_path / "lm.arpa"), order=2, binary=False)
  assert sorted(os.listdir(tmp_path)) == ["blank.txt", "empty.txt", "fifo"]


def test_a_compressed_training_text_is_refused_before_lmplz(tmp_path):
  # Issue 56's probes, third round (k14): lmplz reads a .gz itself, and one damaged mid-stream
  # made it abort: a RuntimeError traceback.
  import gzip  # pylint: disable=g-import-not-at-top

  packed = gzip.compress(b"the cat sat\n" * 2000)
  path = tmp_path / "text.gz"
  path.write_bytes(packed[: len(packed) // 2])
  with pytest.raises(cli.InputError, match=f"{path}: gzip-compressed"):
    ngram_lm.train_ngram(str(path), str(tmp_path / "lm.arpa"), order=2, binary=False)
  assert os.listdir(tmp_path) == ["text.gz"]


def test_a_training_text_with_a_byte_order_mark_is_refused_before_lmplz(tmp_path):
  # Issue 56's probes, fourth round (H10): lmplz read the mark as part of the first word.
  path = tmp_path / "text.txt"
  path.write_bytes(b"\xef\xbb\xbfthe cat sat\n" * 20)
  with pytest.raises(ValueError, match=f"{path}: starts with a UTF-8 byte-order mark"):
    ngram_lm.train_ngram(str(path), str(tmp_path / "lm.arpa"), order=2, binary=False)
  assert os.listdir(tmp_path) == ["text.txt"]


@pytest.mark.skipif(
  not _have_lmplz(), reason="KenLM's lmplz/build_binary not built: run bash scripts/build_kenlm.sh"
)
def test_normalization_travels_with_the_model(tmp_path):
  from lm import inference  # pylint: disable=g-import-not-at-top

  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(_CORPUS * 3).upper() + "\n")
  out = str(tmp_path / "lm.bin")
  ngram_lm.train_ngram(
    str(corpus), out, order=3, memory="64M", discount_fallback=True, normalization="librispeech"
  )
  assert ngram_lm.read_model_info(out)["normalization"] == "librispeech"
  lm = inference.NgramLM(out)
  assert lm.normalization == "librispeech"
  (raw,) = lm.score(["The cat sat on the mat."])
  (want,) = ngram_lm.NgramScorer(out).score_sentences(["THE CAT SAT ON THE MAT"])
  assert raw.tokens == "THE CAT SAT ON THE MAT".split() + ["</s>"]
  assert list(raw.token_logprobs) == pytest.approx(want.word_logprobs)
  # Without an info file nothing is normalized.
  os.remove(ngram_lm.model_info_path(out))
  assert inference.NgramLM(out).normalization == "none"


@pytest.fixture(name="librispeech_arpa")
def fixture_librispeech_arpa(arpa_path):
  """The toy ARPA, described as trained on LibriSpeech-normalized text."""
  with open(ngram_lm.model_info_path(arpa_path), "w", encoding="utf-8") as f:
    f.write('{"normalization": "librispeech"}')
  return arpa_path


def test_load_lm_honours_kenlm_arguments(librispeech_arpa):
  from lm import inference  # pylint: disable=g-import-not-at-top

  spec = "kenlm:" + librispeech_arpa
  assert inference.load_lm(spec).normalization == "librispeech"
  lm = inference.load_lm(spec, normalization="none", score_eos=False, token_budget=64)
  assert lm.normalization == "none"
  (scored,) = lm.score(["a b"])
  assert scored.tokens == ["a", "b"]  # not upper-cased into two <unk>, no </s>
  assert inference.describe(lm)["normalization"] == "none"
  assert inference.describe(lm) != inference.describe(inference.load_lm(spec))
  with pytest.raises(TypeError, match="max_seq_length"):
    inference.load_lm(spec, max_seq_length=16)


def test_kenlm_without_bos_scores_a_fragment(arpa_path):
  from lm import inference  # pylint: disable=g-import-not-at-top

  lm = inference.NgramLM(arpa_path, score_eos=False, bos=False)
  (scored,) = lm.score(["a zebra"])
  # p(a) unigram, then p(<unk>|a) = bo(a) + p(<unk>); as test_bos_eos_flags and test_oov_uses_unk.
  assert scored.total == pytest.approx((-0.4 - 1.3) * math.log(10.0), abs=1e-5)
  assert scored.unknown_words == 1
  assert inference.describe(lm)["bos"] is False
  assert "bos" not in inference.describe(inference.NgramLM(arpa_path))


def test_kenlm_scores_words_whatever_mode_is_asked(arpa_path):
  from lm import inference  # pylint: disable=g-import-not-at-top

  lm = inference.NgramLM(arpa_path)
  assert [inference.scoring_of(lm, m) for m in (None, "piece", "word_l2r")] == ["word"] * 3
  assert lm.score(["a b"], "piece")[0].total == lm.score(["a b"], "word_l2r")[0].total
  with pytest.raises(ValueError, match="scoring 'word' is not one of"):
    lm.score(["a b"], scoring="word")  # what it does, but not a mode one can ask for


def test_kenlm_scores_every_sentence_and_flags_what_normalization_could_not_spell(
  librispeech_arpa,
):
  from lm import inference  # pylint: disable=g-import-not-at-top

  lm = inference.NgramLM(librispeech_arpa)
  odd = ["x²³⁴⁵⁶⁷⁸", "①②③", "²²²²²²²", "¹²³⁴⁵⁶⁷ people", "12,000,000"]
  scored = lm.score(odd + ["😀😀😀", ""])
  assert len(scored) == len(odd) + 2
  emoji, empty = scored[-2:]
  # Three unknown words, each paying p(<unk>): never the score of an empty sentence.
  assert emoji.tokens == ["😀", "😀", "😀", "</s>"]
  assert emoji.unknown_chars == 3 and empty.unknown_chars == 0
  assert emoji.total < empty.total
  assert [s.normalization_fallback for s in scored] == [False] * 4 + [True, False, False]
  assert lm.stats["normalization_fallbacks"] == 1
  assert lm.stats["unknown_chars"] == 3


def _score_file_cli(*args):
  return commands.run("ngram.py", *args, env={"TTA_PROGRESS_SECONDS": "0"})  # every progress line


@pytest.mark.slow(seconds=3)
def test_score_file_logs_progress_and_a_missing_file_is_one_line(tmp_path, arpa_path):
  texts = tmp_path / "texts.txt"
  texts.write_text("a b\nb\na\n")
  result = _score_file_cli(f"--model={arpa_path}", f"--score_file={texts}")
  assert result.returncode == 0, result.stderr
  assert len(result.stdout.splitlines()) == 3
  assert "toy.arpa: 3/3 sentences (100%), " in result.stderr and "ETA" in result.stderr
  missing = _score_file_cli(f"--model={arpa_path}", f"--score_file={tmp_path}/absent")
  assert missing.returncode == 2
  assert missing.stderr.strip().splitlines()[-1].startswith("ngram.py: error: ")
  assert "absent" in missing.stderr and "Traceback" not in missing.stderr
  # Issue 56's probes (F14): bytes that are not UTF-8 were Python's decode error, naming neither
  # the file nor the line.
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"a b\nb \xff a\n")
  refused = _score_file_cli(f"--model={arpa_path}", f"--score_file={bad}")
  assert refused.returncode == 2
  assert (
    refused.stderr.strip().splitlines()[-1].startswith(f"ngram.py: error: {bad}:2: not valid UTF-8")
  )


@pytest.mark.skipif(
  not _have_lmplz(), reason="KenLM's lmplz/build_binary not built: run bash scripts/build_kenlm.sh"
)
@pytest.mark.slow(seconds=3)
def test_ngram_py_and_score_py_give_the_same_score(tmp_path):
  """Both commands score through inference.NgramLM: the normalization recorded with the model
  first, so "25" is read TWENTY FIVE and the words are the model's, not <unk>."""
  import json  # pylint: disable=g-import-not-at-top

  corpus = tmp_path / "corpus.txt"
  said = "HE PAID TWENTY FIVE DOLLARS DIDN'T HE"
  corpus.write_text("\n".join(_CORPUS * 3).upper() + f"\n{said}\n")
  out = str(tmp_path / "lm.bin")
  ngram_lm.train_ngram(
    str(corpus), out, order=3, memory="64M", discount_fallback=True, normalization="librispeech"
  )
  sentences = tmp_path / "sentences.txt"
  sentences.write_text("He paid 25 dollars, didn't he?\nThe cat sat on the mat.\n")
  by_hand = ngram_lm.NgramScorer(out).score_sentences([said, "THE CAT SAT ON THE MAT"])

  ngram = _score_file_cli(f"--model={out}", f"--score_file={sentences}")
  assert ngram.returncode == 0, ngram.stderr
  rows = [line.split("\t") for line in ngram.stdout.splitlines()]
  score = commands.run(
    "score.py", f"--model_dir=kenlm:{out}", stdin=sentences.read_text(), status=0
  )
  records = [json.loads(line) for line in score.stdout.splitlines()]

  texts = sentences.read_text().splitlines()
  assert [row[3] for row in rows] == [r["text"] for r in records] == texts
  assert [float(row[0]) for row in rows] == pytest.approx([r["score"] for r in records], abs=1e-6)
  assert [r["score"] for r in records] == pytest.approx([s.logprob for s in by_hand], abs=1e-5)
  assert [int(row[1]) for row in rows] == [r["num_tokens"] for r in records] == [8, 7]
  assert [int(row[2]) for row in rows] == [0, 0]  # no word scored as <unk>


def test_an_existing_output_is_replaced_only_with_overwrite(tmp_path):
  # Issue 56's probes (F3): a file of the user's at --output was written over unasked.
  text = tmp_path / "corpus.txt"
  text.write_text("a b c\n")
  mine = tmp_path / "mine.arpa"
  mine.write_text("mine\n")
  result = commands.run("ngram.py", f"--train_text={text}", f"--output={mine}", status=2)
  assert f"--output {mine}: exists; add --overwrite to replace it" in result.stderr
  assert mine.read_text() == "mine\n"


def test_a_second_run_into_an_output_being_trained_is_refused(tmp_path):
  # Issue 56's fifth round (J19): two ngram.py into one --output at once both found it free and
  # exited 0, the later replacing the earlier's model in silence. The lock is held here as a
  # first run holds it.
  text = tmp_path / "text.txt"
  text.write_text("the cat sat\n" * 20)
  out = tmp_path / "lm.arpa"
  with io_utils.exclusive_lock(str(out), wait=False):
    result = commands.run(
      "ngram.py", f"--train_text={text}", f"--output={out}", "--order=2", "--nobinary"
    )
  assert result.returncode == 2, result.stderr
  assert f"{out} is in use by another run" in result.stderr.strip().splitlines()[-1]
  assert os.listdir(tmp_path) == ["text.txt"]


def test_a_training_text_changed_while_lmplz_reads_it_is_one_line(tmp_path, monkeypatch):
  # Issue 56's fifth round (J17): a text emptied while lmplz mapped it killed lmplz by SIGBUS, a
  # RuntimeError traceback. lmplz is replaced here by what it met: the file cut under it.
  text = tmp_path / "text.txt"
  text.write_text("the cat sat\n" * 20)

  def cut_then_fail(cmd, what):
    del cmd
    text.write_text("")
    raise RuntimeError(f"{what} failed (signal 7)")

  monkeypatch.setattr(ngram_lm, "_run_streaming", cut_then_fail)
  monkeypatch.setattr(ngram_lm, "find_kenlm_bin", lambda name: name)
  with pytest.raises(ValueError, match=f"{text} changed while lmplz read it \\(240 -> 0 bytes\\)"):
    ngram_lm.train_ngram(str(text), str(tmp_path / "lm.arpa"), order=2, binary=False)
  assert os.listdir(tmp_path) == ["text.txt"]

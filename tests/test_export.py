"""The exported SavedModel gives the numbers of the Python inference path."""

import json
import os
import signal

import commands
from conftest import SHARP_ATTENTION
from conftest import WORDS
from conftest import assert_self_unknown
from conftest import padded_batch
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops for loading)

from lm import inference
from lm import model_dir
from lm import saved_model_export
import modeling
from text import normalization
from util import interrupts
from util import io_utils

MAX_SEQ_LENGTH = 12
SENTENCES = [
  "the cat sat on the mat .",
  "",  # no word pieces at all
  "A dog ran",
  "cats walking far away , zebra",  # "zebra" is [UNK]
  # 16 words, more pieces: cut to MAX_SEQ_LENGTH - 2 pieces.
  "the dog , the cat , a mat , the runs walked on the mat far away",
]
# bilm sums over one masked copy per position, batched differently in the
# graph and in lm/inference.py, so it rounds a little further apart.
ATOL = {"tta": 1e-5, "tta_word": 1e-5, "unilm": 1e-5, "bilm": 1e-4}


def export_config(tokenizer, **overrides):
  """The tiny config every exported model here uses: one layer (a smaller graph traces and saves
  faster), as no test here depends on the depth but the self-unknown one, whose export has two."""
  sizes = dict(hidden_size=16, num_attention_heads=2, intermediate_size=24, num_hidden_layers=1)
  return tiny_config(
    vocab_size=tokenizer.vocab_size, max_position_embeddings=32, **dict(sizes, **overrides)
  )


@pytest.fixture(scope="module", params=["tta", "bilm", "unilm"])
def exported(request, tokenizer, tmp_path_factory):
  """(NeuralLM, loaded SavedModel, export dir) for one model type."""
  tf.keras.utils.set_random_seed(5)
  config = export_config(tokenizer)
  model = modeling.build_model(config, request.param)
  # A budget of 40 tokens makes the bilm's in-graph copies run in several
  # chunks (and lm/inference.py in several batches).
  lm = inference.NeuralLM(model, tokenizer, max_seq_length=MAX_SEQ_LENGTH, token_budget=40)
  export_dir = str(tmp_path_factory.mktemp("export") / request.param)
  saved_model_export.export(lm, export_dir)
  return lm, tf.saved_model.load(export_dir), export_dir


@pytest.mark.slow(seconds=20)
def test_score_signature_equals_python_path(exported):
  lm, loaded, _ = exported
  want = lm.score(SENTENCES)
  got = {k: v.numpy() for k, v in loaded.signatures["score"](texts=tf.constant(SENTENCES)).items()}
  atol = ATOL[lm.model_type]
  assert got["token_logprobs"].dtype == np.float32
  assert got["num_tokens"].dtype == np.int32
  for i, result in enumerate(want):
    row = got["token_logprobs"][i]
    scored = row != 0
    # The scored tokens are the ones after [SOS], up to and with [EOS].
    n = result.num_tokens
    assert got["num_tokens"][i] == n
    assert np.flatnonzero(scored).tolist() == list(range(1, n + 1))
    np.testing.assert_allclose(row[1 : n + 1], result.token_logprobs, atol=atol, rtol=0)
    assert got["total"][i] == pytest.approx(result.total, abs=10 * atol)
    assert bool(got["truncated"][i]) == result.truncated
  assert got["truncated"].tolist() == [False, False, False, False, True]
  # The over-long sentence fills max_seq_length exactly: [SOS] 10 pieces
  # [EOS], 11 tokens scored.
  assert got["num_tokens"][4] == MAX_SEQ_LENGTH - 1
  assert got["token_logprobs"].shape == (len(SENTENCES), MAX_SEQ_LENGTH)


@pytest.mark.parametrize("pooling", inference.POOLINGS)
def test_encode_signature_equals_python_path(exported, pooling):
  lm, loaded, _ = exported
  got = loaded.signatures["encode"](texts=tf.constant(SENTENCES))
  want = lm.sentence_vectors(SENTENCES, pooling=pooling, masked=True)
  np.testing.assert_allclose(got[pooling].numpy(), want, atol=ATOL[lm.model_type], rtol=0)
  if pooling in ("context", "embed", "first_last"):
    assert not np.any(got[pooling].numpy()[1])  # the empty sentence


def test_bilm_exports_the_intact_context_too(exported):
  lm, loaded, _ = exported
  outputs = set(loaded.signatures["encode"].structured_outputs)
  if lm.model_type != "bilm":
    assert outputs == {"context", "embed", "first_last", "first", "last"}
    return
  assert outputs == {"context", "context_intact", "embed", "first_last", "first", "last"}
  got = loaded.signatures["encode"](texts=tf.constant(SENTENCES))
  want = lm.sentence_vectors(SENTENCES, pooling="context", masked=False)
  np.testing.assert_allclose(got["context_intact"].numpy(), want, atol=1e-5)


def test_one_sentence_batches_and_export_info(exported):
  lm, loaded, export_dir = exported
  for sentence in SENTENCES[:3]:
    got = loaded.signatures["score"](texts=tf.constant([sentence]))
    want = lm.score([sentence])[0]
    assert float(got["total"][0]) == pytest.approx(want.total, abs=1e-3)
  with open(
    os.path.join(export_dir, saved_model_export.EXTRA_DIR, saved_model_export.EXPORT_INFO)
  ) as f:
    info = json.load(f)
  assert info["model_type"] == lm.model_type
  assert info["max_seq_length"] == MAX_SEQ_LENGTH
  # tta, bilm and unilm were trained for piece scoring: their export's default.
  assert info["scoring"] == "piece"


def test_tta_export_is_exactly_self_unknown(tokenizer, scoring_export):
  """The SavedModel's `encode`: the "context" of a one-word sentence is the last layer at its
  word, bit for bit the same whatever the word, in every one-word row of a padded batch.

  Text reaches no other position: [SOS]/[EOS] are fixed, and `score` scores each token as its own
  target (tests/test_inference.py checks every position of the graph functions exported here).
  """
  # The module's two-layer tta export at SHARP_ATTENTION: `encode` is the same whatever `score`
  # computes.
  lm, loaded, _ = scoring_export(*SELF_UNKNOWN_EXPORT)
  assert lm.model.config.num_hidden_layers >= 2
  encode = loaded.signatures["encode"]
  words = np.array(tokenizer.convert_tokens_to_ids([w for w in WORDS if not w.startswith("##")]))
  lengths = np.array([7, 3, 5, 3])  # [SOS] words [EOS]: two one-word sentences among longer ones
  ids, mask = padded_batch(lengths, words, np.random.default_rng(0))
  one_word = lengths == 3

  def outputs(ids, mask):
    texts = [" ".join(tokenizer.convert_ids_to_tokens(x[1 : n - 1])) for x, n in zip(ids, lengths)]
    vectors = {k: v.numpy() for k, v in encode(texts=tf.constant(texts)).items()}
    first, context = (
      np.zeros(ids.shape + vectors["first"].shape[-1:], np.float32) for _ in range(2)
    )
    first[:, 0] = vectors["first"]
    context[one_word, 1] = vectors["context"][one_word]
    return {"first": first, "context": context}

  assert_self_unknown(outputs, ids, mask, words, positions=[1])


def test_export_refuses_to_overwrite(exported):
  lm, _, export_dir = exported
  with pytest.raises(FileExistsError, match="--overwrite"):
    saved_model_export.export(lm, export_dir)


def test_empty_batch(exported):
  _, loaded, _ = exported
  texts = tf.constant([], tf.string)
  scores = loaded.signatures["score"](texts=texts)
  assert scores["total"].shape == (0,) and scores["truncated"].shape == (0,)
  vectors = loaded.signatures["encode"](texts=texts)
  assert vectors["context"].shape[0] == 0


def test_raw_texts_with_case_punctuation_and_digits(exported):
  """normalization "none": the signatures take raw `texts`, scored as the
  Python path scores them (case, punctuation and digits included)."""
  lm, loaded, _ = exported
  raw = ["The Cat sat on 2 mats, far away!", "A DOG RAN 3 times."]
  assert list(loaded.signatures["score"].structured_input_signature[1]) == ["texts"]
  got = loaded.signatures["score"](texts=tf.constant(raw))
  for i, result in enumerate(lm.score(raw)):
    assert int(got["num_tokens"][i]) == result.num_tokens
    assert float(got["total"][i]) == pytest.approx(result.total, abs=10 * ATOL[lm.model_type])


# ------------------------------------------------ scoring modes (word_l2r)

# With words of several pieces (tokenizations asserted below): walk ##ing, dog ##s, walk ##ing ##s,
# cat ##s, walk ##ed.
WORD_SENTENCES = ["walking dogs ran far away", "walkings cats walked away", "", "the dog ran ."]
WORD_PIECES = [
  ["walk", "##ing", "dog", "##s", "ran", "far", "away"],
  ["walk", "##ing", "##s", "cat", "##s", "walk", "##ed", "away"],
  [],
  ["the", "dog", "ran", "."],
]
OTHER_SCORING = {"piece": "word_l2r", "word_l2r": "piece"}
# The scoring_export of test_tta_export_is_exactly_self_unknown, the module's two-layer model.
SELF_UNKNOWN_EXPORT = ("tta", "word_l2r")


@pytest.fixture(scope="module")
def scoring_export(tokenizer, tmp_path_factory):
  """(model_type, scoring given to `export`) -> (NeuralLM, loaded SavedModel, export dir), each
  exported once per module and shared by the tests that take it."""
  cache = {}

  def get(model_type, scoring):
    if (model_type, scoring) not in cache:
      tf.keras.utils.set_random_seed(5)
      # tta's word_l2r export holds the self-unknown test's two layers: a second layer is where
      # a token could reach its own output through another position (or a later piece of its
      # word reach an earlier one's score).
      layers = 2 if (model_type, scoring) == SELF_UNKNOWN_EXPORT else 1
      config = export_config(tokenizer, num_hidden_layers=layers, **SHARP_ATTENTION)
      lm = inference.NeuralLM(
        modeling.build_model(config, model_type),
        tokenizer,
        max_seq_length=MAX_SEQ_LENGTH,
        token_budget=40,  # the bilm's in-graph copies in several chunks
      )
      export_dir = str(tmp_path_factory.mktemp("export") / f"{model_type}-{scoring}")
      saved_model_export.export(lm, export_dir, scoring=scoring)
      cache[model_type, scoring] = lm, tf.saved_model.load(export_dir), export_dir
    return cache[model_type, scoring]

  return get


# (model_type, scoring given to `export`, the mode its `score` must compute): tta_word's default
# is the mode it was trained for.
SCORING_EXPORTS = [
  ("tta", "word_l2r", "word_l2r"),
  ("tta_word", None, "word_l2r"),
  ("tta_word", "piece", "piece"),
  ("bilm", "word_l2r", "word_l2r"),
]


@pytest.mark.parametrize("model_type,scoring,want_scoring", SCORING_EXPORTS)
@pytest.mark.slow(seconds=20)
def test_score_signature_computes_its_scoring_mode(
  scoring_export, model_type, scoring, want_scoring
):
  """`score` gives `NeuralLM.score(..., scoring=...)` of the export's mode, on sentences with
  split words, where the two modes differ far beyond the tolerance."""
  lm, loaded, export_dir = scoring_export(model_type, scoring)
  assert [lm.tokenizer.tokenize(s) for s in WORD_SENTENCES] == WORD_PIECES
  got = loaded.signatures["score"](texts=tf.constant(WORD_SENTENCES))
  want = lm.score(WORD_SENTENCES, scoring=want_scoring)
  atol = ATOL[model_type]
  for i, result in enumerate(want):
    n = result.num_tokens
    row = got["token_logprobs"][i].numpy()
    assert int(got["num_tokens"][i]) == n == len(WORD_PIECES[i]) + 1
    assert np.flatnonzero(row).tolist() == list(range(1, n + 1))
    np.testing.assert_allclose(row[1 : n + 1], result.token_logprobs, atol=atol, rtol=0)
    assert float(got["total"][i]) == pytest.approx(result.total, abs=10 * atol)
  other = lm.score(WORD_SENTENCES, scoring=OTHER_SCORING[want_scoring])
  gap = max(np.max(np.abs(w.token_logprobs - o.token_logprobs)) for w, o in zip(want, other))
  assert gap > 100 * atol
  with open(
    os.path.join(export_dir, saved_model_export.EXTRA_DIR, saved_model_export.EXPORT_INFO)
  ) as f:
    info = json.load(f)
  assert info["scoring"] == want_scoring
  assert info["model_type"] == model_type


@pytest.mark.parametrize("pooling", inference.POOLINGS)
def test_tta_word_encode_equals_python_path(scoring_export, pooling):
  """tta_word's `encode` runs its word mask, the words found in the graph, whatever the mode."""
  for scoring in (None, "piece"):
    lm, loaded, _ = scoring_export("tta_word", scoring)
    got = loaded.signatures["encode"](texts=tf.constant(WORD_SENTENCES))[pooling].numpy()
    want = lm.sentence_vectors(WORD_SENTENCES, pooling=pooling)
    np.testing.assert_allclose(got, want, atol=ATOL["tta_word"], rtol=0)


@pytest.mark.parametrize("model_type,scoring", [("tta", "word_l2r"), ("tta_word", None)])
def test_word_l2r_export_is_blind_to_the_later_pieces_of_the_word(
  scoring_export, model_type, scoring
):
  """Through the SavedModel, strings in: the score of piece i is bit-identical when a later piece
  of its word changes, and changes when an earlier piece of its word or another word changes.

  One sentence per call, the segmentation kept (asserted), so every call has the same shapes.
  """
  lm, loaded, _ = scoring_export(model_type, scoring)

  def logprobs(sentence, pieces):
    assert lm.tokenizer.tokenize(sentence) == pieces
    # Position p + 1 holds piece p ([SOS] first).
    return loaded.signatures["score"](texts=tf.constant([sentence]))["token_logprobs"].numpy()[0]

  rest = ["dog", "##s", "ran", "far", "away"]
  base = logprobs("walkings dogs ran far away", ["walk", "##ing", "##s"] + rest)
  # The last piece of "walk ##ing ##s" changes: "walk" and "##ing" do not see it.
  got = logprobs("walkinged dogs ran far away", ["walk", "##ing", "##ed"] + rest)
  np.testing.assert_array_equal(got[1:3], base[1:3])
  assert got[3] != base[3]  # its own target changed
  # The middle piece changes: "walk" does not see it, the later "##s" does.
  got = logprobs("walkeds dogs ran far away", ["walk", "##ed", "##s"] + rest)
  assert got[1] == base[1]
  assert got[3] != base[3]
  # The first piece changes: the later pieces of its word see it.
  got = logprobs("runings dogs ran far away", ["run", "##ing", "##s"] + rest)
  assert got[2] != base[2] and got[3] != base[3]
  # Another word changes: every piece of this one sees it.
  got = logprobs("walkings cats ran far away", ["walk", "##ing", "##s", "cat", "##s"] + rest[2:])
  assert np.all(got[1:4] != base[1:4])


def test_export_refuses_an_unknown_scoring(scoring_export):
  lm, _, _ = scoring_export("tta", "word_l2r")
  with pytest.raises(ValueError, match="scoring 'words' is not one of"):
    saved_model_export.ExportModule(lm, scoring="words")


# ------------------------------------------- a LibriSpeech-normalized model

RAW = ["The cat sat on the mat.", "A dog ran 3 miles, far away!", "The cats' mat"]


@pytest.fixture(scope="module")
def exported_normalized(tokenizer, tmp_path_factory):
  """(NeuralLM, loaded SavedModel, export dir) of a tta model trained on
  LibriSpeech-normalized text."""
  tf.keras.utils.set_random_seed(6)
  config = export_config(tokenizer, normalization="librispeech")
  lm = inference.NeuralLM(modeling.build_model(config, "tta"), tokenizer, max_seq_length=16)
  assert lm.normalization == "librispeech"
  export_dir = str(tmp_path_factory.mktemp("export") / "normalized")
  saved_model_export.export(lm, export_dir)
  return lm, tf.saved_model.load(export_dir), export_dir


@pytest.mark.slow(seconds=7)
def test_normalized_model_takes_normalized_texts(exported_normalized):
  """The input says what it must hold, and normalized text scores as the
  Python path scores the raw sentence (which it normalizes itself)."""
  lm, loaded, export_dir = exported_normalized
  for name in saved_model_export.SIGNATURES:
    inputs = loaded.signatures[name].structured_input_signature[1]
    assert list(inputs) == ["normalized_texts"], (name, inputs)
  with open(os.path.join(export_dir, "assets.extra", "tta_export.json")) as f:
    assert json.load(f)["input"] == "normalized_texts"
  normalized = [normalization.normalize_librispeech(s) for s in RAW]
  assert normalized[1] == "A DOG RAN THREE MILES FAR AWAY"
  got = loaded.signatures["score"](normalized_texts=tf.constant(normalized))
  for i, result in enumerate(lm.score(RAW)):
    n = result.num_tokens
    assert int(got["num_tokens"][i]) == n
    np.testing.assert_allclose(
      got["token_logprobs"][i, 1 : n + 1], result.token_logprobs, atol=1e-5
    )
  vectors = loaded.signatures["encode"](normalized_texts=tf.constant(normalized))
  np.testing.assert_allclose(
    vectors["context"].numpy(), lm.sentence_vectors(RAW, pooling="context"), atol=1e-5
  )


@pytest.mark.parametrize(
  "text", ["The cat sat on the mat.", "THE CAT SAT ON THE MAT.", "ROOM 101", "THE CAT, THE MAT"]
)
@pytest.mark.parametrize("signature", saved_model_export.SIGNATURES)
def test_normalized_model_rejects_text_that_is_not(exported_normalized, text, signature):
  """Never a silently different score: case, digits or punctuation fail the
  call, naming the rule and the sentence (and only the offending one)."""
  _, loaded, _ = exported_normalized
  batch = tf.constant(["THE CAT'S MAT", text])
  with pytest.raises(tf.errors.InvalidArgumentError) as error:
    loaded.signatures[signature](normalized_texts=batch)
  message = str(error.value)
  assert "no lower-case letters, digits or punctuation other than apostrophes" in message
  assert text in message and "THE CAT'S MAT" not in message


@pytest.fixture(scope="module")
def tta_model_dir(tokenizer, tmp_path_factory):
  """A tiny tta model dir export_saved_model.py reads (never writes into)."""
  path = str(tmp_path_factory.mktemp("model_dir") / "tta")
  model_dir.save_model_dir(
    modeling.build_model(export_config(tokenizer), "tta"), tokenizer.vocab_file, path
  )
  return path


@pytest.mark.parametrize(
  "length, error",
  [
    ("33", "--max_seq_length=33 is more than the 32 tokens the model takes"),
    # Below [BOS] piece [EOS]: refused as itself, not as the --window it would default.
    ("-5", "flag --max_seq_length=-5: -5 is not integer >= 3"),
  ],
)
def test_a_max_seq_length_the_model_cannot_take_is_refused(tta_model_dir, tmp_path, length, error):
  """export_saved_model.py --max_seq_length above max_position_embeddings (32 here), or below
  3: one line naming the flag, nothing written (a shorter export would not be what was asked)."""
  path = tta_model_dir
  export_dir = tmp_path / "export"
  result = commands.run(
    "export_saved_model.py",
    f"--model_dir={path}",
    f"--export_dir={export_dir}",
    f"--max_seq_length={length}",
  )
  assert result.returncode == 2
  (line,) = [l for l in result.stderr.splitlines() if l.startswith("export_saved_model.py:")]
  assert line.startswith(f"export_saved_model.py: error: {error}"), line
  if length == "33":
    assert line.endswith(f"(max_position_embeddings of {path})")
  assert not export_dir.exists()


def test_overwrite_refuses_an_export_holding_a_file_no_export_writes(tmp_path):
  # Issue 56's probes (F15): --overwrite replaced the export dir whole, a NOTES.txt of the
  # user's in it too.
  export_dir = tmp_path / "x"
  for name in (
    "saved_model.pb",
    "fingerprint.pb",
    "variables/variables.index",
    "variables/variables.data-00000-of-00001",
    "assets/vocab.txt",
    f"{saved_model_export.EXTRA_DIR}/{saved_model_export.EXPORT_INFO}",
  ):
    (export_dir / name).parent.mkdir(parents=True, exist_ok=True)
    (export_dir / name).write_text("")
  saved_model_export.check_export_dir(str(export_dir), overwrite=True)  # its own files alone
  (export_dir / "NOTES.txt").write_text("mine\n")
  with pytest.raises(FileExistsError, match="holds NOTES.txt, which no export writes"):
    saved_model_export.check_export_dir(str(export_dir), overwrite=True)


def test_a_stop_during_the_check_leaves_no_export_and_the_same_command_redoes_it(
  tta_model_dir, tmp_path, monkeypatch
):
  # Issue 56's probes, fourth round (H9): a Ctrl-C during the check after the export was in place
  # said "the same command resumes or redoes the rest", and the same command was then refused
  # (the export existed).
  export_dir = tmp_path / "export"
  args = [f"--model_dir={tta_model_dir}", f"--export_dir={export_dir}"]
  load = tf.saved_model.load

  def stopped_while_loading(*args, **kwargs):
    # What the command's SIGINT handler raises (a real signal here could reach the test runner
    # before the command's handler is in place).
    del args, kwargs
    raise interrupts.Interrupted(signal.SIGINT)

  monkeypatch.setattr(tf.saved_model, "load", stopped_while_loading)
  stopped = commands.run("export_saved_model.py", *args)
  assert stopped.returncode == 130, stopped.stderr
  assert not export_dir.exists()
  assert os.listdir(tmp_path) == []  # no temporary folder beside the export either
  monkeypatch.setattr(tf.saved_model, "load", load)
  commands.run("export_saved_model.py", *args, status=0)
  assert (export_dir / "saved_model.pb").exists()


def test_a_second_export_into_a_folder_being_exported_is_refused(tmp_path):
  """Issue 56's fifth round (J19): two exports into one --export_dir at once both found it free
  and both exited 0, the later replacing the earlier's export in silence. The export's lock is
  held here as a first export holds it."""
  export_dir = tmp_path / "export"
  with io_utils.exclusive_lock(str(export_dir), wait=False):
    result = commands.run(
      "export_saved_model.py", f"--model_dir={tmp_path / 'absent'}", f"--export_dir={export_dir}"
    )
  assert result.returncode == 2, result.stderr
  (line,) = [l for l in result.stderr.splitlines() if l.startswith("export_saved_model.py:")]
  assert f"{export_dir} is in use by another run" in line, line
  assert not export_dir.exists() and os.listdir(tmp_path) == []

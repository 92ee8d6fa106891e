"""Tests of lm/inference.py against brute-force computations with the raw model."""

import os
import types
from unittest import mock

from conftest import SHARP_ATTENTION
from conftest import WORDS
from conftest import assert_self_unknown
from conftest import keras_policy
from conftest import padded_batch
from conftest import tiny_bert
from conftest import tiny_config
from conftest import write_google_release
import numpy as np
import pytest
import tensorflow as tf

from lm import backends
from lm import inference
from lm import model_dir
from lm import stage_clock
import modeling
import tokenization

SENTENCES = [
  "the cat sat on the mat .",
  "a dog ran",
  "cats walking far away",
  "",
  "the dog , the cat , a mat , the runs walked on",
]


def lm_for(model_type, tokenizer, config_overrides=None, **kwargs):
  tf.keras.utils.set_random_seed(11)
  config = tiny_config(
    vocab_size=tokenizer.vocab_size,
    intermediate_size=40,
    max_position_embeddings=32,
    **(config_overrides or {}),
  )
  model = modeling.build_model(config, model_type)
  return inference.NeuralLM(model, tokenizer, **kwargs)


@pytest.fixture(scope="module")
def shared_lm(tokenizer):
  """model_type -> lm_for(model_type, tokenizer), built once for the module's tests that only
  read it (a new NeuralLM traces its graph functions anew); a test that changes its LM builds
  its own."""
  lms = {}

  def get(model_type):
    if model_type not in lms:
      lms[model_type] = lm_for(model_type, tokenizer)
    return lms[model_type]

  return get


def ids_of(lm, sentence):
  return (
    [lm.bos_id] + lm.tokenizer.convert_tokens_to_ids(lm.tokenizer.tokenize(sentence)) + [lm.eos_id]
  )


def forward(lm, ids):
  out = lm.model(
    {"input_ids": tf.constant([ids], tf.int32), "input_mask": tf.ones([1, len(ids)], tf.int32)}
  )
  return {k: v.numpy()[0] for k, v in out.items()}


def test_tta_scores_are_the_gathered_log_probs_of_one_pass(shared_lm):
  lm = shared_lm("tta")
  results = lm.score(SENTENCES)
  for sentence, result in zip(SENTENCES, results):
    ids = ids_of(lm, sentence)
    log_probs = forward(lm, ids)["log_probs"]
    want = [log_probs[t, ids[t]] for t in range(1, len(ids))]  # [EOS] in
    np.testing.assert_allclose(result.token_logprobs, want, atol=1e-5)
    assert result.tokens[-1] == "[EOS]" and len(result.tokens) == len(ids) - 1
    assert result.total == pytest.approx(sum(want), abs=1e-4)


def test_bilm_batched_pll_equals_masked_copy_loop(tokenizer):
  # A budget of 64 tokens forces several batches and splits between them.
  lm = lm_for("bilm", tokenizer, token_budget=64)
  results = lm.score(SENTENCES)
  for sentence, result in zip(SENTENCES, results):
    ids = ids_of(lm, sentence)
    want = []
    for t in range(1, len(ids)):
      masked = list(ids)
      masked[t] = lm.mask_id
      want.append(forward(lm, masked)["log_probs"][t, ids[t]])
    np.testing.assert_allclose(result.token_logprobs, want, atol=1e-4)


def test_unilm_equals_chain_rule_token_by_token(shared_lm):
  lm = shared_lm("unilm")
  results = lm.score(SENTENCES)
  for sentence, result in zip(SENTENCES, results):
    ids = ids_of(lm, sentence)
    # Feed each prefix alone: nothing to the right can leak in.
    want = [forward(lm, ids[:t])["log_probs"][t - 1, ids[t]] for t in range(1, len(ids))]
    np.testing.assert_allclose(result.token_logprobs, want, atol=1e-5)


@pytest.mark.parametrize("model_type", ["tta", "bilm"])
def test_scored_special_tokens_follow_the_flags(tokenizer, shared_lm, model_type):
  sentence = ["the cat sat"]
  default = shared_lm(model_type).score(sentence)[0]
  both = lm_for(model_type, tokenizer, score_sos=True).score(sentence)[0]
  neither = lm_for(model_type, tokenizer, score_eos=False).score(sentence)[0]
  assert default.tokens == ["the", "cat", "sat", "[EOS]"]
  assert both.tokens == ["[SOS]", "the", "cat", "sat", "[EOS]"]
  assert neither.tokens == ["the", "cat", "sat"]
  np.testing.assert_allclose(both.token_logprobs[1:], default.token_logprobs, atol=1e-5)


def test_over_long_sentences_are_truncated_and_flagged(tokenizer):
  lm = lm_for("tta", tokenizer, max_seq_length=6)
  long, short = lm.score(["the cat sat on the mat", "a dog"])
  assert long.truncated and not short.truncated
  assert long.tokens == ["the", "cat", "sat", "on", "[EOS]"]
  assert lm.stats["truncated"] == 1


def test_word_logprobs_sum_the_pieces_of_each_word():
  scored = inference.ScoredSentence(
    ["cat", "##s", "walk", "##ing", "[EOS]"], np.array([-1.0, -2.0, -3.0, -4.0, -5.0])
  )
  assert scored.word_logprobs() == [-3.0, -7.0, -5.0]
  assert scored.mean == pytest.approx(-3.0)


def test_tta_context_vectors_are_the_mean_over_words(shared_lm):
  lm = shared_lm("tta")
  vectors = lm.sentence_vectors(SENTENCES, pooling="context")
  embeds = lm.sentence_vectors(SENTENCES, pooling="embed")
  firsts = lm.sentence_vectors(SENTENCES, pooling="first")
  for i, sentence in enumerate(SENTENCES):
    ids = ids_of(lm, sentence)
    out = forward(lm, ids)
    if len(ids) > 2:
      np.testing.assert_allclose(vectors[i], out["sequence_output"][1:-1].mean(0), atol=1e-5)
      np.testing.assert_allclose(embeds[i], out["embedding_output"][1:-1].mean(0), atol=1e-5)
    else:  # the empty sentence
      assert not vectors[i].any()
    np.testing.assert_allclose(firsts[i], out["sequence_output"][0], atol=1e-5)


def test_bilm_context_vectors_come_from_the_masked_copies(tokenizer):
  lm = lm_for("bilm", tokenizer, token_budget=64)
  masked = lm.sentence_vectors(SENTENCES[:3], pooling="context")
  intact = lm.sentence_vectors(SENTENCES[:3], pooling="context", masked=False)
  for i, sentence in enumerate(SENTENCES[:3]):
    ids = ids_of(lm, sentence)
    copies = []
    for t in range(1, len(ids) - 1):
      m = list(ids)
      m[t] = lm.mask_id
      copies.append(forward(lm, m)["sequence_output"][t])
    np.testing.assert_allclose(masked[i], np.mean(copies, 0), atol=1e-5)
    np.testing.assert_allclose(
      intact[i], forward(lm, ids)["sequence_output"][1:-1].mean(0), atol=1e-5
    )


def test_vocab_model_mismatch_is_an_error(tokenizer):
  config = modeling.TTAConfig(
    vocab_size=tokenizer.vocab_size + 1,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=16,
  )
  with pytest.raises(ValueError, match="vocab_size"):
    inference.NeuralLM(modeling.build_model(config, "tta"), tokenizer)


def masked_pll_terms(model, ids, mask_id):
  """log p(ids[t] | ids with t masked) for t = 1 .. n-1, from the raw model, one copy each."""
  want = []
  for t in range(1, len(ids)):
    masked = list(ids)
    masked[t] = mask_id
    out = model(
      {"input_ids": tf.constant([masked]), "input_mask": tf.ones([1, len(ids)], tf.int32)}
    )
    want.append(out["log_probs"].numpy()[0, t, ids[t]])
  return want


def test_google_bert_release_dir_loads_as_bert(tmp_path):
  """bert:DIR -> [CLS] ... [SEP] inputs, PLL scores from the released weights."""
  original = tiny_bert()
  lm = inference.load_lm(f"bert:{write_google_release(tmp_path, original)}")
  assert lm.model_type == "bert"
  scored = lm.score(["the cat sat"])[0]
  assert scored.tokens == ["the", "cat", "sat", "[SEP]"]
  ids = [2] + lm.tokenizer.convert_tokens_to_ids(["the", "cat", "sat"]) + [3]
  np.testing.assert_allclose(scored.token_logprobs, masked_pll_terms(original, ids, 4), atol=1e-5)


def test_bert_is_framed_by_cls_sep_when_its_vocab_also_has_sos_eos(tmp_path):
  # The authors' vocab order holds both pairs; BERT was trained on [CLS] ... [SEP], and the
  # loader's record of that pair, not the vocab rule, decides (issue 23).
  tokens = list(tokenization.SPECIAL_TOKENS) + list(WORDS)
  original = tiny_bert(tokens, seed=22)
  lm = inference.load_lm(f"bert:{write_google_release(tmp_path, original, tokens)}")
  cls_id, sep_id = tokens.index("[CLS]"), tokens.index("[SEP]")
  assert (lm.bos_id, lm.eos_id) == (cls_id, sep_id)
  assert lm.model.config.boundary_tokens == ["[CLS]", "[SEP]"]
  scored = lm.score(["the cat sat"])[0]
  assert scored.tokens[-1] == "[SEP]"
  ids = [cls_id] + lm.tokenizer.convert_tokens_to_ids(["the", "cat", "sat"]) + [sep_id]
  mask_id = tokens.index("[MASK]")
  np.testing.assert_allclose(
    scored.token_logprobs, masked_pll_terms(original, ids, mask_id), atol=1e-5
  )
  assert inference.describe(lm)["boundary_tokens"] == ["[CLS]", "[SEP]"]


def test_model_dir_without_recorded_boundary_keeps_its_identity(tmp_path, tokenizer):
  # Model dirs written before config.json had boundary_tokens: the vocab's pair ([SOS]/[EOS]),
  # and an identity (so a score-cache key) without the new field.
  path = str(tmp_path / "tta")
  model_dir.save_model_dir(lm_for("tta", tokenizer).model, tokenizer.vocab_file, path)
  assert "boundary_tokens" not in open(os.path.join(path, "config.json")).read()
  lm = inference.load_lm(path)
  assert (lm.bos_id, lm.eos_id) == (tokenizer.sos_id, tokenizer.eos_id)
  identity = inference.describe(lm)
  assert "boundary_tokens" not in identity and "boundary_tokens" not in identity["config"]


def test_model_trained_on_normalized_text_scores_normalized_input(tokenizer, shared_lm):
  # A model whose config says its training text was LibriSpeech-normalized
  # must score "The cat sat, 2 dogs." exactly as "the cat sat two dogs".
  plain = shared_lm("tta")
  lm = lm_for("tta", tokenizer)
  lm.model.config.normalization = "librispeech"
  normalizing = inference.NeuralLM(lm.model, tokenizer)
  assert normalizing.normalization == "librispeech"
  got = normalizing.score(["The cat sat, on the mat."])[0]
  want = plain.score(["THE CAT SAT ON THE MAT"])[0]
  np.testing.assert_allclose(got.token_logprobs, want.token_logprobs, atol=1e-6)
  assert got.tokens == want.tokens


@pytest.mark.parametrize("model_type", ["tta", "bilm"])
@pytest.mark.slow(seconds=10)
def test_xla_compiled_graphs_give_the_same_scores_and_vectors(tokenizer, shared_lm, model_type):
  plain = shared_lm(model_type)
  compiled = inference.NeuralLM(plain.model, tokenizer, jit_compile=True)
  sentences = [s for s in SENTENCES if s]
  np.testing.assert_allclose(
    [r.total for r in compiled.score(sentences)],
    [r.total for r in plain.score(sentences)],
    atol=1e-5,
  )
  np.testing.assert_allclose(
    compiled.sentence_vectors(sentences), plain.sentence_vectors(sentences), atol=1e-5
  )


# Every way a NeuralLM compiles its graph functions: NeuralLM arguments, and the Keras dtype
# policy the model is built under.
GRAPH_PATHS = {
  "tf": ({}, "float32"),
  "xla": ({"jit_compile": True}, "float32"),
  "mixed_bfloat16": ({}, "mixed_bfloat16"),
  "openvino": ({"backend": "openvino"}, "float32"),
  "openvino_bf16": ({"backend": "openvino_bf16"}, "float32"),
}


@pytest.mark.parametrize("path", GRAPH_PATHS)
@pytest.mark.slow(seconds=15)
def test_tta_graph_functions_are_exactly_self_unknown(tokenizer, path):
  """token_log_probs and sentence_vectors, compiled as the NeuralLM compiles them (the whole
  graph, on every backend), never let token i reach output i, in any row of a padded batch."""
  kwargs, policy = GRAPH_PATHS[path]
  if kwargs.get("backend") == "openvino_bf16" and not backends.openvino_cpu_has_bf16():
    pytest.skip("this CPU has no bfloat16 support (AMX or AVX512-BF16)")
  with keras_policy(policy):
    lm = lm_for("tta", tokenizer, SHARP_ATTENTION, **kwargs)
  assert lm.model.encoder_layers[0].query.compute_dtype == policy.replace("mixed_", "")
  spec = tf.TensorSpec([None, None], tf.int32)

  # token_log_probs scores the token it is given at i, so its output i depends on token i as
  # the target: the encoder here reads the changed ids while the targets stay the original ones.
  def scores_of(seen, scored, mask, score_mask):
    encode = lm.graph.encode
    with mock.patch.object(
      lm.graph, "encode", lambda _, m, attention=None: encode(seen, m, attention)
    ):
      return lm.graph.token_log_probs(scored, mask, score_mask)

  token_log_probs = lm.compiled(scores_of, [spec] * 4)
  sentence_vectors = lm.compiled(lm.graph.sentence_vectors, [spec, spec])
  tokens = np.arange(len(tokenization.SPECIAL_TOKENS), tokenizer.vocab_size)
  ids, mask = padded_batch([9, 6, 1, 3], tokens, np.random.default_rng(3))
  rows, ends = np.arange(len(ids)), mask.sum(1) - 1

  def scores(changed, mask):
    # log p(ids_t | changed_\t) [B, T]
    return {"token_log_probs": np.asarray(token_log_probs(changed, ids, mask, mask))}

  def first_and_last(changed, mask):
    # The pooled "first" / "last" vectors are the last layer at each row's first / last token.
    vectors = sentence_vectors(changed, mask)
    first, last = (np.zeros(ids.shape + vectors["first"].shape[-1:], np.float32) for _ in range(2))
    first[:, 0] = vectors["first"]
    last[rows, ends] = vectors["last"]
    return {"first": first, "last": last}

  assert_self_unknown(scores, ids, mask, tokens)
  assert_self_unknown(first_and_last, ids, mask, tokens)


def test_identity_changes_with_the_weights_so_caches_never_mix_checkpoints(tokenizer, shared_lm):
  lm = shared_lm("tta")
  same = lm_for("tta", tokenizer)  # same seed, same weights
  assert inference.describe(lm) == inference.describe(same)
  variable = same.model.encoder_layers[1].output_dense.bias
  variable.assign(variable + 1e-3)
  assert inference.describe(lm) != inference.describe(same)
  assert inference.describe(lm)["weights_sha256"] != inference.describe(same)["weights_sha256"]


def test_identity_covers_vocab_tokenizer_and_scoring_options(tokenizer, shared_lm, tmp_path):
  # A fixed vocab.txt in a model dir must not be served the scores cached for the old one.
  lm = shared_lm("tta")
  out = str(tmp_path / "model")
  model_dir.save_model_dir(lm.model, tokenizer.vocab_file, out)
  before = inference.describe(inference.load_lm(out))
  vocab = model_dir.vocab_path(out)
  with open(vocab, encoding="utf-8") as f:
    tokens = f.read().split("\n")
  i, j = tokens.index("cat"), tokens.index("dog")
  tokens[i], tokens[j] = tokens[j], tokens[i]  # same size, same weights, other words
  with open(vocab, "w", encoding="utf-8") as f:
    f.write("\n".join(tokens))
  after = inference.describe(inference.load_lm(out))
  assert before != after
  assert inference.model_id(before) != inference.model_id(after)
  assert inference.model_id(before).startswith("tta-") and len(inference.model_id(before)) == 20
  # Every other option that changes a score changes the identity too.
  base = inference.describe(lm)
  cased = tokenization.FullTokenizer(tokenizer.vocab_file, do_lower_case=False)
  for other in [
    inference.NeuralLM(lm.model, cased),
    inference.NeuralLM(lm.model, tokenizer, normalization="librispeech"),
    inference.NeuralLM(lm.model, tokenizer, score_sos=True),
    inference.NeuralLM(lm.model, tokenizer, score_eos=False),
    inference.NeuralLM(lm.model, tokenizer, max_seq_length=16),
  ]:
    assert inference.model_id(inference.describe(other)) != inference.model_id(base)


def test_no_sentences_give_an_empty_vector_array_for_every_kind(shared_lm):
  for model_type in ("tta", "bilm", "unilm"):
    lm = shared_lm(model_type)
    for pooling in inference.POOLINGS:
      assert lm.sentence_vectors([], pooling=pooling).shape == (0, 32), (model_type, pooling)


@pytest.mark.parametrize("model_type", ["tta", "bilm"])
def test_characters_the_model_cannot_spell_cost_probability(tokenizer, model_type):
  lm = lm_for(model_type, tokenizer, normalization="librispeech")
  mixed, plain, emoji, empty = lm.score(
    ["THE CAT 😀🐈 SAT 猫が ON THE MAT", "THE CAT SAT ON THE MAT", "😀😀😀", ""]
  )
  assert mixed.tokens.count("[UNK]") == 4 and mixed.unknown_chars == 4
  assert mixed.total != plain.total and plain.unknown_chars == 0
  assert emoji.tokens[:3] == ["[UNK]"] * 3 and emoji.unknown_chars == 3
  assert emoji.num_tokens > empty.num_tokens
  assert lm.stats["unknown_chars"] == 7


@pytest.mark.parametrize("model_type", ["tta", "bilm", "unilm"])
def test_one_odd_sentence_never_loses_the_batch(tokenizer, model_type):
  lm = lm_for(model_type, tokenizer, normalization="librispeech")
  odd = ["x²³⁴⁵⁶⁷⁸", "①②③", "²²²²²²²", "¹²³⁴⁵⁶⁷ people", "12,000,000 cats"]
  scored = lm.score(odd + ["the cat"])
  assert len(scored) == len(odd) + 1
  assert [s.normalization_fallback for s in scored] == [False] * 4 + [True, False]
  assert lm.stats["normalization_fallbacks"] == 1
  assert lm.sentence_vectors(odd).shape == (len(odd), 32)


@pytest.mark.parametrize("kind", ["tta", "bilm", "unilm"])
@pytest.mark.slow(seconds=8)
def test_mirrored_replicas_give_the_one_device_answer(tokenizer, kind):
  # Over the 2 logical CPU devices of every test process (conftest.TEST_CPU_DEVICES).
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  # Mixed lengths, an odd count (a replica gets one row less) and one sentence alone.
  sentences = ["the cat sat on the mat .", "a dog", "the dog ran on a mat", "cat", "a a a a a a"]
  # One layer: the replicas' split and gather do not depend on the depth; a smaller graph
  # traces faster (once per replica and once alone).
  config = tiny_config(vocab_size=tokenizer.vocab_size, num_hidden_layers=1)
  with strategy.scope():
    mirrored = modeling.build_model(config, kind)
  single = modeling.build_model(config, kind)
  single.set_weights(mirrored.get_weights())
  one = inference.NeuralLM(single, tokenizer)
  two = inference.NeuralLM(mirrored, tokenizer, strategy=strategy)
  for batch in (sentences, sentences[:1]):
    for a, b in zip(one.score(batch), two.score(batch), strict=True):
      np.testing.assert_allclose(b.token_logprobs, a.token_logprobs, atol=1e-4)
    for pooling in ("context", "embed"):
      np.testing.assert_allclose(
        two.sentence_vectors(batch, pooling), one.sentence_vectors(batch, pooling), atol=1e-5
      )


@pytest.mark.parametrize("model_type", ["tta", "bilm"])
def test_stage_clock_accounts_for_each_call(shared_lm, model_type, monkeypatch):
  # The benchmark's breakdown: each stage's work is timed in that stage, and the stages add up to
  # the call (laps cover it end to end), whatever the kind. The clock is a fake that moves only
  # when a stand-in for a stage's work runs, so the sums are exact on any machine and load.
  now = [0.0]
  monkeypatch.setattr(stage_clock, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
  lm = shared_lm(model_type)
  costs = {"normalization": 1.0, "tokenization": 10.0, "graph": 100.0}
  calls = dict.fromkeys(costs, 0)

  def costing(stage, work):
    def run(*args, **kwargs):
      now[0] += costs[stage]
      calls[stage] += 1
      return work(*args, **kwargs)

    return run

  monkeypatch.setattr(lm, "_normalize", costing("normalization", lm._normalize))
  monkeypatch.setattr(
    lm.tokenizer, "piece_ids_batch", costing("tokenization", lm.tokenizer.piece_ids_batch)
  )
  for graph_function in ("_masked_copy_scores", "_sentence_vectors"):
    monkeypatch.setattr(lm, graph_function, costing("graph", getattr(lm, graph_function)))
  one_pass = lm._one_pass_function(lm.default_scoring)
  monkeypatch.setitem(lm._one_pass_scores, lm.default_scoring, costing("graph", one_pass))
  for call in (lambda: lm.score(SENTENCES), lambda: lm.sentence_vectors(SENTENCES)):
    calls.update(dict.fromkeys(costs, 0))
    lm.clock.take()
    start = now[0]
    call()
    stages = lm.clock.take()
    assert calls["graph"] > 0 and calls["normalization"] == len(SENTENCES)
    want = {s: costs.get(s, 0.0) * calls.get(s, 0) for s in stage_clock.StageClock.STAGES}
    assert stages == want and sum(stages.values()) == now[0] - start

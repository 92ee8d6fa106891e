"""reproduction/peers.py: the benchmark's peers compute what they claim to. Nothing here asserts a
speed.

Needs requirements-peers.txt (scripts/setup_peers.sh); skipped without it, as the README's
test command does not install it.
"""

import conftest
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")
pytest.importorskip("minicons")

from reproduction import peers  # noqa: E402

SENTENCE = "The cat sat on the mat, a dog ran far away."


@pytest.fixture(scope="module")
def built(tokenizer):
  config = conftest.tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=32)
  return peers.build_peers(list(peers.PEERS), config, tokenizer, 32, threads=1)


def _pieces(built):
  """The sentence's ids ([SOS] pieces [EOS]) and the peers' BertForMaskedLM."""
  return built["bert@torch"].host.encode(SENTENCE).ids, built["minicons@torch"]._scorer.model


def test_names_and_what_each_stands_beside(built, tokenizer):
  assert {n: (p.versus, p.tasks) for n, p in built.items()} == {
    "bert@torch": ("tta", ("sts", "rerank")),
    "bert@onnxruntime": ("tta", ("sts", "rerank")),
    "copies@torch": ("bilm", ("sts",)),
    "minicons@torch": ("bilm", ("rerank",)),
  }
  ids, _ = _pieces(built)
  assert ids == tokenizer.encode(SENTENCE)  # the host encoder frames sentences as ours
  with pytest.raises(ValueError, match="unknown peers"):
    peers.build_peers(["bert@tpu"], None, tokenizer, 32, threads=1)


def test_onnxruntime_computes_what_torch_computes_with_attention_fused(built):
  config = conftest.tiny_config()
  fused = built["bert@onnxruntime"].describe()["fused_operators"]
  for task in ("sts", "rerank"):
    assert fused[task]["Attention"] == config.num_hidden_layers
    assert fused[task]["SkipLayerNormalization"] == 2 * config.num_hidden_layers
  eager = built["bert@torch"]
  onnx = built["bert@onnxruntime"]
  np.testing.assert_allclose(
    onnx.call("sts", SENTENCE)(), eager.call("sts", SENTENCE)(), rtol=0, atol=1e-5
  )
  assert onnx.call("rerank", SENTENCE)() == pytest.approx(
    eager.call("rerank", SENTENCE)(), abs=1e-4
  )


def test_one_pass_calls_are_the_mean_over_pieces_and_the_sum_of_piece_log_probs(built):
  ids, mlm = _pieces(built)
  with torch.inference_mode():
    out = mlm(input_ids=torch.tensor([ids]), output_hidden_states=True)
  hidden = out.hidden_states[-1][0].numpy()
  log_probs = torch.log_softmax(out.logits[0], -1).numpy()
  np.testing.assert_allclose(
    built["bert@torch"].call("sts", SENTENCE)(), hidden[1:-1].mean(0), rtol=0, atol=1e-5
  )
  want = sum(log_probs[t, ids[t]] for t in range(1, len(ids)))  # [EOS] scored, [SOS] not
  assert built["bert@torch"].call("rerank", SENTENCE)() == pytest.approx(want, abs=1e-4)


def test_masked_peers_mask_one_piece_per_copy(built, tokenizer):
  ids, mlm = _pieces(built)
  vectors, pll = [], 0.0
  for position in range(1, len(ids) - 1):  # each word piece, one copy at a time
    copy = list(ids)
    copy[position] = tokenizer.mask_id
    with torch.inference_mode():
      out = mlm(input_ids=torch.tensor([copy]), output_hidden_states=True)
    vectors.append(out.hidden_states[-1][0, position].numpy())
    pll += float(torch.log_softmax(out.logits[0, position], -1)[ids[position]])
  np.testing.assert_allclose(
    built["copies@torch"].call("sts", SENTENCE)(), np.mean(vectors, 0), rtol=0, atol=1e-5
  )
  assert built["minicons@torch"].call("rerank", SENTENCE)() == pytest.approx(pll, abs=1e-3)


def test_calls_lap_the_stage_clock(built):
  peer = built["bert@onnxruntime"]
  peer.clock.take()
  peer.call("sts", SENTENCE)()
  stages = peer.clock.take()
  assert stages["tokenization"] > 0 and stages["graph"] > 0


@pytest.mark.parametrize("name", ["bert@torch", "bert@onnxruntime"])
def test_batched_rerank_equals_one_sentence_at_a_time(built, name):
  """Padding and the token-budget batches change no score: a budget of 24 tokens splits the
  sentences into several padded batches."""
  peer = built[name]
  texts = [SENTENCE, "the cat", "", "a dog ran far away . the mat sat on the cat", "run"]
  one_by_one = [peer.call("rerank", t)() for t in texts]
  np.testing.assert_allclose(peer.score_batch(texts, 24, 8), one_by_one, rtol=0, atol=1e-4)

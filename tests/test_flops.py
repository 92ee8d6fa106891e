"""FLOP counts (lm/flops.py), checked by hand against the formulas."""

from conftest import tiny_config
import pytest

import kinds
from lm import flops
from lm import inference
import modeling
import tokenization

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "."]
# The shapes the hand counts below use: D=4, I=8, one layer, V=50.
SMALL = dict(
  vocab_size=50, hidden_size=4, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8
)


def small(**overrides):
  return tiny_config(**dict(SMALL, **overrides))


def test_encoder_flops_by_hand():
  # n=3, D=4, I=8, one layer: QKVO 4*2*3*4*4=384, QK^T and PV 2*2*9*4=144,
  # FFN 2*2*3*4*8=384.
  assert flops.encoder_flops(small(), 3) == 912
  assert flops.encoder_flops(small(num_hidden_layers=3), 3) == 3 * 912
  # Head: 2*D*D + 2*D*V per position.
  assert flops.head_flops(small(), 2) == 2 * (32 + 400)


def test_call_weight_bytes_count_every_matrix_once():
  # The model's own kernels: every encoder matmul, and the head's transform and table.
  model = modeling.build_model(small(num_hidden_layers=2), "tta")
  kernels = sum(
    int(v.shape.num_elements())
    for v in model.weights
    if v.shape.rank == 2 and "embeddings" not in v.path and "predictions" not in v.path
  )
  assert flops.call_weight_bytes(model.config, "sts") == 4 * kernels == 4 * 2 * (4 * 16 + 2 * 32)
  head = 4 * (4 * 4 + 4 * 50)  # transform D x D and the V x D table
  assert flops.call_weight_bytes(model.config, "rerank") == 4 * kernels + head
  assert flops.call_weight_bytes(model.config, "sts", bytes_per_value=2) == 2 * kernels


def test_call_flops_follow_the_inference_protocol():
  config = small()
  enc = flops.encoder_flops(config, 7)

  def head(m):
    return flops.head_flops(config, m)

  def total(kind, task, **kw):
    return flops.call_flops(config, kind, task, 7, **kw)["total"]

  # n = 7 tokens: 5 word pieces, 6 scored tokens ([EOS] in, [SOS] out).
  assert total("tta", "sts") == total("unilm", "sts") == enc
  assert total("bilm", "sts") == 5 * enc
  assert total("tta", "rerank") == enc + head(6)
  assert total("unilm", "rerank") == enc + head(6)
  assert total("bilm", "rerank") == 6 * enc + head(6)
  assert total("tta", "rerank", score_sos=True) == enc + head(7)
  # Nothing predicts the uniLM's [SOS].
  assert total("unilm", "rerank", score_sos=True) == enc + head(6)
  assert total("bilm", "rerank", score_eos=False) == 5 * enc + head(5)
  # An empty sentence ([SOS] [EOS]): no masked copies for its vector.
  assert flops.call_flops(config, "bilm", "sts", 2)["total"] == 0
  with pytest.raises(ValueError, match="task"):
    flops.call_flops(config, "tta", "translate", 7)


def test_scored_positions_match_inference(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + WORDS) + "\n")
  tokenizer = tokenization.FullTokenizer(str(vocab))
  config = small(vocab_size=tokenizer.vocab_size)
  for kind in ("tta", "bilm", "unilm"):
    for score_sos in (False, True):
      lm = inference.NeuralLM(modeling.build_model(config, kind), tokenizer, score_sos=score_sos)
      result = lm.score(["the cat sat on the mat ."])[0]
      assert result.num_tokens == len(kinds.scored_positions(kind, 9, score_sos=score_sos))
      assert result.num_tokens == flops.call_flops(config, kind, "rerank", 9, score_sos=score_sos)[
        "head"
      ] // (flops.head_flops(config, 1))


def test_flops_formula_matches_design_figures():
  paper = modeling.TTAConfig(vocab_size=30000)
  encoder, head = flops.training_flops_per_token(paper, seq_length=32)
  # DESIGN.md §6: ~20 MFLOP encoder and ~31 MFLOP softmax per token.
  assert 18e6 < encoder < 21e6 and 30e6 < head < 32e6
  _, continuous = flops.training_flops_per_token(paper, 32, "continuous", 512)
  assert continuous == 4 * 512 * 512
  assert flops.training_flops(paper, 10, 5, 32) == 3 * (10 * encoder + 5 * head)

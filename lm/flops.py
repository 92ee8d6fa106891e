"""Analytic matmul FLOPs of the models: one owner for every FLOP count.

Counting 2 FLOPs per multiply-add and matmuls only (embedding gathers,
LayerNorm, softmax, GELU and the optimizer are elementwise and ignored), with
D = hidden_size, I = intermediate_size, L = num_hidden_layers,
V = vocab_size, E = the continuous head's target width, n = sequence length.

Used by training (tokens/s -> achieved GFLOP/s) and by the runtime benchmark
(FLOPs of one inference call, FLOP floors).
"""

import kinds

TASKS = ("sts", "rerank")


def encoder_flops(config, seq_length):
  """Matmul FLOPs of the encoder layers on one sequence of `seq_length`.

  Per layer:
    query, key, value and output projections  4 * 2nD^2
    attention scores Q K^T and context P V    2 * 2n^2 D   (all heads)
    feed-forward D -> I -> D                  2 * 2nDI
  T-TA's keys/values come from the embedding output rather than the
  previous layer, but each layer still projects them, so the count is the
  same for every model type. The uniLM's causal mask and T-TA's diagonal
  mask do not shrink the dense matmuls, so they are counted in full.

  Args:
    config: `modeling.TTAConfig`.
    seq_length: int, or float for a mean padded length.

  Returns:
    int (float for a float seq_length).
  """
  n = seq_length
  d = config.hidden_size
  per_layer = 8 * n * d * d + 4 * n * n * d + 4 * n * d * config.intermediate_size
  return config.num_hidden_layers * per_layer


def head_flops(config, positions):
  """Matmul FLOPs of the LM head evaluated at `positions` positions at
  inference (log-probabilities over the whole vocabulary).

  Softmax head: transform D -> D (2D^2) and the tied V-wide output
  projection (2DV) per position. Continuous head (ELMo-C): transform,
  projection D -> E (2DE) and the cosine against all V targets (2EV).
  """
  d, v = config.hidden_size, config.vocab_size
  if config.output_layer == "continuous":
    e = config.target_embedding_size or d
    per_position = 2 * d * d + 2 * d * e + 2 * e * v
  else:
    per_position = 2 * d * d + 2 * d * v
  return positions * per_position


def call_flops(config, model_type, task, num_tokens, score_sos=False, score_eos=True):
  """Analytic matmul FLOPs of one sentence through the inference API.

  n = num_tokens (word pieces plus [SOS] and [EOS]); m = scored tokens
  (n - 1 by default: [EOS] scored, [SOS] not); w = n - 2 word pieces.

    task    tta / unilm                   bilm / bert
    sts     enc(n)                        w * enc(n)          (w copies)
    rerank  enc(n) + head(m)              m * enc(n) + head(m)

  with enc = `encoder_flops` and head = `head_flops`. The biLM runs one
  masked copy of the whole sentence per position, but its head only at the
  masked position (lm/inference.py gathers it first), so its head cost equals
  T-TA's. Counted on the real length n: pad positions are not useful work,
  so GFLOP/s figures are "useful" FLOP rates.

  Args:
    config: `modeling.TTAConfig`.
    model_type: one of kinds.MODEL_TYPES.
    task: "sts" or "rerank".
    num_tokens: int, n.
    score_sos, score_eos: as in `inference.NeuralLM`.

  Returns:
    dict with int "encoder", "head" and "total".
  """
  if task not in TASKS:
    raise ValueError(f"task {task!r} is not one of {TASKS}")
  copies = kinds.get(model_type).masked_copies
  if task == "sts":
    passes = max(num_tokens - 2, 0) if copies else 1
    head = 0
  else:
    m = len(kinds.scored_positions(model_type, num_tokens, score_sos, score_eos))
    passes = m if copies else 1
    head = head_flops(config, m)
  encoder = passes * encoder_flops(config, num_tokens)
  return {"encoder": encoder, "head": head, "total": encoder + head}


def call_weight_bytes(config, task, bytes_per_value=4):
  """Bytes of weight matrices one inference call reads at least once, float32 by default.

  Every matmul kernel of the encoder (L x (4D^2 + 2DI)), and for "rerank" the head's
  transform (D^2) and the V x D output table; the embedding gather reads only the rows of the
  sentence's tokens and is left out. A batch-1 call whose weights do not fit in the CPU's
  caches streams them from memory, so bytes / memory bandwidth bounds its time from below,
  whatever the FLOPs (a 3x512 encoder is 38 MB, a 29.5k x 512 table 60 MB).
  """
  if task not in TASKS:
    raise ValueError(f"task {task!r} is not one of {TASKS}")
  d = config.hidden_size
  values = config.num_hidden_layers * (4 * d * d + 2 * d * config.intermediate_size)
  if task == "rerank":
    values += d * d + d * config.vocab_size
  return values * bytes_per_value


def training_flops_per_token(config, seq_length, output_layer="softmax", target_size=None):
  """Forward FLOPs of training, per input token and per target token.

  The encoder term is `encoder_flops` per token of a batch padded to
  `seq_length` (the mean padded length T each query attends over). The head
  differs from `head_flops`: training scores each target against itself
  only for the continuous head (cosine loss), so per TARGET token
    softmax     2 D^2 + 2 D V  (transform, logits)
    continuous  2 D^2 + 2 D E  (transform, W h)

  Args:
    config: `modeling.TTAConfig`.
    seq_length: float, mean padded length T of the batches.
    output_layer: "softmax" or "continuous".
    target_size: E for the continuous head (default hidden_size).

  Returns:
    (encoder_flops, head_flops): forward FLOPs per input token and per
    target token.
  """
  d = config.hidden_size
  encoder = encoder_flops(config, float(seq_length)) / float(seq_length)
  width = (target_size or d) if output_layer == "continuous" else (config.vocab_size)
  return float(encoder), float(2 * d * d + 2 * d * width)


def training_flops(
  config, num_tokens, num_head_tokens, seq_length, output_layer="softmax", target_size=None
):
  """Training FLOPs for num_tokens through the encoder and num_head_tokens
  through the output head; see `training_flops_per_token`.

  Forward + backward is about 3x the forward: the backward pass computes two
  matmuls (input and weight gradients) per forward matmul.
  """
  encoder, head = training_flops_per_token(config, seq_length, output_layer, target_size)
  return 3.0 * (num_tokens * encoder + num_head_tokens * head)

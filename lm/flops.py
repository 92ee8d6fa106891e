"""Analytic matmul FLOPs (2 per multiply-add; gathers, LayerNorm, softmax, GELU ignored): D hidden,
I intermediate, L layers, V vocab, E the continuous head's width, n sequence length.
"""

import kinds

TASKS = ("sts", "rerank")


def encoder_flops(config, seq_length):
  """Per layer 8nD^2 + 4n^2 D + 4nDI, for every kind (masks shrink no dense matmul)."""
  n = seq_length
  d = config.hidden_size
  per_layer = 8 * n * d * d + 4 * n * n * d + 4 * n * d * config.intermediate_size
  return config.num_hidden_layers * per_layer


def head_flops(config, positions):
  """2D^2 + 2DV per position (continuous head: 2D^2 + 2DE + 2EV)."""
  d, v = config.hidden_size, config.vocab_size
  if config.output_layer == "continuous":
    e = config.target_embedding_size or d
    per_position = 2 * d * d + 2 * d * e + 2 * e * v
  else:
    per_position = 2 * d * d + 2 * d * v
  return positions * per_position


def call_flops(config, model_type, task, num_tokens, score_sos=False, score_eos=True):
  """{"encoder", "head", "total"} matmul FLOPs of one sentence of n = num_tokens:

    task    tta / unilm        bilm / bert
    sts     enc(n)             (n - 2) * enc(n)
    rerank  enc(n) + head(m)   m * enc(n) + head(m)      m = scored tokens

  Counted on the real length: "useful" FLOPs.
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
  """Bytes of weight matrices one call reads: L(4D^2 + 2DI) (+ D^2 + VD for "rerank"); over
  memory bandwidth, a floor for a batch-1 call whose weights exceed the caches.
  """
  if task not in TASKS:
    raise ValueError(f"task {task!r} is not one of {TASKS}")
  d = config.hidden_size
  values = config.num_hidden_layers * (4 * d * d + 2 * d * config.intermediate_size)
  if task == "rerank":
    values += d * d + d * config.vocab_size
  return values * bytes_per_value


def training_flops_per_token(config, seq_length, output_layer="softmax", target_size=None):
  """Forward FLOPs of training: (per input token, at mean padded length `seq_length`; per
  target token: 2D^2 + 2DV softmax, 2D^2 + 2DE continuous, which scores only its own target).
  """
  d = config.hidden_size
  encoder = encoder_flops(config, float(seq_length)) / float(seq_length)
  width = (target_size or d) if output_layer == "continuous" else (config.vocab_size)
  return float(encoder), float(2 * d * d + 2 * d * width)


def training_flops(
  config, num_tokens, num_head_tokens, seq_length, output_layer="softmax", target_size=None
):
  """Training FLOPs: 3x the forward (the backward has two matmuls per forward one)."""
  encoder, head = training_flops_per_token(config, seq_length, output_layer, target_size)
  return 3.0 * (num_tokens * encoder + num_head_tokens * head)

"""The ONNX Runtime backend: `ScoringGraph`'s methods as ONNX graphs written from the model's
weights with com.microsoft fused ops, not converted from TF (docs/DESIGN.md §4.4).

B rows, T tokens per row, D hidden, V vocab, L max_position_embeddings, N scored positions.
"""

import numpy as np

import modeling

# onnx writes the graphs, onnxruntime runs them (lm/inference.py checks they are installed).
PACKAGES = ("onnxruntime", "onnx")
_MS_DOMAIN = "com.microsoft"
# BERT's LayerNorm epsilon, as modeling.LayerNorm.
_EPSILON = 1e-12
_WORD_TABLE = "word_embeddings"
# Projections of the embedding output are read from [V, K] tables (`_Embedding.project`; T-TA's
# keys and values: 363 MB at paper size) up to this size; a larger one is a matmul.
MAX_PROJECTION_TABLE_BYTES = 1 << 30
# onnx.TensorProto's element types, for Cast.
_FLOAT, _INT32, _BOOL = 1, 6, 9


def check_model(model):
  """ValueError naming what `model` has that this backend cannot build."""
  config = model.config
  if config.output_layer != "softmax" or config.hidden_act != "gelu":
    raise ValueError(
      "backend 'onnxruntime' builds BERT's softmax head and exact-GELU blocks; this model has "
      f"output_layer {config.output_layer!r} and hidden_act {config.hidden_act!r}: use backend "
      "'tf' or 'openvino'"
    )


class OnnxFunctions(object):
  """`ScoringGraph`'s methods run by ONNX Runtime, NumPy out; each graph built at its first call."""

  def __init__(self, model, threads=None, continuation=None):
    """threads: intra-op threads (None: ORT's default); continuation: bool [V] (`ScoringGraph`)."""
    check_model(model)
    self.model = model
    self._threads = threads
    self._continuation = None if continuation is None else np.asarray(continuation, bool)
    self._sessions = {}
    # Large tables the graphs take as inputs (`_Graph.shared_weight`), one copy for all of them.
    self._shared = {}

  def function(self, name):
    functions = {
      "encode": self.encode,
      "token_log_probs": self.token_log_probs,
      "word_l2r_log_probs": self.word_l2r_log_probs,
      "masked_copy_scores": self.masked_copy_scores,
      "sentence_vectors": self.sentence_vectors,
    }
    if name not in functions:
      raise ValueError(
        f"backend 'onnxruntime' has no graph for ScoringGraph.{name}; it has {sorted(functions)}"
      )
    return functions[name]

  def encode(self, input_ids, input_mask):
    """int32 [B, T] each -> (sequence_output, embedding_output), float32 [B, T, D] each."""
    return tuple(self._run("encode", self.model.kind.attention, input_ids, input_mask))

  def token_log_probs(self, input_ids, input_mask, score_mask):
    """One pass, scoring "piece": float32 [B, T], log p(input_ids) where score_mask is 1, else 0."""
    return self._one_pass_log_probs(input_ids, input_mask, score_mask, "piece")

  def word_l2r_log_probs(self, input_ids, input_mask, score_mask):
    return self._one_pass_log_probs(input_ids, input_mask, score_mask, "word_l2r")

  def _one_pass_log_probs(self, input_ids, input_mask, score_mask, scoring):
    input_ids = np.asarray(input_ids, np.int32)
    where = np.flatnonzero(score_mask)  # [N], row * T + position
    # Output t predicts the token at t + offset (kinds.Kind.prediction_offset).
    read_at = where - self.model.kind.prediction_offset
    log_probs, _ = self.scores(
      self.model.kind.one_pass_attention(scoring),
      input_ids,
      input_mask,
      read_at,
      input_ids.flat[where],
    )
    out = np.zeros(input_ids.shape, np.float32)
    out.flat[where] = log_probs
    return out

  def scores(self, attention, input_ids, input_mask, read_at, targets):
    """Encoder, then the LM head at `read_at` int [N] (rows of the flattened [B * T] outputs)
    only: (log p(targets) float32 [N], last layer there float32 [N, D]).
    """
    return tuple(self._run("scores", attention, input_ids, input_mask, read_at, targets))

  def masked_copy_scores(self, copies, copy_mask, positions, targets):
    copies = np.asarray(copies, np.int32)
    rows, length = copies.shape
    read_at = np.arange(rows) * length + np.asarray(positions)
    return self.scores(self.model.kind.attention, copies, copy_mask, read_at, targets)

  def sentence_vectors(self, input_ids, input_mask):
    """Every pooling of one pass, float32 [B, D] each, as `ScoringGraph.sentence_vectors`."""
    pooled, embedded, first_last = self._run(
      "vectors", self.model.kind.attention, input_ids, input_mask, pooling_weights(input_mask)
    )
    return {
      "context": pooled[:, 0],
      "embed": embedded[:, 0],
      "first_last": first_last[:, 0],
      "first": pooled[:, 1],
      "last": pooled[:, 2],
    }

  def _run(self, name, attention, *arrays):
    """Graph `name` under `attention` on arrays in its input order; one session per pair."""
    key = name, attention
    if key not in self._sessions:
      g = _GRAPHS[name](self.model, self._shared, attention, self._continuation)
      session = g.session(self._threads)
      inputs = [
        (spec.name, np.float32 if spec.type == "tensor(float)" else np.int32)
        for spec in session.get_inputs()
        if spec.name not in g.fed
      ]
      # NumPy inputs are read in place: feeding the shared tables copies nothing.
      self._sessions[key] = session, inputs, {n: self._shared[n] for n in g.fed}
    session, inputs, feeds = self._sessions[key]
    feeds = dict(feeds)
    feeds.update((key, np.asarray(array, dtype)) for (key, dtype), array in zip(inputs, arrays))
    return session.run(None, feeds)


def pooling_weights(input_mask):
  """int [B, T] mask -> float32 [B, 3, T]: the mean over the word pieces (all zero for a row
  without any), the first token, the last real token.
  """
  input_mask = np.asarray(input_mask)
  rows, length = input_mask.shape
  lengths = input_mask.sum(axis=1)
  positions = np.arange(length)
  words = (positions >= 1) & (positions < lengths[:, None] - 1)  # [B, T]
  weights = np.zeros((rows, 3, length), np.float32)
  # max(., 1): a row without pieces sums nothing and stays all zero.
  weights[:, 0] = words / np.maximum(words.sum(axis=1, keepdims=True), 1)
  weights[:, 1, 0] = 1.0
  weights[np.arange(rows), 2, lengths - 1] = 1.0
  return weights


# ---------------------------------------------------------------- graph building


class _Graph(object):
  """An ONNX graph under construction; `shared`: the large tables a model's graphs share, `fed`:
  those this graph takes as inputs.
  """

  def __init__(self, shared):
    self.nodes, self.weights, self.inputs, self.outputs = [], [], [], []
    self.shared, self.fed = shared, []
    self._count = 0

  def input(self, name, dtype, shape):
    from onnx import helper  # pylint: disable=g-import-not-at-top

    element_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    self.inputs.append(helper.make_tensor_value_info(name, element_type, shape))
    return name

  def weight(self, array, name=None):
    from onnx import numpy_helper  # pylint: disable=g-import-not-at-top

    name = name or self._fresh("weight")
    self.weights.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
    return name

  def shared_weight(self, name, make):
    """A large constant taken as a graph input so a model's sessions hold one copy."""
    if name not in self.shared:
      self.shared[name] = np.ascontiguousarray(make(), np.float32)
    self.fed.append(name)
    return self.input(name, np.float32, list(self.shared[name].shape))

  def ints(self, values):
    return self.weight(np.asarray(values, np.int64))

  def op(self, op_type, *inputs, outputs=1, domain="", **attributes):
    """Adds a node; its output name (a list when `outputs` > 1). An input "" is omitted."""
    from onnx import helper  # pylint: disable=g-import-not-at-top

    names = [self._fresh(op_type) for _ in range(outputs)]
    self.nodes.append(helper.make_node(op_type, list(inputs), names, domain=domain, **attributes))
    return names[0] if outputs == 1 else names

  def ms_op(self, op_type, *inputs, **attributes):
    return self.op(op_type, *inputs, domain=_MS_DOMAIN, **attributes)

  def output(self, name, as_name):
    from onnx import helper  # pylint: disable=g-import-not-at-top

    self.nodes.append(helper.make_node("Identity", [name], [as_name]))
    self.outputs.append(helper.make_empty_tensor_value_info(as_name))

  def session(self, threads):
    from onnx import helper  # pylint: disable=g-import-not-at-top
    import onnxruntime  # pylint: disable=g-import-not-at-top

    graph = helper.make_graph(self.nodes, "tta", self.inputs, self.outputs, self.weights)
    model = helper.make_model(
      graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_MS_DOMAIN, 1)]
    )
    options = onnxruntime.SessionOptions()
    if threads:
      options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    # Spin between a run's ~50 ops (waking a thread costs microseconds each), stop when it
    # returns: a pool spinning between calls takes a core from the Python or another graph's
    # pool (docs/runtime.md).
    options.add_session_config_entry("session.force_spinning_stop", "1")
    return onnxruntime.InferenceSession(
      model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )

  def _fresh(self, prefix):
    self._count += 1
    return f"{prefix}_{self._count}"


def _numpy(tensor):
  return np.asarray(tensor, np.float32)


def _layer_norm(g, layer):
  return g.weight(_numpy(layer.gamma)), g.weight(_numpy(layer.beta))


def _gelu_dense(g, x, dense):
  return g.ms_op(
    "BiasGelu", g.op("MatMul", x, g.weight(_numpy(dense.kernel))), g.weight(_numpy(dense.bias))
  )


def _block_output(g, block, context, skip):
  """A `TransformerBlock` after attention; the residual adds `skip`, the query stream."""
  gamma, beta = _layer_norm(g, block.attention_layer_norm)
  projected = g.op("MatMul", context, g.weight(_numpy(block.attention_output.kernel)))
  bias = g.weight(_numpy(block.attention_output.bias))
  attention = g.ms_op(
    "SkipLayerNormalization", projected, skip, gamma, beta, bias, epsilon=_EPSILON
  )
  ffn = g.op(
    "MatMul",
    _gelu_dense(g, attention, block.intermediate),
    g.weight(_numpy(block.output_dense.kernel)),
  )
  gamma, beta = _layer_norm(g, block.output_layer_norm)
  bias = g.weight(_numpy(block.output_dense.bias))
  return g.ms_op("SkipLayerNormalization", ffn, attention, gamma, beta, bias, epsilon=_EPSILON)


def _encoder(g, model, input_ids, input_mask, attention, continuation):
  """`TransformerLM.encode` under `attention`: (sequence_output, embedding_output, first block)."""
  shape = g.op("Shape", input_ids)  # [2]: B, T
  length = g.op("Slice", shape, g.ints([1]), g.ints([2]))  # [1]: T
  masks = _AttentionMasks(g, model, attention, continuation, input_ids, input_mask, length)
  embedding = _Embedding(g, model, input_ids, length)
  if model.kind.input_isolation:
    sequence, first = _tta_layers(g, model, embedding, masks, shape, length)
    return sequence, embedding.output, first
  # BERT's first layer reads its queries, keys and values from tables too (`_Embedding.project`);
  # the others project the previous layer's output inside the Attention op.
  hidden = first = embedding.output
  for l, block in enumerate(model.encoder_layers):
    projections = (block.query, block.key, block.value)
    kernel = np.concatenate([_numpy(p.kernel) for p in projections], axis=1)  # [D, 3D]
    bias = np.concatenate([_numpy(p.bias) for p in projections])
    if l == 0:
      query_key_value, bias = embedding.project(kernel, bias, "query_key_value_by_token")
      context = g.ms_op(
        "MultiHeadAttention",
        *g.op("Split", query_key_value, axis=2, outputs=3),
        g.weight(bias),
        masks.input_mask,
        masks.pattern,
        **masks.attributes,
      )
    else:
      context = g.ms_op(
        "Attention",
        hidden,
        g.weight(kernel),
        g.weight(bias),
        masks.input_mask,
        "",
        masks.pattern,
        **masks.attributes,
      )
    hidden = _block_output(g, block, context, hidden)
    if l == 0:
      first = hidden
  return hidden, embedding.output, first


def _positions(model):
  """float32 [L, D], the position embeddings (plus segment 0's)."""
  embeddings = model.embeddings
  position = _numpy(embeddings.position_embeddings)
  if embeddings.token_type_embeddings is not None:
    # Every input is segment 0 (ScoringGraph feeds no segment ids): its row joins the positions.
    position = position + _numpy(embeddings.token_type_embeddings)[0]
  return position


class _AttentionMasks(object):
  """Who attends whom under an attention pattern, as the attention ops take it.

  Attributes:
    pattern: float32 [1, 1, T, T] bias sliced from `modeling.create_attention_mask`'s table; for a
      word pattern [B, 1, T, T] computed from the ids, padding included; "" for the biLM.
    has_key: float32 [B, T, 1], 1 where a query has some key, or "". TF's masked softmax gives a
      query without keys (one-token T-TA row) a zero context, the additive mask a uniform one over
      the masked keys, its own among them: multiplying by has_key keeps it self-unknown.
    input_mask: int32 [B, T] key padding mask, or "" when `pattern` holds the padding.
  """

  def __init__(self, g, model, attention, continuation, input_ids, input_mask, length):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    self.input_mask = input_mask
    self.attributes = {
      "num_heads": model.config.num_attention_heads,
      "mask_filter_value": modeling._MASK_ADDER,  # pylint: disable=protected-access
    }
    self.pattern = self.has_key = ""
    if attention in modeling.WORD_PATTERNS:
      if continuation is None:
        raise ValueError(
          f"{model.model_type} with the word attention pattern {attention!r} needs the vocab's "
          "continuation pieces: OnnxFunctions(model, continuation=tokenizer.continuation_flags())"
        )
      allowed = _word_pattern_keys(g, attention, continuation, input_ids, input_mask, length)
      bias = g.op(
        "Where",
        allowed,
        g.weight(np.float32(0)),
        g.weight(np.float32(modeling._MASK_ADDER)),  # pylint: disable=protected-access
      )  # [B, T, T]
      self.pattern = g.op("Unsqueeze", bias, g.ints([1]))  # [B, 1, T, T]
      self.input_mask = ""
      # A query of a one-token row has no key (word_l2r hides its own).
      self.has_key = g.op("ReduceMax", g.op("Cast", allowed, to=_FLOAT), axes=[2], keepdims=1)
      return
    allowed = modeling.create_attention_mask(
      tf.ones([1, model.config.max_position_embeddings], tf.int32), attention
    ).numpy()  # [1, 1, L, L], 1 where query f may see key t
    if allowed.all():
      return
    square = g.op("Concat", length, length, axis=0)  # [2]: T, T
    bias = ((1.0 - allowed) * self.attributes["mask_filter_value"]).astype(np.float32)
    self.pattern = g.op("Slice", g.weight(bias), g.ints([0, 0]), square, g.ints([2, 3]))
    if not np.diagonal(allowed[0, 0]).all():
      allowed_keys = g.op("Slice", g.weight(allowed[0, 0].T), g.ints([0, 0]), square)  # [T, T]
      counts = g.op("MatMul", g.op("Cast", input_mask, to=_FLOAT), allowed_keys)  # [B, T]
      has_key = g.op("Cast", g.op("Greater", counts, g.weight(np.float32(0))), to=_FLOAT)
      self.has_key = g.op("Unsqueeze", has_key, g.ints([2]))


def _word_ids(g, continuation, input_ids):
  """int32 [B, T], each token's word: `modeling.token_word_ids` in ONNX ops."""
  is_continuation = g.op("Gather", g.weight(np.asarray(continuation, bool)), input_ids)
  starts = g.op("Sub", g.weight(np.int32(1)), g.op("Cast", is_continuation, to=_INT32))
  return g.op("CumSum", starts, g.weight(np.int64(1)))


def _word_l2r_keys(g, words, length):
  """bool [B, F=T, T] of `modeling._word_l2r_keys` (the rule's owner) in ONNX ops."""
  positions = g.op(
    "Range",
    g.weight(np.int64(0)),
    g.op("Squeeze", length, g.ints([0])),
    g.weight(np.int64(1)),
  )  # [T]
  later = g.op(
    "GreaterOrEqual",
    g.op("Unsqueeze", positions, g.ints([0])),  # keys [1, T]
    g.op("Unsqueeze", positions, g.ints([1])),  # queries [F, 1]
  )  # [F, T]
  same_word = g.op(
    "Equal", g.op("Unsqueeze", words, g.ints([2])), g.op("Unsqueeze", words, g.ints([1]))
  )  # [B, F, T]
  return g.op("Not", g.op("And", same_word, later))


# The word patterns' rules (modeling.WORD_PATTERNS), as `modeling._PATTERN_KEYS` holds them.
_WORD_PATTERN_KEYS = {"word_l2r": _word_l2r_keys}


def _word_pattern_keys(g, attention, continuation, input_ids, input_mask, length):
  """bool [B, F=T, T], keys query f may see under the word pattern, padded keys never."""
  words = _word_ids(g, continuation, input_ids)
  real = g.op("Cast", g.op("Unsqueeze", input_mask, g.ints([1])), to=_BOOL)  # [B, 1, T]
  return g.op("And", _WORD_PATTERN_KEYS[attention](g, words, length), real)


class _Embedding(object):
  """E = LN(w + p) (`output`, float32 [B, T, D]) and projections of E read from tables."""

  def __init__(self, g, model, input_ids, length):
    self._g, self._input_ids, self._length = g, input_ids, length
    embeddings = model.embeddings
    self._word = _numpy(embeddings.word_embeddings)
    self._positions = _positions(model)
    self._gamma, self._beta = (
      _numpy(embeddings.layer_norm.gamma),
      _numpy(embeddings.layer_norm.beta),
    )
    summed = g.op(
      "Add",
      g.op("Gather", g.weight(self._word, _WORD_TABLE), input_ids),
      g.op("Slice", g.weight(self._positions), g.ints([0]), length),
    )  # [B, T, D]
    self.output, _, self._inverse_std = g.op(
      "LayerNormalization",
      summed,
      g.weight(self._gamma),
      g.weight(self._beta),
      axis=-1,
      epsilon=_EPSILON,
      outputs=3,
    )  # [B, T, D], [B, T, 1], [B, T, 1]

  def project(self, kernel, bias, table_name):
    """E @ kernel as ([B, T, K] name, float32 [K] bias to add), with no [B * T, D] x [D, K] matmul.

    LN(w + p) = ((w - mean w) + (p - mean p)) * gamma / std(w + p) + beta, so E @ kernel is a gather
    from a [V, K] table plus a slice of an [L, K] one, times 1 / std, plus beta @ kernel. A table
    over MAX_PROJECTION_TABLE_BYTES is a matmul instead.
    """
    g = self._g
    if self._word.shape[0] * kernel.shape[1] * 4 > MAX_PROJECTION_TABLE_BYTES:
      return g.op("MatMul", self.output, g.weight(kernel)), bias

    def projected(x):
      x = np.asarray(x, np.float64)
      return ((x - x.mean(axis=1, keepdims=True)) * self._gamma).astype(np.float32) @ kernel

    summed = g.op(
      "Add",
      g.op("Gather", g.shared_weight(table_name, lambda: projected(self._word)), self._input_ids),
      g.op("Slice", g.weight(projected(self._positions)), g.ints([0]), self._length),
    )  # [B, T, K]
    return g.op("Mul", summed, self._inverse_std), self._beta @ kernel + bias


def _tta_layers(g, model, embedding, masks, shape, length):
  """T-TA's blocks: (last, first) layer names."""
  blocks = model.encoder_layers
  # Input isolation: every layer's keys and values are projections of the embedding output
  # (columns key_0, value_0, key_1, ...), all read from one table.
  key_values, key_value_bias = embedding.project(
    *(_numpy(t) for t in model.fused_key_value_weights()), "key_value_by_token"
  )
  key_values = g.op("Split", key_values, axis=2, outputs=2 * len(blocks))  # 2L x [B, T, D]
  key_value_bias = np.split(key_value_bias, 2 * len(blocks))
  # The first query stream is LN([MASK] + position) in every row: it and its projection are
  # [L, D] tables sliced to T. The residual broadcasts [T, D] over the rows; the attention op
  # takes [B, T, D].
  stream = model.embeddings.mask_query(1, model.config.max_position_embeddings)  # [1, L, D]
  tables = (_numpy(stream[0]), _numpy(blocks[0].query(stream)[0]))
  skip, query = (g.op("Slice", g.weight(t), g.ints([0]), length) for t in tables)
  query = g.op("Expand", query, g.op("Concat", shape, g.ints([1]), axis=0))
  hidden = first = None
  for l, block in enumerate(blocks):
    query_bias = _numpy(block.query.bias)
    if l == 0:
      query_bias = np.zeros_like(query_bias)  # in the projection table already
    else:
      query = g.op("MatMul", hidden, g.weight(_numpy(block.query.kernel)))
    biases = [query_bias, key_value_bias[2 * l], key_value_bias[2 * l + 1]]
    context = g.ms_op(
      "MultiHeadAttention",
      query,
      key_values[2 * l],
      key_values[2 * l + 1],
      g.weight(np.concatenate(biases)),
      masks.input_mask,
      masks.pattern,
      **masks.attributes,
    )
    if masks.has_key:
      context = g.op("Mul", context, masks.has_key)
    hidden = _block_output(g, block, context, skip)
    skip = hidden  # the residual adds the query stream
    if l == 0:
      first = hidden
  return hidden, first


def _inputs(g):
  return g.input("input_ids", np.int32, ["B", "T"]), g.input("input_mask", np.int32, ["B", "T"])


# Each graph builder: (model, shared tables, attention pattern, continuation flags or None) ->
# `_Graph`.


def _encode_graph(model, shared, attention, continuation):
  g = _Graph(shared)
  sequence, embedding, _ = _encoder(g, model, *_inputs(g), attention, continuation)
  g.output(sequence, "sequence_output")
  g.output(embedding, "embedding_output")
  return g


def _scores_graph(model, shared, attention, continuation):
  """(input_ids, input_mask, read_at [N], targets [N]) -> (log_probs [N], hidden [N, D])."""
  g = _Graph(shared)
  sequence, _, _ = _encoder(g, model, *_inputs(g), attention, continuation)
  read_at = g.input("read_at", np.int32, ["N"])
  targets = g.input("targets", np.int32, ["N"])
  flat = g.op("Reshape", sequence, g.ints([-1, model.config.hidden_size]))  # [B * T, D]
  hidden = g.op("Gather", flat, read_at)  # [N, D]
  head = model.lm_head
  gamma, beta = _layer_norm(g, head.layer_norm)
  transformed = g.op(
    "LayerNormalization",
    _gelu_dense(g, hidden, head.transform),
    gamma,
    beta,
    axis=-1,
    epsilon=_EPSILON,
  )
  # Logits against the tied table, read in place ([V, D], transposed by the kernel).
  logits = g.op("Gemm", transformed, _WORD_TABLE, g.weight(_numpy(head.output_bias)), transB=1)
  # LogSoftmax, then the targets: ORT vectorises LogSoftmax, not ReduceLogSumExp (which cost
  # half as much again as the logits' matmul).
  log_softmax = g.op("LogSoftmax", logits, axis=1)  # [N, V]
  picked = g.op("GatherElements", log_softmax, g.op("Unsqueeze", targets, g.ints([1])), axis=1)
  log_probs = g.op("Squeeze", picked, g.ints([1]))
  g.output(log_probs, "log_probs")
  g.output(hidden, "hidden")
  return g


def _vectors_graph(model, shared, attention, continuation):
  """-> pooled [B, 3, D] (`pooling_weights` on the last layer), embedded, first_last [B, 1, D]."""
  g = _Graph(shared)
  sequence, embedding, first = _encoder(g, model, *_inputs(g), attention, continuation)
  pooling = g.input("pooling", np.float32, ["B", 3, "T"])
  word_mean = g.op("Slice", pooling, g.ints([0]), g.ints([1]), g.ints([1]))  # [B, 1, T]
  first_last = g.op("Mul", g.op("Add", first, sequence), g.weight(np.float32(0.5)))
  g.output(g.op("MatMul", pooling, sequence), "pooled")
  g.output(g.op("MatMul", word_mean, embedding), "embedded")
  g.output(g.op("MatMul", word_mean, first_last), "first_last")
  return g


_GRAPHS = {"encode": _encode_graph, "scores": _scores_graph, "vectors": _vectors_graph}

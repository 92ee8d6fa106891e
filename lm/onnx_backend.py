"""The ONNX Runtime backend of lm/inference.py (`NeuralLM(backend="onnxruntime")`).

`OnnxFunctions` gives `scoring_graph.ScoringGraph`'s methods with the same inputs and outputs, as
ONNX graphs written from the model's weights with ONNX Runtime's fused com.microsoft ops (not
converted from TF). Input isolation makes keys and values table reads; masks are -1e9 biases, so
output i stays bit for bit independent of token i (docs/DESIGN.md §4.4). A call runs no
TensorFlow op; TensorFlow runs only when a graph is built, to read the tables.

Dimensions: B = rows, T = tokens per row, D = hidden size, V = vocab size, L =
max_position_embeddings, N = scored positions, R = masked copies.
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
  """Raises ValueError when the backend cannot build `model`'s graphs, naming what it lacks."""
  config = model.config
  if config.output_layer != "softmax" or config.hidden_act != "gelu":
    raise ValueError(
      "backend 'onnxruntime' builds BERT's softmax head and exact-GELU blocks; this model has "
      f"output_layer {config.output_layer!r} and hidden_act {config.hidden_act!r}: use backend "
      "'tf' or 'openvino'"
    )


class OnnxFunctions(object):
  """`ScoringGraph`'s methods run by ONNX Runtime: the same inputs, NumPy outputs.

  Each graph (encoder alone, encoder + LM head at chosen rows, encoder + pooling) is built and
  loaded into its own session at its first call, so a NeuralLM builds only what its kind uses,
  with the weights the model has then (as the OpenVINO backend converts at the first call).
  """

  def __init__(self, model, threads=None, continuation=None):
    """Args: model, a `modeling.TransformerLM`; threads, ONNX Runtime's intra-op threads (None:
    its default, one per physical core); continuation, bool [V], the vocab's WordPiece
    continuation pieces (`tokenization.FullTokenizer.continuation_flags`), from which a graph with
    a word attention pattern finds the words (None for a model that never uses one), as
    `ScoringGraph`'s."""
    check_model(model)
    self.model = model
    self._threads = threads
    self._continuation = None if continuation is None else np.asarray(continuation, bool)
    self._sessions = {}
    # Large tables the graphs take as inputs (`_Graph.shared_weight`), one copy for all of them.
    self._shared = {}

  def function(self, name):
    """The method named like `ScoringGraph.<name>` (ValueError for one this backend lacks)."""
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
    """One pass (tta, tta_word, unilm), scoring "piece": float32 [B, T], log p(input_ids) where
    score_mask is 1, else 0.

    As `ScoringGraph.token_log_probs`: a kind with input isolation reads token t's distribution
    at output t under DMSA, unilm at output t-1.
    """
    return self._one_pass_log_probs(input_ids, input_mask, score_mask, "piece")

  def word_l2r_log_probs(self, input_ids, input_mask, score_mask):
    """`token_log_probs` scoring "word_l2r", as `ScoringGraph.word_l2r_log_probs`: a kind with
    input isolation under the word_l2r mask (words found in the graph from the input ids)."""
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
    """The encoder under `attention` (kinds.ATTENTION_PATTERNS), then the LM head at chosen
    rows: the graph every scoring method runs.

    Args:
      input_ids, input_mask: int32 [B, T].
      read_at: int [N], rows of the flattened [B * T] outputs to run the head at.
      targets: int [N], the token whose log-probability each row gives.

    Returns:
      (log p(targets) float32 [N], the last layer at read_at float32 [N, D]).
    """
    return tuple(self._run("scores", attention, input_ids, input_mask, read_at, targets))

  def masked_copy_scores(self, copies, copy_mask, positions, targets):
    """Masked copies (bilm, bert) -> (log p(targets) float32 [R], last layer at the mask [R, D]).

    Args:
      copies, copy_mask: int32 [R, T]; row r has token positions[r] replaced by [MASK].
      positions, targets: int32 [R], the masked position and the token it held.
    """
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
    """Runs graph `name` with the attention pattern `attention` (built at its first call) on
    arrays in its input order. Graphs of one name and pattern are one session (tta's
    token_log_probs and masked_copy_scores; unilm's two scorings)."""
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
  """The poolings of `sentence_vectors` as weights over positions.

  Row 0 averages the word pieces (positions 1 .. n-2, boundaries excluded; all zero for a row
  without any), row 1 picks the first token, row 2 the last real one.

  Args:
    input_mask: int [B, T].

  Returns:
    float32 [B, 3, T].
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
  """An ONNX graph under construction: nodes, weights (initializers), inputs and outputs.

  Attributes:
    shared: name -> array of the large tables the graphs of one model share.
    fed: the names of `shared` this graph takes as inputs.
  """

  def __init__(self, shared):
    self.nodes, self.weights, self.inputs, self.outputs = [], [], [], []
    self.shared, self.fed = shared, []
    self._count = 0

  def input(self, name, dtype, shape):
    """Declares a graph input (dtype a NumPy type, shape with str for unknown dims)."""
    from onnx import helper  # pylint: disable=g-import-not-at-top

    element_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    self.inputs.append(helper.make_tensor_value_info(name, element_type, shape))
    return name

  def weight(self, array, name=None):
    """A constant tensor (a copy of `array`); returns its name."""
    from onnx import numpy_helper  # pylint: disable=g-import-not-at-top

    name = name or self._fresh("weight")
    self.weights.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
    return name

  def shared_weight(self, name, make):
    """A large constant taken as a graph input rather than copied into each graph, so the
    sessions of one model hold one copy; `make()` computes it for the first graph needing it."""
    if name not in self.shared:
      self.shared[name] = np.ascontiguousarray(make(), np.float32)
    self.fed.append(name)
    return self.input(name, np.float32, list(self.shared[name].shape))

  def ints(self, values):
    """A constant int64 vector (shapes, axes, slice bounds)."""
    return self.weight(np.asarray(values, np.int64))

  def op(self, op_type, *inputs, outputs=1, domain="", **attributes):
    """Adds a node; returns its output's name (a list of `outputs` names when more than one).

    An input "" is an omitted optional input.
    """
    from onnx import helper  # pylint: disable=g-import-not-at-top

    names = [self._fresh(op_type) for _ in range(outputs)]
    self.nodes.append(helper.make_node(op_type, list(inputs), names, domain=domain, **attributes))
    return names[0] if outputs == 1 else names

  def ms_op(self, op_type, *inputs, **attributes):
    """A com.microsoft contrib op (ONNX Runtime's fused kernels)."""
    return self.op(op_type, *inputs, domain=_MS_DOMAIN, **attributes)

  def output(self, name, as_name):
    """Makes tensor `name` the graph output `as_name`."""
    from onnx import helper  # pylint: disable=g-import-not-at-top

    self.nodes.append(helper.make_node("Identity", [name], [as_name]))
    self.outputs.append(helper.make_empty_tensor_value_info(as_name))

  def session(self, threads):
    """An onnxruntime.InferenceSession of the graph on the CPU."""
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
    # Pool threads spin between the ops of a run (a woken thread costs each of the ~50 ops
    # some microseconds) and stop when the run returns: each graph has its own pool, and a pool
    # still spinning between calls takes a core from the Python around them, or from another
    # graph. Spinning for the run only made a one-sentence call faster than no spinning
    # (docs/runtime.md).
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
  """(gamma, beta) weight names of a `modeling.LayerNorm`."""
  return g.weight(_numpy(layer.gamma)), g.weight(_numpy(layer.beta))


def _gelu_dense(g, x, dense):
  """gelu(x @ kernel + bias) of a `modeling.Dense`, bias and exact GELU in one BiasGelu."""
  return g.ms_op(
    "BiasGelu", g.op("MatMul", x, g.weight(_numpy(dense.kernel))), g.weight(_numpy(dense.bias))
  )


def _block_output(g, block, context, skip):
  """A `TransformerBlock` after attention: output projection, residual on the query stream
  (`skip`, [B, T, D] or [T, D]) and LayerNorm, then the feed-forward and its LayerNorm."""
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
  """`TransformerLM.encode` of the graph inputs under the attention pattern `attention`, words
  from `continuation` (bool [V] or None, `OnnxFunctions`): (sequence_output, embedding_output,
  the first block's output) names."""
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
  """float32 [L, D], the position embeddings."""
  embeddings = model.embeddings
  position = _numpy(embeddings.position_embeddings)
  if embeddings.token_type_embeddings is not None:
    # Every input is segment 0 (ScoringGraph feeds no segment ids): its row joins the positions.
    position = position + _numpy(embeddings.token_type_embeddings)[0]
  return position


class _AttentionMasks(object):
  """Who attends whom under an attention pattern (kinds.ATTENTION_PATTERNS), as the attention
  ops take it.

  A position pattern (T-TA's diagonal, uniLM's causal triangle): an additive bias sliced from
  an [L, L] table made by `modeling.create_attention_mask`, so the rule has one owner; padded
  keys by the input mask, with `mask_filter_value` -1e9 as modeling's. A word pattern
  (word_l2r) differs from row to row: its bias, padded keys included, is computed in the graph
  from the input ids (`_word_pattern_keys`), and the ops get no key padding mask.

  Attributes:
    pattern: float32 [1, 1, T, T] bias ([B, 1, T, T] for a word pattern), or "" when every key
      may be seen (biLM).
    has_key: float32 [B, T, 1], 1 where a query has some key to attend to, or "" when every
      query has one (its own). TF's masked softmax gives a query without keys (a one-token
      T-TA row) a zero context; the additive mask gives it a uniform one over the masked keys,
      its own token's among them. Multiplying the context by has_key keeps such a row
      self-unknown and equal to TF.
    input_mask: int32 [B, T], the graph input (the ops' key padding mask), or "" when the
      pattern's bias holds the padding.
    attributes: of the attention ops.
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
  """int32 [B, T], the word of each input token: mirror of `modeling.token_word_ids` (what
  `ScoringGraph.word_ids` computes) in ONNX ops, which tests/test_word_scoring.py holds equal on
  random ids: 1 - is_continuation, summed along the row."""
  is_continuation = g.op("Gather", g.weight(np.asarray(continuation, bool)), input_ids)
  starts = g.op("Sub", g.weight(np.int32(1)), g.op("Cast", is_continuation, to=_INT32))
  return g.op("CumSum", starts, g.weight(np.int64(1)))


def _word_l2r_keys(g, words, length):
  """bool [B, F=T, T], which keys query f may see under word_l2r, not counting padding.

  The ONNX twin of `modeling._word_l2r_keys`, the rule's owner (tests/test_word_scoring.py
  holds them equal): not (key t in query f's word and t >= f).
  """
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
  """bool [B, F=T, T], which keys query f of each row may see under the word pattern
  `attention`, words found from the input ids and `continuation` (bool [V]); padded keys never:
  `modeling.create_attention_mask` of `ScoringGraph.encode`'s inputs, in the graph."""
  words = _word_ids(g, continuation, input_ids)
  real = g.op("Cast", g.op("Unsqueeze", input_mask, g.ints([1])), to=_BOOL)  # [B, 1, T]
  return g.op("And", _WORD_PATTERN_KEYS[attention](g, words, length), real)


class _Embedding(object):
  """The embedding output E = LN(w + p) of the input (w: its tokens' embeddings, p: their
  positions'), and linear projections of E read from tables.

  Attributes:
    output: float32 [B, T, D], E.
  """

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
    """E kernel, as ([B, T, K] name, the bias to add: float32 [K], `bias` and E's share).

    A projection of E is a function of (token, position): as
    LN(w + p) = ((w - mean w) + (p - mean p)) * gamma / std(w + p) + beta,
      E kernel = ((w - mean w) * gamma kernel + (p - mean p) * gamma kernel) / std(w + p)
                 + beta kernel,
    a gather from a [V, K] table (shared by the model's graphs as `table_name`) plus a slice of
    an [L, K] one, times the LayerNorm's 1 / std: no [B * T, D] x [D, K] matmul. A table over
    MAX_PROJECTION_TABLE_BYTES gives way to the matmul.

    Args:
      kernel: float32 [D, K].
      bias: float32 [K], added after the projection.
      table_name: the [V, K] table's name.
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
  """T-TA's blocks over `_Embedding` `embedding`: the last and the first layer's names. shape,
  length: int64 [2] (B, T) and [1] (T) of the input."""
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
  """(input_ids, input_mask) -> (sequence_output, embedding_output)."""
  g = _Graph(shared)
  sequence, embedding, _ = _encoder(g, model, *_inputs(g), attention, continuation)
  g.output(sequence, "sequence_output")
  g.output(embedding, "embedding_output")
  return g


def _scores_graph(model, shared, attention, continuation):
  """(input_ids, input_mask, read_at [N], targets [N]) -> (log_probs [N], hidden [N, D]).

  read_at indexes the flattened [B * T] positions: the LM head runs at those rows only.
  """
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
  """(input_ids, input_mask, pooling [B, 3, T]) -> (pooled [B, 3, D], embedded [B, 1, D],
  first_last [B, 1, D]).

  pooled: `pooling_weights` applied to the last layer; embedded and first_last: its word mean
  (row 0) applied to the embedding output and to the first and last layers' average.
  """
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

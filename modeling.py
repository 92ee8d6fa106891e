# coding=utf-8
"""T-TA, biLM, uniLM and Google-BERT-compatible Transformer language models (docs/DESIGN.md §2).

T-TA's three differences from BERT are in `TransformerLM.encode` (§2.3). Dimensions, as in
google-research/bert: B = batch size, F = from (query) length, T = to (key/value) length,
N = attention heads, H = size per head, D = hidden size, V = vocabulary size.
"""

import collections
import contextlib
import copy
import dataclasses
import json
import math
import threading

import keras
import numpy as np
import tensorflow as tf

import kinds

OUTPUT_LAYERS = ("softmax", "continuous")

# Large enough that exp() of it underflows to exactly 0 in float32, so masked
# keys contribute nothing (BERT's -10000 only makes them negligible).
_MASK_ADDER = -1e9


def _field(default=dataclasses.MISSING, architecture=False):
  """A `TTAConfig` field. architecture: a checkpoint's weights depend on it, so a resumed run must
  keep it.
  """
  roles = {"architecture": architecture}
  return dataclasses.field(default=default, metadata=roles)


def check_shape(hidden_size, num_hidden_layers, num_attention_heads, intermediate_size):
  """ValueError naming the field unless the sizes are positive ints and the heads divide the
  width: the rule of `TTAConfig.validate`, for a caller that checks sizes before it builds one."""
  sizes = dict(locals())
  for name, value in sizes.items():
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
      raise ValueError(f"{name} must be a positive int, got {value!r}")
  if hidden_size % num_attention_heads:
    raise ValueError(
      f"hidden_size ({hidden_size:d}) is not a multiple of num_attention_heads "
      f"({num_attention_heads:d})"
    )


def check_dropout(value):
  """ValueError unless `value` is a dropout probability: a number in [0, 1) (1 drops every unit and
  scales by 1 / 0; nan is none). The rule of `TTAConfig.validate`, for a flag's check."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
    raise ValueError(f"{value!r} is not a dropout probability in [0, 1)")


@dataclasses.dataclass(eq=False)
class TTAConfig:
  """Configuration of a `TransformerLM` (BERT's config fields, T-TA defaults).

  Each field's meaning is beside it (docs/DESIGN.md §2.1 tables them); `field_names` lists them
  by role (`architecture`: a checkpoint's weights depend on it, see `_field`). `extra` holds
  further keys found in a JSON file (e.g. the authors' "vocab_file"), kept so the file
  round-trips, never used. `validate` names any field out of range.
  """

  vocab_size: int = _field(architecture=True)  # WordPiece vocabulary size V (required)
  hidden_size: int = _field(512, architecture=True)  # width D of every layer
  num_hidden_layers: int = _field(3, architecture=True)  # Transformer blocks L
  num_attention_heads: int = _field(8, architecture=True)  # heads N; N divides D
  intermediate_size: int = _field(2048, architecture=True)  # feed-forward width I
  hidden_act: str = _field("gelu", architecture=True)  # the FFN's activation: exact erf GELU
  hidden_dropout_prob: float = _field(0.1)  # dropout on embeddings and each sublayer's output
  attention_probs_dropout_prob: float = _field(0.1)  # dropout on the attention probabilities
  # The longest input in tokens, the sentence's boundary tokens included (position embeddings).
  max_position_embeddings: int = _field(128, architecture=True)
  # Segment embeddings: 2 only for Google BERT checkpoints (kind `bert`), else 0 (none).
  type_vocab_size: int = _field(0, architecture=True)
  initializer_range: float = _field(0.02)  # stddev of the truncated-normal initializer
  mask_token_id: int = _field(4)  # id of [MASK]: T-TA's first query is its embedding (§2.3)
  # One of kinds.MODEL_TYPES (§2.4): the kind a model dir holds, so that it describes itself.
  model_type: str | None = _field(None, architecture=True)
  output_layer: str = _field("softmax", architecture=True)  # or "continuous" (ELMo-C's head)
  # Width of the continuous head's frozen target embeddings; None: hidden_size.
  target_embedding_size: int | None = _field(None, architecture=True)
  # The continuous head's scores at inference: log_softmax(scale * cosine) over the vocabulary.
  continuous_logit_scale: float = _field(10.0)
  do_lower_case: bool = _field(True)  # the tokenizer lower-cases; must match the vocab
  # Text normalisation of the training text, which every reader applies first: "none" or
  # "librispeech" (text/normalization.py).
  normalization: str = _field("none")
  # [start, end] tokens that frame a sentence: Google BERT checkpoints record ["[CLS]", "[SEP]"];
  # None (left out of the JSON): the vocab's pair (§3.1).
  boundary_tokens: list | None = _field(None)
  extra: dict = dataclasses.field(default_factory=dict, repr=False)

  # Fields left out of the JSON while unset, so that config files (and the score-cache
  # identities built from them) written before the field existed stay byte for byte the same.
  _OMITTED_WHEN_NONE = ("boundary_tokens",)

  def __post_init__(self):
    if self.boundary_tokens is not None:
      self.boundary_tokens = list(self.boundary_tokens)
    self.extra = dict(self.extra)
    self.validate()

  @classmethod
  def field_names(cls, role=None):
    """The config's fields in order (not `extra`); with `role` ("architecture", see `_field`)
    only those it marks."""
    return tuple(
      f.name
      for f in dataclasses.fields(cls)
      if f.name != "extra" and (role is None or f.metadata[role])
    )

  def validate(self):
    """Raises ValueError naming the offending field."""
    if not isinstance(self.vocab_size, int) or self.vocab_size <= 0:
      raise ValueError(f"vocab_size must be a positive int, got {self.vocab_size!r}")
    check_shape(
      self.hidden_size, self.num_hidden_layers, self.num_attention_heads, self.intermediate_size
    )
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      try:
        check_dropout(getattr(self, name))
      except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    if self.hidden_act not in _ACTIVATIONS:
      raise ValueError(f"hidden_act {self.hidden_act!r} is not one of {sorted(_ACTIVATIONS)}")
    if self.model_type is not None:
      kinds.get(self.model_type)
    if self.output_layer not in OUTPUT_LAYERS:
      raise ValueError(f"output_layer {self.output_layer!r} is not one of {OUTPUT_LAYERS}")
    if not 0 <= self.mask_token_id < self.vocab_size:
      raise ValueError(
        f"mask_token_id {self.mask_token_id:d} is outside the vocabulary [0, {self.vocab_size:d})"
      )
    pair = self.boundary_tokens
    if pair is not None and (len(pair) != 2 or not all(isinstance(t, str) and t for t in pair)):
      raise ValueError(f"boundary_tokens must be two tokens [start, end], got {pair!r}")

  @classmethod
  def from_dict(cls, json_object):
    """A config from a JSON object: its fields, and any other key into `extra`."""
    if not isinstance(json_object, dict):
      raise TypeError(f"expected a JSON object of fields, got a {type(json_object).__name__}")
    names = cls.field_names()
    fields = {k: v for k, v in json_object.items() if k in names}
    return cls(**fields, extra={k: v for k, v in json_object.items() if k not in names})

  @classmethod
  def from_json_file(cls, json_file):
    with tf.io.gfile.GFile(json_file, "r") as reader:
      text = reader.read()
    try:
      return cls.from_dict(json.loads(text))
    except (TypeError, ValueError) as e:
      raise ValueError(f"{json_file}: bad model config: {e}") from e

  def to_dict(self):
    output = {
      name: getattr(self, name)
      for name in self.field_names()
      if not (name in self._OMITTED_WHEN_NONE and getattr(self, name) is None)
    }
    output.update(copy.deepcopy(self.extra))
    return output

  def to_json_string(self):
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  def to_json_file(self, json_file):
    with tf.io.gfile.GFile(json_file, "w") as writer:
      writer.write(self.to_json_string())

  def __eq__(self, other):
    return isinstance(other, TTAConfig) and self.to_dict() == other.to_dict()


def gelu(x):
  """Exact GELU, x * Phi(x) with the erf form (BERT's, not the tanh one)."""
  return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


_ACTIVATIONS = {"gelu": gelu, "relu": tf.nn.relu, "tanh": tf.tanh}


def create_initializer(initializer_range=0.02):
  # Keras' TruncatedNormal re-draws beyond 2 stddev, like TF1's.
  return keras.initializers.TruncatedNormal(stddev=initializer_range)


class _DropoutSeed(threading.local):
  """The seed of `stateless_dropout`'s block and the dropout calls made in it so far, per thread:
  MirroredStrategy traces each replica's step in a thread of its own, switching threads at every
  cross-replica call, so one replica's seed must not leak into another's step."""

  seed = None
  calls = 0


_DROPOUT_SEED = _DropoutSeed()


@contextlib.contextmanager
def stateless_dropout(seed):
  """In the block, dropout draws its masks statelessly from `seed` (int [2]) and its call's place.

  A step traced in the block and seeded with (run seed, step) draws the same masks at that step in
  every process (TF's stateful stream lives in no checkpoint), so a resumed run continues exactly
  (finetuning/mwer.py, pretraining/training.py). The block holds in the thread that enters it.
  """
  previous = (_DROPOUT_SEED.seed, _DROPOUT_SEED.calls)
  _DROPOUT_SEED.seed, _DROPOUT_SEED.calls = seed, 0
  try:
    yield
  finally:
    _DROPOUT_SEED.seed, _DROPOUT_SEED.calls = previous


def dropout(x, rate, training):
  if not training or not rate:
    return x
  if _DROPOUT_SEED.seed is None:
    return tf.nn.dropout(x, rate=rate)
  _DROPOUT_SEED.calls += 1
  seed = tf.random.experimental.stateless_fold_in(_DROPOUT_SEED.seed, _DROPOUT_SEED.calls)
  return tf.nn.experimental.stateless_dropout(x, rate=rate, seed=seed)


class Dense(keras.layers.Layer):
  """x @ kernel + bias over the last axis; kernel [in, out] as TF1's dense."""

  def __init__(self, input_size, units, initializer_range, activation=None, **kwargs):
    super().__init__(**kwargs)
    self.input_size = input_size
    self.units = units
    self.initializer_range = initializer_range
    self.activation = activation

  def build(self, input_shape=None):
    self.kernel = self.add_weight(
      name="kernel",
      shape=(self.input_size, self.units),
      initializer=create_initializer(self.initializer_range),
    )
    self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")

  def call(self, x):
    # A rank-2 MatMul is faster on CPU than a batched one.
    shape = tf.shape(x)
    y = tf.matmul(tf.reshape(x, [-1, self.input_size]), self.kernel)
    y = tf.nn.bias_add(y, self.bias)
    if self.activation is not None:
      y = self.activation(y)
    return tf.reshape(y, tf.concat([shape[:-1], [self.units]], 0))

  def tf1_variables(self):
    return {"kernel": self.kernel, "bias": self.bias}


class LayerNorm(keras.layers.Layer):
  """LayerNorm with epsilon 1e-12 (BERT's); always computed in float32."""

  def __init__(self, hidden_size, **kwargs):
    super().__init__(dtype="float32", **kwargs)
    self.hidden_size = hidden_size

  def build(self, input_shape=None):
    self.gamma = self.add_weight(name="gamma", shape=(self.hidden_size,), initializer="ones")
    self.beta = self.add_weight(name="beta", shape=(self.hidden_size,), initializer="zeros")

  def call(self, x):
    x = tf.cast(x, tf.float32)
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return tf.nn.batch_normalization(
      x, mean, variance, self.beta, self.gamma, variance_epsilon=1e-12
    )

  def tf1_variables(self):
    return {"gamma": self.gamma, "beta": self.beta}


class Embeddings(keras.layers.Layer):
  """bert/embeddings: word + position (+ token type) -> LayerNorm -> dropout."""

  def __init__(self, config, **kwargs):
    super().__init__(name="embeddings", dtype="float32", **kwargs)
    self.config = config
    self.layer_norm = LayerNorm(config.hidden_size, name="LayerNorm")

  def build(self, input_shape=None):
    c = self.config
    init = create_initializer(c.initializer_range)
    self.word_embeddings = self.add_weight(
      name="word_embeddings", shape=(c.vocab_size, c.hidden_size), initializer=init
    )
    self.position_embeddings = self.add_weight(
      name="position_embeddings", shape=(c.max_position_embeddings, c.hidden_size), initializer=init
    )
    self.token_type_embeddings = None
    if c.type_vocab_size:
      self.token_type_embeddings = self.add_weight(
        name="token_type_embeddings", shape=(c.type_vocab_size, c.hidden_size), initializer=init
      )
    self.layer_norm.build()

  def call(self, input_ids, token_type_ids=None, training=False):
    """Returns float32 [B, T, D], the embedding output E."""
    seq_length = tf.shape(input_ids)[1]
    x = tf.gather(self.word_embeddings, input_ids)
    x += self.position_embeddings[tf.newaxis, :seq_length]
    if self.token_type_embeddings is not None:
      if token_type_ids is None:
        token_type_ids = tf.zeros_like(input_ids)
      x += tf.gather(self.token_type_embeddings, token_type_ids)
    return dropout(self.layer_norm(x), self.config.hidden_dropout_prob, training)

  def mask_query(self, batch_size, seq_length, training=False):
    """T-TA's first query, LN(W[[MASK]] + P), float32 [B, T, D]: the position, not the token.

    The LayerNorm is shared with the key/value stream, as in the authors' code. They feed [PAD] at
    padded positions; no one reads those outputs, so [MASK] everywhere gives the same real outputs.
    """
    x = (
      self.word_embeddings[self.config.mask_token_id][tf.newaxis]
      + self.position_embeddings[:seq_length]
    )
    x = tf.broadcast_to(
      self.layer_norm(x)[tf.newaxis], [batch_size, seq_length, self.config.hidden_size]
    )
    return dropout(x, self.config.hidden_dropout_prob, training)

  def tf1_variables(self):
    names = {
      "word_embeddings": self.word_embeddings,
      "position_embeddings": self.position_embeddings,
    }
    if self.token_type_embeddings is not None:
      names["token_type_embeddings"] = self.token_type_embeddings
    names.update(_prefixed("LayerNorm", self.layer_norm.tf1_variables()))
    return names


class TransformerBlock(keras.layers.Layer):
  """bert/encoder/layer_N: post-LN attention + feed-forward block; the residuals add the query
  stream only. Query and key/value streams are separate arguments, so T-TA's input isolation is an
  argument, not a fork of the block."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    c = config
    self.config = c
    self.num_heads = c.num_attention_heads
    self.head_size = c.hidden_size // c.num_attention_heads
    r = c.initializer_range
    d = c.hidden_size
    self.query = Dense(d, d, r, name="query")
    self.key = Dense(d, d, r, name="key")
    self.value = Dense(d, d, r, name="value")
    self.attention_output = Dense(d, d, r, name="dense")
    self.attention_layer_norm = LayerNorm(d, name="LayerNorm")
    self.intermediate = Dense(
      d, c.intermediate_size, r, activation=_ACTIVATIONS[c.hidden_act], name="dense"
    )
    self.output_dense = Dense(c.intermediate_size, d, r, name="dense")
    self.output_layer_norm = LayerNorm(d, name="LayerNorm")

  def build(self, input_shape=None):
    for layer in self._sublayers():
      layer.build()

  def _sublayers(self):
    return (
      self.query,
      self.key,
      self.value,
      self.attention_output,
      self.attention_layer_norm,
      self.intermediate,
      self.output_dense,
      self.output_layer_norm,
    )

  def split_heads(self, x):
    # [B, T, N*H] -> [B, N, T, H]
    batch_size, seq_length = tf.shape(x)[0], tf.shape(x)[1]
    x = tf.reshape(x, [batch_size, seq_length, self.num_heads, self.head_size])
    return tf.transpose(x, [0, 2, 1, 3])

  def attend(self, query_input, key, value, attention_mask, training):
    """Attention context [B, F, D], before the output projection.

    query_input [B, F, D] is not yet projected; key and value [B, N, T, H] are; attention_mask is
    float32 [B, 1, F, T], 1 where attending is allowed.
    """
    # Keras autocasts float32 call arguments to the compute dtype: under
    # mixed_bfloat16 or mixed_float16 the mask arrives in 16 bits, and the
    # scores it is combined with are float32 (-1e9 is beyond float16's range).
    attention_mask = tf.cast(attention_mask, tf.float32)
    q = self.split_heads(self.query(query_input))  # [B, N, F, H]
    scores = tf.matmul(q, key, transpose_b=True)  # [B, N, F, T]
    scores = tf.cast(scores, tf.float32) * (1.0 / math.sqrt(self.head_size))
    scores += (1.0 - attention_mask) * _MASK_ADDER
    # Multiplying by the mask zeroes rows with no attendable key at all
    # (a 1-token T-TA input), which softmax alone would make uniform over
    # every key -- including the one the row must not see.
    probs = tf.nn.softmax(scores) * attention_mask
    # Dropping attention weights drops whole tokens to attend to, as in the
    # original Transformer and BERT.
    probs = dropout(probs, self.config.attention_probs_dropout_prob, training)
    context = tf.matmul(tf.cast(probs, value.dtype), value)  # [B, N, F, H]
    context = tf.transpose(context, [0, 2, 1, 3])  # [B, F, N, H]
    return tf.reshape(
      context, [tf.shape(context)[0], tf.shape(context)[1], self.config.hidden_size]
    )

  def project_key_value(self, kv_input):
    """[B, T, D] -> key, value, each [B, N, T, H]."""
    return (self.split_heads(self.key(kv_input)), self.split_heads(self.value(kv_input)))

  def call(self, query_input, kv_input, attention_mask, training=False, key_value=None):
    """Float32 [B, F, D] from query_input [B, F, D] and kv_input [B, T, D].

    kv_input is T-TA's embedding output at every layer, BERT's query_input itself. key_value: (key,
    value) [B, N, T, H] already projected, in place of kv_input (`fused_key_value_weights`).
    """
    if key_value is None:
      key, value = self.project_key_value(kv_input)
    else:
      key, value = key_value
    return self.feed_forward(
      query_input, self.attend(query_input, key, value, attention_mask, training), training
    )

  def feed_forward(self, query_input, context, training):
    """Output projection, residual on the query stream, and the FFN."""
    rate = self.config.hidden_dropout_prob
    attention = dropout(self.attention_output(context), rate, training)
    attention = self.attention_layer_norm(
      tf.cast(query_input, tf.float32) + tf.cast(attention, tf.float32)
    )
    ffn = dropout(self.output_dense(self.intermediate(attention)), rate, training)
    return self.output_layer_norm(attention + tf.cast(ffn, tf.float32))

  def tf1_variables(self):
    names = {}
    for scope, layer in (
      ("attention/self/query", self.query),
      ("attention/self/key", self.key),
      ("attention/self/value", self.value),
      ("attention/output/dense", self.attention_output),
      ("attention/output/LayerNorm", self.attention_layer_norm),
      ("intermediate/dense", self.intermediate),
      ("output/dense", self.output_dense),
      ("output/LayerNorm", self.output_layer_norm),
    ):
      names.update(_prefixed(scope, layer.tf1_variables()))
    return names


def _transform_layers(config):
  """cls/predictions/transform of both heads: dense(D -> D, hidden_act) and its LayerNorm."""
  transform = Dense(
    config.hidden_size,
    config.hidden_size,
    config.initializer_range,
    activation=_ACTIVATIONS[config.hidden_act],
    name="dense",
  )
  return transform, LayerNorm(config.hidden_size, name="LayerNorm")


class LMHead(keras.layers.Layer):
  """cls/predictions: dense(gelu) -> LayerNorm -> tied logits + output_bias."""

  def __init__(self, config, **kwargs):
    super().__init__(name="predictions", **kwargs)
    c = config
    self.config = c
    self.transform, self.layer_norm = _transform_layers(c)

  def build(self, input_shape=None):
    self.transform.build()
    self.layer_norm.build()
    # autocast=False: under mixed precision the bias is added to float32
    # logits and must stay float32 (Keras would hand it over in 16 bits).
    self.output_bias = self.add_weight(
      name="output_bias", shape=(self.config.vocab_size,), initializer="zeros", autocast=False
    )

  def call(self, hidden, embedding_table, output_kernel=None):
    """Float32 logits [..., V] of hidden [..., D] against the tied embedding_table [V, D].

    output_kernel: the table already transposed, [D, V] (inference keeps one), so that a call
    streams it once instead of transposing it first.
    """
    h = tf.cast(self.layer_norm(self.transform(hidden)), self.compute_dtype)
    flat = tf.reshape(h, [-1, self.config.hidden_size])  # [N, D]
    # A rank-2 MatMul: einsum("...d,vd->...v") copied and transposed the
    # [V, D] table on every call (docs/DESIGN.md §6).
    if output_kernel is not None:
      logits = tf.matmul(flat, tf.cast(output_kernel, self.compute_dtype))
    else:
      logits = tf.matmul(flat, tf.cast(embedding_table, self.compute_dtype), transpose_b=True)
    logits = tf.reshape(logits, tf.concat([tf.shape(h)[:-1], [self.config.vocab_size]], 0))
    return tf.cast(logits, tf.float32) + self.output_bias

  def tf1_variables(self):
    names = _prefixed("transform/dense", self.transform.tf1_variables())
    names.update(_prefixed("transform/LayerNorm", self.layer_norm.tf1_variables()))
    names["output_bias"] = self.output_bias
    return names


def _prefixed(scope, names):
  return {scope + "/" + name: var for name, var in names.items()}


def _dmsa_keys(query, key, words):
  # DMSA: query i must not see key i, which carries token i.
  del words
  return tf.not_equal(query, key)[tf.newaxis]


def _causal_keys(query, key, words):
  del words
  return (query >= key)[tf.newaxis]


def _word_l2r_keys(query, key, words):
  # DMSA generalised to words: query i sees neither its own piece nor the later pieces of its
  # word, so output i is p(piece i | other words, earlier pieces of its word) (PLL-word-l2r).
  same_word = tf.equal(words[:, :, tf.newaxis], words[:, tf.newaxis, :])  # [B, F, T]
  return tf.logical_not(tf.logical_and(same_word, key >= query))


# Which keys each attention pattern (kinds.ATTENTION_PATTERNS) lets query f see, beyond the
# padding mask: bool [B or 1, F, T] from the positions [F, 1] and [1, T] and the word index of
# every token [B, T] (`word_ids`; None where no pattern reads it); None adds no restriction.
_PATTERN_KEYS = {
  "dmsa": _dmsa_keys,
  "bidirectional": None,
  "causal": _causal_keys,
  "word_l2r": _word_l2r_keys,
}
# The patterns that need the word index of every token (inputs["word_ids"]).
WORD_PATTERNS = ("word_l2r",)


def word_ids(is_continuation):
  """int32 [B, T]: the word of each token, counted from 1 along each row, from `is_continuation`
  (bool or int [B, T], true at pieces that continue the previous word; boundaries and padding not).
  """
  starts = 1 - tf.cast(is_continuation, tf.int32)
  return tf.cumsum(starts, axis=1)


def token_word_ids(input_ids, continuation):
  """`word_ids` of input_ids int32 [B, T], given the vocab's continuation flags bool [V]
  (`tokenization.continuation_flags`).
  """
  return word_ids(tf.gather(tf.convert_to_tensor(continuation, tf.bool), input_ids))


def create_attention_mask(input_mask, pattern, words=None):
  """Float32 [B, 1, F=T, T] (or [B, 1, 1, T] for "bidirectional"), 1 where query f may attend key t.

  input_mask: int32 [B, T], 1 at real tokens. pattern: one of kinds.ATTENTION_PATTERNS. words:
  `word_ids` int32 [B, T], needed by WORD_PATTERNS only.
  """
  if pattern not in _PATTERN_KEYS:
    raise ValueError(f"attention pattern {pattern!r} is not one of {tuple(_PATTERN_KEYS)}")
  if pattern in WORD_PATTERNS and words is None:
    raise ValueError(f"attention pattern {pattern!r} needs the word ids of the tokens")
  seq_length = tf.shape(input_mask)[1]
  # Padded keys are never attendable (the authors' first release let T-TA
  # attend to them, joongbo/tta#4; we do not reproduce that).
  mask = tf.cast(input_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]
  keys = _PATTERN_KEYS[pattern]
  if keys is not None:
    # Position comparisons rather than tf.eye / tf.linalg.band_part: the same 0/1 matrices from
    # ops every runtime converts (OpenVINO has no MatrixDiagV3), and no [T, T] ones to build.
    query = tf.range(seq_length)[:, tf.newaxis]  # [F, 1]
    key = tf.range(seq_length)[tf.newaxis, :]  # [1, T]
    mask *= tf.cast(keys(query, key, words), tf.float32)[:, tf.newaxis]
  return mask


class TransformerLM(keras.Model):
  """A Transformer LM of one of kinds.MODEL_TYPES; call contract: docs/DESIGN.md §2.5."""

  def __init__(self, config, model_type, **kwargs):
    super().__init__(name="bert", **kwargs)
    kind = kinds.get(model_type)
    if kind.token_types and not config.type_vocab_size:
      raise ValueError(
        f"model_type {model_type!r} needs type_vocab_size > 0 (Google BERT checkpoints use 2)"
      )
    self.config = config
    self.model_type = model_type
    self.kind = kind
    self.embeddings = Embeddings(config)
    # Each block is also an attribute: tf.train.Checkpoint does not see
    # layers inside a Keras 3 TrackedList, and would silently skip them.
    self.encoder_layers = []
    for i in range(config.num_hidden_layers):
      block = TransformerBlock(config, name=f"layer_{i}")
      setattr(self, f"layer_{i}", block)
      self.encoder_layers.append(block)
    # The continuous head (ELMo-C) has the same call signature and returns
    # cosine logits, so every caller of lm_head / log_probs works unchanged.
    self.lm_head = ContinuousHead(config) if config.output_layer == "continuous" else LMHead(config)

  def build(self, input_shape=None):
    self.embeddings.build()
    for layer in self.encoder_layers:
      layer.build()
    self.lm_head.build()

  def encode(self, inputs, training=False, fused_key_value=None, attention=None, first_layer=False):
    """(sequence_output, embedding_output), float32 [B, T, D] each.

    Args:
      inputs: int32 [B, T] "input_ids", "input_mask"; "segment_ids" for a kind with token types,
        "word_ids" (`word_ids`) for a word attention pattern.
      fused_key_value: T-TA only: `fused_key_value_weights()` (or a snapshot of them) to project
        every layer's key/value in one matmul.
      attention: an attention pattern in place of the kind's own (a T-TA scored word by word).
      first_layer: also return the first block's output (first-last pooling) as a third value.
    """
    input_ids = inputs["input_ids"]
    input_mask = inputs["input_mask"]
    embedding_output = self.embeddings(input_ids, inputs.get("segment_ids"), training=training)
    attention_mask = create_attention_mask(
      input_mask, attention or self.kind.attention, inputs.get("word_ids")
    )
    if self.kind.input_isolation:
      batch_size, seq_length = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
      hidden = self.embeddings.mask_query(batch_size, seq_length, training)
    else:
      hidden = embedding_output
    key_values = [None] * len(self.encoder_layers)
    if fused_key_value is not None:
      key_values = self._fused_key_values(embedding_output, fused_key_value)
    outputs = []
    for layer, key_value in zip(self.encoder_layers, key_values):
      # Input isolation: T-TA's keys/values always come from the embedding
      # output; BERT's from the previous layer.
      kv_input = embedding_output if self.kind.input_isolation else hidden
      hidden = layer(hidden, kv_input, attention_mask, training=training, key_value=key_value)
      outputs.append(hidden)
    if first_layer:
      return hidden, embedding_output, outputs[0]
    return hidden, embedding_output

  def fused_key_value_weights(self):
    """Every layer's key and value projection side by side (T-TA: all read E), for one matmul.

    Returns:
      (kernel float32 [D, 2*L*D], bias float32 [2*L*D]), columns key_0, value_0, key_1, ...; new
      tensors, a snapshot of the weights.
    """
    if not self.kind.input_isolation:
      raise ValueError(
        f"only T-TA's keys/values share one input; {self.model_type}'s come from the previous layer"
      )
    parts = [(p.kernel, p.bias) for layer in self.encoder_layers for p in (layer.key, layer.value)]
    return (tf.concat([k for k, _ in parts], axis=1), tf.concat([b for _, b in parts], axis=0))

  def _fused_key_values(self, embedding_output, fused_key_value):
    # [B, T, D] -> per layer (key, value), each [B, N, T, H].
    kernel, bias = fused_key_value
    d = self.config.hidden_size
    flat = tf.reshape(embedding_output, [-1, d])
    projected = tf.nn.bias_add(tf.matmul(flat, kernel), bias)
    shape = tf.shape(embedding_output)
    num_pieces = 2 * len(self.encoder_layers)
    # The width is spelled out: with -1, an empty batch (a replica given no rows) is ambiguous.
    projected = tf.reshape(projected, [shape[0], shape[1], num_pieces * d])
    pieces = tf.split(projected, num_pieces, axis=-1)
    return [
      (layer.split_heads(pieces[2 * i]), layer.split_heads(pieces[2 * i + 1]))
      for i, layer in enumerate(self.encoder_layers)
    ]

  def call(self, inputs, training=False):
    """Dict of sequence_output, embedding_output [B, T, D] and log_probs [B, T, V]."""
    sequence_output, embedding_output = self.encode(inputs, training)
    logits = self.lm_head(sequence_output, self.embeddings.word_embeddings)
    return {
      "sequence_output": sequence_output,
      "embedding_output": embedding_output,
      "log_probs": tf.nn.log_softmax(logits, axis=-1),
    }

  def tf1_variables(self):
    """OrderedDict: Google-BERT/T-TA TF1 variable name -> variable (lm/model_dir.py reads and
    writes TF1 checkpoints by them).
    """
    names = collections.OrderedDict()
    names.update(_prefixed("bert/embeddings", self.embeddings.tf1_variables()))
    for i, layer in enumerate(self.encoder_layers):
      names.update(_prefixed(f"bert/encoder/layer_{i}", layer.tf1_variables()))
    names.update(_prefixed(HEAD_SCOPE, self.lm_head.tf1_variables()))
    return names


# The TF1 scope of the masked-LM head's variables (the output layer and its transform).
HEAD_SCOPE = "cls/predictions"


def build_model(config, model_type=None):
  """A `TransformerLM` of `model_type` (default: config.model_type) with its variables created."""
  model_type = model_type or config.model_type
  if model_type is None:
    raise ValueError("model_type not given and the config has none")
  model = TransformerLM(config, model_type)
  model.build()
  return model


class ContinuousHead(keras.layers.Layer):
  """ELMo-C's continuous output layer (Li et al., TACL 2019) in place of `LMHead`.

  Training compares W h [..., E] (BERT's transform, then a projection to the target width E) with a
  FIXED unit-length embedding of the target by cosine distance: no vocabulary softmax, no V-sized
  trainable parameters. `call` keeps `LMHead`'s contract with logits = continuous_logit_scale *
  cos(W h, e(v)) for every v; the scale, which the loss does not train, sets how peaked
  log_softmax is (not the ranking of tokens); pretraining/training.py picks it on the eval set.
  """

  def __init__(self, config, **kwargs):
    # float32 layer (its dense sublayers still compute in the global policy's
    # dtype): the frozen table and the cosine are read and computed in fp32.
    super().__init__(name="predictions", dtype="float32", **kwargs)
    c = config
    self.config = c
    self.target_size = c.target_embedding_size or c.hidden_size
    self.transform, self.layer_norm = _transform_layers(c)
    self.projection = Dense(c.hidden_size, self.target_size, c.initializer_range, name="projection")

  def build(self, input_shape=None):
    self.transform.build()
    self.layer_norm.build()
    self.projection.build()
    self.target_embeddings = self.add_weight(
      name="target_embeddings",
      shape=(self.config.vocab_size, self.target_size),
      initializer="zeros",
      trainable=False,
    )

  def set_target_embeddings(self, table):
    """Stores `table` (float [V, E]) with rows scaled to unit length."""
    table = np.asarray(table, np.float32)
    expected = (self.config.vocab_size, self.target_size)
    if table.shape != expected:
      raise ValueError(
        f"target embeddings have shape {table.shape}, the continuous head "
        f"expects [vocab_size, target_embedding_size] = {expected}"
      )
    norms = np.linalg.norm(table, axis=-1, keepdims=True)
    self.target_embeddings.assign(table / np.maximum(norms, 1e-12))

  def predict_vectors(self, hidden):
    """W h: float32 [..., E] for hidden [..., D] (not normalised)."""
    return tf.cast(self.projection(self.layer_norm(self.transform(hidden))), tf.float32)

  def call(self, hidden, embedding_table=None):
    """Cosine logits float32 [..., V] of hidden [..., D] (embedding_table: unused)."""
    del embedding_table
    pred = tf.math.l2_normalize(self.predict_vectors(hidden), axis=-1)
    # A rank-2 einsum: the "...e" form has a [N, V, E] gradient.
    flat = tf.reshape(pred, [-1, self.target_size])
    cosine = tf.einsum("ne,ve->nv", flat, self.target_embeddings)
    cosine = tf.reshape(cosine, tf.concat([tf.shape(pred)[:-1], [-1]], 0))
    return cosine * self.config.continuous_logit_scale

  def tf1_variables(self):
    names = _prefixed("transform/dense", self.transform.tf1_variables())
    names.update(_prefixed("transform/LayerNorm", self.layer_norm.tf1_variables()))
    names.update(_prefixed("projection", self.projection.tf1_variables()))
    names["target_embeddings"] = self.target_embeddings
    return names

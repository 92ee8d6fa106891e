"""The model's inference computations as tf-traceable methods (`ScoringGraph`)."""

import tensorflow as tf

import modeling


def _word_mean(values, lengths):
  """float32 [B, T, D] -> [B, D], the mean over positions 1 .. lengths - 2 (zeros if none)."""
  positions = tf.range(tf.shape(values)[1])[tf.newaxis]  # [1, T]
  words = tf.logical_and(positions >= 1, positions < (lengths - 1)[:, None])
  words = tf.cast(words, values.dtype)[:, :, tf.newaxis]  # [B, T, 1]
  # max(., 1): a row without pieces sums nothing and stays all zero.
  count = tf.maximum(tf.reduce_sum(words, axis=1), 1.0)  # [B, 1]
  return tf.reduce_sum(values * words, axis=1) / count


class ScoringGraph(tf.Module):
  """The one definition of encoding, pooling and target log-probabilities, compiled by NeuralLM
  and traced into the SavedModel; weights snapshotted when built. B rows, T tokens, R masked
  copies, N scored positions, D hidden, V vocab.
  """

  def __init__(self, model, continuation=None):
    """continuation: bool [V], the vocab's WordPiece continuations, for a word attention pattern."""
    super().__init__(name="scoring_graph")
    self.model = model
    self.continuation = None if continuation is None else tf.constant(continuation, tf.bool)
    self.output_kernel = None
    if isinstance(model.lm_head, modeling.LMHead):
      # Transposed once, not on every call (docs/DESIGN.md §6).
      self.output_kernel = tf.Variable(
        tf.transpose(model.embeddings.word_embeddings), trainable=False
      )
    self.fused_key_value = None
    if model.kind.input_isolation:
      # Every layer's keys/values project the embedding output: one matmul, not 2L.
      kernel, bias = model.fused_key_value_weights()
      self.fused_key_value = (
        tf.Variable(kernel, trainable=False),
        tf.Variable(bias, trainable=False),
      )

  def encode(self, input_ids, input_mask, attention=None, first_layer=False):
    """int32 [B, T] each -> (sequence_output, embedding_output[, first block]) [B, T, D]."""
    attention = attention or self.model.kind.attention
    inputs = {"input_ids": input_ids, "input_mask": input_mask}
    if attention in modeling.WORD_PATTERNS:
      inputs["word_ids"] = self.word_ids(input_ids)
    return self.model.encode(
      inputs,
      training=False,
      fused_key_value=self.fused_key_value,
      attention=attention,
      first_layer=first_layer,
    )

  def encode_layers(self, input_ids, input_mask):
    """`encode` with the first block's output, for a windowed first_last."""
    return self.encode(input_ids, input_mask, first_layer=True)

  def word_ids(self, input_ids):
    if self.continuation is None:
      raise ValueError(
        f"{self.model.model_type} with a word attention pattern needs the vocab's continuation "
        "pieces: ScoringGraph(model, continuation=tokenizer.continuation_flags())"
      )
    return modeling.token_word_ids(input_ids, self.continuation)

  def _logits(self, hidden):
    """hidden [N, D] -> the head's logits [N, V]."""
    head_kwargs = {}
    if self.output_kernel is not None:
      head_kwargs["output_kernel"] = self.output_kernel
    return self.model.lm_head(hidden, self.model.embeddings.word_embeddings, **head_kwargs)

  def target_log_probs(self, hidden, targets):
    """hidden [N, D], targets int32 [N] -> log p(targets) float32 [N]."""
    logits = self._logits(hidden)  # [N, V]
    # The V-wide logits are needed for the normaliser anyway; the gather
    # avoids a [N, V] log_softmax copy.
    picked = tf.gather(logits, targets, batch_dims=1)
    return picked - tf.reduce_logsumexp(logits, axis=-1)

  def token_log_probs(self, input_ids, input_mask, score_mask):
    """One pass, "piece": float32 [B, T], log p(input_ids) where score_mask is 1, else 0 (unilm
    reads token t at output t - 1, so never scores position 0).
    """
    return self._one_pass_log_probs(input_ids, input_mask, score_mask, "piece")

  def word_l2r_log_probs(self, input_ids, input_mask, score_mask):
    """`token_log_probs`, output i blind to piece i and its word's later pieces (PLL-word-l2r)."""
    return self._one_pass_log_probs(input_ids, input_mask, score_mask, "word_l2r")

  def one_pass_method(self, scoring):
    return {"piece": self.token_log_probs, "word_l2r": self.word_l2r_log_probs}[scoring]

  def _one_pass_log_probs(self, input_ids, input_mask, score_mask, scoring):
    attention = self.model.kind.one_pass_attention(scoring)
    hidden, _ = self.encode(input_ids, input_mask, attention)  # [B, T, D]
    return self._picked(hidden, input_ids, score_mask)

  def _picked(self, hidden, input_ids, score_mask):
    # log p of the scored tokens, each read where the kind predicts it, scattered to [B, T].
    where = tf.where(score_mask > 0)  # [N, 2] (row, position)
    # Output t predicts the token at t + offset, so token t is read at t - offset.
    read_at = where - tf.constant([[0, self.model.kind.prediction_offset]], tf.int64)
    picked = self.target_log_probs(tf.gather_nd(hidden, read_at), tf.gather_nd(input_ids, where))
    return tf.scatter_nd(where, picked, tf.shape(input_ids, tf.int64))

  def masked_hidden(self, copies, copy_mask, positions):
    """copies, copy_mask int32 [R, T]; positions int32 [R] -> last layer at the mask [R, D]."""
    hidden, _ = self.encode(copies, copy_mask)
    return tf.gather(hidden, positions, batch_dims=1)

  def masked_log_probs(self, copies, copy_mask, positions):
    """copies, copy_mask int32 [R, T]; positions int32 [R] -> log p over the vocab at the mask,
    float32 [R, V]: the distribution whose entry at the replaced token `masked_copy_scores` gives.
    """
    logits = self._logits(self.masked_hidden(copies, copy_mask, positions))
    return tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)

  def masked_copy_scores(self, copies, copy_mask, positions, targets):
    """-> (log p(targets) [R], hidden at the mask [R, D]); targets: the tokens [MASK] replaced."""
    at_mask = self.masked_hidden(copies, copy_mask, positions)
    return self.target_log_probs(at_mask, targets), at_mask

  def sentence_vectors(self, input_ids, input_mask):
    """Every pooling (inference.POOLINGS) of one pass over intact input, float32 [B, D] each."""
    sequence, embedding, first = self.encode(input_ids, input_mask, first_layer=True)
    lengths = tf.reduce_sum(input_mask, axis=1)  # [B]
    return {
      "context": _word_mean(sequence, lengths),
      "embed": _word_mean(embedding, lengths),
      # BERT-whitening's and SimCSE's "first-last avg", "first" the first block's output as in
      # their code (SimCSE's hidden_states[1], princeton-nlp/SimCSE#133); for T-TA it never
      # sees token i at position i.
      "first_last": _word_mean((first + sequence) / 2.0, lengths),
      "first": sequence[:, 0],
      "last": tf.gather(sequence, lengths - 1, batch_dims=1),
    }

  # ------------------------------------------------ the SavedModel's input side
  # In-graph twins of what NeuralLM does in NumPy before and around its graph calls (the
  # tokenizer runs in the graph there); tests/test_export.py checks both give the same numbers.

  def frame(self, pieces, max_seq_length, bos_id, eos_id, pad_id):
    """pieces int RaggedTensor [B, (P)] -> (input_ids, input_mask int32 [B, T], lengths int32 [B],
    truncated bool [B]) as `NeuralLM.tokenize` frames them.
    """
    keep = max_seq_length - 2
    truncated = pieces.row_lengths() > keep
    pieces = pieces[:, :keep]
    column = tf.ones_like(truncated, tf.int32)[:, tf.newaxis]  # [B, 1]
    ids = tf.concat([column * bos_id, pieces, column * eos_id], axis=1)  # [B, (P + 2)]
    lengths = tf.cast(ids.row_lengths(), tf.int32)
    input_ids = ids.to_tensor(default_value=pad_id)  # [B, T]
    # An empty batch comes out [0, 0]; every sentence has at least its two
    # boundary tokens, so make T >= 2 and later slices valid for B = 0.
    input_ids = tf.pad(
      input_ids,
      [[0, 0], [0, tf.maximum(2 - tf.shape(input_ids)[1], 0)]],
      constant_values=pad_id,
    )
    input_mask = tf.sequence_mask(lengths, tf.shape(input_ids)[1], tf.int32)
    return input_ids, input_mask, lengths, truncated

  def masked_copies(
    self, input_ids, input_mask, starts, limits, mask_id, token_budget, with_head, word_l2r=False
  ):
    """`NeuralLM._masked_copies` in the graph, in chunks of `token_budget` tokens: rows int32 [R],
    positions int32 [R], hidden at the mask [R, D], log p there [R] (None unless with_head).
    """
    rows, positions, copies, copy_mask, targets = self._copies(
      input_ids, input_mask, starts, limits, mask_id, word_l2r
    )
    dim = self.model.config.hidden_size
    if with_head:
      logp, hidden = self._in_chunks(
        self.masked_copy_scores, (copies, copy_mask, positions, targets), token_budget, [[], [dim]]
      )
      return rows, positions, hidden, logp
    (hidden,) = self._in_chunks(
      lambda *part: (self.masked_hidden(*part),),
      (copies, copy_mask, positions),
      token_budget,
      [[dim]],
    )
    return rows, positions, hidden, None

  def masked_distributions(self, input_ids, input_mask, starts, limits, mask_id, token_budget):
    """`masked_copies`' full distributions: for each row b and position t in [starts[b],
    limits[b]) (int32 [B] each), in that order, log p over the vocab at the [MASK] of the copy
    with t masked, float32 [R, V] (R = sum(limits - starts)): what the pseudo-log-likelihood reads
    at the masked token.
    """
    _, positions, copies, copy_mask, _ = self._copies(
      input_ids, input_mask, starts, limits, mask_id, word_l2r=False
    )
    (log_probs,) = self._in_chunks(
      lambda *part: (self.masked_log_probs(*part),),
      (copies, copy_mask, positions),
      token_budget,
      [[self.model.config.vocab_size]],
    )
    return log_probs

  def _copies(self, input_ids, input_mask, starts, limits, mask_id, word_l2r):
    """One [MASK]ed copy per position in [starts, limits) of each row, rows in order (word_l2r:
    the later pieces of its word masked too): rows, positions int32 [R], copies, copy_mask int32
    [R, T], targets int32 [R] (the tokens the masks replaced).
    """
    positions = tf.ragged.range(starts, limits)  # [B, (R_b)]
    rows = tf.cast(positions.value_rowids(), tf.int32)  # [R]
    positions = positions.flat_values  # [R]
    copies = tf.gather(input_ids, rows)  # [R, T]
    targets = tf.gather(copies, positions, batch_dims=1)  # [R]
    is_masked = tf.one_hot(
      positions, tf.shape(input_ids)[1], on_value=True, off_value=False, dtype=tf.bool
    )
    if word_l2r:
      words = self.word_ids(copies)  # [R, T]
      own_word = tf.equal(words, tf.gather(words, positions, batch_dims=1)[:, tf.newaxis])
      later = tf.range(tf.shape(copies)[1])[tf.newaxis] >= positions[:, tf.newaxis]
      is_masked = tf.logical_or(is_masked, tf.logical_and(own_word, later))
    copies = tf.where(is_masked, mask_id, copies)
    return rows, positions, copies, tf.gather(input_mask, rows), targets

  def _in_chunks(self, fn, inputs, token_budget, shapes):
    """fn's float32 outputs (each [n, *shapes[i]]) over chunks of the rows of `inputs` (the first
    [R, T]) of at most `token_budget` tokens, joined over the rows: [R, *shapes[i]] each.
    """
    num_rows = tf.shape(inputs[0])[0]
    # A batch can have thousands of copies; max(width, 1): an empty batch has width 0.
    chunk = tf.maximum(token_budget // tf.maximum(tf.shape(inputs[0])[1], 1), 1)
    num_chunks = (num_rows + chunk - 1) // chunk
    arrays = [
      tf.TensorArray(tf.float32, size=num_chunks, infer_shape=False, element_shape=[None, *shape])
      for shape in shapes
    ]

    def body(i, arrays):
      begin = i * chunk
      end = tf.minimum(begin + chunk, num_rows)
      outputs = fn(*(x[begin:end] for x in inputs))
      return i + 1, [a.write(i, out) for a, out in zip(arrays, outputs)]

    # A while_loop (not a Python loop) because R is only known at run time; each chunk's output is
    # written once (a TensorArray), not copied again at every later chunk.
    _, arrays = tf.while_loop(lambda i, _: i < num_chunks, body, (tf.constant(0), arrays))
    return [a.concat() for a in arrays]

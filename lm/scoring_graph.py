"""The model's inference computations as tf-traceable methods (`ScoringGraph`).

One definition of encoding, pooling, target log-probabilities and the SavedModel's in-graph
framing and masked copies, compiled by `inference.NeuralLM` and traced by export_saved_model.py.
"""

import tensorflow as tf

import modeling


def _word_mean(values, lengths):
  """Mean over the word pieces (positions 1 .. n-2, boundaries excluded).

  Args:
    values: float32 [B, T, D].
    lengths: int32 [B], tokens per row, boundaries included.

  Returns:
    float32 [B, D]; zeros for a row without word pieces.
  """
  positions = tf.range(tf.shape(values)[1])[tf.newaxis]  # [1, T]
  words = tf.logical_and(positions >= 1, positions < (lengths - 1)[:, None])
  words = tf.cast(words, values.dtype)[:, :, tf.newaxis]  # [B, T, 1]
  # max(., 1): a row without pieces sums nothing and stays all zero.
  count = tf.maximum(tf.reduce_sum(words, axis=1), 1.0)  # [B, 1]
  return tf.reduce_sum(values * words, axis=1) / count


class ScoringGraph(tf.Module):
  """The model's inference computations, as tf-traceable methods.

  The one definition of encoding, pooling and target log-probabilities:
  `NeuralLM` compiles these methods into its graph functions and the
  SavedModel (export_saved_model.py) traces them into its signatures, so the
  Python path and the served model compute the same numbers by construction.

  Weight snapshots are taken once, when the graph is built, so a NeuralLM
  (and its export) scores with the weights it was built with. Being a
  tf.Module, whatever module holds this one saves the snapshots with it.

  Dimensions: B = rows, T = tokens per row, R = masked copies, N = scored
  positions, D = hidden size, V = vocab size.
  """

  def __init__(self, model, continuation=None):
    """Takes the weight snapshots of `model` (`modeling.TransformerLM`).

    continuation: bool [V], the vocab's WordPiece continuation pieces
      (`tokenization.FullTokenizer.continuation_flags`), from which the graph finds the words
      that a word attention pattern needs; None for a graph that never uses one.
    """
    super().__init__(name="scoring_graph")
    self.model = model
    self.continuation = None if continuation is None else tf.constant(continuation, tf.bool)
    self.output_kernel = None
    if isinstance(model.lm_head, modeling.LMHead):
      # A transposed snapshot of the tied table: the output projection then
      # reads it in place instead of transposing it on every call (docs/DESIGN.md §6).
      self.output_kernel = tf.Variable(
        tf.transpose(model.embeddings.word_embeddings), trainable=False
      )
    self.fused_key_value = None
    if model.kind.input_isolation:
      # Input isolation: all layers' keys/values come from the embedding
      # output, so one matmul against a snapshot of the side-by-side kernels
      # replaces 2L small ones.
      kernel, bias = model.fused_key_value_weights()
      self.fused_key_value = (
        tf.Variable(kernel, trainable=False),
        tf.Variable(bias, trainable=False),
      )

  def encode(self, input_ids, input_mask, attention=None, first_layer=False):
    """int32 [B, T] each -> (sequence_output, embedding_output) [B, T, D].

    attention: an attention pattern in place of the kind's own (kinds.ATTENTION_PATTERNS).
    first_layer: also return the first block's output [B, T, D], third.
    """
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
    """int32 [B, T] each -> (sequence_output, embedding_output, the first block's output)
    [B, T, D]: `encode` for a windowed first_last (NeuralLM's sliding windows)."""
    return self.encode(input_ids, input_mask, first_layer=True)

  def word_ids(self, input_ids):
    """int32 [B, T] -> int32 [B, T], `modeling.word_ids` from the vocab's continuation pieces."""
    if self.continuation is None:
      raise ValueError(
        f"{self.model.model_type} with a word attention pattern needs the vocab's continuation "
        "pieces: ScoringGraph(model, continuation=tokenizer.continuation_flags())"
      )
    return modeling.token_word_ids(input_ids, self.continuation)

  def target_log_probs(self, hidden, targets):
    """hidden [N, D], targets int32 [N] -> log p(targets) float32 [N]."""
    head_kwargs = {}
    if self.output_kernel is not None:
      head_kwargs["output_kernel"] = self.output_kernel
    logits = self.model.lm_head(
      hidden, self.model.embeddings.word_embeddings, **head_kwargs
    )  # [N, V]
    # The V-wide logits are needed for the normaliser anyway; the gather
    # avoids a [N, V] log_softmax copy.
    picked = tf.gather(logits, targets, batch_dims=1)
    return picked - tf.reduce_logsumexp(logits, axis=-1)

  def token_log_probs(self, input_ids, input_mask, score_mask):
    """One pass (tta, tta_word, unilm), scoring "piece": log p of each scored token of the input.

    A kind with input isolation reads token t's distribution at output t under DMSA (x_t is
    hidden from it, whatever mask it was trained with); unilm at output t-1 (it has seen x_<t
    only), so unilm must not score position 0. The LM head runs on the scored positions only.

    Args:
      input_ids, input_mask: int32 [B, T].
      score_mask: int32 [B, T], 1 at the positions to score.

    Returns:
      float32 [B, T]: log p(input_ids) where score_mask is 1, 0 elsewhere.
    """
    return self._one_pass_log_probs(input_ids, input_mask, score_mask, "piece")

  def word_l2r_log_probs(self, input_ids, input_mask, score_mask):
    """`token_log_probs` scoring "word_l2r": a kind with input isolation under the word_l2r
    mask, output i seeing neither piece i nor the later pieces of its word, so log p(piece i |
    other words, earlier pieces of its word) for every piece in one pass (PLL-word-l2r); the
    uniLM as in `token_log_probs` (it sees no later piece anyway)."""
    return self._one_pass_log_probs(input_ids, input_mask, score_mask, "word_l2r")

  def one_pass_method(self, scoring):
    """The method of this graph that scores in `scoring` (one of kinds.SCORINGS):
    `token_log_probs` or `word_l2r_log_probs`."""
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
    """Masked copies (bilm, bert) -> last layer at the masked position.

    Args:
      copies, copy_mask: int32 [R, T]; row r has token positions[r] replaced
        by [MASK].
      positions: int32 [R].

    Returns:
      float32 [R, D].
    """
    hidden, _ = self.encode(copies, copy_mask)
    return tf.gather(hidden, positions, batch_dims=1)

  def masked_copy_scores(self, copies, copy_mask, positions, targets):
    """Masked copies -> (log p(targets) [R], hidden at the mask [R, D]).

    targets: int32 [R], the token each copy's [MASK] replaced.
    """
    at_mask = self.masked_hidden(copies, copy_mask, positions)
    return self.target_log_probs(at_mask, targets), at_mask

  def sentence_vectors(self, input_ids, input_mask):
    """Every pooling of one pass over intact input, float32 [B, D] each.

    Returns:
      dict: "context" / "embed", the mean of the last layer / embedding
      output over the word pieces (zeros for a row without any);
      "first_last", the same mean of the first and last blocks' average;
      "first" / "last", the last layer at the start / end token.
    """
    sequence, embedding, first = self.encode(input_ids, input_mask, first_layer=True)
    lengths = tf.reduce_sum(input_mask, axis=1)  # [B]
    return {
      "context": _word_mean(sequence, lengths),
      "embed": _word_mean(embedding, lengths),
      # BERT-whitening's and SimCSE's "first-last avg": "first" is the first Transformer block's
      # output, as in their code (SimCSE's hidden_states[1] since princeton-nlp/SimCSE#133; its
      # earlier hidden_states[0] was the embedding output, which "embed" already gives). For
      # T-TA that block's output is its query stream after one attention over the embeddings of
      # the OTHER tokens (DMSA), so first_last, like context, never sees token i at position i.
      "first_last": _word_mean((first + sequence) / 2.0, lengths),
      "first": sequence[:, 0],
      "last": tf.gather(sequence, lengths - 1, batch_dims=1),
    }

  # ------------------------------------------------ the SavedModel's input side
  # In-graph twins of what NeuralLM does in NumPy before and around its graph calls (the
  # tokenizer runs in the graph there); tests/test_export.py checks both give the same numbers.

  def frame(self, pieces, max_seq_length, bos_id, eos_id, pad_id):
    """Word-piece ids -> padded `[BOS] pieces [EOS]` rows, as `NeuralLM.tokenize`: the first
    max_seq_length - 2 pieces are kept.

    Args:
      pieces: int RaggedTensor [B, (P)].
      max_seq_length, bos_id, eos_id, pad_id: Python ints (constants of the graph).

    Returns:
      input_ids, input_mask int32 [B, T]; lengths int32 [B]; truncated bool [B].
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
    """One copy per (sentence b, position p in [starts[b], limits[b])) with token p replaced
    by [MASK], run in chunks within the token budget (`NeuralLM._masked_copies` in the graph).

    Args:
      input_ids, input_mask: int32 [B, T].
      starts, limits: int32 [B].
      mask_id, token_budget: Python ints.
      with_head: Python bool; also return log p of the masked tokens.
      word_l2r: Python bool; each copy also masks the later pieces of p's word (PLL-word-l2r).

    Returns:
      rows int32 [R] (the sentence of each copy), positions int32 [R], hidden at the mask
      float32 [R, D], log p of the original token there float32 [R] (None unless with_head).
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
    hidden, logp = self._run_copies(
      copies, tf.gather(input_mask, rows), positions, targets, token_budget, with_head
    )
    return rows, positions, hidden, logp

  def _run_copies(self, copies, copy_mask, positions, targets, token_budget, with_head):
    num_copies = tf.shape(copies)[0]
    # Rows per forward pass: a sentence of 128 tokens has up to 127 copies,
    # and a batch of sentences many more; the budget bounds the memory.
    # (max(width, 1): an empty batch has width 0.)
    chunk = tf.maximum(token_budget // tf.maximum(tf.shape(copies)[1], 1), 1)
    dim = self.model.config.hidden_size

    def body(begin, hidden_acc, logp_acc):
      end = tf.minimum(begin + chunk, num_copies)
      part = (copies[begin:end], copy_mask[begin:end], positions[begin:end])
      if with_head:
        logp, at_mask = self.masked_copy_scores(*part, targets[begin:end])
        logp_acc = tf.concat([logp_acc, logp], 0)
      else:
        at_mask = self.masked_hidden(*part)
      return end, tf.concat([hidden_acc, at_mask], 0), logp_acc

    # A while_loop (not a Python loop) because R is only known at run time;
    # concatenating the chunks' results costs little next to the model.
    _, hidden, logp = tf.while_loop(
      lambda begin, *_: begin < num_copies,
      body,
      (tf.constant(0), tf.zeros([0, dim]), tf.zeros([0])),
      shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, dim]), tf.TensorShape([None])),
    )
    return hidden, (logp if with_head else None)

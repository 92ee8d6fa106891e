# coding=utf-8
"""The pretraining losses as global sums over one denominator, so that the gradients summed over
replicas are the global batch's (docs/DESIGN.md §3.2). Heads: BERT's tied softmax, or ELMo-C's
continuous output layer.
"""

import tensorflow as tf

import modeling

# Candidate inference scales of a continuous model's cosine logits; the eval
# reports the cross-entropy under each so the best one can be kept.
LOGIT_SCALES = (1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0, 75.0, 100.0)
LOSS_NORMALIZATIONS = ("constant", "per_batch_tokens")


def constant_denominator(normalization, train_batch_size, max_seq_length):
  """The fixed divisor of every batch's loss sum (global batch x the model's max_seq_length, as the
  authors' reduce_mean over padded batches), or None to divide by the batch's weight sum.
  """
  if normalization not in LOSS_NORMALIZATIONS:
    raise ValueError(f"loss normalization {normalization!r} is not one of {LOSS_NORMALIZATIONS}")
  if normalization == "per_batch_tokens":
    return None
  return float(train_batch_size * max_seq_length)


def training_loss(model, features, denominator, gather_targets=True):
  """(loss_sum / denominator, terms) of one replica's share of the global batch; denominator is
  float32 [], the same on every replica.
  """
  terms = forward_loss_terms(model, features, training=True, gather_targets=gather_targets)
  return terms["loss_sum"] / denominator, terms


def token_cross_entropy(logits, target_ids):
  """(CE, [argmax == target]) float32 [...] each, of logits [..., V] against target_ids [...]."""
  logits = tf.cast(logits, tf.float32)
  ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target_ids, logits=logits)
  correct = tf.cast(
    tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), target_ids), tf.float32
  )
  return ce, correct


def weighted_cross_entropy(logits, target_ids, target_weights):
  """float32 sums of w * CE, w and w * [argmax == target]; logits [..., V], the rest [...]."""
  target_weights = tf.cast(target_weights, tf.float32)
  ce, correct = token_cross_entropy(logits, target_ids)
  return (
    tf.reduce_sum(target_weights * ce),
    tf.reduce_sum(target_weights),
    tf.reduce_sum(target_weights * correct),
  )


def kl_divergence(teacher_log_probs, student_log_probs):
  """KL(teacher || student) per row, float32 [N], of log-probabilities [N, V] each; no gradient
  reaches the teacher."""
  teacher_log_probs = tf.stop_gradient(teacher_log_probs)
  return tf.reduce_sum(tf.exp(teacher_log_probs) * (teacher_log_probs - student_log_probs), -1)


def weighted_cosine_distance(predicted, target_table, target_ids, target_weights):
  """ELMo-C's loss: float32 sums of w * (1 - cos(predicted [..., E], target_table[target])) and w;
  an all-zero target embedding gives cos 0 and no gradient.
  """
  target_weights = tf.cast(target_weights, tf.float32)
  targets = tf.gather(tf.cast(target_table, tf.float32), target_ids)
  cosine = tf.reduce_sum(
    tf.math.l2_normalize(tf.cast(predicted, tf.float32), axis=-1)
    * tf.math.l2_normalize(targets, axis=-1),
    axis=-1,
  )
  return (tf.reduce_sum(target_weights * (1.0 - cosine)), tf.reduce_sum(target_weights))


def forward_loss_terms(model, features, training, gather_targets=True, with_logits=False):
  """Encoder + head + loss sums of one replica's batch: float32 loss_sum, weight_sum, correct_sum,
  ce_sum (= loss_sum for the softmax head).

  gather_targets runs the head only where weight > 0 (a dynamic shape; off under XLA/TPU).
  with_logits (continuous head, eval): CE and accuracy over the V-sized cosine logits, and
  ce_by_scale [len(LOGIT_SCALES)].
  """
  hidden, _ = model.encode(features, training=training)
  targets = features["target_ids"]
  weights = tf.cast(features["target_weights"], tf.float32)
  if gather_targets:
    where = tf.where(weights > 0)
    hidden = tf.gather_nd(hidden, where)  # [n, D]
    targets = tf.gather_nd(targets, where)  # [n]
    weights = tf.gather_nd(weights, where)  # [n]
  if isinstance(model.lm_head, modeling.ContinuousHead):
    return _continuous_loss_terms(model.lm_head, hidden, targets, weights, with_logits)
  logits = model.lm_head(hidden, model.embeddings.word_embeddings)
  loss_sum, weight_sum, correct_sum = weighted_cross_entropy(logits, targets, weights)
  return dict(loss_sum=loss_sum, weight_sum=weight_sum, correct_sum=correct_sum, ce_sum=loss_sum)


def _continuous_loss_terms(head, hidden, targets, weights, with_logits):
  loss_sum, weight_sum = weighted_cosine_distance(
    head.predict_vectors(hidden), head.target_embeddings, targets, weights
  )
  terms = dict(
    loss_sum=loss_sum, weight_sum=weight_sum, correct_sum=tf.constant(0.0), ce_sum=tf.constant(0.0)
  )
  if with_logits:
    logits = head(hidden)
    terms["ce_sum"], _, terms["correct_sum"] = weighted_cross_entropy(logits, targets, weights)
    cosine = logits / head.config.continuous_logit_scale
    terms["ce_by_scale"] = tf.stack(
      [weighted_cross_entropy(scale * cosine, targets, weights)[0] for scale in LOGIT_SCALES]
    )
  return terms

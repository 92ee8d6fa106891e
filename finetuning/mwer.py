"""The discriminative rescorer: its score, the MWER loss, the regularisers and one step
(docs/DESIGN.md §4.5).

Dimensions: L = lists, K = hypotheses per list (padded), F = first-pass scores, R = model rows
(hypotheses, or the biLM's masked copies), T = tokens per row, N = scored tokens, V = vocab.
"""

import numpy as np
import tensorflow as tf

from finetuning import mwer_data
import kinds
from lm import inference
from lm import model_dir
import modeling
from nbest import combination
from pretraining import input_pipeline
from pretraining import losses

REGULARIZERS = ("pretraining", "distillation", "none")
# Below any score difference that matters, above float32's underflow in the softmax.
_PADDING_SCORE = -1e9
WEIGHTS_FILE = "mwer_weights.json"


# ------------------------------------------------------------- combination


def feature_tables(weights, prepared, lm_scores):
  """float64 [K, F + 2] `combination` tables of prepared lists and their LM scores [K], the
  first-pass columns in `weights`' order (ValueError for other columns)."""
  orders = {}  # each list's columns in the weights' order (one order, usually)
  out = []
  for p, lm in zip(prepared, lm_scores):
    if p.feature_names not in orders:
      weights.aligned(p.feature_names)
      orders[p.feature_names] = [p.feature_names.index(n) for n in weights.first_pass]
    features = np.asarray(p.features, np.float64)[:, orders[p.feature_names]]
    out.append(combination.stack(features, np.asarray(lm, np.float64)[:, None], p.words))
  return out


class CombinationWeights(tf.Module):
  """The combination as trainable variables (create under the strategy's scope)."""

  def __init__(self, weights):
    super().__init__(name="combination")
    if list(weights.lms) != [combination.MWER_LM]:
      raise ValueError(f"MWER trains one LM, {combination.MWER_LM!r}; found {list(weights.lms)}")
    self.feature_names = tuple(weights.first_pass)
    self.feature_weights = tf.Variable(
      np.asarray(list(weights.first_pass.values()), np.float32), name="feature_weights"
    )
    self.lm_weight = tf.Variable(float(weights.lms[combination.MWER_LM]), name="lm_weight")
    self.length_weight = tf.Variable(float(weights.length), name="length_weight")

  def __call__(self, features, lm, words):
    """float32 [L, K] s(h) of features [L, K, F], LM scores [L, K] and word counts [L, K]."""
    return (
      tf.linalg.matvec(features, self.feature_weights)
      + self.lm_weight * lm
      + self.length_weight * words
    )

  def to_combination(self):
    return combination.Weights(
      dict(zip(self.feature_names, self.feature_weights.numpy().astype(np.float64).tolist())),
      {combination.MWER_LM: float(self.lm_weight.numpy())},
      float(self.length_weight.numpy()),
    )


# -------------------------------------------------------------------- loss


def mwer_loss(scores, errors, valid):
  """(loss, expected errors) float32 [L] of s(h), errors and valid (1 at real hypotheses) [L, K]:
  sum_h P(h) (errors(h) - mean errors) and sum_h P(h) errors(h), P the softmax over valid h."""
  scores = tf.where(valid > 0, scores, _PADDING_SCORE)
  probs = tf.nn.softmax(scores, axis=-1) * valid
  mean_errors = tf.reduce_sum(errors * valid, -1) / tf.maximum(tf.reduce_sum(valid, -1), 1.0)
  expected = tf.reduce_sum(probs * errors, -1)
  return expected - mean_errors * tf.reduce_sum(probs, -1), expected


def distillation_sum(student_log_probs, teacher_log_probs):
  """sum over positions of KL(teacher || student), float32 [N, V] log-probabilities each."""
  return tf.reduce_sum(losses.kl_divergence(teacher_log_probs, student_log_probs))


# ------------------------------------------------------------------ scorers


def hypothesis_rows(id_lists, kind, scoring, tokenizer, score_sos=False, score_eos=True):
  """The NumPy model inputs that score `id_lists`: a row per sentence for a one-pass kind, a
  masked copy per scored token for bilm/bert.

  Returns:
    dict: input_ids, input_mask int32 [R, T]; read_at int32 [N, 2] (row, position whose output
    predicts the token); targets int32 [N]; owner int32 [N], the sentence of each scored token.
  """
  input_ids, input_mask = inference.pad_rows(id_lists, tokenizer.pad_id, 1)
  lengths = [len(x) for x in id_lists]

  def positions_of(n):
    return kinds.scored_positions(kind.name, n, score_sos, score_eos)

  if kind.masked_copies:
    words = None
    if scoring == "word_l2r":
      words = modeling.token_word_ids(input_ids, tokenizer.continuation_flags()).numpy()
    copies, rows, positions, targets = inference.masked_copy_rows(
      input_ids, [positions_of(n) for n in lengths], tokenizer.mask_id, words
    )
    read_at = np.stack([np.arange(len(rows)), positions], 1)
    return {
      "input_ids": copies,
      "input_mask": input_mask[rows],
      "read_at": read_at.astype(np.int32),
      "targets": targets,
      "owner": rows.astype(np.int32),
    }
  rows = np.array([r for r, n in enumerate(lengths) for _ in positions_of(n)], np.int32)
  positions = np.array([p for n in lengths for p in positions_of(n)], np.int32)
  return {
    "input_ids": input_ids,
    "input_mask": input_mask,
    # Output t predicts the token at t + offset, so token t is read at t - offset.
    "read_at": np.stack([rows, positions - kind.prediction_offset], 1).astype(np.int32),
    "targets": input_ids[rows, positions].astype(np.int32),
    "owner": rows,
  }


def scored_log_probs(model, rows, attention, continuation, training):
  """(log p of each target float32 [N], log-probabilities [N, V]) of `hypothesis_rows`' rows,
  differentiably; `continuation` bool [V] feeds the word attention patterns."""
  inputs = {"input_ids": rows["input_ids"], "input_mask": rows["input_mask"]}
  if attention in modeling.WORD_PATTERNS:
    inputs["word_ids"] = modeling.token_word_ids(rows["input_ids"], continuation)
  hidden, _ = model.encode(inputs, training=training, attention=attention)  # [R, T, D]
  at = tf.gather_nd(hidden, rows["read_at"])  # [N, D]
  log_probs = tf.nn.log_softmax(model.lm_head(at, model.embeddings.word_embeddings), -1)
  return tf.gather(log_probs, rows["targets"], batch_dims=1), log_probs


class NeuralScorer(object):
  """LM(h) of a neural LM trained in place; the regularisers; held-out scoring and export.

  Args:
    teacher: for "distillation", a frozen copy of the starting model.
    seed: with the step, seeds the biLM's MLM masks of the "pretraining" regulariser.
  """

  def __init__(
    self,
    model,
    tokenizer,
    scoring=None,
    max_seq_length=None,
    regularizer="none",
    teacher=None,
    seed=0,
  ):
    if regularizer not in REGULARIZERS:
      raise ValueError(f"regularizer {regularizer!r} is not one of {REGULARIZERS}")
    if regularizer == "distillation" and teacher is None:
      raise ValueError("the distillation regularizer needs the frozen starting model")
    self.model, self.tokenizer, self.kind = model, tokenizer, model.kind
    self.scoring = inference.checked_scoring(scoring or self.kind.default_scoring)
    self.max_seq_length = max_seq_length
    self.regularizer, self.teacher, self.seed = regularizer, teacher, seed
    self.attention = (
      self.kind.attention if self.kind.masked_copies else self.kind.one_pass_attention(self.scoring)
    )
    self.continuation = tokenizer.continuation_flags()
    self._special_ids = input_pipeline.special_ids_from_vocab(tokenizer.vocab)

  @property
  def trainable_variables(self):
    return self.model.trainable_variables

  def inference_lm(self, **kwargs):
    """An `inference.NeuralLM` of a snapshot of the model's current weights."""
    return inference.NeuralLM(
      self.model, self.tokenizer, max_seq_length=self.max_seq_length, **kwargs
    )

  def inputs(self, prepared):
    width = max(len(p.ids) for p in prepared)
    rows = hypothesis_rows(
      [ids for p in prepared for ids in p.ids], self.kind, self.scoring, self.tokenizer
    )
    # Hypothesis j of list i sits at i * width + j of the flat [L * K] scores.
    flat = np.array([i * width + j for i, p in enumerate(prepared) for j in range(len(p.ids))])
    rows["owner"] = flat[rows["owner"]].astype(np.int32)
    rows["shape"] = np.array([len(prepared), width], np.int32)
    references, _ = inference.pad_rows(
      [p.reference_ids for p in prepared], self.tokenizer.pad_id, 1
    )
    rows["reference_ids"] = references
    rows["reference_mask"] = (references != self.tokenizer.pad_id).astype(np.int32)
    return rows

  def regularizer_denominator(self, inputs):
    """The batch's reference tokens ("pretraining") or scored tokens ("distillation")."""
    if self.regularizer == "pretraining":
      return float(inputs["reference_mask"].sum())
    return float(len(inputs["targets"]))

  def lm_scores(self, inputs, training):
    """(LM(h) float32 [L, K] (0 at padding), log-probabilities at the scored tokens [N, V])."""
    picked, log_probs = scored_log_probs(
      self.model, inputs, self.attention, self.continuation, training
    )
    shape = inputs["shape"]
    flat = tf.math.unsorted_segment_sum(picked, inputs["owner"], shape[0] * shape[1])
    return tf.reshape(flat, shape), log_probs

  def regularizer_sum(self, inputs, log_probs, step, training):
    """float32 scalar, the regularizer before its division by `regularizer_denominator`."""
    if self.regularizer == "pretraining":
      features = input_pipeline.make_targets(
        {"input_ids": inputs["reference_ids"], "input_mask": inputs["reference_mask"]},
        self.model.model_type,
        tf.stack([tf.cast(self.seed, tf.int64), tf.cast(step, tf.int64)]),
        self.model.config.vocab_size,
        self.tokenizer.mask_id,
        self._special_ids,
        continuation=self.continuation,
      )
      return losses.forward_loss_terms(self.model, features, training=training)["loss_sum"]
    if self.regularizer == "distillation":
      _, teacher = scored_log_probs(
        self.teacher, inputs, self.attention, self.continuation, training=False
      )
      return distillation_sum(log_probs, teacher)
    return tf.constant(0.0)

  def lm_table(self, prepared, **kwargs):
    """Per list, float64 [K] LM scores under the current weights, exactly as run_rescoring.py
    would score the saved model."""
    lm = self.inference_lm(**kwargs)
    texts = sorted({t for p in prepared for t in p.texts})
    totals = dict(zip(texts, (r.total for r in lm.score(texts, scoring=self.scoring))))
    return [np.array([totals[t] for t in p.texts]) for p in prepared]

  def export(self, path, training_record):
    """Writes a model dir whose config.json records `training_record` under "training"."""
    config = self.model.config
    previous = config.extra.get("training")
    config.extra["training"] = training_record
    try:
      model_dir.save_model_dir(self.model, self.tokenizer.vocab_file, path)
    finally:
      if previous is None:
        config.extra.pop("training")
      else:
        config.extra["training"] = previous


class FrozenScorer(object):
  """LM(h) from a fixed table (the LM not trained): the combination weights alone learn."""

  regularizer = "none"
  trainable_variables = ()
  model = None

  def __init__(self, scores):
    self.scores = scores

  def lm_table(self, prepared, **kwargs):
    del kwargs
    return [np.array([self.scores[t] for t in p.texts]) for p in prepared]

  def inputs(self, prepared):
    width = max(len(p.texts) for p in prepared)
    lm = np.zeros((len(prepared), width), np.float32)
    for row, scores in enumerate(self.lm_table(prepared)):
      lm[row, : len(scores)] = scores
    return {"lm": lm}

  def regularizer_denominator(self, inputs):
    del inputs
    return 1.0

  def lm_scores(self, inputs, training):
    del training
    return tf.convert_to_tensor(inputs["lm"]), None

  def regularizer_sum(self, inputs, log_probs, step, training):
    del inputs, log_probs, step, training
    return tf.constant(0.0)

  def export(self, path, training_record):
    del path, training_record


# -------------------------------------------------------------------- step


class Trainer(object):
  """One MWER step under a `tf.distribute` strategy. Each replica divides its loss by the GLOBAL
  list count (its regularizer by the global denominator), so the optimizers' cross-replica sums
  are the global batch's gradients. Dropout and MLM masks draw from (seed, step, replica), so a
  resumed run draws what an uninterrupted one does.
  """

  def __init__(self, strategy, scorer, weights, optimizers, regularizer_weight, dropout, seed):
    self.strategy, self.scorer, self.weights = strategy, scorer, weights
    self.lm_optimizer, self.weights_optimizer = optimizers
    self.regularizer_weight = float(regularizer_weight)
    self.dropout, self.seed = dropout, seed
    self._function = None

  def step(self, prepared, step):
    """Trains on a batch of PreparedLists; returns the global sums: lists, mwer (loss sum),
    expected_errors, regularizer (its sum / denominator)."""
    shards = [s for s in np.array_split(np.arange(len(prepared)), self.replicas) if len(s)]
    if len(shards) < self.replicas:
      raise ValueError(f"a batch of {len(prepared)} lists cannot feed {self.replicas} replicas")
    inputs = [self._replica_inputs([prepared[i] for i in shard]) for shard in shards]
    denominator = max(sum(self.scorer.regularizer_denominator(x) for x in inputs), 1.0)
    for x in inputs:
      x["num_lists"] = np.float32(len(prepared))
      x["regularizer_denominator"] = np.float32(denominator)
      x["step"] = np.int64(step)
    if self._function is None:
      spec = tf.nest.map_structure(
        lambda x: tf.TensorSpec([None] * np.ndim(x), tf.as_dtype(np.asarray(x).dtype)), inputs[0]
      )
      # Unknown sizes: one trace serves every batch. autograph=False: nothing here needs it,
      # and converting the model's Python costs much of a trace.
      self._function = tf.function(
        self._distributed_step, input_signature=[spec] * self.replicas, autograph=False
      )
    sums = self._function(*inputs)
    sums = {
      k: float(self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None))
      for k, v in sums.items()
    }
    return dict(sums, lists=float(len(prepared)))

  def _distributed_step(self, *inputs):
    distributed = self.strategy.experimental_distribute_values_from_function(
      lambda context: inputs[context.replica_id_in_sync_group]
    )
    return self.strategy.run(self._replica_step, args=(distributed,))

  @property
  def replicas(self):
    return self.strategy.num_replicas_in_sync

  def _replica_inputs(self, prepared):
    inputs = self.scorer.inputs(prepared)
    inputs.update(mwer_data.padded(prepared))
    return inputs

  def _replica_step(self, inputs):
    lm_variables = list(self.scorer.trainable_variables)
    weight_variables = list(self.weights.trainable_variables)
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    seed = tf.stack([tf.constant(self.seed, tf.int64), inputs["step"]])
    seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(replica, tf.int64))
    with tf.GradientTape() as tape, modeling.stateless_dropout(seed):
      lm, log_probs = self.scorer.lm_scores(inputs, training=self.dropout)
      scores = self.weights(inputs["features"], lm, inputs["words"])
      loss, expected = mwer_loss(scores, inputs["errors"], inputs["valid"])
      mwer = tf.reduce_sum(loss)
      regularizer = self.scorer.regularizer_sum(inputs, log_probs, inputs["step"], self.dropout)
      regularizer /= inputs["regularizer_denominator"]
      total = mwer / inputs["num_lists"] + self.regularizer_weight * regularizer
    gradients = tape.gradient(total, lm_variables + weight_variables)
    if lm_variables:
      self.lm_optimizer.apply_gradients(zip(gradients[: len(lm_variables)], lm_variables))
    self.weights_optimizer.apply_gradients(zip(gradients[len(lm_variables) :], weight_variables))
    return {
      "mwer": mwer,
      "expected_errors": tf.reduce_sum(expected),
      "regularizer": regularizer,
    }

# coding=utf-8
"""Distillation into one pass (docs/DESIGN.md §3.6): a T-TA trained on its own targets mixed with a
teacher's masked predictions, `run_pretraining.py --teacher`.

The teacher (a biLM or BERT) predicts position t of a sentence from the copy with t masked: the
distribution its pseudo-log-likelihood reads at t (lm/inference.py, §4.1), computed here by the same
`ScoringGraph` of an `inference.NeuralLM`, on each replica's batch of the input pipeline, in chunks
of the LM's token budget. With w = --distill_weight and T = --distill_temperature, one replica's
loss sum (divided by the run's one denominator, as `losses.training_loss`) is

  L = sum_t m_t (1 - w d_t) CE(x_t, p_t) + w T^2 sum_t m_t d_t KL(q_t^T || p_t^T)

over the batch's targets t: m_t the target weight (1 at every real token for T-TA), x_t the token,
p_t = softmax(z_t) the student's distribution (logits z_t), d_t = 1 where the teacher predicts (the
positions its PLL scores: every piece and [EOS], not [SOS], `kinds.scored_span`), else 0 (there the
target stays one-hot), q_t the teacher's distribution at t, p_t^T = softmax(z_t / T) and
q_t^T = softmax(log q_t / T) (= the softmax of its logits / T). KL(q || p) = CE(q, p) - H(q): Hinton
et al. (2015)'s soft cross-entropy less the teacher's entropy, which has no gradient, so the soft
term is 0 where the student matches; T^2 keeps its gradient's size as T changes (their §2). w = 0 is
the plain T-TA loss exactly; w = 1 is pure distillation. Eval losses stay plain cross-entropy.
"""

import dataclasses
import os

import tensorflow as tf

import kinds
from lm import inference
from lm import model_dir
from lm import warm_start
from pretraining import losses
import tokenization

DEFAULT_TEMPERATURE = 1.0
DEFAULT_WEIGHT = 0.5


@dataclasses.dataclass(frozen=True)
class Settings:
  """T (> 0) and w (in [0, 1]) of the module's formula."""

  temperature: float = DEFAULT_TEMPERATURE
  weight: float = DEFAULT_WEIGHT


def identity(teacher, chosen):
  """The teacher's part of a run identity (util/runs.py): what its model `teacher` (a --teacher
  spec) is, reading no weights, and the `Settings` `chosen`, so a resume with another teacher or
  settings is another job."""
  return {
    "model": inference.spec_identity(teacher),
    "temperature": chosen.temperature,
    "weight": chosen.weight,
  }


# ---------------------------------------------------------- before training


def teacher_type(spec):
  """The kind of --teacher `spec`: "bert" for hf:/bert:, else its model dir's model_type."""
  if spec.startswith((warm_start.HF_PREFIX, warm_start.BERT_PREFIX)):
    return "bert"
  if not os.path.isdir(spec):
    raise ValueError(f"--teacher {spec}: a teacher is a model dir, hf:DIR or bert:DIR")
  return model_dir.read_config(spec).model_type


def open_teacher(spec):
  """--teacher's `warm_start.Source` (its config and vocab, no weights), a biLM or BERT;
  ValueError / FileNotFoundError in one line. `resolve_vocab` checks its vocab against the
  records' (`warm_start.check_vocab`), `check_teacher` the rest."""
  source = warm_start.open_source(spec, flag="teacher")
  # A release may be a bare encoder (read here without its weights); our model dirs have heads.
  if spec.startswith((warm_start.HF_PREFIX, warm_start.BERT_PREFIX)):
    if source.tensors().shape("cls/predictions/output_bias") is None:
      raise ValueError(
        f"--teacher {spec} has no masked-LM head (cls.predictions.*): a teacher predicts the "
        "masked token"
      )
  kind = teacher_type(spec)
  if not kinds.get(kind).masked_copies:
    raise ValueError(
      f"--teacher {spec} is a {kind}; a teacher predicts each position from the copy with it "
      "masked: a bilm model dir, hf:DIR or bert:DIR"
    )
  return source


def check_teacher(source, config, max_seq_length, vocab, casing_origin):
  """ValueError in one line unless the teacher reads the run's sentences as the run does: its
  casing, at least max_seq_length positions, the same boundary tokens."""
  warm_start.check_casing(source, config.do_lower_case, casing_origin)
  positions = source.fields["max_position_embeddings"]
  if positions < max_seq_length:
    raise ValueError(
      f"--teacher {source.spec} takes {positions} positions, fewer than --max_seq_length "
      f"{max_seq_length}"
    )
  spec = source.spec
  if spec.startswith((warm_start.HF_PREFIX, warm_start.BERT_PREFIX)):
    theirs = ("[CLS]", "[SEP]")  # what a BERT was trained on (hf_checkpoint, conversion)
  else:
    theirs = tuple(
      model_dir.read_config(spec).boundary_tokens or tokenization.boundary_tokens(vocab)
    )
  ours = tokenization.boundary_tokens(vocab)
  if theirs != ours:
    raise ValueError(
      f"--teacher {spec} frames a sentence with {' '.join(theirs)}, the records with "
      f"{' '.join(ours)}"
    )


# ------------------------------------------------------------- the training step


def teacher_span(model_type, input_mask):
  """(starts, limits) int32 [B]: the positions a teacher of `model_type` predicts in each row of
  input_mask int32 [B, T], the span its PLL scores (`kinds.scored_span`)."""
  lengths = tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=1)
  first, limits = kinds.scored_span(model_type, lengths)
  return tf.fill(tf.shape(lengths), first), limits


def distilled_mask(model_type, input_mask):
  """bool [B, T], True inside `teacher_span`: d_t of the module's formula."""
  starts, limits = teacher_span(model_type, input_mask)
  columns = tf.range(tf.shape(input_mask)[1])[tf.newaxis]  # [1, T]
  return (columns >= starts[:, tf.newaxis]) & (columns < limits[:, tf.newaxis])


def mixed_terms(logits, target_ids, target_weights, distilled, teacher_log_probs, chosen):
  """The module's L and the plain sums: logits [n, V], target_ids int32 [n], target_weights [n],
  distilled bool [n] (d), teacher_log_probs float32 [r, V] (log q at the r distilled targets, in
  order) -> float32 loss_sum (L), weight_sum, correct_sum and ce_sum (the plain CE, for the logged
  perplexity)."""
  weights = tf.cast(target_weights, tf.float32)
  ce, correct = losses.token_cross_entropy(logits, target_ids)  # [n] each
  w, temperature = chosen.weight, chosen.temperature
  hard = weights * (1.0 - w * tf.cast(distilled, tf.float32))
  student = tf.nn.log_softmax(
    tf.boolean_mask(tf.cast(logits, tf.float32), distilled) / temperature, axis=-1
  )  # [r, V]
  teacher = tf.nn.log_softmax(tf.cast(teacher_log_probs, tf.float32) / temperature, axis=-1)
  kl = losses.kl_divergence(teacher, student)  # [r]
  soft = w * temperature**2 * tf.reduce_sum(tf.boolean_mask(weights, distilled) * kl)
  return dict(
    loss_sum=tf.reduce_sum(hard * ce) + soft,
    weight_sum=tf.reduce_sum(weights),
    correct_sum=tf.reduce_sum(weights * correct),
    ce_sum=tf.reduce_sum(weights * ce),
  )


class Distiller(object):
  """The teacher and the settings of a run: `teacher_log_probs` on a replica's batch (outside the
  gradient tape), then `training_loss` in it.

  Args:
    teacher: an `inference.NeuralLM` of a biLM or BERT, built under the run's strategy (`load`).
    chosen: `Settings`.
  """

  def __init__(self, teacher, chosen):
    self.teacher = teacher
    self.settings = chosen
    self.model_type = teacher.model_type

  @classmethod
  def load(cls, teacher, chosen, strategy):
    """The teacher of spec `teacher` (--teacher) with `Settings` `chosen`, its variables under
    `strategy` (it runs on every replica)."""
    return cls(inference.load_lm(teacher, strategy=strategy), chosen)

  def teacher_log_probs(self, features):
    """float32 [r, V]: log q at every distilled position (`distilled_mask`) of features'
    input_ids, input_mask int32 [B, T], row by row; the PLL path's masked copies."""
    input_mask = features["input_mask"]
    starts, limits = teacher_span(self.model_type, input_mask)
    log_probs = self.teacher.graph.masked_distributions(
      features["input_ids"],
      input_mask,
      starts,
      limits,
      self.teacher.mask_id,
      self.teacher.token_budget,
    )
    return tf.stop_gradient(log_probs)

  def training_loss(self, model, features, teacher_log_probs, denominator, training=True):
    """(L / denominator, terms) of one replica's batch, the student `model`'s targets gathered
    where target_weights > 0 (as `losses.forward_loss_terms`)."""
    hidden, _ = model.encode(features, training=training)
    where = tf.where(tf.cast(features["target_weights"], tf.float32) > 0)  # [n, 2]
    distilled = tf.gather_nd(distilled_mask(self.model_type, features["input_mask"]), where)
    logits = model.lm_head(tf.gather_nd(hidden, where), model.embeddings.word_embeddings)
    terms = mixed_terms(
      logits,
      tf.gather_nd(features["target_ids"], where),
      tf.gather_nd(features["target_weights"], where),
      distilled,
      teacher_log_probs,
      self.settings,
    )
    return terms["loss_sum"] / denominator, terms

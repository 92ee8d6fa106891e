"""Exports a model directory as a SavedModel that takes raw sentences.

The SavedModel holds the in-graph WordPiece tokenizer and the model, so a
server (TF Serving, a C++ or Python client) needs no Python tokenizer. Two
signatures, both taking `texts`: tf.string [B] (UTF-8 sentences):

  encode -> {"context": float32 [B, D]  mean of the last layer over the word
                        pieces, [SOS]/[EOS] excluded (bilm/bert: position
                        i's vector from the copy with token i masked, the
                        paper's mask-and-predict biLM; zeros for a sentence
                        without pieces),
             "embed":   float32 [B, D]  the same mean of the embedding output,
             "first":   float32 [B, D]  last layer at the start token,
             "last":    float32 [B, D]  last layer at the end token,
             bilm/bert only:
             "context_intact": float32 [B, D]  "context" on the intact
                        input (run_sts.py's "context\\M")}
  score  -> {"total":          float32 [B]     sum of the token log-probs,
             "num_tokens":     int32 [B]       tokens scored,
             "token_logprobs": float32 [B, T]  log p of the token at position
                        t (the [EOS] included, [SOS] not, by default), 0
                        where nothing is scored; T = the longest sentence of
                        the batch in tokens, boundaries included,
             "truncated":      bool [B]        the sentence was cut to fit}

The numbers are those of `inference.NeuralLM.score` / `.sentence_vectors`
(tests/test_export.py checks it): tta one pass, log p(x_t | x_\\t); unilm
the chain rule, output t-1 predicting token t; bilm/bert the pseudo-log-
likelihood from one masked copy per scored position, built in the graph,
the LM head evaluated at the masked position only. A sentence longer than
max_seq_length - 2 word pieces loses its last pieces, keeping [SOS] ... [EOS],
and is flagged in "truncated".

Loading needs tensorflow_text imported first (it registers the tokenizer
ops):
  import tensorflow as tf, tensorflow_text  # noqa
  loaded = tf.saved_model.load("exports/tta")
  out = loaded.signatures["score"](texts=tf.constant(["the cat sat"]))

Example:
  python export_saved_model.py --model_dir=runs/tta --export_dir=exports/tta
"""

import json
import os
import shutil
import tempfile

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

import inference

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (called from __main__ only, so that
  tests can import this module beside other scripts with the same flag
  names)."""
  flags.DEFINE_string("model_dir", None,
                      "Model directory (config.json, vocab.txt, checkpoint), "
                      "as written by run_pretraining.py.")
  flags.DEFINE_string("export_dir", None, "Where to write the SavedModel.")
  flags.DEFINE_integer("max_seq_length", None, "Longest input in tokens, "
                       "boundaries included (default: the model's "
                       "max_position_embeddings).")
  flags.DEFINE_bool("score_sos", False, "Also score the start token (tta, "
                    "bilm, bert).")
  flags.DEFINE_bool("score_eos", True, "Score the end token.")
  flags.DEFINE_integer("token_budget", 16384, "bilm/bert: most tokens (masked "
                       "copies x length) per forward pass inside the graph.")
  flags.DEFINE_bool("overwrite", False, "Replace an existing --export_dir.")


# Extra files beside the SavedModel, as TF Serving names the folder.
EXTRA_DIR = "assets.extra"
EXPORT_INFO = "tta_export.json"
SIGNATURES = ("encode", "score")

_TEXTS = tf.TensorSpec([None], tf.string, name="texts")


class ExportModule(tf.Module):
  """Tokenizer + model with `encode` and `score` taking raw strings.

  The scoring conventions (boundary ids, max_seq_length, which tokens are
  scored, the [MASK] id) are read from an `inference.NeuralLM`, so the
  exported graph and the Python path cannot disagree on them.

  Dimensions: B = sentences, T = the batch's longest length in tokens,
  R = masked copies, D = hidden size, V = vocab size.
  """

  def __init__(self, lm, name=None):
    """Builds the module.

    Args:
      lm: `inference.NeuralLM` (tta, bilm, bert or unilm).
      name: tf.Module name.
    """
    super().__init__(name=name)
    self.model = lm.model
    self.tokenizer = lm.tokenizer.graph_tokenizer()
    # Plain Python values: baked into the graph as constants.
    self._model_type = lm.model_type
    self._max_seq_length = int(lm.max_seq_length)
    self._bos_id = int(lm.bos_id)
    self._eos_id = int(lm.eos_id)
    self._mask_id = int(lm.mask_id)
    self._pad_id = int(lm.tokenizer.pad_id)
    self._score_sos = bool(lm.score_sos)
    self._score_eos = bool(lm.score_eos)
    self._token_budget = int(lm.token_budget)
    self._masked_copies_kind = lm.model_type in ("bilm", "bert")
    # T-TA: the NeuralLM's fused key/value snapshot, saved with the module.
    self._fused_key_value = lm.fused_key_value
    self._normalization = lm.normalization
    if lm.normalization != "none":
      logging.warning(
          "the model was trained on %s-normalized text; the SavedModel "
          "tokenizes its input as given, so normalize texts before calling "
          "it (inference.normalizer)", lm.normalization)

  def info(self):
    """The conventions baked into the graph, JSON-able."""
    return {"model_type": self._model_type,
            "max_seq_length": self._max_seq_length,
            "bos_id": self._bos_id, "eos_id": self._eos_id,
            "mask_id": self._mask_id, "pad_id": self._pad_id,
            "score_sos": self._score_sos, "score_eos": self._score_eos,
            "token_budget": self._token_budget,
            "normalization": self._normalization,
            "config": json.loads(self.model.config.to_json_string())}

  # ------------------------------------------------------------ inputs

  def _inputs(self, texts):
    """texts [B] -> input_ids, input_mask int32 [B, T], lengths int32 [B],
    truncated bool [B].

    Same truncation as inference.NeuralLM.tokenize: keep the first
    max_seq_length - 2 pieces, then wrap in the boundary tokens.
    """
    pieces = self.tokenizer(texts)  # [B, (P)]
    keep = self._max_seq_length - 2
    truncated = pieces.row_lengths() > keep
    pieces = pieces[:, :keep]
    column = tf.ones([tf.shape(texts)[0], 1], tf.int32)
    ids = tf.concat([column * self._bos_id, pieces, column * self._eos_id],
                    axis=1)  # [B, (P + 2)]
    lengths = tf.cast(ids.row_lengths(), tf.int32)
    input_ids = ids.to_tensor(default_value=self._pad_id)  # [B, T]
    # An empty batch comes out [0, 0]; every sentence has at least its two
    # boundary tokens, so make T >= 2 and the slices below valid for B = 0.
    input_ids = tf.pad(input_ids,
                       [[0, 0], [0, tf.maximum(2 - tf.shape(input_ids)[1], 0)]],
                       constant_values=self._pad_id)
    input_mask = tf.sequence_mask(lengths, tf.shape(input_ids)[1], tf.int32)
    return input_ids, input_mask, lengths, truncated

  def _encode(self, input_ids, input_mask):
    return self.model.encode({"input_ids": input_ids,
                              "input_mask": input_mask}, training=False,
                             fused_key_value=self._fused_key_value)

  def _target_log_probs(self, hidden, targets):
    """hidden [N, D], targets int32 [N] -> log p(target) float32 [N].

    The same formula as inference.py (logit of the target minus the
    log-sum-exp), so the two paths round alike.
    """
    logits = self.model.lm_head(hidden, self.model.embeddings.word_embeddings)
    picked = tf.gather(logits, targets, batch_dims=1)
    return picked - tf.reduce_logsumexp(logits, axis=-1)

  def _masked_copies(self, input_ids, input_mask, starts, limits,
                     with_head):
    """One copy per (sentence b, position p in [starts[b], limits[b])) with
    token p replaced by [MASK], run in chunks within the token budget.

    Args:
      input_ids, input_mask: int32 [B, T].
      starts, limits: int32 [B].
      with_head: Python bool; also return log p of the masked tokens.

    Returns:
      rows int32 [R] (the sentence of each copy), positions int32 [R],
      hidden at the masked position float32 [R, D], and log p of the
      original token there float32 [R] (None unless with_head).
    """
    positions = tf.ragged.range(starts, limits)  # [B, (R_b)]
    rows = tf.cast(positions.value_rowids(), tf.int32)  # [R]
    positions = positions.flat_values  # [R]
    width = tf.shape(input_ids)[1]
    copies = tf.gather(input_ids, rows)  # [R, T]
    targets = tf.gather(copies, positions, batch_dims=1)  # [R]
    copies = tf.where(tf.one_hot(positions, width, on_value=True,
                                 off_value=False, dtype=tf.bool),
                      self._mask_id, copies)
    copy_mask = tf.gather(input_mask, rows)  # [R, T]
    num_copies = tf.shape(rows)[0]
    # Rows per forward pass: a sentence of 128 tokens has up to 127 copies,
    # and a batch of sentences many more; the budget bounds the memory.
    # (max(width, 1): an empty batch has width 0.)
    chunk = tf.maximum(self._token_budget // tf.maximum(width, 1), 1)
    dim = self.model.config.hidden_size

    def body(begin, hidden_acc, logp_acc):
      end = tf.minimum(begin + chunk, num_copies)
      hidden, _ = self._encode(copies[begin:end], copy_mask[begin:end])
      at_mask = tf.gather(hidden, positions[begin:end], batch_dims=1)
      hidden_acc = tf.concat([hidden_acc, at_mask], 0)
      if with_head:
        logp_acc = tf.concat(
            [logp_acc, self._target_log_probs(at_mask, targets[begin:end])],
            0)
      return end, hidden_acc, logp_acc

    # A while_loop (not a Python loop) because R is only known at run time;
    # concatenating the chunks' results costs little next to the model.
    _, hidden, logp = tf.while_loop(
        lambda begin, *_: begin < num_copies, body,
        (tf.constant(0), tf.zeros([0, dim]), tf.zeros([0])),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, dim]),
                          tf.TensorShape([None])))
    return rows, positions, hidden, (logp if with_head else None)

  # --------------------------------------------------------- signatures

  def encode(self, texts):
    """The `encode` signature: sentence vectors.

    Args:
      texts: tf.string [B].

    Returns:
      dict of float32 [B, D]: context, embed, first, last (and
      context_intact for bilm/bert); see the module docstring.
    """
    input_ids, input_mask, lengths, _ = self._inputs(texts)
    hidden, embedding = self._encode(input_ids, input_mask)  # [B, T, D]
    width = tf.shape(input_ids)[1]
    # Word pieces only: positions 1 .. n-2.
    words = tf.logical_and(tf.range(width)[tf.newaxis] >= 1,
                           tf.range(width)[tf.newaxis] < (lengths - 1)[:, None])
    words = tf.cast(words, tf.float32)[:, :, tf.newaxis]  # [B, T, 1]
    # max(., 1): a sentence without pieces sums nothing and stays all zero.
    count = tf.maximum(tf.reduce_sum(words, axis=1), 1.0)  # [B, 1]

    def word_mean(x):
      return tf.reduce_sum(x * words, axis=1) / count

    out = {"embed": word_mean(embedding),
           "first": hidden[:, 0],
           "last": tf.gather(hidden, lengths - 1, batch_dims=1)}
    if self._masked_copies_kind:
      out["context_intact"] = word_mean(hidden)
      rows, _, at_mask, _ = self._masked_copies(
          input_ids, input_mask, tf.ones_like(lengths),
          tf.maximum(lengths - 1, 1), with_head=False)
      sums = tf.math.unsorted_segment_sum(at_mask, rows,
                                          tf.shape(lengths)[0])
      out["context"] = sums / count
    else:
      out["context"] = word_mean(hidden)
    return out

  def score(self, texts):
    """The `score` signature: sentence and token log-probabilities.

    Args:
      texts: tf.string [B].

    Returns:
      dict: total float32 [B], num_tokens int32 [B], token_logprobs
      float32 [B, T], truncated bool [B]; see the module docstring.
    """
    input_ids, input_mask, lengths, truncated = self._inputs(texts)
    # Scored token positions [starts, limits); unilm never scores [SOS].
    starts = tf.fill(tf.shape(lengths), 0 if self._score_sos else 1)
    limits = lengths if self._score_eos else lengths - 1
    limits = tf.maximum(limits, starts)
    if self._masked_copies_kind:
      rows, positions, _, logp = self._masked_copies(
          input_ids, input_mask, starts, limits, with_head=True)
    else:
      hidden, _ = self._encode(input_ids, input_mask)  # [B, T, D]
      positions = tf.ragged.range(starts, limits)
      rows = tf.cast(positions.value_rowids(), tf.int32)
      positions = positions.flat_values
      # uniLM output t predicts token t+1, so token p is read at p - 1.
      shift = 1 if self._model_type == "unilm" else 0
      at = tf.gather_nd(hidden, tf.stack([rows, positions - shift], 1))
      targets = tf.gather_nd(input_ids, tf.stack([rows, positions], 1))
      logp = self._target_log_probs(at, targets)
    token_logprobs = tf.scatter_nd(tf.stack([rows, positions], 1), logp,
                                   tf.shape(input_ids))  # [B, T]
    return {"total": tf.reduce_sum(token_logprobs, axis=1),
            "num_tokens": limits - starts,
            "token_logprobs": token_logprobs,
            "truncated": truncated}


def export(lm, export_dir, overwrite=False):
  """Writes `lm` as a SavedModel with the `encode` and `score` signatures.

  The SavedModel is written to a temporary folder beside export_dir and
  renamed into place, so a reader never sees half an export.

  Args:
    lm: `inference.NeuralLM`.
    export_dir: str, local folder to create.
    overwrite: replace an existing export_dir.

  Returns:
    The `ExportModule` that was saved.

  Raises:
    FileExistsError: export_dir exists and overwrite is False.
  """
  export_dir = os.path.abspath(export_dir)
  if os.path.exists(export_dir) and not overwrite:
    raise FileExistsError("%s exists; pass --overwrite to replace it" %
                          export_dir)
  module = ExportModule(lm)
  # The signatures are traced here from plain methods: a tf.function held by
  # the module would be traced a second time by tf.saved_model.save (and
  # the export take twice as long) for no gain over the signatures.
  signatures = {
      name: tf.function(getattr(module, name), input_signature=[_TEXTS],
                        autograph=False).get_concrete_function()
      for name in SIGNATURES}
  parent = os.path.dirname(export_dir)
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(dir=parent,
                         prefix="." + os.path.basename(export_dir) + ".")
  try:
    tf.saved_model.save(module, tmp, signatures=signatures)
    os.makedirs(os.path.join(tmp, EXTRA_DIR), exist_ok=True)
    with open(os.path.join(tmp, EXTRA_DIR, EXPORT_INFO), "w",
              encoding="utf-8") as f:
      json.dump(module.info(), f, indent=2, sort_keys=True)
      f.write("\n")
    if os.path.exists(export_dir):
      shutil.rmtree(export_dir)
    os.replace(tmp, export_dir)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  logging.info("exported %s model to %s", lm.model_type, export_dir)
  return module


def main(argv):
  del argv
  lm = inference.NeuralLM.from_model_dir(
      FLAGS.model_dir, max_seq_length=FLAGS.max_seq_length,
      score_sos=FLAGS.score_sos, score_eos=FLAGS.score_eos,
      token_budget=FLAGS.token_budget)
  export(lm, FLAGS.export_dir, overwrite=FLAGS.overwrite)
  # Reload and run once, so a broken export fails here, not in a server.
  loaded = tf.saved_model.load(FLAGS.export_dir)
  texts = tf.constant(["the cat sat on the mat ."])
  scores = loaded.signatures["score"](texts=texts)
  vectors = loaded.signatures["encode"](texts=texts)
  logging.info("check: total %.4f over %d tokens; context vector of %d dims",
               float(scores["total"][0]), int(scores["num_tokens"][0]),
               int(vectors["context"].shape[-1]))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("model_dir")
  flags.mark_flag_as_required("export_dir")
  app.run(main)

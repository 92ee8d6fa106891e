"""A NeuralLM as a SavedModel taking sentences as strings (the library of export_saved_model.py,
whose job is `export_job`): the in-graph WordPiece tokenizer and the NeuralLM's own
`ScoringGraph`, so a server needs no Python and gets NeuralLM's numbers. Signatures, inputs and
loading: docs/saved_model.md.
"""

import fnmatch
import json
import os

from absl import logging
import tensorflow as tf

import kinds
from lm import inference
from util import io_utils

# Extra files beside the SavedModel, as TF Serving names the folder.
EXTRA_DIR = "assets.extra"
EXPORT_INFO = "tta_export.json"
SIGNATURES = ("encode", "score")

# What normalized text cannot hold (RE2): a lower-case letter, a decimal digit, or punctuation
# other than the apostrophe. Characters A-Z cannot spell (emoji, CJK) stay: the normalizer keeps
# them as words of their own, which the tokenizer maps to [UNK].
_NOT_NORMALIZED = r"(?s).*(\p{Ll}|\p{Nd}|[^'\P{P}]).*"
_NOT_NORMALIZED_RULE = (
  "normalized_texts must be {}-normalized like the model's training text "
  "(normalization.normalize_librispeech: upper case, numbers spelled out): no lower-case "
  "letters, digits or punctuation other than apostrophes; offending sentences:"
)


class ExportModule(tf.Module):
  """Tokenizer + `ScoringGraph` with `encode` and `score` signatures taking strings; the
  NeuralLM's conventions baked in as constants.

  B sentences, T the batch's longest length in tokens, R masked copies, D hidden.
  """

  def __init__(self, lm, name=None, scoring=None):
    """scoring: what `score` computes (ValueError unless in SCORINGS); None: the kind's."""
    super().__init__(name=name)
    self.scoring = inference.checked_scoring(scoring or lm.default_scoring)
    self.graph = lm.graph
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
    self._masked_copies_kind = lm.kind.masked_copies
    self._normalization = lm.normalization
    # The signatures' input: raw text only where the Python path does not normalize it.
    self.input_name = "texts" if lm.normalization == "none" else "normalized_texts"

  def info(self):
    return {
      "model_type": self._model_type,
      "max_seq_length": self._max_seq_length,
      "bos_id": self._bos_id,
      "eos_id": self._eos_id,
      "mask_id": self._mask_id,
      "pad_id": self._pad_id,
      "score_sos": self._score_sos,
      "score_eos": self._score_eos,
      "scoring": self.scoring,
      "token_budget": self._token_budget,
      "normalization": self._normalization,
      "input": self.input_name,
      "config": json.loads(self.graph.model.config.to_json_string()),
    }

  # ------------------------------------------------------------ inputs

  def _inputs(self, texts):
    """texts [B] -> `ScoringGraph.frame`'s tensors, checked normalized first if the model is."""
    if self._normalization != "none":
      texts = self._assert_normalized(texts)
    return self.graph.frame(
      self.tokenizer(texts), self._max_seq_length, self._bos_id, self._eos_id, self._pad_id
    )

  def _assert_normalized(self, texts):
    """texts, with an InvalidArgumentError at run time naming the rule and offending ones."""
    bad = tf.strings.regex_full_match(texts, _NOT_NORMALIZED)  # [B]
    check = tf.debugging.Assert(
      tf.logical_not(tf.reduce_any(bad)),
      [_NOT_NORMALIZED_RULE.format(self._normalization), tf.boolean_mask(texts, bad)],
      summarize=5,
    )
    with tf.control_dependencies([check]):
      return tf.identity(texts)

  def _scored_span(self, lengths):
    """[starts, limits) int32 [B] of each sentence's scored positions (`kinds.scored_span`)."""
    first, limits = kinds.scored_span(self._model_type, lengths, self._score_sos, self._score_eos)
    starts = tf.fill(tf.shape(lengths), first)
    return starts, tf.maximum(limits, starts)

  def _masked_copies(self, input_ids, input_mask, starts, limits, with_head, word_l2r=False):
    return self.graph.masked_copies(
      input_ids,
      input_mask,
      starts,
      limits,
      self._mask_id,
      self._token_budget,
      with_head,
      word_l2r=word_l2r,
    )

  # --------------------------------------------------------- signatures

  def encode(self, texts):
    """The `encode` signature: tf.string [B] -> dict of float32 [B, D] (docs/saved_model.md)."""
    input_ids, input_mask, lengths, _ = self._inputs(texts)
    out = self.graph.sentence_vectors(input_ids, input_mask)
    if self._masked_copies_kind:
      # Position i's vector from the copy with token i masked, i over the
      # word pieces 1 .. n-2; a sentence without pieces gets zeros.
      rows, _, at_mask, _ = self._masked_copies(
        input_ids, input_mask, tf.ones_like(lengths), tf.maximum(lengths - 1, 1), with_head=False
      )
      out["context_intact"] = out["context"]
      out["context"] = tf.math.unsorted_segment_mean(at_mask, rows, tf.shape(lengths)[0])
    return out

  def score(self, texts):
    """The `score` signature in `self.scoring`: tf.string [B] -> total float32 [B], num_tokens
    int32 [B], token_logprobs float32 [B, T], truncated bool [B].
    """
    input_ids, input_mask, lengths, truncated = self._inputs(texts)
    starts, limits = self._scored_span(lengths)
    if self._masked_copies_kind:
      rows, positions, _, logp = self._masked_copies(
        input_ids, input_mask, starts, limits, with_head=True, word_l2r=self.scoring == "word_l2r"
      )
      token_logprobs = tf.scatter_nd(
        tf.stack([rows, positions], 1), logp, tf.shape(input_ids)
      )  # [B, T]
    else:
      width = tf.range(tf.shape(input_ids)[1])[tf.newaxis]  # [1, T]
      score_mask = tf.logical_and(width >= starts[:, None], width < limits[:, None])
      token_logprobs = self.graph.one_pass_method(self.scoring)(
        input_ids, input_mask, tf.cast(score_mask, tf.int32)
      )
    return {
      "total": tf.reduce_sum(token_logprobs, axis=1),
      "num_tokens": limits - starts,
      "token_logprobs": token_logprobs,
      "truncated": truncated,
    }


# The files an export holds (tf.saved_model.save's, then EXPORT_INFO): an export dir that holds
# any other is replaced by no --overwrite (a rename replaces the dir whole).
_EXPORT_FILES = (
  "saved_model.pb",
  "fingerprint.pb",
  "variables/*",
  "assets/*",
  f"{EXTRA_DIR}/{EXPORT_INFO}",
)


def check_export_dir(export_dir, overwrite=False):
  """FileExistsError if export_dir exists, unless overwrite and it is an export of this command
  (an EXPORT_INFO) holding no file an export does not write (a user's notes would go with it)."""
  if not io_utils.lexists(export_dir):
    return
  if not overwrite:
    raise FileExistsError(f"{export_dir} exists; pass --overwrite to replace it")
  info = os.path.join(export_dir, EXTRA_DIR, EXPORT_INFO)
  if not io_utils.exists(info) or io_utils.isdir(info):
    raise FileExistsError(
      f"{export_dir} exists and is not an export of this command (no {EXTRA_DIR}/{EXPORT_INFO}): "
      "--overwrite replaces only those; choose another --export_dir"
    )
  foreign = [
    name
    for name in io_utils.find_files(export_dir, ["."])
    if not any(fnmatch.fnmatchcase(name, pattern) for pattern in _EXPORT_FILES)
  ]
  if foreign:
    raise FileExistsError(
      f"{export_dir} holds {', '.join(foreign[:3])}{' and more' * (len(foreign) > 3)}, which no "
      "export writes: --overwrite would remove it with the export; move it away first"
    )


def export(lm, export_dir, overwrite=False, scoring=None, check=None):
  """Writes `lm` as a SavedModel, renamed into place so no reader sees half an export; returns
  the module. `check(path, module)`, if given, runs on the written SavedModel before the rename
  (an error or a stop there leaves no export). FileExistsError (`check_export_dir`); ValueError
  for an unknown scoring.
  """
  export_dir = io_utils.absolute(export_dir)
  check_export_dir(export_dir, overwrite)
  module = ExportModule(lm, scoring=scoring)
  # Traced from plain methods: a tf.function held by the module would be traced again by
  # tf.saved_model.save, for twice the time.
  signatures = {
    name: tf.function(
      getattr(module, name),
      input_signature=[tf.TensorSpec([None], tf.string, name=module.input_name)],
      autograph=False,
    ).get_concrete_function()
    for name in SIGNATURES
  }
  with io_utils.atomic_dir(export_dir) as tmp:
    tf.saved_model.save(module, tmp, signatures=signatures)
    os.makedirs(os.path.join(tmp, EXTRA_DIR), exist_ok=True)
    with open(os.path.join(tmp, EXTRA_DIR, EXPORT_INFO), "w", encoding="utf-8") as f:
      json.dump(module.info(), f, indent=2, sort_keys=True)
      f.write("\n")
    if check is not None:
      check(tmp, module)
  logging.info("exported %s model (scoring %s) to %s", lm.model_type, module.scoring, export_dir)
  return module

"""The one inference path: text -> token log-probabilities, sentence scores and vectors, for
every LM kind. What is scored per kind: docs/DESIGN.md §4.1; long inputs: docs/manual.md
"Long inputs".
"""

import dataclasses
import hashlib
import json
import math
import os

from absl import logging
import numpy as np
import tensorflow as tf

import kinds
from lm import backends
from lm import conversion
from lm import hf_checkpoint
from lm import model_dir as model_dir_lib
from lm import onnx_backend
from lm import scoring_graph
from lm import stage_clock
from lm import windows as windows_lib
from text import normalization as normalization_lib
import tokenization
from util import cli
from util import io_utils
from util import runs

POOLINGS = ("context", "embed", "first_last", "first", "last")
# "piece" (PLL) or "word_l2r" (Kauf & Ivanova 2023's PLL-word-l2r): docs/DESIGN.md §4.1.
SCORINGS = kinds.SCORINGS
# Tokens (rows x length) per forward pass: small enough that the head's [tokens, V] logits stay
# small instead of streaming through memory several times per pass (measured with larger
# budgets: docs/DESIGN.md §6).
DEFAULT_TOKEN_BUDGET = 2048


@dataclasses.dataclass
class ScoredSentence:
  """Natural-log log-probabilities (token_logprobs, float64 [n]) of one sentence's scored units.

  tokens: pieces, boundaries included when scored (KenLM: words and "</s>"); windows: the sliding
  windows it was read in; unknown_chars: characters the normalization cannot spell, scored as
  [UNK] / <unk>; unknown_words: KenLM's out-of-vocabulary words.
  """

  tokens: list
  token_logprobs: np.ndarray
  truncated: bool = False
  windows: int = 1
  normalization_fallback: bool = False
  unknown_chars: int = 0
  unknown_words: int = 0

  @property
  def total(self):
    return float(np.sum(self.token_logprobs))

  @property
  def num_tokens(self):
    return len(self.token_logprobs)

  @property
  def mean(self):
    return self.total / max(self.num_tokens, 1)

  @property
  def num_oov(self):
    """KenLM's out-of-vocabulary words, or a neural LM's [UNK] pieces."""
    return self.unknown_words + sum(token == "[UNK]" for token in self.tokens)

  def word_logprobs(self):
    words = []
    for token, logprob in zip(self.tokens, self.token_logprobs):
      if tokenization.is_continuation(token) and words:
        words[-1] += float(logprob)
      else:
        words.append(float(logprob))
    return words


@dataclasses.dataclass
class Encoded:
  """A padded batch: input_ids, input_mask int32 [B, T]; lengths int [B]; truncated bool [B]."""

  input_ids: np.ndarray
  input_mask: np.ndarray
  lengths: np.ndarray
  truncated: np.ndarray


def _pad_to(length, multiple):
  return int(math.ceil(length / multiple) * multiple)


def budget_batches(lengths, token_budget, pad_multiple, rows=None):
  """Yields lists of sentence indices, at most `token_budget` tokens (rows x padded width) each.

  In order of length, so a batch pads little; `rows`: model rows per sentence (its masked copies).
  """
  rows = [1] * len(lengths) if rows is None else rows
  batch = []
  for i in sorted(range(len(lengths)), key=lambda i: lengths[i]) + [None]:
    if i is not None:
      candidate = batch + [i]
      width = _pad_to(max(lengths[j] for j in candidate), pad_multiple)
      if sum(rows[j] for j in candidate) * width <= token_budget or not batch:
        batch = candidate
        continue
    if batch:
      yield batch
    batch = [i] if i is not None else []


def pad_rows(id_lists, pad_id, pad_multiple):
  """Id lists -> (input_ids, input_mask) int32 [B, T]; mixed lengths padded to `pad_multiple`."""
  lengths = {len(x) for x in id_lists}
  width = max(lengths)
  if len(lengths) > 1:
    width = _pad_to(width, pad_multiple)
  input_ids = np.full((len(id_lists), width), pad_id, np.int32)
  input_mask = np.zeros((len(id_lists), width), np.int32)
  for row, x in enumerate(id_lists):
    input_ids[row, : len(x)] = x
    input_mask[row, : len(x)] = 1
  return input_ids, input_mask


def masked_copy_rows(input_ids, positions, mask_id, words=None):
  """One [MASK]ed copy of a row per position to score (PLL): (copies int32 [R, T], rows int
  [R], positions int32 [R], targets int32 [R]), grouped by row. words: int [B, T] word index per
  token: a copy then also hides the later pieces of its position's word (PLL-word-l2r).
  """
  rows = np.repeat(np.arange(len(positions)), [len(p) for p in positions]).astype(np.int64)
  positions = np.array([p for ps in positions for p in ps], np.int32)
  copies = np.array(input_ids, np.int32)[rows]
  targets = copies[np.arange(len(rows)), positions]
  if words is not None:
    copy_words = np.asarray(words)[rows]
    at = copy_words[np.arange(len(rows)), positions][:, None]  # [R, 1]
    later = np.arange(copies.shape[1])[None] >= positions[:, None]
    copies[(copy_words == at) & later] = mask_id
  else:
    copies[np.arange(len(rows)), positions] = mask_id
  return copies, rows, positions, targets


class NeuralLM(object):
  """A tta/bilm/unilm/bert model with its tokenizer: tokenization, batching and masked copies
  in Python, the tensor work in `self.graph` (a `ScoringGraph`, shared with the SavedModel export).
  """

  def __init__(
    self,
    model,
    tokenizer,
    max_seq_length=None,
    score_sos=False,
    score_eos=True,
    token_budget=DEFAULT_TOKEN_BUDGET,
    normalization=None,
    pad_multiple=8,
    jit_compile=False,
    strategy=None,
    backend="tf",
    long_inputs="truncate",
    window=None,
    stride=None,
  ):
    """Wraps a built `modeling.TransformerLM`.

    Args:
      max_seq_length: longest input in tokens, boundaries included; default max_position_embeddings.
      token_budget: max tokens (rows x length) per forward pass; bounds bilm/bert's masked copies.
      pad_multiple: bounds the distinct shapes oneDNN prepares kernels for.
      jit_compile: XLA compiles once per batch shape: it pays only when shapes repeat.
      strategy: splits each batch's rows; build the model under its scope (`from_model_dir` does).
      long_inputs, window, stride: lm/windows.py; window defaults to max_seq_length.
    """
    self.model = model
    self.model_type = model.model_type
    self.tokenizer = tokenizer
    config = model.config
    if tokenizer.vocab_size != config.vocab_size:
      raise ValueError(
        f"vocab {tokenizer.vocab_file} has {tokenizer.vocab_size:d} tokens but the model expects "
        f"vocab_size {config.vocab_size:d}"
      )
    self.max_seq_length = min(
      max_seq_length or config.max_position_embeddings, config.max_position_embeddings
    )
    if long_inputs not in windows_lib.LONG_INPUTS:
      raise ValueError(f"--long_inputs={long_inputs} is not one of {windows_lib.LONG_INPUTS}")
    self.long_inputs = long_inputs
    self.window, self.stride = windows_lib.check(
      window or self.max_seq_length, stride, self.max_seq_length
    )
    self.kind = model.kind
    self.score_sos = score_sos and self.kind.scores_sos
    self.score_eos = score_eos
    self.token_budget = token_budget
    self.pad_multiple = pad_multiple
    self.jit_compile = jit_compile
    self.strategy = strategy
    # Here rather than at the first call, which may come after hours of other work.
    backends.check_backend(backend, strategy, jit_compile)
    self.backend = backend
    self._onnx = None
    if backend == "onnxruntime":
      self._onnx = onnx_backend.OnnxFunctions(
        model,
        tf.config.threading.get_intra_op_parallelism_threads(),
        tokenizer.continuation_flags(),
      )
    self.bos_id, self.eos_id = _boundary_ids(tokenizer)
    self.mask_id = tokenizer.mask_id
    self.stats = _new_stats()
    # Whether the warning on sentences longer than the model takes was logged (once per LM).
    self._long_inputs_logged = False
    # Normalization, tokenization, batching, graph and conversion time of the calls so far.
    self.clock = stage_clock.StageClock()
    self.normalization = normalization or config.normalization
    self._normalize = normalization_lib.normalizer(self.normalization)
    with backends.scope(strategy):
      self.graph = scoring_graph.ScoringGraph(model, tokenizer.continuation_flags())
    self._compile()

  @classmethod
  def from_model_dir(cls, model_dir, vectors_only=False, **kwargs):
    """From a model dir, "bert:DIR" or "hf:DIR" (`load_model`). With `vectors_only`, an "hf:"
    encoder saved without a masked-LM head loads too (its LM gives sentence vectors; `score`
    refuses it)."""
    with backends.scope(kwargs.get("strategy")):
      model, tokenizer = load_model(model_dir, require_head=not vectors_only)
    return cls(model, tokenizer, **kwargs)

  # ------------------------------------------------------------ tf.functions

  def _compile(self):
    spec = tf.TensorSpec([None, None], tf.int32)
    rows = tf.TensorSpec([None], tf.int32)
    # One-pass scores per scoring mode, each compiled at its first use: most jobs use one.
    self._one_pass_scores = {}
    self._masked_copy_scores = self.compiled(
      self.graph.masked_copy_scores, [spec, spec, rows, rows]
    )
    self._sentence_vectors = self.compiled(self.graph.sentence_vectors, [spec, spec])
    self._encode = {}  # ScoringGraph method name: compiled, for windowed vectors

  def compiled(self, method, signature):
    """`method` of self.graph compiled for this LM's strategy, backend and jit_compile.

    autograph=False: autograph mis-converts calls into Keras 3 model methods.
    """
    if self.strategy:
      return backends.ReplicaRunner(self.strategy, method)
    if self.backend in backends.OPENVINO_PRECISION:
      precision = backends.OPENVINO_PRECISION[self.backend]
      return backends.OpenVINOFunction(method, signature, precision)
    if self._onnx:
      # The same method written as an ONNX graph (onnx_backend), not a conversion of this one.
      return self._onnx.function(method.__name__)
    return tf.function(
      method, input_signature=signature, autograph=False, jit_compile=self.jit_compile
    )

  # ---------------------------------------------------------- tokenization

  def tokenize(self, sentences):
    """Sentences -> (id lists `[BOS] pieces [EOS]`, truncation flags); windowed ones may be long."""
    self.clock.start()
    ids, truncated, _ = self._prepare(sentences)
    return ids, truncated

  def _prepare(self, sentences):
    normalized = _normalize_all(self._normalize, sentences, self.stats)
    self.clock.lap("normalization")
    pieces = self.tokenizer.piece_ids_batch([n.text for n in normalized])
    keep = self.max_seq_length - 2 if self.long_inputs == "truncate" else None
    ids, truncated = [], []
    for sentence_pieces in pieces:
      truncated.append(keep is not None and len(sentence_pieces) > keep)
      ids.append([self.bos_id] + sentence_pieces[:keep] + [self.eos_id])
    self.clock.lap("tokenization")
    n_truncated = sum(truncated)
    n_windowed = sum(self.num_windows(len(x)) > 1 for x in ids)
    self.stats["sentences"] += len(ids)
    self.stats["truncated"] += n_truncated
    self.stats["windowed"] += n_windowed
    # Once per LM, without counts: a caller scores in chunks (score_cache's 500), and a count of
    # one chunk read as the run's. `stats` holds the totals; score_cache logs them at its end.
    if (n_truncated or n_windowed) and not self._long_inputs_logged:
      self._long_inputs_logged = True
      if n_truncated:
        logging.warning(
          "sentences longer than %d tokens are truncated (each flagged in the results)",
          self.max_seq_length,
        )
      else:
        logging.warning(
          "sentences longer than %d tokens are read in windows (each piece once, in the window "
          "where it has the most context; each flagged in the results)",
          self.window,
        )
    return ids, truncated, normalized

  def num_windows(self, length):
    """Windows a sentence of `length` tokens is read in (1 when it fits or is truncated)."""
    if self.long_inputs == "truncate" or length <= self.window:
      return 1
    return len(windows_lib.starts(length - 2, self.window - 2, self.stride))

  def _rows(self, ids, positions):
    """Sentences -> (rows, row_positions, owners): a sentence that fits is one row, a longer one
    its windows (`windows.split`); a sentence's rows are consecutive.
    """
    rows, row_positions, owners = [], [], []
    for i, (x, p) in enumerate(zip(ids, positions)):
      parts = [(x, p, 0)]
      if self.num_windows(len(x)) > 1:
        parts = windows_lib.split(x, p, self.window, self.stride, self.kind.window_context)
      for row, row_p, _ in parts:
        rows.append(row)
        row_positions.append(row_p)
        owners.append(i)
    return rows, row_positions, owners

  def _padded_batches(self, ids, rows=None):
    lengths = [len(x) for x in ids]
    for batch in budget_batches(lengths, self.token_budget, self.pad_multiple, rows):
      yield batch, self._pad([ids[j] for j in batch])

  def _pad(self, id_lists):
    input_ids, input_mask = pad_rows(id_lists, self.tokenizer.pad_id, self.pad_multiple)
    lengths = np.array([len(x) for x in id_lists])
    return Encoded(input_ids, input_mask, lengths, np.zeros(len(id_lists), bool))

  def _scored_positions(self, length):
    return kinds.scored_positions(self.model_type, length, self.score_sos, self.score_eos)

  # ------------------------------------------------------------------ score

  @property
  def default_scoring(self):
    return self.kind.default_scoring

  def score(self, sentences, scoring=None):
    """list of `ScoredSentence` in input order; scoring None: the kind's default."""
    if getattr(self.model, "headless", None):
      raise ValueError(hf_checkpoint.headless_message(self.model.headless))
    scoring = checked_scoring(scoring or self.default_scoring)
    self.clock.start()
    ids, truncated, normalized = self._prepare(sentences)
    positions = [self._scored_positions(len(x)) for x in ids]
    logprobs = self._log_probs(ids, positions, scoring)
    results = []
    for x, p, lp, cut, norm in zip(ids, positions, logprobs, truncated, normalized):
      tokens = self.tokenizer.convert_ids_to_tokens([x[t] for t in p])
      results.append(
        ScoredSentence(
          tokens,
          lp,
          truncated=cut,
          windows=self.num_windows(len(x)),
          normalization_fallback=norm.fallback,
          unknown_chars=norm.unknown,
        )
      )
    self.clock.lap("conversion")
    return results

  def _log_probs(self, ids, positions, scoring):
    """Per sentence, float64 [len(positions[i])] log p at its positions (windows joined)."""
    rows, row_positions, owners = self._rows(ids, positions)
    if self.kind.masked_copies:
      copies = self._masked_copies(rows, row_positions, scoring == "word_l2r")
      per_row = [lp for lp, _ in copies]
    else:
      per_row = self._one_pass(rows, row_positions, scoring)
    return [np.concatenate(parts) for parts in _by_owner(per_row, owners, len(ids))]

  def _one_pass(self, ids, positions, scoring):
    """tta: log p(x_t | x_\\t); unilm: log p(x_t | x_<t); at `positions` of each row."""
    scores = self._one_pass_function(scoring)
    out = [None] * len(ids)
    for indices, batch in self._padded_batches(ids):
      score_mask = np.zeros_like(batch.input_mask)
      for row, i in enumerate(indices):
        score_mask[row, positions[i]] = 1
      self.clock.lap("batching")
      logprobs = scores(batch.input_ids, batch.input_mask, score_mask)
      self.clock.lap("graph")
      logprobs = np.asarray(logprobs)
      for row, i in enumerate(indices):
        out[i] = logprobs[row][score_mask[row] > 0].astype(np.float64)
      self.clock.lap("conversion")
    return out

  def _one_pass_function(self, scoring):
    if scoring not in self._one_pass_scores:
      spec = tf.TensorSpec([None, None], tf.int32)
      method = self.graph.one_pass_method(scoring)
      self._one_pass_scores[scoring] = self.compiled(method, [spec] * 3)
    return self._one_pass_scores[scoring]

  def _masked_copies(self, ids, positions, word_l2r=False):
    """Per row of `ids`, (log-probs float64 [n], hidden float32 [n, D]) at its masked positions."""
    out = [None] * len(ids)
    for indices, batch in self._padded_batches(ids, [len(p) for p in positions]):
      words = self.graph.word_ids(batch.input_ids).numpy() if word_l2r else None
      input_ids, rows, masked_at, targets = masked_copy_rows(
        batch.input_ids, [positions[i] for i in indices], self.mask_id, words
      )
      copy_mask, owner = batch.input_mask[rows], np.asarray(indices)[rows]
      self.clock.lap("batching")
      logprobs, hidden = self._masked_copy_scores(input_ids, copy_mask, masked_at, targets)
      self.clock.lap("graph")
      logprobs, hidden = np.asarray(logprobs, np.float64), np.asarray(hidden)
      for i in indices:
        sel = owner == i
        out[i] = (logprobs[sel], hidden[sel])
      self.clock.lap("conversion")
    return out

  # ---------------------------------------------------------------- vectors

  def sentence_vectors(self, sentences, pooling="context", masked=True, return_truncated=False):
    """Sentence vectors for unsupervised STS: float32 [N, D] (and truncation flags).

    pooling: "context" / "embed" (the mean of the last layer / embedding output over the pieces),
    "first_last" (the same of the first and last blocks' average), "first" / "last" (the last layer
    at the start / end token). masked: bilm/bert "context" from the copy with each position masked
    (the paper's biLM); False: the "\\M" variant. A sentence without pieces gets zeros.
    """
    if pooling not in POOLINGS:
      raise ValueError(f"pooling {pooling!r} is not one of {POOLINGS}")
    ids, truncated = self.tokenize(sentences)
    if pooling == "context" and masked and self.kind.masked_copies:
      words = [list(range(1, len(x) - 1)) for x in ids]
      rows, row_positions, owners = self._rows(ids, words)
      hidden = [h for _, h in self._masked_copies(rows, row_positions)]
      # Zero rows stay for sentences without word pieces (and the shape is
      # [0, D] for no sentences, as in `_pooled`).
      vectors = np.zeros((len(ids), self.model.config.hidden_size), np.float32)
      for row, parts in enumerate(_by_owner(hidden, owners, len(ids))):
        parts = np.concatenate(parts)
        if len(parts):
          vectors[row] = parts.mean(0)
    else:
      vectors = self._pooled(ids, pooling)
    self.stats["empty"] = self.stats.get("empty", 0) + sum(len(x) == 2 for x in ids)
    self.clock.lap("conversion")
    return (vectors, truncated) if return_truncated else vectors

  def _pooled(self, ids, pooling):
    out = np.zeros((len(ids), self.model.config.hidden_size), np.float32)
    whole = [i for i, x in enumerate(ids) if self.num_windows(len(x)) == 1]
    for indices, batch in self._padded_batches([ids[i] for i in whole]):
      self.clock.lap("batching")
      vectors = self._sentence_vectors(batch.input_ids, batch.input_mask)[pooling]
      self.clock.lap("graph")
      out[np.asarray(whole, int)[indices]] = np.asarray(vectors)
      self.clock.lap("conversion")
    windowed = sorted(set(range(len(ids))) - set(whole))
    if windowed:
      out[windowed] = self._windowed_pooled([ids[i] for i in windowed], pooling)
    return out

  def _windowed_pooled(self, ids, pooling):
    if pooling not in _WINDOW_POOLING:
      raise ValueError(f"pooling {pooling!r} has no windowed form; long_inputs='truncate' has")
    method, output, rule = _WINDOW_POOLING[pooling]
    words = [list(range(1, len(x) - 1)) for x in ids]
    rows, row_positions, owners = self._rows(ids, words)
    if method not in self._encode:
      spec = tf.TensorSpec([None, None], tf.int32)
      self._encode[method] = self.compiled(getattr(self.graph, method), [spec, spec])
    per_row = [None] * len(rows)
    for indices, batch in self._padded_batches(rows):
      self.clock.lap("batching")
      values = output(self._encode[method](batch.input_ids, batch.input_mask))
      self.clock.lap("graph")
      for row, i in enumerate(indices):
        per_row[i] = (values[row, : batch.lengths[row]], row_positions[i])
    out = np.zeros((len(ids), values.shape[-1]), np.float32)
    for s, parts in enumerate(_by_owner(per_row, owners, len(ids))):
      if rule == "mean":
        out[s] = np.concatenate([v[p] for v, p in parts]).mean(0)
      else:
        # The sentence's own [BOS] is in its first window, its [EOS] in its last.
        out[s] = parts[0][0][0] if rule == "first" else parts[-1][0][-1]
    self.clock.lap("conversion")
    return out


# How a windowed sentence's vector is read from its windows' outputs: the ScoringGraph method,
# the per-token output [B, T, D] from its results, and the rule: the mean over its pieces, each
# from the window it is assigned to, or the start / end token of its first / last window.
_WINDOW_POOLING = {
  "context": ("encode", lambda o: np.asarray(o[0]), "mean"),
  "embed": ("encode", lambda o: np.asarray(o[1]), "mean"),
  "first_last": ("encode_layers", lambda o: (np.asarray(o[0]) + np.asarray(o[2])) / 2.0, "mean"),
  "first": ("encode", lambda o: np.asarray(o[0]), "first"),
  "last": ("encode", lambda o: np.asarray(o[0]), "last"),
}


def _by_owner(values, owners, count):
  out = [[] for _ in range(count)]
  for value, owner in zip(values, owners):
    out[owner].append(value)
  return out


class NgramLM(object):
  """A KenLM n-gram model behind the same `score` interface."""

  def __init__(self, model_path, score_eos=True, normalization=None, score_sos=False, bos=True):
    """score_sos is accepted as by every kind (<s> is never scored); bos=False scores a fragment."""
    from lm import ngram_lm  # pylint: disable=g-import-not-at-top

    del score_sos
    self.scorer = ngram_lm.NgramScorer(model_path)
    self.model_type = "kenlm"
    self.score_eos = score_eos
    self.bos = bos
    self.stats = _new_stats()
    self.normalization = normalization or ngram_lm.read_model_info(model_path).get(
      "normalization", "none"
    )
    self._normalize = normalization_lib.normalizer(self.normalization)

  # An n-gram model scores whole words, each given the earlier ones, whatever mode is asked for
  # (SCORINGS say how a neural LM scores pieces); so "word", not one of them (`scoring_of`).
  default_scoring = "word"

  def score(self, sentences, scoring=None):
    """list of `ScoredSentence` of words, whatever `scoring` is asked for."""
    scoring_of(self, scoring)
    normalized = _normalize_all(self._normalize, sentences, self.stats)
    texts = [n.text for n in normalized]
    results = []
    for norm, s in zip(
      normalized, self.scorer.score_sentences(texts, bos=self.bos, eos=self.score_eos)
    ):
      tokens = norm.text.split() + (["</s>"] if self.score_eos else [])
      results.append(
        ScoredSentence(
          tokens,
          np.array(s.word_logprobs),
          normalization_fallback=norm.fallback,
          unknown_chars=norm.unknown,
          unknown_words=s.n_oov,
        )
      )
    self.stats["sentences"] += len(results)
    return results


def _new_stats():
  return {
    "sentences": 0,
    "truncated": 0,
    "windowed": 0,
    "normalization_fallbacks": 0,
    "unknown_chars": 0,
  }


def _normalize_all(normalize, sentences, stats):
  normalized = [normalize(s) for s in sentences]
  fallbacks = sum(n.fallback for n in normalized)
  unknown = sum(n.unknown for n in normalized)
  stats["normalization_fallbacks"] += fallbacks
  stats["unknown_chars"] += unknown
  if fallbacks or unknown:
    logging.warning(
      "%d of %d sentences needed a guessed reading of a number and %d characters cannot be "
      "spelled by the normalization (scored as unknown words; flagged in the results)",
      fallbacks,
      len(normalized),
      unknown,
    )
  return normalized


def cosine(a, b):
  """Row-wise cosine of float [N, D] arrays (0 for a zero vector), in float64 so that ranks
  (Spearman) do not hang on float32 rounding near 1.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
  return np.where(norms > 0, (a * b).sum(1) / np.maximum(norms, 1e-30), 0.0)


def _boundary_ids(tokenizer):
  if tokenizer.mask_id is None:
    raise ValueError(f"vocab {tokenizer.vocab_file} has no [MASK] token")
  try:
    return tokenizer.boundary_ids()
  except ValueError as e:
    raise ValueError(f"vocab {tokenizer.vocab_file}: {e}") from None


# NeuralLM options that change how fast scores are computed, never what they
# are: an n-gram model has no batches to size.
_THROUGHPUT_OPTIONS = ("token_budget", "pad_multiple", "jit_compile", "strategy", "backend")
# NeuralLM options for sentences longer than the model takes: an n-gram model takes any length.
_LONG_INPUT_OPTIONS = ("long_inputs", "window", "stride")


# Release formats a neural model is read from besides our model dirs: spec prefix -> loader of
# (the dir after it, require_head), returning (model, tokenizer). Google's TF1 releases always
# hold their pre-training heads.
_RELEASE_LOADERS = {
  # bert_config.json, vocab.txt, bert_model.ckpt
  "bert:": lambda path, require_head: conversion.load_google_bert(path),
  "hf:": hf_checkpoint.load_hf_bert,  # config.json, vocab.txt, model.safetensors
}


def load_model(spec, require_head=True):
  """(model, tokenizer) of a model dir, "bert:DIR" or "hf:DIR"; without `require_head`, an
  "hf:" encoder saved without a masked-LM head too (`hf_checkpoint.load_weights`)."""
  for prefix, loader in _RELEASE_LOADERS.items():
    if spec.startswith(prefix):
      return loader(spec[len(prefix) :], require_head)
  return model_dir_lib.load_model_dir(spec)


def load_lm(spec, **kwargs):
  """An LM from a model dir, "kenlm:PATH", "bert:DIR" or "hf:DIR"; kwargs are NeuralLM's.

  KenLM ignores the throughput and long-input options and rejects other ones (TypeError).
  """
  if spec.startswith("kenlm:"):
    ignored = _THROUGHPUT_OPTIONS + _LONG_INPUT_OPTIONS
    options = {k: v for k, v in kwargs.items() if k not in ignored}
    return NgramLM(spec[len("kenlm:") :], **options)
  return NeuralLM.from_model_dir(spec, **kwargs)


def check_spec(spec):
  """FileNotFoundError / ValueError unless `spec` names something there; loads nothing."""
  if spec.startswith("kenlm:"):
    path = spec[len("kenlm:") :]
    from lm import ngram_lm  # pylint: disable=g-import-not-at-top

    ngram_lm.check_local_model(path)
    if not os.path.isfile(path):
      raise FileNotFoundError(f"n-gram model file not found: {path}")
    return
  for prefix in _RELEASE_LOADERS:
    if spec.startswith(prefix):
      if not tf.io.gfile.isdir(spec[len(prefix) :]):
        raise FileNotFoundError(f"{spec}: no such directory")
      return
  model_dir_lib.read_config(spec)


def spec_identity(spec):
  """The identity of what `spec` names, loading nothing, for a run record to compare."""
  for prefix in ("kenlm:", *_RELEASE_LOADERS):
    if spec.startswith(prefix):
      return {**runs.path_identity(spec[len(prefix) :]), "spec": prefix}
  return model_dir_lib.identity(spec)


def checked_scoring(scoring):
  if scoring not in SCORINGS:
    raise ValueError(f"scoring {scoring!r} is not one of {SCORINGS}")
  return scoring


def scoring_of(lm, scoring=None):
  """The mode `lm` scores in when asked for `scoring` (KenLM: always "word")."""
  if scoring is not None:
    checked_scoring(scoring)
  if isinstance(lm, NgramLM):
    return lm.default_scoring
  return scoring or lm.default_scoring


def describe(lm, scoring=None):
  """The JSON-able identity of an LM and scoring mode: everything that changes its scores,
  so a cached score is never served for another.
  """
  scoring = scoring_of(lm, scoring)
  common = {
    "normalization": lm.normalization,
    "normalization_rules": normalization_lib.RULES_VERSION,
    "score_eos": lm.score_eos,
  }
  if isinstance(lm, NgramLM):
    path = os.path.abspath(lm.scorer.model_path)
    return {
      "kind": "kenlm",
      "path": path,
      "bytes": os.path.getsize(path),
      "mtime": os.path.getmtime(path),
      **common,
      # Only when not conditioned on <s>, so the keys of sentence scores stay what they were.
      **({} if lm.bos else {"bos": False}),
    }
  with io_utils.open_file(lm.tokenizer.vocab_file, "rb") as f:
    vocab_sha256 = hashlib.sha256(f.read()).hexdigest()
  return {
    "kind": lm.model_type,
    "config": json.loads(lm.model.config.to_json_string()),
    "weights_sha256": model_dir_lib.weights_fingerprint(lm.model),
    "vocab_sha256": vocab_sha256,
    "do_lower_case": lm.tokenizer.do_lower_case,
    "score_sos": lm.score_sos,
    "max_seq_length": lm.max_seq_length,
    **common,
    # Only when not [SOS]/[EOS], the frame of every model trained here, so the keys of their
    # caches stay what they were; a BERT scored with [SOS]/[EOS] before gets a new key.
    **_boundary_identity(lm.tokenizer.boundary_tokens),
    # Only when not float32, so the keys of float32 caches stay what they were.
    **({"precision": "bfloat16"} if backends.backend_dtype(lm.backend) == "bfloat16" else {}),
    # OpenVINO runs the TF functions converted; onnx_backend's graphs are a second
    # implementation, whose scores are cached apart.
    **({"backend": lm.backend} if lm.backend == "onnxruntime" else {}),
    # Only when not "piece", so the keys of piece-level caches stay what they were (KenLM scores
    # words whatever the mode, and keeps its key).
    **({"scoring": scoring} if scoring != "piece" else {}),
    # Only when windowing, so the keys of truncating caches (all caches before windows) stay
    # what they were; the window and stride change a long sentence's score.
    **(
      {"long_inputs": lm.long_inputs, "window": lm.window, "stride": lm.stride}
      if lm.long_inputs == "window"
      else {}
    ),
  }


def check_finite(lm_name, text, *values):
  """cli.InputError naming the LM and sentence if one of `values` is NaN or infinite.

  JSON has no NaN or inf and a NaN compares false in a ranking; finite weights can still overflow.
  """
  for value in values:
    if not np.all(np.isfinite(value)):
      what = f"the score {float(value)}" if np.ndim(value) == 0 else "a vector"
      raise cli.InputError(
        f"{lm_name} gives {text!r} {what}, which is not finite (a log-probability or "
        "activation of the model overflows); nothing of it is written"
      )


def _boundary_identity(pair):
  return {} if tuple(pair) == ("[SOS]", "[EOS]") else {"boundary_tokens": list(pair)}


def model_id(identity):
  """The score caches' key of a `describe` identity: "<kind>-<16 hex digits of SHA-256>"."""
  digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()
  return f"{identity['kind']}-{digest[:16]}"


def run_identity(lm, scoring=None):
  """What a run's numbers depend on: the model, and a NeuralLM's backend, token budget and
  replicas, each of which changes float rounding.
  """
  identity = {"model": model_id(describe(lm, scoring))}
  if isinstance(lm, NeuralLM):
    replicas = lm.strategy.num_replicas_in_sync if lm.strategy else 1
    identity.update(backend=lm.backend, token_budget=lm.token_budget, replicas=replicas)
  return identity

"""The one inference path: text -> token log-probabilities, sentence scores and sentence vectors,
for every LM kind (tta, bilm, bert, unilm, kenlm).

score.py, run_rescoring.py, run_sts.py and run_benchmark.py all call it. What is scored per kind,
the boundary tokens and text normalization: docs/DESIGN.md §4.1; long inputs (truncated or read
in windows, never silently): README "Long inputs".
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
from util import runs

POOLINGS = ("context", "embed", "first_last", "first", "last")
# How a sentence's pieces are scored (docs/DESIGN.md §4.1). "piece": each piece given every other
# piece (PLL). "word_l2r": each piece given the other words and the earlier pieces of its own
# word (Kauf & Ivanova 2023's PLL-word-l2r), so a word split in pieces is not over-rewarded:
# T-TA in one pass (the word_l2r attention mask), the biLM/BERT by masked copies hiding the piece
# and the later pieces of its word; the uniLM sees no later piece anyway (the same as "piece");
# KenLM scores words. A kind trained with the word_l2r mask (tta_word) scores word_l2r unless
# told otherwise (`kinds.Kind.default_scoring`).
SCORINGS = kinds.SCORINGS
# Tokens (rows x length) per forward pass: small enough that the head's [tokens, V] logits stay
# small instead of streaming through memory several times per pass (measured with larger
# budgets: docs/DESIGN.md §6).
DEFAULT_TOKEN_BUDGET = 2048


@dataclasses.dataclass
class ScoredSentence:
  """Log-probabilities of one sentence's scored units (natural log).

  Attributes:
    tokens: the scored units: word pieces for neural LMs (boundary tokens
      included when scored), words and "</s>" for kenlm.
    token_logprobs: float64 [n] log-probability of each unit.
    truncated: whether the sentence was cut to fit max_seq_length.
    windows: the sliding windows it was read in (1: whole).
    normalization_fallback: whether the normalizer had to guess how a number
      is read (`normalization.Normalized.fallback`).
    unknown_chars: characters the normalization cannot spell (emoji, CJK),
      each scored as [UNK] (KenLM: <unk>).
    unknown_words: KenLM: the words out of the model's vocabulary, each scored as <unk>
      (neural LMs: 0; their [UNK] is a token of the vocab).
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
    """Words the LM cannot represent: KenLM's out-of-vocabulary words, a neural LM's [UNK]
    pieces (an unknown character or a word WordPiece cannot split)."""
    return self.unknown_words + sum(token == "[UNK]" for token in self.tokens)

  def word_logprobs(self):
    """Sums the pieces of each word (`tokenization.is_continuation`): list of floats."""
    words = []
    for token, logprob in zip(self.tokens, self.token_logprobs):
      if tokenization.is_continuation(token) and words:
        words[-1] += float(logprob)
      else:
        words.append(float(logprob))
    return words


@dataclasses.dataclass
class Encoded:
  """A padded batch of sentences as model inputs.

  Attributes:
    input_ids: int32 [B, T], `[BOS] pieces [EOS]` then [PAD].
    input_mask: int32 [B, T].
    lengths: int [B], real tokens per sentence (boundaries included).
    truncated: bool [B].
  """

  input_ids: np.ndarray
  input_mask: np.ndarray
  lengths: np.ndarray
  truncated: np.ndarray


def _pad_to(length, multiple):
  return int(math.ceil(length / multiple) * multiple)


def budget_batches(lengths, token_budget, pad_multiple, rows=None):
  """Groups sentences into batches of at most `token_budget` tokens (rows x padded width).

  Sentences are taken in order of length so a batch pads little; a sentence alone over the
  budget is a batch of its own. The batching rule of every NeuralLM call, and of the benchmark's
  batched peers, so both are batched the same way.

  Args:
    lengths: tokens of each sentence.
    token_budget: int.
    pad_multiple: rows of different lengths are padded to a multiple of this.
    rows: rows each sentence takes (its masked copies); None: one each.

  Yields:
    lists of sentence indices.
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
  """Id lists -> (input_ids, input_mask) int32 [B, T]: rows of different lengths padded to a
  multiple of `pad_multiple` (it bounds the shapes kernels are prepared for), one length not."""
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
  """One copy of a row per position to score, that token replaced by [MASK]: the inputs of a
  pseudo-log-likelihood (bilm, bert), built in NumPy.

  Args:
    input_ids: int [B, T], padded rows.
    positions: B lists of int, the positions of each row to score.
    mask_id: int, the id of [MASK].
    words: int [B, T] word index of each token (`modeling.token_word_ids`) for PLL-word-l2r: a copy
      then also hides the later pieces of its position's word; None: the position only.

  Returns:
    (copies int32 [R, T], rows int [R] (the row each copy is of), positions int32 [R],
    targets int32 [R] (the token each copy hides at its position)), copies of row 0 first, each
    row's in the order of its positions.
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
  """A tta/bilm/unilm/bert model with its tokenizer, ready to score/encode.

  Tokenization, batching and masked-copy building happen here, in Python;
  the tensor work is `self.graph`, a `ScoringGraph` (shared with the
  SavedModel export), compiled into tf.functions.

  Example:
    lm = NeuralLM.from_model_dir("runs/tta")
    scores = lm.score(["the cat sat on the mat"])
    vectors = lm.sentence_vectors(["a sentence"], pooling="context")
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
    """Wraps a built model.

    Args:
      model: `modeling.TransformerLM`.
      tokenizer: `tokenization.FullTokenizer` for the model's vocab.
      max_seq_length: longest input in tokens (boundaries included); defaults
        to the model's max_position_embeddings.
      score_sos: also score the start token (tta, bilm, bert only).
      score_eos: score the end token.
      token_budget: max tokens (rows x length) per forward pass; bounds
        memory for the n masked copies of bilm/bert.
      normalization: text normalization applied before tokenization; default
        the config's "normalization" (that of the training text), else none.
      pad_multiple: batches of rows of different lengths are padded to a
        multiple of this many tokens, which bounds the number of distinct
        shapes oneDNN prepares kernels for; rows of one length are not padded.
      jit_compile: compile the graphs with XLA. XLA fuses the many small
        element-wise ops, but compiles once per distinct batch shape: worth
        it when shapes repeat (a benchmark, fixed-size serving batches), not
        for N-best sets of many lengths.
      strategy: a `tf.distribute.Strategy` (mirrored GPUs, TPU) to split every
        batch's rows over its replicas; build the model under its scope
        (`from_model_dir(..., strategy=...)` does). None: one device.
      backend: what runs the graph functions, one of backends.BACKENDS (each
        described there); TensorFlow ("tf") is the reference. Tokenization and
        normalization are the same on every backend.
      long_inputs: a sentence longer than max_seq_length tokens is "truncate"d (flagged) or
        read in sliding "window"s (lm/windows.py).
      window: tokens per window, boundaries included; default max_seq_length. With "window", a
        sentence longer than this is windowed.
      stride: word pieces from one window to the next; default half a window's pieces.

    Raises:
      ValueError: long_inputs is not one of windows.LONG_INPUTS; window or stride cannot cut a
        sentence (`windows.check`).
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
    # Normalization, tokenization, batching, graph and conversion time of the calls so far.
    self.clock = stage_clock.StageClock()
    self.normalization = normalization or config.normalization
    self._normalize = normalization_lib.normalizer(self.normalization)
    with backends.scope(strategy):
      self.graph = scoring_graph.ScoringGraph(model, tokenizer.continuation_flags())
    self._compile()

  @classmethod
  def from_model_dir(cls, model_dir, **kwargs):
    """Loads a model dir (config.json, vocab.txt, the latest checkpoint), or a release dir
    given as "bert:DIR" or "hf:DIR" (`load_model`)."""
    with backends.scope(kwargs.get("strategy")):
      model, tokenizer = load_model(model_dir)
    return cls(model, tokenizer, **kwargs)

  # ------------------------------------------------------------ tf.functions

  def _compile(self):
    """Compiles the graph functions of `self.graph`, the shared ScoringGraph.

    autograph=False: the model has no tensor-dependent Python control flow,
    and autograph mis-converts calls into Keras 3 model methods. Shapes are
    left unknown in the signatures so no length ever retraces.
    """
    spec = tf.TensorSpec([None, None], tf.int32)
    rows = tf.TensorSpec([None], tf.int32)
    # One-pass scores per scoring mode, each compiled at its first use: most jobs use one.
    self._one_pass_scores = {}
    self._masked_copy_scores = self.compiled(
      self.graph.masked_copy_scores, [spec, spec, rows, rows]
    )
    self._sentence_vectors = self.compiled(self.graph.sentence_vectors, [spec, spec])
    # The encoder alone, for the vectors of windowed sentences; compiled at its first use.
    self._encode = {}  # ScoringGraph method name: compiled, for windowed vectors

  def compiled(self, method, signature):
    """`method` (of self.graph) compiled as this NeuralLM compiles its graph functions: on the
    strategy's replicas, by OpenVINO, its ONNX Runtime twin, or as a tf.function (XLA with
    jit_compile)."""
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
    """Sentences -> list of id lists `[BOS] pieces [EOS]` and truncation flags; with
    long_inputs "window", a list may be longer than the model takes (`num_windows`)."""
    self.clock.start()
    ids, truncated, _ = self._prepare(sentences)
    return ids, truncated

  def _prepare(self, sentences):
    """`tokenize`, also returning each sentence's `normalization.Normalized`."""
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
    if n_truncated:
      logging.warning(
        "%d of %d sentences are longer than %d tokens and were truncated (flagged in the results)",
        n_truncated,
        len(ids),
        self.max_seq_length,
      )
    if n_windowed:
      logging.warning(
        "%d of %d sentences are longer than %d tokens and were read in windows (each piece "
        "once, in the window where it has the most context; flagged in the results)",
        n_windowed,
        len(ids),
        self.window,
      )
    return ids, truncated, normalized

  def num_windows(self, length):
    """The windows a sentence of `length` tokens (boundaries included) is read in: 1 when it
    fits the window or long_inputs is "truncate"."""
    if self.long_inputs == "truncate" or length <= self.window:
      return 1
    return len(windows_lib.starts(length - 2, self.window - 2, self.stride))

  def _rows(self, ids, positions):
    """Sentences -> the rows the model reads: a sentence that fits is one row; a longer one its
    windows (`windows.split`), each with the positions assigned to it.

    Args:
      ids: list of id lists, `[BOS] pieces [EOS]`.
      positions: per sentence, its ascending positions to score or represent.

    Returns:
      (rows: list of id lists, row_positions: the positions of each row, owners: the sentence
      of each row); a sentence's rows are consecutive and their positions, in order, are its own.
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
    """`budget_batches` of `ids` under this LM's budget, padded; rows: model rows each takes.

    Yields:
      (indices, Encoded) per batch.
    """
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
    """The scoring mode `score` uses when given none: the one the kind was trained for."""
    return self.kind.default_scoring

  def score(self, sentences, scoring=None):
    """Scores sentences; returns a list of `ScoredSentence` in input order.

    scoring: one of SCORINGS; None: `default_scoring`.
    """
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
    """log p of the tokens at `positions` of each sentence (ids, `[BOS] pieces [EOS]`), float64
    [len(positions[i])] each, a long sentence's from its windows (`_rows`)."""
    rows, row_positions, owners = self._rows(ids, positions)
    if self.kind.masked_copies:
      copies = self._masked_copies(rows, row_positions, scoring == "word_l2r")
      per_row = [lp for lp, _ in copies]
    else:
      per_row = self._one_pass(rows, row_positions, scoring)
    return [np.concatenate(parts) for parts in _by_owner(per_row, owners, len(ids))]

  def _one_pass(self, ids, positions, scoring):
    """tta, tta_word: log p(x_t | x_\\t) (word_l2r: x_t and the later pieces of its word hidden
    too); unilm: log p(x_t | x_<t) from the left; at `positions` of each row of `ids`."""
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
    """The compiled one-pass scores of `scoring` (`ScoringGraph.token_log_probs` or
    `.word_l2r_log_probs`), compiled at its first use."""
    if scoring not in self._one_pass_scores:
      spec = tf.TensorSpec([None, None], tf.int32)
      method = self.graph.one_pass_method(scoring)
      self._one_pass_scores[scoring] = self.compiled(method, [spec] * 3)
    return self._one_pass_scores[scoring]

  def _masked_copies(self, ids, positions, word_l2r=False):
    """Runs one masked copy per (row, position) in budgeted batches.

    Args:
      ids: list of id lists, each at most max_seq_length tokens.
      positions: per row of ids, the positions to mask.
      word_l2r: each copy also masks the later pieces of its position's word.

    Returns:
      per row, (log-probs [n] float64, hidden at the masked positions
      [n, D] float32), in the order of its positions.
    """
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
    """Sentence vectors for unsupervised STS.

    Args:
      sentences: list of str.
      pooling: "context" (mean of the last layer over the words, boundaries
        excluded), "embed" (the same mean of the embedding output),
        "first_last" (the same mean of the first and last blocks' average,
        on intact input for every kind), "first" / "last" (the last layer at
        the start / end token).
      masked: bilm/bert "context" only: position i's vector comes from the
        copy with token i masked (the paper's biLM); False gives the "\\M"
        variant on intact input. Ignored by tta (always self-unknown) and
        unilm.

      return_truncated: also return `tokenize`'s truncation flags, so that a
        result computed from these vectors can flag them.

    A sentence longer than the window (long_inputs "window") averages each
    piece's vector from the window assigned to it (`windows.assign`); its
    "first" / "last" come from its first / last window.

    Returns:
      float32 [N, D]. A sentence without word pieces gets a zero vector for
      "context"/"embed"/"first_last" (counted in stats["empty"]). With return_truncated,
      (vectors, list of N bool).
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
    """`_pooled` of sentences longer than the window, from each window's outputs: float32
    [len(ids), D] (`_WINDOW_POOLING`)."""
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
  """Per-row values -> per sentence, the list of its rows' values, in row order."""
  out = [[] for _ in range(count)]
  for value, owner in zip(values, owners):
    out[owner].append(value)
  return out


class NgramLM(object):
  """A KenLM n-gram model behind the same `score` interface."""

  def __init__(self, model_path, score_eos=True, normalization=None, score_sos=False, bos=True):
    """Loads a KenLM model.

    Args:
      model_path: ARPA or KenLM binary.
      score_eos: score </s>.
      normalization: applied to sentences before scoring; default the one
        recorded beside the model by ngram_lm.train_ngram, else none.
      score_sos: accepted as by every LM kind; <s> is never scored, as for
        unilm (nothing predicts it).
      bos: condition the first word on <s> (False scores a fragment of a sentence).
    """
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
    """Scores sentences; returns a list of `ScoredSentence` in input order.

    scoring: one of SCORINGS or None; all score words, the units of an n-gram model.
    """
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
  """The counters of an LM's `stats`: sentences, and those truncated, windowed or normalized by
  guess; unknown_chars sums `ScoredSentence.unknown_chars`."""
  return {
    "sentences": 0,
    "truncated": 0,
    "windowed": 0,
    "normalization_fallbacks": 0,
    "unknown_chars": 0,
  }


def _normalize_all(normalize, sentences, stats):
  """Normalizes sentences (list of `normalization.Normalized`), adding to `stats`."""
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
  """Row-wise cosine similarity of float [N, D] arrays; 0 for a zero vector.

  Computed in float64: similar sentences give cosines within float32 rounding
  of each other (and of 1), and their ranks (Spearman) must not depend on it.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
  return np.where(norms > 0, (a * b).sum(1) / np.maximum(norms, 1e-30), 0.0)


def _boundary_ids(tokenizer):
  """(start, end) ids of the tokenizer's pair, which the model's config.json (or the vocab, for
  a config without one) decided when the tokenizer was made."""
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
# the dir after it, returning (model, tokenizer).
_RELEASE_LOADERS = {
  "bert:": conversion.load_google_bert,  # bert_config.json, vocab.txt, bert_model.ckpt
  "hf:": hf_checkpoint.load_hf_bert,  # config.json, vocab.txt, model.safetensors
}


def load_model(spec):
  """(model, tokenizer) of a model dir, "bert:DIR" (a Google BERT release) or "hf:DIR" (a
  Hugging Face BERT masked LM)."""
  for prefix, loader in _RELEASE_LOADERS.items():
    if spec.startswith(prefix):
      return loader(spec[len(prefix) :])
  return model_dir_lib.load_model_dir(spec)


def load_lm(spec, **kwargs):
  """An LM from a spec: a model dir, "kenlm:PATH" for an n-gram model, "bert:DIR" for a Google
  BERT release or "hf:DIR" for a Hugging Face BERT masked LM.

  kwargs are NeuralLM's; a KenLM model takes score_eos, score_sos and
  normalization, ignores the throughput and long-input options and rejects the others
  (TypeError), so no argument is dropped silently.
  """
  if spec.startswith("kenlm:"):
    ignored = _THROUGHPUT_OPTIONS + _LONG_INPUT_OPTIONS
    options = {k: v for k, v in kwargs.items() if k not in ignored}
    return NgramLM(spec[len("kenlm:") :], **options)
  return NeuralLM.from_model_dir(spec, **kwargs)


def check_spec(spec):
  """Checks, loading nothing, that `spec` (as `load_lm` takes it) names something there: a KenLM
  file, a release dir, or a model dir with a readable config.json. The cheap check a command
  makes before it reads its data; `load_lm` checks the rest.

  Raises:
    FileNotFoundError / ValueError: naming what is missing or unreadable.
  """
  if spec.startswith("kenlm:"):
    path = spec[len("kenlm:") :]
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
  """The identity of what `spec` (as `load_lm` takes it) names, loading nothing: a model dir's
  `model_dir.identity`; a KenLM file's or a release dir's path, sizes and modification times
  (`runs.path_identity`). For a run record that a later run into the same output compares."""
  for prefix in ("kenlm:", *_RELEASE_LOADERS):
    if spec.startswith(prefix):
      return {**runs.path_identity(spec[len(prefix) :]), "spec": prefix}
  return model_dir_lib.identity(spec)


def checked_scoring(scoring):
  """`scoring` if it is one of SCORINGS; a ValueError naming them otherwise."""
  if scoring not in SCORINGS:
    raise ValueError(f"scoring {scoring!r} is not one of {SCORINGS}")
  return scoring


def scoring_of(lm, scoring=None):
  """The mode `lm` scores in when asked for `scoring` (one of SCORINGS, else a ValueError; None:
  its `default_scoring`): an n-gram model's "word" whatever is asked."""
  if scoring is not None:
    checked_scoring(scoring)
  if isinstance(lm, NgramLM):
    return lm.default_scoring
  return scoring or lm.default_scoring


def describe(lm, scoring=None):
  """The JSON-able identity of an LM and its scoring mode: everything that changes its scores.

  For caches and reports: the weights (a fingerprint; for KenLM the file's
  path, size and modification time), the vocab file's content, lower-casing,
  the normalization and its rules' version, the scored boundary tokens, the
  pair that frames a sentence (when not [SOS]/[EOS]), the longest input and
  the sliding windows of a longer one, so
  a score cached under one identity is never served for another. `model_id`
  turns it into a short key. scoring None is the LM's `default_scoring`.
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
  with open(lm.tokenizer.vocab_file, "rb") as f:
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
  """Raises cli.InputError naming LM `lm_name` and sentence `text` when one of `values` (its
  score, its vector: floats or float arrays) is NaN or infinite.

  Checked before a score is written anywhere (score.py's records, the rescoring score cache):
  JSON has no number for NaN or inf (Python writes `NaN`, which other readers refuse), and a NaN
  in a ranking compares false with everything. Weights are checked finite when they load
  (`checkpoints.check_finite`); this catches what finite weights can still overflow to.
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
  """A short key for a `describe` identity: "<kind>-<16 hex digits of its SHA-256>".

  Score caches key each line on it (the full identity, ~800 bytes, is
  written once beside them: `score_cache.ScoreCache.register`).
  """
  digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()
  return f"{identity['kind']}-{digest[:16]}"


def run_identity(lm, scoring=None):
  """What the numbers of a run of `lm` depend on, for an output that a later run resumes.

  The LM (`model_id` of `describe`: weights, vocab, scored tokens, precision) and, for a neural
  LM, what runs it: backend, token budget and replicas, each of which changes float rounding.

  Returns:
    dict: "model", and for a NeuralLM "backend", "token_budget", "replicas".
  """
  identity = {"model": model_id(describe(lm, scoring))}
  if isinstance(lm, NeuralLM):
    replicas = lm.strategy.num_replicas_in_sync if lm.strategy else 1
    identity.update(backend=lm.backend, token_budget=lm.token_budget, replicas=replicas)
  return identity

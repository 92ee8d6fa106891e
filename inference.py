"""The one inference path: text -> token log-probabilities, sentence scores
and sentence vectors, for every LM kind (tta, bilm, bert, unilm, kenlm).

Rescoring (run_rescoring.py), STS (run_sts.py) and the runtime benchmark
(run_benchmark.py) all call this module, so a speed-up or a fix here reaches
all three and the comparison between model kinds stays like for like.

What is computed per kind (DESIGN.md §4):
  tta:        one pass; log p(x_t | x_\\t) at every scored position.
  bilm, bert: pseudo-log-likelihood: one masked copy per scored position,
              copies of many sentences packed into batches by a token budget,
              the LM head evaluated at the masked position only.
  unilm:      chain rule; log p(x_t | x_<t).
  kenlm:      n-gram log-probabilities (natural log) of words and </s>.

Which boundary tokens are scored: the end token ([EOS], or [SEP] for Google
BERT vocabularies) is scored by default (`score_eos`), the start token never
is for unilm/kenlm (nothing predicts it) and only on request (`score_sos`)
for the bidirectional kinds.

Over-long sentences: a sentence with more than max_seq_length - 2 word
pieces is truncated (its last pieces dropped, [EOS] kept); each such sentence
is flagged `truncated=True` in its result and counted in `stats`, and a
warning is logged, so a number computed on a truncated sentence is never
silent.

Text normalization: a model trained on normalized text (config.json
"normalization": "librispeech", or a KenLM model whose info file says so)
gets its input normalized the same way before tokenization, so STS pairs and
WMT candidates with digits and punctuation meet the vocabulary the model
learned. Sentences the normalizer rejects (numbers it will not read aloud,
non-Latin letters) are spelled digit by digit / folded to ASCII instead, and
counted in `stats["normalization_fallbacks"]`.
"""

import copy
import dataclasses
import hashlib
import json
import math
import os
import re
import unicodedata

from absl import logging
import numpy as np
import tensorflow as tf

import corpus
import io_utils
import modeling
import tokenization

POOLINGS = ("context", "embed", "first", "last")


@dataclasses.dataclass
class ScoredSentence:
  """Log-probabilities of one sentence's scored units (natural log).

  Attributes:
    tokens: the scored units: word pieces for neural LMs (boundary tokens
      included when scored), words and "</s>" for kenlm.
    token_logprobs: float64 [n] log-probability of each unit.
    truncated: whether the sentence was cut to fit max_seq_length.
  """
  tokens: list
  token_logprobs: np.ndarray
  truncated: bool = False

  @property
  def total(self):
    return float(np.sum(self.token_logprobs))

  @property
  def num_tokens(self):
    return len(self.token_logprobs)

  @property
  def mean(self):
    return self.total / max(self.num_tokens, 1)

  def word_logprobs(self):
    """Sums the pieces of each word ("##" continues a word): list of floats."""
    words = []
    for token, logprob in zip(self.tokens, self.token_logprobs):
      if token.startswith("##") and words:
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


NORMALIZATIONS = ("none", "librispeech")


def normalizer(name, stats):
  """A function str -> str applying the named normalization.

  Args:
    name: one of NORMALIZATIONS.
    stats: dict; "normalization_fallbacks" counts the sentences that needed
      the lenient path.
  """
  if name not in NORMALIZATIONS:
    raise ValueError("unknown normalization %r; expected one of %s" %
                     (name, NORMALIZATIONS))
  if name == "none":
    return lambda text: text

  def librispeech(text):
    try:
      return corpus.normalize_librispeech(text)
    except corpus.NormalizationError:
      stats["normalization_fallbacks"] = (
          stats.get("normalization_fallbacks", 0) + 1)
      # The reader says "$3.50" or "1,000,000" somehow; digit by digit is the
      # reading that keeps every token, and ASCII folding drops what cannot
      # be spelled in A-Z.
      spelled = re.sub(r"\d", lambda m: " %s " % corpus.spell_number(
          int(m.group())), text)
      folded = unicodedata.normalize("NFKD", spelled).encode(
          "ascii", "ignore").decode("ascii")
      return corpus.normalize_librispeech(folded)

  return librispeech


def scored_positions(model_type, length, score_sos=False, score_eos=True):
  """Positions whose token is scored, for a sentence of `length` tokens.

  `[BOS] pieces [EOS]`: the start token never for unilm (nothing predicts
  it), on request otherwise; the end token unless score_eos is False.
  """
  first = 0 if score_sos and model_type != "unilm" else 1
  last = length if score_eos else length - 1
  return list(range(first, last))


def _pad_to(length, multiple):
  return int(math.ceil(length / multiple) * multiple)


class NeuralLM(object):
  """A tta/bilm/unilm/bert model with its tokenizer, ready to score/encode.

  Example:
    lm = NeuralLM.from_model_dir("runs/tta")
    scores = lm.score(["the cat sat on the mat"])
    vectors = lm.sentence_vectors(["a sentence"], pooling="context")
  """

  def __init__(self, model, tokenizer, max_seq_length=None, score_sos=False,
               score_eos=True, token_budget=16384, normalization=None,
               pad_multiple=8, jit_compile=False):
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
        shapes oneDNN prepares kernels for; rows of one length (one sentence,
        or the masked copies of one) are not padded (at 22 tokens, padding
        to 24 cost 17% of a T-TA encode).
      jit_compile: compile the graphs with XLA. XLA fuses the many small
        element-wise ops, but compiles once per distinct batch shape: worth
        it when shapes repeat (a benchmark, fixed-size serving batches), not
        for N-best sets of many lengths.
    """
    self.model = model
    self.model_type = model.model_type
    self.tokenizer = tokenizer
    config = model.config
    if tokenizer.vocab_size != config.vocab_size:
      raise ValueError(
          "vocab %s has %d tokens but the model expects vocab_size %d" %
          (tokenizer.vocab_file, tokenizer.vocab_size, config.vocab_size))
    self.max_seq_length = min(max_seq_length or config.max_position_embeddings,
                              config.max_position_embeddings)
    self.score_sos = score_sos and self.model_type != "unilm"
    self.score_eos = score_eos
    self.token_budget = token_budget
    self.pad_multiple = pad_multiple
    self.jit_compile = jit_compile
    self.bos_id, self.eos_id = _boundary_ids(tokenizer)
    self.mask_id = tokenizer.mask_id
    self.stats = {"sentences": 0, "truncated": 0}
    self.normalization = normalization or config.extra.get("normalization",
                                                           "none")
    self._normalize = normalizer(self.normalization, self.stats)
    self._compile()

  @classmethod
  def from_model_dir(cls, model_dir, **kwargs):
    """Loads config.json, vocab.txt and the latest checkpoint of a model dir."""
    model, tokenizer = load_model_dir(model_dir)
    return cls(model, tokenizer, **kwargs)

  # ------------------------------------------------------------ tf.functions

  def _compile(self):
    # autograph=False: the model has no tensor-dependent Python control flow,
    # and autograph mis-converts calls into Keras 3 model methods. Shapes are
    # left unknown in the signatures so no length ever retraces.
    model = self.model
    table = model.embeddings.word_embeddings
    head_kwargs = {}
    if isinstance(model.lm_head, modeling.LMHead):
      # A transposed snapshot of the tied table: the output projection then
      # reads it in place (4-6x faster than einsum on the 2-core CPU). Taken
      # once, so a NeuralLM scores with the weights it was built with.
      self._output_kernel = tf.Variable(tf.transpose(table), trainable=False)
      head_kwargs["output_kernel"] = self._output_kernel
    encode_kwargs = {}
    self.fused_key_value = None
    if model.model_type == "tta":
      # Input isolation: all layers' keys/values come from the embedding
      # output, so one matmul against a snapshot of the side-by-side kernels
      # replaces 2L small ones.
      kernel, bias = model.fused_key_value_weights()
      self.fused_key_value = (tf.Variable(kernel, trainable=False),
                              tf.Variable(bias, trainable=False))
      encode_kwargs["fused_key_value"] = self.fused_key_value
    spec = tf.TensorSpec([None, None], tf.int32)
    rows = tf.TensorSpec([None], tf.int32)

    def run_encoder(input_ids, input_mask):
      return model.encode({"input_ids": input_ids, "input_mask": input_mask},
                          **encode_kwargs)

    def target_log_probs(hidden, targets):
      # hidden [N, D], targets [N] -> log p(targets) [N]; the V-wide logits
      # are needed for the normaliser anyway, the gather avoids a [N, V]
      # log_softmax copy.
      logits = model.lm_head(hidden, table, **head_kwargs)
      picked = tf.gather(logits, targets, batch_dims=1)
      return picked - tf.reduce_logsumexp(logits, axis=-1)

    @tf.function(input_signature=[spec, spec, spec, spec], autograph=False,
                 jit_compile=self.jit_compile)
    def one_pass_scores(input_ids, input_mask, targets, score_mask):
      # [B, T] each -> log p [B, T] at score_mask, 0 elsewhere. The head runs
      # on scored positions only.
      hidden, _ = run_encoder(input_ids, input_mask)
      where = tf.where(score_mask > 0)
      picked = target_log_probs(tf.gather_nd(hidden, where),
                                tf.gather_nd(targets, where))
      return tf.scatter_nd(where, picked, tf.shape(input_ids, tf.int64))

    @tf.function(input_signature=[spec, spec, rows, rows], autograph=False,
                 jit_compile=self.jit_compile)
    def masked_copy_scores(input_ids, input_mask, positions, targets):
      # Row r is a copy with positions[r] masked -> (log p of targets[r]
      # [R], hidden at the masked position [R, D]).
      hidden, _ = run_encoder(input_ids, input_mask)
      at_mask = tf.gather(hidden, positions, batch_dims=1)
      return target_log_probs(at_mask, targets), at_mask

    @tf.function(input_signature=[spec, spec], autograph=False,
                 jit_compile=self.jit_compile)
    def encode(input_ids, input_mask):
      return run_encoder(input_ids, input_mask)

    self._one_pass_scores = one_pass_scores
    self._masked_copy_scores = masked_copy_scores
    self._encode = encode

  # ---------------------------------------------------------- tokenization

  def tokenize(self, sentences):
    """Sentences -> list of id lists `[BOS] pieces [EOS]` and truncation flags."""
    pieces = self.tokenizer.piece_ids_batch(
        [self._normalize(s) for s in sentences])
    keep = self.max_seq_length - 2
    ids, truncated = [], []
    for sentence_pieces in pieces:
      truncated.append(len(sentence_pieces) > keep)
      ids.append([self.bos_id] + sentence_pieces[:keep] + [self.eos_id])
    n_truncated = sum(truncated)
    self.stats["sentences"] += len(ids)
    self.stats["truncated"] += n_truncated
    if n_truncated:
      logging.warning("%d of %d sentences are longer than %d tokens and were "
                      "truncated (flagged in the results)", n_truncated,
                      len(ids), self.max_seq_length)
    return ids, truncated

  def _batches(self, ids, rows_per_sentence):
    """Groups sentence indices into padded batches within the token budget.

    Sentences are sorted by length so a batch pads little.

    Yields:
      (indices, Encoded) per batch.
    """
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batch = []
    for i in order + [None]:
      if i is not None:
        candidate = batch + [i]
        width = _pad_to(max(len(ids[j]) for j in candidate),
                        self.pad_multiple)
        rows = sum(rows_per_sentence(len(ids[j])) for j in candidate)
        if rows * width <= self.token_budget or not batch:
          batch = candidate
          continue
      if batch:
        yield batch, self._pad([ids[j] for j in batch])
      batch = [i] if i is not None else []

  def _pad(self, id_lists):
    lengths = {len(x) for x in id_lists}
    width = max(lengths)
    if len(lengths) > 1:
      width = _pad_to(width, self.pad_multiple)
    input_ids = np.full((len(id_lists), width), self.tokenizer.pad_id,
                        np.int32)
    input_mask = np.zeros((len(id_lists), width), np.int32)
    for row, x in enumerate(id_lists):
      input_ids[row, :len(x)] = x
      input_mask[row, :len(x)] = 1
    lengths = np.array([len(x) for x in id_lists])
    return Encoded(input_ids, input_mask, lengths,
                   np.zeros(len(id_lists), bool))

  def _scored_positions(self, length):
    return scored_positions(self.model_type, length, self.score_sos,
                            self.score_eos)

  # ------------------------------------------------------------------ score

  def score(self, sentences):
    """Scores sentences; returns a list of `ScoredSentence` in input order."""
    ids, truncated = self.tokenize(sentences)
    if self.model_type in ("bilm", "bert"):
      logprobs = self._pll(ids)
    else:
      logprobs = self._one_pass(ids)
    results = []
    for x, lp, cut in zip(ids, logprobs, truncated):
      positions = self._scored_positions(len(x))
      tokens = self.tokenizer.convert_ids_to_tokens([x[p] for p in positions])
      results.append(ScoredSentence(tokens, lp, cut))
    return results

  def _one_pass(self, ids):
    """tta: log p(x_t | x_\\t); unilm: log p(x_t | x_<t) from the left."""
    out = [None] * len(ids)
    for indices, batch in self._batches(ids, lambda n: 1):
      targets = batch.input_ids.copy()
      score_mask = np.zeros_like(batch.input_mask)
      for row, n in enumerate(batch.lengths):
        score_mask[row, self._scored_positions(n)] = 1
      if self.model_type == "unilm":
        # Output t predicts token t+1: shift targets and mask left by one.
        targets = np.roll(targets, -1, axis=1)
        score_mask = np.roll(score_mask, -1, axis=1)
      logprobs = self._one_pass_scores(batch.input_ids, batch.input_mask,
                                       targets, score_mask).numpy()
      for row, i in enumerate(indices):
        out[i] = logprobs[row][score_mask[row] > 0].astype(np.float64)
    return out

  def _masked_copies(self, ids, positions_of):
    """Runs one masked copy per (sentence, position) in budgeted batches.

    Args:
      ids: list of id lists.
      positions_of: length -> list of positions to mask.

    Returns:
      per sentence, (log-probs [n] float64, hidden at the masked positions
      [n, D] float32), in the order of positions_of.
    """
    out = [None] * len(ids)
    for indices, batch in self._batches(ids,
                                        lambda n: len(positions_of(n))):
      rows, positions, targets, owner = [], [], [], []
      for row, i in enumerate(indices):
        for p in positions_of(batch.lengths[row]):
          rows.append(row)
          positions.append(p)
          targets.append(batch.input_ids[row, p])
          owner.append(i)
      input_ids = batch.input_ids[rows]
      input_ids[np.arange(len(rows)), positions] = self.mask_id
      logprobs, hidden = self._masked_copy_scores(
          input_ids, batch.input_mask[rows], np.array(positions, np.int32),
          np.array(targets, np.int32))
      logprobs, hidden = logprobs.numpy().astype(np.float64), hidden.numpy()
      owner = np.array(owner)
      for i in indices:
        sel = owner == i
        out[i] = (logprobs[sel], hidden[sel])
    return out

  def _pll(self, ids):
    """bilm/bert pseudo-log-likelihood terms log p(x_t | x_\\t via [MASK])."""
    return [lp for lp, _ in self._masked_copies(ids, self._scored_positions)]

  # ---------------------------------------------------------------- vectors

  def sentence_vectors(self, sentences, pooling="context", masked=True):
    """Sentence vectors for unsupervised STS.

    Args:
      sentences: list of str.
      pooling: "context" (mean of the last layer over the words, boundaries
        excluded), "embed" (the same mean of the embedding output), "first"
        / "last" (the last layer at the start / end token).
      masked: bilm/bert "context" only: position i's vector comes from the
        copy with token i masked (the paper's biLM); False gives the "\\M"
        variant on intact input. Ignored by tta (always self-unknown) and
        unilm.

    Returns:
      float32 [N, D]. A sentence without word pieces gets a zero vector for
      "context"/"embed" (counted in stats["empty"]).
    """
    if pooling not in POOLINGS:
      raise ValueError("pooling %r is not one of %s" % (pooling, POOLINGS))
    ids, _ = self.tokenize(sentences)
    if (pooling == "context" and masked and
        self.model_type in ("bilm", "bert")):
      words = lambda n: list(range(1, n - 1))
      copies = self._masked_copies(ids, words)
      dim = self.model.config.hidden_size
      vectors = np.stack([h.mean(0) if len(h) else np.zeros(dim, np.float32)
                          for _, h in copies])
    else:
      vectors = self._pooled(ids, pooling)
    self.stats["empty"] = self.stats.get("empty", 0) + sum(
        len(x) == 2 for x in ids)
    return vectors

  def _pooled(self, ids, pooling):
    out = np.zeros((len(ids), self.model.config.hidden_size), np.float32)
    for indices, batch in self._batches(ids, lambda n: 1):
      sequence, embedding = self._encode(batch.input_ids, batch.input_mask)
      source = (embedding if pooling == "embed" else sequence).numpy()
      for row, i in enumerate(indices):
        n = batch.lengths[row]
        if pooling == "first":
          out[i] = source[row, 0]
        elif pooling == "last":
          out[i] = source[row, n - 1]
        elif n > 2:
          out[i] = source[row, 1:n - 1].mean(0)
    return out


class NgramLM(object):
  """A KenLM n-gram model behind the same `score` interface."""

  def __init__(self, model_path, score_eos=True, normalization=None):
    """Loads a KenLM model.

    Args:
      model_path: ARPA or KenLM binary.
      score_eos: score </s>.
      normalization: applied to sentences before scoring; default the one
        recorded beside the model by ngram.train_ngram, else none.
    """
    import ngram  # pylint: disable=g-import-not-at-top
    self.scorer = ngram.NgramScorer(model_path)
    self.model_type = "kenlm"
    self.score_eos = score_eos
    self.stats = {"sentences": 0, "truncated": 0}
    self.normalization = normalization or ngram.read_model_info(
        model_path).get("normalization", "none")
    self._normalize = normalizer(self.normalization, self.stats)

  def score(self, sentences):
    results = []
    sentences = [self._normalize(s) for s in sentences]
    for text, s in zip(sentences, self.scorer.score_sentences(
        sentences, bos=True, eos=self.score_eos)):
      tokens = text.split() + (["</s>"] if self.score_eos else [])
      results.append(ScoredSentence(tokens, np.array(s.word_logprobs)))
    self.stats["sentences"] += len(results)
    return results


def cosine(a, b):
  """Row-wise cosine similarity of float [N, D] arrays; 0 for a zero vector."""
  norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
  return np.where(norms > 0, (a * b).sum(1) / np.maximum(norms, 1e-30), 0.0)


def _boundary_ids(tokenizer):
  """(start, end) ids: [SOS]/[EOS], or [CLS]/[SEP] for Google BERT vocabs."""
  start = tokenizer.sos_id if tokenizer.sos_id is not None else tokenizer.cls_id
  end = tokenizer.eos_id if tokenizer.eos_id is not None else tokenizer.sep_id
  if start is None or end is None or tokenizer.mask_id is None:
    raise ValueError("vocab %s lacks boundary or [MASK] tokens: need [SOS]/"
                     "[EOS] (or [CLS]/[SEP]) and [MASK]" %
                     tokenizer.vocab_file)
  return start, end


def load_model_dir(model_dir, checkpoint=None):
  """Loads a model directory written by run_pretraining.py.

  The directory holds config.json (with model_type and do_lower_case),
  vocab.txt, and tf.train.Checkpoint files whose model object is "model".

  Args:
    model_dir: str.
    checkpoint: a specific checkpoint prefix; default the latest one.

  Returns:
    (model, tokenizer).

  Raises:
    ValueError / FileNotFoundError naming the missing or mismatched piece.
  """
  config_file = os.path.join(model_dir, "config.json")
  vocab_file = os.path.join(model_dir, "vocab.txt")
  for path in (config_file, vocab_file):
    if not os.path.exists(path):
      raise FileNotFoundError("%s not found; a model dir needs config.json, "
                              "vocab.txt and a checkpoint" % path)
  config = modeling.TTAConfig.from_json_file(config_file)
  do_lower_case = config.extra.get("do_lower_case", True)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  model = modeling.build_model(config)
  checkpoint = checkpoint or _latest_checkpoint(model_dir)
  if checkpoint is None:
    raise FileNotFoundError("no checkpoint in %s" % model_dir)
  status = tf.train.Checkpoint(model=model).read(checkpoint)
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    raise ValueError("checkpoint %s does not match config %s: %s" %
                     (checkpoint, config_file, e)) from e
  # Every model weight was found; the optimizer slots and step counter that
  # training checkpoints also hold are not needed here (no warning per slot).
  status.expect_partial()
  logging.info("loaded %s model from %s", config.model_type, checkpoint)
  return model, tokenizer


def save_model_dir(model, vocab_file, model_dir, do_lower_case=True):
  """Writes a self-describing model dir that `load_model_dir` reads.

  Returns:
    The checkpoint prefix written.
  """
  os.makedirs(model_dir, exist_ok=True)
  config = copy.deepcopy(model.config)
  config.model_type = model.model_type
  config.extra["do_lower_case"] = do_lower_case
  io_utils.write_atomically(os.path.join(model_dir, "config.json"),
                            config.to_json_string())
  with open(vocab_file, encoding="utf-8") as f:
    io_utils.write_atomically(os.path.join(model_dir, "vocab.txt"), f.read())
  return tf.train.Checkpoint(model=model).write(
      os.path.join(model_dir, "ckpt-0"))


def _latest_checkpoint(model_dir):
  """The newest checkpoint prefix: from the `checkpoint` index file a
  CheckpointManager keeps, else the highest-numbered ckpt-N in the dir."""
  latest = tf.train.latest_checkpoint(model_dir)
  if latest:
    return latest
  steps = [int(name[5:-6]) for name in os.listdir(model_dir)
           if name.startswith("ckpt-") and name.endswith(".index")
           and name[5:-6].isdigit()]
  return os.path.join(model_dir, "ckpt-%d" % max(steps)) if steps else None


def load_google_bert(bert_dir, do_lower_case=True):
  """Loads a Google BERT release dir (bert_config.json, vocab.txt,
  bert_model.ckpt) as model_type "bert"; returns (model, tokenizer).

  Sentences are wrapped in [CLS] ... [SEP], as BERT was trained.
  """
  config = modeling.TTAConfig.from_json_file(
      os.path.join(bert_dir, "bert_config.json"))
  vocab_file = os.path.join(bert_dir, "vocab.txt")
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case,
                                         boundary_tokens=("[CLS]", "[SEP]"))
  config.mask_token_id = tokenizer.mask_id
  model = modeling.build_model(config, "bert")
  report = modeling.load_tf1_checkpoint(
      model, os.path.join(bert_dir, "bert_model.ckpt"))
  logging.info("loaded Google BERT from %s (ignored: %s)", bert_dir,
               ", ".join(report["ignored"]) or "none")
  return model, tokenizer


def load_lm(spec, **kwargs):
  """An LM from a spec: a model dir, "kenlm:PATH" for an n-gram model, or
  "bert:DIR" for a Google BERT release."""
  if spec.startswith("kenlm:"):
    return NgramLM(spec[len("kenlm:"):],
                   score_eos=kwargs.get("score_eos", True))
  if spec.startswith("bert:"):
    return NeuralLM(*load_google_bert(spec[len("bert:"):]), **kwargs)
  return NeuralLM.from_model_dir(spec, **kwargs)


def weights_fingerprint(model):
  """sha256 of every weight of `model` (names, shapes and values), hex."""
  digest = hashlib.sha256()
  for name, variable in model.tf1_variables().items():
    value = np.ascontiguousarray(variable.numpy())
    digest.update(("%s %s\n" % (name, value.shape)).encode("utf-8"))
    digest.update(value.tobytes())
  return digest.hexdigest()


def describe(lm):
  """A JSON-able identity of an LM, for caches and reports.

  It includes the weights (a fingerprint; for KenLM the file's size and
  modification time), so scores cached for one checkpoint are never served
  for another of the same config.
  """
  if isinstance(lm, NgramLM):
    path = os.path.abspath(lm.scorer.model_path)
    return {"kind": "kenlm", "path": path,
            "bytes": os.path.getsize(path), "mtime": os.path.getmtime(path),
            "normalization": lm.normalization}
  return {"kind": lm.model_type, "config": json.loads(
      lm.model.config.to_json_string()), "score_sos": lm.score_sos,
          "score_eos": lm.score_eos, "max_seq_length": lm.max_seq_length,
          "normalization": lm.normalization,
          "weights_sha256": weights_fingerprint(lm.model)}

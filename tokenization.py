# coding=utf-8
"""BERT-compatible WordPiece tokenization: one specification, two implementations.

`InGraphTokenizer` (tensorflow-text, for tf.functions and SavedModels) and `host_tokenizer` /
`FullTokenizer` (Hugging Face `tokenizers`) give the same ids (docs/DESIGN.md §3.4). Special tokens
are looked up by name, never at fixed ids: Google BERT's vocab has [UNK]=100 and no [SOS]/[EOS].

Dimensions: B = batch size (sentences), W = words, P = word pieces, T = max_seq_length.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import collections
import collections.abc
import functools

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

# Not exported at the top level of tensorflow_text; its own vocab tool
# (bert_vocab_from_dataset) imports it from here too.
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as vocab_learner
import tokenizers
from tokenizers import normalizers

from util import io_utils

# The T-TA authors' vocab order; build_vocab writes them first in this order.
SPECIAL_TOKENS = ("[PAD]", "[EOS]", "[UNK]", "[SOS]", "[MASK]", "[CLS]", "[SEP]")

# FullTokenizer attribute -> token it names.
_SPECIAL_ID_ATTRS = (
  ("pad_id", "[PAD]"),
  ("eos_id", "[EOS]"),
  ("unk_id", "[UNK]"),
  ("sos_id", "[SOS]"),
  ("mask_id", "[MASK]"),
  ("cls_id", "[CLS]"),
  ("sep_id", "[SEP]"),
)

_SUFFIX_INDICATOR = "##"

# Regex classes for BERT's `_clean_text`, read by RE2 (tf.strings) and by Oniguruma (HF
# `tokenizers`, `host_tokenizer`) alike: code points as \x{...}, because Oniguruma reads \x80-\xFF
# as bytes. Cc is exactly U+0000-001F and U+007F-009F; RE2 has no class subtraction, so \t \n \r
# (Cc, but whitespace to BERT) are kept by listing the Cc ranges around them.
_DROP_CHARS_REGEX = r"[\x{00}-\x{08}\x{0B}\x{0C}\x{0E}-\x{1F}\x{7F}-\x{9F}\p{Cf}\x{FFFD}]"
# BERT maps \t \n \r and Zs to " "; Zl and Zp (U+2028, U+2029) are left in
# place by BERT but then split on by Python's `str.split`, so the effect is
# the same as a space.
_SPACE_CHARS_REGEX = r"[\t\n\r\p{Zs}\p{Zl}\p{Zp}]"
# Accents that lower-casing strips after NFD: non-spacing marks only (BERT's Mn), not the spacing
# and enclosing marks (Mc, Me) that HF's StripAccents also drops.
_ACCENTS_REGEX = r"\p{Mn}"
# Python's str.lower() and tf.strings.lower map a capital sigma to the final form "ς" at the end of
# a word (Unicode's Final_Sigma condition: after a cased letter, not before one, case-ignorable
# characters such as "'" skipped); HF's Lowercase maps character by character, always to "σ".
_FINAL_SIGMA_REGEX = r"(?<=\p{Cased}\p{Case_Ignorable}*)Σ(?!\p{Case_Ignorable}*\p{Cased})"


def check_vocab_file(path):
  """A `cli.param` check of a vocab flag, while parsing: the file is there and reads as a vocab
  (load_vocab's ValueError otherwise). Reads no TensorFlow op, so a command may still set
  TensorFlow's thread pools after it (run_benchmark.py does)."""
  io_utils.check_input_file(path)
  load_vocab(path)


def load_vocab(vocab_file):
  """Token -> id (its 0-based line) in an OrderedDict, tokens stripped as in BERT; ValueError naming
  `vocab_file:line` of an empty line or a repeated token, or an empty file."""
  with tf.io.gfile.GFile(vocab_file, "rb") as f:
    # utf-8-sig: a byte-order mark would otherwise glue itself to token 0.
    text = f.read().decode("utf-8-sig")
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # The newline that ends the last line.
  vocab = collections.OrderedDict()
  for index, line in enumerate(lines):
    token = line.strip()
    if not token:
      what = (
        "an empty line" if not line.rstrip("\r") else f"a line holding only whitespace {line!r}"
      )
      raise ValueError(
        f"{vocab_file}:{index + 1}: found {what}; a vocab file must hold one token per line "
        "with no blank lines (each line's number gives its token's id)."
      )
    if token in vocab:
      raise ValueError(
        f"{vocab_file}:{index + 1}: duplicate token {token!r}, first seen on line "
        f"{vocab[token] + 1}; tokens must be unique."
      )
    vocab[token] = index
  if not vocab:
    raise ValueError(f"{vocab_file}: the vocab file holds no tokens.")
  return vocab


def boundary_tokens(vocab):
  """The (start, end) tokens that frame a sentence: [SOS]/[EOS], else Google BERT's [CLS]/[SEP].

  The rule for a model whose config.json records no pair (`modeling.TTAConfig.boundary_tokens`); a
  BERT checkpoint records [CLS]/[SEP], since its vocab may hold [SOS]/[EOS] too. ValueError if the
  vocab has neither pair.
  """
  for pair in (("[SOS]", "[EOS]"), ("[CLS]", "[SEP]")):
    if pair[0] in vocab and pair[1] in vocab:
      return pair
  raise ValueError("the vocab has neither [SOS]/[EOS] nor [CLS]/[SEP] to frame a sentence")


def _framing_pair(vocab, pair):
  """`pair` as a tuple, else the vocab's, else [SOS]/[EOS]: then only framing fails, naming them."""
  if pair is not None:
    return tuple(pair)
  try:
    return boundary_tokens(vocab)
  except ValueError:
    return ("[SOS]", "[EOS]")


def write_vocab(tokens, vocab_file):
  """Writes tokens one per line (token i gets id i), atomically; ValueError for a token `load_vocab`
  could not read back with its id (empty, with surrounding whitespace or a line break, repeated)."""
  tokens = list(tokens)
  seen = {}
  for index, token in enumerate(tokens):
    if not token or token != token.strip() or "\n" in token or "\r" in token:
      raise ValueError(
        f"token {index} ({token!r}) is empty, has surrounding whitespace or "
        "a line break; it cannot be a vocab line."
      )
    if token in seen:
      raise ValueError(f"duplicate token {token!r} at positions {seen[token]} and {index}.")
    seen[token] = index
  with io_utils.atomic_open(vocab_file) as f:
    for token in tokens:
      f.write(token + "\n")


def _clean_text(texts, do_lower_case):
  """BERT's text cleaning (and lower-casing: `str.lower`, NFD, no Mn) of tf.string, any shape."""
  texts = tf.strings.regex_replace(texts, _DROP_CHARS_REGEX, "")
  texts = tf.strings.regex_replace(texts, _SPACE_CHARS_REGEX, " ")
  if do_lower_case:
    # Not tf_text.case_fold_utf8: NFKC case folding changes more than BERT's
    # lower() does (docs/DESIGN.md §3.4).
    texts = tf.strings.lower(texts, encoding="utf-8")
    texts = tf_text.normalize_utf8(texts, "NFD")
    texts = tf.strings.regex_replace(texts, _ACCENTS_REGEX, "")
  return texts


def basic_tokenize(texts, do_lower_case=True):
  """BERT's BasicTokenizer in-graph: tf.string [B] -> words, tf.string RaggedTensor [B, (W)].

  tf-text's `BasicTokenizer` only splits (whitespace, BERT's punctuation, each CJK ideograph); the
  cleaning and lower-casing, which it does unlike BERT, are `_clean_text`'s (docs/DESIGN.md §3.4).
  """
  texts = _clean_text(texts, do_lower_case)
  # lower_case=False: no case folding, no normalisation; what remains is its
  # Cc/Cf -> " " step (a no-op after _clean_text) and the split.
  return BasicTokenizer(lower_case=False).tokenize(texts)


def is_continuation(token):
  """Whether a WordPiece token continues a word ("##ing") rather than starting one."""
  return token.startswith(_SUFFIX_INDICATOR)


def continued_text(token):
  """The text a continuation piece adds to its word ("##ing" -> "ing"); None for a token that
  starts a word."""
  return token[len(_SUFFIX_INDICATOR) :] if is_continuation(token) else None


def continuation_flags(vocab):
  """bool [V]: which ids are WordPiece continuations, from a token->id mapping or a token list in id
  order (None for an unused id)."""
  return np.array([t is not None and is_continuation(t) for t in _vocab_list(vocab)], bool)


def _vocab_list(vocab):
  """Tokens in id order from a token list or a token->id mapping (ValueError unless ids 0..V-1)."""
  if not isinstance(vocab, collections.abc.Mapping):
    return list(vocab)
  tokens = [None] * len(vocab)
  for token, index in vocab.items():
    if not 0 <= index < len(tokens) or tokens[index] is not None:
      raise ValueError(
        f"vocab ids must be 0..{len(tokens) - 1}, each once; token {token!r} has id {index!r}."
      )
    tokens[index] = token
  return tokens


class InGraphTokenizer(tf.Module):
  """WordPiece tokenizer made of TF ops, for tf.function and SavedModels (no asset file).

  tokenizer = InGraphTokenizer(load_vocab("vocab.txt"))
  ids = tokenizer(tf.constant(["Hello world!"]))          # [1, (P)] int32
  input_ids, input_mask = tokenizer.encode(texts, 128)    # [B, 128] int32
  """

  def __init__(
    self,
    vocab,
    do_lower_case=True,
    max_input_chars_per_word=200,
    boundary_tokens=None,
    name=None,
  ):
    """Compiles the vocab into tf-text's FastWordpieceTokenizer; ValueError without [UNK] or [PAD].

    Args:
      vocab: token -> id mapping with ids 0..V-1 (`load_vocab`), or the tokens in id order.
      max_input_chars_per_word: a longer word (in characters, as BERT counts) becomes [UNK].
      boundary_tokens: the (start, end) `encode` puts around a sentence, as config.json records
        them; None: `boundary_tokens(vocab)`. A token the vocab lacks only makes `encode` fail.
    """
    super(InGraphTokenizer, self).__init__(name=name)
    tokens = _vocab_list(vocab)
    token_to_id = {token: index for index, token in enumerate(tokens)}
    for required in ("[UNK]", "[PAD]"):
      if required not in token_to_id:
        raise ValueError(f"the vocab has no {required} token; the tokenizer needs it.")
    self.do_lower_case = bool(do_lower_case)
    self.max_input_chars_per_word = int(max_input_chars_per_word)
    self.vocab_size = len(tokens)
    self.pad_id = token_to_id["[PAD]"]
    self.boundary_tokens = _framing_pair(token_to_id, boundary_tokens)
    self._start_id = token_to_id.get(self.boundary_tokens[0])
    self._end_id = token_to_id.get(self.boundary_tokens[1])
    # Any word of at most max_input_chars_per_word characters is at most 4x
    # as many UTF-8 bytes, so the byte limit never fires on its own; the
    # character limit is applied in __call__ by swapping in _too_long_word.
    max_bytes = 4 * self.max_input_chars_per_word
    self._too_long_word = tf.constant("x" * (max_bytes + 1))
    # no_pretokenization: words come from basic_tokenize; the tokenizer's own
    # splitting would skip BERT's text cleaning.
    self._wordpiece = tf_text.FastWordpieceTokenizer(
      vocab=tokens,
      suffix_indicator=_SUFFIX_INDICATOR,
      max_bytes_per_word=max_bytes,
      token_out_type=tf.int32,
      unknown_token="[UNK]",
      no_pretokenization=True,
    )

  # autograph=False: no tensor-dependent Python control flow here, and
  # tracing is several times faster without the conversion.
  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def __call__(self, texts):
    """tf.string [B] (UTF-8) -> word-piece ids, int32 RaggedTensor [B, (P)], no boundary tokens."""
    words = basic_tokenize(texts, self.do_lower_case)  # [B, (W)]
    flat_words = words.flat_values
    n_chars = tf.strings.length(flat_words, unit="UTF8_CHAR")
    flat_words = tf.where(n_chars > self.max_input_chars_per_word, self._too_long_word, flat_words)
    pieces = self._wordpiece.tokenize(flat_words)  # [sum(W), (P)]
    pieces = words.with_flat_values(pieces)  # [B, (W), (P)]
    return pieces.merge_dims(1, 2)

  def encode(self, texts, max_seq_length, pad_to_max_length=True):
    """`[start] pieces [end]` per sentence, pieces cut from the end to fit max_seq_length (T >= 2).

    Returns (input_ids, input_mask), int32 [B, T] (pad_to_max_length=False: T is the longest
    sentence's length); ids padded with [PAD], mask 1 at real tokens. ValueError for T < 2 or a
    boundary token missing from the vocab.
    """
    if max_seq_length < 2:
      raise ValueError(
        f"max_seq_length must be >= 2 to hold the boundary tokens, got {max_seq_length:d}."
      )
    start_id, end_id = self.boundary_ids()
    pieces = self(texts)[:, : max_seq_length - 2]  # [B, (P)]
    batch_size = tf.shape(texts, out_type=tf.int64)[0]
    column = tf.ones([batch_size, 1], tf.int32)
    ids = tf.concat([column * start_id, pieces, column * end_id], axis=1)
    length = max_seq_length
    if not pad_to_max_length:
      # max(., 2): reduce_max of an empty batch is the smallest int64.
      length = tf.maximum(tf.reduce_max(ids.row_lengths()), 2)
    input_ids, input_mask = tf_text.pad_model_inputs(
      ids, max_seq_length=length, pad_value=self.pad_id
    )
    return input_ids, tf.cast(input_mask, tf.int32)

  def boundary_ids(self):
    """(start id, end id); ValueError naming the boundary tokens the vocab lacks."""
    missing = [t for t, i in zip(self.boundary_tokens, (self._start_id, self._end_id)) if i is None]
    if missing:
      raise ValueError(
        f"framing a sentence needs the boundary tokens {self.boundary_tokens} but the vocab "
        f"has no {', '.join(missing)}"
      )
    return self._start_id, self._end_id


def host_tokenizer(vocab, do_lower_case=True, max_input_chars_per_word=200):
  """The same tokenization by Hugging Face `tokenizers`, on the host with no TF op.

  Each step of `InGraphTokenizer` is a `tokenizers` component doing exactly that step;
  scripts/check_tokenizer_ids.py proves the ids equal on the shared data. Not `BertNormalizer`'s
  cleaning or lower-casing: it drops private-use and unassigned characters (BERT keeps them, as
  [UNK] words) and knows no final sigma. `encode_batch(texts, add_special_tokens=False)` of the
  result gives the ids of `InGraphTokenizer.__call__`.
  """
  steps = [
    normalizers.Replace(tokenizers.Regex(_DROP_CHARS_REGEX), ""),
    normalizers.Replace(tokenizers.Regex(_SPACE_CHARS_REGEX), " "),
  ]
  if do_lower_case:
    steps += [
      normalizers.Replace(tokenizers.Regex(_FINAL_SIGMA_REGEX), "ς"),
      normalizers.Lowercase(),
      normalizers.NFD(),
      normalizers.Replace(tokenizers.Regex(_ACCENTS_REGEX), ""),
    ]
  steps.append(
    normalizers.BertNormalizer(
      clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False
    )
  )
  tokens = _vocab_list(vocab)
  host = tokenizers.Tokenizer(
    tokenizers.models.WordPiece(
      {token: index for index, token in enumerate(tokens)},
      unk_token="[UNK]",
      continuing_subword_prefix=_SUFFIX_INDICATOR,
      max_input_chars_per_word=max_input_chars_per_word,
    )
  )
  host.normalizer = normalizers.Sequence(steps)
  # Whitespace and BERT's punctuation (ASCII symbols and Unicode P*), as tf-text's BasicTokenizer.
  host.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
  return host


class FullTokenizer(object):
  """Plain-Python tokenizer: `host_tokenizer`'s ids; `graph_tokenizer()` for graphs.

    tokenizer = FullTokenizer("vocab.txt", do_lower_case=True)
    tokenizer.tokenize("Héllo, world!")   # ['hello', ',', 'world', '!']
    tokenizer.encode("Hello", max_seq_length=8)   # [sos_id, id, eos_id]

  `pad_id`, `eos_id`, `unk_id`, `sos_id`, `mask_id`, `cls_id`, `sep_id`: ids of the special tokens,
  None where the vocab lacks one.
  """

  def __init__(
    self,
    vocab_file,
    do_lower_case=True,
    max_input_chars_per_word=200,
    boundary_tokens=None,
  ):
    """As `InGraphTokenizer`; ValueError for a malformed vocab or one without [UNK] or [PAD]."""
    self.vocab_file = vocab_file
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {i: t for t, i in self.vocab.items()}
    self.do_lower_case = do_lower_case
    for attr, token in _SPECIAL_ID_ATTRS:
      setattr(self, attr, self.vocab.get(token))
    for required in ("[UNK]", "[PAD]"):
      if required not in self.vocab:
        raise ValueError(
          f"{vocab_file}: the vocab has no {required} token; the tokenizer needs it."
        )
    self._graph = InGraphTokenizer(
      self.vocab,
      do_lower_case=do_lower_case,
      max_input_chars_per_word=max_input_chars_per_word,
      boundary_tokens=boundary_tokens,
    )
    # Resolved once, by the graph tokenizer: the pair the Python path and an export both use.
    self.boundary_tokens = self._graph.boundary_tokens
    self._host = host_tokenizer(self.vocab, do_lower_case, max_input_chars_per_word)
    self._continuation = None
    # Id -> token as a list: indexing beats dict lookups on large batches.
    size = max(self.inv_vocab) + 1
    self._id_to_token = [self.inv_vocab.get(i) for i in range(size)]

  @property
  def vocab_size(self):
    return len(self.vocab)

  def graph_tokenizer(self):
    return self._graph

  def boundary_ids(self):
    """(start id, end id) of `boundary_tokens`; ValueError naming any the vocab lacks."""
    return self._graph.boundary_ids()

  def continuation_flags(self):
    """bool [V]: `continuation_flags` of this vocab, computed once."""
    if self._continuation is None:
      self._continuation = continuation_flags(self._id_to_token)
    return self._continuation

  def piece_ids_batch(self, texts):
    """Word-piece ids (no boundary tokens) of B sentences (str or UTF-8 bytes): B lists of int."""
    if isinstance(texts, (str, bytes)):
      raise TypeError(
        "expected a list of strings, got a single string; use tokenize()/encode() for one sentence."
      )
    texts = [t.decode("utf-8") if isinstance(t, bytes) else t for t in texts]
    # encode_batch_fast: no character offsets, which nothing here reads.
    return [e.ids for e in self._host.encode_batch_fast(texts, add_special_tokens=False)]

  def tokenize(self, text):
    """Word pieces of one sentence (str) as a list of str."""
    return self.tokenize_batch([text])[0]

  def tokenize_batch(self, texts):
    """Word pieces of many sentences: list of str -> list of lists of str."""
    id_to_token = self._id_to_token
    return [[id_to_token[i] for i in ids] for ids in self.piece_ids_batch(texts)]

  def convert_tokens_to_ids(self, tokens):
    """Maps tokens to ids; raises KeyError naming an unknown token."""
    try:
      return [self.vocab[token] for token in tokens]
    except KeyError as e:
      raise KeyError(f"token {e.args[0]!r} is not in the vocab {self.vocab_file}") from None

  def convert_ids_to_tokens(self, ids):
    """Maps ids to tokens; raises KeyError naming an unknown id."""
    try:
      return [self.inv_vocab[int(i)] for i in ids]
    except KeyError as e:
      raise KeyError(
        f"id {e.args[0]!r} is not in the vocab {self.vocab_file} (size {len(self.vocab)})"
      ) from None

  def encode(self, text, max_seq_length=None):
    """Ids of `[SOS] pieces [EOS]` for one sentence (see encode_batch)."""
    return self.encode_batch([text], max_seq_length)[0]

  def encode_batch(self, texts, max_seq_length=None):
    """Unpadded ids of `[start] pieces [end]` per sentence, truncated as `InGraphTokenizer.encode`.

    max_seq_length: None (no limit) or >= 2 (else ValueError, as for a missing boundary token).
    """
    start_id, end_id = self.boundary_ids()
    if max_seq_length is not None and max_seq_length < 2:
      raise ValueError(
        f"max_seq_length must be >= 2 to hold the boundary tokens, got {max_seq_length:d}."
      )
    keep = None if max_seq_length is None else max_seq_length - 2
    return [[start_id] + ids[:keep] + [end_id] for ids in self.piece_ids_batch(texts)]


@functools.lru_cache(maxsize=None)
def _basic_tokenize_function(do_lower_case):
  return tf.function(
    lambda texts: basic_tokenize(texts, do_lower_case),
    input_signature=[tf.TensorSpec([None], tf.string)],
    autograph=False,
  )


def build_vocab(
  sentences,
  vocab_size,
  do_lower_case=True,
  reserved_tokens=SPECIAL_TOKENS,
  batch_size=4096,
  learn_params=None,
):
  """Learns a WordPiece vocab (reserved_tokens first) with tensorflow-text's learner.

  Words are counted after `basic_tokenize`, so the vocab fits the tokenizer. The learner keeps every
  character (alone and as "##c"): a corpus with a large alphabet can exceed vocab_size (logged).
  learn_params: more learner arguments, e.g. {"lower_thresh": 1} for a tiny corpus (its default 10
  drops every piece seen fewer than 10 times). ValueError for a corpus with no words or a repeated
  reserved token.
  """
  reserved_tokens = list(reserved_tokens)
  if len(set(reserved_tokens)) != len(reserved_tokens):
    raise ValueError(f"reserved_tokens must be unique: {reserved_tokens!r}")
  split = _basic_tokenize_function(bool(do_lower_case))
  counts = collections.Counter()

  def count(batch):
    words = split(tf.constant(batch, tf.string, shape=[len(batch)]))
    counts.update(words.flat_values.numpy().tolist())

  batch = []
  for sentence in sentences:
    batch.append(sentence)
    if len(batch) == batch_size:
      count(batch)
      batch = []
  if batch:
    count(batch)
  if not counts:
    raise ValueError("build_vocab: the corpus holds no words.")
  word_counts = sorted(
    ((w.decode("utf-8"), c) for w, c in counts.items()), key=lambda wc: (-wc[1], wc[0])
  )
  vocab = vocab_learner.learn(word_counts, vocab_size, reserved_tokens, **(learn_params or {}))
  if len(vocab) > vocab_size:
    logging.warning(
      "build_vocab: %d tokens, more than vocab_size=%d (every character of the corpus is kept).",
      len(vocab),
      vocab_size,
    )
  return vocab

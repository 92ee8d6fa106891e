"""Tests for tokenization.py.

Expected outputs are derived by hand from Google BERT's algorithm (clean text,
CJK spacing, whitespace split, lower() + NFD + drop Mn, punctuation split,
greedy longest-match-first WordPiece) on a tiny vocab written here.
"""

import os
import random
import subprocess
import sys

import conftest
from conftest import HANG_SECONDS
from conftest import data_dir_or_skip
import pytest
import tensorflow as tf

import tokenization

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lower-case pieces plus a few cased/accented ones for do_lower_case=False.
TINY_WORDS = [
  "hello",
  "he",
  "##llo",
  "world",
  "don",
  "'",
  "t",
  "!",
  ",",
  ".",
  "$",
  "1",
  "000",
  "5",
  "中",
  "文",
  "un",
  "##aff",
  "##able",
  "a",
  "b",
  "ab",
  "x",
  "##x",
  "ж",
  "##ж",
  "straße",
  "Héllo",
  "World",
  "σ",
  "##α",
  "##ς",
]
TINY_VOCAB = list(tokenization.SPECIAL_TOKENS) + TINY_WORDS

# (text, do_lower_case, expected pieces), each derived from BERT's rules.
X200 = "x" * 200
TRICKY_CASES = [
  # lower(), NFD, drop the combining acute: "Héllo" -> "hello".
  ("Héllo World", True, ["hello", "world"]),
  ("HÉLLO", True, ["hello"]),
  # Input already decomposed (e + U+0301) loses the accent the same way.
  ("he\u0301llo", True, ["hello"]),
  # Cased: no lower-casing, no accent stripping, no normalisation.
  ("Héllo World", False, ["Héllo", "World"]),
  ("hello HELLO", False, ["hello", "[UNK]"]),
  ("Hello", False, ["[UNK]"]),
  # Punctuation split, each mark its own word.
  ("don't!", True, ["don", "'", "t", "!"]),
  # "$" is not Unicode P* but BERT counts all non-alphanumeric ASCII.
  ("$5", True, ["$", "5"]),
  # Unicode P* outside ASCII splits too (guillemets are not in the vocab).
  ("«hello»", True, ["[UNK]", "hello", "[UNK]"]),
  # CJK ideographs become single words, even inside a word.
  ("中文", True, ["中", "文"]),
  ("a中b", True, ["a", "中", "b"]),
  ("1,000.5", True, ["1", ",", "000", ".", "5"]),
  # Greedy longest-match-first: "hello" whole, not "he ##llo".
  ("hello", True, ["hello"]),
  ("unaffable", True, ["un", "##aff", "##able"]),
  # A word that cannot be fully covered is one [UNK], even if a prefix is.
  ("unaffablez", True, ["[UNK]"]),
  ("zebra hello", True, ["[UNK]", "hello"]),
  # The 200-character limit counts characters: 200 x's are 200 pieces,
  # 201 are [UNK].
  (X200, True, ["x"] + ["##x"] * 199),
  (X200 + "x", True, ["[UNK]"]),
  # ... characters, not UTF-8 bytes: 200 "ж" are 400 bytes and still fit.
  ("ж" * 200, True, ["ж"] + ["##ж"] * 199),
  ("ж" * 201 + " a", True, ["[UNK]", "a"]),
  # Control/format characters, NUL and U+FFFD are dropped (joining halves).
  ("hel\x00lo", True, ["hello"]),
  ("hel\ufffdlo wor\x07ld", True, ["hello", "world"]),
  ("a\u200bb a\u00adb", True, ["ab", "ab"]),
  # Tab, newline, CR and Unicode spaces (Zs) separate words.
  ("\thello\r\nworld\u00a0a\u3000b\u2028x ", True, ["hello", "world", "a", "b", "x"]),
  # BERT lower-cases with str.lower(): "ß" stays (NFKC case folding, which
  # tensorflow-text's BertTokenizer uses, would give "strasse").
  ("Straße", True, ["straße"]),
  # ... and with its final sigma: "ς" at the end of a word, "σ" elsewhere.
  ("ΣΑΣ Σ", True, ["σ", "##α", "##ς", "σ"]),
  # C1 controls (Cc) are dropped like C0 ones; private-use characters (Co) are not cleaned.
  ("a\x80b \x9f", True, ["ab"]),
  ("\ue000a b", True, ["[UNK]", "b"]),
  # Lower-casing strips non-spacing marks (Mn) only: a spacing mark (Mc) stays in its word.
  ("a\u093eb", True, ["[UNK]"]),
  ("", True, []),
  (" \t\n ", True, []),
]


def _write(path, lines, newline="\n"):
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(newline.join(lines) + newline)
  return str(path)


@pytest.fixture(scope="module")
def tiny_vocab_file(tmp_path_factory):
  return _write(tmp_path_factory.mktemp("vocab") / "vocab.txt", TINY_VOCAB)


@pytest.fixture(scope="module")
def tokenizers(tiny_vocab_file):
  return {
    lower: tokenization.FullTokenizer(tiny_vocab_file, do_lower_case=lower)
    for lower in (True, False)
  }


def special_ids(tokenizer):
  """The ids of [PAD] [EOS] [UNK] [SOS] [MASK] [CLS] [SEP], in the authors' vocab order."""
  names = ("pad", "eos", "unk", "sos", "mask", "cls", "sep")
  return tuple(getattr(tokenizer, f"{name}_id") for name in names)


@pytest.mark.parametrize(
  "text,lower,expected", TRICKY_CASES, ids=[repr(c[0])[:24] for c in TRICKY_CASES]
)
def test_tricky_cases(tokenizers, text, lower, expected):
  assert tokenizers[lower].tokenize(text) == expected


@pytest.mark.parametrize("lower", [True, False])
def test_graph_and_python_paths_agree(tokenizers, lower):
  tokenizer = tokenizers[lower]
  cases = [c for c in TRICKY_CASES if c[1] == lower]
  texts = [c[0] for c in cases]
  expected_ids = [tokenizer.convert_tokens_to_ids(c[2]) for c in cases]
  graph = tokenizer.graph_tokenizer()

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def in_graph(t):
    return graph(t)

  ragged = in_graph(tf.constant(texts))  # Inside a user's tf.function.
  assert ragged.dtype == tf.int32
  assert ragged.to_list() == expected_ids
  assert graph(tf.constant(texts)).to_list() == expected_ids  # Eager.
  assert tokenizer.piece_ids_batch(texts) == expected_ids
  assert tokenizer.tokenize_batch(texts) == [c[2] for c in cases]
  assert [tokenizer.tokenize(t) for t in texts] == [c[2] for c in cases]


def test_python_path_accepts_bytes_and_rejects_one_string(tokenizers):
  tokenizer = tokenizers[True]
  cases = [c for c in TRICKY_CASES if c[1]]
  texts = [c[0] for c in cases]
  expected_ids = [tokenizer.convert_tokens_to_ids(c[2]) for c in cases]
  assert tokenizer.piece_ids_batch([t.encode("utf-8") for t in texts]) == expected_ids
  assert tokenizer.piece_ids_batch([]) == []
  with pytest.raises(TypeError, match="single string"):
    tokenizer.piece_ids_batch("one sentence")


@pytest.mark.slow(seconds=25)
def test_host_and_graph_ids_agree_on_shared_data():
  """scripts/check_tokenizer_ids.py on 600 sentences of each source of the shared data (the
  script itself checks all of them)."""
  conftest.data_dir_or_skip()
  script = os.path.join(_REPO, "scripts", "check_tokenizer_ids.py")
  proc = subprocess.run(
    [sys.executable, script, "--max_per_source=600", "--gutenberg_books=1"],
    capture_output=True,
    text=True,
    timeout=HANG_SECONDS,
    check=False,
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "TOTAL: 3,000 distinct sentences, 0 with different ids" in proc.stdout


def test_encode_truncation_and_graph_encode(tokenizers):
  tokenizer = tokenizers[True]
  sos, eos, pad = tokenizer.sos_id, tokenizer.eos_id, tokenizer.pad_id
  ids = tokenizer.convert_tokens_to_ids
  assert tokenizer.encode("a b ab") == [sos] + ids(["a", "b", "ab"]) + [eos]
  assert tokenizer.encode("a b ab", max_seq_length=5) == ([sos] + ids(["a", "b", "ab"]) + [eos])
  # Too long: pieces are cut from the end; [SOS] stays first, [EOS] last.
  assert tokenizer.encode("a b ab", max_seq_length=4) == ([sos] + ids(["a", "b"]) + [eos])
  assert tokenizer.encode("a b ab", max_seq_length=2) == [sos, eos]
  with pytest.raises(ValueError, match="max_seq_length"):
    tokenizer.encode("a", max_seq_length=1)

  texts = ["a b ab", "", "unaffable hello world", X200 + "x"]
  for max_len in (4, 7):
    want = tokenizer.encode_batch(texts, max_seq_length=max_len)
    assert all(len(w) <= max_len and w[0] == sos and w[-1] == eos for w in want)
    input_ids, input_mask = tokenizer.graph_tokenizer().encode(tf.constant(texts), max_len)
    assert input_ids.dtype == tf.int32 and input_mask.dtype == tf.int32
    assert input_ids.shape == (len(texts), max_len)
    assert input_ids.numpy().tolist() == [w + [pad] * (max_len - len(w)) for w in want]
    assert input_mask.numpy().tolist() == [[1] * len(w) + [0] * (max_len - len(w)) for w in want]
  # Batch-longest padding.
  input_ids, _ = tokenizer.graph_tokenizer().encode(
    tf.constant(["a", "a b"]), 100, pad_to_max_length=False
  )
  assert input_ids.numpy().tolist() == [
    [sos] + ids(["a"]) + [eos, pad],
    [sos] + ids(["a", "b"]) + [eos],
  ]


def test_ids_tokens_round_trip(tokenizers):
  tokenizer = tokenizers[True]
  assert tokenizer.vocab_size == len(TINY_VOCAB)
  assert list(tokenizer.vocab) == TINY_VOCAB
  ids = tokenizer.convert_tokens_to_ids(TINY_VOCAB)
  assert ids == list(range(len(TINY_VOCAB)))
  assert tokenizer.convert_ids_to_tokens(ids) == TINY_VOCAB
  assert all(tokenizer.inv_vocab[i] == t for t, i in tokenizer.vocab.items())
  pieces = tokenizer.tokenize("Unaffable, hello world!")
  assert tokenizer.convert_ids_to_tokens(tokenizer.convert_tokens_to_ids(pieces)) == pieces
  with pytest.raises(KeyError, match="zzz"):
    tokenizer.convert_tokens_to_ids(["hello", "zzz"])
  with pytest.raises(KeyError):
    tokenizer.convert_ids_to_tokens([len(TINY_VOCAB)])
  assert special_ids(tokenizer) == tuple(range(7))


def test_continuation_pieces_are_the_ones_wordpiece_writes(tokenizers):
  tokenizer = tokenizers[True]
  pieces = tokenizer.tokenize("Unaffable hello")
  assert pieces == ["un", "##aff", "##able", "hello"]
  flags = tokenizer.continuation_flags()
  assert flags[tokenizer.convert_tokens_to_ids(pieces)].tolist() == [False, True, True, False]
  assert flags.tolist() == tokenization.continuation_flags(TINY_VOCAB).tolist()
  assert sum(flags) == 7  # "##llo" "##aff" "##able" "##x" "##ж" "##α" "##ς"
  assert [tokenization.continued_text(p) for p in pieces] == [None, "aff", "able", None]


def test_saved_model_round_trip(tokenizers, tmp_path):
  graph = tokenizers[True].graph_tokenizer()

  class Serving(tf.Module):
    def __init__(self, tokenizer):
      super().__init__()
      self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, texts):
      input_ids, input_mask = self.tokenizer.encode(texts, 8)
      return {"input_ids": input_ids, "input_mask": input_mask}

  texts = tf.constant(["Héllo, world!", "unaffable 中文", ""])
  serving = Serving(graph)  # Kept alive: tf.function holds only a weakref.
  want = serving.serve(texts)
  tf.saved_model.save(serving, str(tmp_path / "model"))
  # The vocab travels inside the SavedModel: no vocab file is needed.
  got = tf.saved_model.load(str(tmp_path / "model")).serve(texts)
  for key in ("input_ids", "input_mask"):
    assert got[key].numpy().tolist() == want[key].numpy().tolist()


def test_reference_vocab():
  reference_vocab = os.path.join(
    data_dir_or_skip("reference-vocab"), "reference-vocab", "tta-vocab-lower.sub-32k.txt"
  )
  vocab = tokenization.load_vocab(reference_vocab)
  assert len(vocab) == 29530
  assert list(vocab)[:7] == list(tokenization.SPECIAL_TOKENS)
  tokenizer = tokenization.FullTokenizer(reference_vocab, do_lower_case=True)
  assert special_ids(tokenizer) == (0, 1, 2, 3, 4, 5, 6)
  assert tokenizer.vocab_size == 29530
  pieces = tokenizer.tokenize("The Quick brown fox, isn't it?")
  assert pieces == ["the", "quick", "brown", "fox", ",", "isn", "'", "t", "it", "?"]
  ids = tokenizer.encode("The fox", max_seq_length=128)
  assert ids == [3, vocab["the"], vocab["fox"], 1]


def test_google_bert_vocab_layout(tmp_path):
  tokens = (
    ["[PAD]"]
    + [f"[unused{i}]" for i in range(99)]
    + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + TINY_WORDS
  )
  path = _write(tmp_path / "vocab.txt", tokens)
  tokenizer = tokenization.FullTokenizer(path)
  assert (
    tokenizer.pad_id,
    tokenizer.unk_id,
    tokenizer.cls_id,
    tokenizer.sep_id,
    tokenizer.mask_id,
  ) == (0, 100, 101, 102, 103)
  assert tokenizer.sos_id is None and tokenizer.eos_id is None
  assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize("hello zebra")) == ([104, 100])
  # No [SOS]/[EOS]: the vocab's pair is BERT's.
  assert tokenizer.boundary_tokens == ("[CLS]", "[SEP]")
  assert tokenizer.encode("hello") == [101, 104, 102]
  authors_frame = tokenization.FullTokenizer(path, boundary_tokens=("[SOS]", "[EOS]"))
  with pytest.raises(ValueError, match=r"needs the boundary tokens .* no \[SOS\], \[EOS\]"):
    authors_frame.encode("hello")


def test_recorded_boundary_tokens_beat_the_vocab_rule(tiny_vocab_file):
  # The tiny vocab holds both pairs: [SOS]/[EOS] by the rule, [CLS]/[SEP] when a BERT
  # checkpoint's config records them.
  default = tokenization.FullTokenizer(tiny_vocab_file)
  bert = tokenization.FullTokenizer(tiny_vocab_file, boundary_tokens=["[CLS]", "[SEP]"])
  assert default.boundary_ids() == (default.sos_id, default.eos_id)
  assert bert.boundary_ids() == (bert.cls_id, bert.sep_id)
  assert bert.encode("hello")[0] == bert.cls_id
  assert bert.graph_tokenizer().boundary_ids() == bert.boundary_ids()


def test_malformed_vocab_names_file_and_line(tmp_path):
  path = _write(tmp_path / "dup.txt", ["[PAD]", "[UNK]", "a", "b", "a"])
  with pytest.raises(
    ValueError,
    match=r"dup\.txt:5: duplicate token 'a', "
    r"first seen on line 3",
  ):
    tokenization.load_vocab(path)
  path = _write(tmp_path / "blank.txt", ["[PAD]", "[UNK]", "", "a"])
  with pytest.raises(ValueError, match=r"blank\.txt:3: found an empty line"):
    tokenization.load_vocab(path)
  path = _write(tmp_path / "space.txt", ["[PAD]", "[UNK]", "a", " \t"])
  with pytest.raises(ValueError, match=r"space\.txt:4: .*only whitespace"):
    tokenization.load_vocab(path)
  # FullTokenizer reports the same error.
  with pytest.raises(ValueError, match=r"space\.txt:4"):
    tokenization.FullTokenizer(path)
  # CRLF line endings are not malformed.
  path = _write(tmp_path / "crlf.txt", ["[PAD]", "[UNK]", "a"], newline="\r\n")
  assert list(tokenization.load_vocab(path).items()) == [("[PAD]", 0), ("[UNK]", 1), ("a", 2)]


def test_write_vocab_round_trip_and_validation(tmp_path):
  path = str(tmp_path / "vocab.txt")
  tokens = TINY_VOCAB
  tokenization.write_vocab(tokens, path)
  assert list(tokenization.load_vocab(path)) == tokens
  assert os.listdir(tmp_path) == ["vocab.txt"]  # No temporary left over.
  with pytest.raises(ValueError, match="duplicate"):
    tokenization.write_vocab(["a", "b", "a"], path)
  with pytest.raises(ValueError, match="empty"):
    tokenization.write_vocab(["a", " "], path)
  assert list(tokenization.load_vocab(path)) == tokens  # Left untouched.


def _synthetic_corpus(n, seed):
  rng = random.Random(seed)
  stems = ["play", "walk", "talk", "jump", "read", "cook", "paint"]
  suffixes = ["", "s", "ed", "ing", "er"]
  return [
    " ".join(
      rng.choice(stems) + rng.choice(suffixes) for _ in range(rng.randint(3, 10))
    ).capitalize()
    + "."
    for _ in range(n)
  ]


def test_build_vocab(tmp_path):
  corpus = _synthetic_corpus(300, seed=0)
  params = {"lower_thresh": 1}
  vocab = tokenization.build_vocab(corpus, 70, learn_params=params)
  assert vocab[:7] == list(tokenization.SPECIAL_TOKENS)
  assert len(vocab) == len(set(vocab)) and len(vocab) <= 70
  # Lower-cased, so no capital letters; every character alone and as "##c".
  assert "p" in vocab and "##p" in vocab and "P" not in vocab
  assert any(t.startswith("##") and len(t) > 3 for t in vocab)
  # Deterministic, whatever the order of the corpus.
  assert tokenization.build_vocab(corpus, 70, learn_params=params) == vocab
  assert tokenization.build_vocab(reversed(corpus), 70, learn_params=params) == vocab
  # The vocab fits the tokenizer: the corpus tokenizes without [UNK].
  path = str(tmp_path / "vocab.txt")
  tokenization.write_vocab(vocab, path)
  tokenizer = tokenization.FullTokenizer(path)
  assert tokenizer.sos_id == 3 and tokenizer.eos_id == 1
  assert all("[UNK]" not in pieces for pieces in tokenizer.tokenize_batch(corpus))
  cased = tokenization.build_vocab(corpus, 70, do_lower_case=False, learn_params=params)
  assert cased[:7] == list(tokenization.SPECIAL_TOKENS) and "P" in cased

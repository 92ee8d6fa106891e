"""Checks that the host tokenizer (HF `tokenizers`) gives tf-text's ids on the shared data.

Tokenizes every distinct sentence of STS-B, SICK, the LibriSpeech lists, WMT21 de-en and the
Gutenberg books with both (`tokenization.host_tokenizer`, `InGraphTokenizer`) and prints per
source the sentences compared and those that differ; exit 1 if any differs. `code_points` shows
where the two Unicode tables differ (docs/DESIGN.md §3.4).

  python scripts/check_tokenizer_ids.py                       # all the data (minutes)
  python scripts/check_tokenizer_ids.py --max_per_source=600 --gutenberg_books=1   # a sample
"""

import collections
import os
import sys
import time

from absl import flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from util import cli  # noqa: E402
from util import io_utils  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string(
  "vocab_file",
  None,
  "Vocab to tokenize with (default: <data_dir>/reference-vocab/tta-vocab-lower.sub-32k.txt).",
)
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents.")
flags.DEFINE_integer(
  "gutenberg_books", 0, "Gutenberg books whose raw lines are checked (0: all 288)."
)
flags.DEFINE_integer(
  "max_per_source",
  0,
  "Check at most this many distinct sentences per source, spread evenly over it (LibriSpeech: "
  "over that many lists sampled from each set) (0: all).",
)
flags.DEFINE_list(
  "sources",
  ["stsb", "sick", "librispeech", "wmt21", "gutenberg"],
  "Sources to check, of these and code_points (every code point, alone and inside a word).",
)
flags.DEFINE_integer("show", 10, "Mismatches to print.")
io_utils.define_data_dir_flag()

# Sentences per tokenizer call: large enough to amortise a call, small enough for memory.
_BATCH = 4096


def stsb_texts(data_dir):
  from evaluation import sts_data  # pylint: disable=g-import-not-at-top

  return [
    text
    for split in sts_data.STSB_SPLITS
    for pair in sts_data.read_stsb(split, data_dir)
    for text in (pair.sent1, pair.sent2)
  ]


def sick_texts(data_dir):
  from evaluation import sts_data  # pylint: disable=g-import-not-at-top

  return [text for pair in sts_data.read_sick(data_dir, None) for text in (pair.sent1, pair.sent2)]


def librispeech_texts(data_dir, limit):
  """The four sets' references and hypotheses; with a limit, of that many lists sampled from
  each set (parsing every hypothesis' scores takes most of a sampled run's time, and each list
  gives some 30 texts)."""
  from nbest import shared_data  # pylint: disable=g-import-not-at-top
  from nbest import types  # pylint: disable=g-import-not-at-top
  from nbest.formats import espnet  # pylint: disable=g-import-not-at-top

  select = types.list_selection(sample_lists=limit) if limit else None
  return [
    text
    for name in shared_data.ESPNET_SETS
    for nbest_list in espnet.read_espnet_nbest(name, data_dir, select)
    for text in nbest_list.refs + [h.text for h in nbest_list.hyps]
  ]


def wmt_texts(data_dir):
  from nbest import shared_data  # pylint: disable=g-import-not-at-top

  sources = os.path.join(
    io_utils.data_root(data_dir), shared_data.WMT_DIR, "sources", "newstest2021.de-en.src.de"
  )
  with open(sources, encoding="utf-8") as f:
    texts = f.read().splitlines()
  for nbest_list in shared_data.read_wmt_candidates(data_dir):
    texts += nbest_list.refs + [h.text for h in nbest_list.hyps]
  return texts


def gutenberg_texts(data_dir, books):
  from text import corpus  # pylint: disable=g-import-not-at-top

  texts = []
  for count, (_, text) in enumerate(
    corpus.iter_gutenberg_books(corpus.default_gutenberg_tar(data_dir)), 1
  ):
    texts += text.split("\n")
    if count == books:
      break
  return texts


def code_point_texts():
  """Every code point but the surrogates (not encodable), alone and between two letters."""
  chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
  return chars + [f"a{c}b" for c in chars]


def distinct_sample(texts, limit):
  """The distinct texts in first-seen order; with a limit, that many spread evenly over them."""
  texts = list(dict.fromkeys(texts))
  if limit and len(texts) > limit:
    texts = [texts[i * len(texts) // limit] for i in range(limit)]
  return texts


def graph_ids(tokenizer, texts):
  """tf-text's ids (InGraphTokenizer run eagerly), in batches."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  graph = tokenizer.graph_tokenizer()
  out = []
  for begin in range(0, len(texts), _BATCH):
    out += graph(tf.constant(texts[begin : begin + _BATCH], tf.string)).to_list()
  return out


def host_ids(host, texts):
  return [encoding.ids for encoding in host.encode_batch(texts, add_special_tokens=False)]


def compare(tokenizer, host, sources, limit):
  """Tokenizes each source with both; returns ({source: Counter}, [(source, text, a, b)])."""
  counts, mismatches = {}, []
  for name, texts in sources:
    texts = distinct_sample(texts, limit)
    start = time.perf_counter()
    expected = graph_ids(tokenizer, texts)
    got = host_ids(host, texts)
    counts[name] = collections.Counter(sentences=len(texts))
    for text, a, b in zip(texts, expected, got):
      if a != b:
        counts[name]["mismatches"] += 1
        mismatches.append((name, text, a, b))
    print(
      f"{name}: {len(texts):,d} distinct sentences, {counts[name]['mismatches']:,d} with "
      f"different ids ({time.perf_counter() - start:.1f} s)",
      flush=True,
    )
  return counts, mismatches


def main(argv):
  del argv
  import tokenization  # pylint: disable=g-import-not-at-top

  data_dir = FLAGS.data_dir
  with cli.user_input():
    vocab_file = FLAGS.vocab_file or os.path.join(
      io_utils.data_root(data_dir), "reference-vocab", "tta-vocab-lower.sub-32k.txt"
    )
    tokenizer = tokenization.FullTokenizer(vocab_file, FLAGS.do_lower_case)
    readers = {
      "stsb": lambda: stsb_texts(data_dir),
      "sick": lambda: sick_texts(data_dir),
      "librispeech": lambda: librispeech_texts(data_dir, FLAGS.max_per_source),
      "wmt21": lambda: wmt_texts(data_dir),
      "gutenberg": lambda: gutenberg_texts(data_dir, FLAGS.gutenberg_books),
      "code_points": code_point_texts,
    }
    unknown = sorted(set(FLAGS.sources) - set(readers))
    if unknown:
      raise cli.InputError(f"--sources: {unknown} not among {sorted(readers)}")
    sources = [(name, readers[name]()) for name in FLAGS.sources]
  host = tokenization.host_tokenizer(tokenizer.vocab, FLAGS.do_lower_case)
  counts, mismatches = compare(tokenizer, host, sources, FLAGS.max_per_source)
  total = sum(counts.values(), collections.Counter())
  print(
    f"TOTAL: {total['sentences']:,d} distinct sentences, {total['mismatches']:,d} with different "
    f"ids (vocab {vocab_file}, do_lower_case={FLAGS.do_lower_case})"
  )
  for name, text, expected, got in mismatches[: FLAGS.show]:
    print(f"- {name}: {text!r}")
    print(f"    tf-text: {tokenizer.convert_ids_to_tokens(expected)}")
    print(f"    host:    {tokenizer.convert_ids_to_tokens(got)}")
  if total["mismatches"]:
    sys.exit(1)


if __name__ == "__main__":
  cli.run(main)

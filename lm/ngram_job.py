"""ngram.py's job: `JobParams` (its flags), then `run(params)`: train a KenLM model through
`ngram_lm.train_ngram`, or print the natural-log scores of a file's lines through
`inference.NgramLM` (score.py's KenLM path: the model's recorded normalization first).
"""

import dataclasses
import math
import os

from absl import logging

from lm import ngram_lm
from text import normalization as normalization_lib
from util import cli
from util import io_utils
from util import progress
from util import resumable


@dataclasses.dataclass
class JobParams:
  """ngram.py's flags (one `cli.param` field each), for its two modes: train a model
  (--train_text, --output and lmplz's options) or score a file (--model, --score_file)."""

  train_text: str = cli.param(
    "Training text, one sentence per line: trains a model.", None, io=cli.INPUT
  )
  output: str = cli.param("Where the trained model goes (with --train_text).", None, io=cli.OUTPUT)
  overwrite: bool = cli.param("Replace an existing --output.", False, result=False)
  order: int = cli.param("n-gram order.", 5)
  memory: str = cli.param(
    "lmplz -S: sorting memory, e.g. 20% or 2G.", "20%", check=ngram_lm.check_memory
  )
  prune: list = cli.param("lmplz --prune count thresholds per order, e.g. 0,0,1.", None)
  discount_fallback: bool = cli.param("lmplz --discount_fallback (tiny corpora).", False)
  binary: bool = cli.param("Write a KenLM binary (else ARPA).", True)
  normalization: str = cli.param(
    "Normalization of --train_text, stored beside the model "
    "so that scoring normalizes text the same way.",
    None,
    normalization_lib.NORMALIZATIONS,
  )
  model: str = cli.param(
    "ARPA or KenLM binary model to score with: this KenLM tool takes the file itself, as "
    "KenLM's query does; every LM command takes it as --model_dir=kenlm:PATH.",
    None,
    unused_with=("train_text",),
  )
  score_file: str = cli.param(
    "Sentences to score, one per line, normalized as recorded with the model (as score.py "
    "does); prints ln p, n_words, n_oov, text.",
    None,
  )
  bos: bool = cli.param("Condition the first word on <s>.", True)
  eos: bool = cli.param("Score </s> (counted as a word).", True)

  def __post_init__(self):
    io_utils.refuse_remote(
      self,
      "KenLM's lmplz, build_binary and reader take local files only",
      [("model", self.model), ("score_file", self.score_file)],
    )
    if bool(self.train_text) == bool(self.score_file):
      raise ValueError("give either --train_text (with --output) or --score_file (with --model)")
    if self.train_text and not self.output:
      raise ValueError("--train_text needs --output")
    if self.prune and len(self.prune) > self.order:
      # lmplz refuses it only once started, in a traceback.
      raise ValueError(
        f"--prune={','.join(map(str, self.prune))} gives {len(self.prune)} thresholds for an "
        f"--order={self.order} model: at most one per order"
      )
    if self.score_file and not self.model:
      raise ValueError("--score_file needs --model")


def run(params):
  """Trains a model (returns its path, --output) or prints the scores of --score_file (returns
  None), as `params` say."""
  if not params.train_text:
    _score_file(params.model, params.score_file, params.bos, params.eos)
    return None
  io_utils.check_outputs_apart(params)
  io_utils.check_output_path(params.output, "output", is_dir=False, overwrite=params.overwrite)
  # One writer of --output, checked again under the lock: two runs at once both found it free and
  # the later replaced the earlier's model in silence (issue 56 probes, fifth round, J19).
  with io_utils.exclusive_lock(io_utils.absolute(params.output), wait=False), cli.user_input():
    io_utils.check_output_path(params.output, "output", is_dir=False, overwrite=params.overwrite)
    return ngram_lm.train_ngram(
      params.train_text,
      params.output,
      order=params.order,
      memory=params.memory,
      prune=params.prune,
      discount_fallback=params.discount_fallback,
      binary=params.binary,
      normalization=params.normalization,
    )


_CHUNK = 256


def _score_file(model, path, bos, eos):
  """Prints ln p, n_words, n_oov and the text of each line of `path`, scored by
  `inference.NgramLM` (score.py's KenLM path: the model's recorded normalization first)."""
  from lm import inference  # pylint: disable=g-import-not-at-top

  with cli.user_input():
    lm = inference.NgramLM(model, score_eos=eos, bos=bos)
    # InputLines names the file and line of bytes that are not UTF-8.
    texts = [text for _, text in resumable.InputLines(path, strip=False)]
  bar = progress.Progress(os.path.basename(model), total=len(texts), unit="sentences")
  total, n_words, n_oov = 0.0, 0, 0
  for start in range(0, len(texts), _CHUNK):
    chunk = texts[start : start + _CHUNK]
    for text, scored in zip(chunk, lm.score(chunk)):
      print(f"{scored.total:.6f}\t{scored.num_tokens}\t{scored.unknown_words}\t{text}")
      total += scored.total
      n_words += scored.num_tokens
      n_oov += scored.unknown_words
    bar.update(len(chunk))
  ppl = math.exp(-total / n_words) if n_words else float("nan")
  logging.info(
    "%d sentences, %d scored words (</s> %s), %d OOV, total ln p %.4f, perplexity %.3f",
    len(texts),
    n_words,
    "included" if eos else "excluded",
    n_oov,
    total,
    ppl,
  )

# coding=utf-8
"""KenLM n-gram baseline: training with lmplz/build_binary and natural-log sentence scoring
(kenlm reports log10). Binaries: scripts/build_kenlm.sh.
"""

import codecs
import collections
import json
import math
import os
import re
import shutil
import subprocess
import tempfile

from absl import logging

from util import io_utils
from util import resumable

# ln(10): multiplies a log10 probability into a natural-log one.
LN10 = math.log(10.0)

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KENLM_BIN_DIR = os.path.join(_REPO_ROOT, "third_party", "kenlm", "bin")

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"


def find_kenlm_bin(name):
  """Absolute path of a KenLM executable (third_party/kenlm/bin, then PATH); FileNotFoundError
  saying how to build it.
  """
  local = os.path.join(KENLM_BIN_DIR, name)
  if os.path.isfile(local) and os.access(local, os.X_OK):
    return local
  on_path = shutil.which(name)
  if on_path:
    return os.path.abspath(on_path)
  raise FileNotFoundError(
    f"KenLM executable '{name}' not found: looked in {KENLM_BIN_DIR} and on PATH. "
    f"Build it with: bash {os.path.join(_REPO_ROOT, 'scripts', 'build_kenlm.sh')}"
  )


# Lines of lmplz/build_binary output logged at info level: the stage headers ("=== 2/5 ..."),
# success, and anything that warns or fails. The rest is logged at debug level.
_SHOWN_OUTPUT = re.compile(r"^=== |^SUCCESS|warn|error|fail", re.IGNORECASE)


def _run_streaming(cmd, what):
  """Runs `cmd`, logging its output as it comes; returns it, RuntimeError with it on failure."""
  logging.info("%s: %s", what, " ".join(cmd))
  lines = []
  with subprocess.Popen(
    cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
  ) as proc:
    # stdout is merged into stderr: with --arpa lmplz writes nothing else there, build_binary
    # writes its progress to both.
    for line in proc.stdout:
      lines.append(line)
      if _SHOWN_OUTPUT.search(line):
        logging.info("%s| %s", what, line.rstrip())
      elif line.strip():  # statistics, memory estimates, progress bars: --verbosity=1 shows them
        logging.debug("%s| %s", what, line.rstrip())
    rc = proc.wait()
  output = "".join(lines)
  if rc != 0:
    status = f"signal {-rc}" if rc < 0 else f"exit status {rc}"
    hint = ""
    if "discount_fallback" in output:
      hint = (
        "\nHint: the corpus is too small to estimate Kneser-Ney discounts; "
        "pass discount_fallback=True (--discount_fallback)."
      )
    raise RuntimeError(
      f"{what} failed ({status}): {' '.join(cmd)}\n--- its output ---\n{output.rstrip()}{hint}"
    )
  return output


def _prune_args(prune):
  """lmplz's --prune arguments from None, "0 0 1" or a sequence of ints."""
  if prune is None:
    return []
  if isinstance(prune, str):
    values = prune.replace(",", " ").split()
  else:
    values = [str(int(p)) for p in prune]
  if not values:
    return []
  for v in values:
    if not v.isdigit():
      raise ValueError(f"prune thresholds must be non-negative integers, got {prune!r}")
  return ["--prune"] + values


def check_memory(memory):
  """ValueError unless `memory` is an amount lmplz's -S reads: a number with an optional unit
  (%, or b, K, M, G, T, P, E; KiB without one), e.g. 20% or 2G. An empty or misspelt one was
  lmplz's C++ error after it started."""
  if not re.fullmatch(r"\d+(\.\d+)?[%bKMGTPEkmgtpe]?", memory):
    raise ValueError(f"{memory!r} is not an amount of memory, e.g. 20% or 2G")


def _lmplz_command(lmplz, text_file, arpa, tmp_dir, order, memory, prune, discount_fallback):
  cmd = [lmplz, "-o", str(order), "-S", str(memory), "-T", tmp_dir]
  cmd += ["--text", text_file, "--arpa", arpa] + _prune_args(prune)
  if discount_fallback:
    cmd.append("--discount_fallback")
  return cmd


def model_info_path(model_path):
  return model_path + ".json"


def read_model_info(model_path):
  """The model's JSON description beside it ({"normalization": ..., ...}), {} if none."""
  path = model_info_path(model_path)
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def train_ngram(
  text_file,
  output_path,
  order=5,
  memory="20%",
  prune=None,
  discount_fallback=False,
  binary=True,
  normalization=None,
):
  """Trains a modified Kneser-Ney n-gram LM with lmplz (and build_binary); returns output_path.

  Written in a temporary dir beside `output_path`, moved into place only when every step succeeded.

  Args:
    text_file: one sentence per line, tokens separated by spaces, without `<s>`/`</s>`.
    memory: lmplz's -S, given because its default (80% of RAM) is hostile on shared machines.
    prune: None, "0 0 1" or a sequence of ints: --prune count thresholds per order.
    discount_fallback: default discounts when the counts of counts cannot give them (tiny corpora).
    normalization: that of `text_file`, recorded beside the model for `inference.NgramLM`.
  """
  # Read twice: for a word here, then by lmplz.
  io_utils.check_input_file(text_file, read_twice=True)
  # lmplz reads a .gz itself, and aborts (a traceback here) on one damaged mid-stream; the word
  # check below would read its compressed bytes.
  resumable.check_plain(text_file)
  with open(text_file, "rb") as f:
    if f.read(len(codecs.BOM_UTF8)) == codecs.BOM_UTF8:
      # lmplz reads bytes: the mark would become part of the first word (issue 56 probes, H10).
      raise ValueError(
        f"{text_file}: starts with a UTF-8 byte-order mark, which lmplz would read as part of the "
        "first word; remove it (sed -i '1s/^\\xEF\\xBB\\xBF//' FILE)"
      )
    f.seek(0)
    if not any(line.split() for line in f):
      # lmplz would make a model of <unk> <s> </s> alone, or build_binary fail on it.
      raise ValueError(f"{text_file}: holds no word; a model needs a text of sentences")
  order = int(order)
  if order < 1:
    raise ValueError(f"order must be >= 1, got {order}")
  lmplz = find_kenlm_bin("lmplz")
  build_binary = find_kenlm_bin("build_binary") if binary else None

  out_dir = os.path.dirname(os.path.abspath(output_path))
  os.makedirs(out_dir, exist_ok=True)
  base = os.path.basename(output_path)
  tmp_dir = tempfile.mkdtemp(prefix=f".{base}.tmp-", dir=out_dir)
  try:
    arpa = os.path.join(tmp_dir, "model.arpa")
    cmd = _lmplz_command(lmplz, text_file, arpa, tmp_dir, order, memory, prune, discount_fallback)
    before = os.stat(text_file)
    try:
      _run_streaming(cmd, "lmplz")
    except RuntimeError:
      # lmplz maps the text: one cut or rewritten under it dies of SIGBUS, not a bug of ours.
      after = os.stat(text_file)
      if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise ValueError(
          f"{text_file} changed while lmplz read it ({before.st_size} -> {after.st_size} bytes): "
          "train on a file that no one writes to meanwhile"
        ) from None
      raise
    result = arpa
    if binary:
      result = os.path.join(tmp_dir, "model.bin")
      _run_streaming([build_binary, arpa, result], "build_binary")
    if normalization is not None:
      info = {
        "normalization": normalization,
        "order": order,
        "train_text": os.path.abspath(text_file),
      }
      io_utils.write_atomically(model_info_path(output_path), json.dumps(info, indent=2))
    os.replace(result, output_path)
  finally:
    shutil.rmtree(tmp_dir, ignore_errors=True)
  logging.info(
    "wrote %s-gram %s model %s (%d bytes)",
    order,
    "binary" if binary else "ARPA",
    output_path,
    os.path.getsize(output_path),
  )
  return output_path


class SentenceScore(
  collections.namedtuple("SentenceScore", ["logprob", "word_logprobs", "n_words"])
):
  """(logprob, word_logprobs, n_words) in natural log; n_words counts </s> when scored. n_oov
  and oov (bool per entry) are attributes outside the tuple.
  """

  n_oov = 0
  oov = None

  def __new__(cls, logprob, word_logprobs, n_words, n_oov=0, oov=None):
    self = super().__new__(cls, logprob, word_logprobs, n_words)
    # Extra fields live outside the tuple so that 3-way unpacking keeps working.
    self.n_oov = n_oov
    self.oov = oov if oov is not None else [False] * n_words
    return self

  def __reduce__(self):  # keep n_oov and oov through pickle / copy
    return (SentenceScore, (self.logprob, self.word_logprobs, self.n_words, self.n_oov, self.oov))


def check_local_model(model_path):
  """ValueError for a model in a bucket: KenLM opens its file itself, on a local path (a bucket's
  model was "not found")."""
  if io_utils.is_remote(model_path):
    raise ValueError(
      f"{model_path}: KenLM reads local files only; copy the model to a local path (gcloud "
      "storage cp) and give that"
    )


class NgramScorer(object):
  """Scores sentences with a KenLM model (ARPA or binary), in natural log."""

  def __init__(self, model_path):
    """ImportError without `kenlm`, FileNotFoundError, or ValueError naming a file KenLM refuses."""
    try:
      import kenlm  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError(
        "the `kenlm` Python module is required for n-gram scoring: "
        "pip install kenlm==0.3.0 (see requirements.txt)"
      ) from e
    check_local_model(model_path)
    if not os.path.exists(model_path):
      raise FileNotFoundError(f"n-gram model file not found: {model_path}")
    if os.path.isdir(model_path):
      raise ValueError(
        f"n-gram model path is a directory, expected an ARPA or KenLM binary file: {model_path}"
      )
    config = kenlm.Config()
    config.show_progress = False  # no "****" bar on stderr for each load
    try:
      self._model = kenlm.Model(model_path, config)
    except (OSError, RuntimeError) as e:
      raise ValueError(
        f"cannot load n-gram model {model_path}: expected an ARPA file or a "
        f"KenLM binary. KenLM says: {e}"
      ) from e
    self.model_path = model_path
    self.order = self._model.order
    self.total_oov = 0  # running totals over every score_sentences call
    self.total_words = 0

  def __contains__(self, word):
    return word in self._model

  def score_sentences(self, texts, bos=True, eos=True):
    """list of `SentenceScore`, one per whitespace-tokenised text; an OOV word gets <unk>'s.

    bos conditions the first word on `<s>` (never scored nor counted; ValueError in a text); eos
    scores `</s>`.
    """
    results = []
    for text in texts:
      words = text.split()
      if BOS in words:
        raise ValueError(f"'{BOS}' must not appear in the text (use bos=True): {text!r}")
      # full_scores yields (log10 p, n-gram length used, is_oov) per word, then one for </s>.
      word_logprobs, oov = [], []
      for log10_p, _, is_oov in self._model.full_scores(" ".join(words), bos=bos, eos=eos):
        word_logprobs.append(log10_p * LN10)
        oov.append(bool(is_oov))
      n_oov = sum(oov)
      self.total_oov += n_oov
      self.total_words += len(word_logprobs)
      results.append(
        SentenceScore(math.fsum(word_logprobs), word_logprobs, len(word_logprobs), n_oov, oov)
      )
    return results

  def score(self, text, bos=True, eos=True):
    return self.score_sentences([text], bos=bos, eos=eos)[0].logprob

# coding=utf-8
"""Released checkpoints (Google BERT, the T-TA authors' TF1, Hugging Face BERT) into model dirs:
convert_checkpoint.py's job, checked to read back the same.
"""

import dataclasses
import os

from absl import logging
import tensorflow as tf

import kinds
from lm import checkpoints
from lm import hf_checkpoint
from lm import model_dir
import modeling
from util import cli
from util import io_utils


def load_google_bert(bert_dir, do_lower_case=True):
  """(model, tokenizer) of a Google BERT release dir, model_type "bert", framed [CLS] ... [SEP]."""
  return load_tf1_model(
    os.path.join(bert_dir, "bert_config.json"),
    model_dir.vocab_path(bert_dir),
    os.path.join(bert_dir, "bert_model.ckpt"),
    "bert",
    do_lower_case,
    model_dir.BERT_BOUNDARY_TOKENS,
  )


def load_tf1_model(
  config_file, vocab_file, checkpoint, model_type, do_lower_case=True, boundary_tokens=None
):
  """(model, tokenizer) of a TF1 name-based checkpoint with its BERT-style config and vocab.

  model_type: "bert" for Google's (token types), "tta" for the authors'; boundary_tokens: the pair
  the model was trained with (None: the vocab's). FileNotFoundError / ValueError naming what is
  missing or mismatched.
  """
  for path in (config_file, vocab_file):
    if not tf.io.gfile.exists(path):  # else TF's NotFoundError, which is no OSError
      raise FileNotFoundError(f"{path} not found")
  config = modeling.TTAConfig.from_json_file(config_file)
  config.model_type = model_type
  config.do_lower_case = do_lower_case
  if boundary_tokens is not None:
    config.boundary_tokens = list(boundary_tokens)
  tokenizer = model_dir.tokenizer_for(config, vocab_file)
  if tokenizer.mask_id is None:
    raise ValueError(f"vocab {vocab_file} has no [MASK] token")
  config.mask_token_id = tokenizer.mask_id
  model = modeling.build_model(config, model_type)
  report = checkpoints.load_tf1_checkpoint(model, checkpoint)
  logging.info(
    "loaded %s from %s (ignored: %s)",
    model_type,
    checkpoint,
    ", ".join(report["ignored"]) or "none",
  )
  return model, tokenizer


# The release formats convert_checkpoint.py's --input takes (a model dir of ours needs none).
INPUT_PREFIXES = ("hf:", "bert:")


@dataclasses.dataclass
class ConversionParams:
  """Which released checkpoint to convert and where; convert_checkpoint.py makes its flags from
  the `cli.param` fields. Exactly one source: `input` (hf:DIR, bert:DIR) or `init_checkpoint`."""

  output_dir: str = cli.param("The model dir to write (must not hold a model yet).", io=cli.OUTPUT)
  input: str = cli.param(
    "hf:DIR (Hugging Face BERT) or bert:DIR (Google BERT release) to convert.", None, io=cli.INPUT
  )
  init_checkpoint: str = cli.param(
    "Instead of --input: a TF1 checkpoint prefix (e.g. DIR/model.ckpt).", None, io=cli.INPUT
  )
  bert_config_file: str = cli.param(
    "With --init_checkpoint: its BERT-style config.", None, io=cli.INPUT
  )
  vocab_file: str = cli.param(
    "With --init_checkpoint: the vocab it was trained with.", None, io=cli.INPUT
  )
  model_type: str = cli.param(
    "With --init_checkpoint: what it holds (the T-TA authors' checkpoint: tta).",
    "tta",
    kinds.MODEL_TYPES,
  )
  do_lower_case: bool = cli.param(
    "bert:DIR and --init_checkpoint: whether the vocab is uncased (default true; false for "
    "Google's cased releases). Not with hf:DIR, whose tokenizer_config.json says it.",
    None,
  )

  def __post_init__(self):
    if bool(self.input) == bool(self.init_checkpoint):
      raise ValueError("give either --input=hf:DIR|bert:DIR or --init_checkpoint")
    if self.init_checkpoint:
      if not (self.bert_config_file and self.vocab_file):
        raise ValueError("--init_checkpoint needs --bert_config_file and --vocab_file")
      return
    if not self.input.startswith(INPUT_PREFIXES):
      raise ValueError(f"--input must start with one of {INPUT_PREFIXES}, got {self.input!r}")
    if self.input.startswith("hf:") and self.do_lower_case is not None:
      raise ValueError("--do_lower_case is for bert: and TF1 inputs; hf:DIR's tokenizer says it")


def load_source(params):
  do_lower_case = True if params.do_lower_case is None else params.do_lower_case
  if params.init_checkpoint:
    return load_tf1_model(
      params.bert_config_file,
      params.vocab_file,
      params.init_checkpoint,
      params.model_type,
      do_lower_case,
    )
  if params.input.startswith("bert:"):
    # Google's release dirs do not say whether they are cased; the flag does.
    return load_google_bert(params.input[len("bert:") :], do_lower_case)
  return hf_checkpoint.load_hf_bert(params.input[len("hf:") :])


def check_output_dir(output_dir):
  if checkpoints.latest_checkpoint(output_dir):
    raise ValueError(f"{output_dir} already holds a model; choose a new --output_dir")
  # A folder of the user's: the model's files would be written in among theirs.
  if os.path.isdir(output_dir) and os.listdir(output_dir):
    held = ", ".join(sorted(os.listdir(output_dir))[:3])
    raise ValueError(
      f"{output_dir} holds files ({held}); a model dir is written into a new or empty folder: "
      "choose another --output_dir"
    )


def convert(model, tokenizer, output_dir):
  """Writes a loaded model as a model dir (its tokenizer's casing and boundaries in config.json);
  returns the prefix. RuntimeError if it does not read back the same.
  """
  check_output_dir(output_dir)
  # Recorded even when the vocab's rule would choose the same pair: the dir then frames
  # sentences as its source did whatever the rule becomes.
  model.config.boundary_tokens = list(tokenizer.boundary_tokens)
  model.config.do_lower_case = tokenizer.do_lower_case
  prefix = model_dir.save_model_dir(model, tokenizer.vocab_file, output_dir)
  again, again_tokenizer = model_dir.load_model_dir(output_dir)
  if (
    model_dir.weights_fingerprint(again) != model_dir.weights_fingerprint(model)
    or again_tokenizer.boundary_tokens != tokenizer.boundary_tokens
  ):
    raise RuntimeError(f"{output_dir} does not read back as the model just written")
  return prefix


def convert_checkpoint(params):
  """(model, tokenizer, prefix written); ValueError / OSError naming the source or output dir."""
  io_utils.refuse_remote(
    params, "a release is converted from local files and the model dir read back locally"
  )
  io_utils.check_outputs_apart(params)
  io_utils.check_output_path(params.output_dir, "output_dir")
  check_output_dir(params.output_dir)  # before the (slow) load
  model, tokenizer = load_source(params)
  return model, tokenizer, convert(model, tokenizer, params.output_dir)

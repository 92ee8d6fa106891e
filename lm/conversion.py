# coding=utf-8
"""Released checkpoints (Google BERT, the T-TA authors' TF1, Hugging Face BERT) into model dirs:
the library of convert_checkpoint.py (whose job is `checkpoint_job`), checked to read back the
same.
"""

import os

from absl import logging
import tensorflow as tf

from lm import checkpoints
from lm import model_dir
import modeling


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

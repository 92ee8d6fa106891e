"""Converts a released checkpoint into a model dir that every command reads by --model_dir alone.

Sources: --input=hf:DIR (Hugging Face BERT), --input=bert:DIR (a Google BERT release), or
--init_checkpoint, --bert_config_file and --vocab_file (a TF1 checkpoint such as the T-TA
authors'). The written model dir is read back and its weights compared with the source's before
success is reported. Examples: README "Released checkpoints".

  python convert_checkpoint.py --input=hf:downloads/bert-base-uncased --output_dir=models/bert
"""

from absl import flags
from absl import logging

import kinds
from lm import inference
from lm import model_dir
from util import cli

FLAGS = flags.FLAGS

# The release formats --input takes (a model dir of ours needs no conversion).
INPUT_PREFIXES = ("hf:", "bert:")


def define_flags():
  """Defines the command-line flags (from __main__ only, so tests can import the module)."""
  flags.DEFINE_string(
    "input", None, "hf:DIR (Hugging Face BERT) or bert:DIR (Google BERT release) to convert."
  )
  flags.DEFINE_string(
    "init_checkpoint", None, "Instead of --input: a TF1 checkpoint prefix (e.g. DIR/model.ckpt)."
  )
  flags.DEFINE_string("bert_config_file", None, "With --init_checkpoint: its BERT-style config.")
  flags.DEFINE_string("vocab_file", None, "With --init_checkpoint: the vocab it was trained with.")
  flags.DEFINE_enum(
    "model_type",
    "tta",
    kinds.MODEL_TYPES,
    "With --init_checkpoint: what it holds (the T-TA authors' checkpoint: tta).",
  )
  flags.DEFINE_bool(
    "do_lower_case",
    None,
    "bert:DIR and --init_checkpoint: whether the vocab is uncased (default true; false for "
    "Google's cased releases). Not with hf:DIR, whose tokenizer_config.json says it.",
  )
  flags.DEFINE_string("output_dir", None, "The model dir to write (must not hold a model yet).")
  flags.mark_flag_as_required("output_dir")


def load_source(args):
  """(model, tokenizer) of the checkpoint the flags name.

  Raises:
    cli.InputError: for flags that do not name exactly one source.
  """
  if bool(args.input) == bool(args.init_checkpoint):
    raise cli.InputError("give either --input=hf:DIR|bert:DIR or --init_checkpoint")
  do_lower_case = True if args.do_lower_case is None else args.do_lower_case
  if args.init_checkpoint:
    if not (args.bert_config_file and args.vocab_file):
      raise cli.InputError("--init_checkpoint needs --bert_config_file and --vocab_file")
    return model_dir.load_tf1_model(
      args.bert_config_file, args.vocab_file, args.init_checkpoint, args.model_type, do_lower_case
    )
  if not args.input.startswith(INPUT_PREFIXES):
    raise cli.InputError(f"--input must start with one of {INPUT_PREFIXES}, got {args.input!r}")
  if args.input.startswith("bert:"):
    # Google's release dirs do not say whether they are cased; the flag does.
    return model_dir.load_google_bert(args.input[len("bert:") :], do_lower_case)
  if args.do_lower_case is not None:
    raise cli.InputError("--do_lower_case is for bert: and TF1 inputs; hf:DIR's tokenizer says it")
  return inference.load_model(args.input)


def check_output_dir(output_dir):
  """Raises ValueError if output_dir already holds a model."""
  if model_dir.latest_checkpoint(output_dir):
    raise ValueError(f"{output_dir} already holds a model; choose a new --output_dir")


def convert(model, tokenizer, output_dir):
  """Writes a loaded model as a model dir and checks that it reads back the same.

  Args:
    model: `modeling.TransformerLM` as a loader returned it.
    tokenizer: its `tokenization.FullTokenizer`; its lower-casing and boundary tokens are
      recorded in config.json.
    output_dir: str; must not hold a checkpoint yet.

  Returns:
    The checkpoint prefix written.

  Raises:
    ValueError: if output_dir already holds a model.
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


def main(argv):
  del argv
  with cli.user_input():
    check_output_dir(FLAGS.output_dir)  # before the (slow) load
    model, tokenizer = load_source(FLAGS)
    prefix = convert(model, tokenizer, FLAGS.output_dir)
  logging.info(
    "wrote %s model %s (sentences framed by %s ... %s); score with --model_dir=%s",
    model.model_type,
    prefix,
    *tokenizer.boundary_tokens,
    FLAGS.output_dir,
  )


if __name__ == "__main__":
  define_flags()
  cli.run(main)

"""convert_checkpoint.py's job: `JobParams` (its flags), then `run(params)`: the output checked,
the source loaded, then written as a model dir by `conversion.convert`, which reads it back.
"""

import dataclasses

import kinds
from lm import conversion
from lm import hf_checkpoint
from util import cli
from util import io_utils

# The release formats --input takes (a model dir of ours needs no conversion).
INPUT_PREFIXES = ("hf:", "bert:")


@dataclasses.dataclass
class JobParams:
  """convert_checkpoint.py's flags (one `cli.param` field each): which released checkpoint to
  convert and where. Exactly one source: `input` (hf:DIR, bert:DIR) or `init_checkpoint`."""

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
  """(model, tokenizer) of the source `params` name."""
  do_lower_case = True if params.do_lower_case is None else params.do_lower_case
  if params.init_checkpoint:
    return conversion.load_tf1_model(
      params.bert_config_file,
      params.vocab_file,
      params.init_checkpoint,
      params.model_type,
      do_lower_case,
    )
  if params.input.startswith("bert:"):
    # Google's release dirs do not say whether they are cased; the flag does.
    return conversion.load_google_bert(params.input[len("bert:") :], do_lower_case)
  return hf_checkpoint.load_hf_bert(params.input[len("hf:") :])


def run(params):
  """(model, tokenizer, prefix written); ValueError / OSError naming the source or output dir."""
  io_utils.refuse_remote(
    params, "a release is converted from local files and the model dir read back locally"
  )
  io_utils.check_outputs_apart(params)
  io_utils.check_output_path(params.output_dir, "output_dir")
  conversion.check_output_dir(params.output_dir)  # before the (slow) load
  model, tokenizer = load_source(params)
  return model, tokenizer, conversion.convert(model, tokenizer, params.output_dir)

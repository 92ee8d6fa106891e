"""The options of the commands that load an LM, each declared once with one help text.

`LMOptions` (a `cli.nested` field of a job's params) holds `inference.load_lm`'s keyword
arguments; `model_dir_param` and `scoring_param` make the --model_dir and --scoring fields.
"""

import dataclasses
import os

from lm import backends
from lm import inference
from lm import windows
from util import cli


def _spec_help(kenlm):
  """What names an LM (`inference.load_lm`'s specs), for the help texts."""
  specs = [
    "a model dir (config.json, vocab.txt, checkpoint, as run_pretraining.py or "
    "convert_checkpoint.py write it)"
  ]
  if kenlm:
    specs.append("kenlm:PATH (an ARPA file or KenLM binary)")
  specs += ["bert:DIR (a Google BERT release)", "hf:DIR (a Hugging Face BERT)"]
  return ", ".join(specs[:-1]) + " or " + specs[-1]


def model_dir_param(several=False, kenlm=True, required=True, default=None, **kwargs):
  """The --model_dir field: the LM (or LMs) to use.

  Args:
    several: a comma-separated list of LMs, NAME=SPEC naming a result row (`model_specs`);
      else one LM.
    kenlm: the command also takes kenlm:PATH (an n-gram model: no sentence vectors, no export).
    required: the command refuses a run without it.
    default: what the command does without one, for the help ("random models ...").
    **kwargs: more of `cli.param`'s arguments.
  """
  if several:
    text = f"The LMs, comma-separated, each {_spec_help(kenlm)}; NAME=SPEC names its row."
  else:
    text = f"The LM: {_spec_help(kenlm)}."
  if default:
    text += f" Default: {default}."
  return cli.param(
    text,
    dataclasses.MISSING if required else None,
    flag="model_dir",
    io=cli.INPUT,
    check=_check_distinct if several else None,
    **kwargs,
  )


def model_specs(model_dirs):
  """[(row name, spec)] of a --model_dir list; the name is "" where NAME= is not given."""
  return [(name, spec) for name, _, spec in (item.rpartition("=") for item in model_dirs)]


def row_name(name, spec):
  """The row and feature name of the LM `spec`: its NAME=, else the path's last part."""
  return name or os.path.basename(spec.rstrip("/"))


def named_specs(model_dirs):
  """[(row name, spec)] of a --model_dir list, every row named (`row_name`).

  Raises:
    ValueError: two LMs under one row name (their scores and weights would collapse into one).
  """
  named = [(row_name(name, spec), spec) for name, spec in model_specs(model_dirs)]
  seen = {}
  for name, spec in named:
    if name in seen:
      raise ValueError(
        f"--model_dir names two LMs {name!r} ({seen[name]} and {spec}): give each its own NAME="
      )
    seen[name] = spec
  return named


def _check_distinct(model_dirs):
  """Parse-time check of a --model_dir list: no NAME= twice, no LM twice."""
  names, specs = {}, {}
  for name, spec in model_specs(model_dirs):
    key = os.path.normpath(spec)
    if key in specs:
      raise ValueError(f"{spec} is given twice ({specs[key]!r} and {name or spec!r})")
    specs[key] = name or spec
    if name and name in names:
      raise ValueError(f"the name {name!r} is given twice ({names[name]} and {spec})")
    names[name] = spec
  return True


def scoring_param():
  """The --scoring field: how a neural LM scores word pieces (`inference.SCORINGS`)."""
  return cli.param(
    "Neural LMs: how word pieces are scored. piece: each piece given every other piece; "
    "word_l2r: given the other words and the earlier pieces of its word (PLL-word-l2r; T-TA in "
    "one pass, the biLM by masked copies). Default: the one the model kind was trained for "
    "(word_l2r for tta_word, else piece).",
    None,
    enum=list(inference.SCORINGS),
  )


def token_budget_param():
  """The --token_budget field (also reproduction/benchmark.py's, beside no other LM option)."""
  return cli.param(
    "Neural LMs: most tokens (rows x length) per forward pass; bounds the LM head's logits "
    "and the biLM's masked copies.",
    inference.DEFAULT_TOKEN_BUDGET,
    lower_bound=1,
  )


def _check_stride(values):
  """--stride leaves no piece out of every window: at most the pieces of one."""
  if values["window"] and values["stride"] and values["stride"] > values["window"] - 2:
    raise ValueError(
      f"--stride={values['stride']} is more than the {values['window'] - 2} word pieces of a "
      f"--window={values['window']} window (a longer stride skips pieces)"
    )


def _check_long_inputs(values):
  """--window and --stride cut windows: with --long_inputs=truncate nothing reads them."""
  if values["long_inputs"] == "truncate":
    given = [f"--{name}" for name in ("window", "stride") if values[name] is not None]
    if given:
      raise ValueError(
        f"{' and '.join(given)} {'does' if len(given) == 1 else 'do'} nothing with "
        "--long_inputs=truncate (a long sentence is cut, not read in windows): leave one of "
        "them out"
      )


@dataclasses.dataclass
class LMOptions:
  """`inference.load_lm`'s keyword arguments that a command takes as flags (`cli.nested`, with
  `only` the ones it has): what a sentence's score sums, how a long sentence is read, how fast."""

  score_eos: bool = cli.param(
    "Score the end-of-sentence token ([EOS]; [SEP] for BERT vocabs; KenLM's </s>).", True
  )
  score_sos: bool = cli.param(
    "Also score the start token (tta, bilm, bert; nothing predicts it for unilm and KenLM).",
    False,
  )
  long_inputs: str = cli.param(
    "Neural LMs: a sentence longer than the model takes (its max_position_embeddings) is read "
    "in sliding windows of --window tokens, each word piece scored and represented once, in "
    "the window where it has the most context (the most centred; for the uniLM the longest "
    "left context), its record saying in how many (window); or loses its last pieces and is "
    "flagged truncated (truncate).",
    "window",
    enum=list(windows.LONG_INPUTS),
  )
  window: int = cli.param(
    "--long_inputs=window: tokens per window, [BOS] and [EOS] included, at most the model's "
    "max_position_embeddings (the default); a longer sentence is windowed.",
    None,
    lower_bound=3,
  )
  stride: int = cli.param(
    "--long_inputs=window: word pieces from one window to the next, 1 .. --window - 2 (default "
    "half a window's pieces). The biLM costs one masked copy per piece whatever the stride; "
    "T-TA and the uniLM one pass per window.",
    None,
    lower_bound=1,
  )
  token_budget: int = token_budget_param()
  backend: str = cli.param(
    "Neural LMs: what runs the model. tf: TensorFlow (the reference); openvino: OpenVINO's CPU "
    "kernels in float32, the same numbers within float rounding; openvino_bf16: the same in "
    "bfloat16 on AMX/AVX512-BF16 CPUs, scores within a tolerance (docs/runtime.md); "
    "onnxruntime: the same functions as ONNX graphs of ONNX Runtime's fused transformer "
    "kernels, float32, the same numbers within float rounding.",
    "tf",
    enum=backends.BACKENDS,
  )

  FLAG_CHECKS = (
    (("window", "stride"), _check_stride),
    (("long_inputs", "window", "stride"), _check_long_inputs),
  )

  def load_kwargs(self):
    """{`inference.load_lm` keyword: value}."""
    return dataclasses.asdict(self)


def nested(only=None, defaults=None):
  """A job's `LMOptions` field (`cli.nested`), in its run identity as {flag: value} of the
  options the command takes (as it was recorded when they were a dict)."""
  return cli.nested(LMOptions, only, defaults, flat=False)


# The fields of LMOptions a command takes as flags (`nested`'s `only`), by group.
SCORED = ("score_eos", "score_sos")
LONG_INPUTS = ("long_inputs", "window", "stride")
THROUGHPUT = ("token_budget", "backend")

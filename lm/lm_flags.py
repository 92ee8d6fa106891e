"""The flags of the commands that load an LM, each declared once with one help text.

Commands call the `define_*` functions they need; `load_options` turns the parsed values into
`inference.load_lm`'s keyword arguments. run_rescoring.py also takes `--lm`, the old name of
`--model_dir`.
"""

import os

from absl import flags

from lm import backends
from lm import inference
from lm import windows

# Defined here, the flags belong to the command that calls a define_* function: absl lists a
# flag under the module that runs DEFINE_* unless that module disclaims it.
flags.disclaim_key_flags()

# The load_lm keyword arguments of the flags below, as `load_options` reads them back.
_LOAD_OPTIONS = (
  "score_eos",
  "score_sos",
  "token_budget",
  "backend",
  "long_inputs",
  "window",
  "stride",
)


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


def define_model_dir(
  several=False, kenlm=True, required=True, default=None, flag_values=flags.FLAGS
):
  """--model_dir, the LM (or LMs) to use.

  Args:
    several: a comma-separated list of LMs, NAME=SPEC naming a result row (`model_specs`);
      else one LM.
    kenlm: the command also takes kenlm:PATH (an n-gram model: no sentence vectors, no export).
    required: an omission is refused at parse time.
    default: what the command does without one, for the help ("random models ...").
    flag_values: where to define it.
  """
  if several:
    text = f"The LMs, comma-separated, each {_spec_help(kenlm)}; NAME=SPEC names its row."
  else:
    text = f"The LM: {_spec_help(kenlm)}."
  if default:
    text += f" Default: {default}."
  define = flags.DEFINE_list if several else flags.DEFINE_string
  define("model_dir", None, text, flag_values=flag_values)
  if several:
    flags.register_validator("model_dir", _check_distinct, flag_values=flag_values)
  if required:
    flags.mark_flag_as_required("model_dir", flag_values=flag_values)


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
  for name, spec in model_specs(model_dirs or ()):
    key = os.path.normpath(spec)
    if key in specs:
      raise flags.ValidationError(f"{spec} is given twice ({specs[key]!r} and {name or spec!r})")
    specs[key] = name or spec
    if name and name in names:
      raise flags.ValidationError(f"the name {name!r} is given twice ({names[name]} and {spec})")
    names[name] = spec
  return True


def define_scoring_flags(flag_values=flags.FLAGS):
  """--scoring, --score_eos and --score_sos: what a sentence's score sums."""
  flags.DEFINE_enum(
    "scoring",
    None,
    list(inference.SCORINGS),
    "Neural LMs: how word pieces are scored. piece: each piece given every other piece; "
    "word_l2r: given the other words and the earlier pieces of its word (PLL-word-l2r; T-TA in "
    "one pass, the biLM by masked copies). Default: the one the model kind was trained for "
    "(word_l2r for tta_word, else piece).",
    flag_values=flag_values,
  )
  flags.DEFINE_bool(
    "score_eos",
    True,
    "Score the end-of-sentence token ([EOS]; [SEP] for BERT vocabs; KenLM's </s>).",
    flag_values=flag_values,
  )
  flags.DEFINE_bool(
    "score_sos",
    False,
    "Also score the start token (tta, bilm, bert; nothing predicts it for unilm and KenLM).",
    flag_values=flag_values,
  )


def define_long_input_flags(default="window", flag_values=flags.FLAGS):
  """--long_inputs, and with "window" among its choices --window and --stride: how a neural LM
  reads a sentence longer than it takes (lm/windows.py; KenLM takes any length).

  Args:
    default: "window", or "truncate" for a command that only truncates (export_saved_model.py:
      its `--long_inputs` then takes "truncate" alone, and refuses "window" with the reason).
  """
  flags.DEFINE_enum(
    "long_inputs",
    default,
    list(windows.LONG_INPUTS),
    "Neural LMs: a sentence longer than the model takes (its max_position_embeddings) is read "
    "in sliding windows of --window tokens, each word piece scored and represented once, in "
    "the window where it has the most context (the most centred; for the uniLM the longest "
    "left context), its record saying in how many (window); or loses its last pieces and is "
    "flagged truncated (truncate).",
    flag_values=flag_values,
  )
  if default != "window":
    return
  flags.DEFINE_integer(
    "window",
    None,
    "--long_inputs=window: tokens per window, [BOS] and [EOS] included, at most the model's "
    "max_position_embeddings (the default); a longer sentence is windowed.",
    lower_bound=3,
    flag_values=flag_values,
  )
  flags.DEFINE_integer(
    "stride",
    None,
    "--long_inputs=window: word pieces from one window to the next, 1 .. --window - 2 (default "
    "half a window's pieces). The biLM costs one masked copy per piece whatever the stride; "
    "T-TA and the uniLM one pass per window.",
    lower_bound=1,
    flag_values=flag_values,
  )
  flags.register_multi_flags_validator(["window", "stride"], _check_stride, flag_values=flag_values)


def _check_stride(values):
  """--stride leaves no piece out of every window: at most the pieces of one."""
  if values["window"] and values["stride"] and values["stride"] > values["window"] - 2:
    raise flags.ValidationError(
      f"--stride={values['stride']} is more than the {values['window'] - 2} word pieces of a "
      f"--window={values['window']} window (a longer stride skips pieces)"
    )
  return True


def define_throughput_flags(backend=True, flag_values=flags.FLAGS):
  """--token_budget, and --backend unless `backend` is False: how fast, never what, a neural LM
  computes (KenLM ignores them)."""
  flags.DEFINE_integer(
    "token_budget",
    inference.DEFAULT_TOKEN_BUDGET,
    "Neural LMs: most tokens (rows x length) per forward pass; bounds the LM head's logits "
    "and the biLM's masked copies.",
    lower_bound=1,
    flag_values=flag_values,
  )
  if not backend:
    return
  flags.DEFINE_enum(
    "backend",
    "tf",
    backends.BACKENDS,
    "Neural LMs: what runs the model. tf: TensorFlow (the reference); openvino: OpenVINO's CPU "
    "kernels in float32, the same numbers within float rounding; openvino_bf16: the same in "
    "bfloat16 on AMX/AVX512-BF16 CPUs, scores within a tolerance (docs/runtime.md); "
    "onnxruntime: the same functions as ONNX graphs of ONNX Runtime's fused transformer "
    "kernels, float32, the same numbers within float rounding.",
    flag_values=flag_values,
  )


def load_options(flag_values):
  """{load_lm keyword: value} of the flags above that `flag_values` (a command's) defines."""
  return {name: flag_values[name].value for name in _LOAD_OPTIONS if name in flag_values}

"""export_saved_model.py's job: `JobParams` (its flags), then `run(params)`: the model loaded,
exported by `saved_model_export.export`, then reloaded and each signature run once.
docs/saved_model.md.
"""

import dataclasses

from absl import logging
import tensorflow as tf

from lm import inference
from lm import lm_options as lm_options_lib
from lm import saved_model_export
from util import cli
from util import io_utils


@dataclasses.dataclass
class JobParams:
  """export_saved_model.py's flags (one `cli.param` field each): which model, how it scores, where
  the SavedModel goes."""

  model_dir: str = lm_options_lib.model_dir_param(kenlm=False)
  export_dir: str = cli.param("Where to write the SavedModel.", io=cli.OUTPUT)
  max_seq_length: int = cli.param(
    "Longest input in tokens, boundaries included: [BOS], a piece and [EOS] at least, the "
    "model's max_position_embeddings at most (the default).",
    None,
    lower_bound=3,
  )
  overwrite: bool = cli.param("Replace an existing --export_dir.", False)
  scoring: str = lm_options_lib.scoring_param()
  # A SavedModel's graph truncates (no windows); --long_inputs=window is refused with the reason.
  lm_options: lm_options_lib.LMOptions = lm_options_lib.nested(
    only=lm_options_lib.SCORED + ("long_inputs", "token_budget"),
    defaults={"long_inputs": "truncate"},
  )


def run(params):
  """Exports, then reloads and runs each signature once so a broken export fails here;
  cli.InputError for a wrong input.
  """
  long_inputs = params.lm_options.long_inputs
  if long_inputs != "truncate":
    # docs/saved_model.md "Long inputs": the signatures frame each sentence as one model input.
    raise cli.InputError(
      f"--long_inputs={long_inputs}: the SavedModel's signatures read a sentence as one "
      "input of at most --max_seq_length tokens and flag `truncated`; score longer ones with "
      "score.py (docs/saved_model.md, Long inputs)"
    )
  with cli.user_input():
    io_utils.check_outputs_apart(params)
    io_utils.check_output_path(params.export_dir, "export_dir")
  # One writer of --export_dir, which it checks under the lock: two exports at once both found it
  # free and the later replaced the earlier's in silence (issue 56 probes, fifth round, J19).
  with io_utils.exclusive_lock(io_utils.absolute(params.export_dir), wait=False):
    _export(params)


def _export(params):
  with cli.user_input():
    saved_model_export.check_export_dir(io_utils.absolute(params.export_dir), params.overwrite)
    lm = inference.NeuralLM.from_model_dir(
      params.model_dir, max_seq_length=params.max_seq_length, **params.lm_options.load_kwargs()
    )
  positions = lm.model.config.max_position_embeddings
  if (params.max_seq_length or 0) > positions:
    # NeuralLM would take the model's length instead: the export would not be what was asked.
    raise cli.InputError(
      f"--max_seq_length={params.max_seq_length} is more than the {positions} tokens the model "
      f"takes (max_position_embeddings of {params.model_dir})"
    )
  text = "the cat sat on the mat ." if lm.normalization == "none" else "THE CAT SAT ON THE MAT"

  def check(path, module):
    """Each signature run once on the written export, before it is renamed into place: a stop
    during this check leaves no export, so the same command redoes it (issue 56 probes, H9: a
    Ctrl-C here said so while the export was in place, and the re-run was refused)."""
    loaded = tf.saved_model.load(path)
    inputs = {module.input_name: tf.constant([text])}
    scores = loaded.signatures["score"](**inputs)
    vectors = loaded.signatures["encode"](**inputs)
    logging.info(
      "check: total %.4f over %d tokens; context vector of %d dims",
      float(scores["total"][0]),
      int(scores["num_tokens"][0]),
      int(vectors["context"].shape[-1]),
    )

  saved_model_export.export(
    lm, params.export_dir, overwrite=params.overwrite, scoring=params.scoring, check=check
  )

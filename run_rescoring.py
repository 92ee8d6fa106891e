"""N-best reranking with any LM kind: the paper's tables (1, 2 and 7) and your own N-best files.

Your own files (--test_file, any format of nbest/formats/): the combination s(h) of
nbest/combination.py (first-pass columns, several LMs, a length bonus) is tuned on --dev_file or
loaded from --weights_file, and each set's rescored lists, 1-best (`text`, `hyp.trn`) and metrics
go to --output_dir/<set>/ (nbest/rescoring.py; README "Rescore your own N-best lists"). The
paper's protocol (λ on dev, applied to test; nbest/paper_protocol.py) runs on the shared
LibriSpeech and WMT21 sets, and on json/tsv dev and test files with references. LM scores are
cached per LM under --output_dir/cache, so a re-run never recomputes a sentence; one run at a
time holds an --output_dir, and a --test_file run resumes only the same job (--overwrite starts
over).

Examples:
  # LibriSpeech ESPnet2 30-best, both first-pass settings:
  python run_rescoring.py --model_dir=tta=runs/tta,kenlm:runs/lm.bin \
      --task=asr --output_dir=results/asr
  # WMT21 de-en candidates, LM-only selection:
  python run_rescoring.py --model_dir=runs/tta --task=nmt --output_dir=results/nmt
  # Your own lists (mlm-scoring JSON or TSV):
  python run_rescoring.py --model_dir=runs/tta --task=asr --format=json \
      --dev_file=dev.json --test_file=test.json --settings=full --output_dir=results/own
  # Kaldi lists, KenLM and T-TA, tuned on dev, then a blind test set with the saved weights:
  python run_rescoring.py --format=kaldi --model_dir=ngram=kenlm:lm.bin,tta=runs/tta \
      --dev_file=dev/nbest --dev_refs=data/dev/text --test_file=test/nbest --output_dir=out
  python run_rescoring.py --format=kaldi --model_dir=ngram=kenlm:lm.bin,tta=runs/tta \
      --test_file=eval/nbest --weights_file=out/weights.json --output_dir=out_eval
"""

import dataclasses

from absl import flags

from evaluation import significance
from lm import lm_flags
from nbest import formats
from nbest import rescoring
from nbest import rescoring_job
from nbest import settings
from util import cli
from util import io_utils

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (called from __main__ only: a module that imports this
  one, or a test, gets its functions without its flags)."""
  lm_flags.define_model_dir(several=True, required=True)
  # The name this command had for --model_dir before every command took --model_dir.
  flags.DEFINE_alias("lm", "model_dir")
  lm_flags.define_scoring_flags()
  lm_flags.define_long_input_flags()
  flags.DEFINE_enum(
    "task",
    "asr",
    ["asr", "nmt"],
    "asr: WER on ESPnet2 LibriSpeech (or --format files); nmt: BLEU on WMT21 de-en.",
  )
  flags.DEFINE_list(
    "pairs",
    ["dev_clean:test_clean", "dev_other:test_other"],
    "ASR dev:test set pairs (λ tuned on dev, applied to test).",
  )
  flags.register_validator(
    "pairs",
    lambda pairs: all(len(p.split(":")) == 2 and all(p.split(":")) for p in pairs),
    "expected DEV:TEST set pairs, e.g. dev_clean:test_clean",
  )
  flags.DEFINE_list(
    "settings",
    ["am", "full"],
    "The paper's first-pass settings: " + settings.describe(),
  )
  cli.register_choices("settings", list(settings.SETTINGS))
  flags.DEFINE_enum(
    "format",
    "espnet",
    list(formats.FORMATS),
    "N-best format of --dev_file/--test_file (evaluation/formats.py).",
  )
  flags.DEFINE_string("dev_file", None, "Dev N-best file or dir (with references: weights tuned).")
  flags.DEFINE_string("test_file", None, "Test N-best file or dir (references optional).")
  flags.DEFINE_list("dev_refs", [], "Reference file(s) of --dev_file (several: multi-reference).")
  flags.DEFINE_list("test_refs", [], "Reference file(s) of --test_file (none: a blind set).")
  flags.DEFINE_multi_string(
    "format_option", [], "KEY=VALUE option of the format's reader (VALUE as JSON if it parses)."
  )
  flags.DEFINE_string(
    "weights_file",
    None,
    "Combination weights to apply (the weights.json of an earlier run); no tuning on dev then.",
  )
  cli.define_escaped_list(
    "first_pass",
    [],
    "First-pass score columns NAME[:WEIGHT] of the combination, separated by commas; a comma in "
    "a NAME is written \\, (e.g. Moses' sparse feature pl_1,1: --first_pass='pl_1\\,1,LM0'). "
    "Default 'score' if the lists have it, else every column.",
  )
  flags.DEFINE_bool(
    "allow_negative_weights",
    False,
    "Let the search on dev give an LM a negative weight (by default LM weights stay >= 0: a "
    "negative one rewards what the LM finds unlikely, which a small dev set can favour by chance).",
  )
  flags.DEFINE_bool("cer", False, "Report the character error rate too (ASR files).")
  flags.DEFINE_enum(
    "sentence_score",
    "sum",
    ["sum", "mean"],
    "LM sentence score: sum of token log-probs, or their mean.",
  )
  io_utils.define_data_dir_flag()
  flags.DEFINE_string(
    "output_dir", None, "Results (rescoring_results.json, .md) and the score cache."
  )
  flags.DEFINE_integer(
    "max_lists",
    None,
    "Use only the first N lists of each set (quick runs). With --test_file, the rescored lists, "
    "1-best files and metrics then hold those lists only (a line-based file: their lines, in "
    "the input's order).",
    lower_bound=0,
  )
  flags.DEFINE_integer(
    "sample_lists",
    None,
    "Use a seeded random sample of N lists of each set (after --max_lists), the same for every "
    "LM and run: paired comparisons at a fraction of the cost. Outputs as for --max_lists.",
    lower_bound=0,
  )
  flags.DEFINE_integer("sample_seed", 0, "Seed of --sample_lists.")
  flags.DEFINE_integer(
    "chunk_size",
    500,
    "Sentences scored between cache writes; progress lines (rate, ETA) at most every 10 s.",
    lower_bound=1,
  )
  lm_flags.define_throughput_flags()
  flags.DEFINE_integer(
    "bootstrap_resamples",
    significance.DEFAULT_RESAMPLES,
    "Paired bootstrap resamples (over utterances) for each LM's WER vs the first pass.",
    lower_bound=1,
  )
  flags.DEFINE_integer("bootstrap_seed", 0, "Seed of the paired bootstrap resampler.")
  flags.DEFINE_bool(
    "overwrite",
    False,
    "--test_file runs: start over in an --output_dir that holds another run's weights, "
    "rescored lists and report (removes them; the score cache stays).",
  )
  flags.register_multi_flags_validator(
    ["format", "dev_file", "test_file", "weights_file"], _check_file_flags
  )


def params_from_flags():
  """`rescoring_job.RescoringParams` from the parsed flags."""
  with cli.user_input():
    options = dict(rescoring.parse_option(o) for o in FLAGS.format_option)
  return rescoring_job.RescoringParams(
    lms=lm_flags.named_specs(FLAGS.model_dir),
    format_options=options,
    lm_options=lm_flags.load_options(FLAGS),
    **{
      f.name: FLAGS[f.name].value
      for f in dataclasses.fields(rescoring_job.RescoringParams)
      if f.name not in ("lms", "format_options", "lm_options")
    },
  )


def main(argv):
  del argv
  rescoring_job.run(params_from_flags())


def _check_file_flags(values):
  """--test_file (any format) needs --dev_file (to tune on) or --weights_file; --dev_file alone
  is refused."""
  if values["dev_file"] and not values["test_file"]:
    raise flags.ValidationError("--dev_file needs --test_file")
  if values["test_file"] and not (values["dev_file"] or values["weights_file"]):
    raise flags.ValidationError(
      f"--format={values['format']} needs --dev_file and --test_file (or --weights_file)"
    )
  return True


if __name__ == "__main__":
  define_flags()
  cli.run(main)

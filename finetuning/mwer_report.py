"""The final evaluation of MWER rescoring: the four systems (a)-(d) of docs/DESIGN.md §4.5 on
whole test sets, with paired bootstrap CIs over utterances.
"""

import dataclasses

from evaluation import metrics
from evaluation import significance
from finetuning import mwer
from finetuning import mwer_data
from nbest import combination

SYSTEMS = ("first_pass", "interpolation", "combination", "mwer")
LABELS = {
  "first_pass": "(a) first pass",
  "interpolation": "(b) LM interpolation",
  "combination": "(c) weights only, LM frozen",
  "mwer": "(d) MWER-trained LM",
}
# The comparisons of each row: (system, baseline).
COMPARISONS = (
  ("interpolation", "first_pass"),
  ("combination", "first_pass"),
  ("mwer", "first_pass"),
  ("mwer", "interpolation"),
  ("mwer", "combination"),
)


@dataclasses.dataclass
class SettingSystems:
  """What one setting's systems need: λ of (b), the `combination.Weights` of (c) and (d)."""

  setting: str
  interpolation_lambda: float
  combination: object
  mwer: object


def evaluate_set(name, lists, systems, frozen_lm, mwer_lm, bootstrap):
  """Every system's WER on one test set under one setting, and the comparisons; `frozen_lm` and
  `mwer_lm` are {text: score} of the starting and the trained LM."""
  setting = systems.setting
  names = tuple(systems.combination.first_pass)
  prepared, _ = mwer_data.prepare(lists, None, names)
  frozen = [[frozen_lm[h.text] for h in l.hyps] for l in lists]
  trained = [[mwer_lm[h.text] for h in l.hyps] for l in lists]
  combined = {"combination": (systems.combination, frozen), "mwer": (systems.mwer, trained)}
  choices = {
    "first_pass": combination.rerank(lists, None, 0.0, setting),
    "interpolation": combination.rerank(lists, frozen, systems.interpolation_lambda, setting),
    **{
      system: combination.choose(mwer.feature_tables(weights, prepared, lm), weights.vector())
      for system, (weights, lm) in combined.items()
    },
  }
  errors = {}
  for system, choice in choices.items():
    errors[system], reference_words = metrics.utterance_errors(lists, choice)
  resamples, seed = bootstrap
  comparisons = []
  for system, baseline in COMPARISONS:
    comparison = significance.compare_error_rates(
      errors[system], errors[baseline], reference_words, num_resamples=resamples, seed=seed
    )
    comparisons.append(dict(dataclasses.asdict(comparison), system=system, baseline=baseline))
  return {
    "test": name,
    "setting": setting,
    "oracle": metrics.oracle(lists, "wer")[0],
    "wer": {s: metrics.evaluate(lists, choices[s], "wer") for s in SYSTEMS},
    "comparisons": comparisons,
    "interpolation_lambda": systems.interpolation_lambda,
    "weights": {"combination": systems.combination.to_dict(), "mwer": systems.mwer.to_dict()},
  }


def _comparison(row, system, baseline):
  for c in row["comparisons"]:
    if c["system"] == system and c["baseline"] == baseline:
      return c
  raise KeyError((system, baseline))


def _format(c):
  return (
    f"{c['difference']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}], "
    f"p {significance.format_p(c['p_value'])}"
  )


def markdown(rows, curves, selection):
  """The results table, the selected runs against their start, then each run's learning curve."""
  lines = [
    "WER % (lower is better); differences in WER points with 95% paired bootstrap CIs over "
    "utterances.",
    "",
    "| test | setting | (a) first pass | (b) LM interp. (λ) | (c) weights only | "
    "(d) MWER LM | oracle | (d) - (a) | (d) - (b) | (d) - (c) | (c) - (a) |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    w = r["wer"]
    lines.append(
      f"| {r['test']} | {r['setting']} | {w['first_pass']:.3f} | {w['interpolation']:.3f} "
      f"({r['interpolation_lambda']:.2f}) | {w['combination']:.3f} | {w['mwer']:.3f} | "
      f"{r['oracle']:.3f} | {_format(_comparison(r, 'mwer', 'first_pass'))} | "
      f"{_format(_comparison(r, 'mwer', 'interpolation'))} | "
      f"{_format(_comparison(r, 'mwer', 'combination'))} | "
      f"{_format(_comparison(r, 'combination', 'first_pass'))} |"
    )
  lines += ["", "Held-out selection (epoch 0 is (c): its weights, the starting LM):", ""]
  lines += [_selection_line(setting, s) for setting, s in selection.items()]
  for name, records in curves.items():
    lines += [
      "",
      f"Learning curve of {name}:",
      "",
      "| epoch | train MWER loss | train regularizer | held-out MWER loss | held-out expected "
      "errors | held-out WER |",
      "|---|---|---|---|---|---|",
    ]
    for r in records:
      train = "-" if r["train_mwer"] is None else f"{r['train_mwer']:+.4f}"
      regularizer = "-" if r["train_regularizer"] is None else f"{r['train_regularizer']:.4f}"
      lines.append(
        f"| {r['epoch']} | {train} | {regularizer} | {r['heldout_mwer']:+.4f} | "
        f"{r['heldout_expected_errors']:.3f} | {r['heldout_wer']:.3f} |"
      )
  return "\n".join(lines) + "\n"


def training_helped(selection):
  """Whether the selected epoch's held-out WER is below the start's (epoch 0, which is (c))."""
  return selection["heldout_wer"] < selection["start_heldout_wer"]


def _selection_line(setting, s):
  verdict = (
    "below the start"
    if training_helped(s)
    else "not below the start: MWER training of the LM did not help on held-out speakers"
  )
  return (
    f"- {setting}: regularizer weight {s['regularizer_weight']:g}, epoch {s['epoch']}, "
    f"held-out WER {s['heldout_wer']:.3f} against {s['start_heldout_wer']:.3f} at epoch 0, "
    f"{verdict}"
  )

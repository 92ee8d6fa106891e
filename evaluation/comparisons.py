"""Paired comparisons of two LMs on the same utterances (WER) or sentence pairs (STS Pearson),
and the markdown tables run_sts.py and reproduce.py's report print."""

import dataclasses

from evaluation import significance

# (a, b) pairs whose difference a - b the report tests on the same utterances / sentence pairs.
# The paper's claims: T-TA against the biLM and the uniLM.
PAPER_PAIRS = (("T-TA", "biLM"), ("T-TA", "uniLM"))
# Word-level scoring (docs/results.md, issue 22): does scoring words change reranking (each LM
# scored word_l2r against itself scored by pieces), and does training with the word mask matter
# (the T-TA trained with it against the T-TA trained with DMSA, both scored word_l2r)?
WORD_L2R = " (word_l2r)"
WORD_PAIRS = (
  ("T-TA" + WORD_L2R, "T-TA"),
  ("biLM" + WORD_L2R, "biLM"),
  ("T-TA-w", "T-TA" + WORD_L2R),
)
# STS: the T-TA trained with the word mask against T-TA (its vectors use its own mask).
STS_PAIRS = PAPER_PAIRS + (("T-TA-w", "T-TA"),)


def _comparison_dict(a, b, where, comparison):
  return dict(a=a, b=b, **where, **dataclasses.asdict(comparison))


def asr_comparisons(asr, pairs=PAPER_PAIRS):
  """Dicts of a, b, test, setting and the `significance.Comparison` of WER a minus b for each
  (a, b) of `pairs` in rescoring_results.json rows `asr`, over the same utterances; pairs
  lacking an LM, per-utterance "errors" or 2 utterances are left out."""
  rows = {row["lm"]: row for row in asr}
  out = []
  for first, other in pairs:
    if first not in rows or other not in rows:
      continue
    theirs = {(r["test"], r["setting"]): r for r in rows[other]["results"]}
    for r in rows[first]["results"]:
      o = theirs.get((r["test"], r["setting"]))
      if o is None or len(r.get("errors") or ()) < 2 or "errors" not in o:
        continue
      c = significance.compare_error_rates(r["errors"], o["errors"], r["reference_words"])
      out.append(_comparison_dict(first, other, {"test": r["test"], "setting": r["setting"]}, c))
  return out


def sts_comparisons(sts, pairs=STS_PAIRS, bootstrap=(significance.DEFAULT_RESAMPLES, 0)):
  """Pearson x100 of a minus b for each (a, b) of `pairs`, per set and representation, paired
  bootstrap over the same sentence pairs (rows need the per-pair "cosines" and "gold");
  `bootstrap` is its (resamples, seed)."""
  resamples, seed = bootstrap
  by = {(r["model"], r["representation"]): r for r in sts}
  out = []
  for first, other in pairs:
    for (model, representation), mine in by.items():
      theirs = by.get((other, representation))
      if model != first or theirs is None:
        continue
      for name, cosines in (mine.get("cosines") or {}).items():
        c = significance.compare_pearson(
          cosines,
          theirs["cosines"][name],
          mine["gold"][name],
          num_resamples=resamples,
          seed=seed,
        )
        out.append(
          _comparison_dict(first, other, {"set": name, "representation": representation}, c)
        )
  return out


def seed_comparison_table(comparisons, columns):
  """One line per comparison over seeds (seed_runs.combine_comparisons): "a - b", the `columns`
  keys, the mean difference, each seed's difference [95% CI], and the every-seed rule's verdict."""
  lines = [
    "| comparison | "
    + " | ".join(columns)
    + " | mean difference | per seed: difference [95% CI] | every seed |",
    "|---|" + "---|" * len(columns) + "---:|---|---|",
  ]
  for c in comparisons:
    where = " | ".join(str(c[k]).replace("_", " ") for k in columns)
    seeds = "; ".join(
      "-" if s is None else f"{s['difference']:+.2f} [{s['low']:+.2f}, {s['high']:+.2f}]"
      for s in c["seeds"]
    )
    lines.append(
      f"| {c['a']} - {c['b']} | {where} | {c['difference']:+.2f} | {seeds} | "
      f"{'yes' if c['every_seed'] else 'no'} |"
    )
  return "\n".join(lines)


def comparison_table(comparisons, columns):
  """One line per comparison: "a - b", the `columns` keys, difference [95% CI], p."""
  lines = [
    "| comparison | " + " | ".join(columns) + " | difference [95% CI] | p |",
    "|---|" + "---|" * len(columns) + "---:|---:|",
  ]
  for c in comparisons:
    where = " | ".join(str(c[k]).replace("_", " ") for k in columns)
    lines.append(
      f"| {c['a']} - {c['b']} | {where} | {c['difference']:+.2f} "
      f"[{c['low']:+.2f}, {c['high']:+.2f}] | {significance.format_p(c['p_value'])} |"
    )
  return "\n".join(lines)

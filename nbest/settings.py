"""First-pass settings: which first-pass scores a reranker combines, with the first pass's
weights."""

# ESPnet2 decoding weights of this data set (README.upstream.md): ctc_weight 0.4 splits the
# acoustic part into 0.6 decoder + 0.4 CTC, and the Transformer LM was fused with weight 0.6.
AM_WEIGHTS = {"decoder": 0.6, "ctc": 0.4}
FULL_WEIGHTS = {"decoder": 0.6, "ctc": 0.4, "lm": 0.6}
# The first-pass scores each setting combines, with the weights the first pass gave them. The
# parts of "full" sum to the lists' stored beam score up to the files' rounding: `s2s_score` uses
# the stored score (what the beam ranked by), MWER training (finetuning/mwer_data) the parts, so
# that it can learn their weights.
SETTING_WEIGHTS = {"am": AM_WEIGHTS, "full": FULL_WEIGHTS}
SETTINGS = (*SETTING_WEIGHTS, None)


def s2s_score(hyp, setting):
  """The first-pass score a reranker interpolates with.

  Args:
    hyp: Hypothesis.
    setting: "am" -> 0.6*decoder + 0.4*ctc, the ESPnet score with no LM in the first pass;
      "full" -> scores["score"], the full beam score. For the ESPnet2 lists that is
      0.6*decoder + 0.4*ctc + 0.6*lm (shallow fusion with a Transformer LM, the paper's
      Seq2SeqASR setting); the files round it to 4 decimals, so it equals the weighted sum of
      the rounded parts only to within 2.4e-4. The stored value is used because it is what the
      beam ranked by. For JSON/TSV lists "full" is the list's own score.
      None -> 0.0 (lists with no first-pass score, e.g. WMT candidates; only λ=1 is meaningful).

  Returns:
    float.

  Raises:
    ValueError: unknown setting, or the hypothesis lacks the scores it needs.
  """
  if setting is None:
    return 0.0
  if setting == "am":
    missing = [name for name in AM_WEIGHTS if name not in hyp.scores]
    if missing:
      raise ValueError(
        f"setting 'am' needs scores {list(AM_WEIGHTS)}; hypothesis "
        f"{hyp.text!r} has {sorted(hyp.scores)}"
      )
    return sum(weight * hyp.scores[name] for name, weight in AM_WEIGHTS.items())
  if setting == "full":
    if "score" not in hyp.scores:
      raise ValueError(
        f"setting 'full' needs score 'score'; hypothesis {hyp.text!r} has {sorted(hyp.scores)}"
      )
    return hyp.scores["score"]
  raise ValueError(f"unknown setting {setting!r}; expected one of {SETTINGS}")

"""First-pass settings: which first-pass scores a reranker combines, with the first pass's
weights (adding one: docs/DESIGN.md §7.2)."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Setting:
  """One first-pass setting: `parts` {score: the first pass's weight}; `total`, a score that
  holds their weighted sum as the beam ranked by it (rounded, so only near the parts' sum)."""

  name: str
  parts: dict
  total: str = None
  description: str = ""

  def weights(self, scores, prefer_parts=False):
    """{score: weight} for hypotheses carrying `scores`: the total if carried, else the parts;
    `prefer_parts` (MWER learns their weights) reverses that preference."""
    has_parts = all(name in scores for name in self.parts)
    has_total = self.total is not None and self.total in scores
    if has_parts and (prefer_parts or not has_total):
      return dict(self.parts)
    if has_total:
      return {self.total: 1.0}
    needed = sorted(self.parts) + ([f"or {self.total!r}"] if self.total else [])
    raise ValueError(
      f"setting {self.name!r} needs scores {', '.join(map(repr, needed))}; the hypotheses have "
      f"{sorted(scores)}"
    )


# ESPnet2 decoding weights of the shared LibriSpeech lists (README.upstream.md): ctc_weight 0.4
# splits the acoustic part into 0.6 decoder + 0.4 CTC, and the Transformer LM was fused with
# weight 0.6; the lists' "score" is that sum, rounded to 4 decimals (|diff| <= 2.4e-4).
SETTINGS = {
  s.name: s
  for s in (
    Setting(
      "am",
      {"decoder": 0.6, "ctc": 0.4},
      description="the acoustic model's scores, no LM in the first pass: 0.6 decoder + 0.4 CTC",
    ),
    Setting(
      "full",
      {"decoder": 0.6, "ctc": 0.4, "lm": 0.6},
      total="score",
      description="the first pass with its LM fused: the beam's total score (0.6 decoder + "
      "0.4 CTC + 0.6 LM for ESPnet lists; the list's own 'score' for lists without parts)",
    ),
  )
}


def describe():
  return "; ".join(f"{s.name} = {s.description}" for s in SETTINGS.values())


def get(name):
  if name not in SETTINGS:
    raise ValueError(f"unknown setting {name!r}; expected one of {', '.join(SETTINGS)}")
  return SETTINGS[name]


def first_pass_weights(setting, scores, prefer_parts=False):
  """`Setting.weights` of `setting`; None (no first pass: WMT candidates) gives {}."""
  return {} if setting is None else get(setting).weights(scores, prefer_parts)

"""The model kinds (T-TA, biLM, uniLM, BERT, ...) as one table of traits that code looks up.

Imports no TensorFlow. The table: docs/DESIGN.md §2.4; what adding a kind takes: §7.3.
"""

import dataclasses

# Which keys query f may attend (modeling.create_attention_mask implements each):
# "dmsa": every real key but f itself (T-TA); "bidirectional": every real key (biLM);
# "causal": keys t <= f; "word_l2r": every real key but f and the later pieces of f's word
# (PLL-word-l2r in one pass). ("full" names a first-pass setting and a reproduction mode.)
ATTENTION_PATTERNS = ("dmsa", "bidirectional", "causal", "word_l2r")
# How a sentence is scored: "one_pass" reads every token's prediction from one forward pass;
# "masked_copies" runs one copy per scored position with that token replaced by [MASK].
SCORING_RULES = ("one_pass", "masked_copies")
# What training predicts: "self" every input token from its context (language autoencoding);
# "mlm" the masked 15%; "next" the next token.
TARGETS = ("self", "mlm", "next")
# How a sentence's pieces are scored (inference.SCORINGS): "piece", each piece given every other
# piece; "word_l2r", given the other words and the earlier pieces of its own word (PLL-word-l2r).
SCORINGS = ("piece", "word_l2r")
# The attention a self-unknown kind (`Kind.self_unknown`) scores with in each scoring mode,
# whatever mask it was trained with: its output i is then exactly the prediction of token i
# from the keys the pattern leaves it (a T-TA trained with DMSA can be scored word by word,
# and the reverse). These are the patterns that hide each query's own key.
_ISOLATED_SCORING_ATTENTION = {"piece": "dmsa", "word_l2r": "word_l2r"}


@dataclasses.dataclass(frozen=True)
class Kind:
  """What one model kind is, as the code needs it.

  Attributes:
    name: the `model_type` string of config.json and the flags.
    display_name: how tables and plots name it.
    attention: one of ATTENTION_PATTERNS.
    input_isolation: keys/values of every layer come from the embedding output and the first
      query holds the [MASK] embedding plus the position only (T-TA); else the usual stream.
    scoring: one of SCORING_RULES.
    prediction_offset: output t predicts the token at t + offset (0: itself, 1: the next).
    target: one of TARGETS.
    scores_sos: the start token can be scored (on request); False when nothing predicts it.
    pretrainable: run_pretraining.py trains it from scratch.
    token_types: the embeddings have segment (token type) embeddings, as Google BERT's.
  """

  name: str
  display_name: str
  attention: str
  input_isolation: bool
  scoring: str
  prediction_offset: int
  target: str
  scores_sos: bool
  pretrainable: bool
  token_types: bool = False

  def __post_init__(self):
    for field, allowed in (
      ("attention", ATTENTION_PATTERNS),
      ("scoring", SCORING_RULES),
      ("target", TARGETS),
    ):
      if getattr(self, field) not in allowed:
        raise ValueError(f"kind {self.name}: {field} must be one of {allowed}")

  @property
  def masked_copies(self):
    """Scores and represents a token by a copy of the sentence where it is [MASK]."""
    return self.scoring == "masked_copies"

  @property
  def self_unknown(self):
    """Output t is exactly a function of the other tokens: input isolation under a pattern that
    hides each query's own key (T-TA). An isolated causal kind sees its own token."""
    return self.input_isolation and self.attention in _ISOLATED_SCORING_ATTENTION.values()

  @property
  def default_scoring(self):
    """The scoring mode of SCORINGS that matches how the kind was trained: "word_l2r" for a kind
    trained with the word_l2r mask, else "piece"."""
    return "word_l2r" if self.attention == "word_l2r" else "piece"

  @property
  def window_context(self):
    """How a piece's context in a sliding window counts (lm/windows.py CONTEXTS): "left" for a
    kind that attends to the left only, whose best window is the one with the longest left
    context; "both" for a bidirectional kind, whose best is the window most centred on it."""
    return "left" if self.attention == "causal" else "both"

  def one_pass_attention(self, scoring):
    """The attention pattern a one-pass kind scores with in `scoring` (one of SCORINGS): for a
    self-unknown kind, the pattern that hides exactly what the mode hides; otherwise the kind's
    own (the uniLM sees only the left, so its piece and word_l2r scores are the same)."""
    if scoring not in SCORINGS:
      raise ValueError(f"scoring {scoring!r} is not one of {SCORINGS}")
    return _ISOLATED_SCORING_ATTENTION[scoring] if self.self_unknown else self.attention


_TTA = Kind(
  name="tta",
  display_name="T-TA",
  attention="dmsa",
  input_isolation=True,
  scoring="one_pass",
  prediction_offset=0,
  target="self",
  scores_sos=True,
  pretrainable=True,
)
KINDS = {
  kind.name: kind
  for kind in (
    _TTA,
    # T-TA trained with the mask of word-level scoring, so that training and scoring see one
    # pattern (PLL-word-l2r in one pass).
    dataclasses.replace(_TTA, name="tta_word", display_name="T-TA-w", attention="word_l2r"),
    Kind(
      name="bilm",
      display_name="biLM",
      attention="bidirectional",
      input_isolation=False,
      scoring="masked_copies",
      prediction_offset=0,
      target="mlm",
      scores_sos=True,
      pretrainable=True,
    ),
    Kind(
      name="unilm",
      display_name="uniLM",
      attention="causal",
      input_isolation=False,
      scoring="one_pass",
      prediction_offset=1,
      target="next",
      scores_sos=False,
      pretrainable=True,
    ),
    Kind(
      name="bert",
      display_name="BERT",
      attention="bidirectional",
      input_isolation=False,
      scoring="masked_copies",
      prediction_offset=0,
      target="mlm",
      scores_sos=True,
      pretrainable=False,
      token_types=True,
    ),
  )
}
MODEL_TYPES = tuple(KINDS)
PRETRAINABLE = tuple(name for name, kind in KINDS.items() if kind.pretrainable)


def get(model_type):
  """The `Kind` named `model_type`; a ValueError naming the known kinds otherwise."""
  try:
    return KINDS[model_type]
  except KeyError:
    raise ValueError(f"model_type {model_type!r} is not one of {MODEL_TYPES}") from None


def display_name(model_type):
  """How tables name `model_type`; unknown names (e.g. "5-gram") pass through."""
  kind = KINDS.get(model_type)
  return kind.display_name if kind else model_type


def scored_span(model_type, lengths, score_sos=False, score_eos=True):
  """The scored positions [first, limits) of sentences of `lengths` tokens: the one statement
  of the rule, for Python ints, NumPy arrays and (in the SavedModel's graph) tensors alike.

  `[BOS] pieces [EOS]`: the start token only on request and only for kinds that can predict it;
  the end token unless score_eos is False.

  Returns:
    (first, limits): first an int; limits like `lengths`.
  """
  first = 0 if score_sos and get(model_type).scores_sos else 1
  return first, (lengths if score_eos else lengths - 1)


def scored_positions(model_type, length, score_sos=False, score_eos=True):
  """Positions whose token is scored, for a sentence of `length` tokens (`scored_span`)."""
  first, limit = scored_span(model_type, length, score_sos, score_eos)
  return list(range(first, limit))

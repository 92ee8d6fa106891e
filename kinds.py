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
# The attention a self-unknown kind scores with in each scoring mode, whatever mask it was
# trained with (a T-TA trained with DMSA can be scored word by word, and the reverse).
_ISOLATED_SCORING_ATTENTION = {"piece": "dmsa", "word_l2r": "word_l2r"}


@dataclasses.dataclass(frozen=True)
class Kind:
  """What one model kind is, as the code needs it: each trait's meaning beside it, its readers in
  docs/DESIGN.md §2.4 (which tables every kind's values)."""

  name: str  # the --model_type and config.json "model_type" value
  display_name: str  # the name tables and reports give it ("T-TA")
  attention: str  # the attention pattern, one of ATTENTION_PATTERNS (modeling's mask)
  # Every layer's keys/values come from the embedding output, and the first query is [MASK]
  # plus the position (T-TA, §2.3).
  input_isolation: bool
  scoring: str  # how a sentence is scored, one of SCORING_RULES
  prediction_offset: int  # output t predicts the token at t + offset (0; 1 for a next-token kind)
  target: str  # the training target, one of TARGETS (input_pipeline.make_targets)
  scores_sos: bool  # the start token can be scored (on request)
  pretrainable: bool  # run_pretraining.py trains it (else it is only loaded, e.g. BERT)
  token_types: bool = False  # Google BERT's segment embeddings

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
    """The scoring mode (of SCORINGS) the kind was trained for."""
    return "word_l2r" if self.attention == "word_l2r" else "piece"

  @property
  def window_context(self):
    """lm/windows.py's CONTEXTS: "left" for a causal kind (its best window has the longest left
    context), else "both" (the window most centred on the piece)."""
    return "left" if self.attention == "causal" else "both"

  def one_pass_attention(self, scoring):
    """The attention a one-pass kind scores with in `scoring`: for a self-unknown kind, the pattern
    that hides what the mode hides; else its own (the uniLM sees only the left anyway)."""
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
  """The scored positions [first, limits) of sentences of `lengths` tokens (int, array, tensor).

  `[BOS] pieces [EOS]`: the start token only on request and for a kind that can predict it; the
  end token unless score_eos is False. The one statement of the rule.
  """
  first = 0 if score_sos and get(model_type).scores_sos else 1
  return first, (lengths if score_eos else lengths - 1)


def scored_positions(model_type, length, score_sos=False, score_eos=True):
  """Positions whose token is scored, for a sentence of `length` tokens (`scored_span`)."""
  first, limit = scored_span(model_type, length, score_sos, score_eos)
  return list(range(first, limit))

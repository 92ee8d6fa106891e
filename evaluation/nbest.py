"""WER/BLEU, pseudo-perplexity, reranking and the λ sweep: the model-free half of evaluation.

Everything here works on plain text and floats: the lists come from evaluation/nbest_io.py's
readers, the LM scores from lm/inference.py as a list of lists of floats aligned with the hypotheses
(kept in a score_cache.ScoreCache so that a λ sweep never recomputes them).

Reranking: score = (1-λ)·s2s + λ·lm, λ tuned on dev over a grid, ties -> smallest λ.
"""

import dataclasses
import math
import statistics

import jiwer
import numpy as np
import sacrebleu

from evaluation import nbest_io

# The first-pass scores each setting combines, with the weights the first pass gave them. The
# parts of "full" sum to the lists' stored beam score up to the files' rounding: `s2s_score` uses
# the stored score (what the beam ranked by), MWER training (finetuning/mwer_data) the parts, so
# that it can learn their weights.
SETTING_WEIGHTS = {"am": nbest_io.AM_WEIGHTS, "full": nbest_io.FULL_WEIGHTS}
SETTINGS = (*SETTING_WEIGHTS, None)
METRICS = ("wer", "bleu")
DEFAULT_GRID = tuple(round(0.05 * i, 2) for i in range(21))


@dataclasses.dataclass
class WerDetails:
  """Corpus WER and its edit counts (jiwer's alignment)."""

  wer: float  # percent
  substitutions: int
  deletions: int
  insertions: int
  hits: int

  @property
  def ref_words(self):
    return self.substitutions + self.deletions + self.hits


@dataclasses.dataclass
class SweepResult:
  """Outcome of `sweep_lambda`.

  Attributes:
    metric: str, "wer" (lower is better) or "bleu" (higher is better).
    curve: list[tuple[float, float]], (λ, metric value) for every grid point, in grid order.
    best_lam: float, the best λ; among equal values the smallest λ, i.e. the one that departs
      least from the first pass.
    best_value: float, the metric at best_lam.
  """

  metric: str
  curve: list
  best_lam: float
  best_value: float


# ---------------------------------------------------------------------------------------------
# Scores, metrics, reranking.


def sample_lists(lists, n, seed):
  """A seeded random sample of n lists (all of them when n >= len), in their original order.

  The same (lists, n, seed) give the same sample in every run and for every LM, so LMs scored
  on it are compared on the same utterances (paired).
  """
  return [lists[i] for i in _sample_indices(len(lists), n, seed)]


def _sample_indices(count, n, seed):
  if n >= count:
    return list(range(count))
  return sorted(np.random.default_rng(seed).choice(count, size=n, replace=False))


def list_selection(max_lists=None, sample_lists=None, seed=0):
  """The lists a run uses, as a reader's `select`: (list count) -> their indices, in order.

  The first `max_lists` (None or 0: all), then a seeded sample of `sample_lists` of those
  (`sample_lists` above: the same sample as cutting and sampling the lists read whole).
  """

  def select(count):
    count = min(count, max_lists) if max_lists else count
    return _sample_indices(count, sample_lists, seed) if sample_lists else list(range(count))

  return select


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
    missing = [name for name in nbest_io.AM_WEIGHTS if name not in hyp.scores]
    if missing:
      raise ValueError(
        f"setting 'am' needs scores {list(nbest_io.AM_WEIGHTS)}; hypothesis "
        f"{hyp.text!r} has {sorted(hyp.scores)}"
      )
    return sum(weight * hyp.scores[name] for name, weight in nbest_io.AM_WEIGHTS.items())
  if setting == "full":
    if "score" not in hyp.scores:
      raise ValueError(
        f"setting 'full' needs score 'score'; hypothesis {hyp.text!r} has {sorted(hyp.scores)}"
      )
    return hyp.scores["score"]
  raise ValueError(f"unknown setting {setting!r}; expected one of {SETTINGS}")


def wer_details(refs, hyps):
  """Corpus WER with jiwer (case-sensitive, whitespace tokens; callers normalise text).

  Args:
    refs: list[str], references.
    hyps: list[str], hypotheses aligned with refs (may be empty strings).

  Returns:
    WerDetails, with wer in percent = 100 * (S + D + I) / (S + D + H).
  """
  if len(refs) != len(hyps) or not refs:
    raise ValueError(
      f"need equally many refs and hyps (at least one), got {len(refs)} and {len(hyps)}"
    )
  out = jiwer.process_words(list(refs), list(hyps))
  return WerDetails(
    wer=100.0 * out.wer,
    substitutions=out.substitutions,
    deletions=out.deletions,
    insertions=out.insertions,
    hits=out.hits,
  )


def corpus_wer(refs, hyps):
  """Corpus WER in percent (see `wer_details`)."""
  return wer_details(refs, hyps).wer


def corpus_bleu(refs_list, hyps):
  """Corpus BLEU with sacrebleu's defaults (13a tokenisation, mixed case, exp smoothing).

  Args:
    refs_list: list[list[str]], the references of each segment (as in NBestList.refs); every
      segment needs the same number of references.
    hyps: list[str], one hypothesis per segment.

  Returns:
    float, BLEU in [0, 100].
  """
  if len(refs_list) != len(hyps) or not hyps:
    raise ValueError(
      f"need equally many reference sets and hyps (at least one), got "
      f"{len(refs_list)} and {len(hyps)}"
    )
  n_refs = {len(refs) for refs in refs_list}
  if len(n_refs) != 1 or 0 in n_refs:
    raise ValueError(
      f"every segment needs the same, non-zero number of references; found counts {sorted(n_refs)}"
    )
  # sacrebleu wants one stream per reference index: [[ref_a of seg 1, ...], [ref_b ...]].
  streams = [list(stream) for stream in zip(*refs_list)]
  return sacrebleu.corpus_bleu(list(hyps), streams).score


def evaluate(lists, choice, metric):
  """Scores one choice of hypothesis per list.

  Args:
    lists: list[NBestList].
    choice: list[int], index into lists[i].hyps.
    metric: "wer" (needs exactly one reference per list) or "bleu".

  Returns:
    float, WER or BLEU in percent.
  """
  if len(choice) != len(lists):
    raise ValueError(f"{len(choice)} choices for {len(lists)} lists")
  hyps = [nbest.hyps[i].text for nbest, i in zip(lists, choice)]
  if metric == "wer":
    for nbest in lists:
      if len(nbest.refs) != 1:
        raise ValueError(f"WER needs one reference, list {nbest.key!r} has {len(nbest.refs)}")
    return corpus_wer([nbest.refs[0] for nbest in lists], hyps)
  if metric == "bleu":
    return corpus_bleu([nbest.refs for nbest in lists], hyps)
  raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")


def _argmax(values):
  """Index of the largest value; the first one on ties, i.e. the better first-pass rank."""
  best = 0
  for i in range(1, len(values)):
    if values[i] > values[best]:
      best = i
  return best


def _s2s_table(lists, setting):
  return [[s2s_score(hyp, setting) for hyp in nbest.hyps] for nbest in lists]


def _check_lm_scores(lists, lm_scores):
  if len(lm_scores) != len(lists):
    raise ValueError(f"lm_scores has {len(lm_scores)} entries for {len(lists)} lists")
  for nbest, scores in zip(lists, lm_scores):
    if len(scores) != len(nbest.hyps):
      raise ValueError(
        f"list {nbest.key!r}: {len(scores)} LM scores for {len(nbest.hyps)} hypotheses"
      )
    for score in scores:
      # NaN would make every comparison false and silently pick rank 1.
      if not math.isfinite(score):
        raise ValueError(f"list {nbest.key!r}: LM score {score!r} is not finite")


def _choose(s2s, lm_scores, lam):
  if lm_scores is None:
    return [_argmax(row) for row in s2s]
  return [
    _argmax([(1.0 - lam) * s + lam * lm for s, lm in zip(s_row, lm_row)])
    for s_row, lm_row in zip(s2s, lm_scores)
  ]


def rerank(lists, lm_scores, lam, setting="full"):
  """Picks the hypothesis with the best (1-λ)·s2s + λ·lm in each list.

  λ=0 returns exactly the first-pass choice (argmax of the s2s score, ties -> better rank).
  The ESPnet lists are sorted by their full score, so λ=0 with "full" always picks rank 1.

  Args:
    lists: list[NBestList].
    lm_scores: list[list[float]] aligned with lists[i].hyps, or None for the first pass
      (then lam must be 0).
    lam: float in [0, 1].
    setting: see `s2s_score`.

  Returns:
    list[int], the chosen index into lists[i].hyps.
  """
  if not 0.0 <= lam <= 1.0:
    raise ValueError(f"λ must lie in [0, 1], got {lam}")
  if lm_scores is None and lam != 0.0:
    raise ValueError("lm_scores=None only makes sense with λ=0 (the first pass)")
  if lm_scores is not None:
    _check_lm_scores(lists, lm_scores)
  return _choose(_s2s_table(lists, setting), lm_scores, lam)


def sweep_lambda(dev_lists, dev_lm, metric, setting="full", grid=DEFAULT_GRID):
  """Evaluates reranking at every λ of a grid and picks the best.

  Args:
    dev_lists: list[NBestList].
    dev_lm: list[list[float]], LM scores aligned with the hypotheses.
    metric: "wer" (minimised) or "bleu" (maximised).
    setting: see `s2s_score`.
    grid: sequence of float in [0, 1]; default 0, 0.05, ..., 1.

  Returns:
    SweepResult; ties go to the smallest λ (closest to the first pass).
  """
  if metric not in METRICS:
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
  if not grid:
    raise ValueError("empty λ grid")
  _check_lm_scores(dev_lists, dev_lm)
  s2s = _s2s_table(dev_lists, setting)
  curve = []
  for lam in grid:
    if not 0.0 <= lam <= 1.0:
      raise ValueError(f"λ must lie in [0, 1], got {lam}")
    curve.append((lam, evaluate(dev_lists, _choose(s2s, dev_lm, lam), metric)))
  sign = 1.0 if metric == "wer" else -1.0
  best_lam, best_value = min(curve, key=lambda point: (sign * point[1], point[0]))
  return SweepResult(metric=metric, curve=curve, best_lam=best_lam, best_value=best_value)


def _sentence_errors(refs, hyps):
  """Per-sentence S + D + I from one jiwer alignment of all pairs."""
  out = jiwer.process_words(refs, hyps)
  errors = []
  for chunks in out.alignments:
    count = 0
    for chunk in chunks:
      if chunk.type in ("substitute", "delete"):
        count += chunk.ref_end_idx - chunk.ref_start_idx
      elif chunk.type == "insert":
        count += chunk.hyp_end_idx - chunk.hyp_start_idx
    errors.append(count)
  return errors


def utterance_errors(lists, choice):
  """Per-utterance word errors of one choice, for paired significance tests.

  Args:
    lists: list[NBestList], each with one reference.
    choice: list[int], index into lists[i].hyps.

  Returns:
    tuple (list[int], list[int]): S + D + I of each chosen hypothesis, and the words of each
    reference; their sums give `evaluate(lists, choice, "wer")`.
  """
  refs = [nbest.refs[0] for nbest in lists]
  hyps = [nbest.hyps[i].text for nbest, i in zip(lists, choice)]
  return _sentence_errors(refs, hyps), [len(ref.split()) for ref in refs]


def hypothesis_errors(lists):
  """Word errors (S + D + I, jiwer) of every hypothesis against its list's one reference.

  Args:
    lists: list[NBestList], each with one reference.

  Returns:
    list[list[int]], aligned with lists[i].hyps.
  """
  pairs = [(nbest.refs[0], hyp.text) for nbest in lists for hyp in nbest.hyps]
  if not pairs:
    return [[] for _ in lists]
  errors = iter(_sentence_errors([r for r, _ in pairs], [h for _, h in pairs]))
  return [[next(errors) for _ in nbest.hyps] for nbest in lists]


def oracle(lists, metric="wer"):
  """The best choice per list given the references.

  For WER the choice minimises each utterance's edit errors, which gives the exact corpus
  oracle (corpus WER is total errors / total reference words). For BLEU, which does not add
  over sentences, it maximises sentence BLEU (sacrebleu, effective order): the usual
  approximation of the oracle. Ties go to the better first-pass rank.

  Args:
    lists: list[NBestList].
    metric: "wer" or "bleu".

  Returns:
    tuple (float, list[int]): the corpus metric of the oracle choice, and the choice.
  """
  if metric == "wer":
    choice = [_argmax([-e for e in errors]) for errors in hypothesis_errors(lists)]
  elif metric == "bleu":
    bleu = sacrebleu.metrics.BLEU(effective_order=True)
    choice = [
      _argmax([bleu.sentence_score(hyp.text, nbest.refs).score for hyp in nbest.hyps])
      for nbest in lists
    ]
  else:
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
  return evaluate(lists, choice, metric), choice


# ---------------------------------------------------------------------------------------------
# Pseudo-perplexity (paper Table 7).


def pseudo_perplexity(token_logprob_sums, token_counts):
  """Per-sentence (pseudo-)perplexity exp(-sum / count).

  Args:
    token_logprob_sums: list[float], natural-log probability summed over each sentence's scored
      tokens (PLL for T-TA/biLM, the chain-rule log-likelihood for uniLM).
    token_counts: list[int], the number of scored tokens per sentence (> 0).

  Returns:
    list[float]; inf where the exponent overflows.
  """
  if len(token_logprob_sums) != len(token_counts):
    raise ValueError(f"{len(token_logprob_sums)} sums for {len(token_counts)} counts")
  out = []
  for i, (total, count) in enumerate(zip(token_logprob_sums, token_counts)):
    if count <= 0:
      raise ValueError(f"sentence {i}: token count must be positive, got {count}")
    if not math.isfinite(total):
      raise ValueError(f"sentence {i}: log-prob sum {total!r} is not finite")
    try:
      out.append(math.exp(-total / count))
    except OverflowError:
      out.append(math.inf)
  return out


def pppl_summary(token_logprob_sums, token_counts):
  """Mean and median of the per-sentence (pseudo-)perplexities, as in the paper's Table 7.

  Returns:
    dict with "mean" (PPLa), "median" (PPLm), and "corpus" = exp(-Σsum / Σcount), the
    token-weighted value used by Salazar et al. (2020).
  """
  values = pseudo_perplexity(token_logprob_sums, token_counts)
  if not values:
    raise ValueError("no sentences")
  exponent = -sum(token_logprob_sums) / sum(token_counts)
  corpus = math.exp(exponent) if exponent < 709.0 else math.inf
  return {"mean": statistics.fmean(values), "median": statistics.median(values), "corpus": corpus}

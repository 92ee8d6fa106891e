"""WER, BLEU, the oracle and pseudo-perplexity: metrics of chosen hypotheses (jiwer, sacrebleu)."""

import dataclasses
import math
import statistics

import jiwer
import sacrebleu

METRICS = ("wer", "bleu")


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


def wer_details(refs, hyps):
  """WerDetails of `hyps` against `refs` (list[str] each; a hyp may be empty), wer in percent =
  100 (S + D + I) / (S + D + H). jiwer: case-sensitive, whitespace tokens; callers normalise."""
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
  """BLEU in [0, 100], sacrebleu's defaults (13a tokenisation, mixed case, exp smoothing);
  `refs_list`: each segment's references (NBestList.refs), as many for every segment."""
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
  """WER or BLEU (percent) of lists[i].hyps[choice[i]]; WER needs one reference per list."""
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


def sentence_errors(refs, hyps):
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
  """(S + D + I of each chosen hypothesis, words of each reference), list[int] each, for paired
  significance tests; their sums give `evaluate(lists, choice, "wer")`."""
  refs = [nbest.refs[0] for nbest in lists]
  hyps = [nbest.hyps[i].text for nbest, i in zip(lists, choice)]
  return sentence_errors(refs, hyps), [len(ref.split()) for ref in refs]


def hypothesis_errors(lists):
  """list[list[int]]: S + D + I of every hypothesis against its list's one reference."""
  pairs = [(nbest.refs[0], hyp.text) for nbest in lists for hyp in nbest.hyps]
  if not pairs:
    return [[] for _ in lists]
  errors = iter(sentence_errors([r for r, _ in pairs], [h for _, h in pairs]))
  return [[next(errors) for _ in nbest.hyps] for nbest in lists]


def oracle(lists, metric="wer"):
  """(corpus metric, choice) of the best hypothesis per list, ties to the better first-pass
  rank: fewest errors is the exact WER oracle; BLEU does not add over sentences, so the best
  sentence BLEU (effective order) is the usual approximation."""
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


def pseudo_perplexity(token_logprob_sums, token_counts):
  """Per-sentence (pseudo-)perplexity exp(-sum / count), inf on overflow; sums in nats over
  each sentence's scored tokens (PLL for T-TA/biLM, chain rule for uniLM), counts > 0."""
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
  """{"mean" (PPLa), "median" (PPLm) of the per-sentence values (the paper's Table 7), "corpus":
  exp(-Σsum / Σcount), token-weighted as in Salazar et al. (2020)}."""
  values = pseudo_perplexity(token_logprob_sums, token_counts)
  if not values:
    raise ValueError("no sentences")
  exponent = -sum(token_logprob_sums) / sum(token_counts)
  corpus = math.exp(exponent) if exponent < 709.0 else math.inf
  return {"mean": statistics.fmean(values), "median": statistics.median(values), "corpus": corpus}


def wer_report(lists, choice, cer=False):
  """{wer (percent), substitutions, deletions, insertions, reference_words[, cer]} of `choice`."""
  refs = [lst.refs[0] for lst in lists]
  hyps = [lst.hyps[c].text for lst, c in zip(lists, choice)]
  details = wer_details(refs, hyps)
  report = {
    "wer": details.wer,
    "substitutions": details.substitutions,
    "deletions": details.deletions,
    "insertions": details.insertions,
    "reference_words": details.ref_words,
  }
  if cer:
    report["cer"] = 100.0 * jiwer.cer(refs, hyps)
  return report


def mt_report(lists, choice):
  """{bleu, bleu_signature, chrf, chrf_signature}: sacrebleu, every reference of each segment."""
  counts = {len(lst.refs) for lst in lists}
  if len(counts) != 1:
    raise ValueError(f"every segment needs as many references; found counts {sorted(counts)}")
  hyps = [lst.hyps[c].text for lst, c in zip(lists, choice)]
  streams = [list(s) for s in zip(*[lst.refs for lst in lists])]
  bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
  return {
    "bleu": bleu.corpus_score(hyps, streams).score,
    "bleu_signature": str(bleu.get_signature()),
    "chrf": chrf.corpus_score(hyps, streams).score,
    "chrf_signature": str(chrf.get_signature()),
  }

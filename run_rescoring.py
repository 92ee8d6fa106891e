"""N-best reranking with any LM kind (paper Tables 1, 2 and 7).

score = (1-λ)·s2s + λ·lm, with λ chosen on a dev set over 0, 0.05, ..., 1 and
applied to its test set. Reports WER (ASR) or BLEU (NMT) of the first pass,
after reranking, and of the oracle, the per-λ dev curve, and the
(pseudo-)perplexity of each LM on the references (mean and median over
sentences, paper Table 7).

LM scores are cached per LM (nbest.ScoreCache under --output_dir/cache), so a
re-run, a new setting or an interrupted run never recomputes a sentence.

Examples:
  # LibriSpeech ESPnet2 30-best, both first-pass settings:
  python run_rescoring.py --lm=tta=runs/tta,kenlm:runs/lm.bin \
      --task=asr --output_dir=results/asr
  # WMT21 de-en candidates, LM-only selection:
  python run_rescoring.py --lm=runs/tta --task=nmt --output_dir=results/nmt
  # Your own lists (mlm-scoring JSON or TSV):
  python run_rescoring.py --lm=runs/tta --task=asr --format=json \
      --dev_file=dev.json --test_file=test.json --settings=full
"""

import json
import os
import time

from absl import app
from absl import flags
from absl import logging

import inference
import io_utils
import nbest

FLAGS = flags.FLAGS

flags.DEFINE_list(
  "lm", None, "LMs to rerank with: model dirs, kenlm:PATH, or bert:DIR; NAME=SPEC names the row."
)
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
flags.DEFINE_list(
  "settings",
  ["am", "full"],
  "ASR first-pass scores: am = "
  "0.6 decoder + 0.4 ctc (no LM); full = the beam score with "
  "the Transformer LM fused in (the paper's Seq2SeqASR).",
)
flags.DEFINE_enum(
  "format", "espnet", ["espnet", "json", "tsv"], "N-best format for --dev_file/--test_file."
)
flags.DEFINE_string("dev_file", None, "Dev N-best file (json/tsv formats).")
flags.DEFINE_string("test_file", None, "Test N-best file (json/tsv formats).")
flags.DEFINE_enum(
  "sentence_score",
  "sum",
  ["sum", "mean"],
  "LM sentence score: sum of token log-probs, or their mean.",
)
flags.DEFINE_bool("score_eos", True, "Score the end-of-sentence token.")
flags.DEFINE_bool("score_sos", False, "Score the start token (tta/bilm).")
io_utils.define_data_dir_flag()
flags.DEFINE_string(
  "output_dir", None, "Results (rescoring_results.json, .md) and the score cache."
)
flags.DEFINE_integer("max_lists", None, "Use only the first N lists of each set (quick runs).")
flags.DEFINE_integer(
  "chunk_size", 2000, "Sentences scored between cache writes and progress lines."
)
flags.DEFINE_integer("token_budget", 16384, "Tokens per forward pass.")

_GRID = nbest.DEFAULT_GRID


def cached_scores(lm, lm_id, texts, cache):
  """{text: (sum of log-probs, scored tokens, truncated)} for every text.

  Scores only texts missing from the cache, in chunks; each chunk is stored
  before the next begins, so an interrupted run resumes where it stopped.
  """
  texts = sorted(set(texts))
  done = cache.get_many(lm_id, texts) if cache is not None else {}
  todo = [t for t in texts if t not in done]
  logging.info(
    "%s: %d distinct sentences, %d cached, %d to score", lm_id, len(texts), len(done), len(todo)
  )
  start = time.time()
  for begin in range(0, len(todo), FLAGS.chunk_size):
    chunk = todo[begin : begin + FLAGS.chunk_size]
    results = {t: [r.total, r.num_tokens, r.truncated] for t, r in zip(chunk, lm.score(chunk))}
    if cache is not None:
      cache.put_many(lm_id, results)
    done.update(results)
    finished = begin + len(chunk)
    rate = finished / max(time.time() - start, 1e-9)
    logging.info(
      "%s: scored %d/%d sentences (%.1f/s, ETA %.0f s)",
      lm_id,
      finished,
      len(todo),
      rate,
      (len(todo) - finished) / rate,
    )
  return done


def lm_table(lists, scores):
  """LM sentence scores aligned with each list's hypotheses."""

  def value(text):
    total, count, _ = scores[text]
    return total / max(count, 1) if FLAGS.sentence_score == "mean" else total

  return [[value(h.text) for h in lst.hyps] for lst in lists]


def perplexity(lists, scores):
  """(Pseudo-)perplexity of the LM on the references of `lists`."""
  refs = [r for lst in lists for r in lst.refs]
  return nbest.pppl_summary([scores[r][0] for r in refs], [scores[r][1] for r in refs])


def read_sets():
  """{set name: list of NBestList} and the (dev, test, settings) to run."""
  if FLAGS.task == "nmt":
    return {"wmt21": nbest.read_wmt_candidates(FLAGS.data_dir)}, [(None, "wmt21", [None])]
  if FLAGS.format == "espnet":
    pairs = [p.split(":") for p in FLAGS.pairs]
    names = sorted({n for p in pairs for n in p})
    sets = {n: nbest.read_espnet_nbest(n, FLAGS.data_dir) for n in names}
  else:
    reader = {"json": nbest.read_json_nbest, "tsv": nbest.read_tsv_nbest}
    pairs = [("dev", "test")]
    sets = {
      "dev": reader[FLAGS.format](FLAGS.dev_file),
      "test": reader[FLAGS.format](FLAGS.test_file),
    }
  return sets, [(dev, test, FLAGS.settings) for dev, test in pairs]


def rerank_pair(dev, test, lm_dev, lm_test, setting, metric):
  """Tunes λ on dev (if any), applies it to test; returns a result dict."""
  result = {
    "setting": setting,
    "first_pass": nbest.evaluate(test, nbest.rerank(test, None, 0.0, setting), metric),
    "oracle": nbest.oracle(test, metric)[0],
  }
  if dev is None:  # no first-pass scores: LM-only selection
    lam, curve = 1.0, None
  else:
    sweep = nbest.sweep_lambda(dev, lm_dev, metric, setting, _GRID)
    lam, curve = sweep.best_lam, sweep.curve
    result["dev_first_pass"] = sweep.curve[0][1]
    result["dev_best"] = sweep.best_value
  result["lambda"] = lam
  result["dev_curve"] = curve
  result["reranked"] = nbest.evaluate(test, nbest.rerank(test, lm_test, lam, setting), metric)
  return result


def markdown(rows, metric):
  lines = [
    "| LM | set | setting | λ (dev) | first pass | reranked | oracle | PPPL mean / median |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for row in rows:
    for r in row["results"]:
      p = row["perplexity"][r["test"]]
      lines.append(
        f"| {row['lm']} | {r['test']} | {r['setting'] or 'LM only'} | {r['lambda']:.2f} | "
        f"{r['first_pass']:.2f} | {r['reranked']:.2f} | {r['oracle']:.2f} | "
        f"{p['mean']:.1f} / {p['median']:.1f} |"
      )
  better = "lower is better" if metric == "wer" else "higher is better"
  table = "\n".join(lines)
  return f"{metric.upper()} ({better})\n\n{table}\n"


def main(argv):
  del argv
  metric = "bleu" if FLAGS.task == "nmt" else "wer"
  sets, runs = read_sets()
  if FLAGS.max_lists:
    sets = {k: v[: FLAGS.max_lists] for k, v in sets.items()}
  for name, lists in sets.items():
    logging.info("%s: %d lists, %d hypotheses", name, len(lists), sum(len(l.hyps) for l in lists))
  cache = (
    nbest.ScoreCache(os.path.join(FLAGS.output_dir, "cache", "lm_scores.jsonl"))
    if FLAGS.output_dir
    else None
  )
  texts = sorted(
    {t for lists in sets.values() for l in lists for t in [h.text for h in l.hyps] + l.refs}
  )
  rows = []
  for spec in FLAGS.lm:
    name, _, spec = spec.rpartition("=")
    lm = inference.load_lm(
      spec, score_eos=FLAGS.score_eos, score_sos=FLAGS.score_sos, token_budget=FLAGS.token_budget
    )
    lm_id = json.dumps(inference.describe(lm), sort_keys=True)
    start = time.time()
    scores = cached_scores(lm, lm_id, texts, cache)
    row = {
      "lm": name or os.path.basename(spec.rstrip("/")),
      "lm_id": json.loads(lm_id),
      "scoring_seconds": time.time() - start,
      "truncated": sum(scores[t][2] for t in texts),
      "results": [],
      "perplexity": {n: perplexity(l, scores) for n, l in sets.items()},
    }
    for dev, test, settings in runs:
      for setting in settings:
        result = rerank_pair(
          sets.get(dev),
          sets[test],
          lm_table(sets[dev], scores) if dev else None,
          lm_table(sets[test], scores),
          setting,
          metric,
        )
        result.update(dev=dev, test=test)
        logging.info(
          "%s %s %s: λ=%.2f %s %.2f -> %.2f (oracle %.2f)",
          row["lm"],
          test,
          setting,
          result["lambda"],
          metric,
          result["first_pass"],
          result["reranked"],
          result["oracle"],
        )
        row["results"].append(result)
    rows.append(row)
  table = markdown(rows, metric)
  print(table)
  if FLAGS.output_dir:
    io_utils.write_atomically(
      os.path.join(FLAGS.output_dir, "rescoring_results.json"), json.dumps(rows, indent=2)
    )
    io_utils.write_atomically(os.path.join(FLAGS.output_dir, "rescoring_results.md"), table)


if __name__ == "__main__":
  flags.mark_flag_as_required("lm")
  app.run(main)

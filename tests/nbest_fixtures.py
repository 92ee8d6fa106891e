"""Writes N-best lists (types.NBestList with refs and scores decoder/ctc/lm/score) in each
toolkit's format, by hand from the format's rules, independently of nbest/formats/.

Each `write_<format>(lists, root)` writes into directory `root` and returns (path, refs_path,
options) for `formats.read_nbest`, and what the format keeps: `EXPECTED[fmt]` maps each
score name read back to (source score name, factor applied by the converter's reading), and says
whether the keys and references survive. Used by tests/test_nbest_formats.py on a few real lists
of the shared LibriSpeech data (no data is committed) and on toy lists.
"""

import json
import math
import os
import random

from nbest import types

LN2 = math.log(2)

# fmt -> (scores read back: {name: source name}, keys kept, references kept)
EXPECTED = {
  "kaldi": ({"decoder": "decoder", "ctc": "ctc", "lm": "lm", "score": "score"}, True, True),
  "espnet2": ({"score": "score"}, True, True),
  "nemo": ({"score": "score"}, True, True),
  "fairseq": ({"score": "score", "logprob": "decoder"}, False, True),
  "moses": ({"decoder": "decoder", "ctc": "ctc", "lm": "lm", "score": "score"}, False, True),
  "espnet": ({"decoder": "decoder", "ctc": "ctc", "lm": "lm", "score": "score"}, True, True),
  "json": ({"decoder": "decoder", "ctc": "ctc", "lm": "lm", "score": "score"}, True, True),
  "tsv": ({"decoder": "decoder", "ctc": "ctc", "lm": "lm", "score": "score"}, True, True),
  "sockeye": ({"score": "score", "factor1_score": "decoder"}, False, True),
}
NAMES = ("decoder", "ctc", "lm", "score")


def toy_lists(texts):
  """Lists of `texts` (one row per list, its first text also the reference), with the shared
  data's score names: hypothesis j of list i has decoder -1.5j - i, ctc -0.25j, lm -10 - j and
  score -2j - 0.125i, so every score differs between hypotheses and between lists."""
  return [
    types.NBestList(
      key=f"spk-utt{i}",
      refs=[row[0]],
      hyps=[
        types.Hypothesis(
          t,
          {
            "decoder": -1.5 * j - i,
            "ctc": -0.25 * j,
            "lm": -10.0 - j,
            "score": -2.0 * j - 0.125 * i,
          },
        )
        for j, t in enumerate(row)
      ],
    )
    for i, row in enumerate(texts)
  ]


def _write(path, lines):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))
  return path


def _kaldi_refs(lists, root):
  return _write(os.path.join(root, "ref_text"), [f"{n.key} {n.refs[0]}" for n in lists])


def write_kaldi(lists, root):
  """int2sym'd nbest-to-linear transcriptions `<utt>-<n> words` and one cost archive per score,
  cost = -score (steps/rnnlmrescore.sh's archives)."""
  words, costs = [], {name: [] for name in NAMES}
  for n in lists:
    for rank, hyp in enumerate(n.hyps, 1):
      words.append(f"{n.key}-{rank} {hyp.text}")
      for name in NAMES:
        costs[name].append(f"{n.key}-{rank} {-hyp.scores[name]!r}")
  text = _write(os.path.join(root, "words_text"), words)
  paths = {name: _write(os.path.join(root, f"lmwt.{name}"), c) for name, c in costs.items()}
  return text, _kaldi_refs(lists, root), {"costs": paths}


def write_kaldi_dir(lists, root):
  """`write_kaldi` as the directory `run_rescoring.py --format=kaldi` reads alone:
  `<root>/nbest/text` and `<root>/nbest/<name>.cost`; returns (that directory, refs path)."""
  text, refs, options = write_kaldi(lists, root)
  directory = os.path.join(root, "nbest")
  os.makedirs(directory)
  os.rename(text, os.path.join(directory, "text"))
  for name, path in options["costs"].items():
    os.rename(path, os.path.join(directory, f"{name}.cost"))
  return directory, refs


def write_espnet2(lists, root):
  """A decode dir of two jobs, logdir/output.<J>/<n>best_recog/{text,score,token,token_int},
  scores as ESPnet's str() of a tensor, and data/<set>/text."""
  decode = os.path.join(root, "decode_test")
  for job, part in enumerate((lists[::2], lists[1::2]), 1):
    files = {}
    for n in part:
      for rank, hyp in enumerate(n.hyps, 1):
        rank_dir = os.path.join(decode, "logdir", f"output.{job}", f"{rank}best_recog")
        files.setdefault(os.path.join(rank_dir, "text"), []).append(f"{n.key} {hyp.text}")
        score = f"{n.key} tensor({hyp.scores['score']!r})"
        files.setdefault(os.path.join(rank_dir, "score"), []).append(score)
        tokens = " ".join(hyp.text.replace(" ", "_")) or "<space>"
        files.setdefault(os.path.join(rank_dir, "token"), []).append(f"{n.key} {tokens}")
        ints = " ".join(str(len(t)) for t in tokens.split())
        files.setdefault(os.path.join(rank_dir, "token_int"), []).append(f"{n.key} {ints}")
    for path, file_lines in files.items():
      _write(path, file_lines)
  return (
    decode,
    _write(os.path.join(root, "data", "text"), [f"{n.key} {n.refs[0]}" for n in lists]),
    {},
  )


def write_nemo(lists, root):
  """eval_beamsearch_ngram's `text<TAB>score` rows, beam size rows per utterance in manifest
  order, in a file named with that width as NeMo names it, and the manifest (JSON lines)."""
  (width,) = {len(n.hyps) for n in lists}  # NeMo's file only splits into full beams
  rows = [f"{hyp.text}\t{hyp.scores['score']!r}" for n in lists for hyp in n.hyps]
  manifest = [
    json.dumps(
      {"audio_filepath": f"/data/LibriSpeech/{n.key}.flac", "duration": 1.0, "text": n.refs[0]}
    )
    for n in lists
  ]
  return (
    _write(os.path.join(root, f"preds_out_width{width}_alpha0.5_beta1.0.tsv"), rows),
    _write(os.path.join(root, "manifest.json"), manifest),
    {},
  )


def write_fairseq(lists, root):
  """fairseq-generate's stream: log lines, then per sample S-, T-, and per hypothesis H-, D-,
  P- lines, scores in base 2; samples in a shuffled order, as batches by length print them."""
  lines = ["2024-01-01 00:00:00 | INFO | fairseq_cli.generate | loading model(s)"]
  order = list(range(len(lists)))
  random.Random(0).shuffle(order)
  for i in order:
    n = lists[i]
    lines += [f"S-{i}\tsource of {n.key}", f"T-{i}\t{n.refs[0]}"]
    for hyp in n.hyps:
      score = hyp.scores["score"] / LN2
      lines += [f"H-{i}\t{score!r}\t{hyp.text}", f"D-{i}\t{score!r}\t{hyp.text}"]
      lines.append(f"P-{i}\t{hyp.scores['decoder'] / LN2!r}")
  lines.append("Generate test with beam=30: BLEU4 = 0.00, 0.0/0.0/0.0/0.0")
  refs = _write(os.path.join(root, "refs.txt"), [n.refs[0] for n in lists])
  return _write(os.path.join(root, "generate-test.txt"), lines), refs, {"nbest": len(lists[0].hyps)}


def write_moses(lists, root):
  """Moses n-best lines `id ||| text ||| Name= v ... ||| total`, and line-aligned references."""
  lines = []
  for i, n in enumerate(lists):
    for hyp in n.hyps:
      feats = " ".join(f"{name}= {hyp.scores[name]!r}" for name in NAMES[:3])
      lines.append(f"{i} ||| {hyp.text} ||| {feats} ||| {hyp.scores['score']!r}")
  refs = _write(os.path.join(root, "refs.txt"), [n.refs[0] for n in lists])
  return _write(os.path.join(root, "nbest.txt"), lines), refs, {"nbest": len(lists[0].hyps)}


def write_espnet(lists, root):
  """The shared data's layout, unpacked: raw_hypotheses/<n>best_recog/{text,score,scores} and
  references/ref_wer.trn with the speaker in front of the id, as sclite writes it."""
  files = {}
  for n in lists:
    for rank, hyp in enumerate(n.hyps, 1):
      prefix = os.path.join(root, "set", "raw_hypotheses", f"{rank}best_recog")
      files.setdefault(os.path.join(prefix, "text"), []).append(f"{n.key} {hyp.text}")
      parts = {name: f"tensor({hyp.scores[name]!r})" for name in NAMES[:3]}
      files.setdefault(os.path.join(prefix, "scores"), []).append(f"{n.key} {json.dumps(parts)}")
      score = f"{n.key} tensor({hyp.scores['score']!r})"
      files.setdefault(os.path.join(prefix, "score"), []).append(score)
  trn = [f"{n.refs[0]}\t({n.key.split('-')[0]}-{n.key})" for n in lists]
  files[os.path.join(root, "set", "references", "ref_wer.trn")] = trn
  for path, file_lines in files.items():
    _write(path, file_lines)
  return os.path.join(root, "set"), None, {}


def write_json(lists, root):
  """mlm-scoring's `{utt: {"ref": ..., "hyp_<n>": {"text": ..., "score": ..., ...}}}`."""
  data = {
    n.key: {
      "ref": n.refs[0],
      **{f"hyp_{r}": {"text": h.text, **h.scores} for r, h in enumerate(n.hyps, 1)},
    }
    for n in lists
  }
  path = os.path.join(root, "nbest.json")
  _write(path, [json.dumps(data, indent=2)])
  return path, None, {}


def write_tsv(lists, root):
  """The TSV of tsv.read_tsv_nbest: header, ref rows, hypothesis rows."""
  lines = ["#key\trank\t" + "\t".join(NAMES) + "\ttext"]
  for n in lists:
    lines.append(f"{n.key}\tref\t{n.refs[0]}")
    for rank, h in enumerate(n.hyps, 1):
      lines.append("\t".join([n.key, str(rank), *(repr(h.scores[s]) for s in NAMES), h.text]))
  return _write(os.path.join(root, "nbest.tsv"), lines), None, {}


def write_sockeye(lists, root):
  """sockeye-translate --nbest-size N --output-type json of a model with one target factor: a
  JSON object a line, keys sorted; "scores" (one [score, factor score] per translation) and
  "score" / "factor1_score" of the 1-best are negative log-probs (the scores negated), and the
  factor's tokens, a tag per word; and line-aligned references."""
  lines = []
  for i, n in enumerate(lists):
    costs = [[-h.scores["score"], -h.scores["decoder"]] for h in n.hyps]
    factors = [{"factor1": " ".join("O" for _ in h.text.split())} for h in n.hyps]
    line = {
      "sentence_id": i + 1,
      "translation": n.hyps[0].text,
      "score": costs[0][0],
      "factor1": factors[0]["factor1"],
      "factor1_score": costs[0][1],
      "translations": [h.text for h in n.hyps],
      "scores": costs,
      "translations_factors": factors,
    }
    lines.append(json.dumps(line, sort_keys=True))
  refs = _write(os.path.join(root, "refs.txt"), [n.refs[0] for n in lists])
  return _write(os.path.join(root, "nbest.jsonl"), lines), refs, {}


WRITERS = {
  "kaldi": write_kaldi,
  "espnet2": write_espnet2,
  "nemo": write_nemo,
  "fairseq": write_fairseq,
  "moses": write_moses,
  "espnet": write_espnet,
  "json": write_json,
  "tsv": write_tsv,
  "sockeye": write_sockeye,
}

"""Scores sentences with any LM: one sentence per line in, one JSON record per line out.

Like KenLM's `query` or mlm-scoring's `mlm score`, for every LM kind tta reads (a model dir,
`kenlm:PATH`, `bert:DIR` for a Google BERT release, `hf:DIR` for a Hugging Face BERT):

  echo "the cat sat on the mat" | python score.py --model_dir=runs/tta
  python score.py --model_dir=runs/tta --input_file=sents.txt --output_file=scores.jsonl
  python score.py --model_dir=kenlm:lm.bin --format=tsv < sents.txt      # score<TAB>sentence

A JSON record per input line, in input order:
  {"line": 0, "text": ..., "score": sum of token log-probs, "mean": per token,
   "num_tokens": n, "perplexity": exp(-mean in nats), "num_oov": n, "tokens": [...],
   "token_logprobs": [...], "word_logprobs": [...], "truncated": bool, ...}
  (+ "windows": k for a sentence longer than the model takes, scored in k sliding windows
  (--long_inputs=window, the default; each piece once, in the window where it has the most
  context); + "vector": [...] with --vectors=context|embed|first_last)
Log-probs are natural logs; --log_base=10 (KenLM's `query`) or 2 (fairseq) converts every one
and adds "log_base" to the record. "num_oov": the words the LM cannot represent (KenLM: out of
its vocabulary, scored as <unk>; a neural LM: pieces that are [UNK]). --keyed reads Kaldi-style
`<key> <text>` lines (the key up to the first blank) and copies the key into "key" (TSV: the
first column). --tsv_order=text_score writes `text<TAB>score`, the order of lm-scorer's output
and NeMo's beam files. An empty (or all-blank) line gives `{"line": i, "text": ""}` and TSV an
empty score, so output line i always belongs to input line i.

Long inputs stream: --batch_size lines are scored at a time (memory does not grow with the
number of lines), progress with rate and ETA goes to stderr, and each finished batch is
appended and fsynced to `OUTPUT.partial`, with `OUTPUT.partial.json` recording what made it.
A re-run of the same job resumes after the last complete batch and renames the file to OUTPUT
when the input is done, so an interrupted run ends with the same file as an uninterrupted one
(same batches, same floats). The same job: the same model (weights, vocab, scoring options,
backend), batch size and record options, and the same input, checked by its path and the sha256
of the lines read so far (an input that only grew resumes). Anything else is refused in one
line saying what differs; `--overwrite` starts over. A run holds an exclusive lock on OUTPUT
(`io_utils.exclusive_lock`), so a second run into it exits 2 naming the first; a write that
fails (a full disk) is one line saying how many complete lines OUTPUT.partial keeps.

Many machines: `--num_shards=N --shard_id=I` scores the batches k (input lines
k*batch_size .. (k+1)*batch_size - 1) with k % N == I into `OUTPUT-0000I-of-0000N` (run one
per machine: a Slurm array, Kubernetes jobs, a Beam or Spark map), each with a `.done.json`
beside it once complete; `--merge --num_shards=N` then checks that every shard is present,
complete and made by the same job (input content, model, batch size, options), and writes
OUTPUT in input order. Sharding whole batches keeps every batch as the unsharded run forms it,
so the merged file equals the unsharded output byte for byte.
"""

import collections
import itertools
import json
import math
import os
import sys

from absl import flags
from absl import logging

from util import cli
from util import io_utils
from util import progress as progress_lib
from util import resumable

FLAGS = flags.FLAGS

FORMATS = ("jsonl", "tsv")
VECTORS = ("none", "context", "embed", "first_last")
# --log_base -> ln(base), the divisor that turns a natural log into a log of that base.
LOG_BASES = {"e": 1.0, "10": math.log(10.0), "2": math.log(2.0)}
TSV_ORDERS = ("score_text", "text_score")


def define_flags():
  from lm import lm_flags  # pylint: disable=g-import-not-at-top
  from util import distribute_utils  # pylint: disable=g-import-not-at-top

  lm_flags.define_model_dir(required=False)  # --merge needs none
  flags.DEFINE_string("input_file", "-", "One sentence per line; '-' reads stdin.")
  flags.DEFINE_string(
    "output_file", "-", "Where the records go; '-' writes stdout (no resume, no shards)."
  )
  flags.DEFINE_enum(
    "format",
    "jsonl",
    FORMATS,
    "jsonl: a JSON record per line; tsv: score<TAB>text, a tab, newline, carriage return or "
    "backslash in the text written as \\t, \\n, \\r, \\\\ (no quoting: each row has its columns).",
  )
  flags.DEFINE_enum(
    "tsv_order",
    "score_text",
    TSV_ORDERS,
    "--format=tsv columns: score<TAB>text, or text<TAB>score (lm-scorer's and NeMo's order).",
  )
  flags.DEFINE_bool(
    "keyed",
    False,
    "Input lines are `<key> <text>` (Kaldi's text files): the key, up to the first blank, is "
    "copied into each record (TSV: a first column) and only the text is scored.",
  )
  flags.DEFINE_enum(
    "log_base",
    "e",
    list(LOG_BASES),
    "Base of every log-prob written: e (natural log), 10 (KenLM, SRILM), 2 (fairseq).",
  )
  flags.DEFINE_enum("vectors", "none", VECTORS, "Also output sentence vectors (neural LMs).")
  lm_flags.define_scoring_flags()
  lm_flags.define_long_input_flags()
  flags.DEFINE_integer(
    "batch_size", 256, "Lines scored (and checkpointed) at a time.", lower_bound=1
  )
  flags.DEFINE_integer(
    "num_shards", 1, "Split the input into this many shards (by line index).", lower_bound=1
  )
  flags.DEFINE_integer(
    "shard_id", 0, "Which shard this run scores, 0 .. num_shards-1.", lower_bound=0
  )
  flags.DEFINE_bool("merge", False, "Merge the num_shards shard outputs into --output_file.")
  flags.DEFINE_bool(
    "overwrite",
    False,
    "Start over: discard an unfinished OUTPUT.partial instead of resuming it (a resume must be "
    "the same job: model, input, batch size and options).",
  )
  flags.DEFINE_enum(
    "strategy",
    "one_device",
    ["one_device", "mirrored", "tpu"],
    "Neural LMs: split each batch's rows over the replicas of this tf.distribute strategy "
    "(mirrored: all local GPUs; tpu: --tpu).",
  )
  flags.DEFINE_string("tpu", None, distribute_utils.TPU_HELP)
  flags.DEFINE_integer("num_cpu_devices", 0, distribute_utils.NUM_CPU_DEVICES_HELP)
  lm_flags.define_throughput_flags()


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------


def _floats(values, scale=1.0):
  return [round(float(v) / scale, 6) for v in values]


def split_key(line):
  """A `<key> <text>` line -> (key, text): the key up to the first blank (space or tab), as
  Kaldi's text files; ("", "") for a blank line."""
  parts = line.split(None, 1)
  if not parts:
    return "", ""
  return parts[0], parts[1].strip() if len(parts) > 1 else ""


def record(line, text, scored=None, vector=None, key=None, log_base="e"):
  """The JSON record of input line `line` (0-based); `scored` None for an empty line.

  key: the line's key (--keyed), None for unkeyed input. log_base: a `LOG_BASES` name.
  """
  out = {"line": line} if key is None else {"line": line, "key": key}
  out["text"] = text
  if scored is None:
    return out
  scale = LOG_BASES[log_base]
  out.update(
    score=float(scored.total) / scale,
    mean=float(scored.mean) / scale,
    num_tokens=scored.num_tokens,
    # The same in every base: exp of the mean negative natural log-prob.
    perplexity=math.exp(-float(scored.mean)),
    num_oov=scored.num_oov,
    tokens=list(scored.tokens),
    token_logprobs=_floats(scored.token_logprobs, scale),
    word_logprobs=_floats(scored.word_logprobs(), scale),
    truncated=bool(scored.truncated),
  )
  # Only for a sentence read in windows, so the record of one that fits stays what it was.
  if scored.windows > 1:
    out["windows"] = scored.windows
  if log_base != "e":
    out["log_base"] = log_base
  for flag in ("normalization_fallback", "unknown_chars"):
    if hasattr(scored, flag):
      out[flag] = getattr(scored, flag)
  if vector is not None:
    out["vector"] = _floats(vector)
  return out


# Backslash escapes (IANA's TSV, PostgreSQL's COPY): a reader splitting on tabs with quoting off
# (pandas' quoting=csv.QUOTE_NONE, cut, awk) gets every row's columns; a key has no blank.
_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def render(rec, output_format, tsv_order="score_text"):
  """One output line (no newline) for a record; TSV puts a record's key first."""
  if output_format != "tsv":
    return json.dumps(rec, ensure_ascii=False)
  score = f"{rec['score']:.6f}" if "score" in rec else ""
  text = rec["text"].translate(_TSV_ESCAPES)
  columns = [score, text] if tsv_order == "score_text" else [text, score]
  if "key" in rec:
    columns.insert(0, rec["key"])
  return "\t".join(columns)


def score_batch(lm, lines, texts, vectors="none", scoring=None, keyed=False, log_base="e"):
  """Records for one batch: `lines` [n] input line numbers, `texts` [n] stripped input lines
  (`<key> <text>` when `keyed`)."""
  keys = [None] * len(texts)
  if keyed:
    keys, texts = zip(*(split_key(t) for t in texts)) if texts else ((), ())
  present = [i for i, text in enumerate(texts) if text]
  scored = lm.score([texts[i] for i in present], scoring=scoring) if present else []
  pooled = None
  if vectors != "none" and present:
    pooled = lm.sentence_vectors([texts[i] for i in present], pooling=vectors)
  by_row = {i: k for k, i in enumerate(present)}
  out = []
  for i, (line, text, key) in enumerate(zip(lines, texts, keys)):
    k = by_row.get(i)
    if k is None:
      out.append(record(line, text, key=key))
    else:
      vector = None if pooled is None else pooled[k]
      out.append(record(line, text, scored[k], vector, key, log_base))
  return out


# ----------------------------------------------------------------------------------------------
# Input, shards and resume
# ----------------------------------------------------------------------------------------------


def shard_of(line, batch_size, num_shards):
  """The shard that scores input line `line`: whole batches go round-robin."""
  return line // batch_size % num_shards


def shard_path(output_file, shard_id, num_shards):
  return f"{output_file}-{shard_id:05d}-of-{num_shards:05d}"


def job_key(lm, args):
  """What the records of a run depend on; a resume continues only the same job.

  The model and what runs it (`inference.run_identity`), the input file, and every option that
  changes a record. The input's content is checked apart (`resumable.Partial`).
  """
  from lm import inference  # pylint: disable=g-import-not-at-top

  return {
    **inference.run_identity(lm, args.scoring),
    "input": args.input_file if args.input_file == "-" else os.path.abspath(args.input_file),
    "batch_size": args.batch_size,
    "format": args.format,
    "tsv_order": args.tsv_order,
    "keyed": args.keyed,
    "log_base": args.log_base,
    "vectors": args.vectors,
    "num_shards": args.num_shards,
    "shard_id": args.shard_id,
  }


def _line_batches(numbered, batch_size):
  """(line, text) pairs in lists of `batch_size` (the last may be shorter)."""
  batch = []
  for item in numbered:
    batch.append(item)
    if len(batch) == batch_size:
      yield batch
      batch = []
  if batch:
    yield batch


def _count_lines(path):
  if path == "-":
    return None
  with open(path, "rb") as f:
    return sum(1 for _ in f)


# ----------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------


def score_stream(lm, numbered, write, args, progress):
  """Scores (line, text) pairs batch by batch; `write(lines)` gets each batch's output lines.

  args: the flags that shape a record (batch_size, format, tsv_order, keyed, log_base, vectors,
    scoring).
  """
  for batch in _line_batches(numbered, args.batch_size):
    lines, texts = zip(*batch)
    records = score_batch(
      lm, lines, list(texts), args.vectors, args.scoring, args.keyed, args.log_base
    )
    write([render(r, args.format, args.tsv_order) for r in records])
    progress.update(len(batch))


def _write_stdout(lines):
  sys.stdout.write("".join(line + "\n" for line in lines))
  sys.stdout.flush()


def score_to_file(lm, args):
  """Scores this run's lines of args.input_file into its output, resuming its partial file.

  The only writer of the output: a second run into it exits 2 naming this one (pid, host, start).

  Raises:
    cli.InputError: another run holds the output; the partial file is of another job or input
      (see `resumable.Partial`); a write failed.
  """
  target = output_path(args)
  with io_utils.exclusive_lock(target, wait=False):
    partial = resumable.Partial(target, job_key(lm, args), args.overwrite)
    source = resumable.InputLines(args.input_file)
    numbered = (
      (n, t) for n, t in source if shard_of(n, args.batch_size, args.num_shards) == args.shard_id
    )
    if partial.lines:
      logging.info("resuming %s after %d complete lines", partial.path, partial.lines)
      # Skips what the partial file holds, reading (and hashing) the input up to its end.
      collections.deque(itertools.islice(numbered, partial.lines), maxlen=0)
      partial.check_input(source)
    todo = _count_lines(args.input_file)  # this run's lines still to score (None: stdin)
    if todo is not None:
      todo = (
        sum(shard_of(n, args.batch_size, args.num_shards) == args.shard_id for n in range(todo))
        - partial.lines
      )
    progress = progress_lib.Progress("score", total=todo, unit="lines")
    score_stream(
      lm,
      numbered,
      lambda lines: partial.append(lines, source),
      args,
      progress,
    )
    lines = partial.lines
    # A shard's record tells the merge that it is complete and what it was made from.
    partial.finish(target, source if args.num_shards > 1 else None)
  logging.info("wrote %s (%d lines)", target, lines)


def merge_shards(output_file, num_shards):
  """Interleaves complete shards back into input order; raises naming what is missing or differs.

  Shards merge only when they come from the same job: the same input content, model, batch
  size, format and options (see `job_key`).
  """
  with io_utils.exclusive_lock(output_file, wait=False):
    _merge_locked(output_file, num_shards)
  logging.info("merged %d shards into %s", num_shards, output_file)


def _merge_key(done):
  """What the shards of one output must agree on, from a shard's `.done.json`: its job but for
  the shard_id and the input's path (machines may mount one input at different paths), and the
  input's content."""
  job = {k: v for k, v in done["job"].items() if k not in ("shard_id", "input")}
  return dict(job, input_lines=done["input_lines"], input_sha256=done["input_sha256"])


def _merge_locked(output_file, num_shards):
  paths = [shard_path(output_file, k, num_shards) for k in range(num_shards)]
  records = []
  for path in paths:
    if not os.path.exists(resumable.done_path(path)) or not os.path.exists(path):
      state = "unfinished" if os.path.exists(path + ".partial") else "missing"
      raise ValueError(f"shard {path} is {state}: run its score.py --shard_id first")
    with open(resumable.done_path(path), encoding="utf-8") as f:
      record = json.load(f)
    if "job" not in record:
      raise ValueError(
        f"{resumable.done_path(path)} records no job (an older score.py): re-run that shard"
      )
    records.append(_merge_key(record))
  for key in records[0]:
    values = {json.dumps(r.get(key)) for r in records}
    if len(values) > 1:
      raise ValueError(f"shards of {output_file} disagree on {key}: {', '.join(sorted(values))}")
  readers = [open(p, encoding="utf-8") for p in paths]
  try:
    with io_utils.atomic_open(output_file) as out:
      batch_size = records[0]["batch_size"]
      for n in range(records[0]["input_lines"]):
        shard = shard_of(n, batch_size, num_shards)
        line = readers[shard].readline()
        if not line.endswith("\n"):
          raise ValueError(f"shard {paths[shard]} ends before input line {n + 1}")
        out.write(line)
    for reader, path in zip(readers, paths):
      if reader.readline():
        raise ValueError(f"shard {path} has more lines than its part of the input")
  finally:
    for reader in readers:
      reader.close()


def lm_options(args):
  """`inference.load_lm`'s keyword arguments from the flags: the scored boundaries, the
  throughput options and, for a neural LM, --strategy's replicas."""
  from lm import lm_flags  # pylint: disable=g-import-not-at-top
  from util import distribute_utils  # pylint: disable=g-import-not-at-top

  kwargs = lm_flags.load_options(args)
  if args.strategy != "one_device" or args.num_cpu_devices > 1:
    if args.model_dir.startswith("kenlm:"):
      raise cli.InputError("--strategy applies to neural LMs; KenLM scores on the CPU")
    kwargs["strategy"] = distribute_utils.get_strategy(
      args.strategy, args.tpu, args.num_cpu_devices
    )
  return kwargs


def output_path(args):
  """The file a scoring run writes: --output_file, or its shard's file."""
  if args.num_shards > 1:
    return shard_path(args.output_file, args.shard_id, args.num_shards)
  return args.output_file


def _check_flags(args):
  """What the flags alone tell (before a model is loaded): cli.InputError naming the flag."""
  if args.merge:
    if args.output_file == "-":
      raise cli.InputError("--merge needs --output_file (the shards' common prefix)")
  else:
    _check_scoring_flags(args)
  if args.output_file != "-":
    target = args.output_file if args.merge else output_path(args)
    io_utils.check_output_path(target, "output_file", is_dir=False)


def _check_scoring_flags(args):
  """The flags of a scoring run (not --merge)."""
  if not args.model_dir:
    raise cli.InputError("--model_dir is required (a model dir, kenlm:PATH, bert:DIR or hf:DIR)")
  if args.shard_id >= args.num_shards:
    raise cli.InputError(f"--shard_id must be in [0, {args.num_shards})")
  if args.num_shards > 1 and "-" in (args.input_file, args.output_file):
    raise cli.InputError("sharding needs --input_file and --output_file (not stdin/stdout)")
  if args.input_file != "-" and not os.path.exists(args.input_file):
    raise cli.InputError(f"--input_file {args.input_file}: no such file")


def main(argv):
  del argv
  args = FLAGS
  _check_flags(args)
  if args.merge:
    with cli.user_input():
      merge_shards(args.output_file, args.num_shards)
    return
  from lm import inference  # pylint: disable=g-import-not-at-top

  with cli.user_input():
    lm = inference.load_lm(args.model_dir, **lm_options(args))
  if args.vectors != "none" and not hasattr(lm, "sentence_vectors"):
    raise cli.InputError(f"--vectors needs a neural LM; {args.model_dir} is not one")
  if args.output_file == "-":
    score_stream(
      lm,
      resumable.InputLines(args.input_file),
      _write_stdout,
      args,
      progress_lib.Progress("score", total=_count_lines(args.input_file), unit="lines"),
    )
  else:
    score_to_file(lm, args)


if __name__ == "__main__":
  define_flags()
  cli.run(main)

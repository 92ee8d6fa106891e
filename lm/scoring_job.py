"""score.py's job: sentences in, one record per line out, in input order (the manual:
docs/manual.md "Scoring sentences").

To stdout, or into --output_file resumed from its partial file (util/resumable.py) and sharded by
whole blocks of the input's bytes (each shard reads its own); `record` and `render` own the output
formats.
"""

import collections
import dataclasses
import itertools
import json
import math
import os
import sys

from absl import logging

from lm import inference
from lm import lm_options as lm_options_lib
from util import cli
from util import distribute_utils
from util import io_utils
from util import parts
from util import progress as progress_lib
from util import resumable
from util import runs

FORMATS = ("jsonl", "tsv")
VECTORS = ("none", "context", "embed", "first_last")
# --log_base -> ln(base), the divisor that turns a natural log into a log of that base.
LOG_BASES = {"e": 1.0, "10": math.log(10.0), "2": math.log(2.0)}
TSV_ORDERS = ("score_text", "text_score")
# The input is read in blocks of this many bytes: a batch never holds lines that start in two
# blocks, and a shard scores a contiguous run of whole blocks (parts.part_range), reading only
# their bytes. So the batches, and the floats a batch's composition makes, are the same for any
# --num_shards, and the merge writes one process's bytes.
BLOCK_BYTES = 1 << 16


@dataclasses.dataclass
class JobParams:
  """What a scoring run reads, writes and how; score.py makes its flags from the `cli.param`
  fields."""

  input_file: str = cli.param("One sentence per line; '-' reads stdin.", "-", io=cli.INPUT)
  output_file: str = cli.param(
    "Where the records go; '-' writes stdout (no resume, no shards).",
    "-",
    io=cli.OUTPUT,
  )
  format: str = cli.param(
    "jsonl: a JSON record per line; tsv: score<TAB>text, a tab, newline, carriage return or "
    "backslash in the text written as \\t, \\n, \\r, \\\\ (no quoting: each row has its columns).",
    "jsonl",
    FORMATS,
  )
  tsv_order: str = cli.param(
    "--format=tsv columns: score<TAB>text, or text<TAB>score (lm-scorer's and NeMo's order).",
    "score_text",
    TSV_ORDERS,
  )
  keyed: bool = cli.param(
    "Input lines are `<key> <text>` (Kaldi's text files): the key, up to the first blank, is "
    "copied into each record (TSV: a first column) and only the text is scored.",
    False,
  )
  log_base: str = cli.param(
    "Base of every log-prob written: e (natural log), 10 (KenLM, SRILM), 2 (fairseq).",
    "e",
    tuple(LOG_BASES),
  )
  vectors: str = cli.param("Also output sentence vectors (neural LMs).", "none", VECTORS)
  batch_size: int = cli.param("Lines scored (and checkpointed) at a time.", 256, lower_bound=1)
  num_shards: int = cli.param(
    "Split the input into this many shards, each a contiguous run of its 64 KiB blocks that it "
    "alone reads (by byte offset).",
    1,
    lower_bound=1,
  )
  shard_id: int = cli.param("Which shard this run scores, 0 .. num_shards-1.", 0, lower_bound=0)
  merge: bool = cli.param("Merge the num_shards shard outputs into --output_file.", False)
  overwrite: bool = cli.param(
    "Replace an existing --output_file, and start over: discard an unfinished OUTPUT.partial "
    "instead of resuming it (a resume must be the same job: model, input, batch size and "
    "options).",
    False,
    result=False,
  )
  strategy: str = cli.param(
    "Neural LMs: split each batch's rows over the replicas of this tf.distribute strategy "
    "(mirrored: all local GPUs; tpu: --tpu).",
    "one_device",
    ("one_device", "mirrored", "tpu"),
    result=False,  # what changes a record is the replicas: in --model_dir's run_identity
  )
  tpu: str = cli.param(distribute_utils.TPU_HELP, None, result=False)
  num_cpu_devices: int = cli.param(distribute_utils.NUM_CPU_DEVICES_HELP, 0, result=False)
  model_dir: str = lm_options_lib.model_dir_param(required=False)  # --merge needs none
  scoring: str = lm_options_lib.scoring_param()
  lm_options: lm_options_lib.LMOptions = lm_options_lib.nested()


def run(params):
  """score.py's job; cli.InputError naming the flag or file for a wrong input."""
  check_params(params)
  if params.merge:
    with cli.user_input():
      merge_shards(params.output_file, params.num_shards)
    return
  with cli.user_input():
    lm = inference.load_lm(params.model_dir, **lm_options(params))
  if params.vectors != "none" and not hasattr(lm, "sentence_vectors"):
    raise cli.InputError(f"--vectors needs a neural LM; {params.model_dir} is not one")
  if params.output_file == "-":
    lines = resumable.InputLines(params.input_file)
    # Counted for the progress bar only where counting does not use the input up (a pipe, stdin).
    total = lines.count() if io_utils.reads_twice(params.input_file) else None
    score_stream(
      lm,
      _numbered(lines),
      _write_stdout,
      params,
      progress_lib.Progress("score", total=total, unit="lines"),
    )
  else:
    score_to_file(lm, params)


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------


def _floats(values, scale=1.0):
  return [round(float(v) / scale, 6) for v in values]


def split_key(line):
  """`<key> <text>` -> (key, text), the key up to the first blank as in Kaldi's text files."""
  parts = line.split(None, 1)
  if not parts:
    return "", ""
  return parts[0], parts[1].strip() if len(parts) > 1 else ""


def record(line, text, scored=None, vector=None, key=None, log_base="e"):
  """The JSON record of 0-based input line `line`; `scored` None for an empty line."""
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
  if output_format != "tsv":
    return json.dumps(rec, ensure_ascii=False, allow_nan=False)  # check_finite ran: never NaN
  score = f"{rec['score']:.6f}" if "score" in rec else ""
  text = rec["text"].translate(_TSV_ESCAPES)
  columns = [score, text] if tsv_order == "score_text" else [text, score]
  if "key" in rec:
    columns.insert(0, rec["key"])
  return "\t".join(columns)


def score_batch(lm, lines, texts, vectors="none", scoring=None, keyed=False, log_base="e"):
  """Records for one batch of input line numbers and stripped lines."""
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


def shard_range(input_bytes, shard_id, num_shards):
  """[begin, end) of the bytes whose lines shard `shard_id` scores: its `parts.part_range` of the
  input's blocks (a line belongs to the block it starts in)."""
  blocks = parts.part_range(-(-input_bytes // BLOCK_BYTES), shard_id, num_shards)
  return blocks.start * BLOCK_BYTES, blocks.stop * BLOCK_BYTES


def shard_path(output_file, shard_id, num_shards):
  return parts.part_name(output_file, shard_id, num_shards)


def _input_stat(path):
  """The input's identity without reading it: the sizes the shards split and its mtime."""
  size, mtime_ns = io_utils.stat(path)
  return {"input_bytes": size, "input_mtime_ns": mtime_ns}


def job_key(lm, params):
  """What a run's records depend on (`runs.identity`); the input's content is checked apart.

  --long_inputs (--window, --stride) are in the open as well as in the model's id, so a resume with
  others is refused naming the flag.
  """
  windows = {}
  if isinstance(lm, inference.NeuralLM):
    windows["long_inputs"] = lm.long_inputs
    if lm.long_inputs == "window":
      windows.update(window=lm.window, stride=lm.stride)
  path = params.input_file
  # A shard's lines are those of its bytes: another size or mtime is another split.
  sharded = _input_stat(path) if params.num_shards > 1 else {}
  return runs.identity(
    "score.py",
    params,
    **windows,
    model_dir=inference.run_identity(lm, params.scoring),
    scoring=inference.scoring_of(lm, params.scoring),
    input_file=path if path == "-" else io_utils.absolute(path),
    block_bytes=BLOCK_BYTES,
    **sharded,
  )


def _numbered(source):
  """(line, text, block) of each line of `source` (resumable.InputLines), its block the one it
  starts in."""
  return ((n, text, source.offset // BLOCK_BYTES) for n, text in source)


def _line_batches(numbered, batch_size):
  """Batches of at most `batch_size` (line, text, block) items, all of one block."""
  batch = []
  for item in numbered:
    if batch and item[2] != batch[-1][2]:
      yield batch
      batch = []
    batch.append(item)
    if len(batch) == batch_size:
      yield batch
      batch = []
  if batch:
    yield batch


# ----------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------


def score_stream(lm, numbered, write, params, progress):
  """Scores (line, text, block) items batch by batch; `write(lines)` gets each batch's output
  lines."""
  for batch in _line_batches(numbered, params.batch_size):
    lines, texts, _ = zip(*batch)
    records = score_batch(
      lm, lines, list(texts), params.vectors, params.scoring, params.keyed, params.log_base
    )
    for r in records:
      if "score" in r:
        inference.check_finite(params.model_dir, r["text"], r["score"], r.get("vector", 0.0))
    write([render(r, params.format, params.tsv_order) for r in records])
    progress.update(len(batch))


def _write_stdout(lines):
  sys.stdout.write("".join(line + "\n" for line in lines))
  sys.stdout.flush()


def score_to_file(lm, params):
  """Scores this shard's lines into its output, resuming its partial file, as its only writer;
  cli.InputError for another writer, another job's partial file or a failed write.
  """
  target = output_path(params)
  with (
    io_utils.exclusive_lock(target, wait=False),
    resumable.Partial(target, job_key(lm, params), params.overwrite) as partial,
  ):
    byte_range = None
    if params.num_shards > 1:
      size = io_utils.file_size(params.input_file)
      byte_range = shard_range(size, params.shard_id, params.num_shards)
    source = resumable.InputLines(params.input_file, byte_range=byte_range)
    numbered = _numbered(source)
    if partial.lines:
      logging.info("resuming %s after %d complete lines", partial.path, partial.lines)
      # Skips what the partial file holds, reading (and hashing) the input up to its end.
      collections.deque(itertools.islice(numbered, partial.lines), maxlen=0)
      partial.check_input(source)
    todo = None  # this run's lines still to score (None: an input read once, io_utils.reads_twice)
    if io_utils.reads_twice(params.input_file):
      todo = resumable.InputLines(params.input_file, byte_range=byte_range).count() - partial.lines
    progress = progress_lib.Progress("score", total=todo, unit="lines")
    score_stream(
      lm,
      numbered,
      lambda lines: partial.append(lines, source),
      params,
      progress,
    )
    lines = partial.lines
    # A shard's record tells the merge that it is complete and what it was made from.
    partial.finish(target, source if params.num_shards > 1 else None)
  logging.info("wrote %s (%d lines)", target, lines)


def merge_shards(output_file, num_shards):
  """Joins the shards of one job (`job_key`) in input order, a JSON record's line number made
  the input's; ValueError naming what is missing or differs.
  """
  with io_utils.exclusive_lock(output_file, wait=False):
    _merge_locked(output_file, num_shards)
  logging.info("merged %d shards into %s", num_shards, output_file)


def _merge_key(done):
  """What a job's shards must agree on: the job (with the input's size and mtime) but for shard_id
  and input path (machines may mount one input at different paths)."""
  return {k: v for k, v in done["job"].items() if k not in ("shard_id", "input_file")}


def _renumbered(record, first):
  """A shard's JSON record (`render`'s `{"line": N, ...}`, N its line within the shard) with N +
  `first`: its line in the input, in the bytes one process writes."""
  head, sep, rest = record.partition(", ")
  return f"{_LINE}{int(head.removeprefix(_LINE)) + first}{sep}{rest}"


_LINE = '{"line": '


def _merge_locked(output_file, num_shards):
  paths = [shard_path(output_file, k, num_shards) for k in range(num_shards)]
  records = []
  for path in paths:
    if not io_utils.exists(resumable.done_path(path)) or not io_utils.exists(path):
      state = "unfinished" if os.path.exists(io_utils.local_stage(path) + ".partial") else "missing"
      raise ValueError(f"shard {path} is {state}: run its score.py --shard_id first")
    record = io_utils.read_json_file(resumable.done_path(path))
    if not isinstance(record, dict) or "job" not in record:
      raise ValueError(
        f"{resumable.done_path(path)} records no job (an older score.py): re-run that shard"
      )
    if record["job"].get("shard_id") != len(records) or "input_bytes" not in record["job"]:
      raise ValueError(
        f"{resumable.done_path(path)} records no part {len(records)} of the input's blocks (an "
        "older score.py, or a renamed file): re-run that shard"
      )
    records.append(record)
  keys = [_merge_key(r) for r in records]
  for key in keys[0]:
    values = {json.dumps(k.get(key)) for k in keys}
    if len(values) > 1:
      raise ValueError(f"shards of {output_file} disagree on {key}: {', '.join(sorted(values))}")
  # The same input size, block size and shard count: the shards' ranges tile the input's bytes,
  # in order, each recording how many lines it read from its own.
  renumber = records[0]["job"]["format"] == "jsonl"  # a TSV row has no line number
  with io_utils.atomic_open(output_file) as out:
    first = 0
    for path, record in zip(paths, records):
      count = 0
      with io_utils.open_file(path) as reader:
        for line in reader:
          if count == record["input_lines"]:
            raise ValueError(f"shard {path} has more lines than its part of the input")
          if not line.endswith("\n"):
            break  # a record cut short is missing
          out.write(_renumbered(line, first) if renumber else line)
          count += 1
      if count < record["input_lines"]:
        raise ValueError(
          f"shard {path} ends before input line {first + count + 1} "
          f"({count} of its {record['input_lines']} lines)"
        )
      first += count


def lm_options(params):
  """`inference.load_lm`'s keyword arguments: `params.lm_options` and --strategy's replicas."""
  kwargs = params.lm_options.load_kwargs()
  if params.strategy != "one_device" or params.num_cpu_devices > 1:
    if params.model_dir.startswith("kenlm:"):
      raise cli.InputError("--strategy applies to neural LMs; KenLM scores on the CPU")
    kwargs["strategy"] = distribute_utils.get_strategy(
      params.strategy, params.tpu, params.num_cpu_devices
    )
  return kwargs


def output_path(params):
  if params.num_shards > 1:
    return shard_path(params.output_file, params.shard_id, params.num_shards)
  return params.output_file


def check_params(params):
  """What the flags alone tell, before a model loads: cli.InputError naming the flag."""
  # First the schemes: an s3:// input would reach TensorFlow through the existence checks below,
  # whose UnimplementedError was a traceback.
  io_utils.check_schemes(params)
  if params.merge:
    if params.output_file == "-":
      raise cli.InputError("--merge needs --output_file (the shards' common prefix)")
  else:
    _check_scoring_flags(params)
  io_utils.check_outputs_apart(params)
  if params.output_file != "-":
    target = params.output_file if params.merge else output_path(params)
    io_utils.check_output_path(target, "output_file", is_dir=False, overwrite=params.overwrite)


def _check_scoring_flags(params):
  if not params.model_dir:
    raise cli.InputError("--model_dir is required (a model dir, kenlm:PATH, bert:DIR or hf:DIR)")
  with cli.user_input():
    parts.check_part(params.shard_id, params.num_shards)
  if params.vectors != "none" and params.format == "tsv":
    # `render` writes a TSV row's score and text only: the vectors were computed and dropped.
    raise cli.InputError(
      f"--vectors={params.vectors}: --format=tsv has no column for vectors; use --format=jsonl"
    )
  if params.num_shards > 1 and "-" in (params.input_file, params.output_file):
    raise cli.InputError("sharding needs --input_file and --output_file (not stdin/stdout)")
  if params.input_file != "-" and not io_utils.exists(params.input_file):
    raise cli.InputError(f"--input_file {params.input_file}: {io_utils.missing(params.input_file)}")
  if os.path.isdir(params.input_file):
    raise cli.InputError(f"--input_file {params.input_file}: is a directory; give a file")
  if io_utils.reads_twice(params.input_file):  # a file, whose first bytes can be read apart
    resumable.check_plain(params.input_file)

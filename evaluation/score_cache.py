"""The LM score cache of reranking: scores computed once per (model, sentence), kept on disk."""

import hashlib
import json
import os

from absl import logging

from lm import inference
from util import io_utils
from util import parts
from util import progress
from util import resumable


class ScoreCache:
  """Append-only JSON-lines cache, `{"model": str, "text": str, "value": payload}` per line, one
  writer at a time; the last write of a key wins. A last line cut off by a crash is trimmed on
  the next open. `register` records what each short model_id stands for in `models_path`."""

  def __init__(self, path):
    """A missing `path` is an empty cache; ValueError (`file:line`) for a malformed line of it
    or of its side file."""
    self.path = path
    self._data = {}
    if io_utils.exists(path):
      self._load()
    self._read_models()  # a damaged side file is refused now, not after a model is loaded

  def _load(self):
    with io_utils.open_file(self.path, "rb") as f:
      raw = f.read()
    lines = raw.split(b"\n")
    if lines[-1]:
      # No final newline: the previous run died inside a write; keep everything before it (a
      # remote file is cut when `put_many` rewrites it).
      lines.pop()
      if not io_utils.is_remote(self.path):
        with open(self.path, "r+b") as f:
          f.truncate(len(raw) - len(raw.split(b"\n")[-1]))
    else:
      lines.pop()
    dropped = []
    for lineno, line in enumerate(lines, 1):
      where = f"{self.path}:{lineno}"
      # Removing a bad line loses only its score, which the next run computes again.
      fix = "remove the line (its score is computed again)"
      try:
        record = json.loads(line.decode("utf-8"), parse_constant=_refuse_constant)
      except _NotFinite:
        # Only an older run wrote NaN or infinity: the score is computed again when asked for,
        # rather than served or the whole cache refused.
        dropped.append(lineno)
        continue
      except UnicodeDecodeError as e:
        raise ValueError(f"{where}: not UTF-8 ({e.reason} at byte {e.start}); {fix}") from None
      except json.JSONDecodeError as e:
        raise ValueError(
          f"{where}: not a JSON cache record ({e.msg} at column {e.colno}); {fix}"
        ) from None
      if (
        not isinstance(record, dict)
        or not isinstance(record.get("model"), str)
        or not isinstance(record.get("text"), str)
        or "value" not in record
      ):
        raise ValueError(f"{where}: expected {{'model': str, 'text': str, 'value': ...}}; {fix}")
      self._data[(record["model"], record["text"])] = record["value"]
    if dropped:
      logging.warning(
        "%s: %d line(s) with a score that is not finite (NaN, Infinity), from line %d: not "
        "used, computed again when needed",
        self.path,
        len(dropped),
        dropped[0],
      )

  @property
  def models_path(self):
    """The side file {model_id: identity} (see `register`)."""
    return os.path.splitext(self.path)[0] + ".models.json"

  def _read_models(self):
    """{model_id: identity} of `models_path` ({} without it)."""
    if not io_utils.exists(self.models_path):
      return {}
    models = io_utils.read_json_file(self.models_path)
    if not isinstance(models, dict):
      raise ValueError(f"{self.models_path}:1: expected a JSON object {{model id: identity}}")
    return models

  def register(self, model_id, identity):
    """Records the full identity behind `model_id` in `models_path` (atomically)."""
    models = self._read_models()
    if models.get(model_id) != identity:
      models[model_id] = identity
      io_utils.write_atomically(self.models_path, json.dumps(models, indent=2, sort_keys=True))

  def __len__(self):
    return len(self._data)

  def __contains__(self, key):
    return key in self._data

  def items(self, model_id):
    """[(text, payload)] of every text cached for `model_id`."""
    return [(text, value) for (model, text), value in self._data.items() if model == model_id]

  def get_many(self, model_id, texts):
    """Returns {text: payload} for the texts of `model_id` that are cached (others omitted)."""
    return {text: self._data[(model_id, text)] for text in texts if (model_id, text) in self._data}

  def put_many(self, model_id, items):
    """Stores `items` ({text: JSON-able payload} or pairs) durably before returning; ValueError,
    nothing written, for a NaN or infinity."""
    pairs = list(items.items()) if isinstance(items, dict) else list(items)
    if not pairs:
      return
    # Every line is encoded before anything is written, so no text can cut a write short.
    data = b"".join(_cache_line(model_id, text, value) for text, value in pairs)
    if io_utils.is_remote(self.path):
      self._rewrite_remote(data)
    else:
      os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
      with open(self.path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    for text, value in pairs:
      # Keep what a reload would return (e.g. tuples become lists).
      self._data[(model_id, text)] = json.loads(json.dumps(value))

  def _rewrite_remote(self, data):
    """Appends `data` to a remote cache the one way an object store can: a new file, the old
    lines (but a last line cut off) and `data`, put in place atomically. Each call costs the
    whole file: a remote cache suits the lists of one run, not a corpus of them."""
    old = b""
    if io_utils.exists(self.path):
      with io_utils.open_file(self.path, "rb") as f:
        old = f.read()
    with io_utils.atomic_open(self.path, "wb") as f:
      f.write(old[: old.rfind(b"\n") + 1] + data)


class _NotFinite(Exception):
  pass


def _refuse_constant(name):
  """json.loads' parse_constant: NaN and ±Infinity, which JSON lacks, end the line's reading."""
  raise _NotFinite(name)


def _cache_line(model_id, text, value):
  """One record as UTF-8 bytes and a newline; JSON escapes for a text UTF-8 cannot encode (a
  lone surrogate), which read back as the same str."""
  record = {"model": model_id, "text": text, "value": value}
  try:
    return (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
  except UnicodeEncodeError:
    return (json.dumps(record, allow_nan=False) + "\n").encode("ascii")


def windows_of(payload):
  """The sliding windows a `cached_scores` payload's sentence was read in; 1 for a payload
  without the field, whose LM identity has no window."""
  return payload[3] if len(payload) > 3 else 1


def cached_scores(lm, lm_id, texts, cache, name, chunk_size=500, scoring=None):
  """{text: [sum of log-probs (nats), scored tokens, truncated, windows]} of `lm` for `texts`,
  scoring those missing from `cache` (None: none) and storing each chunk before the next, so an
  interrupted run resumes; `lm_id`: the cache key (`inference.model_id`)."""
  texts = sorted(set(texts))
  done = cache.get_many(lm_id, texts) if cache is not None else {}
  todo = [t for t in texts if t not in done]
  logging.info(
    "%s: %d distinct sentences, %d cached, %d to score", name, len(texts), len(done), len(todo)
  )
  bar = progress.Progress(name, total=len(todo), unit="sentences")
  for begin in range(0, len(todo), chunk_size):
    chunk = todo[begin : begin + chunk_size]
    scored = lm.score(chunk, scoring=scoring)
    for text, result in zip(chunk, scored):
      inference.check_finite(name, text, result.total)
    results = {t: [r.total, r.num_tokens, r.truncated, r.windows] for t, r in zip(chunk, scored)}
    if cache is not None:
      cache.put_many(lm_id, results)
    done.update(results)
    bar.update(len(chunk))
  long_ones = sum(bool(done[t][2]) or windows_of(done[t]) > 1 for t in todo)
  if long_ones:
    logging.warning(
      "%s: %d of the %d sentences scored are longer than the LM takes (truncated or read in "
      "windows, as flagged in the results)",
      name,
      long_ones,
      len(todo),
    )
  return done


# ----------------------------------------------------------------------------------------------
# Parts: the cache of a scoring split over machines (run_rescoring.py --num_shards, --shard_id)
# ----------------------------------------------------------------------------------------------


def part_path(cache_path, shard_id, num_shards):
  """Part `shard_id` of `num_shards` of the cache at `cache_path`: `lm_scores-0000I-of-0000N.jsonl`
  beside it, a cache of its own (with its own models side file)."""
  stem, ext = os.path.splitext(cache_path)
  return parts.part_name(stem, shard_id, num_shards) + ext


def part_texts(texts, shard_id, num_shards, chunk_size):
  """The texts part `shard_id` scores: its `parts.part_range` of the chunks of `texts` (the sorted
  distinct texts of the whole job, `chunk_size` a chunk), so the parts tile them in whole chunks:
  from empty caches, each chunk is one process's `cached_scores` call, and so are its floats."""
  mine = parts.part_range(-(-len(texts) // chunk_size), shard_id, num_shards)
  return texts[mine.start * chunk_size : mine.stop * chunk_size]


def texts_identity(texts):
  """What the parts of one job agree on about its texts (sorted, distinct): count and SHA-256."""
  digest = hashlib.sha256()
  for text in texts:
    digest.update(json.dumps(text).encode("utf-8") + b"\n")
  return {"texts": len(texts), "texts_sha256": digest.hexdigest()}


def finish_part(cache, shard_id, num_shards, chunk_size, texts, lm_ids):
  """Records that part `cache` of `num_shards` holds the scores of its `part_texts` of `texts` by
  every LM of `lm_ids` ({name: model_id}): the merge's proof that the part is complete and whose."""
  record = {
    "shard_id": shard_id,
    "num_shards": num_shards,
    "chunk_size": chunk_size,
    **texts_identity(texts),
    "lm_ids": lm_ids,
  }
  io_utils.write_atomically(resumable.done_path(cache.path), json.dumps(record, indent=2) + "\n")


class Parts:
  """The `num_shards` finished parts of the cache at `cache_path`, checked to be of this job (its
  `texts` and LM names) before any LM loads; `merge_into` then adds one LM's scores to the cache."""

  def __init__(self, cache_path, num_shards, chunk_size, texts, lm_names):
    """ValueError, one line, for a part that is missing, unfinished or of another job (other
    texts, LMs or chunks), naming it and the --shard_id to run."""
    self.num_shards = num_shards
    self.paths = [part_path(cache_path, k, num_shards) for k in range(num_shards)]
    self.records = []
    job = dict(texts_identity(texts), chunk_size=chunk_size, lm_names=sorted(lm_names))
    for shard_id, path in enumerate(self.paths):
      rerun = f"run this command with --shard_id={shard_id} --num_shards={num_shards}"
      done = resumable.done_path(path)
      if not os.path.exists(done):
        state = "unfinished" if os.path.exists(path) else "missing"
        raise ValueError(f"--merge: part {path} is {state}: {rerun} first")
      record = io_utils.read_json_file(done)
      if not isinstance(record, dict) or not isinstance(record.get("lm_ids"), dict):
        raise ValueError(f"{done}: not the record of a finished part; {rerun} again")
      have = dict(record, lm_names=sorted(record["lm_ids"]))
      self._check(done, have, dict(job, shard_id=shard_id, num_shards=num_shards), rerun)
      self.records.append(record)

  @staticmethod
  def _check(done, have, want, rerun):
    for key, value in want.items():
      if have.get(key) != value:
        raise ValueError(
          f"--merge: {done} is a part of another job: {key} {json.dumps(have.get(key))} (this "
          f"run: {json.dumps(value)}); {rerun} again"
        )

  def merge_into(self, cache, name, lm_id):
    """Adds to `cache` the scores of LM `name` (`lm_id`) from every part that `cache` lacks;
    ValueError (nothing added) if a part scored `name` as another model."""
    for shard_id, (path, record) in enumerate(zip(self.paths, self.records)):
      rerun = f"run this command with --shard_id={shard_id} --num_shards={self.num_shards}"
      have = {f"lm_ids.{name}": record["lm_ids"].get(name)}
      self._check(resumable.done_path(path), have, {f"lm_ids.{name}": lm_id}, rerun)
    added = 0
    for path in self.paths:
      new = [(t, v) for t, v in ScoreCache(path).items(lm_id) if (lm_id, t) not in cache]
      cache.put_many(lm_id, new)
      added += len(new)
    logging.info("%s: %d scores merged from %d parts", name, added, self.num_shards)

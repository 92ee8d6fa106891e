"""The runtime study's engine (paper §5.2, Fig. 4): what run_benchmark.py measures (its job:
`benchmark_job`), on the role dataclasses `MeasureParams` and `PeakParams`.

Per-sentence latency of every model, task and length through the public inference API, batched
N-best throughput, FLOPs, the matmul peak and the memory bandwidth, into one result dict
(`measure`). What is timed and how: docs/runtime.md.
"""

import dataclasses
import json
import os
import statistics
import time

from absl import logging
import numpy as np

import kinds
from lm import backends
from lm import flops
from lm import lm_options as lm_options_lib
from reproduction import benchmark_report
from reproduction import peers as peers_lib
import tokenization
from util import cli
from util import io_utils
from util import machine

# Matmul shapes [m, k] x [k, n] for the peak: a large square one, the
# FFN-like shape of a 512-token batch, that of one 24-token and one 8-token
# sentence, and the LM head of a 24-token sentence over a 29.5k vocab: the
# small-M rates bound what a batch-1 call can reach.
MATMUL_SHAPES = (
  (2048, 2048, 2048),
  (512, 512, 2048),
  (24, 512, 2048),
  (8, 512, 2048),
  (24, 512, 29530),
)


def _check_lengths(lengths):
  if not lengths or not all(n.isdigit() and int(n) > 0 for n in lengths):
    raise ValueError("expected positive word counts, e.g. 5,10,20")


@dataclasses.dataclass
class MeasureParams:
  """Which models, and what is timed how often (run_benchmark.py's and
  scripts/profile_onnxruntime.py's flags)."""

  model_dir: list = lm_options_lib.model_dir_param(
    several=True,
    kenlm=False,
    required=False,
    default="random models of --models with the size flags below",
  )
  models: list = cli.param(
    "Model types to build with random weights when no --model_dir is given.",
    tuple(kinds.PRETRAINABLE),
    check=cli.choices(kinds.MODEL_TYPES),
  )
  vocab_file: str = cli.param(
    "Vocab of the random models (default: the T-TA authors' "
    "vocab, <data_dir>/reference-vocab/"
    "tta-vocab-lower.sub-32k.txt, 29,530 pieces).",
    None,
    io=cli.INPUT,
    check=tokenization.check_vocab_file,
  )
  do_lower_case: bool = cli.param("Lower-case the input.", True)
  hidden_size: int = cli.param("Random models: hidden size.", 512, lower_bound=1)
  num_hidden_layers: int = cli.param("Random models: layers.", 3, lower_bound=1)
  num_attention_heads: int = cli.param("Random models: heads.", 8, lower_bound=1)
  intermediate_size: int = cli.param("Random models: FFN size.", 2048, lower_bound=1)
  max_seq_length: int = cli.param(
    "Random models: max_position_embeddings, and the longest input in tokens.", 128
  )
  seed: int = cli.param("Random seed of the random weights.", 1)
  lengths: list = cli.param(
    "Sentence lengths in whitespace words.", ("5", "10", "20", "40", "80"), check=_check_lengths
  )
  tasks: list = cli.param(
    "Tasks to time.",
    tuple(flops.TASKS),
    check=cli.choices(flops.TASKS),
    unused_with=("peak_only",),
  )
  runs: int = cli.param("Timed runs per model, task and length.", 50, lower_bound=1)
  rounds: int = cli.param(
    "Turns per model (runs / rounds timed calls each, after one untimed call).", 5
  )
  warmup: int = cli.param("Untimed runs before timing (traces the graphs, warms caches).", 5)
  intra_op: int = cli.param("Intra-op threads (0: all cores this process may use).", 0)
  inter_op: int = cli.param("Inter-op threads (0: all cores this process may use).", 0)
  nbest_set: str = cli.param(
    "ESPnet2 N-best set for the throughput of batched scoring (a set name or path); empty to skip.",
    "test_clean",
    io=cli.INPUT,
  )
  max_lists: int = cli.param(
    "Score only the first N lists of --nbest_set (0: all; "
    "the whole test_clean set is 78,600 hypotheses, hours "
    "for the biLM on 2 cores).",
    20,
  )
  backends: list = cli.param(
    "inference.NeuralLM backends to time every model on (tf is the reference; onnxruntime is "
    "opt-in; openvino_bf16 is opt-in, AMX/AVX512-BF16 CPUs only, and gets no float32 floors).",
    ("tf", "openvino"),
    check=cli.choices(backends.BACKENDS),
  )
  jit_compile: bool = cli.param(
    "XLA-compile the inference graphs of every model (inference.NeuralLM jit_compile).", False
  )
  peers: list = cli.param(
    "Peers to time beside our models (peers.PEERS; 'all' for every one): same-size HF BERT on "
    "PyTorch and ONNX Runtime, batched masked copies, minicons' PLL. Needs "
    "requirements-peers.txt (scripts/setup_peers.sh).",
    (),
  )
  token_budget: int = lm_options_lib.token_budget_param()
  data_dir: str = io_utils.data_dir_param()

  def __post_init__(self):
    # The random models' shape, refused before the matmul peak or any timing runs.
    import modeling  # pylint: disable=g-import-not-at-top

    modeling.check_shape(
      self.hidden_size, self.num_hidden_layers, self.num_attention_heads, self.intermediate_size
    )

  def word_counts(self):
    """--lengths as sorted distinct ints."""
    return sorted({int(n) for n in self.lengths})


@dataclasses.dataclass
class PeakParams:
  """The matmul peak the floors are measured against."""

  matmul_runs: int = cli.param(
    "Timed runs per matmul shape for the peak measurement (0 to skip).", 10
  )
  matmul_dtype: str = cli.param(
    "Element type of the matmul peak of --peak_only (the benchmark's models run in float32).",
    "float32",
    ("float32", "bfloat16"),
  )
  peak_only: bool = cli.param(
    "Measure only the matmul peak (--matmul_shapes, --matmul_dtype) into benchmark.json: the "
    "reference for training's GFLOP/s (reproduce.py).",
    False,
  )
  matmul_shapes: list = cli.param(
    "Shapes MxKxN ([M,K] x [K,N]) of the matmul peak.",
    tuple(f"{m}x{k}x{n}" for m, k, n in MATMUL_SHAPES),
    check=lambda specs: parse_shapes(specs),
  )


# ------------------------------------------------------------- sentences


def stsb_sentences(data_dir=None):
  """[(text, origin "stsb train:12 sentence1")] of STS-B (train, dev, test), first occurrences."""
  from evaluation import sts_data  # pylint: disable=g-import-not-at-top

  seen, out = set(), []
  for split in sts_data.STSB_SPLITS:
    for line, pair in enumerate(sts_data.read_stsb(split, data_dir), 1):
      for column, text in (("sentence1", pair.sent1), ("sentence2", pair.sent2)):
        if text not in seen:
          seen.add(text)
          out.append((text, f"stsb {split}:{line} {column}"))
  return out


def sentences_of_lengths(sentences, lengths):
  """{n: (text, origin)} for each of `lengths`: the first of `sentences` of exactly n whitespace
  words, else the sentences from the start joined and cut after n words; ValueError when all of
  them hold fewer."""
  out = {}
  for n in lengths:
    exact = [(t, o) for t, o in sentences if len(t.split()) == n]
    if exact:
      out[n] = exact[0]
      continue
    words, used = [], []
    for text, origin in sentences:
      words.extend(text.split())
      used.append(origin)
      if len(words) >= n:
        break
    if len(words) < n:
      raise ValueError(
        f"the sentences hold {len(words)} words in all, fewer than the {n:d} asked for"
      )
    out[n] = (
      " ".join(words[:n]),
      f"joined: {used[0]} .. {used[-1]} ({len(used)} sentences)",
    )
  return out


# ---------------------------------------------------------------- timing


def summarize(seconds):
  """Median, p10, p90, mean, min and max in ms of a list of durations (s)."""
  ms = np.asarray(seconds, np.float64) * 1e3
  return {
    "median_ms": float(np.median(ms)),
    "p10_ms": float(np.percentile(ms, 10)),
    "p90_ms": float(np.percentile(ms, 90)),
    "mean_ms": float(ms.mean()),
    "min_ms": float(ms.min()),
    "max_ms": float(ms.max()),
    "runs": int(ms.size),
  }


def task_call(lm, task, sentence):
  """The public API call a user makes for one sentence of `task`."""
  if task == "sts":
    return lambda: lm.sentence_vectors([sentence], pooling="context", masked=True)
  return lambda: lm.score([sentence])


def time_cell(timed, runs, warmup, rounds=1):
  """{name: (total seconds [runs], {stage: seconds [runs]})} of each of `timed` ({name: (the
  zero-argument call, the `stage_clock.StageClock` it laps)}), in `rounds` turns per model, each
  an untimed call and then its share of the runs."""
  for call, _ in timed.values():
    for _ in range(warmup):
      call()
  names = list(timed)
  totals = {name: [] for name in names}
  stages = {name: {stage: [] for stage in timed[name][1].STAGES} for name in names}
  rounds = max(1, min(rounds, runs))
  for r in range(rounds):
    share = runs // rounds + (r < runs % rounds)
    # Rotating the order keeps any "turn right after model X" effect (a burst of load) from
    # always falling on the same model.
    for name in names[r % len(names) :] + names[: r % len(names)]:
      call, clock = timed[name]
      call()  # brings the model's weights back into the caches
      for _ in range(share):
        clock.take()
        start = time.perf_counter()
        call()
        totals[name].append(time.perf_counter() - start)
        for stage, seconds in clock.take().items():
          stages[name][stage].append(seconds)
  return {name: (totals[name], stages[name]) for name in names}


def time_encoder(lm, sentence, runs, warmup):
  """Median ms of the encoder alone (`ScoringGraph.encode`, compiled as `lm` compiles its graph
  functions) on the padded input of one sentence; None for the masked-copy kinds, whose
  encoder runs on copies the call builds."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  if lm.kind.masked_copies:
    return None
  if not hasattr(lm, "_benchmark_encode"):
    spec = tf.TensorSpec([None, None], tf.int32)
    lm._benchmark_encode = lm.compiled(lm.graph.encode, [spec, spec])  # pylint: disable=protected-access
  ids, _ = lm.tokenize([sentence])
  ids = np.array(ids, np.int32)
  mask = np.ones_like(ids)
  encode = lm._benchmark_encode  # pylint: disable=protected-access
  for _ in range(warmup):
    encode(ids, mask)
  seconds = []
  for _ in range(runs):
    start = time.perf_counter()
    encode(ids, mask)
    seconds.append(time.perf_counter() - start)
  return float(np.median(seconds)) * 1e3


def parse_shapes(specs):
  """["2048x2048x2048", ...] -> [(2048, 2048, 2048), ...]; ValueError naming a malformed one."""
  shapes = []
  for spec in specs:
    parts = spec.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
      raise ValueError(f"{spec!r} is not MxKxN with positive ints")
    shapes.append(tuple(int(p) for p in parts))
  return shapes


def matmul_peak(shapes, runs, when="", dtype="float32"):
  """The machine's practical peak: per (m, k, n) of `shapes`, [m, k] x [k, n] in `dtype`, the
  median ms of `runs` after 2 warm-ups and GFLOP/s (2mkn / median); `when` labels the records."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  matmul = tf.function(lambda a, b: tf.matmul(a, b), autograph=False)
  out = []
  for m, k, n in shapes:
    a = tf.cast(tf.random.normal([m, k], seed=1), dtype)
    b = tf.cast(tf.random.normal([k, n], seed=2), dtype)
    for _ in range(2):
      matmul(a, b)
    times = []
    for _ in range(runs):
      start = time.perf_counter()
      matmul(a, b)  # CPU eager calls return when the kernel is done.
      times.append(time.perf_counter() - start)
    median = statistics.median(times)
    out.append(
      {
        "when": when,
        "dtype": dtype,
        "shape": f"[{m},{k}]x[{k},{n}]",
        "m": m,
        "k": k,
        "n": n,
        "median_ms": median * 1e3,
        "gflops": 2.0 * m * k * n / median / 1e9,
        "load_avg_1m": machine.load_average(),
      }
    )
  return out


def memory_bandwidth(runs, megabytes=512):
  """{"bytes", "median_ms", "gb_per_s"} of an in-graph sum over a float32 tensor far larger than
  the caches."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  values = tf.ones([megabytes * (1 << 20) // 4])
  total = tf.function(tf.reduce_sum, autograph=False)
  total(values)
  times = []
  for _ in range(max(runs, 1)):
    start = time.perf_counter()
    total(values)
    times.append(time.perf_counter() - start)
  median = statistics.median(times)
  nbytes = values.shape.num_elements() * 4
  return {"bytes": nbytes, "median_ms": median * 1e3, "gb_per_s": nbytes / median / 1e9}


# ------------------------------------------------------------ the models


def build_lms(params):
  """dict name -> NeuralLM: trained ones from --model_dir, else random ones (`MeasureParams`)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from lm import inference  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top

  options = {"jit_compile": params.jit_compile, "token_budget": params.token_budget}

  def add(name, model, tokenizer):
    """One NeuralLM per backend over the same model: "tta" (tf), "tta@openvino"."""
    for backend in params.backends:
      extra = {} if backend == "tf" else {"backend": backend, "jit_compile": False}
      key = name if backend == "tf" else f"{name}@{backend}"
      lms[key] = inference.NeuralLM(model, tokenizer, **dict(options, **extra))

  lms = {}
  if params.model_dir:
    for name, path in lm_options_lib.model_specs(params.model_dir):
      model, tokenizer = inference.load_model(path)
      name = name or model.model_type
      if name in lms:
        name = f"{name}_{len(lms)}"
      add(name, model, tokenizer)
    return lms
  tokenizer = random_models_tokenizer(params)
  for model_type in params.models:
    tf.keras.utils.set_random_seed(params.seed)
    config = modeling.TTAConfig(
      vocab_size=tokenizer.vocab_size,
      hidden_size=params.hidden_size,
      num_hidden_layers=params.num_hidden_layers,
      num_attention_heads=params.num_attention_heads,
      intermediate_size=params.intermediate_size,
      max_position_embeddings=params.max_seq_length,
      mask_token_id=tokenizer.mask_id,
      model_type=model_type,
    )
    add(model_type, modeling.build_model(config, model_type), tokenizer)
  return lms


def build_peers(lms, threads, params):
  """{name: peer} of --peers over a random HF BERT of the size and vocab of our first model."""
  if not params.peers:
    return {}
  names = list(peers_lib.PEERS) if list(params.peers) == ["all"] else params.peers
  lm = next(iter(lms.values()))
  with cli.user_input():
    return peers_lib.build_peers(
      names, lm.model.config, lm.tokenizer, lm.max_seq_length, threads[0], params.seed
    )


def describe_lm(lm):
  config = lm.model.config
  return {
    "model_type": lm.model_type,
    "config": json.loads(config.to_json_string()),
    "parameters": int(sum(int(np.prod(v.shape)) for v in lm.model.weights)),
    "vocab_file": lm.tokenizer.vocab_file,
    "max_seq_length": lm.max_seq_length,
    "score_sos": lm.score_sos,
    "score_eos": lm.score_eos,
    "token_budget": lm.token_budget,
    "backend": lm.backend,
  }


# -------------------------------------------------------------- measuring


def latency_records(lms, sentences, params, peers=None):
  """(records, peer_records) of every (task, length, model), peers timed in the same turns."""
  records, peer_records = [], []
  peers = peers or {}
  runs, warmup = params.runs, params.warmup
  for task in params.tasks:
    for words, (text, origin) in sorted(sentences.items()):
      timed = {name: (task_call(lm, task, text), lm.clock) for name, lm in lms.items()}
      timed.update(
        {name: (p.call(task, text), p.clock) for name, p in peers.items() if task in p.tasks}
      )
      load_before = machine.load_average()
      timed = time_cell(timed, runs, warmup, params.rounds)
      load_after = machine.load_average()
      where = {
        "task": task,
        "words": words,
        "sentence": text,
        "origin": origin,
        "load_avg_1m": [load_before, load_after],
      }
      for name, peer in peers.items():
        if name in timed:
          peer_records.append(peer_record(peer, where, *timed[name]))
      for name, lm in lms.items():
        ids, truncated = lm.tokenize([text])
        num_tokens = len(ids[0])
        totals, stages = timed[name]
        call = flops.call_flops(
          lm.model.config, lm.model_type, task, num_tokens, lm.score_sos, lm.score_eos
        )
        record = {
          "model": name,
          "model_type": lm.model_type,
          "backend": lm.backend,
          "tokens": num_tokens,
          "truncated": bool(truncated[0]),
          **where,
        }
        record.update(summarize(totals))
        # Medians per stage: they need not add up to the median call exactly.
        record["stages_ms"] = {s: float(np.median(v)) * 1e3 for s, v in stages.items()}
        record["graph_median_ms"] = record["stages_ms"]["graph"]
        record["encoder_ms"] = time_encoder(lm, text, runs, warmup)
        record["flops"] = call["total"]
        record["weight_bytes"] = flops.call_weight_bytes(lm.model.config, task)
        record["gflops_per_s"] = call["total"] / record["median_ms"] / 1e6
        record["graph_gflops_per_s"] = (
          call["total"] / record["graph_median_ms"] / 1e6 if record["graph_median_ms"] else None
        )
        records.append(record)
        logging.info(
          "%-6s %-6s %2d words %3d tokens: median %8.2f ms "
          "(p10 %.2f, p90 %.2f; graph %s ms) %.2f GFLOP/s, "
          "load %s",
          task,
          name,
          words,
          num_tokens,
          record["median_ms"],
          record["p10_ms"],
          record["p90_ms"],
          f"{record['graph_median_ms']:.2f}" if record["graph_median_ms"] is not None else "n/a",
          record["gflops_per_s"],
          record["load_avg_1m"],
        )
  return records, peer_records


def peer_record(peer, where, totals, stages):
  """The latency record of one peer's cell (`where`: task, words, sentence, origin, load)."""
  record = {
    "model": peer.name,
    "versus": peer.versus,
    "backend": peer.backend,
    "tokens": peer.num_tokens(where["sentence"]),
    **where,
  }
  record.update(summarize(totals))
  record["stages_ms"] = {s: float(np.median(v)) * 1e3 for s, v in stages.items()}
  logging.info(
    "%-6s %-16s %2d words %3d tokens: median %8.2f ms (p10 %.2f, p90 %.2f), load %s",
    record["task"],
    peer.name,
    record["words"],
    record["tokens"],
    record["median_ms"],
    record["p10_ms"],
    record["p90_ms"],
    record["load_avg_1m"],
  )
  return record


def peer_throughput_records(peers, texts, source, token_budget, pad_multiple):
  """Batched rerank of `texts` by the one-pass peers, batched as ours (same token budget)."""
  records = []
  for name, peer in peers.items():
    if not hasattr(peer, "score_batch"):
      continue
    peer.score_batch(texts[:16], token_budget, pad_multiple)  # Warms the session up.
    load_before = machine.load_average()
    start = time.perf_counter()
    peer.score_batch(texts, token_budget, pad_multiple)
    seconds = time.perf_counter() - start
    records.append(
      {
        "model": name,
        "backend": peer.backend,
        "versus": peer.versus,
        "source": source,
        "sentences": len(texts),
        "seconds": seconds,
        "sentences_per_s": len(texts) / seconds,
        "load_avg_1m": [load_before, machine.load_average()],
      }
    )
    logging.info("throughput %s: %.1f sentences/s", name, len(texts) / seconds)
  return records


def throughput_records(lms, texts, source):
  """Batched scoring of `texts` by each model: sentences/s, tokens/s."""
  records = []
  for name, lm in lms.items():
    ids, _ = lm.tokenize(texts)
    tokens = sum(len(x) for x in ids)
    total_flops = sum(
      flops.call_flops(
        lm.model.config, lm.model_type, "rerank", len(x), lm.score_sos, lm.score_eos
      )["total"]
      for x in ids
    )
    lm.score(texts[:16])  # Traces the graphs outside the timing.
    load_before = machine.load_average()
    lm.clock.take()
    start = time.perf_counter()
    lm.score(texts)
    seconds = time.perf_counter() - start
    record = {
      "model": name,
      "model_type": lm.model_type,
      "backend": lm.backend,
      "source": source,
      "sentences": len(texts),
      "tokens": tokens,
      "seconds": seconds,
      "graph_seconds": lm.clock.take()["graph"],
      "sentences_per_s": len(texts) / seconds,
      "tokens_per_s": tokens / seconds,
      "flops": total_flops,
      "gflops_per_s": total_flops / seconds / 1e9,
      "load_avg_1m": [load_before, machine.load_average()],
    }
    records.append(record)
    logging.info(
      "throughput %s: %d sentences in %.1f s = %.1f sentences/s, "
      "%.0f tokens/s, %.1f GFLOP/s, load %s",
      name,
      len(texts),
      seconds,
      record["sentences_per_s"],
      record["tokens_per_s"],
      record["gflops_per_s"],
      record["load_avg_1m"],
    )
  return records


def nbest_throughput(lms, peers, params):
  """Throughput records of ours and of the batched peers on the first --max_lists lists of
  --nbest_set."""
  from nbest.formats import espnet  # pylint: disable=g-import-not-at-top

  if not params.nbest_set:
    return [], []
  lists = espnet.read_espnet_nbest(params.nbest_set, params.data_dir)
  if params.max_lists:
    lists = lists[: params.max_lists]
  texts = [h.text for l in lists for h in l.hyps]
  source = f"{params.nbest_set} ({len(lists)} lists, {len(texts)} hypotheses)"
  ours = next(iter(lms.values()))
  return (
    throughput_records(lms, texts, source),
    peer_throughput_records(peers, texts, source, ours.token_budget, ours.pad_multiple),
  )


def random_models_tokenizer(params):
  """The tokenizer of the random models (--vocab_file, else the T-TA authors' vocab)."""
  vocab_file = params.vocab_file or os.path.join(
    io_utils.data_root(params.data_dir), "reference-vocab", "tta-vocab-lower.sub-32k.txt"
  )
  return tokenization.FullTokenizer(vocab_file, params.do_lower_case)


def measure(params, peak, threads, facts):
  """The result dict benchmark_report.py renders; `threads`: (intra_op, inter_op) as
  `machine.pin_threads` set them; `facts`: the command's "flags" and "command"."""
  result = {
    "environment": machine.environment(threads),
    "load_avg_1m": {"start": machine.load_average()},
    **facts,
  }
  logging.info("environment: %s", result["environment"])
  # The peak is taken at the start and at the end: on a shared machine the
  # load (and so the peak) moves during a run; the two bracket it.
  shapes = parse_shapes(peak.matmul_shapes)
  result["matmul_peak"] = matmul_peak(shapes, peak.matmul_runs, "start") if peak.matmul_runs else []
  lms = build_lms(params)
  result["models"] = {name: describe_lm(lm) for name, lm in lms.items()}
  sentences = sentences_of_lengths(stsb_sentences(params.data_dir), params.word_counts())
  peers = build_peers(lms, threads, params)
  result["latency"], peer_latency = latency_records(lms, sentences, params, peers)
  if peers:
    result["peers"] = {
      "versions": peers_lib.versions(),
      "peers": {name: p.describe() for name, p in peers.items()},
    }
    result["peer_latency"] = peer_latency
    result["peer_ratios"] = benchmark_report.peer_ratios(result["latency"], peer_latency)
  result["headline"] = benchmark_report.headline(result["latency"])
  result["throughput"], peer_throughput = nbest_throughput(lms, peers, params)
  if peer_throughput:
    result["peer_throughput"] = peer_throughput
  if peak.matmul_runs:
    result["matmul_peak"] += matmul_peak(shapes, peak.matmul_runs, "end")
    result["memory_bandwidth"] = memory_bandwidth(peak.matmul_runs)
    benchmark_report.add_flop_floors(
      result["headline"],
      result["latency"],
      result["throughput"],
      result["matmul_peak"],
      result["memory_bandwidth"]["gb_per_s"],
    )
  result["load_avg_1m"]["end"] = machine.load_average()
  return result


def peak_only(peak, threads):
  """The result dict of --peak_only: the environment and the matmul peak in --matmul_dtype."""
  records = matmul_peak(parse_shapes(peak.matmul_shapes), peak.matmul_runs, dtype=peak.matmul_dtype)
  return {"environment": machine.environment(threads), "matmul_peak": records}

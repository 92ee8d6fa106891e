"""The runtime benchmark's peers: what a user would run instead of our models.

Same-size Hugging Face `BertForMaskedLM`s (random weights, no download) called as their library
means them to be, with our tokenizer's ids: bert@torch, bert@onnxruntime, copies@torch and
minicons@torch (docs/runtime.md "Peers"). Each has a `stage_clock.StageClock` so the benchmark
times it like our models. The packages come from requirements-peers.txt (scripts/setup_peers.sh)
and are imported only when peers are built.
"""

import importlib.metadata
import os
import tempfile
import warnings

import numpy as np

import kinds
from lm import inference
from lm import stage_clock
from reproduction import benchmark_report
import tokenization

PEERS = ("bert@torch", "bert@onnxruntime", "copies@torch", "minicons@torch")
# Which of our model kinds each peer is compared with.
VERSUS = {
  "bert": benchmark_report.HEADLINE_FAST,
  "copies": benchmark_report.HEADLINE_SLOW,
  "minicons": benchmark_report.HEADLINE_SLOW,
}
_ONNX_OPSET = 17


def bert_config(config):
  """A `transformers.BertConfig` of the sizes of our `modeling.TTAConfig`."""
  import transformers  # pylint: disable=g-import-not-at-top

  return transformers.BertConfig(
    vocab_size=config.vocab_size,
    hidden_size=config.hidden_size,
    num_hidden_layers=config.num_hidden_layers,
    num_attention_heads=config.num_attention_heads,
    intermediate_size=config.intermediate_size,
    max_position_embeddings=config.max_position_embeddings,
    hidden_act="gelu",  # exact erf, as ours
    layer_norm_eps=1e-12,
    type_vocab_size=1,  # HF BERT always adds a token-type embedding; one row is the least
  )


def host_encoder(tokenizer, max_seq_length):
  """A `tokenizers.Tokenizer` of `tokenizer`'s vocab whose `encode(text).ids` is `[SOS] pieces
  [EOS]` (or [CLS]/[SEP]) as ours, at most `max_seq_length` with them."""
  from tokenizers import processors  # pylint: disable=g-import-not-at-top

  # The pair the tokenizer resolved (config.json's, else the vocab's rule): ours frames with it.
  start, end = tokenizer.boundary_tokens
  host = tokenization.host_tokenizer(tokenizer.vocab, tokenizer.do_lower_case)
  host.post_processor = processors.TemplateProcessing(
    single=f"{start} $A {end}",
    special_tokens=[(start, tokenizer.vocab[start]), (end, tokenizer.vocab[end])],
  )
  host.enable_truncation(max_seq_length)
  return host


def _modules():
  """The torch modules of the calls (defined here so that torch is imported only with peers)."""
  import torch  # pylint: disable=g-import-not-at-top

  class SentenceVector(torch.nn.Module):
    """STS: the mean of the last layer over the word pieces ([SOS]/[EOS] excluded), as ours."""

    def __init__(self, mlm):
      super().__init__()
      self.bert = mlm.bert

    def forward(self, input_ids, attention_mask):
      hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
      positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]  # [1, T]
      lengths = attention_mask.sum(1, keepdim=True)  # [B, 1]
      words = ((positions >= 1) & (positions < lengths - 1)).to(hidden.dtype)[..., None]
      return (hidden * words).sum(1) / words.sum(1).clamp(min=1.0)  # [B, D]

  class TokenLogProbs(torch.nn.Module):
    """Rerank: log p of each input piece, log-softmax over the vocabulary at every position."""

    def __init__(self, mlm):
      super().__init__()
      self.mlm = mlm

    def forward(self, input_ids, attention_mask):
      logits = self.mlm(input_ids=input_ids, attention_mask=attention_mask).logits  # [B, T, V]
      log_probs = torch.log_softmax(logits, dim=-1)
      return log_probs.gather(-1, input_ids[..., None])[..., 0]  # [B, T]

  class MaskedHidden(torch.nn.Module):
    """The last layer of each masked copy at its masked position."""

    def __init__(self, mlm):
      super().__init__()
      self.bert = mlm.bert

    def forward(self, input_ids, attention_mask, positions):
      hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
      return hidden[torch.arange(hidden.shape[0]), positions]  # [copies, D]

  return SentenceVector, TokenLogProbs, MaskedHidden


class _Peer(object):
  """What the benchmark needs of a peer: its name, what it stands beside, its calls, a clock."""

  def __init__(self, name, tasks, host):
    self.name = name
    self.backend = name.split("@")[1]
    self.versus = VERSUS[name.split("@")[0]]
    self.tasks = tasks
    self.host = host
    self.clock = stage_clock.StageClock()

  def num_tokens(self, sentence):
    return len(self.host.encode(sentence).ids)

  def call(self, task, sentence):
    """The zero-argument call of one sentence of `task` (one of self.tasks)."""
    raise NotImplementedError

  def describe(self):
    return {"versus": self.versus, "backend": self.backend, "tasks": list(self.tasks)}

  def _encode(self, sentence):
    """Ids and mask [1, T] int64, the tokenization and batching laps taken."""
    self.clock.start()
    ids = self.host.encode(sentence).ids
    self.clock.lap("tokenization")
    input_ids = np.array([ids], np.int64)
    mask = np.ones_like(input_ids)
    self.clock.lap("batching")
    return input_ids, mask


class BertOnePass(_Peer):
  """bert@torch and bert@onnxruntime: T-TA's two calls done by one BERT pass."""

  def __init__(self, mlm, host, backend, workdir=None, threads=None):
    """Both calls of `mlm` (in eval mode) on `backend`; onnxruntime writes its files to
    `workdir` (None: a temporary dir) and runs `threads` intra-op threads."""
    super().__init__(f"bert@{backend}", ("sts", "rerank"), host)
    sentence_vector, token_log_probs, _ = _modules()
    modules = {"sts": sentence_vector(mlm).eval(), "rerank": token_log_probs(mlm).eval()}
    self.fusions = {}
    if backend == "torch":
      self._run = {task: _torch_function(module) for task, module in modules.items()}
    elif backend == "onnxruntime":
      with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        self._run = {}
        for task, module in modules.items():
          self._run[task], self.fusions[task] = _onnxruntime_function(
            module, mlm.config, os.path.join(tmp, task), threads
          )
    else:
      raise ValueError(f"backend {backend!r} is not torch or onnxruntime")

  def call(self, task, sentence):
    if task == "sts":
      return lambda: self._sentence_vector(sentence)
    return lambda: self._score(sentence)

  def _sentence_vector(self, sentence):
    input_ids, mask = self._encode(sentence)
    vector = self._run["sts"](input_ids, mask)
    self.clock.lap("graph")
    vector = np.asarray(vector)[0]
    self.clock.lap("conversion")
    return vector

  def _score(self, sentence):
    input_ids, mask = self._encode(sentence)
    log_probs = self._run["rerank"](input_ids, mask)
    self.clock.lap("graph")
    # The pieces ours score: [EOS] included, [SOS] not.
    positions = kinds.scored_positions(self.versus, input_ids.shape[1])
    total = float(np.asarray(log_probs, np.float64)[0, positions].sum())
    self.clock.lap("conversion")
    return total

  def score_batch(self, texts, token_budget, pad_multiple):
    """float64 [len(texts)]: sum of log p over the pieces ours score, batched as ours."""
    ids = [e.ids for e in self.host.encode_batch_fast(texts)]
    totals = np.zeros(len(ids))
    for batch in inference.budget_batches([len(x) for x in ids], token_budget, pad_multiple):
      # Padded as ours pads (the peer's [PAD] is id 0, as ours); the exported graph takes int64.
      input_ids, mask = inference.pad_rows([ids[i] for i in batch], 0, pad_multiple)
      log_probs = self._run["rerank"](input_ids.astype(np.int64), mask.astype(np.int64))
      log_probs = np.asarray(log_probs, np.float64)
      for row, i in enumerate(batch):
        totals[i] = log_probs[row, kinds.scored_positions(self.versus, len(ids[i]))].sum()
    return totals

  def describe(self):
    out = super().describe()
    if self.fusions:
      out["exporter"] = f"torch.onnx.export (TorchScript, dynamo=False), opset {_ONNX_OPSET}"
      out["optimizer"] = 'onnxruntime.transformers.optimizer.optimize_model(model_type="bert")'
      out["fused_operators"] = self.fusions
    return out


class MaskedCopies(_Peer):
  """copies@torch: the biLM's masked STS as one batched PyTorch forward."""

  def __init__(self, mlm, host, mask_id):
    super().__init__("copies@torch", ("sts",), host)
    _, _, masked_hidden = _modules()
    self._masked_hidden = masked_hidden(mlm).eval()
    self._mask_id = mask_id

  def call(self, task, sentence):
    return lambda: self._sentence_vector(sentence)

  def _sentence_vector(self, sentence):
    import torch  # pylint: disable=g-import-not-at-top

    input_ids, mask = self._encode(sentence)
    positions = np.arange(1, input_ids.shape[1] - 1)  # the word pieces
    copies = np.repeat(input_ids, len(positions), axis=0)  # [n, T]
    copies[np.arange(len(positions)), positions] = self._mask_id
    copy_mask = np.ones_like(copies)
    self.clock.lap("batching")
    with torch.inference_mode():
      hidden = self._masked_hidden(
        torch.from_numpy(copies), torch.from_numpy(copy_mask), torch.from_numpy(positions)
      )
    self.clock.lap("graph")
    vector = hidden.numpy().mean(0)
    self.clock.lap("conversion")
    return vector


class MiniconsPLL(_Peer):
  """minicons@torch: minicons' masked-LM scorer, the sentence's PLL summed."""

  def __init__(self, mlm, host, boundary_tokens):
    super().__init__("minicons@torch", ("rerank",), host)
    from minicons import scorer  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top

    start, end = boundary_tokens
    # minicons takes a transformers tokenizer; this one wraps the same host tokenizer, so it
    # frames and splits sentences exactly as the other peers and ours.
    wrapped = transformers.PreTrainedTokenizerFast(
      tokenizer_object=host,
      unk_token="[UNK]",
      pad_token="[PAD]",
      mask_token="[MASK]",
      cls_token=start,
      sep_token=end,
    )
    self._scorer = scorer.MaskedLMScorer(mlm, device="cpu", tokenizer=wrapped)

  def call(self, task, sentence):
    return lambda: self._score(sentence)

  def _score(self, sentence):
    self.clock.start()
    (total,) = self.score_sentences([sentence])
    self.clock.lap("graph")
    return total

  def score_sentences(self, sentences):
    """PLL totals (floats) of a list of sentences, one minicons call (its own batching)."""
    return self._scorer.sequence_score(list(sentences), reduction=lambda x: x.sum(0).item())


def _torch_function(module):
  """NumPy arrays -> NumPy output of a torch module, without autograd."""
  import torch  # pylint: disable=g-import-not-at-top

  def run(*arrays):
    with torch.inference_mode():
      return module(*(torch.from_numpy(a) for a in arrays)).numpy()

  return run


def _onnxruntime_function(module, config, path, threads):
  """(run(input_ids, attention_mask) -> NumPy, {fused op: count}) of `module` exported and fused
  by ONNX Runtime's transformer optimizer."""
  import onnxruntime  # pylint: disable=g-import-not-at-top
  from onnxruntime.transformers import optimizer  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top

  example = torch.ones([1, 8], dtype=torch.int64)
  dynamic = {0: "batch", 1: "length"}
  with warnings.catch_warnings():
    # The TorchScript exporter is chosen on purpose (its graph is the one the optimizer fuses);
    # its deprecation notice and the tracer's notes on HF's mask code would only be noise.
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", torch.jit.TracerWarning)
    torch.onnx.export(
      module,
      (example, example),
      path + ".onnx",
      input_names=["input_ids", "attention_mask"],
      output_names=["output"],
      dynamic_axes={"input_ids": dynamic, "attention_mask": dynamic, "output": {0: "batch"}},
      opset_version=_ONNX_OPSET,
      dynamo=False,
    )
  fused_model = optimizer.optimize_model(
    path + ".onnx",
    model_type="bert",
    num_heads=config.num_attention_heads,
    hidden_size=config.hidden_size,
  )
  fused = {op: n for op, n in fused_model.get_fused_operator_statistics().items() if n}
  fused_model.save_model_to_file(path + ".fused.onnx")
  options = onnxruntime.SessionOptions()
  if threads:
    options.intra_op_num_threads = threads
  session = onnxruntime.InferenceSession(
    path + ".fused.onnx", options, providers=["CPUExecutionProvider"]
  )

  def run(input_ids, attention_mask):
    return session.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})[0]

  return run, fused


def build_peers(names, config, tokenizer, max_seq_length, threads, seed=1):
  """{name: peer} of `names` over one random `BertForMaskedLM` of `config`'s sizes (torch
  `seed`); `threads`: PyTorch's and ONNX Runtime's intra-op threads, as the benchmark's TF."""
  # The peers are built from a config: nothing is to be fetched, and nothing may try.
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  unknown = [n for n in names if n not in PEERS]
  if unknown:
    raise ValueError(f"unknown peers {unknown}; expected some of {PEERS}")
  torch.set_num_threads(threads)
  torch.manual_seed(seed)
  mlm = transformers.BertForMaskedLM(bert_config(config)).eval()
  host = host_encoder(tokenizer, max_seq_length)
  builders = {
    "bert@torch": lambda: BertOnePass(mlm, host, "torch"),
    "bert@onnxruntime": lambda: BertOnePass(mlm, host, "onnxruntime", threads=threads),
    "copies@torch": lambda: MaskedCopies(mlm, host, tokenizer.mask_id),
    "minicons@torch": lambda: MiniconsPLL(mlm, host, tokenizer.boundary_tokens),
  }
  return {name: builders[name]() for name in names}


def versions():
  """The peers' package versions, for the benchmark's environment record."""
  return {
    package: importlib.metadata.version(package)
    for package in ("torch", "transformers", "tokenizers", "onnxruntime", "onnx", "minicons")
  }

"""Training tokens/s of one model shape: run_pretraining.py (T-TA, fp32 and bf16) against Hugging
Face's BertForMaskedLM of the same shape trained with PyTorch (the peer a user would pick), on one
CPU, one run (issue 55 item 4).

Both train on random ids in batches of --train_batch_size rows of exactly --length tokens (no
padding), every position a target: T-TA's language autoencoding predicts every token, and the
peer's labels are its inputs (BertForMaskedLM's head computes every position's logits whatever
the labels, so its cost does not depend on the masking rate). Both use AdamW with weight decay
0.01 and gradient clipping at 1.0, as run_pretraining.py does. Ours runs as a user runs it (a
subprocess of run_pretraining.py --synthetic_data; tokens/s from its train_summary.json, which
leaves out the first, tracing, call); the peer's first --warmup_steps steps are left out too. A
benchmark, not a test: run it on a quiet machine; the figures go to docs with the CPU and commit
it prints.

  bash scripts/setup_peers.sh    # torch and transformers (requirements-peers.txt)
  python scripts/benchmark_training.py --size=6,384,12,1536 --vocab_size=30522 --steps=30
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from util import cli  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list(
  "size", ["6", "384", "12", "1536"], "layers,hidden,heads,ffn (all-MiniLM-L6-v2's)."
)
flags.DEFINE_integer("vocab_size", 30522, "Output classes (the uncased BERT vocab's).")
flags.DEFINE_integer("train_batch_size", 64, "Rows per step.")
flags.DEFINE_integer("length", 32, "Tokens per row, boundaries included.")
flags.DEFINE_integer("steps", 30, "Steps timed per configuration.")
flags.DEFINE_integer("warmup_steps", 5, "Untimed first steps (ours: one tf.function call).")
flags.DEFINE_list("precisions", ["fp32", "bf16"], "Our precisions to time (fp32, bf16).")
flags.DEFINE_bool("peer", True, "Also time the PyTorch peer (needs requirements-peers.txt).")

_MIXED_PRECISION = {"fp32": "--nomixed_precision", "bf16": "--mixed_precision=bfloat16"}


def ours(precision, size, work):
  """tokens/s of run_pretraining.py's T-TA at `precision` over the timed steps."""
  layers, hidden, heads, ffn = size
  output_dir = os.path.join(work, precision)
  # Lengths are drawn from mean +- 25% and cut to --max_seq_length: a mean of 4/3 x length puts
  # the shortest at `length`, so every row is exactly `length` tokens.
  subprocess.run(
    [
      sys.executable,
      os.path.join(_REPO, "run_pretraining.py"),
      f"--output_dir={output_dir}",
      "--model_type=tta",
      "--synthetic_data",
      f"--synthetic_length={-(-4 * FLAGS.length // 3)}",
      f"--max_seq_length={FLAGS.length}",
      f"--config_json={json.dumps({'vocab_size': FLAGS.vocab_size})}",
      f"--num_hidden_layers={layers}",
      f"--hidden_size={hidden}",
      f"--num_attention_heads={heads}",
      f"--intermediate_size={ffn}",
      f"--max_position_embeddings={max(FLAGS.length, 64)}",
      f"--train_batch_size={FLAGS.train_batch_size}",
      f"--num_train_steps={FLAGS.warmup_steps + FLAGS.steps}",
      "--num_warmup_steps=0",
      f"--steps_per_loop={FLAGS.warmup_steps}",
      f"--save_checkpoints_steps={FLAGS.warmup_steps + FLAGS.steps}",
      _MIXED_PRECISION[precision],
    ],
    check=True,
    stdout=subprocess.DEVNULL,
  )
  with open(os.path.join(output_dir, "train_summary.json")) as f:
    summary = json.load(f)
  return summary["tokens_per_second"], summary["timed_steps"]


def peer(size):
  """tokens/s of HF BertForMaskedLM of `size` trained with PyTorch on this CPU."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  layers, hidden, heads, ffn = size
  torch.manual_seed(0)
  config = transformers.BertConfig(
    vocab_size=FLAGS.vocab_size,
    hidden_size=hidden,
    num_hidden_layers=layers,
    num_attention_heads=heads,
    intermediate_size=ffn,
    max_position_embeddings=max(FLAGS.length, 64),
  )
  model = transformers.BertForMaskedLM(config)
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
  ids = torch.randint(5, FLAGS.vocab_size, (FLAGS.train_batch_size, FLAGS.length))
  mask = torch.ones_like(ids)

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()

  for _ in range(FLAGS.warmup_steps):
    step()
  start = time.perf_counter()
  for _ in range(FLAGS.steps):
    step()
  seconds = time.perf_counter() - start
  threads = torch.get_num_threads()
  return FLAGS.steps * ids.numel() / seconds, f"torch {torch.__version__}, {threads} threads"


def main(argv):
  del argv
  try:
    size = [int(v) for v in FLAGS.size]
  except ValueError:
    raise cli.InputError(f"--size: expected layers,hidden,heads,ffn, got {FLAGS.size}") from None
  if len(size) != 4:
    raise cli.InputError(f"--size: expected layers,hidden,heads,ffn, got {FLAGS.size}")
  unknown = sorted(set(FLAGS.precisions) - set(_MIXED_PRECISION))
  if unknown:
    raise cli.InputError(f"--precisions: {unknown} not among {sorted(_MIXED_PRECISION)}")
  rows = []
  with tempfile.TemporaryDirectory() as work:
    for precision in FLAGS.precisions:
      tokens_per_second, timed = ours(precision, size, work)
      rows.append((f"tta (run_pretraining.py), {precision}", tokens_per_second, f"{timed} steps"))
  if FLAGS.peer:
    tokens_per_second, detail = peer(size)
    rows.append(("HF BertForMaskedLM (PyTorch), fp32", tokens_per_second, detail))
  print(f"CPU: {machine.cpu_and_cores()}; commit {machine.git_commit()}")
  print(
    f"{'x'.join(FLAGS.size)} (layers x hidden x heads x ffn), vocab {FLAGS.vocab_size}, batch "
    f"{FLAGS.train_batch_size} x {FLAGS.length} tokens, {FLAGS.steps} steps timed"
  )
  print("| trainer | tokens/s | |\n|---|---:|---|")
  for name, tokens_per_second, detail in rows:
    print(f"| {name} | {tokens_per_second:,.0f} | {detail} |")


if __name__ == "__main__":
  cli.run(main)

"""Before/after timings of each inference optimisation, one at a time (docs/runtime.md).

Paper-size random models, one 20-word STS-B sentence, batch 1, median of --runs: the fused K/V
projection, no padding to a multiple of 8, and XLA (jit_compile) through the public API.

  python scripts/ablate_inference.py [--runs=50] [--data_dir=...]
"""

import os
import sys
import time

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kinds  # noqa: E402  pylint: disable=g-import-not-at-top
from util import io_utils  # noqa: E402  pylint: disable=g-import-not-at-top
from util import machine  # noqa: E402  pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_integer("runs", 50, "Timed runs per cell.")
flags.DEFINE_integer("warmup", 5, "Untimed runs per cell.")
flags.DEFINE_integer("words", 20, "Sentence length in words.")
io_utils.define_data_dir_flag()


def median_ms(call, runs, warmup):
  for _ in range(warmup):
    call()
  seconds = []
  for _ in range(runs):
    start = time.perf_counter()
    call()
    seconds.append(time.perf_counter() - start)
  return 1e3 * float(np.median(seconds))


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from lm import inference  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  from reproduction import benchmark  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top

  root = io_utils.data_root(FLAGS.data_dir)
  vocab = os.path.join(root, "reference-vocab", "tta-vocab-lower.sub-32k.txt")
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  sentence = benchmark.sentences_of_lengths(benchmark.stsb_sentences(root), [FLAGS.words])[
    FLAGS.words
  ][0]
  config = modeling.TTAConfig(vocab_size=tokenizer.vocab_size)
  models = {}
  for model_type in kinds.PRETRAINABLE:
    tf.keras.utils.set_random_seed(1)
    models[model_type] = modeling.build_model(config, model_type)
  print(f"sentence ({FLAGS.words:d} words): {sentence}")
  print(f"load average at start: {machine.load_average()}")

  tta = inference.NeuralLM(models["tta"], tokenizer)
  ids, _ = tta.tokenize([sentence])
  exact = tta._pad(ids)  # pylint: disable=protected-access
  width = -(-len(ids[0]) // 8) * 8
  padded = (
    np.pad(exact.input_ids, [[0, 0], [0, width - len(ids[0])]]),
    np.pad(exact.input_mask, [[0, 0], [0, width - len(ids[0])]]),
  )

  @tf.function(autograph=False)
  def per_layer_kv(input_ids, input_mask):
    return models["tta"].encode({"input_ids": input_ids, "input_mask": input_mask})[0]

  @tf.function(autograph=False)
  def fused(input_ids, input_mask):
    # The NeuralLM's encoder: its ScoringGraph holds the fused K/V snapshot.
    return tta.graph.encode(input_ids, input_mask)[0]

  rows = []
  for name, before, after in (
    (
      f"T-TA encoder: fused K/V ({len(ids[0])} tokens)",
      lambda: per_layer_kv(exact.input_ids, exact.input_mask).numpy(),
      lambda: fused(exact.input_ids, exact.input_mask).numpy(),
    ),
    (
      f"T-TA encoder: no padding ({len(ids[0])} -> {width:d} tokens before)",
      lambda: fused(*padded).numpy(),
      lambda: fused(exact.input_ids, exact.input_mask).numpy(),
    ),
  ):
    rows.append(
      (
        name,
        median_ms(before, FLAGS.runs, FLAGS.warmup),
        median_ms(after, FLAGS.runs, FLAGS.warmup),
      )
    )
  for model_type, model in models.items():
    plain = inference.NeuralLM(model, tokenizer)
    xla = inference.NeuralLM(model, tokenizer, jit_compile=True)
    for task in ("sts", "rerank"):
      rows.append(
        (
          f"{model_type} {task}: XLA",
          median_ms(benchmark.task_call(plain, task, sentence), FLAGS.runs, FLAGS.warmup),
          median_ms(benchmark.task_call(xla, task, sentence), FLAGS.runs, FLAGS.warmup),
        )
      )
  print("\n| optimisation | before ms | after ms | speed-up |")
  print("|---|---:|---:|---:|")
  for name, before, after in rows:
    print(f"| {name} | {before:.2f} | {after:.2f} | {before / after:.2f}x |")
  print(f"\nload average at end: {machine.load_average()}")


if __name__ == "__main__":
  app.run(main)

"""Seconds per MWER training epoch of T-TA and of the biLM over the same N-best lists, one run.

Both train on the same seeded --sample_lists of the pooled --sets with run_mwer.py's batches and
flags; steps alternate between the models, each model's first (tracing) step is timed apart.
Printed (and --output_json): per model the epoch's seconds, per list, rows and tokens, the
projected epoch over all lists and the biLM / T-TA ratio, with the CPU, load and commit.

  python scripts/benchmark_mwer.py --tta=runs/reproduce/full/models/tta \\
      --bilm=runs/reproduce/full/models/bilm
  python scripts/benchmark_mwer.py --random_size=3,256,4,1024 --vocab_file=VOCAB  # random models
"""

import json
import os
import sys
import tempfile
import time

from absl import flags
from absl import logging

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from nbest import settings  # noqa: E402
from util import cli  # noqa: E402
from util import io_utils  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("tta", None, "T-TA model dir.")
flags.DEFINE_string("bilm", None, "biLM model dir (the same vocab and normalisation as --tta).")
flags.DEFINE_list(
  "random_size",
  None,
  "Without --tta/--bilm: random models of layers,hidden,heads,ffn over --vocab_file "
  "(LibriSpeech normalisation, lower-cased).",
)
flags.DEFINE_string("vocab_file", None, "The vocab of --random_size models.")
flags.DEFINE_list("sets", ["dev_clean", "dev_other"], "ESPnet N-best sets, pooled.")
flags.DEFINE_integer("sample_lists", 40, "Seeded sample of the pooled lists timed.")
flags.DEFINE_integer("sample_seed", 0, "Seed of the sample.")
flags.DEFINE_enum("setting", "full", list(settings.SETTINGS), "First-pass setting.")
flags.DEFINE_integer("lists_per_batch", 8, "As run_mwer.py.")
flags.DEFINE_integer("hyps_per_list", 10, "As run_mwer.py.")
flags.DEFINE_enum(
  "regularizer", "pretraining", ["pretraining", "distillation", "none"], "As run_mwer.py."
)
flags.DEFINE_float("regularizer_weight", 0.1, "As run_mwer.py.")
flags.DEFINE_bool("dropout", True, "As run_mwer.py.")
flags.DEFINE_integer("intra_op", 0, "TF intra-op threads (0: one per usable core).")
flags.DEFINE_integer("inter_op", 0, "TF inter-op threads (0: one per usable core).")
flags.DEFINE_string("output_json", None, "Also write the figures here.")
io_utils.define_data_dir_flag()

KINDS = ("tta", "bilm")


def random_models(work):
  """Random T-TA and biLM model dirs of --random_size in `work`; returns {kind: dir}."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from lm import model_dir  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top

  if not FLAGS.vocab_file or len(FLAGS.random_size) != 4:
    raise cli.InputError("--random_size needs layers,hidden,heads,ffn and --vocab_file")
  layers, hidden, heads, ffn = (int(v) for v in FLAGS.random_size)
  vocab = tokenization.load_vocab(FLAGS.vocab_file)
  config = modeling.TTAConfig(
    vocab_size=len(vocab),
    num_hidden_layers=layers,
    hidden_size=hidden,
    num_attention_heads=heads,
    intermediate_size=ffn,
    mask_token_id=vocab["[MASK]"],
    normalization="librispeech",
  )
  dirs = {}
  for kind in KINDS:
    tf.keras.utils.set_random_seed(1)
    dirs[kind] = os.path.join(work, kind)
    model_dir.save_model_dir(modeling.build_model(config, kind), FLAGS.vocab_file, dirs[kind])
  return dirs


def trainer_of(path, lists, names):
  """(mwer.Trainer, prepared lists) of the model dir `path`, as run_mwer.py trains it."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from finetuning import mwer  # pylint: disable=g-import-not-at-top
  from finetuning import mwer_data  # pylint: disable=g-import-not-at-top
  from lm import inference  # pylint: disable=g-import-not-at-top
  from nbest import combination  # pylint: disable=g-import-not-at-top
  import optimization  # pylint: disable=g-import-not-at-top

  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  with strategy.scope():
    model, tokenizer = inference.load_model(path)
    teacher = inference.load_model(path)[0] if FLAGS.regularizer == "distillation" else None
    scorer = mwer.NeuralScorer(model, tokenizer, regularizer=FLAGS.regularizer, teacher=teacher)
    first_pass = settings.SETTINGS[FLAGS.setting].parts
    start = combination.Weights.interpolation(first_pass, 0.0, combination.MWER_LM)
    weights = mwer.CombinationWeights(start)
    optimizers = (
      optimization.create_optimizer(2e-5, 1000, 0),
      optimization.create_optimizer(1e-2, 1000, 0, 0.0, clip_norm=None),
    )
    optimizers[0].build(model.trainable_variables)
    optimizers[1].build(list(weights.trainable_variables))
  prepared, _ = mwer_data.prepare(lists, scorer.inference_lm().tokenize, names, FLAGS.hyps_per_list)
  trainer = mwer.Trainer(
    strategy, scorer, weights, optimizers, FLAGS.regularizer_weight, FLAGS.dropout, 0
  )
  return trainer, prepared


def epoch_batches(num_lists):
  """The batches of one epoch (list indices), the first once more at the end (see docstring)."""
  from finetuning import mwer_data  # pylint: disable=g-import-not-at-top

  steps = mwer_data.steps_per_epoch(num_lists, FLAGS.lists_per_batch)
  batches = [mwer_data.batch_indices(num_lists, FLAGS.lists_per_batch, 0, s) for s in range(steps)]
  return batches + batches[:1]


def time_models(dirs, lists, names):
  """Alternating steps of every model; returns {kind: figures}."""
  trainers = {kind: trainer_of(path, lists, names) for kind, path in dirs.items()}
  batches = epoch_batches(len(lists))
  figures = {}
  for kind, (trainer, prepared) in trainers.items():
    start = time.perf_counter()
    trainer.step([prepared[i] for i in batches[0]], 0)
    inputs = trainer.scorer.inputs(prepared)
    figures[kind] = {
      "trace_and_first_step_seconds": time.perf_counter() - start,
      "epoch_seconds": 0.0,
      "rows_per_epoch": int(inputs["input_ids"].shape[0]),
      "row_tokens_per_epoch": int(inputs["input_mask"].sum()),
      "hypotheses": sum(len(p.texts) for p in prepared),
    }
  for number, batch in enumerate(batches[1:], 1):
    for kind, (trainer, prepared) in trainers.items():
      start = time.perf_counter()
      trainer.step([prepared[i] for i in batch], number)
      figures[kind]["epoch_seconds"] += time.perf_counter() - start
    logging.info(
      "step %d/%d: %s",
      number,
      len(batches) - 1,
      ", ".join(f"{k} {f['epoch_seconds']:.1f} s" for k, f in figures.items()),
    )
  return figures


def main(argv):
  del argv
  threads = machine.pin_threads(FLAGS.intra_op, FLAGS.inter_op)
  from nbest import types  # pylint: disable=g-import-not-at-top
  from nbest.formats import espnet  # pylint: disable=g-import-not-at-top

  with cli.user_input():
    pooled = [l for s in FLAGS.sets for l in espnet.read_espnet_nbest(s, FLAGS.data_dir)]
    scores = pooled[0].hyps[0].scores
    names = tuple(settings.first_pass_weights(FLAGS.setting, scores, prefer_parts=True))
  lists = types.sample_lists(pooled, FLAGS.sample_lists, FLAGS.sample_seed)
  with tempfile.TemporaryDirectory() as work:
    if FLAGS.tta or FLAGS.bilm:
      if not (FLAGS.tta and FLAGS.bilm):
        raise cli.InputError("give both --tta and --bilm (or --random_size)")
      dirs = {"tta": FLAGS.tta, "bilm": FLAGS.bilm}
    else:
      dirs = random_models(work)
    with cli.user_input():
      figures = time_models(dirs, lists, names)
  for f in figures.values():
    f["seconds_per_list"] = f["epoch_seconds"] / len(lists)
    f["projected_epoch_seconds_all_lists"] = f["seconds_per_list"] * len(pooled)
  result = {
    "models": dirs,
    "sets": FLAGS.sets,
    "lists_timed": len(lists),
    "lists_pooled": len(pooled),
    "flags": {
      name: FLAGS[name].value
      for name in (
        "setting",
        "lists_per_batch",
        "hyps_per_list",
        "regularizer",
        "regularizer_weight",
        "dropout",
        "sample_seed",
      )
    },
    "figures": figures,
    "bilm_over_tta": figures["bilm"]["epoch_seconds"] / figures["tta"]["epoch_seconds"],
    "environment": dict(machine.environment(threads), load_average=machine.load_average()),
    "commit": machine.git_commit(),
  }
  print(report(result))
  if FLAGS.output_json:
    io_utils.write_atomically(FLAGS.output_json, json.dumps(result, indent=2) + "\n")


def report(result):
  """The figures as a few lines of text."""
  env = result["environment"]
  lines = [
    f"MWER epoch over {result['lists_timed']} lists (seeded sample of {result['lists_pooled']}, "
    f"{', '.join(result['sets'])}), {json.dumps(result['flags'])}",
    f"CPU {env['cpu']}, {env['cores_usable']} usable cores, threads {env['intra_op_threads']}/"
    f"{env['inter_op_threads']}, load {env['load_average']}, TF {env['tensorflow']}, commit "
    f"{result['commit']}",
    "| model | epoch s | s / list | rows | row tokens | first step (trace) s | "
    "projected epoch, all lists |",
    "|---|---|---|---|---|---|---|",
  ]
  for kind, f in result["figures"].items():
    lines.append(
      f"| {kind} | {f['epoch_seconds']:.1f} | {f['seconds_per_list']:.3f} | "
      f"{f['rows_per_epoch']} | {f['row_tokens_per_epoch']} | "
      f"{f['trace_and_first_step_seconds']:.1f} | "
      f"{f['projected_epoch_seconds_all_lists'] / 60:.1f} min |"
    )
  lines.append(f"biLM / T-TA seconds per epoch: {result['bilm_over_tta']:.1f}x")
  return "\n".join(lines)


if __name__ == "__main__":
  cli.run(main)

"""An MWER training run: epochs of steps, checkpoints, exact resume, held-out selection.

A run's directory holds ckpt-N (model, both optimizers, weights, step, the epoch's running sums),
epochs.jsonl (one line per evaluated epoch) and best/ (the selected epoch's model dir).
"""

import dataclasses
import json
import os
import shutil
import time

from absl import logging
import numpy as np
import tensorflow as tf

from finetuning import mwer
from finetuning import mwer_data
from nbest import combination as nbest_combination
import optimization
from pretraining import training_loop
from util import cli
from util import io_utils
from util import progress

EPOCH_LOG = "epochs.jsonl"
BEST_DIR = "best"
_KEEP_CHECKPOINTS = 2


@dataclasses.dataclass
class MwerParams:
  """The settings of a run; run_mwer.py makes its flags from the `cli.param` fields."""

  epochs: int = cli.param("Passes over the training lists.", 3, lower_bound=1)
  lists_per_batch: int = cli.param("N-best lists per step.", 8, lower_bound=1)
  hyps_per_list: int = cli.param(
    "Top-k hypotheses of each list in training (first-pass rank order), to bound a step's "
    "cost; evaluation always uses whole lists.",
    10,
    lower_bound=1,
  )
  # absl's float flags take nan and inf: each is refused while parsing, before any list is read.
  learning_rate: float = cli.param(
    "Peak learning rate of the LM's weights.", 2e-5, check=cli.positive
  )
  weights_learning_rate: float = cli.param(
    "Peak learning rate of the combination weights (first-pass, LM and length weights).",
    1e-2,
    check=cli.positive,
  )
  warmup_fraction: float = cli.param(
    "Linear warmup, as a fraction of the run's steps.", 0.1, check=cli.fraction
  )
  weight_decay_rate: float = cli.param(
    "Decoupled weight decay of the LM's weights.", 0.01, check=cli.non_negative
  )
  regularizer: str = cli.param(
    "pretraining: the LM's own pretraining loss on the lists' references; distillation: KL "
    "from the frozen starting model's token distributions at the hypotheses' scored tokens; "
    "none.",
    "pretraining",
    mwer.REGULARIZERS,
  )
  dropout: bool = cli.param("Train the LM with its config's dropout.", True)
  seed: int = cli.param("Seed of the batch order, the dropout and the biLM's MLM masks.", 12345)
  save_every_steps: int = cli.param(
    "Checkpoint interval in steps (0: at each epoch's end only).", 0, lower_bound=0, result=False
  )
  # Set by the caller for each run, not flags (the job's identity has --regularizer_weights).
  output_dir: str = cli.setting(result=False)
  regularizer_weight: float = cli.setting(0.0, result=False)


@dataclasses.dataclass
class _State:
  """The checkpointed objects of a run."""

  weights: mwer.CombinationWeights
  lm_optimizer: object
  weights_optimizer: object
  step: tf.Variable
  # The MWER loss sum, expected errors, regularizer sum, lists and steps of the current epoch so
  # far (row 0) and of the last finished epoch (row 1), which its evaluation reports.
  epoch_sums: tf.Variable
  checkpoint: tf.train.Checkpoint

  @classmethod
  def create(cls, strategy, scorer, combination, params, total_steps):
    warmup = int(round(params.warmup_fraction * total_steps))
    with strategy.scope():
      weights = mwer.CombinationWeights(combination)
      lm_optimizer = optimization.create_optimizer(
        params.learning_rate, total_steps, warmup, params.weight_decay_rate
      )
      weights_optimizer = optimization.create_optimizer(
        params.weights_learning_rate, total_steps, warmup, 0.0, clip_norm=None
      )
      if scorer.trainable_variables:
        lm_optimizer.build(list(scorer.trainable_variables))
      weights_optimizer.build(list(weights.trainable_variables))
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    sums = tf.Variable(np.zeros([2, 5]), dtype=tf.float64, trainable=False, name="epoch_sums")
    objects = dict(
      weights=weights,
      lm_optimizer=lm_optimizer,
      weights_optimizer=weights_optimizer,
      step=step,
      epoch_sums=sums,
    )
    if scorer.model is not None:
      objects["model"] = scorer.model
    return cls(weights, lm_optimizer, weights_optimizer, step, sums, tf.train.Checkpoint(**objects))


class MwerRun(object):
  """One rescorer's training in params.output_dir.

  Args:
    strategy: a `tf.distribute` strategy under whose scope the scorer's model was built.
    train_lists: PreparedLists of the top-k hypotheses; `heldout_lists` whole.
    record: JSON-able facts for the exported model (data, split, starting model).
    lm_options: keyword arguments of the held-out scoring's `inference.NeuralLM`.
  """

  def __init__(
    self, params, strategy, scorer, combination, train_lists, heldout_lists, record, lm_options
  ):
    if not train_lists or not heldout_lists:
      raise ValueError("MWER training needs training and held-out lists")
    self.params, self.strategy, self.scorer = params, strategy, scorer
    self.train_lists, self.heldout_lists = train_lists, heldout_lists
    self.record, self.lm_options = record, lm_options
    # The variables weigh the features in the lists' order.
    combination = combination.aligned(train_lists[0].feature_names)
    self.steps_per_epoch = mwer_data.steps_per_epoch(len(train_lists), params.lists_per_batch)
    self.total_steps = params.epochs * self.steps_per_epoch
    self.state = _State.create(strategy, scorer, combination, params, self.total_steps)
    self.trainer = mwer.Trainer(
      strategy,
      scorer,
      self.state.weights,
      (self.state.lm_optimizer, self.state.weights_optimizer),
      params.regularizer_weight,
      params.dropout,
      params.seed,
    )

  @property
  def run_dir(self):
    return self.params.output_dir

  @property
  def step(self):
    return int(self.state.step.numpy())

  def train(self):
    """Trains or resumes, under the run dir's lock, to the last epoch or a stop signal; returns
    {finished, step, epochs (epochs.jsonl's records), best (record or None), best_dir}."""
    os.makedirs(self.run_dir, exist_ok=True)
    with training_loop.output_dir_lock(self.run_dir):
      resumed = training_loop.restore(self.state.checkpoint, self.run_dir)
      if resumed:
        logging.info("resumed from %s at step %d", resumed, self.step)
      self._evaluate_pending()
      bar = progress.Progress(
        os.path.basename(self.run_dir.rstrip("/")), total=self.total_steps - self.step, unit="steps"
      )
      stopped_by, _ = training_loop.run(
        self.state.checkpoint,
        self.run_dir,
        lambda: self.step,
        self.total_steps,
        lambda num: self._train_step(bar),
        resumed=resumed,
        keep=_KEEP_CHECKPOINTS,
        save_every=(self.steps_per_epoch, self.params.save_every_steps),
        evaluate=lambda step: self._evaluate_pending(),
        eval_every=self.steps_per_epoch,
        strategy=self.strategy,
      )
      epochs = read_epoch_log(self.run_dir)
    return {
      "finished": stopped_by is None,
      "step": self.step,
      "epochs": epochs,
      "best": best_epoch(epochs),
      "best_dir": os.path.join(self.run_dir, BEST_DIR),
    }

  def _train_step(self, bar):
    step = self.step
    indices = mwer_data.batch_indices(
      len(self.train_lists), self.params.lists_per_batch, self.params.seed, step
    )
    sums = self.trainer.step([self.train_lists[i] for i in indices], step)
    running, finished = self.state.epoch_sums.numpy()
    running += [sums["mwer"], sums["expected_errors"], sums["regularizer"], sums["lists"], 1.0]
    if (step + 1) % self.steps_per_epoch == 0:
      running, finished = np.zeros(5), running
    self.state.epoch_sums.assign([running, finished])
    self.state.step.assign(step + 1)
    lists = max(sums["lists"], 1.0)
    bar.update(
      1,
      note=f"step {step + 1}/{self.total_steps}, MWER loss {sums['mwer'] / lists:+.4f}, "
      f"expected errors {sums['expected_errors'] / lists:.3f}, regularizer "
      f"{sums['regularizer']:.4f}",
    )

  def _evaluate_pending(self):
    """Evaluates the epoch the state ends (epoch 0 at the start) unless epochs.jsonl has it."""
    if self.step % self.steps_per_epoch:
      return
    epoch = self.step // self.steps_per_epoch
    if any(r["epoch"] == epoch for r in read_epoch_log(self.run_dir)):
      return
    start = time.time()
    result = self.evaluate()
    sums = self.state.epoch_sums.numpy()[1]
    lists, steps = max(sums[3], 1.0), max(sums[4], 1.0)
    record = dict(
      result,
      epoch=epoch,
      step=self.step,
      train_mwer=float(sums[0] / lists) if epoch else None,
      train_expected_errors=float(sums[1] / lists) if epoch else None,
      train_regularizer=float(sums[2] / steps) if epoch else None,
      eval_seconds=time.time() - start,
    )
    logging.info(
      "%s epoch %d: held-out WER %.3f, MWER loss %+.4f, expected errors %.3f",
      self.run_dir,
      epoch,
      record["heldout_wer"],
      record["heldout_mwer"],
      record["heldout_expected_errors"],
    )
    best = best_epoch(read_epoch_log(self.run_dir) + [record])
    if best is record:
      self._export_best(record)
    _append_epoch(self.run_dir, record)

  def evaluate(self):
    """Held-out WER over whole lists, MWER loss and expected errors over the top-k, weights."""
    tables = self.scorer.lm_table(self.heldout_lists, **self.lm_options)
    combination = self.state.weights.to_combination()
    choice = nbest_combination.choose(
      mwer.feature_tables(combination, self.heldout_lists, tables), combination.vector()
    )
    errors = sum(p.errors[c] for p, c in zip(self.heldout_lists, choice))
    words = sum(p.reference_words for p in self.heldout_lists)
    k = self.params.hyps_per_list
    arrays = mwer_data.padded([_top(p, k) for p in self.heldout_lists])
    lm = np.zeros_like(arrays["words"])
    for row, table in enumerate(tables):
      lm[row, : min(k, len(table))] = table[:k]
    loss, expected = mwer.mwer_loss(
      self.state.weights(arrays["features"], lm, arrays["words"]),
      arrays["errors"],
      arrays["valid"],
    )
    return {
      "heldout_wer": 100.0 * float(errors) / max(words, 1),
      "heldout_errors": int(errors),
      "heldout_mwer": float(tf.reduce_mean(loss)),
      "heldout_expected_errors": float(tf.reduce_mean(expected)),
      "weights": combination.to_dict(),
    }

  def _export_best(self, record):
    """Writes best/ for `record` (a temporary dir renamed over the old one)."""
    tmp = io_utils.make_temp_dir(self.run_dir, ".best-")
    combination = self.state.weights.to_combination()
    facts = dict(
      self.record,
      epoch=record["epoch"],
      step=record["step"],
      heldout_wer=record["heldout_wer"],
      regularizer=self.scorer.regularizer,
      regularizer_weight=self.params.regularizer_weight,
      **{
        name: getattr(self.params, name)
        for name in ("learning_rate", "weights_learning_rate", "lists_per_batch", "seed")
      },
      hyps_per_list=self.params.hyps_per_list,
      weights=combination.to_dict(),
    )
    self.scorer.export(tmp, facts)
    nbest_combination.save_weights(
      os.path.join(tmp, mwer.WEIGHTS_FILE), combination, {"training": facts}
    )
    best = os.path.join(self.run_dir, BEST_DIR)
    old = best + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(best):
      os.rename(best, old)
    os.rename(tmp, best)
    shutil.rmtree(old, ignore_errors=True)


def _top(prepared, k):
  return dataclasses.replace(
    prepared,
    texts=prepared.texts[:k],
    ids=prepared.ids[:k],
    features=prepared.features[:k],
    words=prepared.words[:k],
    errors=prepared.errors[:k],
  )


def read_epoch_log(run_dir):
  """The records of run_dir/epochs.jsonl (a last line cut off by a crash is ignored)."""
  path = os.path.join(run_dir, EPOCH_LOG)
  if not os.path.exists(path):
    return []
  records = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        break
  return records


def _append_epoch(run_dir, record):
  """Appends one record to epochs.jsonl, durably (rewritten atomically: the file is short)."""
  records = read_epoch_log(run_dir) + [record]
  io_utils.write_atomically(
    os.path.join(run_dir, EPOCH_LOG), "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
  )


def best_epoch(records):
  """The selected record: epochs >= 1, lowest held-out WER, then lowest held-out MWER loss,
  then the earliest; None before the first epoch ends."""
  trained = [r for r in records if r["epoch"] >= 1]
  if not trained:
    return None
  return min(trained, key=lambda r: (r["heldout_wer"], r["heldout_mwer"], r["epoch"]))

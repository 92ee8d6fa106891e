"""pretraining/distillation.py and run_pretraining.py --teacher: the mixed loss against NumPy, the
teacher's distribution against the PLL inference path, T-TA's self-unknown property after distilled
steps, the run identity, refusals in one line.

Models are tiny and random; the teacher a biLM model dir over the special tokens and WORDS.
"""

import json
import types

import commands
from conftest import SHARP_ATTENTION
from conftest import WORDS
from conftest import assert_self_unknown
from conftest import hf_bert_config
from conftest import hf_bert_tensors
from conftest import padded_batch
from conftest import tiny_bert
from conftest import tiny_config
from conftest import write_hf_bert_dir
import keras
import numpy as np
import pytest
import tensorflow as tf

from lm import inference
from lm import model_dir
import modeling
from pretraining import distillation
from pretraining import input_pipeline
from pretraining import losses
from pretraining import training_job
import tokenization

VOCAB = list(tokenization.SPECIAL_TOKENS) + list(WORDS)
V = len(VOCAB)
WORD_IDS = list(range(len(tokenization.SPECIAL_TOKENS), V))
SOS, EOS = VOCAB.index("[SOS]"), VOCAB.index("[EOS]")


def write_model(root, model_type, seed, **overrides):
  """A random tiny model dir of `model_type` over VOCAB; returns its path."""
  root.mkdir(parents=True, exist_ok=True)
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n")
  keras.utils.set_random_seed(seed)
  model = modeling.build_model(tiny_config(vocab_size=V, **overrides), model_type)
  path = str(root / model_type)
  model_dir.save_model_dir(model, str(vocab), path)
  return path


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
  return write_model(tmp_path_factory.mktemp("teacher"), "bilm", seed=5)


def sentences_batch(lengths, seed=0):
  """A T-TA training batch (`make_targets`) of `[SOS] words [EOS]` rows of `lengths` tokens."""
  ids, mask = padded_batch(lengths, WORD_IDS, np.random.default_rng(seed))
  for row, n in enumerate(lengths):
    ids[row, 0], ids[row, n - 1] = SOS, EOS
  return input_pipeline.make_targets(
    {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask)},
    "tta",
    tf.constant([0, 0], tf.int64),
    V,
    VOCAB.index("[MASK]"),
    input_pipeline.special_ids_from_vocab(dict(zip(VOCAB, range(V)))),
  )


def log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def expected_loss(student_logits, teacher_log_probs, ids, mask, weight, temperature):
  """The module's L by hand in float64: student_logits, teacher_log_probs [B, T, V], ids and mask
  [B, T]; the teacher predicts every real position but the first ([SOS])."""
  total = 0.0
  for b in range(ids.shape[0]):
    n = int(mask[b].sum())
    for t in range(n):
      p = log_softmax(student_logits[b, t].astype(np.float64))
      ce = -p[ids[b, t]]
      if t == 0:
        total += ce
        continue
      q_t = log_softmax(teacher_log_probs[b, t].astype(np.float64) / temperature)
      p_t = log_softmax(student_logits[b, t].astype(np.float64) / temperature)
      kl = float(np.sum(np.exp(q_t) * (q_t - p_t)))
      total += (1 - weight) * ce + weight * temperature**2 * kl
  return total


def fake_teacher(model_type="bilm"):
  return types.SimpleNamespace(model_type=model_type)


def student(seed=3, **overrides):
  keras.utils.set_random_seed(seed)
  return modeling.build_model(tiny_config(vocab_size=V, **overrides), "tta")


def at_teacher_positions(per_position, mask):
  """[B, T, V] -> [r, V], the rows of the positions the teacher predicts, row by row."""
  rows = [per_position[b, t] for b in range(mask.shape[0]) for t in range(1, int(mask[b].sum()))]
  return np.stack(rows)


# ------------------------------------------------------------------ the loss


def test_weight_zero_is_the_plain_tta_loss_exactly():
  model = student()
  features = sentences_batch([5, 3, 7])
  rng = np.random.default_rng(1)
  teacher = log_softmax(rng.normal(size=(5 - 1 + 3 - 1 + 7 - 1, V))).astype(np.float32)
  distiller = distillation.Distiller(fake_teacher(), distillation.Settings(2.0, 0.0))
  loss, terms = distiller.training_loss(model, features, tf.constant(teacher), 1.0, training=False)
  plain = losses.forward_loss_terms(model, features, training=False)
  assert float(loss) == float(plain["loss_sum"])
  for name in ("loss_sum", "weight_sum", "correct_sum", "ce_sum"):
    assert float(terms[name]) == float(plain[name]), name


@pytest.mark.parametrize("weight, temperature", [(1.0, 1.0), (1.0, 2.5), (0.3, 2.0)])
def test_the_loss_is_the_formula_computed_in_numpy(weight, temperature):
  """Against a teacher equal to a known distribution at every position, through the model."""
  model = student()
  features = sentences_batch([6, 4, 2])
  ids, mask = features["input_ids"].numpy(), features["input_mask"].numpy()
  rng = np.random.default_rng(2)
  known = log_softmax(rng.normal(scale=2.0, size=ids.shape + (V,)))  # [B, T, V]
  teacher = tf.constant(at_teacher_positions(known, mask), tf.float32)
  distiller = distillation.Distiller(fake_teacher(), distillation.Settings(temperature, weight))
  loss, terms = distiller.training_loss(model, features, teacher, 2.0, training=False)
  hidden, _ = model.encode(features, training=False)
  logits = model.lm_head(hidden, model.embeddings.word_embeddings).numpy()
  want = expected_loss(logits, known.astype(np.float32), ids, mask, weight, temperature)
  np.testing.assert_allclose(float(terms["loss_sum"]), want, rtol=1e-5)
  np.testing.assert_allclose(float(loss), want / 2.0, rtol=1e-5)
  # The logged cross-entropy stays the plain one.
  plain = expected_loss(logits, known.astype(np.float32), ids, mask, 0.0, 1.0)
  np.testing.assert_allclose(float(terms["ce_sum"]), plain, rtol=1e-5)


def test_a_student_equal_to_the_teacher_has_no_soft_term():
  logits = np.random.default_rng(3).normal(size=(4, V)).astype(np.float32)
  terms = distillation.mixed_terms(
    tf.constant(logits),
    tf.constant([1, 2, 3, 4]),
    tf.ones([4]),
    tf.constant([True, True, True, True]),
    tf.nn.log_softmax(logits),
    distillation.Settings(3.0, 1.0),
  )
  assert abs(float(terms["loss_sum"])) < 1e-5


# ------------------------------------------------------------- the teacher


def test_the_teachers_distribution_is_the_pll_paths_masked_prediction(teacher_dir):
  """Row for row, the distribution of the copy with that position masked; its entry at the token
  is what `NeuralLM.score` (the PLL) gives there."""
  lm = inference.load_lm(teacher_dir, token_budget=16)  # several chunks per batch
  sentences = ["the cat sat on the mat", "a dog ran", "walking far away ."]
  ids, _ = lm.tokenize(sentences)
  input_ids, input_mask = inference.pad_rows(ids, 0, 1)
  features = {"input_ids": tf.constant(input_ids), "input_mask": tf.constant(input_mask)}
  got = distillation.Distiller(lm, distillation.Settings()).teacher_log_probs(features).numpy()
  assert got.shape == (sum(len(x) - 1 for x in ids), V)
  np.testing.assert_allclose(np.exp(got).sum(-1), 1.0, rtol=1e-5)
  pll = np.concatenate([s.token_logprobs for s in lm.score(sentences)])
  targets = [x[t] for x in ids for t in range(1, len(x))]
  np.testing.assert_allclose(got[np.arange(len(targets)), targets], pll, atol=1e-5)
  row = 0
  for b, x in enumerate(ids):
    for t in range(1, len(x)):
      copy = np.array([x]).astype(np.int32)
      copy[0, t] = lm.mask_id
      out = lm.model({"input_ids": copy, "input_mask": np.ones_like(copy)}, training=False)
      np.testing.assert_allclose(got[row], out["log_probs"][0, t].numpy(), atol=1e-5)
      row += 1


# ----------------------------------------------------------------- the run


def params(tmp_path, **kwargs):
  fields = dict(
    output_dir=str(tmp_path / "run"),
    model_type="tta",
    synthetic_data=True,
    synthetic_length=6,
    max_seq_length=8,
    train_batch_size=4,
    num_warmup_steps=0,
    num_train_steps=2,
    steps_per_loop=1,
    learning_rate=1e-2,
    config_overrides=dict(tiny_config(vocab_size=V, **SHARP_ATTENTION).to_dict()),
    install_signal_handlers=False,
  )
  fields.update(kwargs)
  return training_job.JobParams(**fields)


@pytest.mark.slow(seconds=10)
def test_a_distilled_run_keeps_tta_self_unknown_and_records_its_teacher(tmp_path, teacher_dir):
  summary = training_job.run(params(tmp_path, teacher=teacher_dir, distill_weight=0.7))
  assert summary["finished"] and np.all(np.isfinite(summary["step_losses"]))
  run_json = json.loads((tmp_path / "run" / "run.json").read_text())
  assert run_json["teacher"]["temperature"] == 1.0 and run_json["teacher"]["weight"] == 0.7
  assert run_json["teacher"]["model"]["path"] == teacher_dir
  model, _ = model_dir.load_model_dir(str(tmp_path / "run"))
  initial = student(**SHARP_ATTENTION)
  assert any(
    not np.array_equal(a.numpy(), b.numpy())
    for a, b in zip(model.trainable_variables, initial.trainable_variables)
  )

  def run(ids, mask):
    return {"log_probs": model({"input_ids": ids, "input_mask": mask})["log_probs"].numpy()}

  ids, mask = padded_batch([5, 3, 6], WORD_IDS, np.random.default_rng(4))
  assert_self_unknown(run, ids, mask, WORD_IDS)


@pytest.mark.slow(seconds=10)
def test_a_resume_with_another_teacher_or_weight_is_another_job(tmp_path, teacher_dir):
  flags = [
    f"--output_dir={tmp_path / 'run'}",
    "--synthetic_data",
    "--synthetic_length=6",
    "--max_seq_length=8",
    "--train_batch_size=4",
    "--num_warmup_steps=0",
    "--steps_per_loop=1",
    "--hidden_size=32",
    "--num_hidden_layers=1",
    "--num_attention_heads=4",
    "--intermediate_size=37",
    "--max_position_embeddings=16",
  ]
  commands.run("run_pretraining.py", *flags, f"--teacher={teacher_dir}", "--num_train_steps=1")
  other = write_model(tmp_path / "other", "bilm", seed=6)
  for changed in ([f"--teacher={other}"], [f"--teacher={teacher_dir}", "--distill_weight=0.2"]):
    refused = commands.run("run_pretraining.py", *flags, *changed, "--num_train_steps=2", status=2)
    assert "holds another job: teacher" in refused.stderr


def write_headless(path):
  """An HF BertModel dir (no cls.predictions.*) of VOCAB."""
  bert = tiny_bert(VOCAB)
  tensors = {k: v for k, v in hf_bert_tensors(bert).items() if not k.startswith("cls.")}
  config = hf_bert_config(bert, architectures=["BertModel"])
  return write_hf_bert_dir(path, bert, VOCAB, tensors=tensors, config=config)


def other_vocab(tmp_path):
  path = tmp_path / "other_vocab.txt"
  path.write_text("\n".join(VOCAB[:-1] + ["zebra"]) + "\n")
  return str(path)


@pytest.mark.parametrize(
  "kwargs, named",
  [
    (
      dict(vocab_file="{other}"),
      "the records' vocab {other} (24 tokens) is not the vocab of --teacher {teacher} "
      "({teacher}/vocab.txt, 24): id 23 is 'zebra' in the records', ',' in the source's",
    ),
    (dict(teacher="{tta}"), "--teacher {tta} is a tta; a teacher predicts each position"),
    (dict(model_type="bilm"), "--teacher distils into a T-TA kind (the kinds trained on every"),
    (dict(distill_weight=1.5), "--distill_weight 1.5 must be in [0, 1]"),
    (dict(distill_temperature=0.0), "--distill_temperature 0.0 must be > 0"),
    (dict(teacher=None, distill_weight=0.5), "--distill_weight sets the distillation of --teacher"),
    (dict(use_xla=True), "not under --use_xla or --strategy=tpu"),
    (
      dict(max_seq_length=16, teacher="{short}"),
      "takes 8 positions, fewer than --max_seq_length 16",
    ),
    (dict(teacher="{missing}"), "--teacher {missing}: no model dir or checkpoint prefix there"),
    (dict(do_lower_case=False), "do_lower_case False (--do_lower_case) but --teacher {teacher}"),
    (dict(teacher="hf:{headless}"), "--teacher hf:{headless} has no masked-LM head"),
  ],
  ids=[
    "vocab",
    "kind",
    "student",
    "weight",
    "temperature",
    "alone",
    "xla",
    "positions",
    "missing",
    "casing",
    "headless",
  ],
)
def test_a_teacher_that_does_not_fit_is_refused_in_one_line(tmp_path, teacher_dir, kwargs, named):
  paths = dict(
    teacher=teacher_dir,
    other=other_vocab(tmp_path),
    tta=write_model(tmp_path / "tta", "tta", seed=1),
    short=write_model(tmp_path / "short", "bilm", seed=1, max_position_embeddings=8),
    missing=str(tmp_path / "gone"),
    headless=write_headless(tmp_path / "headless"),
  )
  kwargs = {k: v.format(**paths) if isinstance(v, str) else v for k, v in kwargs.items()}
  with pytest.raises((ValueError, FileNotFoundError)) as e:
    training_job.prepare_model(params(tmp_path, **{"teacher": teacher_dir, **kwargs}), False)
  message = str(e.value)
  assert "\n" not in message
  assert named.format(**paths) in message


@pytest.mark.slow(seconds=5)
def test_a_refused_teacher_stops_the_command_before_it_trains(tmp_path, teacher_dir):
  result = commands.run(
    "run_pretraining.py",
    f"--output_dir={tmp_path / 'run'}",
    "--synthetic_data",
    f"--teacher={teacher_dir}",
    "--model_type=unilm",
    status=2,
  )
  assert "error: --teacher distils into a T-TA kind" in result.stderr
  assert not (tmp_path / "run" / "run.json").exists()

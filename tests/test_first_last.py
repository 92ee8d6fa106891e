"""first_last pooling (issue 41): the word-piece mean of the first and last blocks' average, one
definition (ScoringGraph.sentence_vectors) that score.py --vectors, run_sts.py and the SavedModel
all give."""

import json
import os

import commands
from conftest import WORDS
from conftest import tiny_config
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops for loading)

from evaluation import pair_similarity
from lm import inference
from lm import model_dir
import modeling
import tokenization

SENTENCES = ["the cat sat on the mat .", "a dog ran far away", "cats walking"]


def _vocab(root):
  path = root / "vocab.txt"
  path.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(WORDS)) + "\n")
  return str(path)


@pytest.mark.parametrize("model_type", ["tta", "bilm", "unilm"])
def test_first_last_is_the_word_mean_of_the_first_and_last_blocks(tmp_path, model_type):
  """Independent of the pooling code: the first block's output is the last layer of a one-layer
  model with the same embeddings and block 0 (T-TA's keys/values come from the embeddings, the
  others' block 0 reads them too), and the mean runs in NumPy over positions 1 .. n-2."""
  tokenizer = tokenization.FullTokenizer(_vocab(tmp_path), do_lower_case=True)
  tf.keras.utils.set_random_seed(3)
  config = tiny_config(vocab_size=tokenizer.vocab_size, num_hidden_layers=3)
  model = modeling.build_model(config, model_type)
  first_block = modeling.build_model(
    tiny_config(vocab_size=tokenizer.vocab_size, num_hidden_layers=1), model_type
  )
  for layer in ("embeddings", "layer_0"):
    getattr(first_block, layer).set_weights(getattr(model, layer).get_weights())
  lm = inference.NeuralLM(model, tokenizer)
  got = lm.sentence_vectors(SENTENCES, pooling="first_last")
  ids, _ = lm.tokenize(SENTENCES)
  for row, sentence_ids in enumerate(ids):
    inputs = {
      "input_ids": tf.constant([sentence_ids], tf.int32),
      "input_mask": tf.ones([1, len(sentence_ids)], tf.int32),
    }
    first = first_block(inputs)["sequence_output"].numpy()[0]  # [T, D]
    last = model(inputs)["sequence_output"].numpy()[0]
    want = ((first + last) / 2)[1:-1].mean(0)
    np.testing.assert_allclose(got[row], want, rtol=0, atol=1e-5)
  assert not np.allclose(got, lm.sentence_vectors(SENTENCES, pooling="context"), atol=1e-3)


def test_score_run_sts_and_the_saved_model_give_the_same_first_last(tmp_path):
  """The three ways a user gets first_last vectors give the Python path's numbers, on the same
  sentences in the same batch (sorted and distinct, as run_sts.py encodes a set's sentences):
  score.py and run_sts.py its floats exactly, the SavedModel within float32 rounding."""
  tf.keras.utils.set_random_seed(4)
  config = tiny_config(vocab_size=len(tokenization.SPECIAL_TOKENS) + len(WORDS))
  tta = str(tmp_path / "tta")
  model_dir.save_model_dir(modeling.build_model(config, "tta"), _vocab(tmp_path), tta)
  sentences = sorted(SENTENCES)
  want = inference.load_lm(tta).sentence_vectors(sentences, pooling="first_last")
  (tmp_path / "sentences.txt").write_text("\n".join(sentences) + "\n")
  vectors_file = tmp_path / "vectors.jsonl"
  commands.run(
    "score.py",
    f"--model_dir={tta}",
    f"--input_file={tmp_path / 'sentences.txt'}",
    f"--output_file={vectors_file}",
    "--vectors=first_last",
    status=0,
  )
  with open(vectors_file) as f:
    # score.py writes 6 decimals.
    assert [json.loads(line)["vector"] for line in f] == [
      [round(float(v), 6) for v in w] for w in want
    ]
  commands.run(
    "export_saved_model.py", f"--model_dir={tta}", f"--export_dir={tmp_path / 'export'}", status=0
  )
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  exported = loaded.signatures["encode"](texts=tf.constant(sentences))["first_last"].numpy()
  # A graph of its own (its tokenizer in it, grappler's rewrites): float32 rounding apart.
  np.testing.assert_allclose(exported, want, rtol=0, atol=1e-6)
  pairs = [(sentences[0], sentences[1]), (sentences[1], sentences[2]), (sentences[2], sentences[0])]
  (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in pairs))
  out = tmp_path / "sts"
  commands.run(
    "run_sts.py",
    f"--model_dir=tta={tta}",
    "--representations=first_last",
    f"--pairs_file=mine={tmp_path / 'pairs.tsv'}",
    f"--output_dir={out}",
    status=0,
  )
  _, cosines = pair_similarity.read_cosines(os.path.join(out, "pairs", "mine.tsv"))
  index = {s: i for i, s in enumerate(sentences)}
  first, second = ([index[p[k]] for p in pairs] for k in (0, 1))
  assert cosines["tta first_last"] == inference.cosine(want[first], want[second]).tolist()

"""Smoke run: real sentences through the tokenizer and a random T-TA.

Tokenizes a few STS-B sentences with the T-TA authors' vocab, builds a
paper-size T-TA with random weights, and prints, per sentence, the word
pieces, log p(x_t | x_\\t) of each piece, the sentence score, and the norm
of its context vector; then the cosine similarity of each STS-B pair.
Random weights make the numbers meaningless as language modelling; the run
shows that data, tokenizer, model and inference path fit together.

  python smoke.py [--data_dir=...] [--num_pairs=3]
"""

import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import inference
import modeling
import nbest
import sts_data
import tokenization

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Data root (default: $TTA_DATA or "
                    "../shared/data).")
flags.DEFINE_integer("num_pairs", 3, "STS-B dev pairs to show.")


def main(argv):
  del argv
  data_dir = nbest.default_data_dir(FLAGS.data_dir)
  vocab_file = "%s/reference-vocab/tta-vocab-lower.sub-32k.txt" % data_dir
  config = modeling.TTAConfig.from_json_file(
      "%s/reference-vocab/tta-config.layer-3.vocab-lower.sub-32k.json" %
      data_dir)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  tf.keras.utils.set_random_seed(0)
  start = time.time()
  lm = inference.NeuralLM(modeling.build_model(config, "tta"), tokenizer)
  print("random T-TA %dx%d, vocab %d, built in %.1f s" %
        (config.num_hidden_layers, config.hidden_size, config.vocab_size,
         time.time() - start))
  pairs = sts_data.read_stsb("dev", data_dir)[:FLAGS.num_pairs]
  sentences = [s for p in pairs for s in (p.sent1, p.sent2)]
  scores = lm.score(sentences)
  vectors = lm.sentence_vectors(sentences, pooling="context")
  for sentence, scored, vector in zip(sentences, scores, vectors):
    print("\n%s" % sentence)
    print("  " + " ".join("%s/%.2f" % (t, lp) for t, lp in
                          zip(scored.tokens, scored.token_logprobs)))
    print("  log p = %.2f over %d pieces; |context vector| = %.3f" %
          (scored.total, scored.num_tokens, np.linalg.norm(vector)))
  similarity = inference.cosine(vectors[0::2], vectors[1::2])
  print("\nSTS-B dev pairs: gold score vs cosine of random-model vectors")
  for pair, cos in zip(pairs, similarity):
    print("  gold %.2f  cosine %.3f" % (pair.score, cos))


if __name__ == "__main__":
  app.run(main)

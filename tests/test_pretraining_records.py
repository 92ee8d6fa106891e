"""Tests for pretraining/pretraining_records.py: the authors' truncation rule (the records
themselves are checked end to end in test_pretraining_data.py and read back in
test_input_pipeline.py)."""

from pretraining import pretraining_records


def _toy_ids(index, num_pieces):
  """[SOS]=3, distinct piece ids, [EOS]=1: a piece's id tells its position."""
  return [3] + [1000 * index + 10 + i for i in range(num_pieces)] + [1]


def test_truncate_ids_cuts_front_or_back_at_random_seeded_keeping_boundaries():
  max_len, num_pieces = 10, 28  # 20 pieces too many.
  fronts = []
  for index in range(300):
    ids, sentence = _toy_ids(index, num_pieces), f"sentence {index}"
    cut = pretraining_records.truncate_ids(ids, max_len, 7, sentence)
    assert len(cut) == max_len
    assert cut[0] == 3 and cut[-1] == 1  # [SOS] and [EOS] never dropped.
    front = cut[1] - ids[1]  # Pieces cut from the front.
    assert cut[1:-1] == ids[1 + front : 1 + front + max_len - 2]  # A contiguous window.
    # Seeded by (seed, position): same again, not by the ids or the call order.
    assert pretraining_records.truncate_ids(list(ids), max_len, 7, sentence) == cut
    fronts.append(front)
  # Both ends are cut, nearly always within one sentence (only the back or
  # only the front has probability 2 ** -19).
  assert sum(0 < f < 20 for f in fronts) > 250
  assert min(fronts) >= 0 and max(fronts) <= 20
  # The authors' rule flips a fair coin per dropped piece: front ~ Binomial(20, 1/2),
  # mean 10, standard error 0.13 over 300 sentences.
  assert 9.4 < sum(fronts) / len(fronts) < 10.6
  # Another seed gives other cuts.
  other = [
    pretraining_records.truncate_ids(_toy_ids(i, num_pieces), max_len, 8, f"sentence {i}")
    for i in range(300)
  ]
  assert sum(o[1] - 1000 * i - 10 != f for i, (o, f) in enumerate(zip(other, fronts))) > 100
  # One piece too many: dropped from the front in some sentences, the back in others.
  ones = [
    pretraining_records.truncate_ids(_toy_ids(i, 9), max_len, 7, f"s{i}")[1] - 1000 * i - 10
    for i in range(100)
  ]
  assert set(ones) == {0, 1}
  # Sentences that fit are unchanged.
  assert pretraining_records.truncate_ids(_toy_ids(0, 8), max_len, 7, "short") == _toy_ids(0, 8)


def test_make_example_is_the_example_tensorflow_builds():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  table = [pretraining_records._varint(i) for i in range(70000)]
  for n, top in ((1, 10), (3, 127), (40, 30000), (128, 70000), (300, 70000)):
    ids = [(7919 * i + 3) % top for i in range(n)]
    feature = {
      "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
      "input_mask": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * n)),
      "length": tf.train.Feature(int64_list=tf.train.Int64List(value=[n])),
    }
    expected = tf.train.Example(features=tf.train.Features(feature=feature))
    ours = pretraining_records.make_example(ids, table)
    assert tf.train.Example.FromString(ours) == expected
    assert pretraining_records.make_example(ids) == ours

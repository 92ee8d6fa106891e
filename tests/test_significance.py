"""evaluation/significance.py on constructed cases whose answer is known without the code."""

import numpy as np
import pytest
from scipy import stats

from evaluation import significance


def test_identical_systems_differ_by_nothing():
  errors = np.array([0, 2, 1, 0, 3, 1, 0, 0, 4, 1])
  lengths = np.full(10, 10)
  result = significance.compare_error_rates(errors, errors, lengths, seed=1)
  assert result.difference == 0.0
  assert result.p_value == 1.0
  assert (result.low, result.high) == (0.0, 0.0)
  assert result.num_units == 10


def test_a_system_that_fixes_many_errors_is_significant():
  rng = np.random.default_rng(0)
  lengths = rng.integers(5, 30, size=200)
  baseline = rng.binomial(lengths, 0.2)
  # A fixes one error in every utterance that has one.
  better = np.maximum(baseline - 1, 0)
  result = significance.compare_error_rates(better, baseline, lengths, seed=3)
  want = 100.0 * (better.sum() - baseline.sum()) / lengths.sum()
  assert result.difference == pytest.approx(want)
  assert result.p_value < 0.01
  assert result.low <= want <= result.high < 0


def test_one_changed_word_in_many_is_not_significant():
  lengths = np.full(100, 20)
  a = np.zeros(100, int)
  b = a.copy()
  b[7] = 1
  result = significance.compare_error_rates(a, b, lengths, seed=0)
  assert result.difference == pytest.approx(-100.0 / 2000)
  assert result.p_value > 0.05
  assert result.low <= 0.0 <= result.high


def test_the_seed_makes_it_reproducible():
  rng = np.random.default_rng(5)
  lengths = rng.integers(5, 30, size=50)
  a, b = rng.binomial(lengths, 0.1), rng.binomial(lengths, 0.12)
  first = significance.compare_error_rates(a, b, lengths, seed=9)
  assert significance.compare_error_rates(a, b, lengths, seed=9) == first


def test_pearson_interval_brackets_scipys_pearson():
  rng = np.random.default_rng(1)
  gold = rng.uniform(0, 5, size=300)
  predicted = gold + rng.normal(0, 2, size=300)
  interval = significance.pearson_interval(predicted, gold, seed=2)
  assert interval.value == pytest.approx(100 * stats.pearsonr(predicted, gold)[0])
  assert interval.low < interval.value < interval.high
  # About 1/sqrt(n) wide on the r scale: far from degenerate, far from the whole range.
  assert 3.0 < interval.high - interval.low < 25.0


def test_compare_pearson_identical_and_clearly_better():
  rng = np.random.default_rng(2)
  gold = rng.uniform(0, 5, size=300)
  good = gold + rng.normal(0, 0.5, size=300)
  poor = gold + rng.normal(0, 5.0, size=300)
  same = significance.compare_pearson(good, good, gold, seed=0)
  assert (same.difference, same.p_value, same.low, same.high) == (0.0, 1.0, 0.0, 0.0)
  better = significance.compare_pearson(good, poor, gold, seed=0)
  want = 100 * (stats.pearsonr(good, gold)[0] - stats.pearsonr(poor, gold)[0])
  assert better.difference == pytest.approx(want)
  assert better.p_value < 0.01 and better.low > 0


def test_unpaired_or_too_few_units_are_refused():
  with pytest.raises(ValueError, match="one length"):
    significance.compare_error_rates([1, 2], [1], [3, 4])
  with pytest.raises(ValueError, match="at least 2"):
    significance.pearson_interval([1.0], [2.0])
  with pytest.raises(ValueError, match="no units"):
    significance.compare_pearson([], [], [])


def test_p_values_print_as_a_bound_when_no_resample_crossed_zero():
  assert significance.format_p(0.03) == "0.030"
  assert significance.format_p(0.0) == "< 0.001"
  assert significance.format_p(1.0) == "1.000"


def test_every_seed_rule_needs_every_ci_on_one_side_of_zero():
  rule = significance.significant_in_every_seed
  assert rule([(0.5, 2.0), (0.1, 1.2)])  # both above 0
  assert rule([(-3.0, -0.2), (-1.0, -0.01)])  # both below 0
  assert rule([(0.3, 0.9)])  # one seed: the usual CI rule
  # One seed's CI reaches 0 (or crosses it): the other seed's clear result does not count.
  assert not rule([(0.5, 2.0), (0.0, 1.2)])
  assert not rule([(0.5, 2.0), (-0.4, 1.2)])
  # Each CI excludes 0, but on opposite sides: the seeds disagree on the direction.
  assert not rule([(0.5, 2.0), (-2.0, -0.5)])
  # A seed without the comparison cannot confirm it.
  assert not rule([(0.5, 2.0), None])
  with pytest.raises(ValueError, match="no seed"):
    rule([])


def test_subset_aggregates_equal_a_hand_computation():
  """SentEval's all / mean / wmean of two subsets (3 and 4 pairs), against scipy on arrays joined
  by hand; "all" is not the mean: the second subset's gold scores sit higher."""
  cosines = [[0.1, 0.5, 0.3], [0.2, 0.9, 0.4, 0.6]]
  gold = [[1.0, 3.0, 2.5], [4.0, 5.0, 3.5, 4.2]]
  joined_cosines = [0.1, 0.5, 0.3, 0.2, 0.9, 0.4, 0.6]
  joined_gold = [1.0, 3.0, 2.5, 4.0, 5.0, 3.5, 4.2]
  got = significance.subset_aggregates(cosines, gold, num_resamples=200, seed=3)

  def both(c, g):
    return [100 * stats.pearsonr(c, g).statistic, 100 * stats.spearmanr(c, g).statistic]

  first, second = both(cosines[0], gold[0]), both(cosines[1], gold[1])
  assert got["all"]["scores"] == pytest.approx(both(joined_cosines, joined_gold))
  assert got["mean"]["scores"] == pytest.approx([(a + b) / 2 for a, b in zip(first, second)])
  assert got["wmean"]["scores"] == pytest.approx(
    [(3 * a + 4 * b) / 7 for a, b in zip(first, second)]
  )
  assert got["all"]["scores"][1] != pytest.approx(got["mean"]["scores"][1], abs=1)
  for name in significance.AGGREGATES:
    for value, (low, high) in zip(got[name]["scores"], got[name]["ci"]):
      assert low <= value <= high and low < high
  assert significance.subset_aggregates(cosines, gold, num_resamples=200, seed=3) == got


def test_subset_aggregates_resample_within_each_subset():
  """Perfectly correlated within each subset, anti-correlated across them: every resample of a
  subset keeps its perfect order, so mean and wmean stay at 100 (a zero-width interval), while
  "all" over the joined pairs is negative; a resample mixing the subsets could not do that."""
  cosines = [np.linspace(0.6, 0.9, 40), np.linspace(0.1, 0.4, 40)]
  gold = [np.linspace(0, 1, 40), np.linspace(4, 5, 40)]
  got = significance.subset_aggregates(cosines, gold, num_resamples=100)
  for name in ("mean", "wmean"):
    assert got[name]["scores"] == pytest.approx([100, 100])
    assert np.allclose(got[name]["ci"], 100)
  assert got["all"]["scores"][0] < 0 and got["all"]["ci"][0][1] < 0

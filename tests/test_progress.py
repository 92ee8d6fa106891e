"""Tests of util/progress.py: rate, ETA and how often a line is logged."""

from util import progress


class FakeClock(object):
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_format_duration():
  assert progress.format_duration(0) == "0:00"
  assert progress.format_duration(75.4) == "1:15"
  assert progress.format_duration(3 * 3600 + 62) == "3:01:02"
  assert progress.format_duration(None) == "?"
  assert progress.format_duration(float("inf")) == "?"


def test_lines_give_rate_and_eta_and_are_throttled():
  clock = FakeClock()
  bar = progress.Progress("T-TA", total=1000, unit="sentences", every=10.0, clock=clock)
  clock.now += 4.0
  assert bar.update(100) is None  # within `every` seconds of the start: quiet
  clock.now += 6.0
  line = bar.update(150)
  assert line == "T-TA: 250/1000 sentences (25%), 25.0/s, 0:10 elapsed, ETA 0:30"
  clock.now += 1.0
  assert bar.update(10) is None
  clock.now += 1.0
  # A stage that logged before ends with a line.
  assert bar.update(740).startswith("T-TA: 1000/1000 sentences (100%)")


def test_a_short_stage_is_quiet_and_the_interval_comes_from_the_environment(monkeypatch):
  clock = FakeClock()
  bar = progress.Progress("uniLM", total=10, unit="sentences", clock=clock)
  clock.now += 3.0
  assert bar.update(10) is None  # done within 10 s: its caller logs the result
  monkeypatch.setenv("TTA_PROGRESS_SECONDS", "0")
  bar = progress.Progress("uniLM", total=10, unit="sentences", clock=clock)
  clock.now += 1.0
  assert bar.update(5) == "uniLM: 5/10 sentences (50%), 5.0/s, 0:01 elapsed, ETA 0:01"


def test_unknown_total_has_no_eta():
  clock = FakeClock()
  bar = progress.Progress("lm.bin", unit="sentences", every=0.0, clock=clock)
  clock.now += 2.0
  assert bar.update(5) == "lm.bin: 5 sentences, 2.5/s, 0:02 elapsed"


def test_stages_count_i_of_n():
  clock = FakeClock()
  stages = progress.Stages(["data", "kenlm", "train_tta"], clock=clock)
  assert stages.start("data") == "stage 1 of 3: data (0:00 elapsed)"
  clock.now += 125
  assert stages.start("train_tta") == "stage 3 of 3: train_tta (2:05 elapsed)"


def test_log_forces_a_line_with_a_note_and_measured_amounts_print_one_decimal():
  clock = FakeClock()
  bar = progress.Progress("corpus", total=8.0, unit="MB", every=60.0, clock=clock)
  clock.now += 2.0
  bar.done += 2.0
  assert bar.log("3/12 documents") == (
    "corpus: 2.0/8.0 MB (25%), 1.0/s, 0:02 elapsed, ETA 0:06; 3/12 documents"
  )

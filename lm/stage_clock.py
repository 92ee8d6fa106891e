"""The per-stage clock that NeuralLM and the benchmark's peers lap (run_benchmark's breakdown)."""

import time


class StageClock(object):
  """Seconds per stage; `lap(stage)` adds the time since the last lap: stages sum to the call."""

  STAGES = ("normalization", "tokenization", "batching", "graph", "conversion")

  def __init__(self):
    self.seconds = dict.fromkeys(self.STAGES, 0.0)
    self._mark = time.perf_counter()

  def start(self):
    self._mark = time.perf_counter()

  def lap(self, stage):
    now = time.perf_counter()
    self.seconds[stage] += now - self._mark
    self._mark = now

  def take(self):
    """The seconds per stage since the last take(), and a reset."""
    seconds, self.seconds = self.seconds, dict.fromkeys(self.STAGES, 0.0)
    return seconds

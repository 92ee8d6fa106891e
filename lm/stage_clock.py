"""Where the time of a call goes: the per-stage clock that NeuralLM and the benchmark's peers lap.

run_benchmark.py reads it to break each call down (normalization, tokenization, batching, graph,
conversion); lapping costs a perf_counter read, so every call keeps it on.
"""

import time


class StageClock(object):
  """Where a NeuralLM's calls spend their time, stage by stage (run_benchmark's breakdown).

  `lap(stage)` adds the time since the previous lap (or `start`) to `stage`, so the stages of a
  call add up to the call; a lap is one perf_counter read.
  """

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

"""Long sentences scored in sliding windows: T-TA against the biLM, time and peak memory.

Per model and --words length (default 100, 300, 1,000; one sentence per call, after a warm-up):
scored tokens, windows, the median time of --runs calls, the peak resident memory above the
process's before the row (sampled every ms from /proc/self/statm) and the process's peak so far.

  python scripts/benchmark_long_inputs.py --tta=runs/tta --bilm=runs/bilm --words=1000 --stride=32
"""

import os
import resource
import statistics
import sys
import threading
import time

from absl import app
from absl import flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from lm import lm_options  # noqa: E402
from util import cli  # noqa: E402
from util import machine  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("tta", None, "T-TA model dir.", required=True)
flags.DEFINE_string("bilm", None, "biLM model dir.", required=True)
flags.DEFINE_list("words", ["100", "300", "1000"], "Sentence lengths in words.")
flags.DEFINE_integer("runs", 3, "Timed calls per cell (the median is shown).", lower_bound=1)
cli.define_param_flags(lm_options.LMOptions)

# Words any English WordPiece vocab holds, cycled into sentences of the asked length.
_TEXT = "the old man said that he would walk to the river before the sun went down".split()


class PeakMemory:
  """The peak resident set size above the one at entry, in bytes, sampled on a thread."""

  def __enter__(self):
    self.page = os.sysconf("SC_PAGE_SIZE")
    self.base = self._rss()
    self.peak = self.base
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._sample, daemon=True)
    self._thread.start()
    return self

  def _rss(self):
    with open("/proc/self/statm", encoding="ascii") as f:
      return int(f.read().split()[1]) * self.page

  def _sample(self):
    while not self._stop.wait(0.001):
      self.peak = max(self.peak, self._rss())

  def __exit__(self, *exc):
    self._stop.set()
    self._thread.join()
    self.peak = max(self.peak, self._rss())

  @property
  def growth(self):
    return self.peak - self.base


def measure(lm, sentence, runs):
  """(median seconds of `runs` lm.score calls after a warm-up, peak memory growth in bytes over
  them all, the ScoredSentence)."""
  seconds = []
  with PeakMemory() as memory:
    (scored,) = lm.score([sentence])
    for _ in range(runs):
      start = time.perf_counter()
      lm.score([sentence])
      seconds.append(time.perf_counter() - start)
  return statistics.median(seconds), memory.growth, scored


def main(argv):
  del argv
  from lm import inference  # pylint: disable=g-import-not-at-top

  options = cli.params(lm_options.LMOptions).load_kwargs()
  lms = {
    name: inference.load_lm(spec, **options)
    for name, spec in (("T-TA", FLAGS.tta), ("biLM", FLAGS.bilm))
  }
  for lm in lms.values():
    lm.score([" ".join(_TEXT[:10])])  # traces the graph functions
  first = next(iter(lms.values()))
  print(
    f"commit {machine.git_commit()}, {machine.cpu_and_cores()}, {machine.usable_cores()} usable; "
    f"--long_inputs={first.long_inputs} window {first.window} tokens, stride {first.stride} "
    f"pieces, token budget {first.token_budget}, median of {FLAGS.runs} calls"
  )
  print(
    "\n| model | words | scored tokens | windows | ms | peak RSS growth (MiB) | peak RSS (MiB) |"
  )
  print("|---|---|---|---|---|---|---|")
  for words in (int(w) for w in FLAGS.words):
    sentence = " ".join(_TEXT[i % len(_TEXT)] for i in range(words))
    for name, lm in lms.items():
      seconds, growth, scored = measure(lm, sentence, FLAGS.runs)
      print(
        f"| {name} | {words} | {scored.num_tokens} | {scored.windows} | "
        f"{seconds * 1000:.1f} | {growth / 2**20:.1f} | "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} |",
        flush=True,
      )


if __name__ == "__main__":
  app.run(main)

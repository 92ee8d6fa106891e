"""Progress lines with rate and ETA for the long stages a person watches: the one progress writer.
A line at most every `every` seconds ($TTA_PROGRESS_SECONDS, default 10; 0: every update)."""

import math
import os
import time

from absl import logging


def format_duration(seconds):
  """`seconds` as "m:ss", or "h:mm:ss" from an hour on; "?" when unknown (None, inf, nan)."""
  if seconds is None or not math.isfinite(seconds):
    return "?"
  seconds = int(round(seconds))
  hours, minutes = seconds // 3600, seconds // 60 % 60
  if hours:
    return f"{hours}:{minutes:02d}:{seconds % 60:02d}"
  return f"{minutes}:{seconds % 60:02d}"


class Progress(object):
  """Counts finished items of one stage and logs their rate and the time left.

  label: what runs, kept short (an LM's row name). total: None if unknown (no percentage, no
  ETA). clock: seconds, for tests.
  """

  def __init__(self, label, total=None, unit="items", every=None, clock=time.monotonic):
    if every is None:
      every = float(os.environ.get("TTA_PROGRESS_SECONDS", 10))
    self.label, self.total, self.unit, self.every = label, total, unit, every
    self.done = 0
    self._logged = False
    self._clock = clock
    self._start = self._last = clock()

  def line(self, note=None):
    """The progress line for the items done so far, `note` (e.g. other counts) appended."""
    elapsed = self._clock() - self._start
    rate = self.done / elapsed if elapsed > 0 else float("nan")
    text = f"{self.label}: {_amount(self.done)}"
    if self.total is None:
      text = f"{text} {self.unit}, {rate:.1f}/s, {format_duration(elapsed)} elapsed"
    else:
      percent = 100.0 * self.done / max(self.total, 1)
      eta = (self.total - self.done) / rate if rate > 0 else float("nan")
      text = (
        f"{text}/{_amount(self.total)} {self.unit} ({percent:.0f}%), {rate:.1f}/s, "
        f"{format_duration(elapsed)} elapsed, ETA {format_duration(eta)}"
      )
    return f"{text}; {note}" if note else text

  def update(self, count=1, note=None):
    """Adds `count` finished items; logs and returns a line if `every` seconds passed since the
    last one, or if all are done and the stage logged before; else None."""
    self.done += count
    now = self._clock()
    finished = self.total is not None and self.done >= self.total
    # Since the last line, or since the start when there was none.
    if now - self._last < self.every and not (finished and self._logged):
      return None
    return self.log(note)

  def log(self, note=None):
    """Logs the current line now, whatever the interval; returns it."""
    self._last, self._logged = self._clock(), True
    text = self.line(note)
    logging.info("%s", text)
    return text


def _amount(value):
  # Counts print as integers; measured amounts (megabytes) with one decimal.
  return f"{value:d}" if isinstance(value, int) else f"{value:.1f}"


class Stages(object):
  """Announces the stages of a long job: "stage 3 of 9: plan (0:42 elapsed)"."""

  def __init__(self, names, clock=time.monotonic):
    self.names = list(names)
    self._clock = clock
    self._start = clock()

  def elapsed(self):
    return format_duration(self._clock() - self._start)

  def start(self, name):
    """Logs and returns the line of stage `name` (starting, or checked and skipped)."""
    text = (
      f"stage {self.names.index(name) + 1} of {len(self.names)}: {name} ({self.elapsed()} elapsed)"
    )
    logging.info("%s", text)
    return text

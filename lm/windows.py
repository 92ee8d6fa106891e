"""Sliding windows over a sentence longer than a model takes: the one statement of the rule.

Window k holds pieces [starts[k], starts[k] + size - 2), framed `[BOS] pieces [EOS]` as a
training instance is (the authors' create_tfrecords.py also cuts at piece boundaries); windows
begin every `stride` pieces, the last moved back to end at the last piece. Each piece is scored
once, in the window where it has the most context (`assign`); the sentence's [BOS] belongs to the
first window, its [EOS] to the last, and a window's added boundary tokens are never scored.
"""

import math

import numpy as np

LONG_INPUTS = ("truncate", "window")
# How a piece's context in a window is counted (`kinds.Kind.window_context`): "both", the
# pieces on its nearer side (a bidirectional kind gets the most in the window most centred on
# it); "left", the pieces on its left (all a left-to-right kind sees).
CONTEXTS = ("both", "left")


def default_stride(size):
  """Half the pieces of a window of `size` tokens: every piece then has at least a quarter of
  a window of context on each side, at twice the tokens of one pass over the sentence."""
  return max((size - 2) // 2, 1)


def check(size, stride, max_seq_length):
  """ValueError naming --window or --stride when they cannot cut a sentence: a window must fit
  the model (`max_seq_length`) and hold a piece, and consecutive windows must not leave a gap.

  Returns:
    (size, stride), the stride defaulted (None: `default_stride`).
  """
  if size > max_seq_length:
    raise ValueError(
      f"--window={size} is more than the {max_seq_length} tokens the model takes "
      "(max_position_embeddings, or --max_seq_length)"
    )
  if size < 3:
    raise ValueError(f"--window={size}: a window needs [BOS], a piece and [EOS] (3 tokens or more)")
  stride = default_stride(size) if stride is None else stride
  if not 1 <= stride <= size - 2:
    raise ValueError(
      f"--stride={stride} must be in [1, {size - 2}], the pieces of a --window={size} window "
      "(a longer stride skips pieces)"
    )
  return size, stride


def starts(num_pieces, capacity, stride):
  """First piece of each window: [0] for a sentence that fits.

  Args:
    num_pieces: word pieces of the sentence.
    capacity: pieces per window (its size less the two boundary tokens).
    stride: pieces between consecutive windows, 1 .. capacity.

  Returns:
    list of int, strictly increasing; the last window ends at the last piece.
  """
  if num_pieces <= capacity:
    return [0]
  count = math.ceil((num_pieces - capacity) / stride) + 1
  return [min(k * stride, num_pieces - capacity) for k in range(count)]


def assign(num_pieces, capacity, stride, context="both"):
  """The window (an index of `starts`) that scores each piece.

  "both": the window where the piece's nearer side holds the most pieces, i.e. the window whose
  centre is nearest (a tie goes to the earlier window); "left": the window with the most pieces
  on its left, i.e. the first that holds it. Either is non-decreasing in the piece, so the
  pieces of window k come before those of window k + 1.

  Returns:
    int array [num_pieces].
  """
  if context not in CONTEXTS:
    raise ValueError(f"context {context!r} is not one of {CONTEXTS}")
  first = np.asarray(starts(num_pieces, capacity, stride))
  pieces = np.arange(num_pieces)
  if context == "left":
    return np.searchsorted(first + capacity - 1, pieces)
  # In a window holding piece i, min(left, right) = (capacity - 1) / 2 - |i - centre|: the
  # nearest centre wins. Twice the centres, to stay in integers.
  centres = 2 * first + capacity - 1
  after = np.minimum(np.searchsorted(centres, 2 * pieces), len(first) - 1)
  before = np.maximum(after - 1, 0)
  nearer_before = 2 * pieces - centres[before] <= centres[after] - 2 * pieces
  return np.where(nearer_before, before, after)


def split(ids, positions, size, stride, context="both"):
  """A framed sentence -> the windows that score it.

  Args:
    ids: list of int, `[BOS] pieces [EOS]`, longer than `size`.
    positions: ascending positions of `ids` to score or represent.
    size, stride: the window's tokens and the pieces between windows (`check`).
    context: one of CONTEXTS.

  Returns:
    list of (window ids: list of int, window positions: list of int, offset: int), one per window
    with a position to score, in order: position p of a window is position p + offset of the
    sentence, and the windows' positions, shifted, are `positions` in order.
  """
  capacity = size - 2
  num_pieces = len(ids) - 2
  first = starts(num_pieces, capacity, stride)
  # Piece i is token i + 1; [BOS] goes to the first window, [EOS] to the last.
  owner = np.concatenate([[0], assign(num_pieces, capacity, stride, context), [len(first) - 1]])
  mine = {}
  for p in positions:
    mine.setdefault(int(owner[p]), []).append(p - first[owner[p]])
  return [
    ([ids[0], *ids[first[k] + 1 : first[k] + 1 + capacity], ids[-1]], mine[k], first[k])
    for k in sorted(mine)
  ]

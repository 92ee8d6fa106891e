"""Sliding windows over a sentence longer than a model takes: window k frames pieces
[starts[k], starts[k] + size - 2) as `[BOS] pieces [EOS]`. Each piece is scored once, in the
window where it has the most context; the sentence's [BOS] in the first, its [EOS] in the last.
"""

import math

import numpy as np

LONG_INPUTS = ("truncate", "window")
# How a piece's context in a window is counted (`kinds.Kind.window_context`): "both", the
# pieces on its nearer side (a bidirectional kind gets the most in the window most centred on
# it); "left", the pieces on its left (all a left-to-right kind sees).
CONTEXTS = ("both", "left")


def default_stride(size):
  """Half a window's pieces: a quarter window of context on each side, at twice the tokens."""
  return max((size - 2) // 2, 1)


def check(size, stride, max_seq_length):
  """(size, stride), stride defaulted; ValueError naming --window or --stride if they cannot cut."""
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
  """First piece of each window, increasing ([0] when the sentence fits in `capacity` pieces)."""
  if num_pieces <= capacity:
    return [0]
  count = math.ceil((num_pieces - capacity) / stride) + 1
  return [min(k * stride, num_pieces - capacity) for k in range(count)]


def assign(num_pieces, capacity, stride, context="both"):
  """int [num_pieces], the window scoring each piece: "both", the one whose centre is nearest
  (ties to the earlier); "left", the first holding it. Non-decreasing in the piece.
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
  """`[BOS] pieces [EOS]` -> [(window ids, window positions, offset)], one per window with some of
  `positions` to score, in order: window position p is sentence position p + offset.
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

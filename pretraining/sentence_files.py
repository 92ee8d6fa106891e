"""Sentence files as bytes: opened plain or decompressed, scanned once (sha256, UTF-8, lines,
blocks), read back block by block. No TensorFlow at import (workers import it)."""

import bz2
import codecs
import contextlib
import dataclasses
import gzip
import hashlib
import lzma

from pretraining import pretraining_records
from util import io_utils

COMPRESSIONS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# Bytes the scan reads at a time.
_SCAN_CHUNK = 8 << 20


def compression(path):
  return next((ext for ext in COMPRESSIONS if path.endswith(ext)), None)


def _open_raw(path):
  if "://" in path:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.io.gfile.GFile(path, "rb")
  return open(path, "rb")


class _HashingReader:
  """A binary file whose bytes read are hashed (the input's sha256, taken during the scan)."""

  def __init__(self, raw):
    self.raw, self.digest = raw, hashlib.sha256()

  def read(self, size=-1):
    data = self.raw.read(size)
    self.digest.update(data)
    return data

  def readable(self):
    return True


@contextlib.contextmanager
def _open_text_bytes(path, raw=None):
  with contextlib.ExitStack() as stack:
    raw = raw or stack.enter_context(_open_raw(path))
    suffix = compression(path)
    yield stack.enter_context(COMPRESSIONS[suffix](raw, "rb")) if suffix else raw


@dataclasses.dataclass
class FileScan:
  """What the scan of one sentence file found: its sha256 (of the file's bytes as stored), its
  lines, and its blocks [(start, end, first line)] of decompressed bytes."""

  path: str
  sha256: str
  lines: int
  has_text: bool
  blocks: list


def scan_sentence_file(path, block_bytes, check_utf8=True):
  """Reads a sentence file once, in chunks: its sha256, UTF-8 check, line count and blocks of whole
  lines (a block ends with the line holding its `block_bytes`-th byte).

  Lines split on "\\n" only: str.splitlines also splits on U+2028, \\x0b, ..., and line numbers
  would disagree with editors' and corpus.py's. ValueError "path:line: not valid UTF-8 ..." (when
  check_utf8), or "path: cannot read (why)" for a file that cannot be read or decompressed (a
  damaged or truncated .gz, .bz2 or .xz: `io_utils.reading`).
  """
  with io_utils.reading(path), _open_raw(path) as raw_file:
    raw = _HashingReader(raw_file)
    with _open_text_bytes(path, raw) as text:
      scan = _scan(path, text, check_utf8, block_bytes)
    while raw.read(_SCAN_CHUNK):  # Bytes past the end of a compressed stream.
      pass
  scan.sha256 = raw.digest.hexdigest()
  return scan


def _scan(path, text, check_utf8, block_bytes):
  blocks, block_start, block_line = [], 0, 1
  position, lines, carry, has_text, last_byte_newline = 0, 0, b"", False, True
  while True:
    chunk = text.read(_SCAN_CHUNK)
    data = carry + chunk
    cut = len(data) if not chunk else data.rfind(b"\n") + 1
    piece, carry = data[:cut], data[cut:]
    if piece:
      if check_utf8:
        _check_utf8(path, piece, lines + 1)
      has_text = has_text or bool(piece.strip(b" \t\r\n\f\v" + pretraining_records.BOM))
      while block_start + block_bytes <= position + len(piece):
        newline = piece.find(b"\n", block_start + block_bytes - 1 - position)
        if newline < 0:
          break  # The file's last line, without its newline.
        end = position + newline + 1
        blocks.append((block_start, end, block_line))
        block_line = lines + piece.count(b"\n", 0, newline + 1) + 1
        block_start = end
      lines += piece.count(b"\n")
      position += len(piece)
      last_byte_newline = piece.endswith(b"\n")
    if not chunk:
      break
  if position > block_start:
    blocks.append((block_start, position, block_line))
  if position and not last_byte_newline:
    lines += 1
  return FileScan(path, "", lines, has_text, blocks)


def _check_utf8(path, piece, first_line):
  try:
    codecs.decode(piece, "utf-8")
  except UnicodeDecodeError:
    for offset, raw in enumerate(piece.split(b"\n")):
      try:
        raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise pretraining_records.malformed_error(path, first_line + offset, raw, e) from None


def sha256_file(path):
  digest = hashlib.sha256()
  with _open_raw(path) as f:
    while block := f.read(1 << 22):
      digest.update(block)
  return digest.hexdigest()


def block_data(blocks, read_all):
  """(block, bytes or None) for `blocks` (in processing order): None where the worker reads
  the block itself (unless `read_all`); else the parent reads it, decompressing each file once
  in sequence. Memory: one block."""
  stream_path, stream, stack, position = None, None, contextlib.ExitStack(), 0
  with stack:
    for block in blocks:
      if block.worker_reads and not read_all:
        yield block, None
        continue
      if block.worker_reads:
        yield block, pretraining_records.read_block(block)
        continue
      if stream_path != block.path or position > block.start:
        stack.close()
        stream = stack.enter_context(_open_text_bytes(block.path))
        stream_path, position = block.path, 0
      while position < block.start:  # Blocks of other jobs, or done before a resume.
        position += len(stream.read(min(_SCAN_CHUNK, block.start - position)))
      data = stream.read(block.end - block.start)
      position += len(data)
      yield block, data

"""beam_data.py's job: create_pretraining_data.py's job with its blocks made by an Apache Beam
pipeline (`JobParams`, `run`).

Everything but the blocks is the job's own (data_job.run): the scan, the vocab, the part
directory, resume, the assembly of the shards and data_stats.json run where the command runs; a
Beam worker makes blocks with `pretraining_records.make_block`, seeded by each block's position as
the worker pool's are. So the records are the one-process job's bytes for any runner and number
of workers. A plain local file's blocks spread over the workers; a compressed or remote file is
read in sequence by one worker (gzip has no random access): split a big corpus into files.
"""

import dataclasses
import functools
import shutil
import tempfile
import time

from absl import logging

from beam import options as options_lib
from pretraining import data_job
from pretraining import pretraining_data
from pretraining import pretraining_records
from pretraining import sentence_files
from util import cli
from util import io_utils


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobParams(data_job.JobParams):
  """beam_data.py's flags (one `cli.param` field each): create_pretraining_data.py's (but the
  worker pool's and the parts', which Beam replaces) and the pipeline's (`options.BeamParams`)."""

  run: data_job.RunParams = cli.nested(data_job.RunParams, only=("overwrite",))
  beam: options_lib.BeamParams = cli.nested(options_lib.BeamParams, result=False)


def run(params):
  """`data_job.run` of `params` (`JobParams`), its blocks made by a Beam pipeline:
  data_stats.json's contents (its times and rate are this run's)."""
  options = options_lib.pipeline_options(params.beam)
  return data_job.run(params, run_blocks=functools.partial(run_blocks, options))


def work_units(blocks):
  """`blocks` as the pipeline's elements: [[block]] for a block its worker reads by offset; the
  consecutive blocks of a file that is read in sequence (compressed, remote) as one element."""
  units = []
  for block in blocks:
    if not block.worker_reads and units and units[-1][-1].path == block.path:
      units[-1].append(block)
    else:
      units.append([block])
  return units


def run_blocks(options, blocks, part_dir, block_dir, config, num_workers):
  """`data_job.run`'s `run_blocks`: the unfinished blocks of `blocks` into `part_dir` by a
  Beam pipeline of `options`; the seconds it took. Each worker writes into a directory of its own
  (`config.parts_dir` is this process's), and Beam's options choose the workers."""
  del block_dir, num_workers
  start = time.time()
  todo = [b for b in blocks if pretraining_records.read_block_summary(part_dir, b.index) is None]
  logging.info("%d of %d blocks to do, by a Beam pipeline", len(todo), len(blocks))
  if todo:
    apache_beam = options_lib.import_beam()
    with apache_beam.Pipeline(options=options) as pipeline:
      _ = (
        pipeline
        | "blocks" >> apache_beam.Create(work_units(todo))
        | "spread" >> apache_beam.Reshuffle()
        | "make" >> apache_beam.ParDo(MakeBlocks(config, part_dir))
      )
  return time.time() - start


class MakeBlocks(options_lib.DoFn):
  """Makes the blocks of one element (`work_units`) into `part_dir`; yields their indices."""

  def __init__(self, config, part_dir):
    super().__init__()
    self._config, self._part_dir = config, part_dir
    self._local = None

  def setup(self):
    # A remote part dir takes whole files: the blocks are written here, then copied in.
    if io_utils.is_remote(self._part_dir):
      self._local = tempfile.mkdtemp(prefix="tta-beam-blocks-")
    block_dir = self._local or self._part_dir
    pretraining_records.init_worker(dataclasses.replace(self._config, parts_dir=block_dir))

  def process(self, unit):
    block_dir = self._local or self._part_dir
    for block, data in sentence_files.block_data(unit, read_all=False):
      pretraining_records.make_block(block, data)
      pretraining_data.publish_block(block_dir, self._part_dir, block.index)
      yield block.index

  def teardown(self):
    if self._local:
      shutil.rmtree(self._local, ignore_errors=True)

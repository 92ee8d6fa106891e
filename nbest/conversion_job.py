"""convert_nbest.py's job: N-best lists that `formats` reads (the shared LibriSpeech sets, or a
toolkit's files) written whole in another toolkit's layout with their references, and read back
to check them before success is reported."""

import dataclasses
import math
import os

from nbest import formats
from nbest import rescoring
from nbest import shared_data
from nbest import types
from util import cli
from util import io_utils
from util import runs


@dataclasses.dataclass
class JobParams:
  """What to convert and where: convert_nbest.py's flags."""

  input: str = cli.param(
    "The lists to convert: a set of the shared LibriSpeech 30-best lists "
    f"({', '.join(shared_data.ESPNET_SETS)}) or a file or dir in --input_format.",
    io=cli.INPUT,
  )
  output_format: str = cli.param("The format to write.", enum=formats.exportable())
  output_dir: str = cli.param(
    "The directory to write the lists and their references into.", io=cli.OUTPUT
  )
  input_format: str = cli.param(
    "N-best format of --input (nbest/formats/).", "espnet", enum=tuple(formats.FORMATS)
  )
  input_refs: list = cli.param(
    "Reference file(s) of --input, as run_rescoring.py's --test_refs.", (), io=cli.INPUT
  )
  format_options: dict = cli.param(
    "KEY=VALUE option of --input_format's reader, as run_rescoring.py's (VALUE as JSON if it "
    "parses).",
    (),
    flag="format_option",
    kind=cli.MULTI,
    convert=lambda options: dict(rescoring.parse_option(o) for o in options),
  )
  max_lists: int = cli.param("Write only the first N lists.", None, lower_bound=0)
  sample_lists: int = cli.param(
    "Write a seeded random sample of N lists (after --max_lists), the one run_rescoring.py "
    "--sample_lists takes.",
    None,
    lower_bound=0,
  )
  sample_seed: int = cli.param("Seed of --sample_lists.", 0)
  overwrite: bool = cli.param(
    "Replace the lists an earlier conversion into --output_dir wrote (only those).",
    False,
    result=False,
  )
  data_dir: str = io_utils.data_dir_param()


@dataclasses.dataclass
class Converted:
  """What a conversion wrote: its paths (refs_path None: no references file), whether the lists
  have references, the reader options that read them back, the counts, and the scores the format
  kept and left out."""

  lists_path: str
  refs_path: str
  has_refs: bool
  options: dict
  lists: int
  hypotheses: int
  kept: list
  left_out: list

  def read_flags(self, fmt):
    """run_rescoring.py's flags that read the lists as a test set (--test_file, --test_refs)."""
    flags = [f"--format={fmt}", f"--test_file={self.lists_path}"]
    flags += [f"--test_refs={self.refs_path}"] if self.refs_path else []
    return flags + [f"--format_option={k}={v}" for k, v in self.options.items()]


def identity(params):
  """`runs.identity` of a conversion; --input a shared set's name is its archive."""
  path = params.input
  if params.input_format == "espnet" and not os.path.exists(path):
    path = shared_data.espnet_set_path(path, params.data_dir)
  return runs.identity("convert_nbest.py", params, input=runs.path_identity(path))


def _differs(a, b, kept):
  """Whether list `b`, read back, differs from `a` in its references, texts or a kept score (up
  to the rounding of a change of log base)."""
  return (
    a.refs != b.refs
    or [h.text for h in a.hyps] != [h.text for h in b.hyps]
    or any(
      not math.isclose(x.scores[n], y.scores[n], rel_tol=1e-12, abs_tol=1e-12)
      for x, y in zip(a.hyps, b.hyps)
      for n in kept
    )
  )


def read_back(fmt, source, path, refs_path, options):
  """The score names `fmt` kept, reading the lists it wrote at `path`; ValueError when they
  differ from `source` (a writer's bug, caught before success is reported)."""
  back = formats.read_nbest(fmt, path, refs_path, **options)
  kept = [n for n in back[0].hyps[0].scores if n in source[0].hyps[0].scores]
  if len(back) != len(source) or any(_differs(a, b, kept) for a, b in zip(source, back)):
    raise ValueError(f"{path}: the {fmt} lists read back differ from those written")
  return kept


def run(params):
  """Reads, writes and reads back; returns `Converted`. Input errors are one line (cli)."""
  io_utils.refuse_remote(params, "the toolkits' N-best files are read and written locally")
  with cli.user_input():
    io_utils.check_outputs_apart(params)
    io_utils.check_output_path(params.output_dir, "output_dir")
    select = types.list_selection(params.max_lists, params.sample_lists, params.sample_seed)
    lists, _ = formats.read_set(
      params.input_format,
      params.input,
      params.input_refs,
      params.format_options,
      data_dir=params.data_dir,
      select=select,
    )
    lists = [lists[i] for i in select(len(lists))]  # a reader without `select` read them all
    if not lists:
      raise ValueError(f"--max_lists / --sample_lists left no list of {params.input}")
    export = formats.FORMATS[params.output_format].export
    lists_rel, refs_rel = export.paths(lists)
    names = {rel.split("/")[0] for rel in (lists_rel, refs_rel) if rel}
    job = identity(params)
  with io_utils.output_dir(params.output_dir):
    with cli.user_input():
      record = runs.Record(params.output_dir, job, sorted(names), params.overwrite)
    with record, cli.user_input():
      record.start()
      options = export.write(lists, params.output_dir)
      lists_path = os.path.join(params.output_dir, lists_rel)
      refs_path = os.path.join(params.output_dir, refs_rel) if refs_rel else None
      refs_path = refs_path if refs_path and os.path.exists(refs_path) else None
      kept = read_back(params.output_format, lists, lists_path, refs_path, options)
  source_names = list(lists[0].hyps[0].scores)
  return Converted(
    lists_path,
    refs_path,
    bool(lists[0].refs),
    options,
    len(lists),
    sum(len(n.hyps) for n in lists),
    kept,
    [n for n in source_names if n not in kept],
  )

"""corpus.py's job: `JobParams` (its flags), then `run(params)`: the inputs and the output dir
checked, then `corpus.prepare_corpus` (books or text files -> train.txt, eval.txt, stats.json,
whose stamp makes a complete output dir a no-op). docs/DESIGN.md §3.1.
"""

import dataclasses

from text import corpus
from text import normalization as normalization_lib
from util import cli
from util import io_utils


@dataclasses.dataclass
class JobParams:
  """corpus.py's flags (one `cli.param` field each): `corpus.prepare_corpus`'s arguments, the
  inputs and --output_dir."""

  output_dir: str = cli.param("Where train.txt, eval.txt and stats.json go.", io=cli.OUTPUT)
  input: list = cli.param(
    "Comma-separated input paths: Gutenberg .tar.xz archives and/or plain text "
    "files. Default: <data_dir>/gutenberg-books-subset/texts.tar.xz.",
    None,
  )
  normalization: str = cli.param(
    "none: cleaned text; librispeech: upper case, no punctuation but apostrophes, "
    "numbers spelled out.",
    "none",
    normalization_lib.NORMALIZATIONS,
  )
  input_format: str = cli.param(
    "Format of plain text inputs: one sentence per line, or blank-line separated paragraphs.",
    "lines",
    corpus.INPUT_FORMATS,
  )
  eval_fraction: float = cli.param("Share held out for eval.txt.", 0.01)
  seed: int = cli.param("Seed of the held-out choice.", 12345)
  dedup: bool = cli.param("Drop exact duplicate sentences.", True)
  min_words: int = cli.param("Drop sentences with fewer words.", 3)
  max_words: int = cli.param("Drop sentences with more words.", 100)
  num_workers: int = cli.param("Worker processes (default: all cores).", None)
  log_every: int = cli.param("Log progress every this many books.", 20)
  max_books: int = cli.param("Stop after this many books per archive.", None)
  force: bool = cli.param("Rebuild even if output_dir is complete for these arguments.", False)
  data_dir: str = io_utils.data_dir_param()  # where the default --input is

  def __post_init__(self):
    if not self.output_dir:
      raise ValueError("--output_dir is required")


def run(params: JobParams) -> dict:
  """`corpus.prepare_corpus` with `params` (no --input: the Gutenberg archive of the data root);
  the output is checked first, and a run refused for its input leaves no --output_dir it made.
  Returns stats.json's record."""
  io_utils.refuse_remote(
    params,
    "corpus preparation streams archives and writes its text through local files",
    [("input", params.input or [])],
  )
  inputs = params.input or [corpus.default_gutenberg_tar(params.data_dir)]
  io_utils.check_outputs_apart(params, inputs=[("input", inputs)])
  io_utils.check_output_path(params.output_dir, "output_dir")
  with io_utils.output_dir(params.output_dir), cli.user_input():
    return corpus.prepare_corpus(
      inputs,
      params.output_dir,
      normalization=params.normalization,
      eval_fraction=params.eval_fraction,
      seed=params.seed,
      dedup=params.dedup,
      min_words=params.min_words,
      max_words=params.max_words,
      input_format=params.input_format,
      num_workers=params.num_workers,
      log_every=params.log_every,
      max_books=params.max_books,
      force=params.force,
    )

"""The Apache Beam pipelines (beam/) on the DirectRunner, in this process: the data job's records
and data_stats.json, score.py's output and the rescoring cache's entries equal the one-process
commands'."""

import gzip
import os

import numpy as np
import pytest

from util import io_utils

if os.environ.get("TTA_REQUIRE_DATA") == "1":
  import apache_beam  # noqa: F401  # scripts/test.sh installs it (scripts/setup_beam.sh)
else:
  pytest.importorskip("apache_beam", reason="Apache Beam: source scripts/setup_beam.sh")

from beam import data_pipeline  # noqa: E402
from beam import options as options_lib  # noqa: E402
from pretraining import pretraining_data  # noqa: E402
import tokenization  # noqa: E402
from util import cli  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "."]


def _sentences(count, seed=0):
  """`count` sentences of WORDS and a few out-of-vocabulary names, a few over-long."""
  rng = np.random.default_rng(seed)
  return [
    " ".join(rng.choice(WORDS + ["zyx"], size=int(rng.integers(1, 40 if i % 25 else 70))))
    for i in range(count)
  ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """A plain file and a gzip file of sentences, and a vocab of WORDS."""
  root = tmp_path_factory.mktemp("beam_corpus")
  plain, packed = root / "a.txt", root / "b.txt.gz"
  plain.write_text("".join(s + "\n" for s in _sentences(300)), encoding="utf-8")
  with gzip.open(packed, "wt", encoding="utf-8") as f:
    f.write("".join(s + "\n" for s in _sentences(200, seed=1)))
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + WORDS) + "\n")
  return f"{plain},{packed}", str(vocab)


def _data_args(vocab):
  return dict(vocab_file=vocab, max_seq_length=24, num_shards=3, eval_fraction=0.1)


def _outputs(directory):
  """{name: bytes} of a data job's files, data_stats.json without its times."""
  files = {}
  for name in sorted(os.listdir(directory)):
    with open(os.path.join(directory, name), "rb") as f:
      files[name] = f.read()
  stats = io_utils.read_json_file(os.path.join(directory, "data_stats.json"))
  for key in ("seconds", "sentences_per_second"):
    stats.pop(key)
  files["data_stats.json"] = stats
  return files


def _beam_data_params(inputs, output_dir, **beam):
  args = _data_args(inputs[1])
  data = pretraining_data.DataParams(input_files=inputs[0], **args)
  return data_pipeline.BeamDataParams(
    data=data, output_dir=output_dir, beam=options_lib.BeamParams(**beam)
  )


def test_beam_data_writes_the_records_and_stats_of_create_pretraining_data(
  corpus, tmp_path, monkeypatch
):
  # Blocks of ~2 kB: the plain file's blocks are elements of their own, the gzip file's one.
  monkeypatch.setattr(pretraining_data, "BLOCK_BYTES", 2000)
  pretraining_data.create_pretraining_data(
    corpus[0], str(tmp_path / "one"), num_workers=1, **_data_args(corpus[1])
  )
  made = []
  monkeypatch.setattr(
    data_pipeline.MakeBlocks, "process", _recording(data_pipeline.MakeBlocks.process, made)
  )
  stats = data_pipeline.run(_beam_data_params(corpus, str(tmp_path / "beam")))
  one = _outputs(tmp_path / "one")
  assert sorted(one) == [
    "data_stats.json",
    "eval-00000-of-00001.tfrecord",
    "train-00000-of-00003.tfrecord",
    "train-00001-of-00003.tfrecord",
    "train-00002-of-00003.tfrecord",
    "vocab.txt",
  ]
  assert _outputs(tmp_path / "beam") == one
  assert stats["train"]["sentences"] + stats["eval"]["sentences"] == 500
  # The Beam elements: each plain block alone, the gzip file's blocks together, each block once.
  blocks = [[b.index for b in unit] for unit in made]
  assert sorted(i for unit in blocks for i in unit) == list(range(len(made) - 1 + len(blocks[-1])))
  assert sum(len(unit) > 1 for unit in blocks) == 1
  # A second run finds the complete output: nothing is made again.
  again = data_pipeline.run(_beam_data_params(corpus, str(tmp_path / "beam")))
  assert again["reused"] and len(made) == len(blocks)


def _recording(process, made):
  def recorded(self, unit):
    made.append(sorted(unit, key=lambda b: b.index))
    return process(self, unit)

  return recorded


def test_an_unknown_runner_is_one_line_before_any_work(corpus, tmp_path):
  params = _beam_data_params(corpus, str(tmp_path / "out"), runner="NoSuchRunner")
  with pytest.raises(cli.InputError, match=r"^--runner=NoSuchRunner: "):
    data_pipeline.run(params)
  assert not os.path.exists(tmp_path / "out")

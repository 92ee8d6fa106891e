"""The Apache Beam pipelines (beam/) on the DirectRunner, in this process: the data job's records
and data_stats.json, score.py's output and the rescoring cache's entries equal the one-process
commands'."""

import gzip
import json
import os

import commands
import conftest
import numpy as np
import pytest
import tensorflow as tf

from util import io_utils

if os.environ.get("TTA_REQUIRE_DATA") == "1":
  import apache_beam  # noqa: F401  # scripts/test.sh installs it (scripts/setup_beam.sh)
else:
  pytest.importorskip("apache_beam", reason="Apache Beam: source scripts/setup_beam.sh")

from beam import beam_data_job  # noqa: E402
from beam import options as options_lib  # noqa: E402
from lm import inference  # noqa: E402
from lm import model_dir  # noqa: E402
from lm import scoring_job  # noqa: E402
import modeling  # noqa: E402
from pretraining import data_job  # noqa: E402
from pretraining import pretraining_data  # noqa: E402
from pretraining import pretraining_records  # noqa: E402
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
  data = data_job.DataParams(input_files=inputs[0], **args)
  return beam_data_job.JobParams(
    data=data, output_dir=output_dir, beam=options_lib.BeamParams(**beam)
  )


@pytest.mark.slow(seconds=4)
def test_beam_data_writes_the_records_and_stats_of_create_pretraining_data(
  corpus, tmp_path, monkeypatch
):
  # Blocks of ~2 kB: the plain file's blocks are elements of their own, the gzip file's one.
  monkeypatch.setattr(pretraining_data, "BLOCK_BYTES", 2000)
  data_job.create_pretraining_data(
    corpus[0], str(tmp_path / "one"), num_workers=1, **_data_args(corpus[1])
  )
  made = []
  monkeypatch.setattr(
    beam_data_job.MakeBlocks, "process", _recording(beam_data_job.MakeBlocks.process, made)
  )
  stats = beam_data_job.run(_beam_data_params(corpus, str(tmp_path / "beam")))
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
  again = beam_data_job.run(_beam_data_params(corpus, str(tmp_path / "beam")))
  assert again["reused"] and len(made) == len(blocks)


@pytest.mark.slow(seconds=5)
def test_a_failed_pipeline_resumes_after_its_finished_blocks(corpus, tmp_path, monkeypatch):
  monkeypatch.setattr(pretraining_data, "BLOCK_BYTES", 2000)
  plain = corpus[0].split(",")[0]
  data_job.create_pretraining_data(
    plain, str(tmp_path / "one"), num_workers=1, **_data_args(corpus[1])
  )
  made, make_block = [], pretraining_records.make_block

  def third_block_fails(block, data=None):
    if len(made) == 2:
      raise OSError("a worker lost")
    made.append(block.index)
    return make_block(block, data)

  out = str(tmp_path / "beam")
  with monkeypatch.context() as patched:
    patched.setattr(pretraining_records, "make_block", third_block_fails)
    with pytest.raises(OSError, match="a worker lost"):
      beam_data_job.run(_beam_data_params((plain, corpus[1]), out))
  assert not os.path.exists(os.path.join(out, "data_stats.json"))
  first, again = list(made), []

  def recorded(block, data=None):
    again.append(block.index)
    return make_block(block, data)

  monkeypatch.setattr(pretraining_records, "make_block", recorded)
  beam_data_job.run(_beam_data_params((plain, corpus[1]), out))
  assert _outputs(out) == _outputs(tmp_path / "one")
  # The rerun made only the blocks the failed one had not finished.
  assert len(first) == 2 and sorted(first + again) == list(range(len(first) + len(again)))


def _recording(process, made):
  def recorded(self, unit):
    made.append(sorted(unit, key=lambda b: b.index))
    return process(self, unit)

  return recorded


def test_an_unknown_runner_is_one_line_before_any_work(corpus, tmp_path):
  params = _beam_data_params(corpus, str(tmp_path / "out"), runner="NoSuchRunner")
  with pytest.raises(cli.InputError, match=r"^--runner=NoSuchRunner: "):
    beam_data_job.run(params)
  assert not os.path.exists(tmp_path / "out")


def test_an_option_beam_does_not_know_is_one_line_before_any_work(corpus, tmp_path):
  # Issue 56's probes, third round (G15): Beam only warned "Unparseable argument" and ran, so a
  # misspelt --temp_locaton was dropped in silence.
  out = tmp_path / "out"
  for options, named in [
    ("--bogus_option=1", "--bogus_option"),
    ("--temp_locaton=/tmp/t --save_main_session -x 1", "--temp_locaton, -x"),
  ]:
    params = _beam_data_params(corpus, str(out), pipeline_options=options)
    with pytest.raises(cli.InputError) as refused:
      beam_data_job.run(params)
    assert str(refused.value).startswith(
      f"--pipeline_options={options}: Beam knows no option {named}"
    )
    assert not out.exists()
  assert "(did you mean --temp_location?)" in str(refused.value)
  # docs/scale.md's options of Dataflow, Flink and Spark are Beam's own.
  cluster = (
    "--project=P --region=us-central1 --temp_location=gs://B/tmp --sdk_container_image=IMAGE "
    "--max_num_workers=64 --flink_master=HOST:8081 --parallelism=64 --environment_type=DOCKER "
    "--environment_config=IMAGE --spark_master_url=spark://HOST:7077"
  )
  options = options_lib.pipeline_options(options_lib.BeamParams(pipeline_options=cluster))
  assert options.get_all_options()["flink_master"] == "HOST:8081"


# ----------------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------------

# Mixed lengths, an empty line and one over max_position_embeddings (16).
LINES = [
  "the cat sat on the mat",
  "",
  "a dog ran",
  " ".join(["the dog sat"] * 7),
  "the mat",
  "a cat sat on a dog",
  "the the the",
]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
  root = tmp_path_factory.mktemp("beam_lm")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(conftest.WORDS)) + "\n")
  tf.keras.utils.set_random_seed(7)
  config = conftest.tiny_config(vocab_size=len(tokenization.SPECIAL_TOKENS) + len(conftest.WORDS))
  model_dir.save_model_dir(modeling.build_model(config, "tta"), str(vocab), str(root / "tta"))
  return str(root / "tta")


@pytest.fixture
def loads(monkeypatch, tiny_lm):
  """(the model specs inference.load_lm loaded, the sentences of each `score` call of the tiny
  LM's class): a call's composition changes a neural LM's floats."""
  loaded, calls = [], []

  def load_lm(spec, **kwargs):
    loaded.append(spec)
    return load(spec, **kwargs)

  def score(self, sentences, scoring=None):
    calls.append(list(sentences))
    return score_of_class(self, sentences, scoring=scoring)

  load = inference.load_lm
  cls = type(load(tiny_lm))
  score_of_class = cls.score
  monkeypatch.setattr(inference, "load_lm", load_lm)
  monkeypatch.setattr(cls, "score", score)
  return loaded, calls


@pytest.mark.slow(seconds=8)
@pytest.mark.parametrize("output_format", ["jsonl", "tsv"])
def test_beam_score_writes_score_py_s_output(tiny_lm, tmp_path, monkeypatch, loads, output_format):
  # Blocks of 48 bytes (the input's 157 make 4): lines 0-3, none, 4-5 and 6; one of the 5 shards
  # gets none, and block 0 makes two batches of 2 lines.
  monkeypatch.setattr(scoring_job, "BLOCK_BYTES", 48)
  sentences = tmp_path / "in.txt"
  sentences.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
  common = [f"--model_dir={tiny_lm}", f"--input_file={sentences}", "--batch_size=2"]
  common.append(f"--format={output_format}")
  loaded, calls = loads
  commands.run("score.py", *common, f"--output_file={tmp_path / 'one'}", status=0)
  one_calls = calls[:]
  del loaded[:], calls[:]
  out = tmp_path / "beam"
  commands.run("beam_score.py", *common, f"--output_file={out}", "--num_shards=5", status=0)
  assert out.read_bytes() == (tmp_path / "one").read_bytes()
  # The LM was asked for the batches score.py asks for: a batch never spans two blocks.
  assert sorted(calls) == sorted(one_calls)
  assert one_calls == [[LINES[0]], LINES[2:4], LINES[4:6], [LINES[6]]]
  assert len(out.read_text().splitlines()) == len(LINES)
  if output_format == "jsonl":
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in records] == list(range(len(LINES)))
    assert "score" in records[0] and "score" not in records[1]
  # One worker loaded the model once for its 5 shards; only the output is left.
  assert loaded == [tiny_lm]
  assert sorted(os.listdir(tmp_path)) == ["beam", "in.txt", "one"]


def test_beam_score_refuses_stdin_and_an_unknown_runner_in_one_line(tiny_lm, tmp_path):
  result = commands.run("beam_score.py", f"--model_dir={tiny_lm}", status=2)
  assert "--input_file and --output_file are required" in result.stderr
  sentences = tmp_path / "in.txt"
  sentences.write_text("the cat\n")
  result = commands.run(
    "beam_score.py",
    f"--model_dir={tiny_lm}",
    f"--input_file={sentences}",
    f"--output_file={tmp_path / 'out'}",
    "--runner=NoSuchRunner",
    status=2,
  )
  assert "--runner=NoSuchRunner" in result.stderr
  assert sorted(os.listdir(tmp_path)) == ["in.txt"]


def test_a_bad_line_found_by_a_worker_is_one_line_and_exit_2(tiny_lm, tmp_path):
  sentences = tmp_path / "in.txt"
  sentences.write_bytes(b"the cat\n\xff\xfe sat\n")
  result = commands.run(
    "beam_score.py",
    f"--model_dir={tiny_lm}",
    f"--input_file={sentences}",
    f"--output_file={tmp_path / 'out'}",
    "--num_shards=2",
    status=2,
  )
  assert "Traceback" not in result.stderr
  (line,) = [l for l in result.stderr.splitlines() if l.startswith("beam_score.py: error: ")]
  assert f"{sentences} (line at byte 8): not valid UTF-8" in line
  # Issue 56's probes, third round: the parts dir (.out.beam-parts) was left behind.
  assert sorted(os.listdir(tmp_path)) == ["in.txt"]


def test_beam_score_keeps_the_parts_of_another_job(tiny_lm, tmp_path):
  # Issue 56's probes, third round (G14): the parts dir was removed whole after the merge, with the
  # shard of another job (8 shards) that a stop had kept for its resume.
  sentences = tmp_path / "in.txt"
  sentences.write_text("the cat\nthe dog ran\n")
  other = tmp_path / ".out.beam-parts" / "out-00000-of-00008"
  other.parent.mkdir()
  other.write_text("kept\n")
  common = [f"--model_dir={tiny_lm}", f"--input_file={sentences}", "--num_shards=2"]
  commands.run("beam_score.py", *common, f"--output_file={tmp_path / 'out'}", status=0)
  assert len((tmp_path / "out").read_text().splitlines()) == 2
  assert os.listdir(other.parent) == ["out-00000-of-00008"]


def test_beam_score_refuses_a_user_s_file_and_a_pipe_before_any_work(tiny_lm, tmp_path):
  # Issue 56's probes, third round: a file of the user's at --output_file was replaced without
  # --overwrite (score.py refuses it); a pipe was an "Illegal seek" traceback that left the parts.
  sentences = tmp_path / "in.txt"
  sentences.write_text("the cat\n")
  mine = tmp_path / "mine.txt"
  mine.write_text("mine\n")
  common = [f"--model_dir={tiny_lm}", "--num_shards=2"]
  result = commands.run(
    "beam_score.py", *common, f"--input_file={sentences}", f"--output_file={mine}", status=2
  )
  assert f"--output_file {mine}: exists; add --overwrite to replace it" in result.stderr
  assert mine.read_text() == "mine\n"
  read, write = os.pipe()
  os.close(write)
  pipe = f"/dev/fd/{read}"
  try:
    result = commands.run(
      "beam_score.py", *common, f"--input_file={pipe}", f"--output_file={tmp_path / 'o'}", status=2
    )
  finally:
    os.close(read)
  assert f"{pipe}: not a regular file" in result.stderr, result.stderr
  assert sorted(os.listdir(tmp_path)) == ["in.txt", "mine.txt"]


def _json_lists(path, rows):
  data = {
    f"seg{i}": {f"hyp_{r + 1}": {"score": -1.0 - r, "text": h} for r, h in enumerate(hyps)}
    for i, hyps in enumerate(rows)
  }
  path.write_text(json.dumps(data, indent=1) + "\n")
  return str(path)


ROWS = [
  ["the cat sat on a mat", "cat sat", "the cat sat on the mat"],
  ["a dog ran far", "dog dog ran", "a dog ran"],
  ["the dog sat on the mat", "the mat", "dog sat"],
  ["a cat", "the cat", "cat"],
]


@pytest.mark.slow(seconds=7)
def test_beam_rescore_fills_the_score_cache_of_run_rescoring(tiny_lm, tmp_path, loads):
  lists = _json_lists(tmp_path / "lists.json", ROWS)
  refs = tmp_path / "refs.txt"
  refs.write_text("".join(f"seg{i} {row[0]}\n" for i, row in enumerate(ROWS)))
  common = [
    f"--lm=tta={tiny_lm}",
    "--task=nmt",
    "--format=json",
    f"--dev_file={lists}",
    f"--dev_refs={refs}",
    f"--test_file={lists}",
    f"--test_refs={refs}",
    "--chunk_size=3",
  ]
  one, beam = tmp_path / "one", tmp_path / "beam"
  loaded, calls = loads
  commands.run("run_rescoring.py", *common, f"--output_dir={one}", status=0)
  one_calls = calls[:]
  del loaded[:], calls[:]
  commands.run("beam_rescore.py", *common, f"--output_dir={beam}", "--num_shards=3", status=0)
  whole = sorted((one / "cache" / "lm_scores.jsonl").read_text().splitlines())
  assert len(whole) == len({t for row in ROWS for t in row})
  # The same entries (the same numbers: each part scored the chunks one process scores).
  assert sorted((beam / "cache" / "lm_scores.jsonl").read_text().splitlines()) == whole
  assert (beam / "weights.json").read_text() == (one / "weights.json").read_text()
  assert (beam / "test" / "text").read_text() == (one / "test" / "text").read_text()
  assert sorted(calls) == sorted(one_calls) and len(calls) == 4  # 12 sentences, chunks of 3
  # The worker loaded the LM once for its 3 parts; the merge loads it for the cache key.
  assert loaded == [tiny_lm, tiny_lm]


# ----------------------------------------------------------------------------------------------
# A bucket: TensorFlow's ram:// stands in for gs:// (the DirectRunner's workers share this process)
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def bucket():
  root = f"ram://beam-{os.getpid()}-{np.random.default_rng().integers(1 << 30)}"
  yield root
  if tf.io.gfile.exists(root):
    tf.io.gfile.rmtree(root)


def _put_tree(local_dir, remote_dir):
  for name in os.listdir(local_dir):
    tf.io.gfile.copy(os.path.join(local_dir, name), f"{remote_dir}/{name}", overwrite=True)
  return remote_dir


@pytest.mark.slow(seconds=9)
def test_records_and_scores_land_in_a_bucket_as_in_a_local_dir(
  corpus, tiny_lm, tmp_path, bucket, monkeypatch
):
  monkeypatch.setattr(pretraining_data, "BLOCK_BYTES", 2000)
  plain = corpus[0].split(",")[0]
  remote_corpus = f"{bucket}/in/a.txt"
  tf.io.gfile.makedirs(f"{bucket}/in")
  tf.io.gfile.copy(plain, remote_corpus)
  local = beam_data_job.run(_beam_data_params((plain, corpus[1]), str(tmp_path / "records")))
  remote = beam_data_job.run(_beam_data_params((remote_corpus, corpus[1]), f"{bucket}/records"))
  assert local["train"] == remote["train"] and local["eval"] == remote["eval"]
  names = sorted(os.listdir(tmp_path / "records"))
  assert sorted(tf.io.gfile.listdir(f"{bucket}/records")) == names
  for name in names:
    if name.endswith(".tfrecord") or name == "vocab.txt":
      with tf.io.gfile.GFile(f"{bucket}/records/{name}", "rb") as f:
        assert f.read() == (tmp_path / "records" / name).read_bytes(), name
  # Scores: the model, the input and the output in the bucket.
  sentences = tmp_path / "in.txt"
  sentences.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
  commands.run(
    "score.py",
    f"--model_dir={tiny_lm}",
    f"--input_file={sentences}",
    f"--output_file={tmp_path / 'scores.jsonl'}",
    status=0,
  )
  model = _put_tree(tiny_lm, f"{bucket}/tta")
  tf.io.gfile.copy(str(sentences), f"{bucket}/in.txt")
  commands.run(
    "beam_score.py",
    f"--model_dir={model}",
    f"--input_file={bucket}/in.txt",
    f"--output_file={bucket}/out/scores.jsonl",
    "--num_shards=3",
    status=0,
  )
  with tf.io.gfile.GFile(f"{bucket}/out/scores.jsonl", "rb") as f:
    assert f.read() == (tmp_path / "scores.jsonl").read_bytes()
  assert tf.io.gfile.listdir(f"{bucket}/out") == ["scores.jsonl"]

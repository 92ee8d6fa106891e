"""Every command on a bucket: TensorFlow's in-memory ram:// file system stands in for gs:// (the
same tf.io.gfile calls; no network here). Each command is run end to end in this process, its
inputs and outputs on ram://, and compared with the same run on local files; no local folder
named after the URL ("ram:") may appear; a scheme TensorFlow lacks is one line, exit 2."""

import json
import os
import uuid

import commands
import pytest
import tensorflow as tf

from pretraining import pretraining_data
import tokenization

gfile = tf.io.gfile

_WORDS = "the a man woman house river old new green small tall walked saw found quietly".split()


@pytest.fixture
def bucket(tmp_path, monkeypatch):
  """A fresh ram:// directory (removed after the test); the working directory is an empty local
  one, which must stay empty: no "ram:" folder made of the URL."""
  root = f"ram://test-{uuid.uuid4().hex[:8]}"
  work = tmp_path / "cwd"
  work.mkdir()
  monkeypatch.chdir(work)
  yield root
  assert os.listdir(work) == []
  if gfile.exists(root):
    gfile.rmtree(root)


def _put(path, text):
  with gfile.GFile(path, "w") as f:
    f.write(text)
  return path


def _get(path, mode="r"):
  with gfile.GFile(path, mode) as f:
    return f.read()


def _tree(root):
  """{relative path: bytes} of every file under `root` (local or ram://)."""
  found = {}
  for directory, _, names in gfile.walk(root):
    for name in (n for n in names if not n.startswith(".")):  # not a lock file
      path = os.path.join(directory, name)
      if not gfile.exists(path):
        continue  # ram:// lists by prefix: out/pairs lists out/pairs_results.json as _results.json
      found[os.path.relpath(path, root)] = _get(path, "rb")
  return found


def _corpus(count=400):
  return "".join(
    f"line {i} the {_WORDS[i % 15]} {_WORDS[(7 * i) % 15]} walked\n" for i in range(count)
  )


def _vocab_text():
  digits = [str(d) for d in range(10)] + [f"##{d}" for d in range(10)]
  return "\n".join(list(tokenization.SPECIAL_TOKENS) + ["line"] + _WORDS + digits) + "\n"


def _data_job(input_file, vocab, output_dir, *extra):
  return commands.run(
    "create_pretraining_data.py",
    f"--input_file={input_file}",
    f"--vocab_file={vocab}",
    f"--output_dir={output_dir}",
    "--max_seq_length=16",
    "--num_shards=2",
    *extra,
    status=0,
  )


def _without_times(tree):
  stats = json.loads(tree.pop("data_stats.json"))
  # What names the input path (its fingerprint too) differs; everything else is the same.
  for key in ("seconds", "sentences_per_second", "args", "input_sha256", "fingerprint", "key"):
    stats.pop(key)
  return tree, stats


@pytest.mark.slow(seconds=15)
def test_the_data_job_writes_a_bucket_with_workers_as_it_writes_a_local_dir(
  bucket, tmp_path, monkeypatch
):
  # Blocks of ~2 kB: several blocks, so that two worker processes make them (and the parent
  # moves each into the bucket: a worker does not see the parent's ram://).
  monkeypatch.setattr(pretraining_data, "BLOCK_BYTES", 2000)
  local_input = tmp_path / "corpus.txt"
  local_input.write_text(_corpus())
  vocab = tmp_path / "vocab.txt"
  vocab.write_text(_vocab_text())
  _data_job(local_input, vocab, tmp_path / "local", "--num_workers=1")
  remote_input = _put(f"{bucket}/in/corpus.txt", _corpus())
  _data_job(remote_input, vocab, f"{bucket}/records", "--num_workers=2")
  local, local_stats = _without_times(_tree(str(tmp_path / "local")))
  remote, remote_stats = _without_times(_tree(f"{bucket}/records"))
  assert sorted(remote) == sorted(local) and len(local) == 4  # 2 train, 1 eval shard, vocab
  assert remote == local and remote_stats == local_stats
  # A second run finds the bucket's output complete.
  again = _data_job(remote_input, vocab, f"{bucket}/records")
  assert json.loads(again.stdout)["reused"] is True


@pytest.mark.slow(seconds=30)
def test_pretraining_reads_and_resumes_in_a_bucket(bucket, tmp_path):
  vocab = _put(f"{bucket}/vocab.txt", _vocab_text())
  _data_job(_put(f"{bucket}/corpus.txt", _corpus(200)), vocab, f"{bucket}/records")
  model = f"{bucket}/model"
  args = [
    f"--input_file={bucket}/records/train-*.tfrecord",
    f"--output_dir={model}",
    "--hidden_size=16",
    "--num_hidden_layers=1",
    "--num_attention_heads=2",
    "--intermediate_size=32",
    "--max_position_embeddings=16",
    "--max_seq_length=16",
    "--train_batch_size=4",
    "--num_warmup_steps=1",
    "--steps_per_loop=2",
    "--save_checkpoints_steps=2",
  ]
  commands.run("run_pretraining.py", *args, "--num_train_steps=2", status=0)
  assert gfile.exists(f"{model}/run.json")  # the run record is in the bucket
  assert gfile.exists(f"{model}/ckpt-2.index") and gfile.exists(f"{model}/config.json")
  second = commands.run("run_pretraining.py", *args, "--num_train_steps=4", status=0)
  assert f"resumed from {model}/ckpt-2 at step 2" in second.stderr
  summary = json.loads(_get(f"{model}/train_summary.json"))
  assert summary["final_step"] == 4 and gfile.exists(f"{model}/ckpt-4.index")


_LINES = ["the cat sat on the mat", "a dog sat", "the mat"]


@pytest.mark.slow(seconds=8)
def test_score_reads_and_writes_a_bucket_as_local_files(bucket, tmp_path, tiny_tta):
  local_input = tmp_path / "in.txt"
  local_input.write_text("\n".join(_LINES) + "\n")
  local_out = tmp_path / "out.jsonl"
  commands.run(
    "score.py", f"--model_dir={tiny_tta}", f"--input_file={local_input}",
    f"--output_file={local_out}", "--batch_size=1", status=0,
  )  # fmt: skip
  model = f"{bucket}/tta"
  for name, content in _tree(tiny_tta).items():
    with gfile.GFile(f"{model}/{name}", "wb") as f:
      f.write(content)
  remote_input = _put(f"{bucket}/in.txt", "\n".join(_LINES) + "\n")
  for shard in range(2):
    commands.run(
      "score.py", f"--model_dir={model}", f"--input_file={remote_input}",
      f"--output_file={bucket}/out.jsonl", "--num_shards=2", f"--shard_id={shard}",
      "--batch_size=1", status=0,
    )  # fmt: skip
  commands.run(
    "score.py", f"--output_file={bucket}/out.jsonl", "--num_shards=2", "--merge", status=0
  )
  assert _get(f"{bucket}/out.jsonl") == local_out.read_text()


def _json_lists(rows):
  return json.dumps(
    {
      f"seg{i}": {f"hyp_{r + 1}": {"score": -1.0 - r, "text": h} for r, h in enumerate(hyps)}
      for i, hyps in enumerate(rows)
    }
  )


@pytest.mark.slow(seconds=8)
def test_rescoring_reads_and_writes_a_bucket_as_local_files(bucket, tmp_path, tiny_tta):
  rows = [["the cat sat on a mat", "cat sat"], ["the dog sat on the mat", "the mat"]]
  refs = "seg0 the cat sat on the mat\nseg1 the dog sat on the mat\n"
  runs = {}
  for root in (str(tmp_path / "local"), bucket):
    gfile.makedirs(root)
    lists, ref = _put(f"{root}/lists.json", _json_lists(rows)), _put(f"{root}/ref", refs)
    flags = [f"--dev_file={lists}", f"--dev_refs={ref}", f"--test_file={lists}"]
    out = f"{root}/out"
    result = commands.run(
      "run_rescoring.py", f"--lm=tta={tiny_tta}", "--task=nmt", "--format=json", *flags,
      f"--test_refs={ref}", f"--output_dir={out}", status=0,
    )  # fmt: skip
    tree = _tree(out)
    report = json.loads(tree.pop("rescoring_report.json"))
    tree.pop("run.json")  # the run record, in the bucket too (it names other paths)
    runs[root] = (tree, report["sets"]["test"]["rescored"], result)
  local, remote = runs[str(tmp_path / "local")], runs[bucket]
  assert sorted(remote[0]) == sorted(local[0])
  assert {k: v for k, v in remote[0].items() if not k.startswith("cache/")} == {
    k: v for k, v in local[0].items() if not k.startswith("cache/")
  }
  assert remote[1] == local[1] and "not locked" in remote[2].stderr
  # The score cache is in the bucket: every hypothesis once.
  cache = _get(f"{bucket}/out/cache/lm_scores.jsonl").splitlines()
  assert sorted(json.loads(line)["text"] for line in cache) == sorted(h for r in rows for h in r)


@pytest.mark.parametrize(
  "script, flag",
  [
    ("create_pretraining_data.py", "--output_dir"),
    ("run_pretraining.py", "--output_dir"),
    ("score.py", "--output_file"),
  ],
)
def test_a_scheme_tensorflow_lacks_is_one_line_and_exit_2(bucket, tmp_path, script, flag):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text(_vocab_text())
  text = tmp_path / "in.txt"
  text.write_text(_corpus(10))
  extra = {
    "create_pretraining_data.py": [f"--input_file={text}", f"--vocab_file={vocab}"],
    "run_pretraining.py": ["--synthetic_data"],
    "score.py": [f"--input_file={text}", "--model_dir=kenlm:missing.arpa"],
  }[script]
  result = commands.run(script, *extra, f"{flag}=s3://bucket/out", status=2)
  assert result.stderr.strip().splitlines()[-1] == (
    f"{script}: error: {flag} s3://bucket/out: TensorFlow has no file system for s3:// (it has "
    "gs://, ram://; s3:// and hdfs:// need tensorflow-io); give a local path or one of those"
  )


def test_an_input_in_a_scheme_tensorflow_lacks_is_one_line_and_exit_2(bucket, tmp_path):
  # Issue 56's probes: score.py looked for the input before checking its scheme, and
  # TensorFlow's UnimplementedError for s3:// was a traceback.
  result = commands.run(
    "score.py",
    "--model_dir=kenlm:missing.arpa",
    "--input_file=s3://bucket/in.txt",
    f"--output_file={tmp_path / 'out.jsonl'}",
    status=2,
  )
  assert result.stderr.strip().splitlines()[-1] == (
    "score.py: error: --input_file s3://bucket/in.txt: TensorFlow has no file system for s3:// "
    "(it has gs://, ram://; s3:// and hdfs:// need tensorflow-io); give a local path or one of "
    "those"
  )


def _unreachable(monkeypatch):
  """gfile as it is with a gs:// path and no network here: FailedPreconditionError (not an
  OSError) from the first call that touches the bucket."""

  def refuse(path, *args, **kwargs):
    del args, kwargs
    raise tf.errors.FailedPreconditionError(
      None,
      None,
      "Error executing an HTTP request: libcurl code 6 meaning 'Could not resolve hostname', error "
      f"details: Could not resolve host: www.googleapis.com\n\t when reading metadata of {path}",
    )

  for name in ("exists", "stat", "isdir", "glob", "GFile", "makedirs", "listdir"):
    monkeypatch.setattr(gfile, name, refuse)


@pytest.mark.parametrize(
  "script, args, flag",
  [
    ("score.py", ["--model_dir=kenlm:missing.arpa", "--input_file=IN"], "--output_file"),
    ("run_benchmark.py", ["--quick"], "--output_dir"),
    ("run_sts.py", ["--model_dir=tta=IN", "--pairs_file=IN"], "--output_dir"),
  ],
)
def test_a_bucket_out_of_reach_is_one_line_naming_the_flag(
  tmp_path, monkeypatch, script, args, flag
):
  # Probe F2: gfile's FailedPreconditionError was a traceback (score.py, run_benchmark.py,
  # convert_nbest.py with gs:// and no network; convert_nbest.py now refuses a bucket).
  text = tmp_path / "in.txt"
  text.write_text("a b\n")
  _unreachable(monkeypatch)
  args = [a.replace("IN", str(text)) for a in args]
  result = commands.run(script, *args, f"{flag}=gs://some-bucket/out", status=2)
  assert result.stderr.strip().splitlines()[-1] == (
    f"{script}: error: {flag} gs://some-bucket/out: cannot reach it (Error executing an HTTP "
    "request: libcurl code 6 meaning 'Could not resolve hostname', error details: Could not "
    "resolve host: www.googleapis.com); check the network and the credentials"
  )
  assert os.listdir(tmp_path) == ["in.txt"]


def test_a_bucket_out_of_reach_is_an_oserror_naming_the_path(monkeypatch):
  # What a command reads or writes later (inside cli.user_input: one line) fails as a local
  # file does, naming the path, not with TensorFlow's OpError.
  from util import io_utils  # pylint: disable=g-import-not-at-top

  _unreachable(monkeypatch)
  for call in (io_utils.exists, io_utils.stat, io_utils.listdir, io_utils.open_file):
    with pytest.raises(OSError, match=r"^gs://b/x: Error executing an HTTP request"):
      call("gs://b/x")


def _put_tree(local, remote):
  """Copies the local directory `local` (a model dir) to `remote`; returns `remote`."""
  for name, content in _tree(str(local)).items():
    with gfile.GFile(f"{remote}/{name}", "wb") as f:
      f.write(content)
  return remote


_FIT = "the cat sat\na dog sat\nthe mat\na man\n"
_PAIRS = "the cat sat\tthe mat\t1.0\na dog sat\tthe cat\t2.5\nthe mat\ta man\t4.0\n"


@pytest.mark.slow(seconds=8)
def test_sts_reads_and_writes_a_bucket_as_local_files(bucket, tmp_path, tiny_tta):
  runs = {}
  for root in (str(tmp_path / "local"), bucket):
    gfile.makedirs(root)
    model = _put_tree(tiny_tta, f"{root}/tta") if root == bucket else tiny_tta
    flags = [
      f"--model_dir=tta={model}",
      f"--pairs_file={_put(f'{root}/mine.tsv', _PAIRS)}",
      f"--whiten_fit={_put(f'{root}/fit.txt', _FIT)}",
      "--whiten=2",
      "--representations=context",
      "--bootstrap_resamples=10",
    ]
    commands.run("run_sts.py", *flags, f"--output_dir={root}/out", status=0)
    tree = _tree(f"{root}/out")
    assert "run.json" in tree  # the run record, in the bucket too
    runs[root] = (tree, flags)
  (local, _), (remote, flags) = runs[str(tmp_path / "local")], runs[bucket]
  assert sorted(remote) == sorted(local) and "whitening/mine.npz" in remote
  for name in ("pairs/mine.tsv", "pairs_results.md", "whitening/mine.npz"):
    assert remote[name] == local[name], name
  # The transforms load back from the bucket; a second run is the same job, complete.
  again = commands.run(
    "run_sts.py", *flags[:2], f"--whiten_load={bucket}/out/whitening/mine.npz", "--whiten=2",
    "--representations=context", "--bootstrap_resamples=10", f"--output_dir={bucket}/again",
    status=0,
  )  # fmt: skip
  assert "tta context+W2" in again.stdout
  # run.json in the bucket refuses another job.
  other = commands.run("run_sts.py", *flags[:2], f"--output_dir={bucket}/out", status=2)
  assert "holds another job" in other.stderr.strip().splitlines()[-1]


@pytest.mark.slow(seconds=10)
def test_an_export_goes_into_a_bucket_and_loads_from_it(bucket, tiny_tta):
  commands.run(
    "export_saved_model.py", f"--model_dir={tiny_tta}", f"--export_dir={bucket}/export", status=0
  )
  loaded = tf.saved_model.load(f"{bucket}/export")
  scores = loaded.signatures["score"](texts=tf.constant(["the cat sat"]))
  assert int(scores["num_tokens"][0]) > 0 and gfile.exists(f"{bucket}/export/assets.extra")


@pytest.mark.parametrize(
  "script, flag, extra",
  [
    ("ngram.py", "--train_text", ["--output=lm.bin"]),
    ("ngram.py", "--model", ["--score_file=in.txt"]),
    ("reproduce.py", "--work_dir", ["--mode=quick"]),
    ("corpus.py", "--output_dir", ["--input=in.txt"]),
    ("convert_nbest.py", "--output_dir", ["--input=in.txt", "--output_format=kaldi"]),
    ("convert_checkpoint.py", "--output_dir", ["--input=hf:in"]),
    ("run_mwer.py", "--output_dir", ["--init_model=m"]),
  ],
)
def test_a_command_of_local_tools_refuses_a_bucket_in_one_line(bucket, script, flag, extra):
  result = commands.run(script, f"{flag}={bucket}/x", *extra, status=2)
  line = result.stderr.strip().splitlines()[-1]
  assert line.startswith(f"{script}: error: {flag} {bucket}/x: ") and "local" in line, line
  assert not gfile.exists(f"{bucket}/x")


def test_a_kenlm_model_in_a_bucket_is_refused_naming_why(tmp_path):
  # KenLM opens its file in C++: a model in a reachable bucket was "n-gram model file not found".
  model = f"ram://kenlm-{uuid.uuid4().hex[:8]}/lm.arpa"
  with gfile.GFile(model, "w") as f:
    f.write("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.0\t<unk>\t0\n\n\\end\\\n")
  text = tmp_path / "in.txt"
  text.write_text("a b\n")
  try:
    result = commands.run(
      "score.py",
      f"--model_dir=kenlm:{model}",
      f"--input_file={text}",
      f"--output_file={tmp_path / 'out.jsonl'}",
      status=2,
    )
  finally:
    gfile.remove(model)
  assert result.stderr.strip().splitlines()[-1] == (
    f"score.py: error: {model}: KenLM reads local files only; copy the model to a local path "
    "(gcloud storage cp) and give that"
  )
  assert sorted(os.listdir(tmp_path)) == ["in.txt"]

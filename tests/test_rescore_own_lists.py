"""run_rescoring.py on your own N-best files (--test_file): tuned weights applied to a blind
test set, rescored lists in the input format, 1-best files, WER with S/D/I, and MT with two
references. Tiny random T-TA model (conftest), lists converted from the shared LibriSpeech data
(tests/nbest_fixtures.py) or written by hand."""

import json
import os
import re

import commands
import conftest
import jiwer
import nbest_fixtures
import pytest
import sacrebleu
import tensorflow as tf

from lm import model_dir
import modeling
from nbest import formats
from nbest import rescoring
from nbest import rescoring_job
from nbest import shared_data
from nbest import types
from nbest.formats import espnet
import tokenization

ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
  root = tmp_path_factory.mktemp("tiny")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(conftest.WORDS)) + "\n")
  tf.keras.utils.set_random_seed(3)
  config = conftest.tiny_config(vocab_size=len(tokenization.SPECIAL_TOKENS) + len(conftest.WORDS))
  model_dir.save_model_dir(modeling.build_model(config, "tta"), str(vocab), str(root / "tta"))
  return str(root / "tta")


def _rescore(*args):
  return commands.run("run_rescoring.py", *args, status=0).stdout


def _refused_with_weights(lm, lists, weights, out):
  """run_rescoring.py on JSON `lists` with a weights file, which must exit 2: (the result, its
  error lines)."""
  result = commands.run(
    "run_rescoring.py",
    f"--lm=tta={lm}",
    "--format=json",
    f"--test_file={lists}",
    f"--weights_file={weights}",
    f"--output_dir={out}",
    status=2,
  )
  return result, [l for l in result.stderr.splitlines() if l.startswith("run_rescoring.py: error")]


def _kaldi_set(lists, root):
  """A Kaldi directory (`text` and `<name>.cost`) and its reference file."""
  text, refs, options = nbest_fixtures.write_kaldi(lists, str(root / "src"))
  os.makedirs(root / "dir")
  os.rename(text, root / "dir" / "text")
  for name, path in options["costs"].items():
    os.rename(path, root / "dir" / f"{name}.cost")
  return str(root / "dir"), refs


def _kaldi_dev_test(tmp_path, num_dev, num_test):
  """Kaldi dev and test sets of the first lists of dev_other: (lists, (dev, its refs), (test,
  its refs))."""
  conftest.data_dir_or_skip(shared_data.ESPNET_DIR)
  # Only the lists used are parsed (a whole set takes seconds).
  first = types.list_selection(max_lists=num_dev + num_test)
  lists = espnet.read_espnet_nbest("dev_other", select=first)
  dev = _kaldi_set(lists[:num_dev], tmp_path / "dev")
  return lists, dev, _kaldi_set(lists[num_dev:], tmp_path / "test")


@pytest.mark.slow(seconds=6)
def test_an_output_dir_holding_another_rescoring_job_is_refused_until_overwrite(tiny_lm, tmp_path):
  _, (dev, dev_refs), (test, _) = _kaldi_dev_test(tmp_path, 3, 3)
  out = tmp_path / "out"
  common = [f"--lm=tta={tiny_lm}", "--format=kaldi", f"--test_file={test}", f"--output_dir={out}"]
  tuned = [*common, f"--dev_file={dev}", f"--dev_refs={dev_refs}", "--first_pass=decoder,ctc"]
  _rescore(*tuned)
  _rescore(*tuned)  # the same job again: it resumes (the cache) and rewrites its outputs
  # Another job (the saved weights on the test set alone) would leave the old dev/ and
  # weights.json beside its own outputs: refused in one line naming what differs, before scoring.
  # Its weights file, read from inside --output_dir, is refused first: --overwrite would remove it.
  result = commands.run("run_rescoring.py", *common, f"--weights_file={out}/weights.json", status=2)
  assert f"--output_dir {out} contains --weights_file {out}/weights.json: " in result.stderr
  weights = tmp_path / "weights.json"
  weights.write_bytes((out / "weights.json").read_bytes())
  blind = [*common, f"--weights_file={weights}"]
  result = commands.run("run_rescoring.py", *blind, status=2)
  (line,) = [l for l in result.stderr.splitlines() if l.startswith("run_rescoring.py: error")]
  assert f"--output_dir {out} holds another job: dev_file" in line and "--overwrite" in line
  assert (out / "dev").is_dir() and (out / "weights.json").exists()
  # --overwrite removes the old job's outputs (not the score cache, keyed by model) first.
  _rescore(*blind, "--overwrite")
  assert sorted(os.listdir(out)) == ["cache", "rescoring_report.json", "run.json", "test"]


@pytest.mark.slow(seconds=5)
def test_weights_tuned_on_dev_give_a_blind_test_set_the_same_1best(tiny_lm, tmp_path):
  lists, (dev, dev_refs), (test, test_refs) = _kaldi_dev_test(tmp_path, 5, 3)
  tuned, blind = tmp_path / "tuned", tmp_path / "blind"
  common = [f"--lm=tta={tiny_lm}", "--format=kaldi", f"--test_file={test}"]
  _rescore(
    *common,
    f"--dev_file={dev}",
    f"--dev_refs={dev_refs}",
    f"--test_refs={test_refs}",
    "--first_pass=decoder,ctc",
    f"--output_dir={tuned}",
  )
  weights = json.loads((tuned / "weights.json").read_text())
  assert set(weights["first_pass"]) == {"decoder", "ctc"} and set(weights["lms"]) == {"tta"}
  assert weights["dev"] <= weights["grid_start"]["dev"] <= weights["dev_first_pass"]
  _rescore(*common, f"--weights_file={tuned / 'weights.json'}", f"--output_dir={blind}")

  assert (blind / "test" / "text").read_text() == (tuned / "test" / "text").read_text()
  report = json.loads((tuned / "rescoring_report.json").read_text())["sets"]["test"]
  blind_report = json.loads((blind / "rescoring_report.json").read_text())["sets"]["test"]
  assert blind_report["rescored"] is None and "dev" not in blind_report
  # The WER and its counts, recomputed from the 1-best file with jiwer.
  lines = (blind / "test" / "text").read_text().splitlines()
  chosen = {key: text for key, _, text in (line.partition(" ") for line in lines)}
  refs = {n.key: n.refs[0] for n in lists[5:]}
  out = jiwer.process_words([refs[k] for k in refs], [chosen[k] for k in refs])
  got = report["rescored"]
  assert report["oracle"] <= got["wer"] and blind_report["oracle"] is None
  assert got["wer"] == pytest.approx(100 * out.wer)
  assert (got["substitutions"], got["deletions"], got["insertions"]) == (
    out.substitutions,
    out.deletions,
    out.insertions,
  )
  trn = (blind / "test" / "hyp.trn").read_text().splitlines()
  assert trn == [f"{chosen[k]} ({k})".lstrip() for k in chosen]
  # The rescored lists, read back in their format, carry the LM's score as a feature.
  again = formats.read_nbest("kaldi", str(blind / "test" / "nbest"))
  assert [[h.text for h in n.hyps] for n in again] == [[h.text for h in n.hyps] for n in lists[5:]]
  assert all("tta" in h.scores and h.scores["tta"] < 0 for n in again for h in n.hyps)


def _json_lists(path, rows):
  data = {
    f"seg{i}": {f"hyp_{r + 1}": {"score": -1.0 - r, "text": h} for r, h in enumerate(hyps)}
    for i, hyps in enumerate(rows)
  }
  path.write_text(json.dumps(data, indent=1) + "\n")
  return str(path)


@pytest.mark.slow(seconds=3)
def test_nmt_with_json_lists_and_two_references(tiny_lm, tmp_path):
  rows = [
    ["the cat sat on a mat", "cat sat"],
    ["a dog ran far away", "dog dog ran"],
    ["the dog sat on the mat", "the mat"],
  ]
  refs_a = ["the cat sat on the mat", "a dog ran away", "the dog sat on the mat"]
  refs_b = ["a cat sat on a mat", "the dog ran far away", "a dog sat on a mat"]
  lists = _json_lists(tmp_path / "lists.json", rows)
  ref_files = []
  for name, refs in (("a", refs_a), ("b", refs_b)):
    ref_files.append(tmp_path / f"ref.{name}")
    ref_files[-1].write_text("".join(f"seg{i} {r}\n" for i, r in enumerate(refs)))
  refs_flag = ",".join(str(p) for p in ref_files)
  out = tmp_path / "out"
  stdout = _rescore(
    f"--lm=tta={tiny_lm}",
    "--task=nmt",
    "--format=json",
    f"--dev_file={lists}",
    f"--dev_refs={refs_flag}",
    f"--test_file={lists}",
    f"--test_refs={refs_flag}",
    f"--output_dir={out}",
  )
  chosen = [line.split(" ", 1)[1] for line in (out / "test" / "text").read_text().splitlines()]
  bleu = sacrebleu.metrics.BLEU()
  score = bleu.corpus_score(chosen, [refs_a, refs_b])
  line = next(l for l in stdout.splitlines() if l.startswith("test: rescored"))
  assert f"BLEU {score.score:.2f} ({bleu.get_signature()})" in line
  assert "nrefs:2" in line and "chrF" in line
  weights = json.loads((out / "weights.json").read_text())
  assert weights["metric"] == "bleu" and weights["dev"] >= weights["dev_first_pass"]


@pytest.mark.slow(seconds=3)
def test_a_weights_file_of_other_lms_is_one_line_before_any_scoring(tiny_lm, tmp_path):
  lists = _json_lists(tmp_path / "lists.json", [["the cat sat", "a cat"]])
  weights = tmp_path / "weights.json"
  weights.write_text('{"first_pass": {"score": 1.0}, "lms": {"ngram": 0.5}, "length": 0.0}\n')
  result, errors = _refused_with_weights(tiny_lm, lists, weights, tmp_path / "out")
  assert errors == [
    f"run_rescoring.py: error: {weights}:1: weights for the LMs ['ngram'], "
    "but --model_dir names ['tta']"
  ]
  assert not (tmp_path / "out" / "cache").exists()


def _lists_with(columns, refs=("a b",)):
  hyps = [types.Hypothesis("a b", {c: -1.0 for c in columns})]
  return [types.NBestList("u1", list(refs), hyps)]


@pytest.mark.parametrize(
  "weights, names, first_pass, message",
  [
    # A weights file naming a first-pass column the lists lack (no longer found after scoring).
    (
      {"first_pass": {"decoder": 1.0}, "lms": {"tta": 0.5}},
      ["tta"],
      [],
      "{weights}: the first-pass column 'decoder' is not in the test lists",
    ),
    # --first_pass beside --weights_file: checked against the file, not ignored.
    (
      {"first_pass": {"score": 1.0}, "lms": {"tta": 0.5}},
      ["tta"],
      ["nosuch"],
      "--first_pass names ['nosuch'], but {weights} weighs the first-pass columns ['score']",
    ),
    (None, ["tta"], ["nosuch"], "--first_pass: the first-pass column 'nosuch' is not in the dev"),
    (None, ["tta"], ["score:abc"], "--first_pass='score:abc': expected NAME or NAME:WEIGHT"),
    (None, ["tta"], ["score:nan"], "--first_pass='score:nan': expected NAME or NAME:WEIGHT"),
    (None, ["score"], [], "--model_dir: the LM name 'score' is a first-pass column's"),
  ],
)
def test_the_combination_is_checked_before_any_lm_scores(
  tmp_path, weights, names, first_pass, message
):
  # run_rescoring.py calls this on the lists it read, before it loads an LM.
  path = None
  if weights is not None:
    path = tmp_path / "weights.json"
    path.write_text(json.dumps(dict(weights, length=0.0)))
  sets = {"dev": _lists_with(["score"]), "test": _lists_with(["score"], refs=())}
  if path is not None:
    del sets["dev"]
  with pytest.raises(ValueError) as error:
    rescoring.check_tuning_input(
      sets, names, path and str(path), first_pass, str(tmp_path / "dev.json")
    )
  assert str(error.value).startswith(message.format(weights=path)), str(error.value)


@pytest.mark.slow(seconds=12)
@pytest.mark.parametrize(
  "fmt, cut",
  [
    ("fairseq", "--max_lists=2"),
    ("moses", "--max_lists=2"),
    ("nemo", "--max_lists=2"),
    ("moses", "--sample_lists=2"),
    ("sockeye", "--max_lists=2"),
  ],
)
def test_a_cut_set_of_line_based_lists_is_rescored_and_written_back(tiny_lm, tmp_path, fmt, cut):
  conftest.data_dir_or_skip(shared_data.ESPNET_DIR)
  lists = espnet.read_espnet_nbest("dev_other", select=types.list_selection(max_lists=8))
  dev, dev_refs, options = nbest_fixtures.WRITERS[fmt](lists[:4], str(tmp_path / "dev"))
  test, test_refs, _ = nbest_fixtures.WRITERS[fmt](lists[4:], str(tmp_path / "test"))
  out = tmp_path / "out"
  _rescore(
    f"--lm=tta={tiny_lm}",
    f"--format={fmt}",
    *[f"--format_option={k}={v}" for k, v in options.items()],
    f"--dev_file={dev}",
    f"--dev_refs={dev_refs}",
    f"--test_file={test}",
    f"--test_refs={test_refs}",
    cut,
    f"--output_dir={out}",
  )
  report = json.loads((out / "rescoring_report.json").read_text())
  assert report["sets"]["test"]["lists"] == report["sets"]["dev"]["lists"] == 2
  # The rescored file holds the kept lists only, each hypothesis with the LM's score.
  rescored = out / "test" / os.path.basename(test)
  back_options = dict(options)
  if fmt == "nemo":
    back_options["columns"] = ("score", "tta")
  back = formats.read_nbest(fmt, str(rescored), **back_options)
  sample = cut.startswith("--sample")
  kept = [lists[4:][i] for i in types.list_selection(None, 2, 0)(4)] if sample else lists[4:6]
  assert [[h.text for h in n.hyps] for n in back] == [[h.text for h in n.hyps] for n in kept]
  assert all(h.scores["tta"] < 0 for n in back for h in n.hyps)
  assert len((out / "test" / "text").read_text().splitlines()) == 2


def test_a_damaged_score_cache_is_one_line_before_any_lm_loads(tiny_lm, tmp_path, monkeypatch):
  lists = _json_lists(tmp_path / "lists.json", [["the cat sat", "a cat"]])
  weights = tmp_path / "weights.json"
  weights.write_text('{"first_pass": {"score": 1.0}, "lms": {"tta": 0.5}, "length": 0.0}\n')
  cache = tmp_path / "out" / "cache" / "lm_scores.jsonl"
  cache.parent.mkdir(parents=True)
  good = '{"model": "m", "text": "a", "value": [-1.0, 2, false]}\n'
  cache.write_text(good + '{"model": "m", "text": \n' + good)

  def no_loading(*args, **kwargs):
    raise AssertionError("an LM was loaded")

  monkeypatch.setattr(rescoring_job.inference, "load_lm", no_loading)
  result, errors = _refused_with_weights(tiny_lm, lists, weights, tmp_path / "out")
  assert errors == [
    f"run_rescoring.py: error: {cache}:2: not a JSON cache record (Expecting value at column "
    "24); remove the line (its score is computed again)"
  ]
  assert "Traceback" not in result.stderr


@pytest.mark.slow(seconds=5)
def test_a_moses_sparse_feature_with_a_comma_is_named_with_a_backslash(tiny_lm, tmp_path):
  # Moses writes a sparse feature only where it is not 0 (BaseManager::OutputFeatureScores).
  nbest = tmp_path / "nbest.txt"
  nbest.write_text(
    "0 ||| the cat sat ||| LM0= -4.5 pl_1,1= 2 ||| -3.5\n"
    "0 ||| a cat sat ||| LM0= -5 ||| -5\n"
    "1 ||| the dog ran ||| LM0= -3 ||| -3\n"
    "1 ||| a dog ran ||| LM0= -3.5 pl_1,1= 1 ||| -3\n"
  )
  refs = tmp_path / "refs.txt"
  refs.write_text("the cat sat\na dog ran\n")
  out = tmp_path / "out"
  _rescore(
    f"--lm=tta={tiny_lm}",
    "--format=moses",
    f"--dev_file={nbest}",
    f"--dev_refs={refs}",
    f"--test_file={nbest}",
    "--first_pass=pl_1\\,1:0.5,LM0",
    f"--output_dir={out}",
  )
  weights = json.loads((out / "weights.json").read_text())
  assert sorted(weights["first_pass"]) == ["LM0", "pl_1,1"]
  assert weights["grid_start"]["weights"]["first_pass"]["pl_1,1"] == 0.5
  rescored = (out / "test" / "nbest.txt").read_text().splitlines()
  assert rescored[0].startswith("0 ||| the cat sat ||| LM0= -4.5 pl_1,1= 2 tta= ")


@pytest.mark.slow(seconds=3)
@pytest.mark.parametrize(
  "long_inputs, counted, line",
  [
    ("window", "windowed", "read in sliding windows"),
    ("truncate", "truncated", "truncated to fit"),
  ],
)
def test_long_hypotheses_are_read_in_windows_or_truncated_and_counted(
  tiny_lm, tmp_path, long_inputs, counted, line
):
  long = " ".join(["the cat sat"] * 6)  # 18 pieces, over the tiny model's 16 positions
  rows = [["the cat sat", long], ["a dog ran", "a dog"]]
  lists = _json_lists(tmp_path / "lists.json", rows)
  refs = tmp_path / "refs.txt"
  refs.write_text("seg0 the cat sat\nseg1 a dog ran\n")
  out = tmp_path / "out"
  stdout = _rescore(
    f"--lm=tta={tiny_lm}",
    "--format=json",
    "--settings=full",
    f"--dev_file={lists}",
    f"--dev_refs={refs}",
    f"--test_file={lists}",
    f"--test_refs={refs}",
    f"--output_dir={out}",
    f"--long_inputs={long_inputs}",
  )
  (row,) = json.loads((out / "rescoring_results.json").read_text())
  other = ({"windowed", "truncated"} - {counted}).pop()
  assert row[counted] == 1 and row[other] == 0
  # The table says what the JSON counts, and only that.
  table = (out / "rescoring_results.md").read_text()
  assert f"{line}: tta 1" in stdout and f"{line}: tta 1" in table
  assert table.count("Sentences longer than the LM takes") == 1


@pytest.mark.slow(seconds=4)
def test_a_fairseq_test_set_with_a_skipped_id_is_scored_on_the_ids_present(tiny_lm, tmp_path):
  rows = [["the cat sat", "a cat sat"], ["the dog ran", "dog ran"], ["a cat ran", "the cat ran"]]
  refs = ["the cat sat on", "a dog ran", "the cat ran"]
  lists = nbest_fixtures.toy_lists(rows)
  for nbest, ref in zip(lists, refs):
    nbest.refs = [ref]
  dev, dev_refs, options = nbest_fixtures.write_fairseq(lists, str(tmp_path / "dev"))
  full, test_refs, _ = nbest_fixtures.write_fairseq(lists, str(tmp_path / "test"))
  # fairseq-generate --skip-invalid-size-inputs-valid-test left id 1 out; refs.txt has 3 lines.
  with open(full, encoding="utf-8") as f:
    kept = [l for l in f if not re.match(r"[STHDP]-1\t", l)]
  test = tmp_path / "test" / "skipped.txt"
  test.write_text("".join(kept), encoding="utf-8")
  out = tmp_path / "out"
  result = commands.run(
    "run_rescoring.py",
    f"--lm=tta={tiny_lm}",
    "--format=fairseq",
    f"--format_option=nbest={options['nbest']}",
    f"--dev_file={dev}",
    f"--dev_refs={dev_refs}",
    f"--test_file={test}",
    f"--test_refs={test_refs}",
    f"--output_dir={out}",
    status=0,
  )
  assert f"{test_refs}: 1 of the 3 references have no hypotheses (line 2" in result.stderr
  entry = json.loads((out / "rescoring_report.json").read_text())["sets"]["test"]
  assert entry["lists"] == 2 and entry["references_without_hypotheses"] == 1
  # Every metric is of ids 0 and 2 against lines 1 and 3 (7 words), none of line 2.
  present = [refs[0], refs[2]]
  chosen = [l.split(" ", 1)[1] for l in (out / "test" / "text").read_text().splitlines()]
  assert entry["rescored"]["wer"] == pytest.approx(100 * jiwer.wer(present, chosen))
  first = [rows[0][0], rows[2][0]]  # the first pass's "score" ranks hypothesis 1 first
  assert entry["first_pass"]["wer"] == pytest.approx(100 * jiwer.wer(present, first))
  assert entry["first_pass"]["reference_words"] == entry["rescored"]["reference_words"] == 7
  # Oracle: "the cat sat" (1 deletion) and "the cat ran" (exact).
  assert entry["oracle"] == pytest.approx(100 / 7)


def test_kaldi_word_ids_are_one_line_naming_int2sym(tiny_lm, tmp_path):
  lists = nbest_fixtures.toy_lists([["7 19 3", "7 19"], ["245", "245 8"]])
  directory, refs = nbest_fixtures.write_kaldi_dir(lists, str(tmp_path / "ids"))
  result = commands.run(
    "run_rescoring.py",
    f"--lm=tta={tiny_lm}",
    "--format=kaldi",
    f"--dev_file={directory}",
    f"--dev_refs={refs}",
    f"--test_file={directory}",
    f"--test_refs={refs}",
    f"--output_dir={tmp_path / 'out'}",
    status=2,
  )
  (line,) = [l for l in result.stderr.splitlines() if l.startswith("run_rescoring.py: error")]
  assert f"{os.path.join(directory, 'text')}:1" in line
  assert "utils/int2sym.pl" in line and "words.txt" in line
  assert not (tmp_path / "out").exists()


@pytest.mark.slow(seconds=20)
def test_three_shards_and_a_merge_give_the_results_of_one_process(tiny_lm, tmp_path):
  _, (dev, dev_refs), (test, test_refs) = _kaldi_dev_test(tmp_path, 5, 3)
  lists = [f"--dev_file={dev}", f"--dev_refs={dev_refs}", f"--test_file={test}"]
  common = [
    f"--lm=tta={tiny_lm}",
    "--format=kaldi",
    *lists,
    f"--test_refs={test_refs}",
    "--first_pass=decoder,ctc",
    "--chunk_size=16",
  ]
  one, split = tmp_path / "one", tmp_path / "split"
  _rescore(*common, f"--output_dir={one}")
  sharded = [*common, f"--output_dir={split}", "--num_shards=3"]
  merge = [*sharded, "--merge"]
  result = commands.run("run_rescoring.py", *merge, status=2)
  assert (
    f"--merge: part {split}/cache/lm_scores-00000-of-00003.jsonl is missing: run this command "
    "with --shard_id=0 --num_shards=3 first" in result.stderr
  )
  for shard in range(3):
    _rescore(*sharded, f"--shard_id={shard}")
  # A part scores its share only: no tuning, no outputs but its part of the cache.
  assert sorted(os.listdir(split)) == ["cache"]
  part_sizes = [
    len((split / "cache" / f"lm_scores-{k:05d}-of-00003.jsonl").read_text().splitlines())
    for k in range(3)
  ]
  whole = sorted((one / "cache" / "lm_scores.jsonl").read_text().splitlines())
  assert sum(part_sizes) == len(whole) and min(part_sizes) > 0
  _rescore(*merge)
  # The same scores (bit for bit: each part scored the chunks one process scores), weights, 1-best
  # and WER as one process.
  assert sorted((split / "cache" / "lm_scores.jsonl").read_text().splitlines()) == whole
  assert (split / "weights.json").read_text() == (one / "weights.json").read_text()
  for name in ("dev", "test"):
    assert (split / name / "text").read_text() == (one / name / "text").read_text()
  reports = [json.loads((d / "rescoring_report.json").read_text()) for d in (one, split)]
  assert [r["weights"] for r in reports] == [reports[0]["weights"]] * 2
  assert [r["sets"]["test"]["rescored"] for r in reports] == [
    reports[0]["sets"]["test"]["rescored"]
  ] * 2
  # A part of another job (other lists) is refused in one line naming it and what differs.
  _rescore(*sharded, "--shard_id=1", "--max_lists=2")
  result = commands.run("run_rescoring.py", *merge, status=2)
  (line,) = [l for l in result.stderr.splitlines() if l.startswith("run_rescoring.py: error")]
  assert (
    f"{split}/cache/lm_scores-00001-of-00003.jsonl.done.json is a part of another job: " in line
  )
  assert "run this command with --shard_id=1 --num_shards=3 again" in line


@pytest.mark.parametrize(
  "flags, refusal",
  [
    (["--num_shards=3", "--shard_id=3", "--output_dir=out"], "--shard_id must be in [0, 3)"),
    (["--num_shards=2", "--shard_id=1"], "--num_shards needs --output_dir"),
  ],
)
def test_a_shard_outside_the_parts_or_without_an_output_dir_is_one_line(tiny_lm, flags, refusal):
  result = commands.run("run_rescoring.py", f"--lm=tta={tiny_lm}", *flags, status=2)
  (line,) = [l for l in result.stderr.splitlines() if l.startswith("run_rescoring.py: error")]
  assert refusal in line

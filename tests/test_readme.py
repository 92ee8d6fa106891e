"""Every block of the README runs as written after the main job, and so do the blocks of
docs/manual.md the README sends a reader to (long inputs, the other toolkits' lists).

The main job (`bash scripts/reproduce.sh`) takes minutes, so the fixture puts what the blocks read
where the quick mode writes it (reproduce.py: `<work_dir>/models/<type>`,
`<work_dir>/kenlm/5gram.bin`, `<work_dir>/data/{corpus/train.txt,vocab.txt}`, work_dir
`runs/reproduce/quick`): tiny T-TA and biLM model dirs for LibriSpeech-normalised text, as the real
ones, a toy ARPA model at the 5-gram's path (KenLM reads ARPA whatever the name), a few sentences
and the tiny vocab; and tiny releases where "Use a released checkpoint" unpacks the real ones. The
commands run in a scratch copy of the checkout (the modules linked in), so a real `runs/` is never
touched; our commands in them run in the test's process (`run_bash`). `source
scripts/setup_env.sh` is left out: it sets up the environment these tests already run in. The
blocks no test runs are `NOT_RUN`, each with its reason.
"""

import json
import math
import os
import re
import shlex
import subprocess

import commands
from conftest import BERT_TOKENS
from conftest import HANG_SECONDS
from conftest import WORDS
from conftest import data_dir_or_skip
from conftest import tiny_bert
from conftest import tiny_config
from conftest import write_google_release
from conftest import write_hf_bert_dir
import numpy as np
import pytest
import tensorflow as tf

from lm import checkpoints
from lm import model_dir
import modeling
from nbest import formats
from nbest import shared_data
from nbest import types
from nbest.formats import espnet
import tokenization

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
MANUAL = os.path.join(ROOT, "docs", "manual.md")
QUICK = os.path.join("runs", "reproduce", "quick")
SECTION = "## Score your sentences"
PAIRS_SECTION = "## Similarity of your pairs"
# (section, index of its block): the README blocks no test here runs, and why.
NOT_RUN = {
  ("## Install and the two commands", 0): "the main job and the suite itself (CI runs them)",
  ("## Use a released checkpoint", 0): "downloads from the network",
  ("### Past one machine", 0): "GPUs or a TPU, a million steps",
  ("### Public model API", 0): "a sketch: `ids` and `mask` are the reader's",
}
# A toy bigram model (log10 probabilities) of LibriSpeech-style upper-case words.
ARPA = """\\data\\
ngram 1=5
ngram 2=2

\\1-grams:
-1.0\t<unk>
-99\t<s>\t-0.5
-0.6\t</s>
-0.4\tTHE\t-0.3
-0.7\tCAT\t-0.2

\\2-grams:
-0.2\t<s> THE
-0.3\tTHE CAT

\\end\\
"""


def readme_section(title, path=README):
  """The text of the section `title` of `path` (its heading line included, up to the next
  heading of any level)."""
  with open(path, encoding="utf-8") as f:
    text = f.read()
  section = text[text.index(title + "\n") :]
  end = re.search(r"\n#{2,3} ", section[len(title) :])
  return section[: len(title) + end.start()] if end else section


def blocks(title, path=README):
  """[(language, source)] of the fenced blocks of section `title` of `path`."""
  return re.findall(r"```(\w+)\n(.*?)```", readme_section(title, path), re.S)


def bash_lines(source):
  """The lines of a bash block a reader types, the set-up and comments left out."""
  lines = source.splitlines()
  return [l for l in lines if l and l != "source scripts/setup_env.sh" and not l.startswith("#")]


def readme_blocks(title=SECTION, path=README):
  """The (bash lines, python source or None) of the first bash and python blocks of `title`."""
  found = blocks(title, path)
  bash = next(source for language, source in found if language == "bash")
  python = next((source for language, source in found if language == "python"), None)
  return bash_lines(bash), python


def run_bash(lines, cwd):
  """Runs each line in `cwd` as the README's reader would; returns each one's stdout lines.

  A line that runs a command of ours (`[printf ... |] python SCRIPT.py ARGS [< IN] [> OUT]`)
  runs it in this process (tests/commands.py), its input from the pipe's producer (run by bash)
  or the file; any other line runs in bash.
  """
  outputs = []
  for line in lines:
    words = shlex.split(line, comments=True)
    if "python" not in words:
      result = subprocess.run(
        ["bash", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=HANG_SECONDS
      )
    else:
      result = _run_python_line(line, words, cwd)
    assert result.returncode == 0, f"{line}\n{result.stderr[-3000:]}"
    outputs.append(result.stdout.splitlines())
  return outputs


def _run_python_line(line, words, cwd):
  """A README line `[PRODUCER |] python SCRIPT ARGS [< IN] [> OUT]` with SCRIPT run in-process."""
  start = words.index("python")
  stdin = ""
  if start:
    assert words[start - 1] == "|", line
    producer = line[: line.index("| python")]
    stdin = subprocess.run(
      ["bash", "-c", producer], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout
  script, *args = words[start + 1 :]
  out = None
  for redirect in ("<", ">"):
    if redirect in args:
      i = args.index(redirect)
      path = os.path.join(cwd, args[i + 1])
      args = args[:i] + args[i + 2 :]
      if redirect == "<":
        with open(path, encoding="utf-8") as f:
          stdin = f.read()
      else:
        out = path
  result = commands.run(script, *args, stdin=stdin, cwd=cwd)
  if out:
    with open(out, "w", encoding="utf-8") as f:
      f.write(result.stdout)
  return result


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
  """A scratch checkout after the main job: the modules and packages, and the quick mode's
  T-TA and 5-gram."""
  root = tmp_path_factory.mktemp("checkout")
  for name in os.listdir(ROOT):
    if name.endswith(".py") or os.path.isfile(os.path.join(ROOT, name, "__init__.py")):
      os.symlink(os.path.join(ROOT, name), root / name)
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(WORDS) + ["hat"]) + "\n")
  tf.keras.utils.set_random_seed(12)
  config = tiny_config(
    vocab_size=len(tokenization.SPECIAL_TOKENS) + len(WORDS) + 1, normalization="librispeech"
  )
  for model_type in ("tta", "bilm"):
    model = modeling.build_model(config, model_type)
    model_dir.save_model_dir(model, str(vocab), str(root / QUICK / "models" / model_type))
  kenlm = root / QUICK / "kenlm" / "5gram.bin"
  kenlm.parent.mkdir(parents=True)
  kenlm.write_text(ARPA)
  (root / QUICK / "kenlm" / "5gram.bin.json").write_text('{"normalization": "librispeech"}')
  # The main job's corpus (LibriSpeech-normalised sentences) and its vocab.
  data = root / QUICK / "data"
  (data / "corpus").mkdir(parents=True)
  rng = np.random.default_rng(5)
  sentences = [" ".join(rng.choice(WORDS, size=rng.integers(3, 9))) for _ in range(200)]
  (data / "corpus" / "train.txt").write_text("\n".join(sentences).upper() + "\n")
  (data / "vocab.txt").write_text(vocab.read_text())
  return root


@pytest.mark.slow(seconds=15)
def test_score_your_own_sentences_runs_as_written(checkout, monkeypatch):
  bash, python = readme_blocks()
  outputs = run_bash(bash, checkout)
  sentences = ["the cat sat on the mat", "the cat sat on the hat"]
  assert (checkout / "sents.txt").read_text().splitlines() == sentences
  one = json.loads(outputs[1][0])
  assert one["text"] == sentences[0] and one["tokens"][-1] == "[EOS]" and one["score"] < 0
  records = [json.loads(l) for l in (checkout / "scores.jsonl").read_text().splitlines()]
  assert [r["text"] for r in records] == sentences
  # One sentence alone or in a padded batch of two: the same score up to float rounding.
  assert records[0]["score"] == pytest.approx(one["score"], abs=1e-4)
  # The 5-gram's TSV: score<TAB>sentence, the words normalised as LibriSpeech's.
  assert [l.split("\t")[1] for l in outputs[3]] == sentences
  assert all(float(l.split("\t")[0]) < 0 for l in outputs[3])
  assert all(len(json.loads(l)["vector"]) == 32 for l in outputs[4])
  # Keyed, log10, text before score: the 5-gram's natural-log score of the same line / ln 10.
  ((key, text, log10),) = [l.split("\t") for l in outputs[-1]]
  assert (key, text) == ("utt1", sentences[0])
  assert float(log10) == pytest.approx(float(outputs[3][0].split("\t")[0]) / math.log(10), abs=2e-6)

  monkeypatch.chdir(checkout)
  *statements, last = python.strip().splitlines()
  scope = {}
  exec("\n".join(statements), scope)  # pylint: disable=exec-used
  totals = eval(last, scope)  # pylint: disable=eval-used
  assert totals == pytest.approx([r["score"] for r in records], abs=1e-6)


@pytest.mark.slow(seconds=25)
def test_similarity_of_your_pairs_runs_as_written(checkout):
  data_dir_or_skip("stsb")
  bash, _ = readme_blocks(PAIRS_SECTION)
  run_bash(bash, checkout)
  pairs = [line.split("\t") for line in (checkout / "pairs.tsv").read_text().splitlines()]
  out = checkout / "pair_results"
  lines = [line.split("\t") for line in (out / "pairs" / "mine.tsv").read_text().splitlines()]
  assert lines[0] == ["line", "sentence1", "sentence2", "gold"] + [
    f"{model} {r}" for model in ("tta", "bilm") for r in ("context", "embed")
  ] + ["truncated"]
  assert [row[1:4] for row in lines[1:]] == [[a, b, str(float(g))] for a, b, g in pairs]
  assert [row[-1] for row in lines[1:]] == ["0"] * len(pairs)  # short sentences: none cut
  report = json.loads((out / "pairs_results.json").read_text())
  tta_embed = report["rows"][1]
  assert (tta_embed["model"], tta_embed["representation"]) == ("tta", "embed")
  cosines, gold = [float(row[5]) for row in lines[1:]], [float(g) for _, _, g in pairs]
  want = 100 * np.corrcoef(cosines, gold)[0, 1]
  assert tta_embed["scores"]["mine"][0] == pytest.approx(want, abs=1e-6)
  assert [(c["a"], c["b"]) for c in report["comparisons"]] == [("tta", "bilm")] * 2
  assert "| mine | 3 |" in (out / "pairs_results.md").read_text()
  # The paper's sets, 200 pairs each: a row per representation with both sets' Pearson.
  rows = json.loads((checkout / "sts_results" / "sts_results.json").read_text())
  assert [(r["model"], r["representation"]) for r in rows] == [("tta", "context"), ("tta", "embed")]
  assert all(set(r["scores"]) == {"stsb_dev", "sick_test"} for r in rows)
  assert all(len(r["cosines"]["stsb_dev"]) == 200 for r in rows)


RESCORE_SECTION = "## Rescore your N-best lists"
MANUAL_RESCORE_SECTION = "## Rescoring N-best lists (`run_rescoring.py`)"
TOOLKITS = ("kaldi", "espnet2", "nemo", "fairseq", "moses")


@pytest.mark.slow(seconds=75)
def test_rescore_your_lists_runs_as_written(checkout):
  """The README's block (the shared lists as Kaldi's, rescored, then blind), then the manual's
  (the same lists in the other toolkits' layouts, each rescored)."""
  data_dir_or_skip(shared_data.ESPNET_DIR)
  readme, _ = readme_blocks(RESCORE_SECTION)
  (manual,) = [s for lang, s in blocks(MANUAL_RESCORE_SECTION, MANUAL) if lang == "bash"][:1]
  manual = bash_lines(manual)
  assert len(readme) == 4 and len(manual) == 2 * 4 + 4
  run_bash(readme + manual, checkout)
  # The first 20 lists as convert_nbest.py's --max_lists=20 reads them: only theirs are parsed.
  first_20 = types.list_selection(max_lists=20)
  keys = {n.key for n in espnet.read_espnet_nbest("test_other", select=first_20)}
  for toolkit in TOOLKITS:
    out = checkout / "rescored" / toolkit / "test"
    text = (out / "text").read_text().splitlines()
    assert len(text) == len(keys) and len((out / "hyp.trn").read_text().splitlines()) == len(keys)
    if toolkit in ("kaldi", "espnet2", "nemo"):  # fairseq and Moses number their segments
      assert {line.split()[0] for line in text} == keys
    report = json.loads((checkout / "rescored" / toolkit / "rescoring_report.json").read_text())
    assert report["sets"]["test"]["rescored"]["reference_words"] > 0
  # The blind run (no references, the tuned weights file) chose what the tuned run chose.
  blind = checkout / "rescored" / "kaldi_blind" / "test"
  assert (blind / "text").read_text() == (
    checkout / "rescored" / "kaldi" / "test" / "text"
  ).read_text()
  again = formats.read_nbest("kaldi", str(blind / "nbest"))
  assert all({"ngram", "tta"} <= set(h.scores) for n in again for h in n.hyps)


LONG_SECTION = "## Long inputs"


@pytest.mark.slow(seconds=6)
def test_long_inputs_run_as_written(checkout):
  bash, _ = readme_blocks(LONG_SECTION, MANUAL)
  outputs = run_bash(bash, checkout)
  (tta,) = [json.loads(l) for l in (checkout / "long.jsonl").read_text().splitlines()]
  (bilm,), (cut,) = [[json.loads(l) for l in lines] for lines in outputs[2:]]
  # 180 words in windows of the tiny models' 16 tokens: every piece and [EOS] scored once.
  for record in (tta, bilm):
    assert record["num_tokens"] == 181 and not record["truncated"] and record["windows"] > 1
  assert tta["windows"] == 25 and bilm["windows"] == 22
  assert cut["truncated"] and cut["num_tokens"] == 15 and "windows" not in cut


PRETRAIN_SECTION = "## Pretrain"


@pytest.mark.slow(seconds=40)
def test_pretrain_runs_as_written(checkout):
  bash, _ = readme_blocks(PRETRAIN_SECTION)
  outputs = run_bash(bash, checkout)
  # Every run trains the block's step count (one for all four runs).
  (steps,) = {int(n) for n in re.findall(r"--num_train_steps=(\d+)", "\n".join(bash))}
  summary = json.loads((checkout / "runs" / "my_tta" / "train_summary.json").read_text())
  assert summary["final_step"] == steps
  config = json.loads((checkout / "runs" / "my_tta" / "config.json").read_text())
  assert (config["hidden_size"], config["num_hidden_layers"]) == (64, 2)
  # The warm start takes the biLM's architecture; the distilled run records its teacher.
  bilm = json.loads((checkout / "runs" / "my_bilm" / "config.json").read_text())
  warm = json.loads((checkout / "runs" / "my_tta_warm" / "config.json").read_text())
  assert warm["model_type"] == "tta" and warm["hidden_size"] == bilm["hidden_size"]
  for run in ("my_bilm", "my_tta_warm", "my_tta_distilled"):
    summary = json.loads((checkout / "runs" / run / "train_summary.json").read_text())
    assert summary["final_step"] == steps
  distilled = json.loads((checkout / "runs" / "my_tta_distilled" / "run.json").read_text())
  assert distilled["teacher"]
  (record,) = [json.loads(l) for l in outputs[-1]]
  assert record["text"] == "the cat sat on the mat" and math.isfinite(record["score"])


RELEASED_SECTION = "## Use a released checkpoint"
AUTHORS = "tta-layer-3-enwiki-lower-sub-32k"
AUTHORS_CONFIG_KEYS = (
  "attention_probs_dropout_prob",
  "hidden_act",
  "hidden_dropout_prob",
  "hidden_size",
  "initializer_range",
  "intermediate_size",
  "max_position_embeddings",
  "num_attention_heads",
  "num_hidden_layers",
  "type_vocab_size",
  "vocab_size",
)


def _releases(root):
  """Tiny models where the README has the releases unpacked: the T-TA authors' (their config's
  keys and file names), a Google BERT release and a Hugging Face BERT dir."""
  downloads = root / "downloads"
  authors = downloads / AUTHORS
  authors.mkdir(parents=True)
  vocab = authors / "vocab-lower.sub-32k.txt"
  vocab.write_text("\n".join(list(tokenization.SPECIAL_TOKENS) + list(WORDS)) + "\n")
  config = tiny_config(vocab_size=len(tokenization.SPECIAL_TOKENS) + len(WORDS))
  tf.keras.utils.set_random_seed(8)
  checkpoints.save_tf1_checkpoint(modeling.build_model(config, "tta"), str(authors / "model.ckpt"))
  fields = {k: getattr(config, k) for k in AUTHORS_CONFIG_KEYS}
  (authors / "config.layer-3.vocab-lower.sub-32k.json").write_text(
    json.dumps(dict(fields, vocab_file=vocab.name))
  )
  bert = tiny_bert()
  write_google_release(downloads / "uncased_L-12_H-768_A-12", bert, BERT_TOKENS)
  write_hf_bert_dir(downloads / "bert-base-uncased", bert, BERT_TOKENS)


@pytest.mark.slow(seconds=40)
def test_use_a_released_checkpoint_runs_as_written(checkout):
  data_dir_or_skip(shared_data.ESPNET_DIR)
  _releases(checkout)
  score, _ = readme_blocks(SECTION)
  run_bash(score[:1], checkout)  # sents.txt, which the block reads
  (download, use) = [source for language, source in blocks(RELEASED_SECTION) if language == "bash"]
  assert "curl" in download
  outputs = run_bash(bash_lines(use), checkout)
  (authors,) = [json.loads(l) for l in outputs[1]]
  assert authors["text"] == "the cat sat on the mat" and authors["tokens"][0] != "[CLS]"
  in_place, hf = [[json.loads(l)["score"] for l in outputs[i]] for i in (2, 4)]
  assert in_place == pytest.approx(hf, abs=1e-5)  # the same weights, two release formats
  for name in ("tta-enwiki", "bert-base", "bert-base-uncased"):
    assert (checkout / "models" / name / "config.json").exists()
  rows = json.loads((checkout / "results" / "asr_bert" / "rescoring_results.json").read_text())
  assert rows and all(row["lm"] == "bert" for row in rows)


def test_every_readme_block_is_run_here_or_listed_with_its_reason():
  """The sections whose blocks the tests above run, and NOT_RUN, cover every README block."""
  with open(README, encoding="utf-8") as f:
    text = f.read()
  found, title = set(), None
  counts = {}
  for line_block in re.finditer(r"^(#{2,3} .*)$|^```(\w+)\n", text, re.M):
    if line_block.group(1):
      title = line_block.group(1)
    elif line_block.group(2) in ("bash", "python"):
      found.add((title, counts.get(title, 0)))
      counts[title] = counts.get(title, 0) + 1
  run = {
    (SECTION, 0),
    (SECTION, 1),
    (RESCORE_SECTION, 0),
    (PAIRS_SECTION, 0),
    (PRETRAIN_SECTION, 0),
    (RELEASED_SECTION, 1),
  }
  assert found == run | set(NOT_RUN)

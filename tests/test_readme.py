"""The README's "Score your own sentences" and "Similarity of your own sentence pairs" run as
written after the main job.

The main job (`bash scripts/reproduce.sh`) takes minutes, so the fixture puts what the example
reads where the quick mode writes it (reproduce.py: `<work_dir>/models/<type>` and
`<work_dir>/kenlm/5gram.bin`, work_dir `runs/reproduce/quick`): tiny T-TA and biLM model dirs
for LibriSpeech-normalised text, as the real ones, and a toy ARPA model at the 5-gram's path
(KenLM reads ARPA whatever the name). The commands run in a scratch copy of the checkout (the
modules linked in), so a real `runs/` is never touched; our commands in them run in the test's
process (`run_bash`). `source scripts/setup_env.sh` is left
out: it sets up the environment these tests already run in.
"""

import json
import math
import os
import re
import shlex
import subprocess

import commands
from conftest import HANG_SECONDS
from conftest import WORDS
from conftest import data_dir_or_skip
from conftest import tiny_config
import nbest_fixtures
import numpy as np
import pytest
import tensorflow as tf

from lm import model_dir
import modeling
from nbest import formats
from nbest import shared_data
from nbest.formats import espnet
import tokenization

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = os.path.join("runs", "reproduce", "quick")
SECTION = "## Score your own sentences"
PAIRS_SECTION = "### Similarity of your own sentence pairs"
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


def readme_section(title):
  """The text of the README section `title` (its heading line included)."""
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    text = f.read()
  section = text[text.index(title) :]
  return section[: section.index("\n## ", len(title))]


def readme_blocks(title=SECTION):
  """The (bash lines, python source or None) of the README section `title`."""
  section = readme_section(title)
  bash = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
  python = re.search(r"```python\n(.*?)```", section, re.S)
  bash = [l for l in bash.splitlines() if l and l != "source scripts/setup_env.sh"]
  return bash, python and python.group(1)


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


@pytest.mark.slow(seconds=10)
def test_similarity_of_your_own_pairs_runs_as_written(checkout):
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


RESCORE_SECTION = "## Rescore your own N-best lists"
TOOLKITS = ("kaldi", "espnet2", "nemo", "fairseq", "moses")


@pytest.fixture(scope="module")
def own_lists(checkout):
  """Dev and test lists (30-best, from the shared LibriSpeech dev_other) written at the
  README's paths `lists/<toolkit>/<set>/` by tests/nbest_fixtures.py; Kaldi's as a directory
  (`text` and `<name>.cost`)."""
  data_dir_or_skip(shared_data.ESPNET_DIR)
  lists = [n for n in espnet.read_espnet_nbest("dev_other") if len(n.hyps) == 30][:5]
  sets = {"dev": lists[:3], "test": lists[3:]}
  for toolkit in TOOLKITS:
    for name, part in sets.items():
      root = str(checkout / "lists" / toolkit / name)
      if toolkit == "kaldi":
        nbest_fixtures.write_kaldi_dir(part, root)
      else:
        nbest_fixtures.WRITERS[toolkit](part, root)
  return sets


@pytest.mark.slow(seconds=15)
def test_rescore_your_own_nbest_lists_runs_as_written(checkout, own_lists):
  block = readme_section(RESCORE_SECTION).split("```bash\n")[1].split("```")[0]
  lines = [l for l in block.splitlines() if l and not l.startswith("#")]
  assert len(lines) == len(TOOLKITS) + 1
  run_bash(lines, checkout)
  keys = {n.key for n in own_lists["test"]}
  for toolkit in TOOLKITS:
    out = checkout / "rescored" / toolkit / "test"
    text = (out / "text").read_text().splitlines()
    assert len(text) == len(keys) and len((out / "hyp.trn").read_text().splitlines()) == len(keys)
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
  bash, _ = readme_blocks(LONG_SECTION)
  outputs = run_bash(bash, checkout)
  (tta,) = [json.loads(l) for l in (checkout / "long.jsonl").read_text().splitlines()]
  (bilm,), (cut,) = [[json.loads(l) for l in lines] for lines in outputs[2:]]
  # 180 words in windows of the tiny models' 16 tokens: every piece and [EOS] scored once.
  for record in (tta, bilm):
    assert record["num_tokens"] == 181 and not record["truncated"] and record["windows"] > 1
  assert tta["windows"] == 25 and bilm["windows"] == 22
  assert cut["truncated"] and cut["num_tokens"] == 15 and "windows" not in cut

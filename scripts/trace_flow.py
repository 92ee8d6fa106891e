"""Which project files a training batch and a scored sentence go through (docs/DESIGN.md §1).

Trains a tiny T-TA two steps and scores one sentence, each command in a child process that
records (`sys.setprofile`) the project files run by one call of `training.run_steps` and of
score.py's `score_batch`; prints them per phase in the order of their first call.

  python scripts/trace_flow.py
"""

import functools
import importlib
import json
import os
import random
import runpy
import subprocess
import sys
import tempfile

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = "--trace_child"
sys.path.insert(0, _REPO)
_WORDS = "the a cat dog sat ran on under mat hat red big small old new and saw".split()


@functools.lru_cache(maxsize=None)
def _relative(path):
  """`path` relative to the repository if it is a project file (not the venv's), else None."""
  path = os.path.realpath(path)
  if not path.startswith(_REPO + os.sep) or path == os.path.realpath(__file__):
    return None
  rel = os.path.relpath(path, _REPO)
  return None if rel.startswith((".venv", "third_party")) else rel


def _project_file(frame):
  """The project file of the module a frame's code belongs to, or None.

  The module's `__file__`, not the code's file name: autograph runs converted copies of
  functions from temporary files, with the original module's globals.
  """
  path = frame.f_globals.get("__file__")
  return _relative(path) if path else None


def _profiled(fn, calls):
  """`fn`, recording in a new list of `calls` the project files of every call it makes."""

  @functools.wraps(fn)
  def traced(*args, **kwargs):
    files = []
    calls.append(files)

    def profile(frame, event, arg):
      del arg
      path = _project_file(frame) if event == "call" else None
      if path and path not in files:
        files.append(path)

    sys.setprofile(profile)
    try:
      return fn(*args, **kwargs)
    finally:
      sys.setprofile(None)

  return traced


def _child(out_json, target, script, *argv):
  """Runs `script` with `argv` as its __main__ does, recording the files of each call of
  `target`: a function of the script ("score_batch") or "package.module:Class.method".

  Only those calls are profiled (profiling the whole run, TensorFlow's import included,
  would make it many times slower): `cli.run`, which every command's __main__ calls, is
  wrapped to patch the target in once the script is loaded.
  """
  from util import cli  # pylint: disable=g-import-not-at-top

  calls, run = [], cli.run

  def patched_run(main):
    module_name, _, qualname = target.rpartition(":")
    *path, name = qualname.split(".")
    if module_name:
      owner = importlib.import_module(module_name)
      for attr in path:
        owner = getattr(owner, attr)
      setattr(owner, name, _profiled(getattr(owner, name), calls))
    else:  # a function of the script: its globals are main's
      main.__globals__[name] = _profiled(main.__globals__[name], calls)
    return run(main)

  cli.run = patched_run
  sys.argv = [script, *argv]
  try:
    runpy.run_path(os.path.join(_REPO, script), run_name="__main__")
  except SystemExit as e:
    if e.code:
      raise
  with open(out_json, "w", encoding="utf-8") as f:
    json.dump(calls, f)


def _traced(tmp, target, script, *argv):
  """The files of each call of `target` (see `_child`) in a run of `script`."""
  out_json = os.path.join(tmp, "calls.json")
  subprocess.run(
    [sys.executable, os.path.abspath(__file__), _CHILD, out_json, target, script, *argv],
    check=True,
    cwd=_REPO,
  )
  with open(out_json, encoding="utf-8") as f:
    return json.load(f)


def _report(title, files):
  print(f"\n{title}: {len(files)} project files")
  for path in files:
    print("  " + path)


def main():
  with tempfile.TemporaryDirectory() as tmp:
    rng = random.Random(0)
    sentences = [" ".join(rng.choices(_WORDS, k=rng.randint(4, 12))) for _ in range(400)]
    text = os.path.join(tmp, "sentences.txt")
    with open(text, "w", encoding="utf-8") as f:
      f.write("\n".join(sentences) + "\n")
    records, model = os.path.join(tmp, "records"), os.path.join(tmp, "model")
    subprocess.run(
      [
        sys.executable,
        "create_pretraining_data.py",
        f"--input_file={text}",
        "--vocab_size=60",
        "--num_shards=1",
        "--eval_fraction=0",
        f"--output_dir={records}",
      ],
      check=True,
      cwd=_REPO,
    )
    steps = _traced(
      tmp,
      "pretraining.training:run_steps",
      "run_pretraining.py",
      "--model_type=tta",
      f"--input_file={records}/train-*",
      f"--output_dir={model}",
      "--hidden_size=32",
      "--num_hidden_layers=2",
      "--num_attention_heads=4",
      "--intermediate_size=64",
      "--max_position_embeddings=64",
      "--max_seq_length=32",
      "--train_batch_size=8",
      "--num_train_steps=2",
      "--num_warmup_steps=1",
      "--steps_per_loop=1",
    )
    two = os.path.join(tmp, "two.txt")
    with open(two, "w", encoding="utf-8") as f:
      f.write("\n".join(sentences[:2]) + "\n")
    scored = _traced(
      tmp,
      "score_batch",
      "score.py",
      f"--model_dir={model}",
      f"--input_file={two}",
      f"--output_file={tmp}/scores.jsonl",
      "--batch_size=1",
    )
  _report("A training batch, first step (its graph traced: model, loss, optimizer)", steps[0])
  _report("A training batch, a later step (the traced graph runs)", steps[1])
  _report("A scored sentence, first call (its graph traced)", scored[0])
  _report("A scored sentence, a later call", scored[1])


if __name__ == "__main__":
  if len(sys.argv) > 1 and sys.argv[1] == _CHILD:
    _child(*sys.argv[2:])
  else:
    main()

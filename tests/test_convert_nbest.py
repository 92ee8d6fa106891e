"""convert_nbest.py (nbest/conversion_job.py and each format's `Export`): lists written whole in
a toolkit's layout read back the same with the project's readers and in the shape of the
hand-written toolkit fixtures (tests/nbest_fixtures.py); the command on the shared LibriSpeech
lists, its refusals, and the output rules every command keeps."""

import json
import math
import os
import re

import commands
import conftest
import nbest_fixtures
import pytest

from nbest import formats
from nbest import shared_data
from util import cli

EXPORTED = formats.exportable()
TOOLKITS = ("kaldi", "espnet2", "nemo", "fairseq", "moses")
# What each format holds of the toy lists: the scores, and whether the keys survive (fairseq and
# Moses number their segments 0, 1, ...; NeMo keys by the manifest's audio file names).
KEEPS = {
  "kaldi": (("decoder", "ctc", "lm", "score"), True),
  "espnet2": (("decoder", "ctc", "lm", "score"), True),
  "nemo": (("score",), True),
  "fairseq": (("decoder", "ctc", "lm", "score"), False),
  "moses": (("decoder", "ctc", "lm", "score"), False),
  "espnet": (("decoder", "ctc", "lm", "score"), True),
  "json": (("decoder", "ctc", "lm", "score"), True),
  "tsv": (("decoder", "ctc", "lm", "score"), True),
}


def _toy_lists():
  """Three full beams of three hypotheses (NeMo and fairseq need full beams), one text empty."""
  return nbest_fixtures.toy_lists([["A B C", "A B", ""], ["D E", "D F", "D"], ["G", "H", "G H"]])


def _export(fmt, lists, root):
  """(lists read back, the relative paths written) of `fmt`'s export of `lists` into `root`."""
  export = formats.FORMATS[fmt].export
  options = export.write(lists, str(root))
  path, refs = export.paths(lists)
  back = formats.read_nbest(fmt, str(root / path), refs and str(root / refs), **options)
  written = sorted(
    os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names
  )
  return back, written


def test_every_toolkit_format_is_exported():
  assert set(TOOLKITS) <= set(EXPORTED) and set(EXPORTED) == set(KEEPS)


@pytest.mark.parametrize("fmt", EXPORTED)
def test_exported_lists_read_back_the_same(fmt, tmp_path):
  lists = _toy_lists()
  back, _ = _export(fmt, lists, tmp_path)
  names, keys_kept = KEEPS[fmt]
  assert len(back) == len(lists)
  for i, (want, got) in enumerate(zip(lists, back)):
    assert got.key == (want.key if keys_kept else str(i))
    assert got.refs == want.refs
    assert [h.text for h in got.hyps] == [h.text for h in want.hyps]
    for w, g in zip(want.hyps, got.hyps):
      assert sorted(g.scores) == sorted(names)
      # fairseq's file is in base 2: equal up to the rounding of the change of base.
      assert all(math.isclose(g.scores[n], w.scores[n], rel_tol=1e-12) for n in names)


def _shape(path):
  """A written path as a user points at it; NeMo's file name carries its decoder's weights."""
  return re.sub(r"_alpha[0-9.]+_beta[0-9.]+(?=\.tsv$)", "", path)


@pytest.mark.parametrize("fmt", sorted(set(EXPORTED) & set(nbest_fixtures.WRITERS)))
def test_exported_lists_read_as_the_toolkit_fixture_does(fmt, tmp_path):
  """The fixture, written by hand from the toolkit's rules, and the export of the same lists:
  the same paths to give run_rescoring.py and the same lists read from them."""
  lists = _toy_lists()
  (tmp_path / "fixture").mkdir()
  (tmp_path / "export").mkdir()
  writer = nbest_fixtures.write_kaldi_dir if fmt == "kaldi" else nbest_fixtures.WRITERS[fmt]
  path, refs, *options = writer(lists, str(tmp_path / "fixture"))
  fixture = formats.read_nbest(fmt, path, refs, **(options[0] if options else {}))
  exported, _ = _export(fmt, lists, tmp_path / "export")
  export = formats.FORMATS[fmt].export
  given = [os.path.relpath(p, tmp_path / "fixture") if p else None for p in (path, refs)]
  assert [_shape(p) if p else None for p in given] == list(export.paths(lists))
  for a, b in zip(fixture, exported):
    assert (a.key, a.refs, [h.text for h in a.hyps]) == (b.key, b.refs, [h.text for h in b.hyps])
    for x, y in zip(a.hyps, b.hyps):
      common = set(x.scores) & set(y.scores)
      assert "score" in common
      assert all(math.isclose(x.scores[n], y.scores[n], rel_tol=1e-12) for n in common)


@pytest.mark.parametrize("fmt", ["nemo", "fairseq"])
def test_a_format_of_full_beams_refuses_lists_of_several_widths(fmt, tmp_path):
  lists = nbest_fixtures.toy_lists([["A B", "A"], ["C"]])
  with pytest.raises(ValueError, match="'spk-utt1' has 1 hypotheses, 'spk-utt0' 2"):
    formats.FORMATS[fmt].export.write(lists, str(tmp_path))
  assert os.listdir(tmp_path) == []


def test_the_real_moses_sample_converts_and_reads_back(tmp_path):
  """Moses' own MERT example (several values per label, its references) through Kaldi's layout."""
  fixtures = os.path.join(os.path.dirname(__file__), "fixtures", "toolkits", "moses")
  moses = formats.read_nbest("moses", f"{fixtures}/NBEST", f"{fixtures}/REF")
  back, written = _export("kaldi", moses, tmp_path)
  assert "nbest/tm_4.cost" in written and "ref_text" in written
  assert [(n.key, n.refs, n.hyps) for n in back] == [(n.key, n.refs, n.hyps) for n in moses]


def _log(result):
  return "\n".join(l for l in result.stderr.splitlines() if "convert_nbest.py" in l)


@pytest.mark.slow(seconds=6)
def test_the_shared_lists_in_kaldi_s_layout_and_the_job_s_outputs(tmp_path):
  conftest.data_dir_or_skip(shared_data.ESPNET_DIR)
  out = tmp_path / "lists" / "kaldi" / "dev"
  args = ["--input=dev_other", "--output_format=kaldi", f"--output_dir={out}", "--max_lists=3"]
  result = commands.run("convert_nbest.py", *args)
  assert result.returncode == 0, result.stderr
  assert sorted(os.listdir(out)) == ["nbest", "ref_text", "run.json"]
  keys = [l.split()[0] for l in (out / "ref_text").read_text().splitlines()]
  assert len(keys) == 3 and len((out / "nbest" / "text").read_text().splitlines()) == 90
  assert sorted(os.listdir(out / "nbest")) == [
    "ctc.cost",
    "decoder.cost",
    "lm.cost",
    "score.cost",
    "text",
  ]
  assert f"--format=kaldi --test_file={out}/nbest --test_refs={out}/ref_text" in _log(result)
  # The same job again: done again, the same files. Another one: refused, nothing changed.
  text = (out / "nbest" / "text").read_text()
  assert commands.run("convert_nbest.py", *args).returncode == 0
  other = commands.run("convert_nbest.py", *args[:-1], "--max_lists=4")
  assert other.returncode == cli.EXIT_INPUT_ERROR and "max_lists 3 (this run: 4)" in other.stderr
  assert (out / "nbest" / "text").read_text() == text
  again = commands.run("convert_nbest.py", *args[:-1], "--max_lists=4", "--overwrite")
  assert again.returncode == 0, again.stderr
  assert len((out / "ref_text").read_text().splitlines()) == 4
  recorded = json.loads((out / "run.json").read_text())["recorded_outputs"]
  assert sorted(recorded) == ["nbest", "ref_text"]


def _tsv(tmp_path, rows):
  path = tmp_path / "in.tsv"
  path.write_text("".join(f"{key}\t{rank}\t{score}\t{text}\n" for key, rank, score, text in rows))
  return str(path)


def test_lists_a_format_cannot_hold_are_refused_in_one_line_leaving_nothing(tmp_path):
  source = _tsv(tmp_path, [("a", 1, -1.0, "X Y"), ("a", 2, -2.0, "X"), ("b", 1, -1.5, "Z")])
  result = commands.run(
    "convert_nbest.py",
    f"--input={source}",
    "--input_format=tsv",
    "--output_format=nemo",
    f"--output_dir={tmp_path}/out",
  )
  assert result.returncode == cli.EXIT_INPUT_ERROR
  assert "list 'b' has 1 hypotheses, 'a' 2: NeMo's beams file has no keys" in result.stderr
  assert sorted(os.listdir(tmp_path)) == ["in.tsv"], "a refused run left files behind"


def test_a_user_s_file_at_an_output_s_name_is_refused_and_kept(tmp_path):
  source = _tsv(tmp_path, [("a", 1, -1.0, "X Y"), ("a", 2, -2.0, "X")])
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "nbest.txt").write_text("mine\n")
  result = commands.run(
    "convert_nbest.py",
    f"--input={source}",
    "--input_format=tsv",
    "--output_format=moses",
    f"--output_dir={tmp_path}/out",
  )
  assert result.returncode == cli.EXIT_INPUT_ERROR and "holds nbest.txt" in result.stderr
  assert os.listdir(tmp_path / "out") == ["nbest.txt"]
  assert (tmp_path / "out" / "nbest.txt").read_text() == "mine\n"

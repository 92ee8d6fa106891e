"""The N-best format registry (nbest.formats.FORMATS) is tied to its tests and its documentation:
every registered format has a fixture writer (tests/nbest_fixtures.py `WRITERS`, which the format
tests run), the manual lists exactly the registered formats, and every `--format=` the README or
the manual names is one (issue 57)."""

import os
import re

import nbest_fixtures

from nbest import formats

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(name):
  with open(os.path.join(_REPO, name), encoding="utf-8") as f:
    return f.read()


def test_every_registered_format_has_a_fixture_and_every_fixture_a_format():
  assert sorted(formats.FORMATS) == sorted(nbest_fixtures.WRITERS)


def test_the_manual_lists_exactly_the_registered_formats():
  # docs/manual.md's list: `--format=a|b|...`, or `c|d`.
  found = re.search(r"`--format=([a-z0-9_|]+)`, or `([a-z0-9_|]+)`", _read("docs/manual.md"))
  assert found, "docs/manual.md no longer lists the formats as `--format=a|b`, or `c|d`"
  listed = found.group(1).split("|") + found.group(2).split("|")
  assert sorted(listed) == sorted(formats.FORMATS)


def test_every_format_the_docs_name_is_registered():
  for name in ("README.md", "docs/manual.md"):
    for value in re.findall(r"--format=([a-z0-9_|]+)", _read(name)):
      unknown = set(value.split("|")) - set(formats.FORMATS)
      assert not unknown, f"{name}: --format={value} names {sorted(unknown)}"

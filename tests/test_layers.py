"""The import graph of docs/DESIGN.md §1: every import points down the layers, and no module
reaches itself through imports (those inside functions included, so none can hide a circle)."""

import ast
import os

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lowest first. A module may import its own layer and the ones before it; the commands (every
# other top-level module) may import anything.
LAYERS = (
  ("util",),
  ("text",),
  ("kinds", "tokenization", "modeling", "optimization"),
  ("lm",),
  ("evaluation",),
  ("nbest",),
  ("pretraining",),
  ("finetuning",),
  ("reproduction",),
)
_RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
_COMMANDS = len(LAYERS)


def _module_files():
  """{dotted module name: path} of the project's modules (not tests, scripts or the venv)."""
  found = {}
  for directory, dirs, files in os.walk(_REPO):
    rel = os.path.relpath(directory, _REPO)
    if rel != "." and (rel.split(os.sep)[0] not in _RANK or rel.startswith(".")):
      dirs[:] = []
      continue
    for name in files:
      if name.endswith(".py"):
        parts = [] if rel == "." else rel.split(os.sep)
        if name != "__init__.py":
          parts.append(name[:-3])
        found[".".join(parts)] = os.path.join(directory, name)
  return found


def _imports(path, modules):
  """The project modules `path` imports, at any depth of its code."""
  out = set()
  for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      # `from lm import inference` imports lm.inference; `from x.y import name`, x.y.
      names = [f"{node.module}.{alias.name}" for alias in node.names]
    else:
      continue
    for name in names:
      # The longest prefix that is a module.
      parts = name.split(".")
      for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
          out.add(".".join(parts[:end]))
          break
  return out


def _rank(module):
  return _RANK.get(module.split(".")[0], _COMMANDS)


@pytest.fixture(scope="module")
def graph():
  modules = _module_files()
  graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
  assert {"lm.inference", "nbest.formats", "util.cli", "score", "modeling"} <= set(graph)
  return graph


def _upward(graph):
  return sorted(
    f"{module} -> {target}"
    for module, targets in graph.items()
    for target in targets
    if _rank(target) > _rank(module)
  )


def _circles(graph):
  """Each path by which a module reaches itself, as "a -> b -> a"."""
  found = set()
  for start in sorted(graph):
    stack, seen = [(start, (start,))], set()
    while stack:
      module, path = stack.pop()
      for target in sorted(graph.get(module, ())):
        if target == start:
          found.add(" -> ".join(path + (start,)))
        elif target not in seen:
          seen.add(target)
          stack.append((target, path + (target,)))
  return sorted(found)


def test_every_import_points_down_the_layers(graph):
  up = _upward(graph)
  assert not up, "imports that point up a layer (docs/DESIGN.md §1):\n" + "\n".join(up)


def test_no_module_reaches_itself_through_imports(graph):
  circles = _circles(graph)
  assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path):
  # An import inside a function counts; util importing lm points up; a -> b -> a is a circle.
  (tmp_path / "m.py").write_text("import os\n\n\ndef f():\n  from lm import inference\n")
  assert _imports(str(tmp_path / "m.py"), {"lm", "lm.inference"}) == {"lm.inference"}
  assert _upward({"util.x": {"lm.inference"}, "score": {"util.x"}}) == ["util.x -> lm.inference"]
  assert _circles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == ["a -> b -> a", "b -> a -> b"]

"""Each package's `__init__` docstring names every module of the package (docs/DESIGN.md §1: "each
package's `__init__.py` says what each of its modules owns"), so that a module added, renamed or
split (a job carved out of its library, issue 57) is described where a reader looks first."""

import ast
import os

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _packages():
  found = []
  for directory, subdirs, names in os.walk(_REPO):
    subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in ("third_party",))
    if "__init__.py" in names and os.path.relpath(directory, _REPO) != "tests":
      found.append(os.path.relpath(directory, _REPO))
  return found


@pytest.mark.parametrize("package", _packages())
def test_the_package_docstring_names_each_module(package):
  directory = os.path.join(_REPO, package)
  with open(os.path.join(directory, "__init__.py"), encoding="utf-8") as f:
    doc = ast.get_docstring(ast.parse(f.read())) or ""
  modules = [n[:-3] for n in os.listdir(directory) if n.endswith(".py") and n != "__init__.py"]
  modules += [
    n for n in os.listdir(directory) if os.path.isfile(os.path.join(directory, n, "__init__.py"))
  ]
  missing = sorted(m for m in modules if f"`{m}`" not in doc)
  assert not missing, f"{package}/__init__.py does not name {missing}"

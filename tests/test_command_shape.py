"""Every command has one config (issue 49): its flags are the `cli.param` fields of one params
dataclass (`define_flags` is `cli.define_param_flags(JobParams)` alone), and `main` builds the
params with `cli.params`; no command defines, checks or reads a flag by hand. That dataclass is
the `JobParams` of the command's job module, `<package>/<name>_job.py` (issue 57 item 5)."""

import ast
import os

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _commands():
  """{file name: parsed module} of the top-level scripts that run `cli.run(main)`."""
  found = {}
  for name in sorted(os.listdir(_REPO)):
    if name.endswith(".py"):
      with open(os.path.join(_REPO, name), encoding="utf-8") as f:
        source = f.read()
      if "cli.run(main)" in source:
        found[name] = ast.parse(source)
  return found


COMMANDS = _commands()


def _function(tree, name):
  return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _calls(node):
  """The dotted names ("cli.params") of the calls under `node`."""
  return {ast.unparse(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}


def test_the_commands_are_found():
  assert len(COMMANDS) == 16, sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_s_flags_are_its_params_fields(name):
  tree = COMMANDS[name]
  body = [
    s
    for s in _function(tree, "define_flags").body
    if not isinstance(s, ast.Expr) or not isinstance(s.value, ast.Constant)
  ]
  assert len(body) == 1 and _calls(body[0]) == {"cli.define_param_flags"}, ast.unparse(body)
  assert "cli.params" in _calls(_function(tree, "main"))
  by_hand = [
    ast.unparse(n)
    for n in ast.walk(tree)
    if (isinstance(n, ast.Name) and n.id == "FLAGS")
    or (
      isinstance(n, ast.Attribute)
      and isinstance(n.value, ast.Name)
      and n.value.id == "flags"
      and n.attr != "FLAGS"
    )
  ]
  assert not by_hand, by_hand


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_s_params_are_its_job_module_s_job_params(name):
  tree = COMMANDS[name]
  (call,) = [
    n
    for n in ast.walk(_function(tree, "define_flags"))
    if isinstance(n, ast.Call) and ast.unparse(n.func) == "cli.define_param_flags"
  ]
  module, _, cls = ast.unparse(call.args[0]).partition(".")
  assert cls == "JobParams" and module.endswith("_job"), ast.unparse(call.args[0])
  packages = [
    n.module
    for n in tree.body
    if isinstance(n, ast.ImportFrom) and any(a.name == module for a in n.names)
  ]
  assert len(packages) == 1 and os.path.isfile(
    os.path.join(_REPO, *packages[0].split("."), module + ".py")
  ), packages


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_imports_startup_log_first(name):
  # Before any import that may load TensorFlow: util/startup_log.py holds its start-up lines.
  first = next(n for n in COMMANDS[name].body if isinstance(n, (ast.Import, ast.ImportFrom)))
  assert ast.unparse(first) == "from util import startup_log", ast.unparse(first)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_s_main_lines_define_its_flags_and_run_main(name):
  # What `python COMMAND` runs beyond the module's import: tests/test_user_errors.py starts a few
  # commands as processes and the rest in its own, which is the same only when these lines are.
  last = COMMANDS[name].body[-1]
  assert ast.unparse(last) == (
    "if __name__ == '__main__':\n    define_flags()\n    cli.run(main)"
  ), ast.unparse(last)

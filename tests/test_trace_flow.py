"""scripts/trace_flow.py: the project files a profiled call goes through, in first-call order."""

import importlib.util
import os

import numpy as np

import kinds
from util import progress

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script():
  path = os.path.join(REPO, "scripts", "trace_flow.py")
  spec = importlib.util.spec_from_file_location("trace_flow", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _work(n):
  """Calls into two project modules and into NumPy (a venv file, not the project's)."""
  np.arange(n).sum()
  progress.format_duration(n)
  return kinds.get("tta").display_name


def test_profiled_records_each_call_s_project_files_in_first_call_order():
  trace_flow = _script()
  calls = []
  work = trace_flow._profiled(_work, calls)  # pylint: disable=protected-access
  assert work(75) == "T-TA"
  assert work(3) == "T-TA"
  here = os.path.relpath(os.path.abspath(__file__), REPO)
  assert calls == [[here, "util/progress.py", "kinds.py"]] * 2


def test_files_outside_the_project_are_not_counted():
  trace_flow = _script()
  assert trace_flow._relative(np.__file__) is None  # pylint: disable=protected-access
  assert trace_flow._relative(os.__file__) is None  # pylint: disable=protected-access
  assert trace_flow._relative(kinds.__file__) == "kinds.py"  # pylint: disable=protected-access

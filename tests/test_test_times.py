"""tools/test_times.py: the slowest tests and each phase's wall time, printed after every
`bash run.sh test` next to the budget of docs/testing.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).parents[1] / "tools" / "test_times.py"


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("test_times_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def junit(path: Path, wall: float, cases: list[tuple[str, str, float]]) -> Path:
    rows = "".join(f'<testcase classname="{c}" name="{n}" time="{t}"/>' for c, n, t in cases)
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" '
                    f'tests="{len(cases)}" time="{wall}">{rows}</testsuite></testsuites>')
    return path


def test_the_slowest_tests_of_both_phases_come_first_with_the_phase_walls(
        tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    par = junit(tmp_path / "parallel.xml", 300.0, [("tests.test_a", "test_x", 12.5),
                                                   ("tests.test_a", "test_y", 0.1)])
    tim = junit(tmp_path / "timing.xml", 200.0, [("tests.test_b", "test_z[p]", 40.0)])
    assert tool.main([str(par), str(tim), "--most", "2", "--budget-s", "900"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "2 slowest tests (setup + call + teardown):",
        "     40.0 s  [timing]  tests/test_b.py::test_z[p]",
        "     12.5 s  [parallel]  tests/test_a.py::test_x",
        "phase parallel: 2 tests in 300 s wall",
        "phase timing: 1 tests in 200 s wall",
        "all phases: 500 s wall (budget 900 s: within)",
    ]


def test_a_run_over_its_budget_says_by_how_much(
        tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    par = junit(tmp_path / "parallel.xml", 200.0, [("tests.test_a", "test_x", 1.0)])
    tool.main([str(par), "--budget-s", "180"])
    assert capsys.readouterr().out.splitlines()[-1] == (
        "all phases: 200 s wall (budget 180 s: OVER by 20 s; see docs/testing.md before "
        "adding more slow tests)")


def test_a_missing_or_garbage_file_is_skipped_with_a_warning_naming_it(
        tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "timing.xml").write_text("<testsuites><testsu")  # a phase killed mid-write
    par = junit(tmp_path / "parallel.xml", 5.0, [("tests.test_a", "test_x", 1.0)])
    assert tool.main([str(tmp_path / "timing.xml"), str(tmp_path / "gone.xml"),
                      str(par)]) == 0
    got = capsys.readouterr()
    assert "phase parallel: 1 tests in 5 s wall" in got.out
    assert f"skipped {tmp_path / 'timing.xml'}" in got.err
    assert f"skipped {tmp_path / 'gone.xml'}" in got.err

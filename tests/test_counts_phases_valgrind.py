"""Per-phase instruction counts from a real callgrind worker (docs/design.md §10)."""

from __future__ import annotations

import json

import pytest

from pytest_perfgate.modes.counts.phases import ENV_PHASES, OTHER
from pytest_perfgate.modes.counts.runner import run_counts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("need_valgrind")]
pytest_plugins = ["pytester"]

# phase "b" runs np.sin over three times the elements of phase "a"; "b" nests "inner" once
TWO_PHASES = """
import numpy as np
from pytest_perfgate.core.timing import phase

def test_two(perfgate):
    a = np.ones(20000)
    b = np.ones(60000)
    c = np.ones(20000)
    def step():
        with perfgate.phase("a"):
            np.sin(a, out=a)
        with perfgate.phase("b"):
            np.sin(b, out=b)
            with phase("inner"):
                np.sin(c, out=c)
        np.cos(c, out=c)
    perfgate.measure(step, transitions=4, name="two", windows=2, window_time=0.1)
"""


def test_phases_split_the_step_in_proportion_and_add_up_to_it(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_two=TWO_PHASES)
    res = pytester.runpytest_subprocess("--perfgate", "--perfgate-counts",
                                        "-p", "no:cacheprovider", timeout=300)
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*two.counts: instructions/env-step by phase: b *, a *"])
    (sidecar,) = (pytester.path / ".perfgate" / "results").rglob("*.pgrun")
    counts = json.loads(sidecar.read_text())["benchmarks"]["two.counts"]
    by_phase = counts["extra"]["phase_instructions_per_step"]
    assert set(by_phase) == {"a", "b", "inner", OTHER}
    ratio = by_phase["b"] / by_phase["a"]
    assert 2.9 < ratio < 3.1, by_phase  # innermost wins: "inner" is not inside "b"
    assert 0.95 < by_phase["inner"] / by_phase["a"] < 1.05, by_phase
    assert sum(by_phase.values()) == pytest.approx(counts["samples"][0], rel=1e-12)
    entries = json.loads((pytester.path / ".perfgate" / "results"
                          / "benchmarks.json").read_text())
    assert entries["two.counts.phase.a"]["unit"] == "instructions/env-step"

    again = run_counts("test_two.py::test_two", pytester.path)["two"]  # a second worker
    assert abs(again.per_step()[0] / counts["samples"][0] - 1) < 1e-3  # design §10: ~1e-4
    assert again.phase_ir["b"][0] / again.phase_ir["a"][0] == pytest.approx(ratio, rel=1e-3)
    monkeypatch.setenv(ENV_PHASES, "0")  # the same step, counted whole only
    whole = run_counts("test_two.py::test_two", pytester.path)["two"]
    assert whole.phase_ir == {}
    per_boundary = (counts["samples"][0] - whole.per_step()[0]) * 4 / 6  # 4 env-steps, 6
    assert abs(per_boundary) < 15_000, per_boundary  # boundaries per call (design §10: ~6k)

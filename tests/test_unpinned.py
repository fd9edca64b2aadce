"""Threads left unpinned: torch or a BLAS running more threads than the measuring process's
CPUs is found (stand-ins for both, and real torch), kept in the record and said once per
session, naming the setting that pins it; nothing is imported to look."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest
from helpers import ARGS, git, project_start

from pytest_perfgate.placement.unpinned import (
    Budget,
    cpu_budget,
    describe,
    in_processes,
    unpinned,
)

TWO = Budget(2.0, "the CPUs this process may run on: 0-1")


def fake_torch(threads: int) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.get_num_threads = lambda: threads  # type: ignore[attr-defined]
    torch.Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]  # scipy looks
    return torch


def fake_threadpoolctl(pools: list[dict[str, Any]]) -> types.ModuleType:
    mod = types.ModuleType("threadpoolctl")
    mod.threadpool_info = lambda: pools  # type: ignore[attr-defined]
    return mod


@pytest.fixture
def no_blas_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """threadpoolctl not installed (a None in sys.modules makes its import fail)."""
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)


@pytest.mark.usefixtures("no_blas_probe")
def test_torch_with_more_threads_than_the_budget_is_named_with_its_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(16))
    (found,) = unpinned(TWO)
    assert describe(found) == (
        "torch runs 16 intra-op threads on a CPU budget of 2 (the CPUs this process may run "
        "on: 0-1): they contend for the cores, which makes the step slower and noisier than "
        "pinned; pin them: torch.set_num_threads(2) in the test, or OMP_NUM_THREADS=2 before "
        "torch loads")
    monkeypatch.setitem(sys.modules, "torch", fake_torch(2))
    assert unpinned(TWO) == []  # within its budget


@pytest.mark.usefixtures("no_blas_probe")
def test_torch_is_never_imported_to_look(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert unpinned(TWO) == []
    assert "torch" not in sys.modules
    broken = types.ModuleType("torch")  # half-imported: no get_num_threads yet
    monkeypatch.setitem(sys.modules, "torch", broken)
    assert unpinned(TWO) == []


def test_a_blas_with_more_threads_than_the_budget_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setitem(sys.modules, "threadpoolctl", fake_threadpoolctl([
        {"user_api": "blas", "internal_api": "openblas", "num_threads": 8,
         "filepath": "/v/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_.so"},
        {"user_api": "openmp", "internal_api": "openmp", "num_threads": 8,
         "filepath": "/v/torch/lib/libgomp.so.1"},  # torch's pool: checked as torch
        {"user_api": "blas", "internal_api": "mkl", "num_threads": 1, "filepath": "/m.so"}]))
    (found,) = unpinned(Budget(1.5, "the cgroup's CPU quota of 1.5 cores"))
    assert describe(found) == (
        "openblas (libscipy_openblas64_.so) runs 8 BLAS threads on a CPU budget of 1.5 (the "
        "cgroup's CPU quota of 1.5 cores): they contend for the cores, which makes the step "
        "slower and noisier than pinned; pin them: OMP_NUM_THREADS=1 before numpy loads, or "
        "threadpoolctl.threadpool_limits(1) in the test")


@pytest.mark.usefixtures("no_blas_probe")
def test_without_threadpoolctl_the_blas_is_not_checked(monkeypatch: pytest.MonkeyPatch,
                                                       recwarn: pytest.WarningsRecorder
                                                       ) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert unpinned(TWO) == [] and len(recwarn) == 0


def test_the_budget_is_the_affinity_or_a_tighter_cgroup_quota() -> None:
    assert cpu_budget((0, 1, 2, 3), 1.5) == Budget(1.5, "the cgroup's CPU quota of 1.5 cores")
    assert cpu_budget((0, 1, 2, 3), 1.5).threads == 1
    assert cpu_budget((0, 1), 8.0) == TWO
    assert cpu_budget((0, 1), read_quota=False) == TWO and TWO.threads == 2


@pytest.mark.usefixtures("no_blas_probe")
def test_real_torch_with_more_threads_than_the_budget() -> None:
    torch = pytest.importorskip("torch")
    budget = cpu_budget()
    before = torch.get_num_threads()
    torch.set_num_threads(budget.threads + 1)
    try:
        found = unpinned(budget)
        torch.set_num_threads(budget.threads)
        within = unpinned(budget)
    finally:
        torch.set_num_threads(before)
    assert [(f["library"], f["threads"]) for f in found] == [("torch", budget.threads + 1)]
    assert f"torch.set_num_threads({budget.threads}) in the test" in describe(found[0])
    assert within == []


# --- the processes a workload starts --------------------------------------------------------

def many_threads_step() -> Any:
    """Runs in the spawn worker: a torch of 4096 threads in its sys.modules, as a factory's
    ``import torch`` leaves its default pool."""
    sys.modules["torch"] = fake_torch(4096)
    return lambda: None


@pytest.mark.slow  # spawns a worker process
def test_a_worker_process_says_what_it_left_unpinned() -> None:
    from pytest_perfgate.modes.mode import recorded_extra
    from pytest_perfgate.placement.spec import WorkerSpec
    from pytest_perfgate.placement.workers import Timeouts, WorkerGroup

    timeouts = Timeouts(start=60.0, step=5.0, stop=2.0, term=1.0)
    with WorkerGroup([WorkerSpec(many_threads_step)], timeouts) as group:
        extra = recorded_extra(group)
    found = [f for f in extra["unpinned_threads"] if f.get("process")]
    assert [(f["process"], f["library"], f["threads"]) for f in found] == [
        ("worker 0", "torch", 4096)]
    assert describe(found[0]).startswith("in the worker 0 process, torch runs 4096 intra-op "
                                         "threads on a CPU budget of ")


def test_findings_are_gathered_wherever_a_source_keeps_its_processes() -> None:
    torch = {"library": "torch", "threads": 8, "pool": "intra-op", "budget": 1.0,
             "budget_is": "the CPUs this process may run on: 1", "setting": "x"}
    meta = {"ring_pair": {"placement": [
        {"side": "collector", "unpinned_threads": [{**torch, "process": "collector"}]},
        {"side": "learner", "pinned": True}]},
        "workers": [{"worker": 0, "unpinned_threads": "garbage"}, 7, None]}
    assert in_processes(meta) == [{**torch, "process": "collector"}]
    assert in_processes({}) == in_processes(None) == in_processes("x") == []


# --- the plugin: kept in the record, said once per session -------------------------------------

PERF = """
import sys, types
from conftest import CLOCK

torch = types.ModuleType("torch")  # stands in for torch with its default pool
torch.get_num_threads = lambda: 4096
torch.Tensor = type("Tensor", (), {})  # scipy looks for it
sys.modules["torch"] = torch

def test_walk(perfgate):
    perfgate.measure(lambda: CLOCK.advance(0.002), transitions=8)

def test_run(perfgate):
    perfgate.measure(lambda: CLOCK.advance(0.002), transitions=8)
"""


def project(p: pytest.Pytester) -> str:
    """A git project of two equal commits whose perf tests run a torch of 4096 threads; the
    warning's text for this machine's budget."""
    project_start(p)
    p.makepyfile(test_perf=PERF)
    git(p, "add", "-A")
    git(p, "commit", "-qm", "base")
    git(p, "commit", "--allow-empty", "-qm", "head")
    budget = cpu_budget()
    return ("test_perf.test_walk: threads left unpinned: " + describe(
        {"library": "torch", "threads": 4096, "pool": "intra-op", "budget": budget.cpus,
         "budget_is": budget.why,
         "setting": f"torch.set_num_threads({budget.threads}) in the test, or "
                    f"OMP_NUM_THREADS={budget.threads} before torch loads"})
        + " (said once per session)")


@pytest.mark.slow  # pytest runs of a scratch project, an A/B one with side processes
def test_the_record_keeps_it_and_the_session_says_it_once(pytester: pytest.Pytester) -> None:
    said = project(pytester)
    hist = ["--perfgate", "--perfgate-machine=box", "--perfgate-windows=3",
            "-p", "no:cacheprovider", "--perfgate-json=h.json"]
    for args in (hist, [*ARGS, "--perfgate-json=ab.json"]):  # history mode, then A/B
        res = pytester.runpytest_subprocess(*args, "-W", "default", timeout=300)
        res.assert_outcomes(passed=2, warnings=None)
        out = " ".join(res.stdout.str().split())
        assert out.count("threads left unpinned") == 1 and said in out, out[-3000:]
        report = args[-1].split("=", 1)[1]
        for entry in json.loads((pytester.path / report).read_text())["benchmarks"]:
            (found,) = entry["result"]["extra"]["unpinned_threads"]
            assert (found["library"], found["threads"]) == ("torch", 4096), entry
    smoke = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    smoke.assert_outcomes(passed=2)
    assert "threads left unpinned" not in smoke.stdout.str()  # nothing measured

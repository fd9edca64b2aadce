"""Under ``--perfgate-ab`` the controlling process sets up no perf test: its two sides run it.

A perf test (one that requests the ``perfgate`` fixture, or pytest-benchmark's
``benchmark``) gets no fixture and no body in the controller: pytest's set-up finds every
argument already filled with :data:`NOT_SET_UP` (but pytest-benchmark's own fixture object,
which its hooks check and which starts nothing), and the call runs the test in its sides
(:func:`pytest_perfgate.modes.ab.side_test.run_test`). Its outcome is the head side's (a
failure shows the head's output; a skip its reason), failed further by a failing verdict as
any perf test is. A test that reaches ``perfgate`` another way (``getfixturevalue``) runs in
the controller as before, its step in the sides (docs/ab.md).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.modes.ab.controller import ABController
from pytest_perfgate.modes.ab.side_test import Announced, run_test
from pytest_perfgate.modes.mode import BenchCall
from pytest_perfgate.plugin.benchmark_compat import benchmark_name
from pytest_perfgate.plugin.open_gate import open_gate
from pytest_perfgate.session.checks import check_unit
from pytest_perfgate.session.gating import GateSession
from pytest_perfgate.session.perfgate import PerfGate


class NotSetUp:
    """What a perf test's arguments hold in the A/B controller, which never calls it."""

    def __repr__(self) -> str:
        return "<not set up: the A/B sides run this test>"


NOT_SET_UP = NotSetUp()


def fixture_module(item: pytest.Function, name: str) -> str:
    """The module that defines the fixture ``item`` gets as ``name`` ("" if none)."""
    info = getattr(item, "_fixtureinfo", None)  # pytest's own, as its pyfunc_call reads it
    defs = getattr(info, "name2fixturedefs", {}).get(name) if info is not None else None
    func = getattr(defs[-1], "func", None) if defs else None
    return str(getattr(func, "__module__", "") or "")


def is_perf_test(item: pytest.Item) -> bool:
    """A test the sides can run alone: it asks for perfgate's fixture or pytest-benchmark's
    (a user's own fixture of either name is not one)."""
    if not isinstance(item, pytest.Function):
        return False
    names = item.fixturenames
    return ("perfgate" in names
            and fixture_module(item, "perfgate").startswith("pytest_perfgate")) or (
        "benchmark" in names and fixture_module(item, "benchmark").startswith(
            "pytest_benchmark"))


class RunBySides:
    """The hooks that hand a perf test to its sides (registered only in an A/B controller)."""

    def __init__(self, session: GateSession, controller: ABController) -> None:
        self.session = session
        self.controller = controller

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if is_perf_test(item):
            assert isinstance(item, pytest.Function)
            for name in item.fixturenames:
                if name != "benchmark":  # pytest-benchmark's hooks insist on its own object
                    item.funcargs.setdefault(name, NOT_SET_UP)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        if not is_perf_test(pyfuncitem):
            return None
        bench = "benchmark" in pyfuncitem.fixturenames and "perfgate" not in \
            pyfuncitem.fixturenames
        name = benchmark_name(pyfuncitem, self.session) if bench else None
        with open_gate(pyfuncitem, self.session, name) as gate:
            end = run_test(self.controller, gate.test_id, gate.test_file,
                           lambda a, judge: _deliver(gate, a, judge))
        if end.skip_reason is not None:
            pytest.skip(end.skip_reason)
        if end.failed is not None:
            pytest.fail(end.failed, pytrace=False)
        return True


def _deliver(gate: PerfGate, a: Announced, judge: Callable[[BenchCall], Judged]) -> Judged:
    """The head's ``measure()`` call judged as this test's own: named, ruled, shown."""
    call = gate.call(a.name, a.transitions, a.threshold, a.extra, check_unit(a.unit))
    return gate.deliver(call, judge)

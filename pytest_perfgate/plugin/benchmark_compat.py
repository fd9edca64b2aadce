"""pytest-benchmark suites under ``--perfgate``: its ``benchmark`` fixture, measured by perfgate.

Under ``--perfgate`` a test's ``benchmark(f, *args)`` (and ``benchmark.pedantic``) measures
``f`` as ``perfgate.measure`` measures a step: steady-state windows in the history mode,
alternating turns of both revisions under ``--perfgate-ab``, instruction counts under
``--perfgate-counts``, whatever pytest-benchmark's own options say: ``--benchmark-disable``
in addopts keeps everyday runs fast, and a run given ``--perfgate`` asks for measuring. One
call is one unit of work, read as calls/s unless the marker names the unit
(``@pytest.mark.perfgate(unit="rows")``). docs/pytest-benchmark.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

import pytest

from pytest_perfgate.core.metric import CALLS
from pytest_perfgate.core.timing import Clock
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.session.gating import GateSession, PerfgateUsageError
from pytest_perfgate.session.naming import readable_name, stable_nodeid
from pytest_perfgate.session.perfgate import PerfGate

_UNSET = object()
UNSUPPORTED = ("weave", "patch")  # pytest-benchmark's aspect mode: no step to measure
BYPASSED = ("this test called pytest-benchmark's own fixture object (kept by another fixture, "
            "e.g. self.benchmark = benchmark), which perfgate does not measure, so nothing "
            "was measured: call the benchmark argument the test itself receives, or run this "
            "test without --perfgate")


def is_pytest_benchmark(fixture: object) -> bool:
    """pytest-benchmark's fixture object (not a user's own fixture named ``benchmark``)."""
    return type(fixture).__module__.startswith("pytest_benchmark")


def benchmark_name(item: pytest.Item, session: GateSession) -> str:
    """A pytest-benchmark test's series name: its node id relative to the session's stable
    root, parameters joined by '-' (``tests.test_ecs.test_query-1000``)."""
    path = getattr(item, "path", None)
    root = session.note_test_file(path, item.config.inipath is not None)
    return readable_name(stable_nodeid(item.nodeid, path, root))


def measured_call(pyfuncitem: pytest.Function, session: GateSession
                  ) -> Generator[None, object, object]:
    """The session plugin's ``pytest_pyfunc_call`` wrapper: hand the test perfgate's
    ``benchmark`` for its call, pytest-benchmark's back after (its own hooks read it at report
    time)."""
    from pytest_perfgate.plugin.open_gate import open_gate

    original = pyfuncitem.funcargs.get("benchmark")
    if session.smoke or not is_pytest_benchmark(original):
        return (yield)
    shared = pyfuncitem.funcargs.get("perfgate")
    with contextlib.ExitStack() as stack:
        gate = shared if isinstance(shared, PerfGate) else stack.enter_context(
            open_gate(pyfuncitem, session, benchmark_name(pyfuncitem, session)))
        unit = gate.unit or CALLS.unit.removesuffix("/s")
        ours = PerfgateBenchmark(original, gate, benchmark_name(pyfuncitem, session), unit,
                                 session.clock)
        pyfuncitem.funcargs["benchmark"] = ours
        try:
            result = yield
        finally:
            pyfuncitem.funcargs["benchmark"] = original
    if not ours.used and getattr(original, "_mode", None):  # never a silent pass
        raise PerfgateUsageError(BYPASSED)
    return result


class PerfgateBenchmark:
    """pytest-benchmark's fixture API, measured by perfgate.

    ``benchmark(f, *args, **kwargs)`` and ``benchmark.pedantic(target, args, kwargs, setup,
    teardown)`` measure the call and return its result, as pytest-benchmark does; rounds,
    iterations and warm-up rounds are perfgate's to choose (its windows and warm-up).
    Everything else (``extra_info``, ``group``, ``name``...) is pytest-benchmark's own.
    """

    def __init__(self, original: Any, gate: PerfGate, name: str, unit: str,
                 clock: Clock) -> None:
        self._original = original
        self._gate = gate
        self._name = name
        self._unit = unit
        self._clock = clock
        self._calls = 0

    def __call__(self, function_to_benchmark: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> Any:
        self._quiet()
        if not callable(function_to_benchmark):
            raise PerfgateUsageError(
                f"benchmark({function_to_benchmark!r}, ...): the first argument is the "
                "function to measure, e.g. benchmark(sorted, data)")
        return self._measure(function_to_benchmark, args, kwargs, None, None)

    def pedantic(self, target: Callable[..., Any], args: Sequence[Any] = (),
                 kwargs: Mapping[str, Any] | None = None, setup: Callable[[], Any] | None = None,
                 teardown: Callable[..., Any] | None = None, rounds: int = 1,
                 warmup_rounds: int = 0, iterations: int = 1) -> Any:
        """pytest-benchmark's pedantic mode: ``setup`` (untimed) may return (args, kwargs)
        for each call, ``teardown`` (untimed) runs after it."""
        self._quiet()
        if not callable(target):
            raise PerfgateUsageError(f"benchmark.pedantic({target!r}, ...): the first "
                                     "argument is the function to measure")
        for what, fn in (("setup", setup), ("teardown", teardown)):
            if fn is not None and not callable(fn):
                raise PerfgateUsageError(f"benchmark.pedantic(..., {what}={fn!r}): pass a "
                                         "function, or leave it out")
        if setup is not None and (args or kwargs):
            raise PerfgateUsageError(
                "benchmark.pedantic(..., setup=..., args=...): the arguments come either "
                "from args/kwargs or from what setup() returns, not both: have setup() "
                "return (args, kwargs)")
        return self._measure(target, tuple(args), dict(kwargs or {}), setup, teardown)

    def _quiet(self) -> None:
        """Called: pytest-benchmark's end-of-test "not used at all" warning stays quiet, also
        when the call is refused (the test fails with perfgate's error alone)."""
        if hasattr(self._original, "_mode"):
            self._original._mode = "measured by pytest-perfgate"

    @property
    def used(self) -> bool:
        """Whether the test measured anything through this object."""
        return self._calls > 0

    def __getattr__(self, name: str) -> Any:
        if name in UNSUPPORTED:
            self._quiet()
            raise PerfgateUsageError(
                f"benchmark.{name}(...) is not measured under --perfgate (it times calls of "
                "a patched function while the test runs, with no step perfgate can repeat): "
                "call benchmark(f, *args) or benchmark.pedantic(f, ...) instead, or run "
                "this test without --perfgate")
        return getattr(self._original, name)

    def _measure(self, target: Callable[..., Any], args: Sequence[Any],
                 kwargs: Mapping[str, Any], setup: Callable[[], Any] | None,
                 teardown: Callable[..., Any] | None) -> Any:
        self._calls += 1
        self._quiet()
        name = self._name if self._calls == 1 else f"{self._name}.{self._calls}"
        last: list[Any] = [_UNSET]  # the newest call's result, set in place: no allocation
        session = self._gate.session
        if (setup or teardown) and session.mode_for(self._gate.counts) is not session.mode:
            raise PerfgateUsageError(
                "benchmark.pedantic(..., setup=/teardown=...) cannot be counted: callgrind "
                "counts one call of a plain step, and setup's instructions would count as "
                "the call's. Mark the test @pytest.mark.perfgate(counts=False) to keep its "
                "wall-time verdict, or call benchmark(f, *args)")
        if setup is None and teardown is None:
            def step() -> None:
                last[0] = target(*args, **kwargs)

            self._gate.measure(step, transitions=1, name=name, unit=self._unit)
        else:
            source = SetupSource(target, args, kwargs, setup, teardown, self._clock, last)
            self._gate.measure_source(source, 1, name, unit=self._unit)
        if last[0] is _UNSET:  # the A/B controller: its sides ran the calls; the test wants one
            a, k = _arguments(setup, args, kwargs)
            last[0] = target(*a, **k)
            if teardown is not None:
                teardown(*a, **k)
        return last[0]


def _arguments(setup: Callable[[], Any] | None, args: Sequence[Any],
               kwargs: Mapping[str, Any]) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """One call's arguments: what ``setup()`` returns, if anything, else the given ones."""
    got = setup() if setup is not None else None
    if not got:
        return args, kwargs
    try:
        a, k = got
        return tuple(a), dict(k)
    except (TypeError, ValueError):
        raise PerfgateUsageError(f"benchmark.pedantic(setup=...) returned {got!r}: return "
                                 "None or (args, kwargs), e.g. ((data,), {})") from None


class SetupSource:
    """``pedantic(setup=..., teardown=...)``: only the target's calls are timed; the window
    closes once its real time (setup and teardown included) is spent."""

    def __init__(self, target: Callable[..., Any], args: Sequence[Any],
                 kwargs: Mapping[str, Any], setup: Callable[[], Any] | None,
                 teardown: Callable[..., Any] | None, clock: Clock, last: list[Any]) -> None:
        self.target, self.args, self.kwargs = target, args, kwargs
        self.setup, self.teardown, self.clock, self.last = setup, teardown, clock, last

    def run_window(self, duration_s: float) -> RawWindow:
        wall, cpu = self.clock.wall_ns, self.clock.cpu_ns
        limit, start = int(duration_s * 1e9), wall()
        timed = used = calls = 0
        while True:
            a, k = _arguments(self.setup, self.args, self.kwargs)
            c0, t0 = cpu(), wall()
            result = self.target(*a, **k)
            t1, c1 = wall(), cpu()
            timed, used, calls = timed + t1 - t0, used + c1 - c0, calls + 1
            self.last[0] = result
            if self.teardown is not None:
                self.teardown(*a, **k)
            if wall() - start >= limit:
                break
        return RawWindow(calls, timed / 1e9, used / 1e9, {}, calls)

"""Spawn workers placed on CPUs and NUMA nodes, measured in synchronised windows.

A :class:`WorkerGroup` is a :class:`~pytest_perfgate.core.measure.WindowSource`: the Meter
drives its warm-up and windows exactly like an in-process loop. Supervision follows pyperf and
xdist: every wait is bounded, a dead worker is seen through its sentinel (not a timeout),
and cleanup escalates stop -> SIGTERM -> SIGKILL -> join, so nothing outlives the group.

Placement happens twice: the parent sets its own thread's affinity, memory policy and
thread-cap env around ``Process.start()`` (so the child's interpreter, and whatever spawn
re-imports as ``__mp_main__``, already start placed), then restores them exactly; the child
re-applies and reads everything back, so the report says what really happened
(docs/design.md §4, §5). The specs and placement reports are :mod:`.spec`; the worker side
is :mod:`.child`. ~300 lines: the group's lifecycle and its bounded waits are one state
machine, kept together so every exit path can be read to its cleanup.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.placement import cpus as _cpus
from pytest_perfgate.placement.cgroup import cgroup_cpu_quota
from pytest_perfgate.placement.child import placed_like, worker_main
from pytest_perfgate.placement.oom import OomWatch
from pytest_perfgate.placement.spec import (
    Placement,
    WorkerSpec,
    placement_failure,
    placement_notes,
    render_placement,
    worker_warnings,
)


class WorkerError(RuntimeError):
    """A worker failed; ``worker_traceback`` holds its traceback when it raised."""

    def __init__(self, message: str, worker_traceback: str | None = None) -> None:
        super().__init__(message + (f"\n--- worker traceback ---\n{worker_traceback}"
                                    if worker_traceback else ""))
        self.worker_traceback = worker_traceback


class WorkerCrashed(WorkerError):
    """A worker died without reporting (os._exit, SIGKILL, segfault)."""


class WorkerTimeout(WorkerError):
    """A worker did not answer in time (a hang); it was terminated, then killed."""


class PlacementError(WorkerError):
    """An explicit placement request could not be honoured."""


@dataclass(frozen=True)
class Timeouts:
    """Bounds on every wait, in seconds. Spawn + a torch import can take ~10 s on CI."""

    start: float = 120.0  # spawn, placement, import and build of the workload
    step: float = 30.0  # longest single step() call tolerated past a window's end
    lead: float = 0.05  # windows start this long after the broadcast
    stop: float = 3.0  # polite stop before SIGTERM
    term: float = 2.0  # SIGTERM before SIGKILL


DEFAULT_TIMEOUTS = Timeouts()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class WorkerGroup:
    """N spawn workers driven in lockstep; a WindowSource. Use as a context manager.

    Start it from a long-lived thread (normally the main one): PR_SET_PDEATHSIG fires when
    the *thread* that spawned a worker exits, not only when the process does.
    """

    def __init__(self, specs: Sequence[WorkerSpec], timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        if not specs:
            raise ValueError("WorkerGroup needs at least one WorkerSpec")
        self.specs = tuple(specs)
        self.timeouts = timeouts
        self.placements: list[Placement] = []
        self.notes: list[str] = []
        self.late_windows = 0  # windows a worker joined after their start time
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._ctx = mp.get_context("spawn")
        self._closed = False
        self._pids: list[int] = []
        self._oom: OomWatch | None = None
        self.exitcodes: list[int | None] = []  # filled by close(): negative = signal

    # ---- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> WorkerGroup:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Spawn every worker and wait (bounded) until each has built its workload."""
        if self._procs or self._closed:
            raise WorkerError("this WorkerGroup was already started; create a new one")
        usable = _cpus.usable_cpus()
        self.notes = placement_notes(self.specs, usable, cgroup_cpu_quota())
        self._oom = OomWatch.snapshot(s.node for s in self.specs if s.node is not None)
        for i, spec in enumerate(self.specs):
            try:
                payload = pickle.dumps(spec)
            except Exception as exc:
                self.close()
                raise WorkerError(f"worker {i}: its WorkerSpec cannot be pickled for a spawn "
                                  f"worker ({type(exc).__name__}: {exc}); pass the factory "
                                  "as 'module:callable' and picklable kwargs") from None
            parent, child = self._ctx.Pipe(duplex=True)
            proc = self._ctx.Process(target=worker_main, name=f"perfgate-worker-{i}",
                                     args=(child, (spec.cpus, spec.node, spec.mempolicy,
                                                  spec.thread_cap), payload, i,
                                           os.getpid()), daemon=True)
            with placed_like(spec.cpus, spec.node, spec.mempolicy, spec.thread_cap):
                proc.start()
            child.close()
            self._procs.append(proc)
            assert proc.pid is not None  # set by start()
            self._pids.append(proc.pid)
            self._conns.append(parent)
        replies = self._gather("ready", time.monotonic() + self.timeouts.start, "start")
        self.placements = [Placement(**r) for r in replies]
        for note in worker_warnings(self.placements):  # they run, but the report says so
            self.notes.append(note)
            warnings.warn(_cpus.PlacementWarning(note), stacklevel=2)
        for p, spec in zip(self.placements, self.specs, strict=True):
            bad = placement_failure(p)
            if bad and spec.strict:
                self.close()
                raise PlacementError(f"worker {p.index}: {bad}; pass cpus=None / node=None "
                                     "to run unplaced, or fix the request")
            if bad:
                self.notes.append(f"worker {p.index}: {bad}")
                warnings.warn(_cpus.PlacementWarning(f"worker {p.index}: {bad}"), stacklevel=2)

    def close(self) -> None:
        """Stop every worker: ask, then SIGTERM, then SIGKILL; join all. Never raises."""
        if self._closed:
            return
        self._closed = True
        for conn in self._conns:
            try:
                conn.send(("stop",))
            except (OSError, ValueError):
                pass
        self._reap(self.timeouts.stop)
        for p in self._procs:
            if p.is_alive():
                p.terminate()
        self._reap(self.timeouts.term)
        for p in self._procs:
            if p.is_alive():
                p.kill()
        self._reap(5.0)
        for conn in self._conns:
            conn.close()
        self.exitcodes = [p.exitcode for p in self._procs]
        for p in self._procs:
            if p.exitcode is not None:
                p.close()

    def _reap(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        alive = [p for p in self._procs if p.exitcode is None]
        while alive and time.monotonic() < deadline:
            wait([p.sentinel for p in alive], timeout=max(0.0, deadline - time.monotonic()))
            # join() with a timeout: right after the sentinel fires exitcode may be None.
            for p in alive:
                p.join(timeout=0.05)
            alive = [p for p in alive if p.exitcode is None]

    @property
    def pids(self) -> list[int]:
        return list(self._pids)

    # ---- measurement -----------------------------------------------------------------
    def run_window(self, duration_s: float) -> RawWindow:
        """One synchronised window: every worker counts steps completed in [t0, t0+d)."""
        if not duration_s > 0:
            raise ValueError(f"window duration {duration_s!r}: must be > 0 seconds")
        t0 = time.monotonic() + self.timeouts.lead  # CLOCK_MONOTONIC: shared by processes
        self._broadcast(("window", t0, duration_s))
        replies = self._gather("window", t0 + duration_s + self.timeouts.step, "window")
        if any(r["late_s"] > 0.01 * duration_s for r in replies):
            self.late_windows += 1
        return RawWindow.parallel([RawWindow.from_wire(r["window"]) for r in replies],
                                  duration_s)

    def quantization(self, raw: RawWindow) -> float:
        """Each worker counts whole calls inside the window: the total moves by up to one
        call per worker (the Meter widens windows until that is small)."""
        return raw.streams / raw.calls if raw.calls > 0 else 1.0

    def latency(self, steps: int) -> list[list[float]]:
        """Fixed-step mode: each worker runs ``steps`` calls; per-call seconds per worker."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps={steps!r}: pass a positive int")
        self._broadcast(("steps", steps))
        deadline = time.monotonic() + self.timeouts.step * steps
        return [r["latencies"] for r in self._gather("steps", deadline, "latency run")]

    def collect_proof(self) -> list[Placement]:
        """Ask each worker where its pages landed (/proc/self/numa_maps) into placements."""
        self._broadcast(("proof",))
        replies = self._gather("proof", time.monotonic() + self.timeouts.step, "proof")
        self.placements = [replace(p, proof=r["proof"])
                           for p, r in zip(self.placements, replies, strict=True)]
        return self.placements

    def report_lines(self) -> list[str]:
        return render_placement(self.placements, self.notes)

    def metadata(self) -> dict[str, Any]:
        return {"workers": [p.as_dict() for p in self.placements],
                "placement_warnings": list(self.notes), "late_windows": self.late_windows}

    # ---- plumbing --------------------------------------------------------------------
    def _broadcast(self, msg: tuple[Any, ...]) -> None:
        if self._closed:
            raise WorkerError("the worker group is closed; start a new one")
        for conn in self._conns:
            try:
                conn.send(msg)
            except (OSError, ValueError):
                pass  # a dead worker: _gather reports it with its exit status

    def _gather(self, tag: str, deadline: float, what: str) -> list[dict[str, Any]]:
        """One reply per worker, or fail fast: dead worker, worker error, or deadline."""
        replies: dict[int, dict[str, Any]] = {}
        by_obj: dict[Any, int] = {}
        for i, (c, p) in enumerate(zip(self._conns, self._procs, strict=True)):
            by_obj[c] = by_obj[p.sentinel] = i
        while len(replies) < len(self._procs):
            pending = [o for o, i in by_obj.items() if i not in replies]
            remaining = deadline - time.monotonic()
            ready = wait(pending, timeout=max(0.0, remaining)) if remaining > 0 else []
            if not ready:
                late = sorted(set(by_obj[o] for o in pending))
                self.close()
                raise WorkerTimeout(
                    f"worker(s) {_cpus.format_cpus(late)} did not finish the {what} in time "
                    f"(hang?); they were terminated, then killed. Raise Timeouts("
                    f"{'start' if tag == 'ready' else 'step'}=...) if the workload is slow")
            # Messages first: a worker that reported and then exited is not a crash.
            for obj in sorted(ready, key=lambda o: not isinstance(o, Connection)):
                i = by_obj[obj]
                if i in replies:
                    continue
                conn = self._conns[i]
                if isinstance(obj, Connection) or conn.poll(0):
                    replies[i] = self._receive(i, tag, what)
                else:
                    self._crashed(i, what)
        return [replies[i] for i in range(len(self._procs))]

    def _receive(self, i: int, tag: str, what: str) -> dict[str, Any]:
        try:
            kind, body = self._conns[i].recv()
        except (EOFError, OSError):
            self._crashed(i, what)
        if kind == "error":
            self.close()
            raise WorkerError(f"worker {i} failed during the {what}: {body['error']}",
                              body["traceback"])
        if kind != tag:
            self.close()
            raise WorkerError(f"worker {i} answered {kind!r} to a {tag!r} request: protocol "
                              "error (a workload writing to the worker's pipe?)")
        return body

    def _crashed(self, i: int, what: str) -> NoReturn:
        proc = self._procs[i]
        proc.join(timeout=1.0)
        pid, code = proc.pid, proc.exitcode
        if code == -signal.SIGKILL and self._oom is not None:
            spec = self.specs[i]
            why = self._oom.explain(i, pid, f"the {what}", spec.node, spec.mempolicy)
            self.close()
            raise WorkerCrashed(why)
        self.close()
        raise WorkerCrashed(f"worker {i} (pid {pid}) died during the {what}: "
                            f"{_describe_exit(code)}; the workload crashed or was killed")

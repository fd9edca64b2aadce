"""A collector/learner pair over a :class:`Ring`: two placed spawn processes, one WindowSource.

Supervision follows placement/workers.py (docs/design.md §5): sides are placed before
their interpreter imports anything (``placed_like``), die with the parent (PDEATHSIG),
every wait is bounded and watches the sides' sentinels, and close() escalates
stop -> SIGTERM -> SIGKILL -> join. The gated number is collector env-steps/s; learner
updates/s and samples consumed/s are display values in ``metadata()`` (docs/design.md §9).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import statistics
import time
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from pytest_perfgate.core.measure import RawWindow
from pytest_perfgate.core.timing import PhaseStats
from pytest_perfgate.placement import cpus as _cpus
from pytest_perfgate.placement.child import placed_like
from pytest_perfgate.placement.workers import WorkerCrashed, WorkerError, WorkerTimeout
from pytest_perfgate.ring.layout import RingSpec
from pytest_perfgate.ring.ring import Ring
from pytest_perfgate.ring.sides import side_main
from pytest_perfgate.ring.sync import describe_status

DEFAULT_COLLECTOR = "pytest_perfgate.ring.workloads:humanoid_collector"
DEFAULT_LEARNER = "pytest_perfgate.ring.workloads:sac_learner"
ROLES = ("collector", "learner")


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    return describe_status(-code) if code < 0 else f"exit code {code}"


class RingPair:
    """Collector and learner processes joined by a ring; a WindowSource. Context manager."""

    def __init__(self, spec: RingSpec, *, collector: str | Callable[..., Any] = DEFAULT_COLLECTOR,
                 learner: str | Callable[..., Any] = DEFAULT_LEARNER,
                 collector_cpus: _cpus.CpuSpec = None, learner_cpus: _cpus.CpuSpec = None,
                 collector_kwargs: dict[str, Any] | None = None,
                 learner_kwargs: dict[str, Any] | None = None, start_timeout: float = 120.0,
                 snap_timeout: float = 30.0, park: bool = True,
                 threads: tuple[int | None, int | None] = (None, None)) -> None:
        """``park``: stop both sides (SIGSTOP) between windows, so nothing of the pair runs
        while another benchmark or the other A/B side is measured."""
        self.park = park
        self._paused = False
        self.spec = spec
        self.factories = (collector, learner)
        self.kwargs = (dict(collector_kwargs or {}), dict(learner_kwargs or {}))
        self.cpus = (_cpus.parse_cpus(collector_cpus), _cpus.parse_cpus(learner_cpus))
        # (collector, learner) thread caps; None: the side's CPU count when pinned, else none
        for t in threads:
            if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
                raise ValueError(f"threads={threads!r}: give a positive thread cap or None "
                                 "per side, e.g. (1, 1)")
        self.threads = tuple(threads)
        self.requested = (collector_cpus, learner_cpus)
        self.start_timeout, self.snap_timeout = start_timeout, snap_timeout
        self.notes: list[str] = []
        a, b = self.cpus
        if a is not None and b is not None and set(a) & set(b):
            note = (f"collector cpus {_cpus.format_cpus(a)} and learner cpus "
                    f"{_cpus.format_cpus(b)} overlap on {_cpus.format_cpus(set(a) & set(b))}: "
                    "the two sides compete for those cores; give each its own slice")
            self.notes.append(note)
            warnings.warn(_cpus.PlacementWarning(note), stacklevel=2)
        self.placements: list[dict[str, Any]] = []
        self.ring: Ring | None = None
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._last: list[dict[str, Any]] = []
        self._learner: list[tuple[float, float]] = []  # (updates/s, samples/s) per window
        self._closed = False

    def __enter__(self) -> RingPair:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        """Spawn both sides placed, wait (bounded) for both to build, then let them run."""
        if self._procs or self._closed:
            raise WorkerError("this RingPair was already started; create a new one")
        ctx = mp.get_context("spawn")
        self.ring = Ring(self.spec, parties=2)
        try:
            for role, factory, kw, cpus, threads in zip(ROLES, self.factories, self.kwargs,
                                                        self.cpus, self.threads, strict=True):
                payload = pickle.dumps((factory, kw, self.ring))
                # applies even if pinning fails
                cap = threads if threads is not None else len(cpus) if cpus else None
                parent, child = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=side_main, name=f"perfgate-{role}", daemon=True,
                                   args=(child, role, (cpus, None, "bind", cap), payload,
                                         os.getpid()))
                with placed_like(cpus, None, "bind", cap):
                    proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)
            replies = self._gather("ready", self.start_timeout, "start")
            self.placements = [{"side": r, **rep} for r, rep in zip(ROLES, replies,
                                                                       strict=True)]
            for p in self.placements:
                if p["requested_cpus"] is not None and not p["pinned"]:
                    note = (f"{p['side']}: requested CPUs "
                            f"{_cpus.format_cpus(p['requested_cpus'])} but runs on "
                            f"{_cpus.format_cpus(p['actual_cpus'])}; threads still capped to "
                            f"{p['threads']}")
                    self.notes.append(note)
                    warnings.warn(_cpus.PlacementWarning(note), stacklevel=2)
                self.notes += [f"{p['side']}: {w}" for w in p.get("warnings", ())]
            for c in self._conns:
                c.send(("go",))
            self._last = self._gather("snap", self.snap_timeout, "first snapshot", ask=True)
            if self.park:
                self.pause()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop both sides: ask, SIGTERM, SIGKILL; join; remove the ring. Never raises."""
        if self._closed:
            return
        self._closed = True
        for p in self._procs:  # a paused side would not see "stop" or SIGTERM
            if p.exitcode is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        for c in self._conns:
            try:
                c.send(("stop",))
            except (OSError, ValueError):
                pass
        for how, limit in (("ask", 3.0), ("terminate", 2.0), ("kill", 5.0)):
            if how != "ask":
                for p in self._procs:
                    if p.exitcode is None:
                        getattr(p, how)()
            deadline = time.monotonic() + limit
            for p in self._procs:
                p.join(max(0.0, deadline - time.monotonic()))
        for c in self._conns:
            c.close()
        self.exitcodes = [p.exitcode for p in self._procs]
        if self.ring is not None:
            self.ring.close()

    def pause(self) -> None:
        """SIGSTOP both sides (an interleaved comparison parks the pairs not measured)."""
        for p in self._procs:
            if p.exitcode is None:
                os.kill(p.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT both sides; the next window starts from a fresh snapshot."""
        for p in self._procs:
            if p.exitcode is None:
                os.kill(p.pid, signal.SIGCONT)
        self._paused = False
        self._last = self._gather("snap", self.snap_timeout, "snapshot", ask=True)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    # ---- measurement -----------------------------------------------------------------
    def run_window(self, duration_s: float) -> RawWindow:
        """Collector env-steps between two snapshots ``duration_s`` apart (both sides)."""
        if not duration_s > 0:
            raise ValueError(f"window duration {duration_s!r}: must be > 0 seconds")
        if self._paused:
            self.resume()
        first = self._last
        ready = wait([p.sentinel for p in self._procs], timeout=duration_s)
        if ready:
            self._gather("snap", 1.0, "window", ask=True)  # reports the dead side
        last = self._gather("snap", self.snap_timeout, "window", ask=True)
        self._last = last
        if self.park:
            self.pause()
        diffs = [self._diff(a, b) for a, b in zip(first, last, strict=True)]
        col, lrn = diffs
        upd = lrn.phases.get("update")
        self._learner.append(((upd.calls if upd else 0) / lrn.wall_s,
                              lrn.transitions / lrn.wall_s))
        return RawWindow(col.transitions, col.wall_s, col.cpu_s + lrn.cpu_s,
                         {**col.phases, **lrn.phases}, col.calls + lrn.calls, streams=2)

    def quantization(self, raw: RawWindow) -> float:
        """The collector's count moves by one push (num_envs env-steps) per window (the
        Meter widens windows until that is small)."""
        return self.spec.num_envs / raw.transitions if raw.transitions > 0 else 1.0

    @staticmethod
    def _diff(a: dict[str, Any], b: dict[str, Any]) -> RawWindow:
        phases = {}
        for n, (c, w, u) in b["phases"].items():
            c0, w0, u0 = a["phases"].get(n, (0, 0, 0))
            if c - c0 > 0:
                phases[n] = PhaseStats(c - c0, w - w0, u - u0)
        return RawWindow(b["units"] - a["units"], b["t"] - a["t"], b["cpu_s"] - a["cpu_s"],
                         phases, b["iters"] - a["iters"])

    def metadata(self) -> dict[str, Any]:
        """Placement as applied, ring stats and learner display values for the run record."""
        ups = [u for u, _ in self._learner] or [0.0]
        sps = [s for _, s in self._learner] or [0.0]
        return {"ring_pair": {
            "placement": [{k: (_cpus.format_cpus(v) if k.endswith("_cpus") and v else v)
                           for k, v in p.items()} for p in self.placements],
            "notes": list(self.notes),
            "ring": (self.ring.stats(lock=False) if self.ring is not None and not self._closed
                     else {}),
            "learner_updates_per_s": statistics.median(ups),
            "learner_samples_per_s": statistics.median(sps)}}

    # ---- plumbing --------------------------------------------------------------------
    def _gather(self, tag: str, timeout: float, what: str, ask: bool = False
                ) -> list[dict[str, Any]]:
        if ask:
            for c in self._conns:
                try:
                    c.send((tag,))
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + timeout
        got: dict[int, dict[str, Any]] = {}
        while len(got) < 2:
            objs = [o for i in range(2) if i not in got
                    for o in (self._conns[i], self._procs[i].sentinel)]
            ready = wait(objs, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                late = [ROLES[i] for i in range(2) if i not in got]
                self.close()
                raise WorkerTimeout(f"pair {' and '.join(late)} did not answer the {what} "
                                    f"within {timeout:g} s (hang?); both sides were stopped")
            for i in range(2):
                if i in got:
                    continue
                c = self._conns[i]
                if c.poll(0):
                    try:
                        kind, body = c.recv()
                    except (EOFError, OSError):
                        self._crashed(i, what)
                    if kind == "error":
                        if "PeerDied" in body["error"]:  # report the side that died first
                            self._procs[1 - i].join(1.0)
                            if self._procs[1 - i].exitcode is not None:
                                self._crashed(1 - i, what)
                        self.close()
                        raise WorkerError(f"pair {ROLES[i]} failed during the {what}: "
                                          f"{body['error']}", body["traceback"])
                    got[i] = body
                elif self._procs[i].sentinel in ready:
                    self._crashed(i, what)
        return [got[0], got[1]]

    def _crashed(self, i: int, what: str) -> None:
        p = self._procs[i]
        p.join(1.0)
        code = p.exitcode
        self.close()
        raise WorkerCrashed(f"pair {ROLES[i]} (pid {p.pid}) died during the {what}: "
                            f"{_exit_text(code)}")


__all__ = ["DEFAULT_COLLECTOR", "DEFAULT_LEARNER", "RingPair"]

"""The processes of a pair: each side's main loop, and the parent's handle on them.

A side factory is ``factory(ring, rec, **kwargs) -> once``; ``once()`` does one iteration
(collector: policy, env step, push; learner: drain, update) and returns the env-steps it
pushed or the samples it consumed. Phases go to ``rec`` (core/timing.py). Over its pipe a
side answers "ready" once built, runs free from "go" to "stop", and answers each "snap"
with its cumulative counters, so a window is the difference of two snapshots taken by the
side itself. :class:`Sides` is the parent's end, as placement/workers.py (§5 of design.md).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock, PhaseRecorder, PhaseStats
from pytest_perfgate.placement import unpinned
from pytest_perfgate.placement.child import _die_with_parent, _place, _resolve, placed_like
from pytest_perfgate.placement.workers import WorkerCrashed, WorkerError, WorkerTimeout
from pytest_perfgate.ring.sync import describe_status

POLL_S = 0.02  # how often a side looks at its pipe between iterations


class SideRecorder(PhaseRecorder):
    """A PhaseRecorder that also takes time measured elsewhere: the ring's own wait
    counters as a phase (``add("wait_free", ns)``: wall time, no CPU), and a phase's GPU
    time from CUDA events (``add_gpu("update", ns)``, gpu/cuda.py PendingPhases), which
    joins that phase's figures as the GPU time of an in-process phase does."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(clock)
        self._added: dict[str, PhaseStats] = {}
        self._gpu: dict[str, int] = {}
        # the side's own memory peaks since the last snapshot, where it reads any (a CUDA
        # learner: torch's on its device, gpu/cuda.py CudaTimer.take_peak)
        self.peaks: Callable[[], dict[str, int]] | None = None

    def add(self, name: str, wall_ns: int) -> None:
        st = PhaseStats(1, int(wall_ns), 0)
        self._added[name] = self._added[name] + st if name in self._added else st

    def add_gpu(self, name: str, gpu_ns: int) -> None:
        """GPU time the device spent in an entry of phase ``name``; it is reported when the
        device has finished it, so it joins the phase at the next :meth:`take` in which the
        phase has calls."""
        self._gpu[name] = self._gpu.get(name, 0) + int(gpu_ns)

    def take(self) -> dict[str, PhaseStats]:
        out = super().take()
        out.update(self._added)
        self._added = {}
        for name in [n for n in self._gpu if n in out]:
            st = out[name]
            out[name] = PhaseStats(st.calls, st.wall_ns, st.cpu_ns,
                                   (st.gpu_ns or 0) + self._gpu.pop(name))
        return out


def _snapshot(rec: PhaseRecorder, totals: dict[str, PhaseStats], units: int,
              iters: int) -> dict[str, Any]:
    """Cumulative counters; a phase is [calls, wall_ns, cpu_ns] and, once it has GPU time,
    gpu_ns too (a window's wire encoding, core/measure.py RawWindow.to_wire). ``memory``:
    the side's peaks since the previous snapshot, so a window's are its own span's."""
    for name, st in rec.take().items():
        totals[name] = totals[name] + st if name in totals else st
    peaks = getattr(rec, "peaks", None)
    return {"t": time.monotonic(), "cpu_s": time.process_time(), "units": units,
            "iters": iters,
            "phases": {n: [p.calls, p.wall_ns, p.cpu_ns] + ([] if p.gpu_ns is None
                                                           else [p.gpu_ns])
                       for n, p in totals.items()},
            "memory": peaks() if peaks is not None else {}}


def side_main(conn: Any, role: str, placement: tuple[Any, ...], payload: bytes,
              parent_pid: int) -> None:
    """Entry point of a pair side: die with the parent, place, build, then loop."""
    orphan_risk = _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stage = "start"
    stopping = False
    try:
        info = _place(*placement)
        info["warnings"] = [orphan_risk] if orphan_risk else []
        factory, kwargs, ring = pickle.loads(payload)
        stage = f"start (building the {role} workload)"
        rec = SideRecorder()
        once: Callable[[], int] = _resolve(factory)(ring, rec, **kwargs)
        torch = sys.modules.get("torch")
        if torch is not None and placement[3]:
            torch.set_num_threads(placement[3])  # the env cap is read only at load time
        info["torch_threads"] = torch.get_num_threads() if torch is not None else None
        if found := unpinned.unpinned(process=role):
            info["unpinned_threads"] = found
        conn.send(("ready", info))
        while not conn.poll(1.0):
            if os.getppid() != parent_pid:
                return
        if conn.recv()[0] != "go":
            return
        stage = "run"
        totals: dict[str, PhaseStats] = {}
        units = iters = 0
        next_poll = time.monotonic() + POLL_S
        while True:
            units += once()
            iters += 1
            if time.monotonic() < next_poll:
                continue
            next_poll = time.monotonic() + POLL_S
            if not conn.poll(0):
                continue
            msg = conn.recv()
            if msg[0] == "stop":
                return
            conn.send(("snap", _snapshot(rec, totals, units, iters)))
    except (EOFError, BrokenPipeError):
        return
    except BaseException as exc:
        try:
            stopping = conn.poll(0) and conn.recv()[0] == "stop"
        except Exception:
            pass
        if not stopping:
            try:
                conn.send(("error", {"error": f"{type(exc).__name__}: {exc} (in {stage})",
                                     "traceback": traceback.format_exc()}))
            except Exception:
                pass
        os._exit(0 if stopping else 1)


class Sides:
    """The parent's end of a pair's side processes, in ``names`` order: a failure stops
    them all and raises a WorkerError naming the side that failed first."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.exitcodes: list[int | None] = []
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._closed = False

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def _start_side(self, name: str, placement: tuple[Any, ...], payload: bytes) -> None:
        """Spawn side ``name`` placed (cpus, node, memory policy, thread cap) at exec."""
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        role = "learner" if name == "learner" else "collector"
        proc = ctx.Process(target=side_main, name=f"perfgate-{name.replace(' ', '')}",
                           daemon=True, args=(child, role, placement, payload, os.getpid()))
        with placed_like(*placement):
            proc.start()
        child.close()
        self._procs.append(proc)
        self._conns.append(parent)

    def _send(self, *msg: Any) -> None:
        for c in self._conns:
            try:
                c.send(msg)
            except (OSError, ValueError):
                pass

    def _signal(self, sig: int) -> None:
        for p in self._procs:
            if p.exitcode is None:
                try:
                    os.kill(p.pid, sig)
                except ProcessLookupError:
                    pass

    def _gather(self, tag: str, timeout: float, what: str, ask: bool = False
                ) -> list[dict[str, Any]]:
        """Every side's answer ``tag`` (asking first when ``ask``) within ``timeout``;
        ``what`` names the stage in the error."""
        try:
            if ask:
                self._send(tag)
            deadline = time.monotonic() + timeout
            got: dict[int, dict[str, Any]] = {}
            n = len(self._procs)
            while len(got) < n:
                objs = [o for i in range(n) if i not in got
                        for o in (self._conns[i], self._procs[i].sentinel)]
                ready = wait(objs, timeout=max(0.0, deadline - time.monotonic()))
                if not ready:
                    late = [self.names[i] for i in range(n) if i not in got]
                    every = "both sides were" if n == 2 else "every side was"
                    raise WorkerTimeout(f"pair {' and '.join(late)} did not answer the {what} "
                                        f"within {timeout:g} s (hang?); {every} stopped")
                for i in range(n):
                    if i in got:
                        continue
                    c = self._conns[i]
                    if c.poll(0):
                        try:
                            kind, body = c.recv()
                        except (EOFError, OSError):
                            self._crashed(i, what)
                        if kind == "error":
                            self._blame(i, what, body)
                        got[i] = body
                    elif self._procs[i].sentinel in ready:
                        self._blame(i, what, None)
            return [got[i] for i in range(n)]
        except WorkerError:
            self.close()
            raise

    def _blame(self, i: int, what: str, error: dict[str, Any] | None) -> NoReturn:
        """Raise for the side that failed first. Side ``i`` sent ``error`` or died; a side
        whose error is PeerDied only followed another (a learner told that a collector died,
        then the other collectors told that the learner did), so let such a cascade settle
        (within a second) and name the side that died or failed on its own."""
        errors = {i: error} if error is not None else {}
        deadline = time.monotonic() + 1.0
        while True:
            for j, c in enumerate(self._conns):
                try:
                    while j not in errors and c.poll(0):
                        kind, body = c.recv()
                        if kind == "error":
                            errors[j] = body
                except (EOFError, OSError):
                    pass
            first = [j for j, p in enumerate(self._procs)
                     if "PeerDied" not in (errors.get(j) or {}).get("error", "PeerDied")
                     or (p.exitcode is not None and j not in errors)]
            if first or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        pick = min(first, key=lambda j: (j in errors, (self._procs[j].exitcode or 0) >= 0, j),
                   default=i)
        if pick in errors:
            raise WorkerError(f"pair {self.names[pick]} failed during the {what}: "
                              f"{errors[pick]['error']}", errors[pick]["traceback"])
        self._crashed(pick, what)

    def _crashed(self, i: int, what: str) -> NoReturn:
        p = self._procs[i]
        p.join(1.0)
        code = p.exitcode
        how = ("still running" if code is None
               else describe_status(-code) if code < 0 else f"exit code {code}")
        raise WorkerCrashed(f"pair {self.names[i]} (pid {p.pid}) died during the {what}: "
                            f"{how}")

    def close(self) -> None:
        """Stop every side: ask, SIGTERM, SIGKILL; join. Never raises."""
        if self._closed:
            return
        self._closed = True
        self._signal(signal.SIGCONT)  # a paused side would not see "stop" or SIGTERM
        self._send("stop")
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

"""The two processes of a pair: the child main loop and the default workloads.

A side factory is ``factory(ring, rec, **kwargs) -> once``; ``once()`` does one iteration
(collector: policy, env step, push; learner: drain, update) and returns the env-steps it
pushed or the samples it consumed. Phases go to ``rec`` (core/timing.py). The loop runs
free from "go" to "stop"; the parent reads cumulative counters ("snap") at each window's
edges, so a window is the difference of two snapshots taken by the side itself.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock, PhaseRecorder, PhaseStats
from pytest_perfgate.placement.child import _die_with_parent, _place, _resolve

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
    gpu_ns too (a window's wire encoding, core/measure.py RawWindow.to_wire)."""
    for name, st in rec.take().items():
        totals[name] = totals[name] + st if name in totals else st
    return {"t": time.monotonic(), "cpu_s": time.process_time(), "units": units,
            "iters": iters,
            "phases": {n: [p.calls, p.wall_ns, p.cpu_ns] + ([] if p.gpu_ns is None
                                                           else [p.gpu_ns])
                       for n, p in totals.items()}}


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

"""A measurement window: what a workload reports for one stretch of stepping, and how any
workload plugs into the Meter (:class:`WindowSource`).

One encoding of a window (:meth:`RawWindow.to_wire`) is what worker pipes and A/B side pipes
send, so every path keeps the same fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_perfgate.core.timing import PhaseStats


@dataclass(frozen=True)
class RawWindow:
    """What a workload reports for one window."""

    transitions: int
    wall_s: float
    cpu_s: float
    phases: Mapping[str, PhaseStats] = field(default_factory=dict)
    calls: int = 0
    streams: int = 1  # stepping loops that ran in parallel (workers); phases sum over them
    # the workload tree's memory in bytes up to this window's end (core/tree.py PeakMemory:
    # peak_rss, rss, uss, pss, processes); empty where the source does not sample it
    memory: Mapping[str, int] = field(default_factory=dict, kw_only=True)
    # how the window's CUDA work was timed ({"sync": "edges" | "phases" | "events"});
    # empty where the process did not use CUDA (gpu/cuda.py)
    gpu: Mapping[str, Any] = field(default_factory=dict, kw_only=True)

    def to_wire(self) -> dict[str, Any]:
        """The one encoding of a window, in plain types: worker pipes and A/B side pipes
        send this, so no path can drop a field (``streams``) another keeps."""
        wire = {"transitions": self.transitions, "wall_s": self.wall_s, "cpu_s": self.cpu_s,
                "calls": self.calls, "streams": self.streams, "memory": dict(self.memory),
                "phases": {n: [p.calls, p.wall_ns, p.cpu_ns] + (
                    [] if p.gpu_ns is None else [p.gpu_ns]) for n, p in self.phases.items()}}
        if self.gpu:
            wire["gpu"] = dict(self.gpu)
        return wire

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> RawWindow:
        """Inverse of :meth:`to_wire`; ValueError names what is malformed."""
        try:
            phases = {str(n): _phase_from_wire(v)
                      for n, v in dict(d.get("phases") or {}).items()}
            memory = {str(k): int(v) for k, v in dict(d.get("memory") or {}).items()}
            gpu = {str(k): v for k, v in dict(d.get("gpu") or {}).items()}
            return cls(int(d["transitions"]), float(d["wall_s"]), float(d["cpu_s"]), phases,
                       int(d.get("calls", 0)), int(d.get("streams", 1)), memory=memory,
                       gpu=gpu)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed window {d!r}: {type(exc).__name__}: {exc}") from None

    @classmethod
    def parallel(cls, windows: Sequence[RawWindow], wall_s: float) -> RawWindow:
        """Windows of loops that ran side by side over the same ``wall_s``: counts, CPU time
        and phases add up; ``streams`` says how many there were (shares divide by it)."""
        phases: dict[str, PhaseStats] = {}
        memory: dict[str, int] = {}
        gpu: dict[str, Any] = {}
        for w in windows:
            for name, st in w.phases.items():
                phases[name] = phases[name] + st if name in phases else st
            for key, v in w.memory.items():  # processes side by side: their memory adds up
                memory[key] = memory.get(key, 0) + v
            gpu.update(w.gpu)
        return cls(sum(w.transitions for w in windows), wall_s, sum(w.cpu_s for w in windows),
                   phases, sum(w.calls for w in windows), sum(w.streams for w in windows),
                   memory=memory, gpu=gpu)


def _phase_from_wire(v: Sequence[Any]) -> PhaseStats:
    """[calls, wall_ns, cpu_ns] or, with CUDA timing, [calls, wall_ns, cpu_ns, gpu_ns]."""
    if len(v) not in (3, 4):
        raise ValueError(f"phase {v!r} has {len(v)} fields, expected 3 or 4")
    return PhaseStats(int(v[0]), int(v[1]), int(v[2]), int(v[3]) if len(v) == 4 else None)


@dataclass(frozen=True)
class Window(RawWindow):
    """A measured window plus what the machine was doing meanwhile."""

    machine_busy: float | None = None  # busy cores, whole machine (/proc/stat)
    other_load: float | None = None  # busy cores not accounted to the workload
    polluted: bool = False
    # why the GPU guard spoiled the window ("another process on the GPU: pid 4242", "GPU
    # throttled: thermal"); None when it did not, or when no GPU was watched (gpu/guard.py)
    gpu_spoiled: str | None = None

    @classmethod
    def of(cls, raw: RawWindow) -> Window:
        return cls(raw.transitions, raw.wall_s, raw.cpu_s, raw.phases, raw.calls, raw.streams,
                   memory=raw.memory, gpu=raw.gpu)

    @property
    def steps_per_s(self) -> float:
        return self.transitions / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def s_per_msteps(self) -> float:
        """The gated metric: seconds per million env-steps (lower is better, as asv wants)."""
        return self.wall_s / self.transitions * 1e6 if self.transitions else float("inf")

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


class WindowSource(Protocol):
    """A workload the Meter can drive: run for about ``duration_s`` and say what got done."""

    def run_window(self, duration_s: float) -> RawWindow: ...


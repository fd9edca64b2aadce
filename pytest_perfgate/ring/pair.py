"""Collectors and a learner over rings: placed spawn processes, one WindowSource.

One collector (the default) is a pair over one :class:`Ring`; ``collectors=N`` starts N
collector processes, each with its own ring and its own core spec (and optionally its own
NUMA node), and one learner draining them all through :class:`Rings` (docs/ring.md
"Several collectors").

Where the sides run is checked first (ring/pair_placement.py); the processes are
supervised as placement/workers.py does (ring/sides.py, docs/design.md §5): placed before
their interpreter imports anything, dying with the parent, every wait bounded, and close()
escalating stop -> SIGTERM -> SIGKILL -> join. The gated number is collector env-steps/s;
learner updates/s and samples consumed/s are display values in ``metadata()``
(docs/design.md §9).
"""

from __future__ import annotations

import pickle
import signal
import statistics
import warnings
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

from pytest_perfgate.core.timing import PhaseStats
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.placement import cpus as _cpus
from pytest_perfgate.placement.child import placed_like
from pytest_perfgate.placement.workers import WorkerError
from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.pair_placement import (
    check_device,
    collector_placement,
    gpu_local,
)
from pytest_perfgate.ring.rings import Rings
from pytest_perfgate.ring.shm_ring import Ring
from pytest_perfgate.ring.sides import Sides
from pytest_perfgate.ring.stream import mode as stream_mode

DEFAULT_COLLECTOR = "pytest_perfgate.ring.workloads:humanoid_collector"
DEFAULT_LEARNER = "pytest_perfgate.ring.workloads:sac_learner"


class RingPair(Sides):
    """Collector and learner processes joined by a ring; a WindowSource. Context manager."""

    def __init__(self, spec: RingSpec, *, collector: str | Callable[..., Any] = DEFAULT_COLLECTOR,
                 learner: str | Callable[..., Any] = DEFAULT_LEARNER,
                 collector_cpus: Any = None, learner_cpus: _cpus.CpuSpec = None,
                 collector_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
                 learner_kwargs: dict[str, Any] | None = None, start_timeout: float = 120.0,
                 snap_timeout: float = 30.0, park: bool = True,
                 threads: tuple[int | None, int | None] = (None, None), collectors: int = 1,
                 collector_nodes: Sequence[int] | None = None,
                 learner_device: str = "cpu") -> None:
        """``park``: stop every side (SIGSTOP) between windows, so nothing of the pair runs
        while another benchmark or the other A/B side is measured. ``collectors``: collector
        processes, each with its own ring; ``collector_cpus`` is then a list of one core
        spec per collector (None: unpinned), ``collector_nodes`` one NUMA node each (memory
        bound there; its CPUs when no core spec is given). ``learner_device="cuda"`` runs
        the learner on the GPU (passed to it as ``device=``; docs/gpu.md), and
        ``learner_cpus="gpu"`` (or ``"gpu:N"``, ``"gpu:0000:01:00.0"``) pins it to the CPUs
        local to that GPU. Checked before anything starts."""
        self.park = park
        self._paused = False
        self.spec = spec
        self.factories = (collector, learner)
        col_cpus, self.nodes = collector_placement(collectors, collector_cpus, collector_nodes)
        per: list[Any] = (list(collector_kwargs) if isinstance(collector_kwargs, list | tuple)
                          else [collector_kwargs] * collectors)
        if len(per) != collectors:
            raise RingInputError(f"collector_kwargs: {len(per)} dict(s) for {collectors} "
                                 "collector(s); give one dict, or one per collector")
        self.col_kwargs = [dict(k or {}) for k in per]
        self.kwargs = (self.col_kwargs[0], dict(learner_kwargs or {}))
        self.learner_device = check_device(learner_device)
        # the GPU the learner uses, by CUDA's numbering: the Meter's GPU guard watches it
        self.cuda_device: int | None = None
        if self.learner_device != "cpu":
            self.kwargs[1]["device"] = self.learner_device
            self.cuda_device = int(self.learner_device.partition(":")[2] or 0)
        learner_cpus = gpu_local(learner_cpus, self.cuda_device)
        self.collectors = collectors
        self.col_cpus = col_cpus
        super().__init__((["collector"] if collectors == 1
                          else [f"collector {i}" for i in range(collectors)]) + ["learner"])
        every = sorted({c for got in col_cpus for c in got or ()})
        self.cpus = (tuple(every) if all(g is not None for g in col_cpus) else None,
                     _cpus.parse_cpus(learner_cpus))
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
        self.ring: Ring | None = None  # the first collector's ring
        self.rings: list[Ring] = []
        self.learner_waits: list[float] = []  # the share of each window the learner waited
        self._last: list[dict[str, Any]] = []
        self._learner: list[tuple[float, float]] = []  # (updates/s, samples/s) per window
        self._per_collector: list[list[float]] = [[] for _ in range(collectors)]

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
        try:
            # Each ring's pages are faulted in by its creator: bound to the collector's node
            # while it is made, so they land there (docs/ring.md "Several collectors").
            for node in self.nodes:
                with placed_like(None, node, "bind", None):
                    self.rings.append(Ring(self.spec, parties=2))
            self.ring = self.rings[0]
            drained: Any = self.ring if self.collectors == 1 else Rings(self.rings)
            sides = [(self.factories[0], kw, r, c, n, self.threads[0])
                     for r, c, n, kw in zip(self.rings, self.col_cpus, self.nodes,
                                            self.col_kwargs, strict=True)]
            sides.append((self.factories[1], self.kwargs[1], drained, self.cpus[1], None,
                          self.threads[1]))
            for name, (factory, kw, ring, cpus, node, threads) in zip(self.names, sides,
                                                                       strict=True):
                # the thread cap applies even if pinning fails
                cap = threads if threads is not None else len(cpus) if cpus else None
                self._start_side(name, (cpus, node, "bind", cap),
                                 pickle.dumps((factory, kw, ring)))
            replies = self._gather("ready", self.start_timeout, "start")
            self.placements = [{"side": r, **rep} for r, rep in zip(self.names, replies,
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
            self._send("go")
            self._last = self._gather("snap", self.snap_timeout, "first snapshot", ask=True)
            if self.park:
                self.pause()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop both sides: ask, SIGTERM, SIGKILL; join; remove the ring. Never raises."""
        if not self._closed:
            super().close()
            for ring in self.rings:
                ring.close()

    def pause(self) -> None:
        """SIGSTOP both sides (an interleaved comparison parks the pairs not measured)."""
        self._signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT both sides; the next window starts from a fresh snapshot."""
        self._signal(signal.SIGCONT)
        self._paused = False
        self._last = self._gather("snap", self.snap_timeout, "snapshot", ask=True)

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
        cols, lrn = diffs[:-1], diffs[-1]
        upd = lrn.phases.get("update")
        self._learner.append(((upd.calls if upd else 0) / lrn.wall_s,
                              lrn.transitions / lrn.wall_s))
        waited = lrn.phases.get("wait_data")
        self.learner_waits.append(waited.wall_ns / 1e9 / lrn.wall_s if waited else 0.0)
        phases: dict[str, PhaseStats] = {}
        for i, c in enumerate(cols):
            self._per_collector[i].append(c.transitions / c.wall_s)
            for name, st in c.phases.items():
                phases[name] = phases[name] + st if name in phases else st
        wall = statistics.median(c.wall_s for c in cols)
        return RawWindow(sum(c.transitions for c in cols), wall,
                         sum(c.cpu_s for c in cols) + lrn.cpu_s, {**phases, **lrn.phases},
                         sum(c.calls for c in cols) + lrn.calls, streams=len(diffs),
                         memory=dict(lrn.memory), gpu=self.gpu_timing())

    def gpu_timing(self) -> dict[str, Any]:
        """How a window's GPU work was timed: a CUDA learner's phases by events only, on
        its device (CUDA's numbering); empty for a CPU learner."""
        if self.cuda_device is None:
            return {}
        return {"sync": "events", "device": self.cuda_device}  # gpu/cuda.py EVENTS_ONLY

    def quantization(self, raw: RawWindow) -> float:
        """Each collector's count moves by one push (num_envs env-steps) per window (the
        Meter widens windows until that is small)."""
        step = self.spec.num_envs * self.collectors
        return step / raw.transitions if raw.transitions > 0 else 1.0

    @staticmethod
    def _diff(a: dict[str, Any], b: dict[str, Any]) -> RawWindow:
        """A side's window: the difference of two of its cumulative snapshots (a phase's
        GPU time, where it has one, included)."""
        phases = {}
        for n, (c, w, u, *g) in b["phases"].items():
            c0, w0, u0, *g0 = a["phases"].get(n, (0, 0, 0))
            if c - c0 > 0:
                gpu = g[0] - (g0[0] if g0 else 0) if g else None
                phases[n] = PhaseStats(c - c0, w - w0, u - u0, gpu)
        return RawWindow(b["units"] - a["units"], b["t"] - a["t"], b["cpu_s"] - a["cpu_s"],
                         phases, b["iters"] - a["iters"], memory=dict(b.get("memory") or {}))

    def metadata(self) -> dict[str, Any]:
        """Placement as applied, ring stats, learner display values and the copy the
        learner's ``pop(out=)`` uses (``stream_copy``, ring/stream.py: the sides share this
        process's install and environment) for the run record."""
        ups = [u for u, _ in self._learner] or [0.0]
        sps = [s for _, s in self._learner] or [0.0]
        return {"ring_pair": {
            "placement": [{k: (_cpus.format_cpus(v) if k.endswith("_cpus") and v else v)
                           for k, v in p.items()} for p in self.placements],
            "notes": list(self.notes),
            "ring": (self.ring.stats(lock=False) if self.ring is not None and not self._closed
                     else {}),
            "learner_updates_per_s": statistics.median(ups),
            "learner_samples_per_s": statistics.median(sps),
            "collectors": self.collectors,
            "collector_env_steps_per_s": [statistics.median(r) if r else 0.0
                                          for r in self._per_collector],
            "learner_wait_share": statistics.median(self.learner_waits or [0.0]),
            "rings": ([r.stats(lock=False) for r in self.rings] if not self._closed
                      else []),
            "stream_copy": stream_mode()}}

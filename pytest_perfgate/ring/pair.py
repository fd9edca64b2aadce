"""Collectors and a learner over rings: placed spawn processes, one WindowSource.

One collector (the default) is a pair over one :class:`Ring`; ``collectors=N`` starts N
collector processes, each with its own ring and its own core spec (and optionally its own
NUMA node), and one learner draining them all through :class:`Rings` (docs/ring.md
"Several collectors").

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
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from pytest_perfgate.core.measure import RawWindow
from pytest_perfgate.core.timing import PhaseStats
from pytest_perfgate.placement import cpus as _cpus
from pytest_perfgate.placement.child import placed_like
from pytest_perfgate.placement.launchers import split_slices
from pytest_perfgate.placement.workers import WorkerCrashed, WorkerError, WorkerTimeout
from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.ring import Ring
from pytest_perfgate.ring.rings import Rings
from pytest_perfgate.ring.sides import side_main
from pytest_perfgate.ring.sync import describe_status

DEFAULT_COLLECTOR = "pytest_perfgate.ring.workloads:humanoid_collector"
DEFAULT_LEARNER = "pytest_perfgate.ring.workloads:sac_learner"
ROLES = ("collector", "learner")


def split_cpus(cpus: Sequence[int], n: int) -> list[str]:
    """``cpus`` cut into ``n`` consecutive slices as near equal as possible (core specs)."""
    cpus = sorted(cpus)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= len(cpus):
        raise RingInputError(f"collectors={n!r}: give 1 to {len(cpus)} collectors for "
                             f"the {len(cpus)} CPUs {_cpus.format_cpus(cpus)}, one CPU at "
                             "least each")
    return [_cpus.format_cpus(s) for s in split_slices(cpus, n)]


def _collector_placement(collectors: int, cpus: Any, nodes: Any
                         ) -> tuple[list[tuple[int, ...] | None], list[int | None]]:
    """Per-collector (cpus, node), checked before any process starts: a positive count,
    one core spec (and node) per collector, no CPU or node shared by two collectors, no
    more collectors than usable CPUs or usable nodes."""
    if isinstance(collectors, bool) or not isinstance(collectors, int) or collectors < 1:
        raise RingInputError(f"collectors={collectors!r}: give a whole number >= 1 of "
                             "collector processes")
    usable = _cpus.usable_cpus()
    if collectors > len(usable):
        raise RingInputError(f"collectors={collectors}: more collectors than the "
                             f"{len(usable)} usable CPUs ({_cpus.format_cpus(usable)}); "
                             f"use at most {len(usable)}, one CPU at least each")
    specs = list(cpus) if isinstance(cpus, list | tuple) else [cpus] * collectors
    if collectors > 1 and not isinstance(cpus, list | tuple) and cpus is not None:
        raise RingInputError(f"collector_cpus={cpus!r} with collectors={collectors}: give one "
                             f"core spec per collector, e.g. {split_cpus(usable, collectors)!r}")
    if len(specs) != collectors:
        raise RingInputError(f"collector_cpus={cpus!r}: {len(specs)} core spec(s) for "
                             f"{collectors} collector(s); give exactly one per collector")
    node_list = list(nodes) if nodes is not None else [None] * collectors
    if len(node_list) != collectors:
        raise RingInputError(f"collector_nodes={nodes!r}: {len(node_list)} node(s) for "
                             f"{collectors} collector(s); give exactly one per collector")
    if nodes is not None:
        from pytest_perfgate.placement import numa as _numa

        avail = {n.id: n for n in _numa.discover().usable_nodes(usable)}
        bad = [n for n in node_list if n not in avail]
        if bad or len(set(node_list)) != len(node_list):
            why = (f"node(s) {bad} are not usable here" if bad
                   else "two collectors on one node")
            raise RingInputError(f"collector_nodes={nodes!r}: {why}; usable nodes (with CPUs "
                                 f"and memory): {sorted(avail) or 'none'}, one per collector")
        specs = [spec if spec is not None else _cpus.format_cpus(avail[int(n)].cpus)
                 for spec, n in zip(specs, node_list, strict=True) if n is not None]
    parsed = [_cpus.parse_cpus(spec) for spec in specs]
    seen: dict[int, int] = {}
    for i, got in enumerate(parsed):
        for c in got or ():
            if c in seen:
                raise RingInputError(f"collector_cpus={cpus!r}: collectors {seen[c]} and {i} "
                                     f"both have CPU {c}; give each collector its own CPUs")
            seen[c] = i
    return parsed, node_list


def check_device(device: object) -> str:
    """A learner device: "cpu", "cuda" or "cuda:N" (whether it exists, the learner checks)."""
    if not isinstance(device, str) or not (
            device in ("cpu", "cuda") or (device.startswith("cuda:")
                                          and device[5:].isdigit())):
        raise RingInputError(f"learner_device={device!r}: use 'cpu' (the default), 'cuda' "
                             "or 'cuda:N'")
    return device


def gpu_local(cpus: Any) -> Any:
    """A core spec, with "gpu" / "gpu:N" / "gpu:<PCI address>" resolved to the CPUs local
    to that GPU (placement/numa.py: a platform without locality warns and leaves the side
    unpinned; a GPU that cannot be found is an error)."""
    if not (isinstance(cpus, str) and cpus.strip().lower().split(":", 1)[0] == "gpu"):
        return cpus
    from pytest_perfgate.placement.numa import gpu_local_cpus

    _, _, which = cpus.strip().partition(":")
    device: int | str = int(which) if which.isdigit() else (which or 0)
    try:
        return gpu_local_cpus(device)
    except ValueError as exc:
        raise RingInputError(f"learner_cpus={cpus!r}: {exc}") from None


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    return describe_status(-code) if code < 0 else f"exit code {code}"


class RingPair:
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
        col_cpus, self.nodes = _collector_placement(collectors, collector_cpus, collector_nodes)
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
        learner_cpus = gpu_local(learner_cpus)
        self.collectors = collectors
        self.col_cpus = col_cpus
        self.names = (["collector"] if collectors == 1
                      else [f"collector {i}" for i in range(collectors)]) + ["learner"]
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
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._last: list[dict[str, Any]] = []
        self._learner: list[tuple[float, float]] = []  # (updates/s, samples/s) per window
        self._per_collector: list[list[float]] = [[] for _ in range(collectors)]
        self._learner_wait: list[float] = []  # share of each window the learner waited
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
                payload = pickle.dumps((factory, kw, ring))
                # applies even if pinning fails
                cap = threads if threads is not None else len(cpus) if cpus else None
                role = "learner" if name == "learner" else "collector"
                parent, child = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=side_main, name=f"perfgate-{name.replace(' ', '')}",
                                   daemon=True, args=(child, role, (cpus, node, "bind", cap),
                                                      payload, os.getpid()))
                with placed_like(cpus, node, "bind", cap):
                    proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)
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
        for ring in self.rings:
            ring.close()

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
        cols, lrn = diffs[:-1], diffs[-1]
        upd = lrn.phases.get("update")
        self._learner.append(((upd.calls if upd else 0) / lrn.wall_s,
                              lrn.transitions / lrn.wall_s))
        waited = lrn.phases.get("wait_data")
        self._learner_wait.append(waited.wall_ns / 1e9 / lrn.wall_s if waited else 0.0)
        phases: dict[str, PhaseStats] = {}
        for i, c in enumerate(cols):
            self._per_collector[i].append(c.transitions / c.wall_s)
            for name, st in c.phases.items():
                phases[name] = phases[name] + st if name in phases else st
        wall = statistics.median(c.wall_s for c in cols)
        return RawWindow(sum(c.transitions for c in cols), wall,
                         sum(c.cpu_s for c in cols) + lrn.cpu_s, {**phases, **lrn.phases},
                         sum(c.calls for c in cols) + lrn.calls, streams=len(diffs),
                         gpu=self.gpu_timing())

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
            "learner_samples_per_s": statistics.median(sps),
            "collectors": self.collectors,
            "collector_env_steps_per_s": [statistics.median(r) if r else 0.0
                                          for r in self._per_collector],
            "learner_wait_share": statistics.median(self._learner_wait or [0.0]),
            "rings": ([r.stats(lock=False) for r in self.rings] if not self._closed
                      else [])}}

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
        n = len(self._procs)
        while len(got) < n:
            objs = [o for i in range(n) if i not in got
                    for o in (self._conns[i], self._procs[i].sentinel)]
            ready = wait(objs, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                late = [self.names[i] for i in range(n) if i not in got]
                self.close()
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
            self.close()
            raise WorkerError(f"pair {self.names[pick]} failed during the {what}: "
                              f"{errors[pick]['error']}", errors[pick]["traceback"])
        self._crashed(pick, what)

    def _crashed(self, i: int, what: str) -> NoReturn:
        p = self._procs[i]
        p.join(1.0)
        code = p.exitcode
        self.close()
        raise WorkerCrashed(f"pair {self.names[i]} (pid {p.pid}) died during the {what}: "
                            f"{_exit_text(code)}")


__all__ = ["DEFAULT_COLLECTOR", "DEFAULT_LEARNER", "RingPair", "split_cpus"]

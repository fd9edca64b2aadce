"""Steady-state measurement: warm up until stable, then measure K windows of env-steps/s.

Any workload plugs in as a :class:`WindowSource` (an in-process loop, a pool of pinned
workers, a collector/learner pair): it runs for a requested duration and reports how many
transitions completed, with per-phase timings. The :class:`Meter` owns warm-up, the
stability rule, the outside-load guard and re-measurement, so every workload is measured
the same way.

Stability rule (docs/measurement.md): warm-up windows of ``warmup_window_s`` run until
the median rate of the last ``warmup_span`` windows is within ``stability_tol`` of the
median of the ``warmup_span`` windows before them; if that never happens within
``warmup_max_s`` the measurement is marked unstable.

Sources that count only the whole steps completed inside a window (worker groups, ring
pairs) report rates that move by one step per window: a window holding 4 steps is +-25%
by that alone, and never passes a 10% stability rule. Such a source says how coarse a
window was (``quantization(raw)``), and the Meter widens that source's windows until one
step is at most ``max_quantization`` of a window's count (docs/design.md §1).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_perfgate.core.load import LoadProbe, LoadSample, NullProbe, ProcStatProbe
from pytest_perfgate.core.progress import NULL_PROGRESS, Progress
from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock, PhaseStats
from pytest_perfgate.core.window import RawWindow, Window, WindowSource

if TYPE_CHECKING:
    from pytest_perfgate.gpu.guard import GpuProbe


# GPU memory figures a window carries (bytes); like peak_rss, the largest over the windows
GPU_PEAKS = ("gpu_peak_allocated", "gpu_peak_reserved", "gpu_used")
MAX_WIDENINGS = 6  # a window with no completed step is re-run up to 2**6 = 64x longer
MAX_STRETCH = 16.0  # a coarse source's windows grow to at most 16x the configured length


class MeasureError(RuntimeError):
    """The workload produced nothing measurable; the message says what to change."""


@dataclass(frozen=True)
class MeasureConfig:
    """How long and how carefully to measure. Defaults keep one benchmark under ~15 s."""

    windows: int = 8
    window_s: float = 1.0
    warmup_window_s: float = 0.25
    warmup_span: int = 2
    warmup_max_s: float = 5.0
    stability_tol: float = 0.10
    load_limit: float = 0.5
    max_remeasure: int = 3
    max_quantization: float = 0.05  # half the stability tolerance

    @classmethod
    def smoke(cls) -> MeasureConfig:
        """Tiny windows, no real warm-up: proves a perf test runs, says nothing about speed."""
        return cls(windows=2, window_s=0.01, warmup_window_s=0.005, warmup_span=1,
                   warmup_max_s=0.02, stability_tol=float("inf"),
                   max_quantization=float("inf"))

    def __post_init__(self) -> None:
        if self.windows < 1 or self.warmup_span < 1 or self.max_remeasure < 0:
            raise ValueError(f"invalid measurement config {self!r}")
        if self.window_s <= 0 or self.warmup_window_s <= 0 or self.warmup_max_s < 0:
            raise ValueError(f"invalid measurement config {self!r}")
        if not self.max_quantization > 0:
            raise ValueError(f"invalid measurement config {self!r}")


@dataclass(frozen=True)
class Measurement:
    """Everything one benchmark run produced."""

    windows: tuple[Window, ...]
    steady: bool
    warmup_s: float
    warmup_windows: int
    remeasured: int = 0  # polluted windows measured again
    polluted_kept: int = 0  # polluted windows kept because re-measurement ran out
    gpu_spoiled: tuple[str, ...] = ()  # the GPU guard's reason for each spoiled window
    warmup_load: float | None = None  # outside load during warm-up, when above the limit

    @property
    def samples(self) -> list[float]:
        """Per-window seconds per million env-steps: the gate's input."""
        return [w.s_per_msteps for w in self.windows]

    @property
    def value(self) -> float:
        """The run's summary: the median of its windows."""
        return statistics.median(self.samples)

    @property
    def steps_per_s(self) -> float:
        return 1e6 / self.value

    @property
    def cores(self) -> float:
        return statistics.median(w.cores for w in self.windows)

    @property
    def memory(self) -> dict[str, int]:
        """The workload tree's memory (bytes): a source's windows carry its running peak, so
        the last window's figures cover the whole measurement, warm-up included."""
        if not self.windows or not self.windows[-1].memory:
            return {}
        out = dict(self.windows[-1].memory)
        for key in ("peak_rss", *GPU_PEAKS):
            if any(key in w.memory for w in self.windows):
                out[key] = max(w.memory.get(key, 0) for w in self.windows)
        return out

    @property
    def gpu(self) -> dict[str, Any]:
        """How the GPU was timed and watched (empty where the process did not use CUDA):
        ``sync`` (gpu/cuda.py), ``sm_clock_mhz`` (lowest, highest over the windows) and
        ``spoiled``, each GPU guard reason with its window count."""
        out: dict[str, Any] = {}
        for w in self.windows:
            out.update(w.gpu)
        clocks = [w.gpu["sm_clock_mhz"] for w in self.windows if "sm_clock_mhz" in w.gpu]
        if clocks:  # the lowest SM clock at each window's edges: its range over the run
            out["sm_clock_mhz"] = [min(clocks), max(clocks)]
        if self.gpu_spoiled:
            spoiled: dict[str, int] = {}
            for reason in self.gpu_spoiled:
                spoiled[reason] = spoiled.get(reason, 0) + 1
            out["spoiled"] = spoiled
        return out

    @property
    def phases(self) -> dict[str, PhaseStats]:
        total: dict[str, PhaseStats] = {}
        for w in self.windows:
            for name, st in w.phases.items():
                total[name] = total[name] + st if name in total else st
        return total

    def phase_share(self) -> dict[str, float]:
        """Each phase's share of the measured wall time (of each stepping loop's, for workers).

        A phase that queued CUDA work costs the longer of its CPU wall and its GPU time:
        with the default edges its wall is the launches while the device spends the GPU
        time on it, after the CPU has moved on (so shares may add up to more than 1, as
        CPU and GPU work overlap)."""
        wall_ns = sum(w.wall_s * w.streams for w in self.windows) * 1e9
        return ({n: max(st.wall_ns, st.gpu_ns or 0) / wall_ns
                 for n, st in self.phases.items()} if wall_ns else {})


def is_steady(rates: Sequence[float], span: int, tol: float) -> bool:
    """The stability rule over consecutive warm-up window rates (see module docstring)."""
    if len(rates) < 2 * span:
        return False
    last = statistics.median(rates[-span:])
    prev = statistics.median(rates[-2 * span:-span])
    if prev <= 0:
        return False
    return abs(last / prev - 1.0) <= tol


def completed_window(source: WindowSource, duration_s: float) -> RawWindow:
    """One window that completed at least one env-step.

    A source that counts only steps completed inside the window (worker groups) can
    complete none when its step is slower than the window, or when a loaded machine
    did not schedule it meanwhile; such a window has no rate. It is measured again,
    twice as long each time, up to 64x.
    """
    d = duration_s
    for _ in range(MAX_WIDENINGS + 1):
        raw = source.run_window(d)
        if raw.transitions > 0:
            return raw
        d *= 2
    raise MeasureError(
        f"the workload completed no env-step in windows of up to {d / 2:g} s: its step "
        "is slower than that, or it never ran; pass a larger window_time= (or "
        "--perfgate-window-time) or check that the step returns")


def quantization(source: WindowSource, raw: RawWindow) -> float:
    """How far one step moves ``raw``'s rate, relative (0 for sources timed per call)."""
    fn = getattr(source, "quantization", None)
    return float(fn(raw)) if callable(fn) else 0.0


class Meter:
    """Drives a WindowSource through warm-up and K measured windows, telling ``progress``
    (:mod:`.progress`) as it goes."""

    def __init__(self, config: MeasureConfig | None = None, clock: Clock = SYSTEM_CLOCK,
                 load_probe: LoadProbe | None = None, progress: Progress | None = None,
                 gpu_probe: GpuProbe | None = None) -> None:
        self.config = config or MeasureConfig()
        self._clock = clock
        self._probe = load_probe if load_probe is not None else ProcStatProbe()
        # the GPU guard: given, or found once this process has initialised CUDA (never
        # where the load guard is off)
        self._gpu = gpu_probe
        self._gpu_auto = gpu_probe is None and not isinstance(self._probe, NullProbe)
        self.progress = progress if progress is not None else NULL_PROGRESS
        self._min_s: dict[int, float] = {}  # per source: the window length its steps need
        self.warmup_load: float | None = None  # the last warm-up's outside load (_outside)

    def _length(self, source: WindowSource, base_s: float) -> float:
        return min(max(base_s, self._min_s.get(id(source), 0.0)), base_s * MAX_STRETCH)

    def _learn(self, source: WindowSource, raw: RawWindow) -> None:
        """Widen a coarse source's later windows so one step is <= max_quantization."""
        q, limit = quantization(source, raw), self.config.max_quantization
        if q > limit and raw.wall_s > 0:
            need = raw.wall_s * q / limit
            self._min_s[id(source)] = max(self._min_s.get(id(source), 0.0), need)

    def measure(self, source: WindowSource) -> Measurement:
        cfg = self.config
        steady, warmup_s, warmup_windows = self.warm_up(source)
        warmup_load = self.warmup_load
        windows: list[Window] = []
        remeasured = polluted_kept = 0
        gpu_spoiled: list[str] = []
        if self._gpu is not None:
            self._gpu.start()
        while len(windows) < cfg.windows:
            w = self._window(source, self._length(source, cfg.window_s))
            if w.gpu_spoiled is not None:
                gpu_spoiled.append(w.gpu_spoiled)
            if w.polluted:
                if remeasured < cfg.max_remeasure:
                    remeasured += 1
                    if w.gpu_spoiled is None:
                        self.progress.window_redone(len(windows) + 1, cfg.windows,
                                                    w.other_load or 0.0)
                    else:
                        self.progress.window_spoiled(len(windows) + 1, cfg.windows,
                                                     w.gpu_spoiled)
                    continue
                polluted_kept += 1
            windows.append(w)
            self.progress.window_done(len(windows), cfg.windows, w.steps_per_s)
        return Measurement(tuple(windows), steady, warmup_s, warmup_windows, remeasured,
                           polluted_kept, tuple(gpu_spoiled), warmup_load)

    def warm_up(self, source: WindowSource, side: str = "") -> tuple[bool, float, int]:
        """Run warm-up windows until the stability rule holds: (steady, seconds, windows).
        ``side`` names the source to the progress observer (A/B: "base", "head")."""
        cfg = self.config
        self.progress.warmup_started(side)
        t0 = self._clock.wall_ns()
        self._min_s.pop(id(source), None)
        rates: list[float] = []
        before = self._probe.sample()
        own_cpu = own_wall = 0.0
        while True:
            length = self._length(source, cfg.warmup_window_s)
            raw = completed_window(source, length)
            own_cpu, own_wall = own_cpu + raw.cpu_s, own_wall + raw.wall_s
            self._learn(source, raw)
            if self._length(source, cfg.warmup_window_s) > 1.5 * length:
                rates.clear()  # too coarse to judge: start over with the longer windows
            else:
                rates.append(raw.transitions / raw.wall_s if raw.wall_s > 0 else 0.0)
            elapsed = (self._clock.wall_ns() - t0) / 1e9
            steady = is_steady(rates, cfg.warmup_span, cfg.stability_tol)
            # a step slower than a warm-up window still gets 2*span windows to show stability
            if steady or (elapsed >= cfg.warmup_max_s and len(rates) >= 2 * cfg.warmup_span):
                self.progress.warmup_ended(steady, elapsed, side)
                self.warmup_load = self._outside(before, self._probe.sample(), own_cpu,
                                                 own_wall)
                return steady, elapsed, len(rates)

    def _outside(self, before: Any, after: Any, own_cpu: float, own_wall: float
                 ) -> float | None:
        """Busy cores of other work between two load samples, when above the load limit
        (what an UNSTABLE verdict then names as its cause); None when below or unseen."""
        if before is None or after is None or own_wall <= 0:
            return None
        busy = LoadSample.busy_cores(before, after)
        if busy is None:
            return None
        ours = LoadSample.our_cores(before, after)
        other = max(0.0, busy - (own_cpu / own_wall if ours is None else ours))
        return other if other > self.config.load_limit else None

    def window(self, source: WindowSource, duration_s: float) -> Window:
        """One window with the outside load the guard saw meanwhile, never re-measured: the
        A/B turns decide what a spoiled turn costs (docs/design.md §3)."""
        return self._window(source, duration_s)

    def _gpu_probe(self, source: WindowSource, raw: RawWindow | None = None
                   ) -> GpuProbe | None:
        """The GPU guard, on the device this process initialised CUDA on, else on the one
        another process of the workload uses: ``source.cuda_device`` (a ring pair's
        learner), or the device a window says it was timed on (an A/B side)."""
        if self._gpu is not None or not self._gpu_auto:
            return self._gpu
        cuda = None
        if "torch" in sys.modules:
            from pytest_perfgate.gpu.cuda import active_cuda

            cuda = active_cuda()
        index = getattr(source, "cuda_device", None)
        if not isinstance(index, int) and raw is not None:
            index = raw.gpu.get("device")
        if cuda is None and not isinstance(index, int):
            return None
        from pytest_perfgate.gpu.guard import GpuGuard

        self._gpu_auto = False
        if cuda is not None:
            self._gpu = GpuGuard.for_cuda(cuda)
        elif isinstance(index, int):
            self._gpu = GpuGuard.for_index(index)
        return self._gpu

    def _window(self, source: WindowSource, duration_s: float) -> Window:
        gpu = self._gpu_probe(source)
        g0 = gpu.sample() if gpu is not None else None
        before = self._probe.sample()
        raw = completed_window(source, duration_s)
        after = self._probe.sample()
        if gpu is None:
            gpu = self._gpu_probe(source, raw)  # the window's step may have initialised CUDA
        g1 = gpu.sample() if gpu is not None and g0 is not None else None
        self._learn(source, raw)
        busy = other = None
        polluted = False
        if before is not None and after is not None:
            busy = LoadSample.busy_cores(before, after)
            ours = LoadSample.our_cores(before, after)
            if ours is None and raw.wall_s > 0:
                ours = raw.cpu_s / raw.wall_s
            if busy is not None and ours is not None:
                other = max(0.0, busy - ours)
                polluted = other > self.config.load_limit
        memory, gpu_info = dict(raw.memory), dict(raw.gpu)
        spoiled = None
        if gpu is not None and g0 is not None and g1 is not None:
            spoiled = gpu.spoiled(g0, g1)
            states = (*g0.states.values(), *g1.states.values())
            used = [s.memory_used for s in states if s.memory_used is not None]
            if used:
                memory["gpu_used"] = max(used)
            clocks = [s.sm_clock_mhz for s in states if s.sm_clock_mhz is not None]
            if clocks:
                gpu_info["sm_clock_mhz"] = min(clocks)
        return Window(raw.transitions, raw.wall_s, raw.cpu_s, raw.phases, raw.calls,
                      raw.streams, busy, other, polluted or spoiled is not None, spoiled,
                      memory=memory, gpu=gpu_info)

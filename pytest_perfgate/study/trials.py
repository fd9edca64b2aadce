"""Verdict quality: how often the gate cries wolf, and how small a slowdown it catches.

The gate is only worth what its verdicts are worth, and on a shared runner the machine's
speed drifts by up to 1.5x within seconds (docs/design.md §1), so the answer is a property
of the runner, not of the code. This module measures it on the runner itself, through the
real gate: one base and one head side process of the *same* checkout, trials in random
order, A/A (nothing injected) and with a calibrated extra spin inside the head's step
(``RemoteSource.inject_slowdown``; only sides started with ``calibration=True`` accept it).
Each trial keeps its raw per-turn samples, so levers that do not need new measurements (the
estimator, fewer turns, another threshold) are judged offline on the same data
(:mod:`.analysis`), and the study can be saved and re-analysed (:mod:`.studyfile`).

History mode is emulated from the same sides: each trial also measures a non-interleaved
"run" of K consecutive windows of each side; the head's run is judged by
``history_evidence`` against the base runs of the previous trials, as a team without a base
build would be (docs/design.md §2).

Pure logic over :class:`Injectable` sources: the CLI drives real side processes, the tests
drive scripted fakes.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_perfgate.core.gate import Rule
from pytest_perfgate.core.load import LoadProbe
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.progress import Progress
from pytest_perfgate.core.sequential import MAX_LOOKS, Design, plan
from pytest_perfgate.core.settings import Settings
from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock
from pytest_perfgate.core.window import RawWindow, WindowSource

FORMAT = 1  # version of the saved study file (new fields have defaults: old files load)
ESTIMATORS = ("trimmed", "t", "wilcoxon", "bootstrap")  # "trimmed" is the shipped gate
TARGETS = {"false_alarms": 0.01, "detect_5": 0.95, "detect_3": 0.80, "detect_2": 0.95,
           "seconds": 20.0}
LOAD_CHANGE = 0.25  # busy cores: the A/B default (half of --perfgate-load-limit 0.5)
LOADS = ("quiet", "one", "both")  # the scenario: no hog, a toggling hog on one core, on both


class StudyError(ValueError):
    """A study setting or file is unusable; the message names the value and the fix."""


class Injectable(WindowSource, Protocol):
    """A window source that can slow its own step down by a calibrated fraction."""

    def inject_slowdown(self, fraction: float) -> None: ...


@dataclass(frozen=True)
class StudyConfig:
    """What to run. Defaults: the settings docs/verdict-quality.md chose; ~45 min on 2 vCPUs."""

    aa_trials: int = 50
    trials: int = 10  # per injected slowdown
    slowdowns: tuple[float, ...] = (0.02, 0.03, 0.05, 0.10)
    turns: int = 96
    turn_s: float = 0.1
    threshold: float = 0.02
    alpha: float = 0.01
    history: bool = True
    history_windows: int = 4
    history_window_s: float = 0.5
    baseline_runs: int = 5
    warmup_window_s: float = 0.25
    warmup_max_s: float = 3.0
    seed: int = 0
    looks: int = 4  # the sequential test's looks up to ``turns`` (1: fixed length)
    load: str = "quiet"  # the scenario: "quiet", or a toggling hog on "one" core or "both"

    def __post_init__(self) -> None:
        for name in ("aa_trials", "trials", "turns", "history_windows", "baseline_runs"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise StudyError(f"{name}={v!r} must be a whole number >= 0")
        if self.turns < 2:
            raise StudyError(f"turns={self.turns!r}: a paired verdict needs >= 2 turns, "
                             "e.g. --turns 40")
        if self.aa_trials + self.trials * len(self.slowdowns) == 0:
            raise StudyError("no trials to run: give --aa-trials or --trials above 0")
        for s in self.slowdowns:
            if not 0 < s < 1:
                raise StudyError(f"slowdown {s!r} must be a fraction in (0, 1), "
                                 "e.g. 0.05 for 5%")
        for name in ("turn_s", "history_window_s", "warmup_window_s"):
            if not getattr(self, name) > 0:
                raise StudyError(f"{name}={getattr(self, name)!r} must be > 0 seconds")
        self.rule()  # validates, naming the value
        if isinstance(self.looks, bool) or not isinstance(self.looks, int) \
                or not 1 <= self.looks <= MAX_LOOKS:
            raise StudyError(f"looks={self.looks!r} must be a whole number from 1 to "
                             f"{MAX_LOOKS}, e.g. --looks 4")
        if self.load not in LOADS:
            raise StudyError(f"load={self.load!r}: use one of {', '.join(LOADS)}")

    def rule(self) -> Rule:
        """What every trial's verdict is judged by: the study's threshold and alpha."""
        return Settings(threshold=self.threshold, alpha=self.alpha).rule()

    def design(self) -> Design:
        """The sequential design every trial runs (the shipped A/B gate's)."""
        return plan(self.turns, self.looks, self.alpha)

    @classmethod
    def quick(cls, **kw: Any) -> StudyConfig:
        """A ~3 minute sanity run: too few trials to claim rates, enough to see it works."""
        base = dict(aa_trials=8, trials=3, turns=16, turn_s=0.2, history_windows=3,
                    history_window_s=0.3, baseline_runs=3)
        return cls(**{**base, **kw})

    def plan(self) -> list[float]:
        """The trials' injected slowdowns (0.0 = A/A), in a seeded random order."""
        order = [0.0] * self.aa_trials + [s for s in self.slowdowns for _ in range(self.trials)]
        random.Random(self.seed).shuffle(order)
        return order

    def meter(self, clock: Clock = SYSTEM_CLOCK, progress: Progress | None = None,
              load_probe: LoadProbe | None = None) -> Meter:
        """The warm-up check each trial runs (the sides stay warm; this re-verifies it), and
        the load guard of its turns (``load_probe``; None: none, as in the tests' fakes)."""
        from pytest_perfgate.core.load import NullProbe

        cfg = MeasureConfig(warmup_window_s=self.warmup_window_s, warmup_max_s=self.warmup_max_s)
        return Meter(cfg, clock=clock, load_probe=load_probe or NullProbe(), progress=progress)


@dataclass(frozen=True)
class TrialRecord:
    """One trial's raw data: per-turn seconds per million env-steps, and what it cost."""

    index: int
    slowdown: float  # injected into head (0 = A/A)
    base: tuple[float, ...]
    head: tuple[float, ...]
    turn_wall: float  # mean wall seconds of one turn
    warmup_s: float  # mean over the two sides
    steady: bool
    started_s: float  # since the study started
    hist_base: tuple[float, ...] = ()  # K consecutive windows of base, then of head
    hist_head: tuple[float, ...] = ()
    hist_wall: float = 0.0  # wall seconds of one history run
    probes: tuple[Mapping[str, float], ...] = ()  # per turn, base then head alternating
    # the sequential run: outside load (busy cores) of each pair's base and head turn, as
    # the guard saw it (None: unknown), the live verdict, and the trial's wall seconds
    loads: tuple[tuple[float | None, float | None], ...] = ()
    verdict: str = ""
    wall_s: float = 0.0

    @property
    def diffs(self) -> list[float]:
        """Per-turn log(head / base) of the pairs the load-change rule keeps (all of them
        when no load was recorded): > 0 means head took longer."""
        loads = self.loads or ((None, None),) * len(self.base)
        return [math.log(h / b) for b, h, (lb, lh) in zip(self.base, self.head, loads,
                                                          strict=True)
                if lb is None or lh is None or abs(lb - lh) <= LOAD_CHANGE]


# ---- running -------------------------------------------------------------------------------


def run_trial(index: int, slowdown: float, base: Injectable, head: Injectable,
              cfg: StudyConfig, meter: Meter, clock: Clock = SYSTEM_CLOCK,
              t0_ns: int = 0, probe: Callable[[], Mapping[str, float]] | None = None
              ) -> TrialRecord:
    """Warm-up check, the sequential A/B test exactly as the gate runs it (stopping at the
    look that decides, load-changed pairs re-measured), and (optionally) one history run
    per side. Every pair measured is kept with its outside load, so other designs can be
    replayed offline (:mod:`.analysis`)."""
    from pytest_perfgate.modes.ab.abba import LOAD_CHANGE_SHARE, run_looks, turn_pair

    head.inject_slowdown(slowdown)
    start_ns = clock.wall_ns()
    started = (start_ns - t0_ns) / 1e9
    sb, wb_s, _ = meter.warm_up(base, "base")
    sh, wh_s, _ = meter.warm_up(head, "head")
    probes: list[Mapping[str, float]] = []
    b_src: WindowSource = base
    h_src: WindowSource = head
    if probe is not None:
        b_src, h_src = _Probed(base, probe, probes), _Probed(head, probe, probes)
    rule = cfg.rule()
    looks = run_looks(lambda i: turn_pair(b_src, h_src, i, cfg.turn_s, meter), cfg.design(),
                      rule, meter.config.load_limit * LOAD_CHANGE_SHARE,
                      progress=meter.progress)
    b = [p[0] for p in looks.pairs]
    h = [p[1] for p in looks.pairs]
    wall_s = (clock.wall_ns() - start_ns) / 1e9
    walls = [w.wall_s for w in (*b, *h)]
    hb: list[RawWindow] = []
    hh: list[RawWindow] = []
    if cfg.history:
        hb = [base.run_window(cfg.history_window_s) for _ in range(cfg.history_windows)]
        hh = [head.run_window(cfg.history_window_s) for _ in range(cfg.history_windows)]
    hist_wall = sum(w.wall_s for w in hh)
    return TrialRecord(index, slowdown, tuple(_spm(w) for w in b), tuple(_spm(w) for w in h),
                       statistics.fmean(walls), (wb_s + wh_s) / 2, sb and sh, started,
                       tuple(_spm(w) for w in hb), tuple(_spm(w) for w in hh), hist_wall,
                       tuple(probes), tuple((p[0].other_load, p[1].other_load)
                                            for p in looks.pairs),
                       looks.verdict.outcome.value, wall_s)


def run_study(base: Injectable, head: Injectable, cfg: StudyConfig,
              on_trial: Callable[[TrialRecord, int], None] | None = None,
              clock: Clock = SYSTEM_CLOCK,
              probe: Callable[[], Mapping[str, float]] | None = None,
              progress: Progress | None = None, load_probe: LoadProbe | None = None,
              control: Injectable | None = None) -> list[TrialRecord]:
    """Run every planned trial on one pair of sources; base is never slowed. ``control``:
    the head of the A/A trials, a third source never slowed either. Without it the A/A
    trials share ``head`` with the injected ones, and a head that busy-waited injected
    trials can be given less CPU in the A/A trials between them (docs/ab.md). ``progress``
    hears each trial start (``on_trial`` reports its end) and its warm-ups and turns;
    ``load_probe`` is the turns' load guard (the CLI's: /proc/stat)."""
    base.inject_slowdown(0.0)
    if control is not None:
        control.inject_slowdown(0.0)
    meter = cfg.meter(clock, progress, load_probe)
    t0 = clock.wall_ns()
    out: list[TrialRecord] = []
    plan = cfg.plan()
    for i, s in enumerate(plan):
        meter.progress.started(f"trial {i + 1}/{len(plan)}")
        aa_head = control if s == 0.0 and control is not None else head
        rec = run_trial(i, s, base, aa_head, cfg, meter, clock, t0, probe)
        out.append(rec)
        if on_trial is not None:
            on_trial(rec, len(plan))
    head.inject_slowdown(0.0)
    return out


def _spm(w: RawWindow) -> float:
    """Seconds per million env-steps, the gated metric."""
    if w.transitions <= 0:
        raise StudyError(f"a window completed no env-steps in {w.wall_s:.3f} s: lengthen "
                         "--turn-time so each turn holds at least one step() call")
    return w.wall_s / w.transitions * 1e6


class _Probed:
    """Records what the probes saw over each window (the noise-guard lever)."""

    def __init__(self, inner: WindowSource, probe: Callable[[], Mapping[str, float]],
                 sink: list[Mapping[str, float]]) -> None:
        self.inner, self.probe, self.sink = inner, probe, sink

    def run_window(self, duration_s: float) -> RawWindow:
        before = self.probe()
        w = self.inner.run_window(duration_s)
        after = self.probe()
        dt = max(w.wall_s, 1e-9)
        rates = {k: (after[k] - before[k]) / dt for k in after if k in before}
        rates["cores"] = w.cpu_s / dt
        self.sink.append(rates)
        return w


def system_probe(pids: Sequence[int] = ()) -> Callable[[], Mapping[str, float]]:
    """Cumulative counters a drift detector could use: /proc/stat, PSI, context switches."""
    import psutil

    procs = [psutil.Process(p) for p in pids]

    def sample() -> dict[str, float]:
        out: dict[str, float] = {}
        try:
            with open("/proc/stat", "rb") as f:
                t = [int(x) for x in f.readline().split()[1:9]]
            out["busy_ticks"] = float(sum(t) - t[3] - t[4] - t[7])
            out["steal_ticks"] = float(t[7])
        except (OSError, ValueError, IndexError):
            pass
        for res in ("cpu", "memory"):
            try:
                with open(f"/proc/pressure/{res}") as f:
                    out[f"psi_{res}_us"] = float(f.readline().rsplit("total=", 1)[1])
            except (OSError, ValueError, IndexError):
                pass
        st = psutil.cpu_stats()
        out["ctx_switches"] = float(st.ctx_switches)
        out["interrupts"] = float(st.interrupts)
        for i, p in enumerate(procs):
            try:
                out[f"side{i}_invol_ctx"] = float(p.num_ctx_switches().involuntary)
            except psutil.Error:
                pass
        return out

    return sample

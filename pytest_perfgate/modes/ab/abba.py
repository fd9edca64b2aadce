"""The A/B mode's turns: ABBA pairs of windows, the load-change rule, the sequential looks.

Pure over what feeds it: the controller feeds live side processes, the verdict-quality
study and the simulation feed recorded turns (docs/design.md §3).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from pytest_perfgate.core.evidence import paired_evidence
from pytest_perfgate.core.gate import Outcome, Rule, Verdict, sequential_decide
from pytest_perfgate.core.measure import Measurement, Meter
from pytest_perfgate.core.metric import ENV_STEPS, Metric
from pytest_perfgate.core.progress import NULL_PROGRESS, Progress
from pytest_perfgate.core.sequential import Design
from pytest_perfgate.core.window import RawWindow, Window, WindowSource

LOAD_CHANGE_SHARE = 0.5  # of --perfgate-load-limit: a pair whose turns' outside load differ
# by more is left out and re-measured (docs/ab.md, docs/design.md §3)
REMEASURE_SHARE = 0.25  # of the maximum turns: re-measured pairs allowed per benchmark


@dataclass(frozen=True)
class Looks:
    """What the sequential looks decided, over which turn pairs."""

    verdict: Verdict
    design: Design
    taken: tuple[int, ...]  # kept turns at each look taken
    pairs: tuple[tuple[Window, Window], ...]  # every pair measured, in order, kept or not
    kept: tuple[int, ...]  # indices into ``pairs`` of those the paired test used
    left_out: tuple[str, ...] = ()  # why each pair not kept was left out (load_changed)

    @property
    def excluded(self) -> int:
        return len(self.pairs) - len(self.kept)

    def summary(self) -> dict[str, object]:
        """What the run's JSON report keeps of the design (result extra "ab_sequential"),
        with the pairs left out counted by their reason."""
        return {"turns": len(self.kept), "measured": len(self.pairs),
                "excluded_pairs": self.excluded, "looks_taken": len(self.taken),
                "looks": list(self.design.looks), "max_turns": self.design.max_turns,
                "resolvable_drop": self.verdict.resolvable,
                "left_out": _counted(self.left_out)}


def _counted(reasons: tuple[str, ...] | list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for reason in reasons:
        out[reason] = out.get(reason, 0) + 1
    return out


@dataclass(frozen=True)
class Paired:
    """A sequential A/B measurement: both sides' kept turns, and what the looks decided."""

    base: Measurement
    head: Measurement
    looks: Looks

    @property
    def verdict(self) -> Verdict:
        return self.looks.verdict


LOAD_CHANGED = "the outside load changed between its two turns"
GPU_ONE_SIDE = "the GPU guard spoiled one of its turns only"


def load_changed(b: Window, h: Window, limit: float) -> str | None:
    """Why a turn pair is left out of the paired test, or None when it is kept.

    The stated rule: the outside load the /proc/stat guard saw differs between its two turns
    by more than ``limit`` busy cores, or the GPU guard spoiled one of its turns and not the
    other (another process's context on the GPU, throttling; gpu/guard.py). A load present in
    both turns slows both alike and the ratio cancels it; one switching on during one turn
    only would read as a change of the code."""
    if (b.gpu_spoiled is None) != (h.gpu_spoiled is None):
        side, why = ("base", b.gpu_spoiled) if b.gpu_spoiled is not None else \
            ("head", h.gpu_spoiled)
        return f"{GPU_ONE_SIDE} ({side}: {why})"
    if b.other_load is None or h.other_load is None:
        return None
    return LOAD_CHANGED if abs(b.other_load - h.other_load) > limit else None


def turn_pair(base: WindowSource, head: WindowSource, i: int, turn_s: float, meter: Meter
              ) -> tuple[Window, Window]:
    """Turn ``i`` in ABBA order (base first on even turns), each window with its load."""
    if i % 2 == 0:
        b = meter.window(base, turn_s)
        h = meter.window(head, turn_s)
    else:
        h = meter.window(head, turn_s)
        b = meter.window(base, turn_s)
    return b, h


PairFeed = Callable[[int], "tuple[Window, Window] | None"]  # turn i, or None: no more


def run_looks(feed: PairFeed, design: Design, rule: Rule, limit: float,
              metric: Metric = ENV_STEPS, progress: Progress = NULL_PROGRESS) -> Looks:
    """Take turn pairs from ``feed`` up to each look of ``design`` and judge; stop at the
    first look that decides. Load-changed pairs (:func:`load_changed` at ``limit`` busy
    cores) are left out and measured again, up to REMEASURE_SHARE of the maximum turns;
    when that runs out (or the feed does) the run is judged where it stands, as its last
    look. Pure over ``feed``: the controller feeds live turns, the study recorded ones."""
    budget = max(2, int(design.max_turns * REMEASURE_SHARE))
    pairs: list[tuple[Window, Window]] = []
    kept: list[int] = []
    left_out: list[str] = []
    taken: list[int] = []
    verdict: Verdict | None = None
    for k, at in enumerate(design.looks):
        while len(kept) < at and len(pairs) - len(kept) <= budget:
            got = feed(len(pairs))
            if got is None:
                break
            pairs.append(got)
            for side, w in zip(("base", "head"), got, strict=True):
                progress.window_done(len(kept) + 1, design.max_turns, w.steps_per_s, side)
            why = load_changed(*got, limit)
            if why is None:
                kept.append(len(pairs) - 1)
            else:
                left_out.append(why)
        n = len(kept)
        cut = n < at
        final = cut or k == len(design.looks) - 1
        if taken and taken[-1] == n:
            taken.pop()  # no new turns since the last look: that look becomes the last
        taken.append(n)
        if n < 2:
            verdict = _too_few(n, left_out, metric)
            break
        ev = dataclasses.replace(paired_evidence([pairs[i][0].s_per_msteps for i in kept],
                                                 [pairs[i][1].s_per_msteps for i in kept]),
                                 look=len(taken), looks=len(design.looks),
                                 max_turns=design.max_turns, excluded=len(pairs) - n,
                                 cut_short=cut)
        verdict = sequential_decide(ev, rule, design.level(taken, final), final, metric)
        if verdict is not None:
            break
    assert verdict is not None  # the last look always decides
    return Looks(verdict, design, tuple(taken), tuple(pairs), tuple(kept), tuple(left_out))


def measure_sequential(base: WindowSource, head: WindowSource, meter: Meter, design: Design,
                       turn_s: float, rule: Rule, metric: Metric = ENV_STEPS) -> Paired:
    """Warm both sides up, then :func:`run_looks` over live ABBA turns; the load-change
    limit is half the meter's --perfgate-load-limit (LOAD_CHANGE_SHARE)."""
    warm_b = meter.warm_up(base, "base")
    load_b = meter.warmup_load
    warm_h = meter.warm_up(head, "head")
    load_h = meter.warmup_load
    looks = run_looks(lambda i: turn_pair(base, head, i, turn_s, meter), design, rule,
                      meter.config.load_limit * LOAD_CHANGE_SHARE, metric, meter.progress)
    use = looks.kept if len(looks.kept) >= 2 else range(len(looks.pairs))  # too few: all
    return Paired(Measurement(tuple(looks.pairs[i][0] for i in use), *warm_b,
                              warmup_load=load_b),
                  Measurement(tuple(looks.pairs[i][1] for i in use), *warm_h,
                              warmup_load=load_h), looks)


def _too_few(n: int, left_out: list[str], metric: Metric) -> Verdict:
    """Too few pairs kept to judge: says why the others were left out."""
    counts = _counted(left_out)
    load = counts.pop(LOAD_CHANGED, 0)
    if not counts:
        why = (f"the outside load changed between the two turns of {load} pairs, so their "
               "ratios measure the other work on this machine, not the code")
    else:
        parts = [f"{k} in {v} pair(s)" for k, v in counts.items()]
        if load:
            parts.insert(0, f"the outside load changed between the two turns of {load} "
                         "pair(s)")
        why = (f"{len(left_out)} pair(s) were left out ({'; '.join(parts)}), so their ratios "
               "measure the other work on this machine or its GPU, not the code")
    return Verdict(Outcome.INCONCLUSIVE, metric.say(
        f"only {n} turn pair(s) kept: {why}; run again when the machine is quiet"))


def measure_pair(base: WindowSource, head: WindowSource, meter: Meter, turns: int,
                 turn_s: float) -> tuple[Measurement, Measurement]:
    """Warm both sides up by the usual stability rule, then interleave ``turns`` turns."""
    warm_b = meter.warm_up(base, "base")
    warm_h = meter.warm_up(head, "head")
    b, h = interleave(base, head, turns, turn_s, meter.progress)
    return (Measurement(tuple(Window.of(w) for w in b), *warm_b),
            Measurement(tuple(Window.of(w) for w in h), *warm_h))


def interleave(base: WindowSource, head: WindowSource, turns: int, turn_s: float,
               progress: Progress = NULL_PROGRESS) -> tuple[list[RawWindow], list[RawWindow]]:
    """ABBA turns: base, head, head, base, ... so a linear drift cancels within each pair."""
    b: list[RawWindow] = []
    h: list[RawWindow] = []
    for i in range(turns):
        if i % 2 == 0:
            b.append(base.run_window(turn_s))
            h.append(head.run_window(turn_s))
        else:
            h.append(head.run_window(turn_s))
            b.append(base.run_window(turn_s))
        for side, w in (("base", b[-1]), ("head", h[-1])):
            progress.window_done(i + 1, turns, Window.of(w).steps_per_s, side)
    return b, h

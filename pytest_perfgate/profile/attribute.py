"""The difference of two profiles, per function and unit of work (an env-step, a call): what
grew, by how much, and how much of the drop that explains.

Each side's turns give sample counts per stack and the units of work the turn made (its
"steps" below); a function's time per step is the samples whose stack holds it (once,
however deep it recurses) over the side's steps, at ``1000 / rate`` ms per sample. Summed
over the workload's processes it is CPU time, like a phase's cores. The interval is a t
interval over the turn pairs' differences, as the turns were interleaved (base and head in
the same seconds, so the machine's drift cancels within a pair).

Which functions are named: the call paths where the growth concentrates are found by
descending into every child that grew by a named share; each is charged to the nearest
function above it (or itself) that the change touched (:mod:`.changed`), and where the
time sits below that function (numpy's kernel, a MuJoCo solver) it is shown as ``in``.
Without a change that explains the growth (a dependency, a data size), the nearest frame
of the measured tree above it is named, marked unchanged.

Two figures per function named: its total (every sample under it) and its self (the
samples whose deepest function named it is: its own lines and the callees not named on a
line of their own). The selves split the samples under the functions named, so a caller's
total is its self plus what its named callees hold below it, and the shares, of self, add
up to the share the functions explain together.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_perfgate.profile import text as wording
from pytest_perfgate.profile.stacks import NATIVE, NO_FRAME, TOP, UNKNOWN, Frame, Stack

MIN_SHARE = 0.05  # of the sampled growth: smaller differences are not named
NOISE_FLOOR = 0.01  # of the base's time per step: the growth below which MIN_SHARE of it
# would name the turns' noise


@dataclass(frozen=True)
class Turn:
    """One profiled turn of one side."""

    stacks: Counter[Stack]
    steps: int
    wall_s: float


@dataclass(frozen=True)
class Named:
    """A function that grew (or shrank) between base and head, per step."""

    frame: Frame
    base_ms: float
    head_ms: float
    ci: tuple[float, float] | None  # of head - base, ms per step
    share: float  # self_ms of the sampled growth (negative for one that shrank)
    changed: bool | None  # its lines differ between base and head (None: unknown)
    inside: Frame | None = None  # the frame below it where most of its growth sits
    # head - base of its self (the module's docstring), ms per step; base_ms and head_ms are
    # its total, with all it calls
    self_ms: float = 0.0

    @property
    def delta_ms(self) -> float:
        return self.head_ms - self.base_ms

    def to_json(self) -> dict[str, Any]:
        return {"function": self.frame.name, "where": str(self.frame).split(" (", 1)[-1][:-1]
                if self.frame.name != NO_FRAME else "", "ours": self.frame.ours,
                "base_ms_per_step": self.base_ms, "head_ms_per_step": self.head_ms,
                "delta_ms_per_step": self.delta_ms, "self_delta_ms_per_step": self.self_ms,
                "ci": list(self.ci) if self.ci else None,
                "share": self.share, "changed": self.changed,
                "inside": str(self.inside) if self.inside else None}


@dataclass(frozen=True)
class Attribution:
    """Both sides' profiles subtracted: the functions named and what is left unexplained."""

    pairs: int
    base_ms: float  # sampled time per step, all frames
    head_ms: float
    base_wall_ms: float  # wall time per step in the profiled turns
    head_wall_ms: float
    grew: tuple[Named, ...]
    shrank: tuple[Named, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def growth_ms(self) -> float:
        return self.head_ms - self.base_ms

    @property
    def explained(self) -> float:
        """The share of the sampled growth the named functions' selves hold (0-1): the sum
        of their shares."""
        return max(0.0, min(1.0, sum(n.share for n in self.grew)))

    def to_json(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "base_ms_per_step": self.base_ms,
                "head_ms_per_step": self.head_ms, "base_wall_ms_per_step": self.base_wall_ms,
                "head_wall_ms_per_step": self.head_wall_ms, "explained": self.explained,
                "grew": [n.to_json() for n in self.grew],
                "shrank": [n.to_json() for n in self.shrank], "notes": list(self.notes)}


Changed = Callable[[Frame], "bool | None"]


def _per_step(turns: Sequence[Turn], rate: float) -> tuple[dict[Frame, float], float]:
    """Inclusive ms per step of every function, and of all samples, pooled over turns."""
    ms = 1000.0 / rate
    steps = sum(t.steps for t in turns) or 1
    inc: dict[Frame, float] = defaultdict(float)
    total = 0.0
    for t in turns:
        for stack, n in t.stacks.items():
            total += n
            for f in set(stack):
                inc[f] += n
    return {f: v * ms / steps for f, v in inc.items()}, total * ms / steps


def _nodes(turns: Sequence[Turn], rate: float) -> dict[Stack, float]:
    """Inclusive ms per step of every call path (stack prefix), pooled over turns."""
    ms = 1000.0 / rate
    steps = sum(t.steps for t in turns) or 1
    out: dict[Stack, float] = defaultdict(float)
    for t in turns:
        for stack, n in t.stacks.items():
            for i in range(1, len(stack) + 1):
                out[stack[:i]] += n * ms / steps
    return out


def _interval(pairs: Sequence[tuple[Turn, Turn]], f: Frame, rate: float
              ) -> tuple[float, float] | None:
    """95% t interval of the per-pair difference of ``f``'s ms per step."""
    diffs = []
    for b, h in pairs:
        one = [sum(n for s, n in side.stacks.items() if f in s) * 1000.0 / rate
               / max(side.steps, 1) for side in (b, h)]
        diffs.append(one[1] - one[0])
    return _t_interval(diffs)


def _wall_interval(pairs: Sequence[tuple[Turn, Turn]]) -> tuple[float, float] | None:
    """95% t interval of the per-pair difference of the wall ms per step."""
    return _t_interval([1000.0 * (h.wall_s / max(h.steps, 1) - b.wall_s / max(b.steps, 1))
                        for b, h in pairs])


def _t_interval(diffs: Sequence[float]) -> tuple[float, float] | None:
    if len(diffs) < 2:
        return None
    from scipy import stats  # type: ignore[import-untyped]

    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    half = float(stats.t.ppf(0.975, len(diffs) - 1)) * sd / math.sqrt(len(diffs))
    return mean - half, mean + half


def _sites(delta: dict[Stack, float], floor: float, sign: float
           ) -> list[tuple[Stack, float]]:
    """Call paths where the growth (``sign`` 1) or shrinkage (-1) concentrates: a path
    that moved by ``floor`` or more is a site when none of its children did, or when its
    own part (the move less its moving children's) did."""
    children: dict[Stack, list[Stack]] = defaultdict(list)
    for path in delta:
        if len(path) > 1:
            children[path[:-1]].append(path)
    out: list[tuple[Stack, float]] = []
    for path, d in delta.items():
        if sign * d < floor:
            continue
        kids = [sign * delta[k] for k in children.get(path, []) if sign * delta[k] >= floor]
        own = sign * d - sum(kids)
        if not kids or own >= floor:
            out.append((path, own if kids else sign * d))
    return out


def attribute(pairs: Sequence[tuple[Turn, Turn]], rate: float,
              changed: Changed | None = None, top: int = TOP, per: str = "env-step"
              ) -> Attribution:
    """Subtract the base turns' profile from the head's (see the module's docstring);
    ``per``: the unit of work a step is, as the notes say it ("env-step", "call")."""
    base_t, head_t = [p[0] for p in pairs], [p[1] for p in pairs]
    inc_b, tot_b = _per_step(base_t, rate)
    inc_h, tot_h = _per_step(head_t, rate)
    node_b, node_h = _nodes(base_t, rate), _nodes(head_t, rate)
    paths = set(node_b) | set(node_h)
    delta = {p: node_h.get(p, 0.0) - node_b.get(p, 0.0) for p in paths}
    growth = tot_h - tot_b
    # a growth the turns' noise hid (or turned negative) still names what grew, above a
    # floor tied to the step's own time
    floor = MIN_SHARE * max(growth, NOISE_FLOOR * tot_b, 1e-12)
    as_head = {f: f for t in head_t for stack in t.stacks for f in stack}  # head's lines

    def is_changed(f: Frame) -> bool | None:
        return None if changed is None else changed(as_head.get(f, f))

    blind = 0.0  # growth in sites with nothing to name: no symbol, no Python frame
    owner: dict[Frame, list[tuple[Stack, float]]] = defaultdict(list)  # signed amounts
    for sign in (1.0, -1.0):
        for path, amount in _sites(delta, floor, sign):
            mine = next((f for f in reversed(path) if f.ours and is_changed(f)), None)
            if mine is None:  # nothing changed above it: the nearest frame of ours, if any
                mine = next((f for f in reversed(path) if f.ours and not f.native), path[-1])
            if mine.name in (NO_FRAME, UNKNOWN):
                blind += amount if sign > 0 else 0.0
                continue
            owner[mine].append((path, sign * amount))
    # a function's growth and shrinkage at different call paths net out: it is listed once,
    # by what it did in all (work moved from one of its callees to another is no growth)
    net = {f: sum(a for _, a in found) for f, found in owner.items()}
    whole = max(growth, sum(a for a in net.values() if a >= floor), 1e-12)

    def named(sign: float) -> list[Named]:
        out = []
        for f, found in owner.items():
            if sign * net[f] < floor or sign * (inc_h.get(f, 0.0) - inc_b.get(f, 0.0)) <= 0:
                continue  # a function whose whole time moved the other way is not named
            path, amount = max(found, key=lambda x: sign * x[1])
            inside = path[-1] if path[-1] != f else _library(path, sign * amount, delta, sign)
            out.append(Named(as_head.get(f, f), inc_b.get(f, 0.0), inc_h.get(f, 0.0),
                             _interval(pairs, f, rate), net[f] / whole, is_changed(f),
                             inside, net[f]))
        out.sort(key=lambda n: (_rank(n, sign), -abs(n.share)))
        return out[:top]

    grew = named(1.0)
    shrank = [n for n in named(-1.0) if n.changed] if changed else []
    own = _selves(base_t, head_t, {n.frame for n in (*grew, *shrank)}, rate)
    whole = max(growth, sum(max(own[n.frame], 0.0) for n in grew), 1e-12)
    grew, shrank = ([replace(n, share=own[n.frame] / whole, self_ms=own[n.frame]) for n in ns]
                    for ns in (grew, shrank))
    steps_b = sum(t.steps for t in base_t) or 1
    steps_h = sum(t.steps for t in head_t) or 1
    wall_b = 1000.0 * sum(t.wall_s for t in base_t) / steps_b
    wall_h = 1000.0 * sum(t.wall_s for t in head_t) / steps_h
    notes = wording.notes([n.changed for n in grew], growth, wall_h - wall_b,
                          _wall_interval(pairs), blind if blind >= floor else 0.0,
                          wording.short(per))
    return Attribution(len(pairs), tot_b, tot_h, wall_b, wall_h, tuple(grew), tuple(shrank),
                       tuple(notes))


def _selves(base: Sequence[Turn], head: Sequence[Turn], named: set[Frame], rate: float
            ) -> dict[Frame, float]:
    """Each named function's self, head - base in ms per step: the samples whose deepest
    named frame it is. The selves split the samples under the functions named, so they
    add up where the call paths that chose the functions (:func:`_sites`) need not."""
    def charged(turns: Sequence[Turn]) -> dict[Frame, float]:
        ms = 1000.0 / rate / (sum(t.steps for t in turns) or 1)
        out: dict[Frame, float] = defaultdict(float)
        for t in turns:
            for stack, n in t.stacks.items():
                f = next((g for g in reversed(stack) if g in named), None)
                if f is not None:
                    out[f] += n * ms
        return out

    b, h = charged(base), charged(head)
    return {f: h.get(f, 0.0) - b.get(f, 0.0) for f in named}


def _library(path: Stack, amount: float, delta: dict[Stack, float], sign: float
             ) -> Frame | None:
    """The native library under ``path`` that holds most of its growth, spread over many
    small functions (a MuJoCo step's solver, collision, dynamics), or None."""
    by_lib: dict[str, float] = defaultdict(float)
    for p, d in delta.items():
        if len(p) == len(path) + 1 and p[:-1] == path and p[-1].native and sign * d > 0:
            by_lib[p[-1].file] += sign * d
    if not by_lib:
        return None
    lib, held = max(by_lib.items(), key=lambda x: x[1])
    return Frame(NATIVE, lib) if held >= 0.5 * amount else None


def _rank(n: Named, sign: float) -> int:
    """Changed code that moved beyond its interval first, then changed code, then the rest
    that moved beyond its interval: a function the change touched is the likelier cause."""
    sure = n.ci is not None and (n.ci[0] > 0 if sign > 0 else n.ci[1] < 0)
    return (0 if sure else 1) if n.changed else (2 if sure else 3)

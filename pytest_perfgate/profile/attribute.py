"""The difference of two profiles, per function and env-step: what grew, by how much, and
how much of the drop that explains.

Each side's turns give sample counts per stack and the env-steps the turn made; a
function's time per step is the samples whose stack holds it (once, however deep it
recurses) over the side's steps, at ``1000 / rate`` ms per sample. Summed over the
workload's processes it is CPU time, like a phase's cores. The interval is a t interval
over the turn pairs' differences, as the turns were interleaved (base and head in the same
seconds, so the machine's drift cancels within a pair).

Which functions are named: the call paths where the growth concentrates are found by
descending into every child that grew by a named share; each is charged to the nearest
function above it (or itself) that the change touched (:mod:`.changed`), and where the
time sits below that function (numpy's kernel, a MuJoCo solver) it is shown as ``in``.
Without a change that explains the growth (a dependency, a data size), the nearest frame
of the measured tree above it is named, marked unchanged.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_perfgate.profile.stacks import NATIVE, NO_FRAME, UNKNOWN, Frame, Stack

MIN_SHARE = 0.05  # of the sampled growth: smaller differences are not named
NOISE_FLOOR = 0.01  # of the base's time per step: the growth below which MIN_SHARE of it
# would name the turns' noise
TOP = 5


@dataclass(frozen=True)
class Turn:
    """One profiled turn of one side."""

    stacks: Counter[Stack]
    steps: int
    wall_s: float


@dataclass(frozen=True)
class Named:
    """A function that grew (or shrank) between base and head, per env-step."""

    frame: Frame
    base_ms: float
    head_ms: float
    ci: tuple[float, float] | None  # of head - base, ms per step
    share: float  # of the sampled growth (negative for one that shrank)
    changed: bool | None  # its lines differ between base and head (None: unknown)
    inside: Frame | None = None  # the frame below it where most of its growth sits

    @property
    def delta_ms(self) -> float:
        return self.head_ms - self.base_ms

    def to_json(self) -> dict[str, Any]:
        return {"function": self.frame.name, "where": str(self.frame).split(" (", 1)[-1][:-1]
                if self.frame.name != NO_FRAME else "", "ours": self.frame.ours,
                "base_ms_per_step": self.base_ms, "head_ms_per_step": self.head_ms,
                "delta_ms_per_step": self.delta_ms, "ci": list(self.ci) if self.ci else None,
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
        """The share of the sampled growth the named functions account for (0-1)."""
        return min(1.0, sum(max(n.share, 0.0) for n in self.grew))

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
              changed: Changed | None = None, top: int = TOP) -> Attribution:
    """Subtract the base turns' profile from the head's (see the module's docstring)."""
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
                             inside))
        out.sort(key=lambda n: (_rank(n, sign), -abs(n.share)))
        return out[:top]

    grew = named(1.0)
    shrank = [n for n in named(-1.0) if n.changed] if changed else []
    steps_b = sum(t.steps for t in base_t) or 1
    steps_h = sum(t.steps for t in head_t) or 1
    wall_b = 1000.0 * sum(t.wall_s for t in base_t) / steps_b
    wall_h = 1000.0 * sum(t.wall_s for t in head_t) / steps_h
    notes = _notes(grew, growth, wall_h - wall_b, _wall_interval(pairs),
                   blind if blind >= floor else 0.0)
    return Attribution(len(pairs), tot_b, tot_h, wall_b, wall_h, tuple(grew), tuple(shrank),
                       tuple(notes))


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


def _notes(grew: list[Named], growth: float, wall_drop: float,
           wall_ci: tuple[float, float] | None, blind: float) -> list[str]:
    """What the named functions do not explain, said as what it is."""
    notes = []
    if wall_ci is not None and wall_ci[0] <= 0:
        notes.append(f"these turns did not show the drop beyond their noise (each step "
                     f"{wall_drop:+.3g} ms [{wall_ci[0]:+.3g}, {wall_ci[1]:+.3g}] in wall "
                     "time, the sampler slowing both sides): a function is evidence as far "
                     "as its own interval excludes zero")
    elif wall_drop > 0 and growth < 0.5 * wall_drop:
        notes.append(f"the sampled time changed by {growth:+.3g} ms/step while each step "
                     f"took {wall_drop:.3g} ms longer: most of the drop is waiting (a lock, "
                     "the GPU, I/O, another process), which a sampling profiler does not see "
                     "as a function's time")
    if blind:
        notes.append(f"{blind:.3g} ms/step of the growth is in native code without symbols "
                     "or in processes with no Python frame: no function can be named there")
    if grew and all(n.changed is False for n in grew):
        notes.append("none of the functions named changed between base and head: the "
                     "growth is in code the change reaches indirectly (more calls, larger "
                     "data, a dependency)")
    return notes


def where_time_goes(stacks: Counter[Stack], steps: int, rate: float, top: int = TOP
                    ) -> list[dict[str, Any]]:
    """One profile alone: each sample charged to the deepest function of the measured tree
    on its stack (else its leaf), time per env-step, the biggest first, with the frame below
    it that holds most of its time."""
    ms = 1000.0 / rate / max(steps, 1)
    total = sum(stacks.values()) or 1
    charged: dict[Frame, float] = defaultdict(float)
    below: dict[Frame, Counter[Frame]] = defaultdict(Counter)
    for stack, n in stacks.items():
        mine = next((f for f in reversed(stack) if f.ours and not f.native), stack[-1])
        charged[mine] += n
        if stack[-1] != mine:
            below[mine][stack[-1]] += n
    out = []
    for f, count in sorted(charged.items(), key=lambda x: -x[1])[:top]:
        inside = next((g for g, _ in below[f].most_common()
                       if g.name not in (UNKNOWN, NO_FRAME)), None)
        out.append({"function": f.name, "where": str(f).split(" (", 1)[-1][:-1]
                    if f.name != NO_FRAME else "", "ms_per_step": count * ms,
                    "share": count / total, "inside": str(inside) if inside else None})
    return out

"""The bisection's search: which commit to probe next, skips, several steps, inconclusive
probes, all without timing (a probe is injected: docs/bisect.md).

Every probe of one search compares a candidate with the same base, the known-good end:
"slower than the known-good end by more than the threshold" is monotone along the history
when the slowdown is one step, so the binary search over it is sound, and the base stays
one revision for the whole search. Once a step is found, the search starts again with that
step's commit as the known-good end, for steps further on (a slowdown spread over several
commits). Each step found is then measured against its own neighbour, the last good
commit, so the ratio it reports is that commit's own step, not the accumulated drift.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class Status(enum.Enum):
    BAD = "slower"  # slower than the base by more than the threshold (REGRESSION)
    GOOD = "not slower"  # OK or IMPROVEMENT
    INCONCLUSIVE = "inconclusive"  # the noise hid the threshold (or warm-up never settled)
    SKIP = "skipped"  # nothing to judge: the test is missing, the build or a side failed


@dataclass(frozen=True)
class Reading:
    """One benchmark's verdict in one probe, as the A/B mode gave it."""

    outcome: str  # the verdict: "OK", "REGRESSION", "INCONCLUSIVE", ...
    ratio: float | None = None  # throughput candidate / base
    ci: tuple[float, float] | None = None
    message: str = ""
    profile: Mapping[str, Any] | None = None  # why it got slower (A/B after a REGRESSION)


@dataclass(frozen=True)
class Probe:
    """One interleaved A/B comparison: ``commit`` against ``base`` over ``turns`` turns."""

    commit: str
    base: str
    turns: int
    readings: Mapping[str, Reading] = field(default_factory=dict)
    failure: str | None = None  # why nothing could be judged (the probe is then skipped)
    seconds: float = 0.0
    command: str = ""  # how to run this comparison by hand

    def status(self, tracked: Sequence[str] | None = None,
               levels: Mapping[str, float] | None = None) -> Status:
        """Slower when any tracked benchmark regressed; not slower when all are OK or
        improved, or INCONCLUSIVE with an interval wholly above that benchmark's ``levels``
        entry (halfway to the slower end: :func:`halfway`); skipped when a tracked
        benchmark has no verdict; else inconclusive."""
        if self.failure is not None:
            return Status.SKIP
        names = list(self.readings) if tracked is None else list(tracked)
        got = [(n, self.readings.get(n)) for n in names]
        if not got or any(r is None or r.outcome == "NO BASELINE" for _, r in got):
            return Status.SKIP
        outcomes = {r.outcome for _, r in got if r is not None}
        if "REGRESSION" in outcomes:
            return Status.BAD
        if all(r is not None and (r.outcome in ("OK", "IMPROVEMENT") or above(r, n, levels))
               for n, r in got):
            return Status.GOOD
        return Status.INCONCLUSIVE

    def worst(self, tracked: Sequence[str] | None = None) -> tuple[str, Reading] | None:
        """The tracked benchmark that lost the most throughput here, with its reading."""
        names = list(self.readings) if tracked is None else list(tracked)
        have = [(n, self.readings[n]) for n in names if n in self.readings]
        have.sort(key=lambda nr: nr[1].ratio if nr[1].ratio is not None else math.inf)
        return have[0] if have else None


def above(r: Reading, name: str, levels: Mapping[str, float] | None) -> bool:
    """An INCONCLUSIVE reading whose interval lies wholly above ``levels[name]``."""
    level = (levels or {}).get(name)
    return (r.outcome == "INCONCLUSIVE" and level is not None and r.ci is not None
            and r.ci[0] > level)


def halfway(end: Probe, tracked: Sequence[str], threshold: float) -> dict[str, float]:
    """Per tracked benchmark, the ratio halfway (geometrically) between the base's level
    and the slower end's (``end``: the slower end against the base), never closer to 1
    than the threshold: a candidate whose interval lies above it is nearer the base's
    level than the step searched for can explain (docs/bisect.md)."""
    out = {}
    for n in tracked:
        r = end.readings.get(n)
        if r is not None and r.ratio is not None and 0 < r.ratio < 1:
            out[n] = min(1 - threshold, math.sqrt(r.ratio))
    return out


class ProbeFn(Protocol):
    def __call__(self, commit: str, base: str, turns: int) -> Probe: ...


@dataclass(frozen=True)
class Step:
    """A step the search found: ``first_bad`` is slower than ``last_good`` by more than the
    threshold. ``between`` holds the commits between them that could not be judged
    (skipped or inconclusive): the step is in one of ``candidates``."""

    last_good: str
    first_bad: str
    between: tuple[str, ...]
    probe: Probe  # first_bad against last_good: the step's own ratio
    tracked: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return not self.between

    @property
    def candidates(self) -> tuple[str, ...]:
        return (*self.between, self.first_bad)

    @property
    def own_status(self) -> Status:
        return self.probe.status(self.tracked)


class Stop(enum.Enum):
    DONE = "done"
    NO_DIFFERENCE = "no difference"
    ENDPOINT_INCONCLUSIVE = "endpoint inconclusive"
    ENDPOINT_UNMEASURED = "endpoint unmeasured"
    REST_UNKNOWN = "rest unknown"
    PROBE_LIMIT = "probe limit"


@dataclass
class BisectResult:
    good: str
    bad: str
    commits: tuple[str, ...]  # the first-parent commits after GOOD up to BAD, oldest first
    tracked: tuple[str, ...] = ()
    steps: list[Step] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)  # in the order they ran
    skipped: dict[str, str] = field(default_factory=dict)  # commit -> why
    unknown: dict[str, Probe] = field(default_factory=dict)  # commit -> its last probe
    stop: Stop = Stop.DONE
    endpoint: Probe | None = None  # BAD against GOOD
    contradicted: Probe | None = None  # a first BAD-vs-GOOD probe that said "not slower"
    rest: Probe | None = None  # BAD against the last step, when it stopped the search


def estimate_probes(n_commits: int) -> int:
    """Probes for one step among ``n_commits`` candidates: BAD against GOOD, a binary
    search over the rest, the step against its neighbour, BAD against the step."""
    search = math.ceil(math.log2(n_commits)) if n_commits > 1 else 0
    return 1 + search + 1 + (1 if n_commits > 1 else 0)


class Bisector:
    """Binary search for the commits that cost throughput, probe by probe.

    ``probe`` runs one comparison; ``retries`` reruns an inconclusive one with twice the
    turns each time before the commit counts as unknown (and is stepped over like a skipped
    one); ``on_probe(index, commit, base, turns, probe, status)`` is told before (probe and
    status None) and after each probe, for progress. ``max_probes`` bounds the whole run.
    With ``threshold``, an INCONCLUSIVE candidate whose interval lies above the level
    halfway to BAD's (:func:`halfway`) counts as not slower.
    """

    def __init__(self, good: str, bad: str, commits: Sequence[str], probe: ProbeFn,
                 turns: int, retries: int = 2, max_probes: int = 64,
                 on_probe: Callable[[int, str, str, int, Probe | None, Status | None], None]
                 | None = None, threshold: float | None = None) -> None:
        if not commits or commits[-1] != bad:
            raise ValueError("commits must end with BAD")
        self.good = good
        self.bad = bad
        self.commits = tuple(commits)
        self.probe = probe
        self.turns = turns
        self.retries = retries
        self.max_probes = max_probes
        self.on_probe = on_probe or (lambda *a: None)
        self.threshold = threshold
        self.result = BisectResult(good, bad, self.commits)
        self._done: dict[tuple[str, str], Probe] = {}

    def run(self) -> BisectResult:
        r = self.result
        try:
            self._run()
        except _ProbeLimit:
            r.stop = Stop.PROBE_LIMIT
        return r

    def _run(self) -> None:
        r = self.result
        first = self._judge(self.bad, self.good, tracked=None)
        status = first.status()
        if status is Status.GOOD:
            # The user says BAD is slower and the probe says it is not: a neighbour's load
            # can do that (one probe read a 15% drop as IMPROVEMENT). Measure once more,
            # with twice the turns, before saying there is nothing to bisect.
            r.contradicted = first
            first = self._judge(self.bad, self.good, tracked=None, again=2 * self.turns)
            status = first.status()
        r.endpoint = first
        if status is not Status.BAD:
            r.stop = {Status.GOOD: Stop.NO_DIFFERENCE, Status.INCONCLUSIVE:
                      Stop.ENDPOINT_INCONCLUSIVE}.get(status, Stop.ENDPOINT_UNMEASURED)
            return
        r.tracked = tuple(n for n, rd in first.readings.items() if rd.outcome == "REGRESSION")
        base_i = -1  # index of the known-good end in commits; -1 is GOOD itself
        while True:
            step = self._search(base_i)
            r.steps.append(step)
            k = self.commits.index(step.first_bad)
            if k == len(self.commits) - 1:
                return
            rest = self._judge(self.bad, step.first_bad)
            status = rest.status(r.tracked)
            if status is Status.GOOD:
                return
            if status is not Status.BAD:
                r.rest = rest
                r.stop = Stop.REST_UNKNOWN
                return
            base_i = k

    def _name(self, i: int) -> str:
        return self.good if i < 0 else self.commits[i]

    def _search(self, base_i: int) -> Step:
        """The first commit after ``base_i`` slower than it (BAD is known to be)."""
        base = self._name(base_i)
        lo, hi = base_i, len(self.commits) - 1
        out: set[int] = set()  # skipped or unknown: stepped over
        end = self._done[(self.bad, base)]
        levels = ({} if self.threshold is None else
                  halfway(end, self.result.tracked, self.threshold))
        while True:
            left = [i for i in range(lo + 1, hi) if i not in out]
            if not left:
                break
            mid = (lo + hi) / 2
            i = min(left, key=lambda j: (abs(j - mid), j))
            p = self._judge(self.commits[i], base, levels=levels)
            status = p.status(self.result.tracked, levels)
            if status is Status.BAD:
                hi = i
            elif status is Status.GOOD:
                lo = i
            else:
                out.add(i)
                if status is Status.SKIP:
                    self.result.skipped[self.commits[i]] = p.failure or _why_skipped(
                        p, self.result.tracked)
                else:
                    self.result.unknown[self.commits[i]] = p
        last_good, first_bad = self._name(lo), self.commits[hi]
        own = self._judge(first_bad, last_good)
        return Step(last_good, first_bad, tuple(self.commits[lo + 1:hi]), own,
                    self.result.tracked)

    def _judge(self, commit: str, base: str, tracked: Sequence[str] | None = (),
               levels: Mapping[str, float] | None = None, again: int = 0) -> Probe:
        """Probe ``commit`` against ``base`` (once: repeated pairs reuse the answer, unless
        ``again`` asks for a new measurement over that many turns); an inconclusive
        answer is measured again with twice the turns, ``retries`` times."""
        if (commit, base) in self._done and not again:
            return self._done[(commit, base)]
        names = self.result.tracked if tracked == () else tracked
        turns = again or self.turns
        for attempt in range(self.retries + 1):
            if len(self.result.probes) >= self.max_probes:
                raise _ProbeLimit
            n = len(self.result.probes) + 1
            self.on_probe(n, commit, base, turns, None, None)
            p = self.probe(commit, base, turns)
            self.result.probes.append(p)
            status = p.status(names, levels)
            self.on_probe(n, commit, base, turns, p, status)
            if status is not Status.INCONCLUSIVE or attempt == self.retries:
                break
            turns *= 2
        self._done[(commit, base)] = p
        return p


class _ProbeLimit(Exception):
    pass


def _why_skipped(p: Probe, tracked: Sequence[str]) -> str:
    missing = [n for n in tracked if n not in p.readings]
    if missing:
        return f"no verdict for {', '.join(missing)} (the test does not exist here?)"
    return "; ".join(f"{n}: {r.outcome}" for n, r in p.readings.items())

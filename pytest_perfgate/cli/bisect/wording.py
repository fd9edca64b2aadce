"""What ``perfgate bisect`` prints: the cost estimate, progress, and the result."""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence

from pytest_perfgate.cli.bisect.search import BisectResult, Probe, Reading, Status, Step, Stop

# Start-up (imports, collection) and warm-up of both sides, per benchmark: a guess until
# the first probe has been timed.
OVERHEAD_GUESS_S = 10.0

EXIT_FOUND = 0  # every step found was named (or narrowed to commits that could not be judged)
EXIT_NOT_FOUND = 1  # GOOD and BAD do not differ, or a verdict stayed inconclusive
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM (2 is argparse's usage error)
EXIT_INFRA = 3  # BAD or GOOD could not be measured at all


def duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    return f"{m} min {s:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def probe_guess_s(turns: int, turn_s: float) -> float:
    """Seconds per probe and benchmark: both sides' turns, plus start-up and warm-up."""
    return 2 * turns * turn_s + OVERHEAD_GUESS_S


def estimate(n_commits: int, probes: int, per_probe_s: float, measured: bool) -> str:
    how = "measured by the first probe" if measured else (
        "a guess per benchmark: 2 sides x turns x turn time, plus ~"
        f"{OVERHEAD_GUESS_S:g} s of start-up and warm-up")
    search = math.ceil(math.log2(n_commits)) if n_commits > 1 else 0
    return (f"estimate: ~{probes} probes (BAD against GOOD, {search} to halve "
            f"{n_commits} commit{'s' if n_commits != 1 else ''}, then the step against "
            f"its neighbour and BAD against the step) x ~{duration(per_probe_s)} per probe "
            f"({how}) = ~{duration(probes * per_probe_s)} for one step; each further step, "
            "skipped commit or inconclusive probe adds probes")


def short(commit: str, labels: Mapping[str, str]) -> str:
    label = labels.get(commit)
    if not label or commit.startswith(label):  # a hash given as the revision
        return commit[:10]
    return f"{label} ({commit[:10]})"


def reading_text(r: Reading) -> str:
    if r.ratio is None:
        return f"{r.outcome} ({r.message})" if r.message else r.outcome
    ci = f" [{r.ci[0]:.3f}-{r.ci[1]:.3f}]" if r.ci else ""
    return f"throughput ratio {r.ratio:.3f}{ci}, {r.outcome}"


def probe_line(n: int, total: int, commit: str, base: str, turns: int, p: Probe | None,
               labels: Mapping[str, str], tracked: tuple[str, ...], elapsed_s: float,
               status: Status | None = None) -> str:
    head = f"[probe {n}/~{max(total, n)}]"
    if p is None:
        return (f"{head} {short(commit, labels)} against {short(base, labels)}, "
                f"{turns} turns per side (elapsed {duration(elapsed_s)})")
    status = status or p.status(tracked or None)
    if status is Status.SKIP:
        what = f"skipped: {p.failure or 'no verdict for the benchmark'}"
    else:
        worst = p.worst(tracked or None)
        what = f"{status.value}" + (f": {worst[0]} {reading_text(worst[1])}" if worst else "")
        if status is Status.GOOD and worst is not None and worst[1].outcome == "INCONCLUSIVE":
            what += (", but its interval lies above the level halfway to the slower end: "
                     "nearer the good level than the step searched for")
    return f"{head}   -> {what} ({duration(p.seconds)})"


def _subject(commit: str, subjects: Mapping[str, str]) -> str:
    s = subjects.get(commit)
    return f' "{s}"' if s else ""


def step_lines(step: Step, labels: Mapping[str, str], subjects: Mapping[str, str],
               threshold: float) -> list[str]:
    p = step.probe
    if step.exact:
        out = [f"first bad commit: {short(step.first_bad, labels)}"
               f"{_subject(step.first_bad, subjects)}"]
    else:
        out = [f"the step is in one of {len(step.candidates)} commits after "
               f"{short(step.last_good, labels)} (those before the last could not be "
               "judged, so bisect does not guess):"]
        out += [f"  {c[:10]}{_subject(c, subjects)}" for c in step.candidates]
    worst = p.worst(step.tracked or None)
    against = "its parent" if step.exact else "the last good commit"
    if p.status(step.tracked or None) is Status.SKIP:
        out.append(f"  its own step against {against} {short(step.last_good, labels)} could "
                   f"not be measured: {p.failure}")
    elif worst is not None:
        out.append(f"  its own step against {against} {short(step.last_good, labels)}: "
                   f"{worst[0]} {reading_text(worst[1])} (threshold {threshold:.0%}, "
                   f"{p.turns} turns)")
        if worst[1].profile:
            from pytest_perfgate.profile.text import lines as profile_lines

            out += [f"  {line}" for line in profile_lines(worst[1].profile)]
        if step.own_status is Status.GOOD:
            out.append("  this commit crossed the threshold against the known-good end, but "
                       "its own step is below it: the slowdown is spread over several "
                       "smaller steps before it")
        elif step.own_status is Status.INCONCLUSIVE:
            out.append("  its own step was inconclusive: the noise hid the threshold")
    out.append(f"  reproduce: {p.command}")
    return out


def summary(r: BisectResult, labels: Mapping[str, str], subjects: Mapping[str, str],
            threshold: float, elapsed_s: float, tests: Sequence[str] = ()) -> list[str]:
    g, b = short(r.good, labels), short(r.bad, labels)
    out: list[str] = []
    e = r.endpoint
    if r.stop is Stop.NO_DIFFERENCE and e is not None:
        worst = e.worst()
        out.append(f"perfgate bisect: BAD {b} is not slower than GOOD {g} by more than "
                   f"the threshold ({threshold:.0%})" + (
                       f": {worst[0]} {reading_text(worst[1])}" if worst else "")
                   + "; nothing to bisect. A smaller step needs a lower --threshold or "
                   "more --turns.")
        if r.contradicted is not None:
            out.append(f"  measured twice, the second time with {e.turns} turns per side "
                       f"(first: {_readings(r.contradicted)}): if BAD is known to be slower, "
                       "another load on this machine may be hiding it (a probe's turn "
                       "pairs whose outside load changed are left out, not the load both "
                       "turns shared); run bisect when the machine is quiet.")
    elif r.stop is Stop.ENDPOINT_INCONCLUSIVE and e is not None:
        worst = e.worst()
        out.append(f"perfgate bisect: whether BAD {b} is slower than GOOD {g} stayed "
                   f"inconclusive after {_attempts(r, e)}" + (
                       f" ({worst[0]}: {worst[1].message})" if worst else "")
                   + "; not bisecting on a guess. Try more --turns, a quieter machine, or "
                   "a larger --threshold.")
    elif r.stop is Stop.ENDPOINT_UNMEASURED and e is not None:
        out.append(f"perfgate bisect: BAD {b} against GOOD {g} could not be measured: "
                   f"{e.failure or _readings(e)}; check that the tests select a perf test "
                   "that exists at both ends")
        out.append(f"  reproduce: {e.command}")
    else:
        n = len(r.steps)
        out.append(f"perfgate bisect: {n} step{'s' if n != 1 else ''} found between GOOD "
                   f"{g} and BAD {b} ({len(r.commits)} commits, tracked: "
                   f"{', '.join(r.tracked)})")
        for step in r.steps:
            out += step_lines(step, labels, subjects, threshold)
        if r.stop is Stop.REST_UNKNOWN and r.rest is not None:
            out.append(f"whether more steps follow {short(r.rest.base, labels)} is unknown: "
                       f"BAD against it was {r.rest.status(r.tracked).value} "
                       f"({r.rest.failure or _readings(r.rest)}); to search on from it: "
                       + shlex.join(["perfgate", "bisect", "--turns", str(2 * r.rest.turns),
                                     r.rest.base[:12], labels.get(r.bad) or r.bad[:12],
                                     *tests]))
        if r.stop is Stop.PROBE_LIMIT:
            out.append("stopped at the probe limit (--max-probes) before the search ended")
    for c, why in r.skipped.items():
        out.append(f"skipped {c[:10]}{_subject(c, subjects)}: {why}")
    for c, p in r.unknown.items():
        out.append(f"inconclusive {c[:10]}{_subject(c, subjects)} after {_attempts(r, p)}: "
                   f"{_readings(p)}")
    out.append(f"{len(r.probes)} probe{'s' if len(r.probes) != 1 else ''} in "
               f"{duration(elapsed_s)}")
    return out


def _attempts(r: BisectResult, last: Probe) -> str:
    turns = [p.turns for p in r.probes if (p.commit, p.base) == (last.commit, last.base)]
    return f"{len(turns)} probe{'s' if len(turns) != 1 else ''} ({'/'.join(map(str, turns))} " \
           "turns)"


def _readings(p: Probe) -> str:
    return "; ".join(f"{n} {reading_text(rd)}" for n, rd in p.readings.items()) or "no verdict"


def interrupted(probes: int, elapsed_s: float) -> str:
    return (f"perfgate bisect: stopped ({probes} probe{'s' if probes != 1 else ''} finished "
            f"in {duration(elapsed_s)}); the running probe was stopped and the worktrees "
            "removed")


def exit_status(r: BisectResult) -> int:
    if r.stop in (Stop.DONE, Stop.REST_UNKNOWN) and r.steps:
        return EXIT_FOUND
    if r.stop is Stop.ENDPOINT_UNMEASURED:
        return EXIT_INFRA
    return EXIT_NOT_FOUND

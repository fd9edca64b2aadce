"""The A/B controller: a base and a head side measured in alternating turns, judged paired.

The machine's speed drifts by up to 1.5x within seconds (docs/design.md §1); a base and a
head measured within the same few hundred milliseconds see the same machine, so the
per-turn ratio cancels the drift. ABBA turns and the trimmed paired estimator:
docs/design.md §3. :func:`start_ab` sets the run up (the base revision checked out beside
the working tree); the plugin calls it at configure time and shows its
:class:`ABSetupError` as a usage error.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_perfgate.core.gate import (
    Outcome,
    Rule,
    Verdict,
    never_steady,
    no_baseline,
    paired_evidence,
    sequential_decide,
    unstable,
)
from pytest_perfgate.core.judged import Judged, summarize
from pytest_perfgate.core.measure import Measurement, Meter, RawWindow, Window, WindowSource
from pytest_perfgate.core.metric import ENV_STEPS, Metric, metric_for
from pytest_perfgate.core.progress import NULL_PROGRESS, Progress
from pytest_perfgate.core.sequential import Design, plan
from pytest_perfgate.modes import group
from pytest_perfgate.modes.ab.checkout import WorktreeError, term_as_interrupt
from pytest_perfgate.modes.ab.checkout import worktree as base_worktree
from pytest_perfgate.modes.ab.remote import Pair, RemoteSource, Side, SideError, SideSpec, reach
from pytest_perfgate.modes.base import BenchCall, MeterFactory, Sink
from pytest_perfgate.modes.place import Place, PlaceError

if TYPE_CHECKING:
    from pytest_perfgate.profile.changed import Changes
    from pytest_perfgate.profile.turns import ProfilePlan

AB = "ab"  # the run's "mode" metadata: kept out of the history mode's baselines


@dataclass(frozen=True)
class ABSetup:
    """An A/B run's two sides: what to start for each test, and what base is."""

    base: SideSpec
    head: SideSpec
    base_commit: str
    base_label: str  # the revision as the user gave it
    plugin_root: str  # the sides import this copy of pytest_perfgate


# The sides import the controller's copy of pytest_perfgate: the folder holding the package.
PLUGIN_ROOT = str(Path(__file__).resolve().parents[3])


class ABSetupError(SideError):
    """The A/B run cannot start: not a git checkout, unknown revision, set-up failed."""


@contextlib.contextmanager
def worktree(repo: Path, rev: str, source: str = "--perfgate-ab") -> Iterator[Path]:
    """A detached temporary git worktree of ``rev``, removed afterwards (stale ones of
    killed runs are swept first: :mod:`.checkout`)."""
    from pytest_perfgate.history.vcs import resolve_commit

    commit = resolve_commit(repo, rev)
    if commit is None:
        raise ABSetupError(f"{source} {rev!r}: not a commit of the repository at {repo}; "
                           "give a branch, tag or hash that `git rev-parse` resolves")
    try:
        with base_worktree(repo, commit) as path:
            yield path
    except WorktreeError as e:
        raise ABSetupError(f"could not check out {rev} ({commit[:10]}) into a worktree: "
                           f"{e}") from None


def start_ab(place: Place, rev: str, setup_cmd: str | None, stack: contextlib.ExitStack,
             source: str = "--perfgate-ab", setup_source: str = "--perfgate-ab-setup"
             ) -> ABSetup:
    """Check ``rev`` out beside the repository at ``place`` (removed when ``stack`` closes),
    run the set-up command in it, and say how to start each side: both at ``place``, the
    base in its worktree. Until ``stack`` closes, SIGTERM unwinds the run like Ctrl-C, so
    the sides end and the worktree is removed. ``source``, ``setup_source``: where the
    revision and the set-up command were set (a flag, an ini option, a variable), for
    messages."""
    from pytest_perfgate.history.vcs import git_info, resolve_commit

    root = place.top
    if not git_info(root).available:
        raise ABSetupError(f"{source} {rev}: {root} is not a git checkout; "
                           "the A/B mode checks the base revision out with git worktree")
    stack.callback(term_as_interrupt())  # restored last, after the worktree is gone
    base_dir = stack.enter_context(worktree(root, rev, source))
    try:
        place.prepare(base_dir)
    except PlaceError as e:
        raise ABSetupError(f"{source} {rev}: {e}") from None
    if setup_cmd:
        proc = group.run(setup_cmd, base_dir)
        if proc.returncode != 0:
            raise ABSetupError(
                f"{setup_source} {setup_cmd!r} failed in the base worktree "
                f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    base = SideSpec("base", place.at(place.cwd, base_dir),
                    (str(base_dir / "src"), str(base_dir)), pytest_args=place.args(base_dir),
                    place=place, tree=base_dir)
    head = SideSpec("head", place.cwd, pytest_args=place.args(None), place=place)
    commit = resolve_commit(root, rev) or rev
    return ABSetup(base, head, commit, rev, PLUGIN_ROOT)


class Profiling:
    """Profiles of a pair's sides after its verdict (:mod:`pytest_perfgate.profile`): when
    the plan wants one, into ``out_dir()`` (called when the first is written: the session's
    root is known by then)."""

    def __init__(self, plan: ProfilePlan, out_dir: Callable[[], Path],
                 root: Callable[[], Path] = Path.cwd) -> None:
        self.plan = plan
        self.out_dir = out_dir
        self.root = root  # the measured tree of a run profiled alone
        self._changes: Changes | None = None

    def wanted(self, verdict: Verdict) -> bool:
        return self.plan.wanted(verdict.outcome is Outcome.REGRESSION)

    def take_one(self, source: WindowSource, name: str) -> dict[str, object]:
        """This process's own run (history mode), profiled alone after it was measured."""
        import os

        from pytest_perfgate.profile.turns import Target, profile_one

        return profile_one(Target(source, os.getpid(), self.root()), self.plan,
                           self.out_dir(), name)

    def take(self, pair: Pair, base: RemoteSource, head: RemoteSource, name: str,
             ab: ABSetup) -> dict[str, object]:
        from pytest_perfgate.profile.changed import Changes
        from pytest_perfgate.profile.turns import Target, profile_pair

        spec_b, spec_h = ab.base, ab.head
        root_h = spec_h.place.top if spec_h.place is not None else spec_h.cwd
        root_b = spec_b.tree if spec_b.tree is not None else spec_b.cwd
        if self._changes is None:
            self._changes = Changes(root_h, ab.base_commit)
        return profile_pair(Target(base, pair.base.proc.pid, root_b),
                            Target(head, pair.head.proc.pid, root_h), self.plan,
                            self.out_dir(), name, self._changes)


class ABController:
    """The controlling process's mode: start both sides per test, interleave, judge.

    The controller runs the test body but never the step (the sides do), so a test may skip
    expensive set-up when ``perfgate.runs_step`` is false.
    """

    tag = AB
    runs_step = False

    def __init__(self, setup: ABSetup, meter: MeterFactory, sink: Sink, turns: int,
                 turn_s: float, looks: int = 1, profile: Profiling | None = None) -> None:
        self.setup = setup
        self.meter = meter
        self.sink = sink
        self.turns = turns  # at most, per side: the design's last look
        self.turn_s = turn_s
        self.looks = looks
        self.profile = profile
        self._pairs: dict[str, Pair] = {}  # test id -> its running sides

    def measure(self, source: WindowSource, call: BenchCall) -> Judged:
        """A ``measure()`` call of a test body run here: both sides must reach it too."""
        pair = self.pair_for(call.test_id, call.test_file)
        try:
            base_src, head_src = pair.next_bench(call.name)
        except SideError:
            why = self._absent_from_base(pair.base, call)
            if why is None:
                raise
            return self._new_in_head(pair, call, why)
        return self._judge(pair, base_src, head_src, call)

    def measure_announced(self, pair: Pair, call: BenchCall) -> Judged:
        """A ``measure()`` call the head side announced (a test run by its sides alone,
        :mod:`.by_sides`): the base must reach it too, or it is new in the head."""
        try:
            reach(pair.base, call.name)
        except SideError:
            why = self._absent_from_base(pair.base, call)
            if why is None:
                raise
            return self._new_in_head(pair, call, why, head_reached=True)
        return self._judge(pair, RemoteSource(pair.base), RemoteSource(pair.head), call)

    def pair_for(self, test_id: str, test_file: tuple[str, str] | None) -> Pair:
        """The two sides running ``test_id``, started on first use."""
        ab = self.setup
        pair = self._pairs.get(test_id)
        if pair is None:
            pair = Pair(Side(ab.base, test_id, ab.plugin_root, test_file),
                        Side(ab.head, test_id, ab.plugin_root, test_file))
            self._pairs[test_id] = pair
        return pair

    def _judge(self, pair: Pair, base_src: RemoteSource, head_src: RemoteSource,
               call: BenchCall) -> Judged:
        ab = self.setup
        metric = metric_for(call.unit)
        design = plan(self.turns, self.looks, call.rule.alpha)
        run = measure_sequential(base_src, head_src, self.meter(), design, self.turn_s,
                                 call.rule, metric)
        mb, mh = run.base, run.head
        verdict = run.verdict
        if not (mb.steady and mh.steady):
            side = "base" if not mb.steady else "head"
            load = mb.warmup_load if not mb.steady else mh.warmup_load
            verdict = unstable(never_steady(load, side), metric)
        info = {**dict(call.extra), "ab_base": ab.base_label, "ab_base_commit": ab.base_commit,
                "ab_base_samples": mb.samples, "ab_sequential": run.looks.summary()}
        if self.profile is not None and self.profile.wanted(verdict):
            info["profile"] = self.profile.take(pair, base_src, head_src, call.name, ab)
        pair.done()
        result = summarize(call.name, mh, call.transitions, extra=info, unit=call.unit)
        base = summarize(call.name, mb, call.transitions, unit=call.unit)
        j = Judged(result, verdict, call.rule, call.test_id, [ab.base_commit], base.steps_per_s,
                   {n: p.ms_per_call for n, p in base.phases.items()})
        self.sink(j)
        return j

    def _absent_from_base(self, base: Side, call: BenchCall) -> str | None:
        """Why a base side that ended without reaching ``measure()`` did so because its
        revision lacks the test, or None (then its failure is an error). A path it could not
        find although the file is there is an error naming both places, never a pass."""
        if base.proc.poll() is None:
            return None
        spec, head = self.setup.base, self.setup.head
        if spec.place is not None and spec.tree is not None:
            why = spec.place.missing(call.test_id, spec.tree, call.test_file)
            if why is not None:
                return why
        if base.not_found():
            raise SideError(
                f"the base side could not find {base.target} in {spec.cwd}, although the "
                f"head found {head.target(call.test_id, call.test_file)} in {head.cwd} and "
                f"the base revision has "
                f"that file: a bug in how perfgate placed the base side, not a verdict. Its "
                f"output ends with:\n{base.output_tail()}")
        if base.lacks_test():
            return "its file has no such test there"
        if base.proc.poll() == 0:  # the test ran to its end without reaching measure()
            if base.skipped():
                return "the test skips there"
            return "the test does not measure it there: not a perf test in that revision"
        return None

    def _new_in_head(self, pair: Pair, call: BenchCall, why: str, head_reached: bool = False
                     ) -> Judged:
        """A test the base revision does not have (a new file, function or parameter): the
        head is measured alone and recorded, NO BASELINE, never a regression or an error."""
        ab = self.setup
        if not head_reached:
            reach(pair.head, call.name)
        m = self.meter().measure(RemoteSource(pair.head))
        with contextlib.suppress(OSError):
            pair.head.conn.send(("done",))
        result = summarize(call.name, m, call.transitions,
                           extra={**dict(call.extra), "ab_base": ab.base_label,
                                  "ab_base_commit": ab.base_commit}, unit=call.unit)
        verdict = no_baseline(
            f"the base revision {ab.base_label} ({ab.base_commit[:10]}) has no test "
            f"{call.test_id} ({why}): a benchmark new in this revision has nothing to "
            "compare with; measured and recorded, not gated", metric_for(call.unit))
        j = Judged(result, verdict, call.rule, call.test_id, [], None, {})
        self.sink(j)
        return j

    def end_test(self, test_id: str) -> None:
        """End this test's sides, if any (bounded: terminate, then kill)."""
        pair = self._pairs.pop(test_id, None)
        if pair is not None:
            pair.close()


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

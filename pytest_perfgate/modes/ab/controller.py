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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_perfgate.core import group
from pytest_perfgate.core.gate import (
    Outcome,
    Verdict,
    never_steady,
    no_baseline,
    unstable,
)
from pytest_perfgate.core.judged import Judged, summarize
from pytest_perfgate.core.metric import Metric, counted_per, metric_for
from pytest_perfgate.core.sequential import plan
from pytest_perfgate.core.window import WindowSource
from pytest_perfgate.envs.declarations import DeclarationError
from pytest_perfgate.history.judge import baseline_figure, bound_noted
from pytest_perfgate.modes.ab import confirm, spread
from pytest_perfgate.modes.ab.abba import Paired, measure_sequential
from pytest_perfgate.modes.ab.checkout import WorktreeError, term_as_interrupt
from pytest_perfgate.modes.ab.checkout import worktree as base_worktree
from pytest_perfgate.modes.ab.remote import Pair, RemoteSource, Side, SideError, SideSpec, reach
from pytest_perfgate.modes.mode import BenchCall, MeterFactory, Sink
from pytest_perfgate.modes.place import Place, PlaceError

if TYPE_CHECKING:
    from pytest_perfgate.envs.build import SideEnv
    from pytest_perfgate.history.environment import Change
    from pytest_perfgate.profile.changed import Changes
    from pytest_perfgate.profile.interleaved import ProfilePlan

AB = "ab"  # the run's "mode" metadata: kept out of the history mode's baselines


@dataclass(frozen=True)
class ABSetup:
    """An A/B run's two sides: what to start for each test, and what base is."""

    base: SideSpec
    head: SideSpec
    base_commit: str
    base_label: str  # the revision as the user gave it
    plugin_root: str  # the sides import this copy of pytest_perfgate
    # each side's own environment where its dependency declarations ask for one
    base_env: SideEnv | None = None
    head_env: SideEnv | None = None

    def environment_lines(self) -> list[str]:
        """What each side's own environment holds, and what it cost, for the terminal."""
        out = []
        for role, env in (("base", self.base_env), ("head", self.head_env)):
            if env is None:
                continue
            held = ", ".join(f"{n} {v}" + (f" (this environment has {env.replaced[n]})"
                                           if env.replaced.get(n) else " (added)")
                             for n, v in env.overlay.items())
            how = "reused (cached)" if env.cached else f"built with {env.tool}"
            out.append(f"the {role} runs in its own environment: {held}; its "
                       f"{', '.join(env.declarations)} say so; {how} in {env.seconds:.1f} s")
        return out

    def environment_changes(self) -> list[Change]:
        """What the head runs on that the base does not: the packages either side's own
        environment holds, base version -> head version."""
        from pytest_perfgate.history.environment import changes

        names = set(self.base_env.overlay if self.base_env else {}) | set(
            self.head_env.overlay if self.head_env else {})

        def packages(env: SideEnv | None, other: SideEnv | None) -> dict[str, str | None]:
            # a side's own version, else the reference's (the other side's replaced one)
            return {n: env.overlay[n] if env is not None and n in env.overlay else
                    other.replaced.get(n) if other is not None else None for n in names}

        return changes({"packages": packages(self.base_env, self.head_env)},
                       {"packages": packages(self.head_env, self.base_env)})


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
             source: str = "--perfgate-ab", setup_source: str = "--perfgate-ab-setup",
             env_files: Sequence[str] | None = None) -> ABSetup:
    """Check ``rev`` out beside the repository at ``place`` (removed when ``stack`` closes),
    run the set-up command in it, and say how to start each side: both at ``place``, the
    base in its worktree. Until ``stack`` closes, SIGTERM unwinds the run like Ctrl-C, so
    the sides end and the worktree is removed. ``source``, ``setup_source``: where the
    revision and the set-up command were set (a flag, an ini option, a variable), for
    messages."""
    from pytest_perfgate.envs.build import side_envs
    from pytest_perfgate.history.vcs import git_info, resolve_commit

    root = place.top
    if not git_info(root).available:
        raise ABSetupError(f"{source} {rev}: {root} is not a git checkout; "
                           "the A/B mode checks the base revision out with git worktree")
    stack.callback(term_as_interrupt())  # restored last, after the worktree is gone
    base_dir = stack.enter_context(worktree(root, rev, source))
    try:
        place.prepare(base_dir)
        if setup_cmd:
            proc = group.run(setup_cmd, base_dir)
            if proc.returncode != 0:
                raise ABSetupError(
                    f"{setup_source} {setup_cmd!r} failed in the base worktree "
                    f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        base_env, head_env = side_envs(root, base_dir, env_files)
    except (PlaceError, DeclarationError) as e:
        raise ABSetupError(f"{source} {rev}: {e}") from None
    base = SideSpec("base", place.at(place.cwd, base_dir),
                    (str(base_dir / "src"), str(base_dir)), pytest_args=place.args(base_dir),
                    place=place, tree=base_dir, python=base_env.python if base_env else None)
    head = SideSpec("head", place.cwd, pytest_args=place.args(None), place=place,
                    python=head_env.python if head_env else None)
    commit = resolve_commit(root, rev) or rev
    return ABSetup(base, head, commit, rev, PLUGIN_ROOT, base_env, head_env)


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

    def take_one(self, source: WindowSource, name: str, unit: str) -> dict[str, object]:
        """This process's own run (history mode), profiled alone after it was measured;
        ``unit``: the benchmark's rate unit, which its times are per ("calls/s": a call)."""
        import os

        from pytest_perfgate.profile.interleaved import Target, profile_one

        return profile_one(Target(source, os.getpid(), self.root()), self.plan,
                           self.out_dir(), name, counted_per(unit))

    def take(self, pair: Pair, base: RemoteSource, head: RemoteSource, name: str,
             ab: ABSetup, unit: str) -> dict[str, object]:
        from pytest_perfgate.profile.changed import Changes
        from pytest_perfgate.profile.interleaved import Target, profile_pair

        spec_b, spec_h = ab.base, ab.head
        root_h = spec_h.place.top if spec_h.place is not None else spec_h.cwd
        root_b = spec_b.tree if spec_b.tree is not None else spec_b.cwd
        if self._changes is None:
            self._changes = Changes(root_h, ab.base_commit)
        return profile_pair(Target(base, pair.base.proc.pid, root_b),
                            Target(head, pair.head.proc.pid, root_h), self.plan,
                            self.out_dir(), name, self._changes, counted_per(unit))


class ABController:
    """The controlling process's mode: start both sides per test, interleave, judge."""

    tag = AB
    runs_step = False

    def __init__(self, setup: ABSetup, meter: MeterFactory, sink: Sink, turns: int,
                 turn_s: float, looks: int = 1, profile: Profiling | None = None,
                 confirm: bool = True) -> None:
        self.setup = setup
        self.meter = meter
        self.sink = sink
        self.turns = turns  # at most, per side: the design's last look
        self.turn_s = turn_s
        self.looks = looks
        self.profile = profile
        self.confirm = confirm  # a change one pair calls is measured by fresh pairs (.confirm)
        self._pairs: dict[str, Pair] = {}  # test id -> its running sides
        self._calls: dict[str, list[str]] = {}  # test id -> its measure() calls so far

    def measure(self, source: WindowSource, call: BenchCall) -> Judged:
        """A ``measure()`` call of a test body run here: both sides must reach it too."""
        new = call.test_id not in self._pairs
        pair = self.pair_for(call.test_id, call.test_file)
        try:  # a pair started here for a later call passes the test's earlier ones first
            base_src, head_src = self._bring(pair, self._calls.get(call.test_id, []) if new
                                             else [], call.name)
        except SideError as e:
            return self._new_in_head(pair, call, e)
        return self._judge(pair, base_src, head_src, call)

    def after(self, test_id: str, names: Sequence[str]) -> None:
        """``test_id``'s ``measure()`` calls ``names`` come before the next one judged here:
        sides started for it pass them (each served one short window), so the test runs on
        as it did (history mode's re-measuring of a later call)."""
        self._calls[test_id] = list(names)

    def measure_announced(self, pair: Pair, call: BenchCall) -> Judged:
        """A ``measure()`` call the head side announced (a test run by its sides alone,
        :mod:`.by_sides`): the base must reach it too, or it is new in the head."""
        try:
            reach(pair.base, call.name)
        except SideError as e:
            return self._new_in_head(pair, call, e, head_reached=True)
        return self._judge(pair, RemoteSource(pair.base), RemoteSource(pair.head), call)

    def pair_for(self, test_id: str, test_file: tuple[str, str] | None) -> Pair:
        """The two sides running ``test_id``, started on first use."""
        ab = self.setup
        pair = self._pairs.get(test_id)
        if pair is None:
            pair = Pair.start(ab.base, ab.head, test_id, ab.plugin_root, test_file)
            self._pairs[test_id] = pair
        return pair

    def _judge(self, pair: Pair, base_src: RemoteSource, head_src: RemoteSource,
               call: BenchCall) -> Judged:
        ab = self.setup
        metric = metric_for(call.unit)
        earlier = self._calls.setdefault(call.test_id, [])
        pairs, runs = [pair], [self._measure(base_src, head_src, call, metric)]
        sources = [(base_src, head_src)]
        failed = None
        try:
            varies = spread.varies_by_process(runs[0][0].head)
            while self.confirm and confirm.wanted(verdicts := [v for _, v in runs], call.rule,
                                                  varies):
                self.meter().progress.pair_started(len(runs) + 1, confirm.why_more(verdicts))
                try:
                    srcs = self._fresh_pair(call, earlier, pairs)
                    runs.append(self._measure(*srcs, call, metric))
                    sources.append(srcs)
                except SideError as e:  # an infrastructure error: never a verdict of its own
                    failed = str(e).splitlines()[0]
                    break
            i, verdict = confirm.agreed([v for _, v in runs], failed, metric, call.rule)
            run = runs[i][0]
            mb, mh = run.base, run.head
            info = {**sources[i][1].recorded(), **dict(call.extra), "ab_base": ab.base_label,
                    "ab_base_commit": ab.base_commit, "ab_base_samples": mb.samples,
                    "ab_sequential": run.looks.summary()}
            if self.profile is not None and self.profile.wanted(verdict):
                info["profile"] = self.profile.take(pairs[i], *sources[i], call.name, ab,
                                                    call.unit)
        finally:
            for extra in pairs[1:]:
                extra.close()
        pair.done()
        earlier.append(call.name)
        result = summarize(call.name, mh, call.transitions, extra=info, unit=call.unit)
        base_phases = {n: p.ms_per_call for n, p in mb.phases.items()}
        verdict = bound_noted(verdict, result, base_phases, call.rule.threshold)
        changes = ab.environment_changes()
        if changes:
            from pytest_perfgate.history.environment import describe

            verdict = verdict.noted(f"since the base: {describe(changes)} (each side ran in "
                                    "the environment its declarations pin)")
        j = Judged(result, verdict, call.rule, call.test_id, [ab.base_commit],
                   baseline_figure(result, verdict.ratio, [mb.value]), base_phases,
                   environment_changes=tuple(c.to_json() for c in changes),
                   pairs=tuple(v for _, v in runs) if len(runs) > 1 else ())
        self.sink(j)
        return j

    def _measure(self, base_src: RemoteSource, head_src: RemoteSource, call: BenchCall,
                 metric: Metric) -> tuple[Paired, Verdict]:
        """One pair's sequential measurement and its verdict (UNSTABLE when a side never
        became steady)."""
        design = plan(self.turns, self.looks, call.rule.alpha)
        run = measure_sequential(base_src, head_src, self.meter(), design, self.turn_s,
                                 call.rule, metric)
        mb, mh = run.base, run.head
        if not (mb.steady and mh.steady):
            side = "base" if not mb.steady else "head"
            load = mb.warmup_load if not mb.steady else mh.warmup_load
            return run, unstable(never_steady(load, side, len(run.looks.left_out)), metric)
        return run, run.verdict

    def _fresh_pair(self, call: BenchCall, earlier: Sequence[str], into: list[Pair]
                    ) -> tuple[RemoteSource, RemoteSource]:
        """New processes for both sides of ``call``'s test, appended to ``into`` (whose owner
        closes them) as soon as both run, then brought to the call (:meth:`_bring`)."""
        ab = self.setup
        fresh = Pair.start(ab.base, ab.head, call.test_id, ab.plugin_root, call.test_file)
        into.append(fresh)
        return self._bring(fresh, earlier, call.name)

    def _bring(self, pair: Pair, earlier: Sequence[str], name: str
               ) -> tuple[RemoteSource, RemoteSource]:
        """Bring both sides of ``pair`` to the ``measure()`` call ``name``, past the test's
        ``earlier`` calls: each is served one short window (so the test body gets a result
        of the usual kind) and let go."""
        for before in earlier:
            for src in pair.next_bench(before):
                src.run_window(min(self.turn_s, 0.05))
            pair.done()
        return pair.next_bench(name)

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

    def _new_in_head(self, pair: Pair, call: BenchCall, error: SideError,
                     head_reached: bool = False) -> Judged:
        """A test the base revision does not have (a new file, function or parameter): the
        head is measured alone and recorded, NO BASELINE, never a regression or an error;
        ``error`` (the base side's) is raised when the base has the test."""
        why = self._absent_from_base(pair.base, call)
        if why is None:
            raise error
        ab = self.setup
        if not head_reached:
            reach(pair.head, call.name)
        head = RemoteSource(pair.head)
        m = self.meter().measure(head)
        recorded = head.recorded()
        with contextlib.suppress(OSError):
            pair.head.conn.send(("done",))
        result = summarize(call.name, m, call.transitions,
                           extra={**recorded, **dict(call.extra), "ab_base": ab.base_label,
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
        self._calls.pop(test_id, None)
        pair = self._pairs.pop(test_id, None)
        if pair is not None:
            pair.close()


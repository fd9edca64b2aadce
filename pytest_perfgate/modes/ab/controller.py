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
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pytest_perfgate.core.gate import decide, no_baseline, paired_evidence, unstable
from pytest_perfgate.core.judged import Judged, summarize
from pytest_perfgate.core.measure import Measurement, Meter, RawWindow, Window, WindowSource
from pytest_perfgate.core.metric import metric_for
from pytest_perfgate.core.progress import NULL_PROGRESS, Progress
from pytest_perfgate.modes.ab.checkout import WorktreeError, term_as_interrupt
from pytest_perfgate.modes.ab.checkout import worktree as base_worktree
from pytest_perfgate.modes.ab.remote import Pair, RemoteSource, Side, SideError, SideSpec, reach
from pytest_perfgate.modes.base import BenchCall, MeterFactory, Sink

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
def worktree(repo: Path, rev: str) -> Iterator[Path]:
    """A detached temporary git worktree of ``rev``, removed afterwards (stale ones of
    killed runs are swept first: :mod:`.checkout`)."""
    from pytest_perfgate.history.vcs import resolve_commit

    commit = resolve_commit(repo, rev)
    if commit is None:
        raise ABSetupError(f"--perfgate-ab {rev!r}: not a commit of the repository at {repo}; "
                           "give a branch, tag or hash that `git rev-parse` resolves")
    try:
        with base_worktree(repo, commit) as path:
            yield path
    except WorktreeError as e:
        raise ABSetupError(f"could not check out {rev} ({commit[:10]}) into a worktree: "
                           f"{e}") from None


def start_ab(root: Path, rev: str, setup_cmd: str | None, stack: contextlib.ExitStack,
             pytest_args: tuple[str, ...] = ()) -> ABSetup:
    """Check ``rev`` out beside ``root`` (removed when ``stack`` closes), run the set-up
    command in it, and say how to start each side. Until ``stack`` closes, SIGTERM unwinds
    the run like Ctrl-C, so the sides end and the worktree is removed."""
    from pytest_perfgate.history.vcs import git_info, resolve_commit

    if not git_info(root).available:
        raise ABSetupError(f"--perfgate-ab {rev}: {root} is not a git checkout; "
                           "the A/B mode checks the base revision out with git worktree")
    stack.callback(term_as_interrupt())  # restored last, after the worktree is gone
    base_dir = stack.enter_context(worktree(root, rev))
    if setup_cmd:
        proc = subprocess.run(setup_cmd, shell=True, cwd=base_dir, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise ABSetupError(
                f"--perfgate-ab-setup {setup_cmd!r} failed in the base worktree "
                f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    base = SideSpec("base", base_dir, (str(base_dir / "src"), str(base_dir)),
                    pytest_args=pytest_args)
    head = SideSpec("head", root, pytest_args=pytest_args)
    commit = resolve_commit(root, rev) or rev
    return ABSetup(base, head, commit, rev, PLUGIN_ROOT)


class ABController:
    """The controlling process's mode: start both sides per test, interleave, judge.

    The controller runs the test body but never the step (the sides do), so a test may skip
    expensive set-up when ``perfgate.runs_step`` is false.
    """

    tag = AB
    runs_step = False

    def __init__(self, setup: ABSetup, meter: MeterFactory, sink: Sink, turns: int,
                 turn_s: float) -> None:
        self.setup = setup
        self.meter = meter
        self.sink = sink
        self.turns = turns
        self.turn_s = turn_s
        self._pairs: dict[str, Pair] = {}  # test id -> its running sides

    def measure(self, source: WindowSource, call: BenchCall) -> Judged:
        ab = self.setup
        pair = self._pairs.get(call.test_id)
        if pair is None:
            pair = Pair(Side(ab.base, call.test_id, ab.plugin_root),
                        Side(ab.head, call.test_id, ab.plugin_root))
            self._pairs[call.test_id] = pair
        try:
            base_src, head_src = pair.next_bench(call.name)
        except SideError:
            if pair.base.proc.poll() is None or not pair.base.lacks_test():
                raise
            return self._new_in_head(pair, call)
        mb, mh = measure_pair(base_src, head_src, self.meter(), self.turns, self.turn_s)
        pair.done()
        info = {**dict(call.extra), "ab_base": ab.base_label, "ab_base_commit": ab.base_commit,
                "ab_base_samples": mb.samples}
        result = summarize(call.name, mh, call.transitions, extra=info, unit=call.unit)
        metric = metric_for(call.unit)
        if not (mb.steady and mh.steady):
            side = "base" if not mb.steady else "head"
            verdict = unstable(f"the {side} side never reached steady state during warm-up",
                               metric)
        else:
            verdict = decide(paired_evidence(mb.samples, mh.samples), call.rule, metric)
        base = summarize(call.name, mb, call.transitions, unit=call.unit)
        j = Judged(result, verdict, call.rule, call.test_id, [ab.base_commit], base.steps_per_s,
                   {n: p.ms_per_call for n, p in base.phases.items()})
        self.sink(j)
        return j

    def _new_in_head(self, pair: Pair, call: BenchCall) -> Judged:
        """A test the base revision does not have (a new file, function or parameter): the
        head is measured alone and recorded, NO BASELINE, never a regression or an error."""
        ab = self.setup
        reach(pair.head, call.name)
        m = self.meter().measure(RemoteSource(pair.head))
        with contextlib.suppress(OSError):
            pair.head.conn.send(("done",))
        result = summarize(call.name, m, call.transitions,
                           extra={**dict(call.extra), "ab_base": ab.base_label,
                                  "ab_base_commit": ab.base_commit}, unit=call.unit)
        verdict = no_baseline(
            f"the base revision {ab.base_label} ({ab.base_commit[:10]}) has no test "
            f"{call.test_id}: a benchmark new in this revision has nothing to compare with; "
            "measured and recorded, not gated", metric_for(call.unit))
        j = Judged(result, verdict, call.rule, call.test_id, [], None, {})
        self.sink(j)
        return j

    def end_test(self, test_id: str) -> None:
        """End this test's sides, if any (bounded: terminate, then kill)."""
        pair = self._pairs.pop(test_id, None)
        if pair is not None:
            pair.close()


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

"""When the record cannot decide: measure the baseline commit again, beside this tree.

The history gate compares one run with runs taken minutes or days ago on a machine whose
speed drifts; on a shared runner its interval is often wider than the threshold
(INCONCLUSIVE). The answer is the A/B mode's: the newest baseline commit the history names
is checked out into a worktree (one per commit, kept for the session's other tests) and
measured in alternating turns with this tree, so both see the same machine. The run is
recorded as measured; the verdict is the paired one and says that it is. Where the commit
cannot be measured again (outside git, a dirty tree, a commit this clone lacks, the budget
spent) the verdict stays the record's and names why (docs/measurement.md, "When the record
cannot decide").
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

from pytest_perfgate.core.gate import Outcome, Verdict
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.history.judge import baseline_figure
from pytest_perfgate.modes.ab.controller import (
    ABController,
    ABSetup,
    ABSetupError,
    Profiling,
    start_ab,
)
from pytest_perfgate.modes.ab.remote import SideError
from pytest_perfgate.modes.mode import BenchCall, MeterFactory, discard
from pytest_perfgate.modes.place import Place


@dataclasses.dataclass(frozen=True)
class RemeasurePlan:
    """What a re-measurement runs: the A/B mode's turns, the set-up command, the budget."""

    turns: int = 96
    turn_s: float = 0.1
    looks: int = 4
    setup: str | None = None
    budget_s: float = 900.0
    confirm: bool = True  # a change one pair calls is measured by fresh pairs (ab/confirm.py)
    env_files: tuple[str, ...] | None = None  # the declarations that give a side its own env


class Remeasure:
    """Judge an INCONCLUSIVE history verdict again by re-measuring its baseline commit.

    ``place`` is where the session stands in its repository (None: outside git). The
    worktrees live until :meth:`close` (the session's end).
    """

    def __init__(self, place: Place | None, meters: MeterFactory, plan: RemeasurePlan,
                 monotonic: Callable[[], float] = time.monotonic,
                 profile: Profiling | None = None) -> None:
        self.place = place
        self.profile = profile
        self.meters = meters
        self.plan = plan
        self.spent_s = 0.0
        self._stack = contextlib.ExitStack()
        self._setups: dict[str, ABSetup | str] = {}  # commit -> its sides, or why not
        self._calls: dict[str, list[str]] = {}  # test id -> its measure() calls so far
        self._monotonic = monotonic

    def close(self) -> None:
        self._stack.close()

    def decide(self, j: Judged, call: BenchCall) -> Judged:
        """``j`` when it decided (or has no baseline); else the paired verdict of its newest
        baseline commit against this tree, or ``j`` with why that could not be."""
        v = j.verdict
        seen = self._calls.setdefault(call.test_id, [])
        earlier = list(seen)
        seen.append(call.name)
        if v is None or v.outcome is not Outcome.INCONCLUSIVE or not j.baseline_commits:
            return j
        commit = j.baseline_commits[0]
        why = self._why_not(commit)
        setup = self._setup(commit) if why is None else why
        if isinstance(setup, str):
            return _note(j, f"not re-measured: {setup}")
        t0 = self._monotonic()
        ctl = ABController(setup, self.meters, discard, self.plan.turns,
                           self.plan.turn_s, self.plan.looks, self.profile,
                           self.plan.confirm)
        ctl.after(call.test_id, earlier)  # its sides pass the test's earlier calls first
        try:
            ab = ctl.measure(_NO_SOURCE, call)
        except SideError as e:  # an infrastructure error: never a verdict of its own
            return _note(j, f"re-measuring failed, so the record's verdict stands: {e}")
        finally:
            ctl.end_test(call.test_id)
            self.spent_s += self._monotonic() - t0
        return _who_moved(j, ab, commit, v, call) or _paired(j, ab, commit, v)

    def _why_not(self, commit: str) -> str | None:
        from pytest_perfgate.history.vcs import git_info, resolve_commit

        if self.place is None:
            return "this run is outside a git checkout, so its baseline commit cannot be " \
                   "checked out"
        if self.spent_s >= self.plan.budget_s:
            return (f"the session's re-measure budget ({self.plan.budget_s:g} s, "
                    "--perfgate-remeasure-budget) is spent")
        info = git_info(self.place.top)
        if not info.available:
            return f"git cannot read {self.place.top} ({info.reason})"
        if info.dirty:
            return ("the working tree has uncommitted changes: this run is recorded at "
                    f"{info.commit[:10]}, which is not the code measured; commit them")
        if resolve_commit(self.place.top, commit) is None:
            return missing_commit(self.place.top, commit)
        return None

    def _setup(self, commit: str) -> ABSetup | str:
        """The sides for ``commit`` (its worktree made once per session), or why not."""
        got = self._setups.get(commit)
        if got is None:
            assert self.place is not None
            from pytest_perfgate.envs.build import EnvBuildError

            try:
                got = start_ab(self.place, commit, self.plan.setup, self._stack,
                               source="the baseline commit", setup_source="--perfgate-ab-setup",
                               env_files=self.plan.env_files)
            except ABSetupError as e:
                got = str(e)
            except EnvBuildError as e:  # never a pass in disguise: the test errors
                raise SideError(f"re-measuring the baseline commit {commit[:10]} needs the "
                                f"environment its dependency declarations pin, which cannot "
                                f"be built: {e}") from None
            self._setups[commit] = got
        return got


def missing_commit(repo: str | os.PathLike[str], commit: str) -> str:
    """Why ``commit`` cannot be checked out in ``repo``, with the fix that works there: a
    shallow clone fetches its history; a complete one cannot unshallow (git refuses)."""
    from pytest_perfgate.history.vcs import SHALLOW_FIX, is_shallow

    if is_shallow(repo):
        return (f"the baseline commit {commit[:10]} is not in this clone, which is shallow: "
                f"{SHALLOW_FIX}")
    return (f"the baseline commit {commit[:10]} is not in this clone (rebased away, or on a "
            f"branch never fetched): fetch it (git fetch origin {commit}), or record runs of "
            "this branch's own commits")


class _NoSource:
    """The controller never runs the step here: its sides do."""

    def run_window(self, duration_s: float) -> Any:  # pragma: no cover - never called
        raise AssertionError("a re-measurement's controller runs no window itself")


_NO_SOURCE: Any = _NoSource()


def _note(j: Judged, text: str) -> Judged:
    """``j`` with ``text`` as a sentence after its message."""
    assert j.verdict is not None
    return dataclasses.replace(j, verdict=j.verdict.noted(text))


def _who_moved(j: Judged, ab: Judged, commit: str, record: Verdict, call: BenchCall
               ) -> Judged | None:
    """The record puts this tree past the threshold, and the baseline commit measured now
    is as fast as this tree: the drop is not in the code. Something else moved, and a drop
    that size never passes as INCONCLUSIVE (docs/measurement.md): the environment (it
    changed since the baseline runs: a REGRESSION naming it), else the machine (UNSTABLE,
    with its figures). None when the two measurements do not disagree so."""
    from pytest_perfgate.history.environment import Change, describe
    from pytest_perfgate.history.machine_id import speed_figures

    v, limit = ab.verdict, 1 - call.rule.threshold
    # past the threshold: the record's interval lies below it; without one (too few runs),
    # its estimate lies below twice the drop
    past = record.ratio is not None and (
        record.ci[1] < limit if record.ci is not None else record.ratio < 1 - 2 * (1 - limit))
    if v is None or not past or v.outcome not in (Outcome.OK, Outcome.IMPROVEMENT):
        return None
    assert record.ratio is not None
    said = (f"the record measured {1 - record.ratio:.1%} below the baseline runs "
            f"({record.message}), but the baseline commit {commit[:10]} measured again in "
            f"alternating turns with this tree is as fast as it ({v.message}): the drop is "
            "not in the code")
    if j.environment_changes:
        found = [Change(str(c.get("name")), c.get("before"), c.get("after"))
                 for c in j.environment_changes]
        verdict = dataclasses.replace(record, outcome=Outcome.REGRESSION, message=(
            f"{said}; it is in the environment, which changed since the baseline runs: "
            f"{describe(found)}. A REGRESSION (if the upgrade is intended: perfgate "
            "rebaseline RUN_ID)"))
    else:
        verdict = dataclasses.replace(record, outcome=Outcome.UNSTABLE, message=(
            f"{said}, nor in the environment (the baseline runs had this one): the "
            f"machine's speed moved ({speed_figures()}). UNSTABLE, which fails as "
            "--perfgate-unstable says: a drop this size is not passed as INCONCLUSIVE; "
            "re-run on the machine at its usual speed, or re-seed the history"))
    return dataclasses.replace(j, verdict=verdict, remeasured=True)


def _paired(j: Judged, ab: Judged, commit: str, record: Verdict) -> Judged:
    """The recorded run with the paired verdict. The baseline figure is the one the paired
    ratio divides by, in this run's units: steps/s / ratio (so the three agree)."""
    v = ab.verdict
    if v is None:
        return j
    message = (f"re-measured: the record could not resolve the threshold ({record.message}); "
               f"so the baseline commit {commit[:10]} was measured again in alternating "
               f"turns with this tree: {v.message}")
    if "profile" in ab.result.extra:  # why it got slower, profiled after the paired verdict
        j = dataclasses.replace(j, result=dataclasses.replace(
            j.result, extra={**j.result.extra, "profile": ab.result.extra["profile"]}))
    return dataclasses.replace(j, verdict=dataclasses.replace(v, message=message),
                               baseline_commits=[commit],
                               baseline_rate=baseline_figure(j.result, v.ratio),
                               baseline_phases=ab.baseline_phases,
                               environment_changes=ab.environment_changes, pairs=ab.pairs,
                               remeasured=True)

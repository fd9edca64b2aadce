"""``perfgate check [RUN_ID]``: judge a recorded run against its history, for CI.

The plugin judges while it measures; ``check`` judges a run already recorded (the newest,
or a given id) with the same rules and verdicts (modes/history.py, core/gate.py), so a CI
step can gate separately from the step that measured. Exit statuses tell the cases apart:
0 pass, 1 regression (or a verdict the policy fails), 2 usage error, 3 infrastructure error
(no history, unreadable history): an infrastructure error is never a regression.
In CI it also gates the JSON report of a pytest run (``--report``, either mode) and prints
GitHub annotations and a step summary (:mod:`pytest_perfgate.cli._ci`).
"""

from __future__ import annotations

import argparse
import glob
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._ci import add_ci_arguments
from pytest_perfgate.cli._out import add_json_argument, run_json
from pytest_perfgate.cli.common_args import (
    add_history_arguments,
    argparse_type,
    parse_repo,
)
from pytest_perfgate.core.judged import Judged, failing
from pytest_perfgate.core.names import is_safe_name
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.session.options import (
    Options,
    parse_alpha,
    parse_commit,
    parse_fraction,
    parse_policy,
    parse_positive_int,
)

if TYPE_CHECKING:
    from pytest_perfgate.report.github import GateResult

INFRA = 3
T = TypeVar("T")


def _infra(args: argparse.Namespace, message: str) -> int:
    """An infrastructure error, printed by the one rule of cli/_out.py; its status."""
    from pytest_perfgate.cli._out import infra

    return infra(args, message)


def add_rule_arguments(ap: argparse.ArgumentParser) -> None:
    """The gate's rule, with the plugin's defaults (the same converters as its options)."""
    d = Options()
    add_history_arguments(ap)
    ap.add_argument("--repo", type=argparse_type(parse_repo), default=Path.cwd(),
                    help="the git checkout whose history decides ancestry (default: here)")
    ap.add_argument("--threshold", type=argparse_type(parse_fraction), default=None,
                    help="throughput drop that fails (default: the threshold each "
                    "benchmark was judged at when it was recorded, i.e. its marker or the "
                    f"project's perfgate_threshold; {d.default_threshold():.0%} for a run "
                    "recorded without one)".replace("%", "%%"))
    ap.add_argument("--alpha", type=argparse_type(parse_alpha), default=d.alpha,
                    help=f"one-sided significance level (default {d.alpha})")
    ap.add_argument("--baseline-runs", type=argparse_type(parse_positive_int),
                    default=d.baseline_runs,
                    help=f"newest N runs form the baseline (default {d.baseline_runs})")
    for what, default in (("unstable", d.unstable), ("inconclusive", d.inconclusive)):
        ap.add_argument(f"--{what}", type=argparse_type(parse_policy("fail", "warn")),
                        default=default, metavar="{fail,warn}",
                        help=f"{what.upper()} verdicts: fail or warn "
                        f"(default {default})")


def machine_runs(args: argparse.Namespace) -> tuple[Path, str, list[RunRecord]] | int:
    """(results dir, machine, its runs), or the infrastructure exit status (printed): the
    one machine lookup (history/lookup.py). The run files skipped with a warning are kept in
    ``args.unreadable`` for :func:`pick_run`."""
    from pytest_perfgate.cli._out import find_history

    found = find_history(args)
    if isinstance(found, int):
        return found
    args.unreadable = found.unreadable
    return found.results_dir, found.machine, list(found.runs)


def warned(args: argparse.Namespace, call: Callable[[], T]) -> T:
    """``call()`` with each skipped history file named once, as one line on stderr."""
    from pytest_perfgate.cli._out import warned as _warned

    result: T = _warned(args, call)
    return result


def pick_run(args: argparse.Namespace, runs: list[RunRecord], machine: str,
             wanted: str | None, what: str) -> RunRecord | int:
    """The newest history-mode run (``wanted`` None), the run with that id, or the newest
    run of the commit that ``wanted`` prefixes; the infra exit status when there is none."""
    from pytest_perfgate.history.context import is_history_run
    from pytest_perfgate.report.series import hidden_message, hidden_newest

    mine = [r for r in runs if is_history_run(r)]
    if wanted is None:
        if not mine:
            return _infra(args, f"machine {machine!r} has no recorded history-mode run")
        newest = max(mine, key=lambda r: r.started_at)
        hidden = hidden_newest(getattr(args, "unreadable", ()), newest)
        if hidden is not None:
            return _infra(args, hidden_message(hidden, newest))
        return newest
    if not wanted.strip():
        args.parser.error(f"{what} is empty: give an id printed as 'recorded run RUN_ID' or a "
                          "commit hash (prefix) of a recorded run")
    found = [r for r in runs if r.run_id == wanted] or \
        [r for r in mine if r.commit.startswith(wanted.lower())]
    if not found:
        found = _by_revision(args, mine, machine, wanted, what)
    skipped = getattr(args, "unreadable", ())
    if not found and skipped:  # the run may be in what could not be read: not a usage error
        return _infra(args, f"{what} {wanted!r}: no readable run of machine {machine!r} has "
                      f"that id or commit, and {len(skipped)} history file(s) could not be "
                      f"read ({', '.join(str(u.path) for u in skipped[:3])}): the run may be "
                      "in them; fix or move them (see the warnings above)")
    if not found:
        args.parser.error(f"{what} {wanted!r}: no run of machine {machine!r} has that id or "
                          "commit, and git does not know it as a revision in "
                          f"{args.repo} (--repo): give an id printed as 'recorded run "
                          "RUN_ID', a commit hash (prefix) of a recorded run, or a branch, "
                          "tag or revision such as HEAD~1")
    if len({r.commit for r in found}) > 1:
        args.parser.error(f"{what} {wanted!r} matches several recorded commits: give more "
                          "digits")
    run = max(found, key=lambda r: r.started_at)
    if not is_history_run(run):
        args.parser.error(f"run {run.run_id} was measured in the A/B mode: its verdict was a "
                          "paired comparison; only history-mode runs can be judged again")
    return run


def _by_revision(args: argparse.Namespace, mine: list[RunRecord], machine: str,
                 wanted: str, what: str) -> list[RunRecord]:
    """The runs of the commit git resolves ``wanted`` to (a branch, tag, HEAD~1: what
    ``--perfgate-ab`` takes); [] when git does not know it; a usage error when git knows it
    but no run of that commit is recorded."""
    from pytest_perfgate.history.vcs import resolve_commit

    full = resolve_commit(args.repo, wanted.strip())
    if full is None:
        return []
    found = [r for r in mine if r.commit == full]
    if not found:
        args.parser.error(f"{what} {wanted!r} is commit {full[:10]} in {args.repo}, but "
                          f"machine {machine!r} has no history-mode run of it: record one "
                          f"(git checkout {full[:10]} && pytest --perfgate), or give a "
                          "recorded commit")
    return found


def check_baseline(args: argparse.Namespace, runs: list[RunRecord], machine: str,
                   run: RunRecord) -> None:
    """--baseline must name one recorded commit other than the judged run's: a typo would
    leave every benchmark NO BASELINE, which exits 0 and is not a pass."""
    from pytest_perfgate.history.context import is_history_run

    commits = {r.commit for r in runs if is_history_run(r) and r.commit.lower().startswith(
        args.baseline)}
    if not commits:
        args.parser.error(f"--baseline {args.baseline}: no history-mode run of machine "
                          f"{machine!r} is of that commit, so nothing would judge the run: "
                          "give a commit hash (prefix) of a recorded run")
    if len(commits) > 1:
        args.parser.error(f"--baseline {args.baseline} matches several recorded commits ("
                          f"{', '.join(sorted(c[:12] for c in commits))}): give more digits")
    if run.commit in commits:
        args.parser.error(f"--baseline {args.baseline} is the commit of the run judged "
                          f"({describe(run)}): a run is never judged by its own commit; "
                          "give an earlier commit")


def judge_run(args: argparse.Namespace, results: Path, run: RunRecord,
              baseline: str | None, before: bool = True) -> list[Judged]:
    """Every benchmark of ``run`` judged by the plugin's history rules."""
    from pytest_perfgate.core.gate import Rule
    from pytest_perfgate.history.context import HistoryContext
    from pytest_perfgate.modes.history import HistoryMode

    ctx = HistoryContext.for_run(results, run, args.repo, before=before)
    warn_outside_git(args, ctx.git, run)
    for run_id in getattr(args, "serve_anyway", ()):  # compare --failed-base
        ctx.decisions = type(ctx.decisions)(ctx.decisions.accepted | {run_id},
                                            ctx.decisions.forgotten - {run_id})
    judged: list[Judged] = []
    mode = HistoryMode(False, _no_meter, judged.append, lambda: ctx, args.baseline_runs,
                       baseline, records=None)
    for name in sorted(run.benchmarks):
        b = run.benchmarks[name]
        threshold = args.threshold if args.threshold is not None else (
            b.threshold if b.threshold is not None else Options().default_threshold())
        mode.judge(b, name, Rule(threshold=threshold, alpha=args.alpha,
                                 unstable=args.unstable, inconclusive=args.inconclusive))
    return judged


def warn_outside_git(args: argparse.Namespace, git: Any, run: RunRecord) -> None:
    """A run recorded in git judged where git cannot place its commit (a wrong --repo)
    is judged as outside git, where every other commit's runs count: say so, once."""
    from pytest_perfgate.history.vcs import NO_COMMIT

    if git.available or run.commit == NO_COMMIT or getattr(args, "told_outside_git", False):
        return
    args.told_outside_git = True
    print(f"{args.parser.prog}: warning: commit {run.commit[:10]} of run {run.run_id} is not "
          f"in the repository at {args.repo} (--repo), so ancestry cannot be asked and the "
          "runs of every other commit count as its baseline: pass the checkout the runs "
          "were recorded from, e.g. --repo .", file=sys.stderr)


def describe(run: RunRecord) -> str:
    return (f"run {run.run_id} of machine {run.machine!r}, commit {run.commit[:10]}"
            f"{' (dirty)' if run.dirty else ''}")


class Check(Command):
    name = "check"
    help = "judge a recorded run against its history (exit 0 pass, 1 regression, 3 infra)"
    description = ("Judge the newest recorded run of a machine (or RUN_ID) against the runs "
                   "before it, with the plugin's rules: strict-ancestor commits (asked in "
                   "--repo), same fingerprint, failed runs only once accepted; or, with "
                   "--report, gate on the verdicts a pytest --perfgate run wrote (history or "
                   "A/B mode). Exit 0: pass; 1: a regression (or UNSTABLE/INCONCLUSIVE under "
                   "a fail policy); 2: usage error; 3: infrastructure error (no or unreadable "
                   "history or report, pytest stopped without verdicts; never a pass). "
                   "--github prints GitHub Actions annotations (default: when GITHUB_ACTIONS "
                   "is true), --summary appends a markdown section.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("run_id", nargs="?", metavar="RUN_ID",
                        help="the run to judge (default: the machine's newest history run)")
        add_rule_arguments(ap)
        ap.add_argument("--baseline", type=argparse_type(parse_commit), default=None,
                        help="compare with this commit's runs only")
        add_ci_arguments(ap)
        add_json_argument(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        from pytest_perfgate.cli._out import run_with_json

        if args.report is not None:
            if args.run_id is not None or args.baseline is not None:
                args.parser.error("--report gates the verdicts in a pytest report: give no "
                                  "RUN_ID and no --baseline with it")
        elif args.pytest_exit is not None:
            args.parser.error("--pytest-exit goes with --report (the report that pytest run "
                              "wrote)")
        return run_with_json(args, lambda: cls.gate(args))

    @classmethod
    def gate(cls, args: argparse.Namespace) -> int:
        from pytest_perfgate.cli._ci import emit, gate_report
        from pytest_perfgate.cli._out import verdict_json

        gate = gate_report(args) if args.report is not None else cls.gate_history(args)
        status = emit(args, gate)
        run = getattr(args, "judged_run", None)
        args.json_body = {
            "headline": gate.headline, "passed": status == 0,
            "run": None if run is None else run_json(run),
            "report": None if args.report is None else str(args.report),
            "benchmarks": [verdict_json(j, None if run is None else run.run_id)
                           for j in gate.judged],
            "not_gated": list(gate.not_gated), "problems": list(gate.problems)}
        return status

    @classmethod
    def gate_history(cls, args: argparse.Namespace) -> GateResult:
        """Judge a recorded run (the plugin's rules) and print the verdicts."""
        from pytest_perfgate.report import render
        from pytest_perfgate.report.github import GateResult, not_gated

        found = machine_runs(args)
        if isinstance(found, int):
            return GateResult(found, problems=[args.infra_problem])
        results, machine, runs = found
        if args.run_id is not None and not args.run_id.strip():
            args.parser.error("RUN_ID is empty: give an id printed as 'recorded run RUN_ID' "
                              "(or no RUN_ID: the machine's newest run)")
        if args.run_id is not None and not any(r.run_id == args.run_id for r in runs):
            others = sorted(p.parent.parent.name for p in results.glob(
                f"*/perfgate/{glob.escape(args.run_id)}.pgrun") if p.parent.parent.name !=
                machine) if is_safe_name(args.run_id) else []
            args.parser.error(f"no run {args.run_id!r} of machine {machine!r} in {results}: "
                              + (f"it is a run of machine {others[0]!r}: pass --machine "
                                 f"{others[0]}" if others else
                                 "give an id printed as 'recorded run RUN_ID'"))
        run = pick_run(args, runs, machine, args.run_id, "RUN_ID")
        if isinstance(run, int):
            return GateResult(run, problems=[args.infra_problem])
        if args.baseline is not None:
            check_baseline(args, runs, machine, run)
        args.judged_run = run
        judged = warned(args, lambda: judge_run(args, results, run, args.baseline))
        if not judged:  # the plugin never records such a run: nothing was gated
            return GateResult(_infra(args, f"{describe(run)} holds no benchmark: nothing to "
                                     "judge; give the run to judge as RUN_ID"),
                              problems=[args.infra_problem])
        print(f"perfgate check: {describe(run)}")
        for line in render.table(judged) + render.notes(judged):
            print(line)
        bad = failing(judged)
        for j in bad:
            print()
            print(render.explain(j, run.run_id))
        return GateResult(1 if bad else 0, judged, not_gated=not_gated(judged))


def _no_meter(**_: Any) -> Any:
    raise AssertionError("perfgate check judges recorded runs; it never measures")

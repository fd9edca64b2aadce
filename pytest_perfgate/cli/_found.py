"""The recorded runs, for every command that reads them: where the history is (found as
``pytest --perfgate`` finds it), the machine's runs, the run asked for, each skipped file
named once on stderr, and a run judged again as the plugin judged it (history/judge.py,
core/gate.py), so ``check``, ``compare`` and ``report`` give the same verdicts.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from pytest_perfgate.cli._out import Reply, UsageError
from pytest_perfgate.cli.common_args import from_env, parse_repo
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.core.settings import Settings
from pytest_perfgate.report.series import MachineHistory
from pytest_perfgate.session.options import (
    Options,
    argparse_type,
    parse_alpha,
    parse_fraction,
    parse_machine,
    parse_path,
    parse_policy,
    parse_positive_int,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Where:
    """Where the history is, as given (None: found as pytest --perfgate finds it)."""

    results_dir: str | Path | None = None
    machine: str | None = None
    ini_file: str | Path | None = None  # pytest's -c
    rootdir: str | Path | None = None  # pytest's --rootdir

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Where:
        return cls(args.results_dir, args.machine, args.ini_file, args.rootdir)

    def resolve(self) -> tuple[Path, str | None]:
        """(results dir, machine or None) from the arguments, the environment, then
        defaults; a bad value (a missing -c file, an environment variable) is a usage error."""
        from pytest_perfgate.history.files import default_results_dir

        results = self.results_dir or from_env("PERFGATE_RESULTS_DIR", parse_path)
        machine = self.machine or from_env("PERFGATE_MACHINE", parse_machine)
        if results is not None:
            return Path(results), machine
        from pytest_perfgate.session.naming import project_root

        ini, rootdir = self.ini_file, self.rootdir  # as pytest was given them
        if ini is not None and not Path(ini).is_file():
            raise UsageError(f"-c {str(ini)!r}: no such file; give the ini file pytest "
                             "--perfgate was run with")
        if rootdir is not None and not Path(rootdir).is_dir():
            raise UsageError(f"--rootdir {str(rootdir)!r}: no such folder; give the one "
                             "pytest --perfgate was run with")
        root, settings = project_root(Path.cwd(), Path(ini) if ini else None,
                                      Path(rootdir) if rootdir else None)
        value = settings.get("perfgate_results_dir")
        if isinstance(value, str) and value.strip():
            return root / Path(value.strip()).expanduser(), machine
        try:
            return default_results_dir(root), machine
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot find the history folder: {e}; pass --results-dir") from None


def add_history_arguments(parser: argparse.ArgumentParser) -> None:
    """--results-dir and --machine (:class:`Where`), resolved as the plugin resolves them."""
    parser.add_argument("--results-dir", type=argparse_type(parse_path), default=None,
                        help="the history folder (default: $PERFGATE_RESULTS_DIR, else where "
                        "pytest --perfgate started here keeps it: the perfgate_results_dir of "
                        "pytest's ini file, else asv.conf.json's results_dir, else "
                        ".perfgate/results, beside the ini file or at the git checkout's "
                        "top)")
    parser.add_argument("-c", "--config-file", type=argparse_type(parse_path), default=None,
                        metavar="FILE", dest="ini_file",
                        help="the ini file pytest was given with -c, to find the history "
                        "where that run kept it")
    parser.add_argument("--rootdir", type=argparse_type(parse_path), default=None,
                        help="the --rootdir pytest was given, likewise")
    parser.add_argument("--machine", type=argparse_type(parse_machine), default=None,
                        help="the machine folder (default: $PERFGATE_MACHINE, else every "
                        "machine folder is searched)")


def warned(reply: Reply, call: Callable[[], T]) -> T:
    """``call()``, printing each HistoryWarning (a skipped file, named) as one line on
    stderr instead of Python's warning format, once per command run."""
    from pytest_perfgate.history.files import HistoryWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HistoryWarning)
        try:
            return call()
        finally:
            for w in caught:
                if not issubclass(w.category, HistoryWarning):
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
                elif str(w.message) not in reply.warned:
                    reply.warned.add(str(w.message))
                    print(f"{reply.prog}: warning: {w.message}", file=sys.stderr)


def read_history(where: Where, reply: Reply, history_only: bool = False
                 ) -> MachineHistory | int:
    """The machine's runs (``history_only``: its history-mode runs), or the infrastructure
    status (printed); several machines and none named is a usage error."""
    from pytest_perfgate.history.context import is_history_run
    from pytest_perfgate.history.lookup import HistoryMissing, MachineAmbiguous

    results, machine = where.resolve()
    try:
        return warned(reply, lambda: MachineHistory.load(
            results, machine, is_history_run if history_only else lambda r: True))
    except MachineAmbiguous as e:
        raise UsageError(str(e)) from None
    except HistoryMissing as e:
        return reply.infra(str(e))


def no_history_run(where: str, skipped: int) -> str:
    """The one wording of 'this machine has runs, but none of the history mode'."""
    return (f"{where} has no readable history-mode run"
            + (f" ({skipped} A/B run(s) are not a history)" if skipped else "")
            + ": record runs with `pytest --perfgate` first")


def pick_run(h: MachineHistory, repo: Path, wanted: str | None, what: str, reply: Reply
             ) -> RunRecord | int:
    """The newest history-mode run (``wanted`` None), the run with that id, or the newest
    run of the commit that ``wanted`` prefixes or git resolves it to in ``repo``; the infra
    exit status when there is none."""
    from pytest_perfgate.history.context import is_history_run
    from pytest_perfgate.report.series import hidden_message, hidden_newest

    mine = [r for r in h.runs if is_history_run(r)]
    if wanted is None:
        if not mine:
            return reply.infra(f"machine {h.machine!r} has no recorded history-mode run")
        newest = max(mine, key=lambda r: r.started_at)
        hidden = hidden_newest(h.unreadable, newest)
        if hidden is not None:
            return reply.infra(hidden_message(hidden, newest))
        return newest
    if not wanted.strip():
        raise UsageError(f"{what} is empty: give an id printed as 'recorded run RUN_ID' or a "
                         "commit hash (prefix) of a recorded run")
    found = [r for r in h.runs if r.run_id == wanted] or \
        [r for r in mine if r.commit.startswith(wanted.lower())]
    if not found:
        found = _by_revision(repo, mine, h.machine, wanted, what)
    skipped = h.unreadable
    if not found and skipped:  # the run may be in what could not be read: not a usage error
        return reply.infra(f"{what} {wanted!r}: no readable run of machine {h.machine!r} has "
                           f"that id or commit, and {len(skipped)} history file(s) could not "
                           f"be read ({', '.join(str(u.path) for u in skipped[:3])}): the run "
                           "may be in them; fix or move them (see the warnings above)")
    if not found:
        raise UsageError(f"{what} {wanted!r}: no run of machine {h.machine!r} has that id or "
                         "commit, and git does not know it as a revision in "
                         f"{repo} (--repo): give an id printed as 'recorded run "
                         "RUN_ID', a commit hash (prefix) of a recorded run, or a branch, "
                         "tag or revision such as HEAD~1")
    if len({r.commit for r in found}) > 1:
        raise UsageError(f"{what} {wanted!r} matches several recorded commits: give more "
                         "digits")
    run = max(found, key=lambda r: r.started_at)
    if not is_history_run(run):
        raise UsageError(f"run {run.run_id} was measured in the A/B mode: its verdict was a "
                         "paired comparison; only history-mode runs can be judged again")
    return run


def _by_revision(repo: Path, mine: list[RunRecord], machine: str, wanted: str, what: str
                 ) -> list[RunRecord]:
    """The runs of the commit git resolves ``wanted`` to (a branch, tag, HEAD~1: what
    ``--perfgate-ab`` takes); [] when git does not know it; a usage error when git knows it
    but no run of that commit is recorded."""
    from pytest_perfgate.history.vcs import resolve_commit

    full = resolve_commit(repo, wanted.strip())
    if full is None:
        return []
    found = [r for r in mine if r.commit == full]
    if not found:
        raise UsageError(f"{what} {wanted!r} is commit {full[:10]} in {repo}, but "
                         f"machine {machine!r} has no history-mode run of it: record one "
                         f"(git checkout {full[:10]} && pytest --perfgate), or give a "
                         "recorded commit")
    return found


_D = Options()


@dataclass(frozen=True)
class Judging:
    """The gate's rule, with the plugin's defaults, and the git checkout that answers
    ancestry (a wrong one judges the run as recorded outside git)."""

    repo: Path = field(default_factory=Path.cwd)
    threshold: float | None = None  # None: the threshold each benchmark was recorded with
    alpha: float = _D.alpha
    baseline_runs: int = _D.baseline_runs
    unstable: str = _D.unstable
    inconclusive: str = _D.inconclusive

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Judging:
        return cls(args.repo, args.threshold, args.alpha, args.baseline_runs, args.unstable,
                   args.inconclusive)

    def settings(self, baseline: str | None = None) -> Settings:
        """The gate's settings, resolved as the plugin resolves them (``baseline``: the
        commit whose runs alone may judge); --threshold is not among them: it goes over
        each benchmark's own (:func:`judge_run`)."""
        return replace(_D, alpha=self.alpha, baseline_runs=self.baseline_runs,
                       unstable=self.unstable, inconclusive=self.inconclusive,
                       baseline=baseline).settings(rejudging=True)


def add_rule_arguments(ap: argparse.ArgumentParser) -> None:
    """The history's place and :class:`Judging` (the same converters as the options)."""
    add_history_arguments(ap)
    ap.add_argument("--repo", type=argparse_type(parse_repo), default=Path.cwd(),
                    help="the git checkout whose history decides ancestry (default: here)")
    ap.add_argument("--threshold", type=argparse_type(parse_fraction), default=None,
                    help="throughput drop that fails (default: the threshold each "
                    "benchmark was judged at when it was recorded, i.e. its marker or the "
                    f"project's perfgate_threshold; {_D.settings().threshold:.0%} for a run "
                    "recorded without one)".replace("%", "%%"))
    ap.add_argument("--alpha", type=argparse_type(parse_alpha), default=_D.alpha,
                    help=f"one-sided significance level (default {_D.alpha})")
    ap.add_argument("--baseline-runs", type=argparse_type(parse_positive_int),
                    default=_D.baseline_runs,
                    help=f"newest N runs form the baseline (default {_D.baseline_runs})")
    for what, default in (("unstable", _D.unstable), ("inconclusive", _D.inconclusive)):
        ap.add_argument(f"--{what}", type=argparse_type(parse_policy("fail", "warn")),
                        default=default, metavar="{fail,warn}",
                        help=f"{what.upper()} verdicts: fail or warn "
                        f"(default {default})")


def judge_run(judging: Judging, results: Path, run: RunRecord, baseline: str | None,
              prog: str, before: bool = True, serve_anyway: Collection[str] = ()
              ) -> list[Judged]:
    """Every benchmark of ``run`` judged by the plugin's history rules; the runs
    ``serve_anyway`` serve as a baseline though they failed the gate (compare
    --failed-base)."""
    from pytest_perfgate.history.context import HistoryContext
    from pytest_perfgate.history.judge import HistoryJudge
    from pytest_perfgate.history.vcs import NO_COMMIT

    ctx = HistoryContext.for_run(results, run, judging.repo, before=before)
    if not ctx.git.available and run.commit != NO_COMMIT:  # a wrong --repo: say what it does
        print(f"{prog}: warning: commit {run.commit[:10]} of run {run.run_id} is not in the "
              f"repository at {judging.repo} (--repo), so ancestry cannot be asked and the "
              "runs of every other commit count as its baseline: pass the checkout the runs "
              "were recorded from, e.g. --repo .", file=sys.stderr)
    for run_id in serve_anyway:
        ctx.decisions = type(ctx.decisions)(ctx.decisions.accepted | {run_id},
                                            ctx.decisions.forgotten - {run_id})
    settings = judging.settings(baseline)
    judge = HistoryJudge(lambda: ctx, settings)
    judged: list[Judged] = []
    for name in sorted(run.benchmarks):
        b = run.benchmarks[name]  # judged at --threshold, else the threshold it was recorded at
        j = judge.judge(b, name, settings.rule(judging.threshold, b.threshold))
        j.where = b.where  # at its test
        judged.append(j)
    return judged


def describe(run: RunRecord) -> str:
    return (f"run {run.run_id} of machine {run.machine!r}, commit {run.commit[:10]}"
            f"{' (dirty)' if run.dirty else ''}")


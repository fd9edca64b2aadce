"""``perfgate bisect GOOD BAD [pytest args]``: which commit cost the throughput.

A binary search over the first-parent commits after GOOD up to BAD, each probe the
interleaved A/B comparison of the candidate with the known-good end (docs/bisect.md): the
search in :mod:`.search` (probe injected), the real probe and the input checks in
:mod:`.probe`, what is printed and the exit status in :mod:`.wording`.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._out import UsageError
from pytest_perfgate.cli.common_args import parse_count
from pytest_perfgate.session.options import (
    AB_THRESHOLD,
    Options,
    argparse_type,
    parse_command,
    parse_fraction,
    parse_positive_int,
    parse_seconds,
    parse_turns,
)


class Bisect(Command):
    name = "bisect"
    help = "find the commits that cost throughput (interleaved A/B probes, binary search)"
    description = (
        "Binary search over the first-parent commits after GOOD up to BAD. Every probe is the "
        "interleaved A/B comparison (pytest --perfgate --perfgate-ab BASE) of a candidate "
        "with the known-good end, so the machine's drift cancels. Commits where the test is "
        "missing or the set-up fails are skipped; inconclusive probes get twice the turns, "
        "then are stepped over; each step above the threshold is reported with its own ratio "
        "against its neighbour and the command to reproduce it. Options go before GOOD; "
        "everything after BAD goes to pytest (e.g. perfgate bisect v1.2 HEAD perf/ -k "
        "humanoid). Exit 0 when every step found is named, 1 when GOOD and BAD do not differ "
        "or a verdict stayed inconclusive, 2 on a usage error, 3 when the ends could not be "
        "measured, 130 when stopped (Ctrl-C, SIGTERM; the worktrees are removed).")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("good", metavar="GOOD", help="a commit known to be fast enough")
        ap.add_argument("bad", metavar="BAD", help="a later commit known to be slower")
        ap.add_argument("pytest_args", metavar="PYTEST_ARGS", nargs=argparse.REMAINDER,
                        help="tests to run and pytest options (select one perf test or a "
                        "few: every probe runs them all)")
        ap.add_argument("--threshold", type=argparse_type(parse_fraction), default=None,
                        help=f"throughput drop that makes a commit bad (default "
                        f"{AB_THRESHOLD:.0%}, the A/B mode's)".replace("%", "%%"))
        ap.add_argument("--turns", type=argparse_type(parse_turns), default=96,
                        help="A/B turns per side in a probe (default 96)")
        ap.add_argument("--turn-time", type=argparse_type(parse_seconds), default=0.1,
                        help="seconds per A/B turn (default 0.1)")
        ap.add_argument("--retries", type=argparse_type(parse_count), default=2,
                        help="an inconclusive probe is run again this many times, with "
                        "twice the turns each time (default 2)")
        ap.add_argument("--max-probes", type=argparse_type(parse_positive_int), default=64,
                        help="stop after this many probes (default 64)")
        ap.add_argument("--setup", type=argparse_type(parse_command), default=None,
                        help="shell command run in each checked-out commit before it is "
                        "measured, building in place (e.g. 'make build'); a failure skips the "
                        "commit")
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        return run(args.good, args.bad, args.pytest_args, threshold=args.threshold,
                   turns=args.turns, turn_time=args.turn_time, retries=args.retries,
                   max_probes=args.max_probes, setup=args.setup)


def _subjects(repo: Path, good: str, bad: str) -> dict[str, str]:
    import subprocess

    p = subprocess.run(["git", "log", "--first-parent", "--format=%H %s", f"{good}^!", bad],
                       cwd=repo, capture_output=True, text=True)
    out = {}
    for line in p.stdout.splitlines():
        h, _, s = line.partition(" ")
        out[h] = s
    return out


def run(good_rev: str, bad_rev: str, pytest_args: Sequence[str] = (), *,
        threshold: float | None = None, turns: int = 96, turn_time: float = 0.1,
        retries: int = 2, max_probes: int = 64, setup: str | None = None) -> int:
    """``perfgate bisect``, in the git checkout here: the exit status (:mod:`.wording`)."""
    from pytest_perfgate.cli.bisect import probe as probes

    repo = Path.cwd()
    with contextlib.ExitStack() as held:
        try:
            good, bad, commits = probes.commit_range(repo, good_rev, bad_rev)
            held.enter_context(probes.one_at_a_time(repo))
        except probes.RangeError as e:
            raise UsageError(str(e)) from None
        return _bisect(repo, good, bad, commits, good_rev, bad_rev, pytest_args,
                       threshold=threshold, turns=turns, turn_time=turn_time, retries=retries,
                       max_probes=max_probes, setup=setup)


def _bisect(repo: Path, good: str, bad: str, commits: list[str], good_rev: str,
            bad_rev: str, pytest_args: Sequence[str], *, threshold: float | None,
            turns: int, turn_time: float, retries: int, max_probes: int,
            setup: str | None) -> int:
    """The search itself, once the range is checked and the repository is this run's."""
    from pytest_perfgate.cli.bisect import probe as probes
    from pytest_perfgate.cli.bisect import wording
    from pytest_perfgate.cli.bisect.search import Bisector, estimate_probes
    from pytest_perfgate.history.vcs import toplevel
    from pytest_perfgate.modes.place import Place
    from pytest_perfgate.report.readback import read_report

    labels = {good: good_rev, bad: bad_rev}
    threshold = Options(threshold=threshold, ab=good).settings().threshold  # A/B's default
    total, tests = estimate_probes(len(commits)), list(pytest_args)
    print(f"perfgate bisect: {len(commits)} first-parent commits after GOOD "
          f"{wording.short(good, labels)} up to BAD {wording.short(bad, labels)}; each probe "
          f"compares a commit with the known-good end in interleaved A/B turns "
          f"({turns} turns x {turn_time:g} s per side, threshold {threshold:.0%})",
          flush=True)
    print(wording.estimate(len(commits), total, wording.probe_guess_s(turns, turn_time),
                           measured=False), flush=True)
    start = time.monotonic()
    state: dict[str, Any] = {"bisector": None}

    def on_probe(n: int, commit: str, base: str, turns: int, p: Any, status: Any) -> None:
        b = state["bisector"]
        tracked = b.result.tracked if b is not None else ()
        print(wording.probe_line(n, total, commit, base, turns, p, labels, tracked,
                                 time.monotonic() - start, status), flush=True)
        if p is not None and n == 1 and p.failure is None:
            print(wording.estimate(len(commits), total, p.seconds, measured=True), flush=True)

    try:
        with probes.head_worktree(repo) as workdir:
            # The threshold always given: a project's ini may set another one.
            # Each probe's pytest finds its own ini file and rootdir, from the same folder.
            top = toplevel(repo) or repo
            place = Place.of(top, repo, repo)
            # the flame graphs of a probe that found a step outlive the probe's own folder
            profiles = top / ".perfgate" / "profiles" / time.strftime("bisect-%Y%m%d-%H%M%S")
            probe = probes.PytestProbe(workdir, tests, read_report, threshold=threshold,
                                       turn_s=turn_time, setup=setup, place=place,
                                       profile_dir=profiles)
            bisector = Bisector(good, bad, commits, probe, turns, retries=retries,
                                max_probes=max_probes, on_probe=on_probe,
                                threshold=threshold)
            state["bisector"] = bisector
            result = bisector.run()
    except KeyboardInterrupt:
        done = len(state["bisector"].result.probes) if state["bisector"] else 0
        print(wording.interrupted(done, time.monotonic() - start), flush=True)
        return wording.EXIT_INTERRUPTED
    for line in wording.summary(result, labels, _subjects(repo, good, bad), threshold,
                                time.monotonic() - start, tests):
        print(line)
    return wording.exit_status(result)

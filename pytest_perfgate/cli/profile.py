"""``perfgate profile BASE HEAD [pytest args]``: why HEAD is slower than BASE, per function.

The A/B mode with ``--perfgate-profile``: both revisions' sides measured in interleaved
turns, then profiled by py-spy in interleaved turns and subtracted (docs/profile.md). HEAD
``.`` is the working tree as it is; another HEAD is checked out into a worktree, and pytest
starts at the same place in it as here (as bisect's probes do).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._out import PYTEST_USAGE_ERROR, UsageError, inner_usage_error
from pytest_perfgate.core import group
from pytest_perfgate.session.options import argparse_type, parse_path, parse_rev, parse_turns

EXIT_PROFILED = 0  # every benchmark measured has its profile
EXIT_NONE = 3  # nothing measured, or py-spy could not sample


class Profile(Command):
    name = "profile"
    help = "profile two revisions in interleaved turns and name the functions that grew"
    description = (
        "Measure BASE and HEAD in interleaved A/B turns (pytest --perfgate --perfgate-ab "
        "BASE --perfgate-profile), then sample both with py-spy in interleaved turns and "
        "subtract: per function, time per unit of work (env-step, call) on each side, its "
        "self and total growth, and its share of the growth; flame graph files (collapsed "
        "stacks) per side and their difference. HEAD '.' is the working tree with its "
        "uncommitted changes. Everything after HEAD goes to pytest (e.g. perfgate profile "
        "main . perf/ -k walker). Exit 0 when every benchmark measured was profiled, 2 on a "
        "usage error, 3 when nothing was measured or py-spy could not sample.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("base", metavar="BASE", type=argparse_type(parse_rev),
                        help="the revision to compare with (branch, tag, commit)")
        ap.add_argument("head", metavar="HEAD",
                        help="the revision to profile against it; '.' for the working tree")
        ap.add_argument("pytest_args", metavar="PYTEST_ARGS", nargs=argparse.REMAINDER,
                        help="tests to run and pytest options")
        ap.add_argument("--out", type=argparse_type(parse_path), default=None,
                        help="folder for the report and flame graphs (default "
                        ".perfgate/profiles/<BASE>..<HEAD>)")
        ap.add_argument("--turns", type=argparse_type(parse_turns), default=16,
                        help="A/B turns per side of the comparison before the profile "
                        "(default 16: the profile needs the sides warm, not a verdict)")
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        return run(args.base, args.head, args.pytest_args, out=args.out, turns=args.turns)


def run(base: str, head: str = ".", pytest_args: Sequence[str] = (), *,
        out: str | Path | None = None, turns: int = 16) -> int:
    """``perfgate profile``, in the git checkout here: the exit status."""
    from pytest_perfgate.history.vcs import git_info, resolve_commit, toplevel
    from pytest_perfgate.profile.text import lines
    from pytest_perfgate.report.readback import read_report

    repo = Path.cwd()
    if not git_info(repo).available:
        raise UsageError(f"{repo} is not a git checkout: perfgate profile checks the "
                         "revisions out with git")
    commit = None if head == "." else resolve_commit(repo, parse_rev(head))
    if head != "." and commit is None:
        raise UsageError(f"HEAD {head!r}: not a commit of this repository; give a "
                         "branch, tag or hash that git rev-parse resolves, or '.' for "
                         "the working tree")
    base_commit = resolve_commit(repo, base)
    if base_commit is None:
        raise UsageError(f"BASE {base!r}: not a commit of this repository; give a "
                         "branch, tag or hash that git rev-parse resolves")
    label = f"{base}..{head if commit is None else commit[:10]}"
    folder = Path(out) if out else \
        (toplevel(repo) or repo) / ".perfgate" / "profiles" / _safe(label)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--out {folder}: is a file, and the report and flame graphs need a "
                         "folder: name a folder (new or existing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {folder}: cannot be made ({e.strerror or e}): name a folder "
                         "you can write, e.g. --out /tmp/profiles") from None
    report = folder / "report.json"
    report.unlink(missing_ok=True)
    opts = ["--perfgate", f"--perfgate-ab={base}", f"--perfgate-ab-turns={turns}",
            "--perfgate-ab-looks=1", "--perfgate-profile", "--perfgate-record=false",
            f"--perfgate-profile-dir={folder}", f"--perfgate-json={report}"]
    print(f"perfgate profile: base {_named(base, base_commit)} -> head "
          f"{'the working tree' if commit is None else _named(head, commit)}; the report and "
          f"flame graphs go to {folder}", flush=True)
    if commit is None:
        done = group.run_argv([sys.executable, "-m", "pytest", *opts, *pytest_args],
                              group.NESTED_STOP_S, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
        rc, output = done.returncode, done.stdout + done.stderr
    else:
        rc, output = _in_worktree(repo, commit, opts, pytest_args)
    if rc == PYTEST_USAGE_ERROR:
        raise UsageError(inner_usage_error(output))
    try:
        judged = read_report(report) if report.exists() else []
    except (OSError, ValueError) as e:
        print(f"perfgate profile: the report {report} could not be read ({e})")
        return EXIT_NONE
    if not judged:
        print("perfgate profile: nothing was measured; pytest said:\n"
              + "\n".join(output.strip().splitlines()[-25:]))
        return EXIT_NONE
    status = EXIT_PROFILED
    for j in judged:
        v = j.verdict
        print(f"{j.name}: {v.outcome.value if v else 'no verdict'}"
              + (f", ratio {v.ratio:.3f}" if v and v.ratio is not None else ""))
        profile = j.result.extra.get("profile")
        if not isinstance(profile, dict) or "error" in profile:
            status = EXIT_NONE
        for line in lines(profile) if isinstance(profile, dict) else ["no profile taken"]:
            print(f"  {line}")
    return status


def _named(rev: str, commit: str) -> str:
    """A revision as the user gave it, with its commit unless it is that commit's hash."""
    return commit[:10] if commit.startswith(rev.lower()) else f"{rev} ({commit[:10]})"


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)[:120]


def _in_worktree(repo: Path, head: str, opts: list[str], pytest_args: Sequence[str]
                 ) -> tuple[int, str]:
    """pytest at the same place in a worktree of ``head`` as here: its exit status and
    output."""
    from pytest_perfgate.history.vcs import toplevel
    from pytest_perfgate.modes.ab.controller import PLUGIN_ROOT, worktree
    from pytest_perfgate.modes.place import Place

    place = Place.of(toplevel(repo) or repo, repo, repo)
    with worktree(place.top, head, "HEAD") as tree:
        cwd = place.at(place.cwd, tree)
        cwd.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS",)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (
            str(tree / "src"), str(tree),
            place.pythonpath(os.environ.get("PYTHONPATH", ""), tree)) if p)
        boot = (f"import sys; sys.path.insert(0, {PLUGIN_ROOT!r}); "
                "import pytest_perfgate.plugin.hooks; "
                "sys.path.pop(0); import pytest; sys.exit(pytest.main(sys.argv[1:]))")
        with tempfile.TemporaryFile() as log:
            done = group.run_argv([sys.executable, "-c", boot, *opts,
                                   *place.map_args(pytest_args, tree)], group.NESTED_STOP_S,
                                  cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
            log.seek(0)
            return done.returncode, log.read().decode(errors="replace")

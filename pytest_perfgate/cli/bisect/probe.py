"""A bisection probe on real commits: the candidate checked out into one reused worktree,
compared with the base by the A/B mode itself (``pytest --perfgate --perfgate-ab BASE``),
its verdicts read back from ``--perfgate-json`` (docs/bisect.md).

:func:`commit_range` checks the input before any worktree exists: both revisions resolve,
the working tree is clean, GOOD is an ancestor of BAD, the range is not empty.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_perfgate.cli._out import (
    MISSING_PATH,
    PYTEST_USAGE_ERROR,
    UsageError,
    inner_usage_error,
)
from pytest_perfgate.cli.bisect.search import Probe, Reading
from pytest_perfgate.core import group
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.envs.build import ENV_REFERENCE
from pytest_perfgate.modes.ab.checkout import BISECT_PREFIX, term_as_interrupt
from pytest_perfgate.modes.ab.checkout import worktree as _worktree
from pytest_perfgate.modes.ab.controller import PLUGIN_ROOT
from pytest_perfgate.modes.place import Place

TAIL_CHARS = 800
# Settings that would make a probe's pytest do something other than the comparison asked.
_ENV_DROP = ("PERFGATE_AB", "PERFGATE_BASELINE", "GITHUB_STEP_SUMMARY", "PYTEST_ADDOPTS")


class RangeError(ValueError):
    """GOOD..BAD cannot be bisected (the message names the value and the fix)."""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})


def commit_range(repo: Path, good: str, bad: str) -> tuple[str, str, list[str]]:
    """Full hashes of GOOD and BAD and the first-parent commits after GOOD up to BAD,
    oldest first; RangeError on bad input."""
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise RangeError(f"{repo} is not a git checkout: run perfgate bisect inside the "
                         "repository whose history to search")
    hashes = []
    for label, rev in (("GOOD", good), ("BAD", bad)):
        p = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        if rev.startswith("-") or p.returncode != 0:
            raise RangeError(f"{label} {rev!r} is not a commit of this repository: give a "
                             "branch, tag or hash that `git rev-parse` resolves")
        hashes.append(p.stdout.strip())
    g, b = hashes
    dirty = _git(repo, "status", "--porcelain", "--untracked-files=no")
    if dirty.returncode != 0 or dirty.stdout.strip():
        files = ", ".join(line[3:] for line in dirty.stdout.splitlines()[:5])
        raise RangeError(f"the working tree has uncommitted changes ({files}): commit them "
                         "or check out a clean tree first (bisect measures commits, and "
                         "the commands it prints must reproduce what it measured)")
    if g == b:
        raise RangeError(f"GOOD {good!r} and BAD {bad!r} are the same commit "
                         f"({g[:10]}): there is nothing between them to search")
    if _git(repo, "merge-base", "--is-ancestor", g, b).returncode != 0:
        raise RangeError(f"GOOD {good!r} ({g[:10]}) is not an ancestor of BAD {bad!r} "
                         f"({b[:10]}): give an older commit of BAD's history as GOOD (did "
                         "you swap them?)")
    listed = _git(repo, "rev-list", "--first-parent", "--reverse", f"{g}..{b}", "--")
    commits = listed.stdout.split()
    if listed.returncode != 0 or not commits:
        raise RangeError(f"no first-parent commits after GOOD {good!r} up to BAD {bad!r}: "
                         "the range is empty")
    return g, b, commits


LOCK_NAME = "perfgate-bisect.lock"  # in the repository's git folder, shared by worktrees


@contextlib.contextmanager
def one_at_a_time(repo: Path) -> Iterator[None]:
    """Hold the repository's bisection lock, or raise RangeError naming the holder.

    Two bisections of one repository would measure each other's load, one probe's side
    processes beside the other's; the kernel's lock (flock) ends with its holder, so a
    killed run never blocks the next one.
    """
    import fcntl

    common = _git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
    path = Path(common.stdout.strip()) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:  # a read-only repository: nothing to share it with
        raise RangeError(f"cannot create {path} ({e.strerror}): run perfgate bisect in a "
                         "repository you can write to") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").split()
            who = f" (pid {holder[0]})" if holder and holder[0].isdigit() else ""
            raise RangeError(f"another perfgate bisect{who} is running in this repository: "
                             "two at once measure each other's load; wait for it to end or "
                             f"stop it{' (kill -INT ' + holder[0] + ')' if who else ''}, "
                             "then start again") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def head_worktree(repo: Path) -> Iterator[Path]:
    """The one worktree every candidate is checked out into (removed afterwards, also on
    SIGTERM; a SIGKILLed run's is swept at the next start, as the A/B mode's are)."""
    restore = term_as_interrupt()
    # In a folder of its own, not the temp dir's top: it lives for the whole bisection, and a
    # sweep of the temp dir's worktree folders by any other run must not reach it. A SIGKILLed
    # run's is still found, through `git worktree list`.
    parent = Path(tempfile.mkdtemp(prefix=BISECT_PREFIX))
    try:
        with _worktree(repo, "HEAD", parent) as path:
            yield path
    finally:
        shutil.rmtree(parent, ignore_errors=True)
        restore()


class PytestProbe:
    """Compare a commit with a base: the A/B mode run by pytest in the candidate's worktree.

    ``read`` reads the JSON report back (``pytest_perfgate.report.readback.read_report``;
    injected, since the report layer sits beside this one). ``setup`` runs in the
    candidate's worktree before the comparison and is passed on as ``--perfgate-ab-setup``
    for the base's: a failure skips the commit, like a failed build under ``git bisect``.
    ``place``: where the user started the bisection; each probe's pytest starts at the same
    place in the worktree, with absolute paths into the repository moved there too.
    ``profile_dir``: where each probe's flame graphs go (a folder per comparison), as the
    probe's own folder is removed with it.
    """

    def __init__(self, workdir: Path, pytest_args: Sequence[str], read:
                 Callable[[Path], Sequence[Judged]], threshold: float | None = None,
                 turn_s: float | None = None, setup: str | None = None,
                 python: str = sys.executable, log: Callable[[str], None] | None = None,
                 place: Place | None = None, profile_dir: Path | None = None) -> None:
        self.workdir = workdir
        self.profile_dir = profile_dir
        self.place = place
        self.pytest_args = list(pytest_args)
        self.read = read
        self.threshold = threshold
        self.turn_s = turn_s
        self.setup = setup
        self.python = python
        self.log = log or (lambda text: None)

    def options(self, base: str, turns: int) -> list[str]:
        """The perfgate options of one comparison (also in the reproduce command)."""
        opts = ["--perfgate", f"--perfgate-ab={base}", f"--perfgate-ab-turns={turns}"]
        if self.turn_s is not None:
            opts.append(f"--perfgate-ab-turn-time={self.turn_s:g}")
        if self.threshold is not None:
            opts.append(f"--perfgate-threshold={self.threshold * 100:g}%")
        if self.setup:
            opts.append(f"--perfgate-ab-setup={self.setup}")
        return opts

    def command(self, commit: str, base: str, turns: int) -> str:
        """How to run this comparison by hand, from a clean checkout of the repository."""
        setup = f" && {self.setup}" if self.setup else ""
        return (f"git checkout --detach {commit[:12]}{setup} && python -m pytest "
                + shlex.join([*self.options(base[:12], turns), *self.pytest_args]))

    def __call__(self, commit: str, base: str, turns: int) -> Probe:
        start = time.monotonic()
        cmd = self.command(commit, base, turns)

        def skipped(why: str) -> Probe:
            return Probe(commit, base, turns, failure=why,
                         seconds=time.monotonic() - start, command=cmd)

        co = _git(self.workdir, "checkout", "--force", "--quiet", "--detach", commit)
        if co.returncode != 0:
            return skipped(f"could not check the commit out: {co.stderr.strip()[-TAIL_CHARS:]}")
        _git(self.workdir, "clean", "-fdq")
        cwd = self.workdir
        if self.place is not None:
            cwd = self.place.at(self.place.cwd, self.workdir)
            cwd.mkdir(parents=True, exist_ok=True)  # a folder this commit does not have yet
        if self.setup:
            built = group.run(self.setup, self.workdir)
            if built.returncode != 0:
                return skipped(f"the set-up command {self.setup!r} failed here (exit "
                               f"{built.returncode}): {_tail(built.stdout + built.stderr)}")
        # beside the worktree: a killed run's report goes when its worktree is swept
        with tempfile.TemporaryDirectory(prefix="probe-", dir=self.workdir.parent) as tmp:
            report = Path(tmp) / "report.json"
            words = (self.pytest_args if self.place is None
                     else self.place.map_args(self.pytest_args, self.workdir))
            kept = [] if self.profile_dir is None else [
                f"--perfgate-profile-dir={self.profile_dir / f'{commit[:10]}-vs-{base[:10]}'}"]
            rc, output = self._pytest([*self.options(base, turns),
                                       f"--perfgate-json={report}", "--perfgate-record=false",
                                       *kept, "-p", "no:cacheprovider", *words], cwd)
            judged: Sequence[Judged] = ()
            if report.exists():
                try:
                    judged = self.read(report)
                except (OSError, ValueError) as e:
                    return skipped(f"its JSON report could not be read ({e})")
        readings = {j.name: Reading(j.verdict.outcome.value, j.verdict.ratio,
                                           j.verdict.ci, j.verdict.message,
                                           _profile(j.result.extra.get("profile")))
                    for j in judged if j.verdict is not None}
        if not readings and rc == PYTEST_USAGE_ERROR and MISSING_PATH not in output:
            # an option or value pytest refuses: every probe would say the same (a test file
            # missing at this commit is that commit's, and skips it)
            raise UsageError(inner_usage_error(output))
        if not readings:
            error = _test_error(output)
            return skipped(f"the test failed here before it was judged: {error}" if error
                           else f"pytest measured nothing (exit {rc}): {_tail(output)}")
        return Probe(commit, base, turns, readings, seconds=time.monotonic() - start,
                     command=cmd)

    def _pytest(self, args: list[str], cwd: Path) -> tuple[int, str]:
        """Run the comparison in ``cwd``; on Ctrl-C or SIGTERM stop it (it ends its sides
        and removes its base worktree), bounded, then re-raise."""
        env = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
        if self.place is not None:  # this environment was installed for the user's checkout:
            # a candidate whose declarations differ from it runs in its own (envs/build.py)
            env.setdefault(ENV_REFERENCE, str(self.place.top))
        head = str(self.workdir)
        inherited = os.environ.get("PYTHONPATH", "")
        if self.place is not None and inherited:
            inherited = self.place.pythonpath(inherited, self.workdir)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(Path(head) / "src"), head, inherited) if p)
        # As the A/B sides do: the controller's copy of pytest_perfgate, the project from cwd.
        boot = (f"import sys; sys.path.insert(0, {PLUGIN_ROOT!r}); "
                "import pytest_perfgate.plugin.hooks; "
                "sys.path.pop(0); import pytest; sys.exit(pytest.main(sys.argv[1:]))")
        with tempfile.TemporaryFile() as out:
            proc = group.popen([self.python, "-c", boot, *args], cwd=cwd, env=env,
                               stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            try:
                rc = proc.wait()
            except BaseException:
                _stop(proc)
                raise
            out.seek(0)
            return rc, out.read().decode(errors="replace")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The probe's pytest ends its sides and removes its base worktree on SIGTERM: given
    the time for that, then killed with its group."""
    group.stop(proc, term_wait=group.NESTED_STOP_S)
    group.reap(proc)  # anything of its group that outlived it


def _profile(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _test_error(output: str) -> str | None:
    """The error a failed test ended with (pytest's ``E`` lines), when it says one."""
    said = [line[1:].strip() for line in output.splitlines()
            if line.startswith("E ") and line[1:].strip()]
    if not said:
        return None
    text = " ".join(said[-3:])
    return text if len(text) <= 300 else text[:297] + "..."


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= TAIL_CHARS else "..." + text[-TAIL_CHARS:]

"""What commit a run measured, and which recorded commits lie on HEAD's history.

The gate only compares against ancestors of HEAD so that one pull request's runs never
become another's baseline. Everything here shells out to the ``git`` binary with a
timeout and degrades to "unknown" instead of raising: a missing git, a tarball checkout or
a broken repository must never turn into a failed benchmark.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

NO_COMMIT = "0" * 40
GIT_TIMEOUT_S = 30.0
# One `rev-list` over HEAD's history is cheap up to this many commits; beyond that we ask
# per commit (merge-base --is-ancestor), which is bounded by how many commits we hold.
REV_LIST_LIMIT = 20000


@dataclass(frozen=True)
class GitInfo:
    """The revision a run measured. ``available`` is False outside git (commit is zeros)."""

    commit: str
    branch: str | None
    dirty: bool
    commit_date_ms: int
    available: bool
    reason: str | None = None  # why git was unavailable, e.g. "detected dubious ownership"


def _git(cwd: str | os.PathLike[str], *args: str) -> subprocess.CompletedProcess[str] | None:
    """Run git; None when git is missing, hangs or cannot start (never raises)."""
    exe = shutil.which("git")
    if exe is None:
        return None
    env = dict(os.environ)
    env["GIT_TERMINAL_PROMPT"] = "0"  # never wait for credentials on a CI box
    env.setdefault("LC_ALL", "C")
    try:
        return subprocess.run([exe, *args], cwd=os.fspath(cwd), env=env, capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _out(cwd: str | os.PathLike[str], *args: str) -> str | None:
    """Stripped stdout of a successful git command, else None."""
    proc = _git(cwd, *args)
    if proc is None or proc.returncode != 0:
        return None
    return proc.stdout.strip()


def _env_branch() -> str | None:
    """CI checkouts are usually detached; the CI names the branch instead."""
    for var in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BRANCH_NAME"):
        value = os.environ.get(var)
        if value:
            return value
    return None


def git_info(cwd: str | os.PathLike[str]) -> GitInfo:
    """Commit, branch, dirty flag and commit date of the checkout at ``cwd``.

    Dirty ignores untracked files: result folders, caches and build outputs are untracked
    and would otherwise mark every run dirty.
    """
    if not Path(cwd).is_dir():
        return GitInfo(NO_COMMIT, None, False, 0, False, f"{cwd} is not a folder")
    proc = _git(cwd, "rev-parse", "--verify", "HEAD^{commit}")
    if proc is None:
        return GitInfo(NO_COMMIT, None, False, 0, False, "no usable git executable")
    commit = proc.stdout.strip()
    if proc.returncode != 0 or len(commit) < 40:
        lines = proc.stderr.strip().splitlines()
        why = lines[0].removeprefix("fatal: ") if lines else "no commit"
        if _out(cwd, "rev-parse", "--git-dir") is not None:
            why = "the repository has no commit yet"
        return GitInfo(NO_COMMIT, None, False, 0, False, why)
    branch = _out(cwd, "rev-parse", "--abbrev-ref", "HEAD")
    if not branch or branch == "HEAD":  # detached HEAD
        branch = _env_branch()
    status = _git(cwd, "status", "--porcelain", "--untracked-files=no")
    dirty = status is not None and (status.returncode != 0 or bool(status.stdout.strip()))
    # Author date in ms, exactly what asv's git plugin records as a result's "date".
    date = _out(cwd, "rev-list", "-n", "1", "--format=%at", commit)
    try:
        date_ms = int(date.split()[-1]) * 1000 if date else 0
    except ValueError:
        date_ms = 0
    return GitInfo(commit, branch, dirty, date_ms, True)


def toplevel(cwd: str | os.PathLike[str]) -> Path | None:
    """The top folder of the git checkout holding ``cwd`` (resolved), or None outside git."""
    if not Path(cwd).is_dir():
        return None
    top = _out(cwd, "rev-parse", "--show-toplevel")
    return Path(top).resolve() if top else None


def resolve_commit(cwd: str | os.PathLike[str], name: str) -> str | None:
    """Full hash for a commit-ish (branch, tag, prefix), or None when git cannot resolve it."""
    if not name or name.startswith("-"):
        return None
    return _out(cwd, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")


SHALLOW_FIX = ("fetch the history: git fetch --unshallow (in a workflow: actions/checkout "
               "with fetch-depth: 0, as the shipped perfgate.yml does)")


def is_shallow(cwd: str | os.PathLike[str]) -> bool:
    """Whether the checkout at ``cwd`` is a shallow clone (``actions/checkout``'s default
    depth of 1): its earlier commits are missing, so no run of them can be placed."""
    return _out(cwd, "rev-parse", "--is-shallow-repository") == "true"


def ancestors_filter(cwd: str | os.PathLike[str], head: str, commits: Iterable[str]) -> set[str]:
    """The subset of ``commits`` that are ancestors of (or equal to) ``head``.

    Commits git does not know (another clone's, garbage-collected, zeros) are not
    ancestors. One bounded ``git rev-list`` answers most cases; commits older than the
    bound are asked one by one with ``merge-base --is-ancestor``.
    """
    wanted = {c for c in commits if c and not c.startswith("-")}
    if not wanted or not head or head == NO_COMMIT or head.startswith("-"):
        return set()
    found = {c for c in wanted if c == head}
    rest = wanted - found
    if not rest:
        return found
    listed = _out(cwd, "rev-list", f"--max-count={REV_LIST_LIMIT}", head, "--")
    if listed is None:
        return found
    history = listed.split()
    in_history = set(history)
    for c in rest:
        if c in in_history:
            found.add(c)
        elif 4 <= len(c) < 40 and any(h.startswith(c) for h in history):
            found.add(c)  # a prefix of a listed commit
    if len(history) >= REV_LIST_LIMIT:  # history was cut: ask about the remainder directly
        for c in rest - found:
            proc = _git(cwd, "merge-base", "--is-ancestor", c, head)
            if proc is not None and proc.returncode == 0:
                found.add(c)
    return found

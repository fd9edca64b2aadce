"""Setting up an A/B run: the base revision checked out beside the working tree.

Plain code the plugin calls at configure time; its errors are :class:`ABSetupError`, which
the plugin shows as a usage error (a bad revision or set-up command is the user's to fix).
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

from pytest_perfgate.modes.ab.controller import ABSetup
from pytest_perfgate.modes.ab.remote import SideError, SideSpec

# The sides import the controller's copy of pytest_perfgate: the folder holding the package.
PLUGIN_ROOT = str(Path(__file__).resolve().parents[3])


class ABSetupError(SideError):
    """The A/B run cannot start: not a git checkout, unknown revision, set-up failed."""


@contextlib.contextmanager
def worktree(repo: Path, rev: str) -> Iterator[Path]:
    """A detached temporary git worktree of ``rev``, removed afterwards."""
    from pytest_perfgate.history.vcs import resolve_commit

    commit = resolve_commit(repo, rev)
    if commit is None:
        raise ABSetupError(f"--perfgate-ab {rev!r}: not a commit of the repository at {repo}; "
                           "give a branch, tag or hash that `git rev-parse` resolves")
    tmp = Path(tempfile.mkdtemp(prefix="perfgate-base-"))
    path = tmp / "base"
    proc = subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=repo,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        with contextlib.suppress(OSError):
            tmp.rmdir()
        raise ABSetupError(f"could not check out {rev} ({commit[:10]}) into a worktree: "
                           f"{proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=repo,
                       capture_output=True, timeout=120)
        with contextlib.suppress(OSError):
            tmp.rmdir()


def start_ab(root: Path, rev: str, setup_cmd: str | None, stack: contextlib.ExitStack
             ) -> ABSetup:
    """Check ``rev`` out beside ``root`` (removed when ``stack`` closes), run the set-up
    command in it, and say how to start each side."""
    from pytest_perfgate.history.vcs import git_info, resolve_commit

    if not git_info(root).available:
        raise ABSetupError(f"--perfgate-ab {rev}: {root} is not a git checkout; "
                           "the A/B mode checks the base revision out with git worktree")
    base_dir = stack.enter_context(worktree(root, rev))
    if setup_cmd:
        proc = subprocess.run(setup_cmd, shell=True, cwd=base_dir, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise ABSetupError(
                f"--perfgate-ab-setup {setup_cmd!r} failed in the base worktree "
                f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    base = SideSpec("base", base_dir, (str(base_dir / "src"), str(base_dir)))
    head = SideSpec("head", root)
    commit = resolve_commit(root, rev) or rev
    return ABSetup(base, head, commit, rev, PLUGIN_ROOT)

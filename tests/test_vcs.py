"""git_info and ancestors_filter against real temporary repositories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_perfgate.history import vcs
from pytest_perfgate.history.vcs import NO_COMMIT, ancestors_filter, git_info, resolve_commit

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo),
           "GIT_AUTHOR_DATE": "2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE": "2026-01-02T03:04:05Z"}
    out = subprocess.run(GIT + list(args), cwd=repo, env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def commit(repo: Path, name: str) -> str:
    (repo / f"{name}.txt").write_text(name)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BRANCH_NAME"):
        monkeypatch.delenv(var, raising=False)
    git(tmp_path, "init", "-q", "-b", "main")
    return tmp_path


def test_git_info_reads_commit_branch_date_and_dirty(repo: Path) -> None:
    c1 = commit(repo, "a")
    info = git_info(repo)
    assert info == vcs.GitInfo(c1, "main", False, 1767323045000, True)
    (repo / "a.txt").write_text("changed")
    assert git_info(repo).dirty
    (repo / "a.txt").write_text("a")
    (repo / "untracked-results.json").write_text("{}")  # untracked files are not "dirty"
    assert not git_info(repo).dirty


def test_detached_head_takes_branch_from_ci(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c1 = commit(repo, "a")
    git(repo, "checkout", "-q", "--detach", c1)
    assert git_info(repo).branch is None
    monkeypatch.setenv("GITHUB_HEAD_REF", "feature/x")
    assert git_info(repo).branch == "feature/x"


def test_outside_git_or_without_git_is_unknown_not_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    info = git_info(tmp_path)
    assert (info.commit, info.branch, info.dirty, info.available) == (NO_COMMIT, None, False, False)
    assert info.reason == "not a git repository (or any of the parent directories): .git"
    assert git_info(tmp_path / "missing").reason == f"{tmp_path / 'missing'} is not a folder"
    monkeypatch.setattr(vcs.shutil, "which", lambda name: None)
    assert git_info(tmp_path) == vcs.GitInfo(NO_COMMIT, None, False, 0, False,
                                             "no usable git executable")
    assert ancestors_filter(tmp_path, "a" * 40, {"b" * 40}) == set()


def test_empty_repo_has_no_commit(repo: Path) -> None:
    info = git_info(repo)
    assert not info.available and info.reason == "the repository has no commit yet"


def test_side_branch_commit_is_not_an_ancestor_of_main(repo: Path) -> None:
    c1 = commit(repo, "a")
    c2 = commit(repo, "b")
    git(repo, "checkout", "-q", "-b", "pr", c1)
    side = commit(repo, "side")
    git(repo, "checkout", "-q", "main")
    c3 = commit(repo, "c")
    unknown = "f" * 40
    got = ancestors_filter(repo, c3, {c1, c2, c3, side, unknown, NO_COMMIT})
    assert got == {c1, c2, c3}
    assert ancestors_filter(repo, side, {c1, c2, side}) == {c1, side}
    assert ancestors_filter(repo, c3, {c2[:10]}) == {c2[:10]}  # a prefix of a listed commit
    assert ancestors_filter(repo, c3, set()) == set()
    assert ancestors_filter(repo, NO_COMMIT, {c1}) == set()
    assert ancestors_filter(repo, c3, {"--all"}) == set()  # never passed to git as an option


def test_history_longer_than_the_rev_list_bound_still_answers(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = commit(repo, "a")
    commit(repo, "b")
    mid = commit(repo, "c")
    head = commit(repo, "d")
    monkeypatch.setattr(vcs, "REV_LIST_LIMIT", 2)  # only d, c listed; a via merge-base
    assert ancestors_filter(repo, head, {first, mid, "e" * 40}) == {first, mid}


def test_resolve_commit(repo: Path) -> None:
    c1 = commit(repo, "a")
    assert resolve_commit(repo, "main") == c1
    assert resolve_commit(repo, c1[:8]) == c1
    assert resolve_commit(repo, "nope") is None
    assert resolve_commit(repo, "--help") is None

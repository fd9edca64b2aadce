"""`perfgate profile`'s arguments are checked before anything runs: a bad value is a usage
error (2) naming it and the fix, never a traceback with exit 1."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_perfgate.cli import main

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    subprocess.run([*GIT, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "test_perf.py").write_text("def test_walk(perfgate):\n    pass\n")
    subprocess.run([*GIT, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*GIT, "commit", "-qm", "c"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_out_naming_a_file_is_a_usage_error(repo: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "taken").write_text("x")
    assert usage_error(["profile", "--out", str(repo / "taken"), "HEAD", "."], capsys) == (
        f"perfgate profile: error: --out {repo / 'taken'}: is a file, and the report and "
        "flame graphs need a folder: name a folder (new or existing)")


def test_out_that_cannot_be_made_is_a_usage_error(repo: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "file").write_text("x")
    assert usage_error(["profile", "--out", str(repo / "file" / "sub"), "HEAD", "."], capsys) == (
        f"perfgate profile: error: --out {repo / 'file' / 'sub'}: cannot be made (Not a "
        "directory): name a folder you can write, e.g. --out /tmp/profiles")


def test_a_revision_with_a_space_is_a_usage_error(repo: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert "error:" in usage_error(["profile", "HEAD", "my branch"], capsys)


@pytest.fixture
def two_commits(repo: Path) -> Path:
    (repo / "test_perf.py").write_text("def test_walk(perfgate):\n    perfgate.measure("
                                       "lambda: None, transitions=1)\n")
    subprocess.run([*GIT, "commit", "-qam", "measured"], cwd=repo, check=True)
    return repo


@pytest.mark.parametrize("command", [["profile", "HEAD~1", "."],
                                     ["bisect", "HEAD~1", "HEAD"]])
def test_a_usage_error_of_the_pytest_run_is_the_commands_usage_error(
        command: list[str], two_commits: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest's exit 4 (an option it does not know, a bad PERFGATE_* value) is exit 2 with
    pytest's words, not "infrastructure" (3) with a hint about test selection."""
    monkeypatch.setenv("PERFGATE_AB_CONFIRM", "garbage")
    said = usage_error([*command, "test_perf.py"], capsys)
    assert said.startswith(f"perfgate {command[0]}: error: pytest refused its arguments or "
                           "settings (exit 4): ")
    assert "environment variable PERFGATE_AB_CONFIRM: 'garbage' is not a boolean" in said
    assert said.endswith("fix the pytest arguments given after the revisions, or the "
                         "PERFGATE_* variable or ini option it names")
    trees = subprocess.run(["git", "worktree", "list"], cwd=two_commits, capture_output=True,
                           text=True, check=True).stdout.strip().splitlines()
    assert len(trees) == 1, trees  # the probe's worktree went with it


def test_the_first_line_names_base_then_head(two_commits: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Base first, head second, as the command line gives them and the A/B mode says it."""
    base, head = (subprocess.run(["git", "rev-parse", rev], cwd=two_commits, text=True,
                                 capture_output=True, check=True).stdout.strip()
                  for rev in ("HEAD~1", "HEAD"))
    monkeypatch.setenv("PERFGATE_AB_CONFIRM", "garbage")  # pytest stops at its usage error
    for argv, said in ((["HEAD~1", "."], f"base HEAD~1 ({base[:10]}) -> head the working tree"),
                       ([base[:12], "HEAD"], f"base {base[:10]} -> head HEAD ({head[:10]})")):
        with pytest.raises(SystemExit):
            main(["profile", *argv, "test_perf.py"])
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith(f"perfgate profile: {said}; the report and flame graphs go "
                                f"to {two_commits / '.perfgate' / 'profiles'}/"), first

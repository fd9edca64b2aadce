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

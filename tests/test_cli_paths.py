"""Path arguments a careless user gets wrong: each is refused before anything is judged or
written, with a message naming the value and the fix (README: exit 2 usage error, 3
infrastructure error, never a pass)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import BASE
from helpers import record_runs as _record

from pytest_perfgate.cli import main


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_a_repo_that_is_missing_a_file_or_empty_is_a_usage_error(regressed: Path, tmp_path: Path,
                                                                  capsys) -> None:
    """A --repo that is not a folder made git unavailable, so the runs were judged as if
    recorded outside git, where every earlier run of any branch is a baseline."""
    (tmp_path / "file").write_text("x")
    r = ["--results-dir", str(regressed)]
    for cmd in (["check"], ["compare", "111"], ["report", "--out", str(tmp_path / "o")]):
        prog = f"perfgate {cmd[0]}: error: argument --repo: "
        assert usage_error(capsys, *cmd, *r, "--repo", str(tmp_path / "nope")) == (
            f"{prog}'{tmp_path / 'nope'}' does not exist: give the git checkout the runs were "
            "recorded from, e.g. --repo .")
        assert usage_error(capsys, *cmd, *r, "--repo", str(tmp_path / "file")) == (
            f"{prog}'{tmp_path / 'file'}' is a file, not a folder: give the git checkout the "
            "runs were recorded from, e.g. --repo .")
        assert usage_error(capsys, *cmd, *r, "--repo", "") == (
            f"{prog}an empty path: give a file or folder path")
    (tmp_path / "my rëpo").mkdir()  # spaces and unicode are a folder like any other
    assert main(["check", *r, "--repo", str(tmp_path / "my rëpo")]) == 1


def test_a_results_dir_that_is_a_file_or_one_machines_folder_says_so(
        regressed: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["check", "--results-dir", str(tmp_path / "file")]) == 3
    assert capsys.readouterr().err.splitlines()[0] == (
        f"perfgate check: infrastructure error: the history folder {tmp_path / 'file'} is a "
        "file: pass the results folder (with one folder per machine) to --results-dir")
    for given in (regressed / "box", regressed / "box" / "perfgate"):
        assert main(["check", "--results-dir", str(given)]) == 3
        assert capsys.readouterr().err.splitlines()[0] == (
            f"perfgate check: infrastructure error: no machine in {given} has recorded runs: "
            f"{regressed / 'box'} is one machine's folder; pass the folder above it, "
            f"{regressed}, to --results-dir")
        assert main(["history", "walk", "--results-dir", str(given)]) == 3
        assert f"pass the folder above it, {regressed}, to --results-dir" in capsys.readouterr().err
    for cmd in ("accept", "forget"):  # the same condition, the same status and words
        assert main([cmd, "20240101T000005-aaaa05", "--results-dir",
                     str(tmp_path / "file")]) == 3
        assert capsys.readouterr().err == (
            f"perfgate {cmd}: infrastructure error: the history folder {tmp_path / 'file'} "
            "is a file: pass the results folder (with one folder per machine) to "
            "--results-dir\n")


def test_a_folder_no_machine_can_be_named_is_named_and_left_out(regressed: Path, tmp_path: Path,
                                                                 capsys) -> None:
    """'we ird/perfgate' made the one machine ambiguous: 'holds runs of several machines
    (box, we ird): name one with --machine', though no --machine could name it."""
    (regressed / "we ird" / "perfgate").mkdir(parents=True)
    assert main(["check", "--results-dir", str(regressed), "--repo", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert (f"perfgate check: warning: not reading history file {regressed / 'we ird'}: its "
            "name is not a machine name perfgate records under") in err
    assert main(["history", "walk", "--results-dir", str(regressed)]) == 0


def test_check_names_a_machine_without_history_and_the_machines_with(regressed: Path,
                                                                     capsys) -> None:
    assert main(["check", "--results-dir", str(regressed), "--machine", "nosuch"]) == 3
    assert capsys.readouterr().err.splitlines()[0] == (
        f"perfgate check: infrastructure error: no history of machine 'nosuch' in {regressed} "
        "(machines with runs: box): record runs under that name first, or pass one of them "
        "to --machine")


def test_empty_run_ids_and_commit_prefixes_are_named_as_empty(regressed: Path, tmp_path: Path,
                                                              capsys) -> None:
    """An empty prefix matched every commit: 'BASE '' matches several recorded commits'."""
    r = ["--results-dir", str(regressed), "--repo", str(tmp_path)]
    assert usage_error(capsys, "compare", "", *r) == (
        "perfgate compare: error: BASE is empty: give an id printed as 'recorded run RUN_ID' "
        "or a commit hash (prefix) of a recorded run")
    assert usage_error(capsys, "compare", "111", " ", *r).startswith(
        "perfgate compare: error: HEAD is empty: ")
    assert usage_error(capsys, "check", "", *r) == (
        "perfgate check: error: RUN_ID is empty: give an id printed as 'recorded run RUN_ID' "
        "(or no RUN_ID: the machine's newest run)")


def test_compare_names_itself_in_its_infrastructure_errors(tmp_path: Path, capsys) -> None:
    assert main(["compare", "111", "--results-dir", str(tmp_path / "none")]) == 3
    assert capsys.readouterr().err.startswith(
        f"perfgate compare: infrastructure error: no history at {tmp_path / 'none'}")


def test_machine_refuses_an_empty_asv_machine_file(capsys) -> None:
    """'' became '.', and the error spoke of an unreadable file '.'."""
    assert usage_error(capsys, "machine", "--asv-machine-file", "") == (
        "perfgate machine: error: argument --asv-machine-file: an empty path: give a file or "
        "folder path")


@pytest.mark.parametrize("html, why", [
    ("file", "html dir '{tmp}/file' is a file, not a folder: give a folder, e.g. .perfgate/html"),
    ("file/sub", "html dir '{tmp}/file/sub': {tmp}/file is a file, not a folder: give a path "
     "in a folder"),
])
def test_publish_refuses_an_html_dir_it_cannot_make(tmp_path: Path, html: str, why: str,
                                                    capsys) -> None:
    """asv ran, then stopped with a NotADirectoryError traceback (exit 3)."""
    (tmp_path / "asv.conf.json").write_text('{"version": 1, "repo": ".", "branches": [null], '
                                            '"results_dir": "hist"}')
    (tmp_path / "file").write_text("x")
    assert usage_error(capsys, "publish", "--config", str(tmp_path / "asv.conf.json"),
                       "--html-dir", str(tmp_path / html)) == (
        "perfgate publish: error: " + why.format(tmp=tmp_path))


def test_a_baseline_commit_nothing_was_recorded_at_is_a_usage_error_not_a_pass(
        regressed: Path, tmp_path: Path, capsys) -> None:
    """--baseline 9999 (a typo) left the regressed run NO BASELINE, and check exited 0."""
    r = ["--results-dir", str(regressed), "--repo", str(tmp_path)]
    assert usage_error(capsys, "check", *r, "--baseline", "9999") == (
        "perfgate check: error: --baseline 9999: no history-mode run of machine 'box' is of "
        "that commit, so nothing would judge the run: give a commit hash (prefix) of a "
        "recorded run")
    assert usage_error(capsys, "check", *r, "--baseline", "6666") == (
        "perfgate check: error: --baseline 6666 is the commit of the run judged (run "
        "20240101T000005-aaaa05 of machine 'box', commit 6666666666): a run is never judged "
        "by its own commit; give an earlier commit")
    assert main(["check", *r, "--baseline", "1111"]) == 0  # one run: INCONCLUSIVE, warned
    assert "INCONCLUSIVE" in capsys.readouterr().out


def test_a_commit_prefix_of_several_commits_is_ambiguous_everywhere(tmp_path: Path,
                                                                   capsys) -> None:
    """report --run took the newest run of any commit the prefix matched."""
    _record(tmp_path, [*BASE, ("6", 20.0)])
    for i, commit in enumerate(("abcd1" + "1" * 35, "abcd2" + "2" * 35)):
        p = tmp_path / "box" / "perfgate" / f"20240101T00000{i}-aaaa0{i}.pgrun"
        p.write_text(p.read_text().replace(str(i + 1) * 40, commit))
    r = ["--results-dir", str(tmp_path), "--repo", str(tmp_path)]
    assert usage_error(capsys, "report", "--out", str(tmp_path / "o"), *r, "--run",
                       "abcd") == (
        "perfgate report: error: --run 'abcd' matches several recorded commits (abcd11111111, "
        "abcd22222222): give more digits")
    assert usage_error(capsys, "compare", "abcd", *r) == (
        "perfgate compare: error: BASE 'abcd' matches several recorded commits: give more "
        "digits")
    assert usage_error(capsys, "check", *r, "--baseline", "abcd") == (
        "perfgate check: error: --baseline abcd matches several recorded commits "
        "(abcd11111111, abcd22222222): give more digits")


@pytest.mark.parametrize("text, why", [
    (b"[1]", "{conf} holds a list, not asv's JSON object"),
    (b"\xff\xfe{}", "{conf} is not UTF-8 text (asv would refuse it too): "),
])
def test_an_asv_config_that_is_no_config_is_named(tmp_path: Path, capsys, monkeypatch,
                                                  text: bytes, why: str) -> None:
    """A list said 'results_dir None is not a folder name'; bytes that are not UTF-8 gave
    the decoder's message without the file's name."""
    (tmp_path / "asv.conf.json").write_bytes(text)
    monkeypatch.chdir(tmp_path)
    err = usage_error(capsys, "check")
    assert err.startswith("perfgate check: error: cannot find the history folder: "
                          + why.format(conf=tmp_path / "asv.conf.json")), err
    assert err.endswith("; pass --results-dir")


@pytest.mark.parametrize("given, series", [
    ("walk.track_s_per_step", "gated"), ("walk.counts", "counts"),
    ("walk.phase.physics", "phase.physics"), ("walk.counts.est_cycles", "counts.est_cycles"),
    ("walk.counts.phase.reset", "counts.phase.reset")])
def test_an_asv_series_name_given_as_bench_names_the_series_to_ask_for(
        tmp_path: Path, capsys, given: str, series: str) -> None:
    """README's History section names the asv series (walk.track_s_per_step, walk.counts,
    ...); given as BENCH they said only 'no benchmark ...; near names: walk'."""
    from helpers import record

    record(tmp_path, [250.0] * 3, counts=[5.8e6] * 3)
    assert usage_error(capsys, "history", given, "--results-dir", str(tmp_path)) == (
        f"perfgate history: error: no benchmark {given!r}: that is the asv series name of "
        f"benchmark 'walk': give perfgate history walk --series {series} (machine 'box' in "
        f"{tmp_path})")
    assert main(["history", "walk", "--series", series, "--results-dir", str(tmp_path)]) == 0


def test_publish_refuses_an_empty_commit_range(tmp_path: Path, capsys) -> None:
    """`perfgate publish "$RANGE"` with RANGE unset ran asv, which failed (exit 3)."""
    (tmp_path / "asv.conf.json").write_text('{"version": 1, "repo": ".", "branches": [null]}')
    assert usage_error(capsys, "publish", "--config", str(tmp_path / "asv.conf.json"), " ") == (
        "perfgate publish: error: argument range: ' ' is an empty commit range: give one such "
        "as HEAD~200..HEAD, or none for the whole history")

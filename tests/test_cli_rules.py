"""The command line's rules, rendered: one exit status and one wording per condition in every
history command, --json documents that parse and round-trip, git revisions where a commit is
asked for, and the sentences a careless user reads (docs/cli.md)."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.cli._out import version
from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.history.store import History

HISTORY_COMMANDS = [["check"], ["compare", "1111"], ["history", "walk"],
                    ["report", "--out", "OUT"], ["accept", "RUN"], ["forget", "RUN"]]


def record(results: Path, runs: list[tuple[str, float, str]], machine: str = "box",
           name: str = "walk", first: int = 0) -> list[RunRecord]:
    """One run per (commit, level in s per Msteps, recorded verdict)."""
    rng = random.Random(5)
    out = []
    for i, (commit, level, verdict) in enumerate(runs, start=first):
        samples = tuple(level * (1 + rng.gauss(0, 0.004)) for _ in range(8))
        run = RunRecord(f"20240101T0000{i:02d}-bbbb{i:02d}", float(i), commit, 0, "main",
                        False, machine, "fp", {"mode": "history"},
                        {name: BenchRecord(name, samples, 1e6 / level, verdict=verdict)})
        History(results, machine).record(run)
        out.append(run)
    return out


def fill(argv: list[str], tmp_path: Path) -> list[str]:
    return [str(tmp_path / "out") if a == "OUT" else a for a in argv]


def usage(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize("cmd", HISTORY_COMMANDS, ids=lambda c: c[0])
def test_a_missing_or_file_history_is_exit_3_with_one_wording_in_every_command(
        cmd: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was 3 for check but 2 for report/history with --machine and for accept/forget."""
    prog = f"perfgate {cmd[0]}"
    argv = fill(cmd, tmp_path)
    assert main([*argv, "--results-dir", str(tmp_path / "none")]) == 3
    assert capsys.readouterr().err == (
        f"{prog}: infrastructure error: no history at {tmp_path / 'none'}: record runs with "
        "`pytest --perfgate` first, or pass --results-dir\n")
    (tmp_path / "file").write_text("x")
    assert main([*argv, "--results-dir", str(tmp_path / "file")]) == 3
    assert capsys.readouterr().err == (
        f"{prog}: infrastructure error: the history folder {tmp_path / 'file'} is a file: "
        "pass the results folder (with one folder per machine) to --results-dir\n")


@pytest.mark.parametrize("cmd", HISTORY_COMMANDS[:4], ids=lambda c: c[0])
def test_an_unknown_machine_is_3_and_an_ambiguous_one_2_in_every_command(
        cmd: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "r"
    record(results, [("1" * 40, 10.0, "OK")], machine="m1")
    record(results, [("1" * 40, 10.0, "OK")], machine="m2")
    prog = f"perfgate {cmd[0]}"
    argv = [*fill(cmd, tmp_path), "--results-dir", str(results)]
    argv += ["--repo", str(tmp_path)] * (cmd[0] != "history")
    assert usage(capsys, *argv) == (
        f"{prog}: error: {results} holds runs of several machines (m1, m2): name one with "
        "--machine")
    assert main([*argv, "--machine", "m3"]) == 3
    assert capsys.readouterr().err == (
        f"{prog}: infrastructure error: no history of machine 'm3' in {results} (machines "
        "with runs: m1, m2): record runs under that name first, or pass one of them to "
        "--machine\n")


def regressed(tmp_path: Path) -> Path:
    results = tmp_path / "r"
    record(results, [(d * 40, 10.0 + 0.02 * (i % 2), "OK") for i, d in enumerate("12345")]
           + [("6" * 40, 20.0, "REGRESSION")])
    return results


def roundtrip(text: str) -> dict:
    """The document parses, and dumping it again gives the same bytes (no NaN, no extra
    output on stdout)."""
    doc = json.loads(text)
    assert json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n" == text
    assert doc["schema"] == 1 and doc["version"] == version()
    return doc


def test_json_documents_parse_round_trip_and_carry_the_verdicts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = ["--results-dir", str(regressed(tmp_path)), "--repo", str(tmp_path)]
    assert main(["check", *r, "--json"]) == 1
    got = capsys.readouterr()
    doc = roundtrip(got.out)
    assert "perfgate check: history: FAILED: 1 benchmark(s) REGRESSION" in got.err
    assert (doc["command"], doc["exit"], doc["passed"], doc["error"]) == ("check", 1, False,
                                                                         None)
    (b,) = doc["benchmarks"]
    assert (b["benchmark"], b["outcome"], b["fails"]) == ("walk", "REGRESSION", True)
    assert b["accept"] == f"perfgate accept {doc['run']['run_id']}"
    assert 0.45 < b["ratio"] < 0.55 and b["ci"][0] < b["ratio"] < b["ci"][1]
    assert doc["run"]["commit"] == "6" * 40 and len(b["baseline_commits"]) == 5

    assert main(["compare", "1111", *r, "--json"]) == 0
    doc = roundtrip(capsys.readouterr().out)
    assert doc["base"]["commit"] == "1" * 40 and doc["head"]["commit"] == "6" * 40
    (b,) = doc["benchmarks"]  # one base run cannot show the spread
    assert b["outcome"] == "INCONCLUSIVE" and "only 1 earlier run" in b["message"]

    assert main(["history", "walk", *r[:2], "--json"]) == 0
    doc = roundtrip(capsys.readouterr().out)
    assert [p["commit"][0] for p in doc["points"]] == list("123456")
    assert doc["unit"] == "us/env-step" and doc["display_unit"] == "env-steps/s"
    assert doc["change_points"] == []  # one slower newest run: no change point before a second

    assert main(["report", "--out", str(tmp_path / "o"), *r, "--json"]) == 0
    doc = roundtrip(capsys.readouterr().out)
    assert all(Path(f).is_file() for f in doc["files"]) and len(doc["files"]) == 3
    assert doc["benchmarks"][0]["outcome"] == "REGRESSION"


def test_an_infrastructure_error_is_a_json_document_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in (["check"], ["compare", "111"], ["history", "walk"],
                ["report", "--out", str(tmp_path / "o")]):
        assert main([*cmd, "--results-dir", str(tmp_path / "none"), "--json"]) == 3
        got = capsys.readouterr()
        doc = roundtrip(got.out)
        assert doc["exit"] == 3 and doc["error"] == {
            "kind": "infrastructure", "message": f"no history at {tmp_path / 'none'}: record "
            "runs with `pytest --perfgate` first, or pass --results-dir"}
        assert got.err.startswith(f"perfgate {cmd[0]}: infrastructure error: no history")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version as dist_version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"perfgate {dist_version('pytest-perfgate')}\n"


def test_policies_show_their_choices_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    for flag in ("--unstable", "--inconclusive", "--no-baseline"):
        assert f"{flag} {{fail,warn}}" in out
    assert "UNSTABLE UNSTABLE" not in out and "NO_BASELINE" not in out


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_compare_takes_git_revisions_as_the_plugin_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`perfgate compare HEAD~1` said "BASE 'HEAD~1': no run of machine 'vm' has that id
    or commit"."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commits = []
    for i in range(3):
        (repo / "f").write_text(str(i))
        git(repo, "add", "f")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{i}")
        commits.append(git(repo, "rev-parse", "HEAD"))
    git(repo, "tag", "v1", commits[1])
    results = tmp_path / "r"
    record(results, [(commits[1], 10.0, "OK"), (commits[1], 10.02, "OK"),
                     (commits[2], 20.0, "REGRESSION")])
    r = ["--results-dir", str(results), "--repo", str(repo)]
    for base in ("HEAD~1", "v1", commits[1][:7]):
        assert main(["compare", base, "HEAD", *r]) == 0
        got = capsys.readouterr()
        assert got.out.startswith(f"perfgate compare: run 20240101T000002-bbbb02 of machine "
                                  f"'box', commit {commits[2][:10]} against the runs of "
                                  f"commit {commits[1][:10]}\n")
        assert got.err == ""  # the repository places the commit: no warning
    assert usage(capsys, "compare", "HEAD~2", *r) == (
        f"perfgate compare: error: BASE 'HEAD~2' is commit {commits[0][:10]} in {repo}, but "
        f"machine 'box' has no history-mode run of it: record one (git checkout "
        f"{commits[0][:10]} && pytest --perfgate), or give a recorded commit")
    assert usage(capsys, "compare", "nosuchbranch", *r) == (
        "perfgate compare: error: BASE 'nosuchbranch': no run of machine 'box' has that id or "
        f"commit, and git does not know it as a revision in {repo} (--repo): give an id "
        "printed as 'recorded run RUN_ID', a commit hash (prefix) of a recorded run, or a "
        "branch, tag or revision such as HEAD~1")


def test_a_repo_that_cannot_place_the_commit_is_said_not_silent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check --repo /tmp` judged as if outside git, silently."""
    r = ["--results-dir", str(regressed(tmp_path))]
    assert main(["check", *r, "--repo", str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"perfgate check: warning: commit 6666666666 of run 20240101T000005-bbbb05 is not in "
        f"the repository at {tmp_path} (--repo), so ancestry cannot be asked and the runs of "
        "every other commit count as its baseline: pass the checkout the runs were recorded "
        "from, e.g. --repo .")


def test_compare_with_a_base_whose_only_run_failed_says_so_and_offers_a_way(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It said "(failed runs count once accepted); this run is the baseline of later
    commits": compare records nothing."""
    results = tmp_path / "r"
    runs = record(results, [("1" * 40, 10.0, "OK"), ("2" * 40, 20.0, "REGRESSION"),
                            ("3" * 40, 20.1, "OK")])
    r = ["--results-dir", str(results), "--repo", str(tmp_path)]
    assert main(["compare", "2222", "3333", *r]) == 0
    out = capsys.readouterr().out
    assert (f"walk: NO BASELINE: the run(s) of BASE commit 2222222222 with walk failed the "
            f"gate themselves ({runs[1].run_id}) and were never accepted, so they serve no "
            "baseline; to compare against them anyway, add --failed-base (this comparison "
            "only, nothing is recorded), or accept them if that slowdown was intended: "
            f"perfgate accept {runs[1].run_id}") in out
    assert "baseline of later commits" not in out
    assert main(["compare", "2222", "3333", *r, "--failed-base"]) == 0
    out = capsys.readouterr().out
    assert "(its failed runs included: --failed-base)" in out
    assert "baseline: 1 run(s) at 2222222222" in out
    assert not (results / "box" / "perfgate" / "decisions.pgaccept").exists()


def test_history_prefers_a_whole_name_part_to_a_substring(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`perfgate history sync` matched humanoid_v5_async_4 and humanoid_v5_sync_4."""
    results = tmp_path / "r"
    for i, name in enumerate(("humanoid_v5_async_4", "humanoid_v5_sync_4")):
        record(results, [("1" * 40, 10.0, "OK")], name=name, first=i)
    assert main(["history", "sync", "--results-dir", str(results)]) == 0
    assert capsys.readouterr().out.startswith("perfgate history: humanoid_v5_sync_4, ")
    assert usage(capsys, "history", "humanoid", "--results-dir", str(results)) == (
        "perfgate history: error: benchmark 'humanoid' matches 2 benchmarks: "
        "humanoid_v5_async_4, humanoid_v5_sync_4: give more of the name (machine 'box' in "
        f"{results})")


def test_report_md_of_a_failed_run_names_the_accept_command(tmp_path: Path) -> None:
    results = regressed(tmp_path)
    assert main(["report", "--out", str(tmp_path / "o"), "--results-dir", str(results),
                 "--repo", str(tmp_path)]) == 0
    for f in ("report.md", "summary.md"):
        assert ("- this run failed the gate (`walk`) and never serves as a baseline; if the "
                "slowdown is intended, accept it: `perfgate accept 20240101T000005-bbbb05`"
                ) in (tmp_path / "o" / f).read_text().splitlines()


def test_calibrate_analyse_of_a_study_without_trials_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_perfgate.study import studyfile
    from pytest_perfgate.study import trials as cal

    path = tmp_path / "study.json"
    studyfile.save(path, cal.StudyConfig(), [], {})
    assert usage(capsys, "calibrate", "--analyse", str(path)) == (
        f"perfgate calibrate: error: --analyse {path}: the study holds no trials (it was "
        "stopped before the first one ended): measure again with --save FILE")


def test_a_pass_with_an_inconclusive_benchmark_does_not_read_as_a_failure() -> None:
    """'passed: 0 of 1 benchmark(s) OK or better; 1 INCONCLUSIVE' read as a failure."""
    from pytest_perfgate.core.gate import Outcome, Rule, Verdict
    from pytest_perfgate.core.judged import Judged
    from pytest_perfgate.report.github import GateResult

    def judged(outcome: Outcome) -> Judged:
        return Judged(BenchRecord("walk", (1.0,), 1.0), Verdict(outcome, "why"),
                      Rule(inconclusive="warn"), "t")

    assert GateResult(0, [judged(Outcome.INCONCLUSIVE)]).headline == (
        "passed, nothing failed: 1 INCONCLUSIVE, not a failure (undecided: its reason above "
        "says what to do)")
    assert GateResult(0, [judged(Outcome.OK), judged(Outcome.INCONCLUSIVE)]).headline == (
        "passed, nothing failed: 1 of 2 benchmark(s) OK or better; 1 INCONCLUSIVE, not a "
        "failure (undecided: its reason above says what to do)")


def _runs(levels: list[float], noise: float = 0.001) -> list[list[float]]:
    rng = random.Random(11)
    return [[lv * (1 + rng.gauss(0, noise)) for _ in range(8)] for lv in levels]


def test_each_inconclusive_sentence_names_its_true_cause_and_one_thing_to_do() -> None:
    """"spread 2.9% can only resolve drops of 20.6% ... drifts between runs more than the
    threshold" when the spread was below the threshold and the cause was too few runs."""
    from pytest_perfgate.core.gate import Outcome, Rule, evaluate

    rule = Rule(threshold=0.05)
    few = evaluate(_runs([10.1])[0], _runs([10.0, 10.1, 9.9]), rule)
    assert few.outcome is Outcome.INCONCLUSIVE
    assert few.message.endswith(
        "The cause is too few runs: the run-to-run spread (1.0%) is below the threshold, "
        "but 3 earlier run(s) estimate it too loosely to resolve 5%; record runs of earlier "
        "commits until about 5 have been measured (or compare now with --perfgate-ab "
        "BASE_REV).")
    wide = evaluate(_runs([10.1])[0], _runs([10.0, 11.0, 9.3, 10.6, 9.5, 10.9]), rule)
    assert wide.outcome is Outcome.INCONCLUSIVE and "drifts" not in wide.message
    spread = wide.message.split("run-to-run spread ")[1].split(" ")[0]
    assert wide.message.endswith(
        f"The cause is the spread: this runner's run medians scatter by {spread}, and "
        "resolving 5% at alpha=0.01 needs a spread below 2.0% however many runs are "
        "recorded; use the interleaved A/B mode (--perfgate-ab BASE_REV) for a paired "
        "comparison, or raise the threshold.")
    base = _runs([10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.01])
    scattered = [9.5, 9.7, 9.9, 10.0, 10.1, 10.3, 10.5, 10.7]  # 3 of them may be spoiled
    loaded = evaluate(scattered, base, rule, polluted=3, baseline_polluted=[0] * 8)
    assert loaded.outcome is Outcome.INCONCLUSIVE
    assert loaded.message.endswith(
        "The cause is outside load: 3 window(s) were spoiled by other work on this machine "
        "and kept, which widens the interval; run again when the machine is quiet.")


def test_accept_and_forget_name_an_empty_run_id(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in ("accept", "forget"):
        assert usage(capsys, cmd, " ", "--results-dir", str(regressed(tmp_path))) == (
            f"perfgate {cmd}: error: RUN_ID is empty: give an id printed as 'recorded run "
            "RUN_ID'")


def test_compare_with_a_base_that_never_measured_the_benchmark_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "r"
    record(results, [("1" * 40, 10.0, "OK")], name="other")
    record(results, [("2" * 40, 10.0, "OK")], first=1)
    assert main(["compare", "1111", "2222", "--results-dir", str(results), "--repo",
                 str(tmp_path)]) == 0
    assert ("walk: NO BASELINE: BASE commit 1111111111 has no history-mode run of walk on "
            "machine 'box': compare with a commit that measured it (perfgate history BENCH "
            "lists them); compare records nothing") in capsys.readouterr().out


@pytest.mark.parametrize("cmd", HISTORY_COMMANDS[:4], ids=lambda c: c[0])
def test_a_machine_whose_run_folder_is_a_file_is_exit_3_in_every_command(
        cmd: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was 2 for compare when <machine>/perfgate is a file, 3 for check."""
    results = tmp_path / "r"
    (results / "box").mkdir(parents=True)
    (results / "box" / "perfgate").write_text("not a folder")
    argv = [*fill(cmd, tmp_path), "--results-dir", str(results), "--machine", "box"]
    assert main(argv) == 3
    assert capsys.readouterr().err == (
        f"perfgate {cmd[0]}: infrastructure error: no history of machine 'box' in {results} "
        "(machines with runs: none): record runs under that name first, or pass one of them "
        "to --machine\n")

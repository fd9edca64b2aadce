"""A verdict ordinary use cannot fool, end to end: pytester runs in scratch git repositories
on a fake clock (exact, no real timing), the way a new user would run the README."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

# hypothesis's pytest plugin imports this at every in-process run's end, and pytester drops
# the modules first imported inside a run: imported here once, not again in each run (~0.4 s)
import hypothesis.internal.observability  # noqa: F401
import pytest
from fake_session import FAKE_CLOCK_CONFTEST

CONFTEST = FAKE_CLOCK_CONFTEST + """
def pytest_perfgate_verdict(config, judged):
    with open("verdicts.log", "a") as f:
        f.write(f"{judged.result.name} {judged.verdict.outcome.value}\\n")
"""

PERF_TEST = """
import os, random
from conftest import CLOCK

def test_walk(perfgate):
    slow = float(os.environ.get("SLOW", "1"))
    seed = int(os.environ.get("PERF_SEED", "0"))
    run = random.Random(seed).gauss(0, float(os.environ.get("DRIFT", "0.01")))
    rng = random.Random(seed + 1000)
    def step():
        with perfgate.phase("physics"):
            CLOCK.advance(0.001 * slow * (1 + run + rng.gauss(0, 0.01)))
    perfgate.measure(step, transitions=16)
"""

ARGS = ["--perfgate", "--perfgate-machine=testbox", "--perfgate-windows=6",
        "--perfgate-window-time=0.05", "-p", "no:cacheprovider"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, message: str) -> str:
    (repo / "CHANGES").write_text(message)
    git(repo, "add", "-A", ".")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_perf=PERF_TEST)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    (pytester.path / ".gitignore").write_text("results/\nverdicts.log\n__pycache__/\n")
    git(pytester.path, "init", "-q")
    commit(pytester.path, "A")
    return pytester


_seed = [0]


def run(p: pytest.Pytester, mp: pytest.MonkeyPatch, slow: float = 1.0,
        *extra: str) -> pytest.RunResult:
    _seed[0] += 1
    mp.setenv("SLOW", str(slow))
    mp.setenv("PERF_SEED", str(_seed[0]))
    return p.runpytest_inprocess(*ARGS, *extra)


def verdicts(p: pytest.Pytester) -> list[str]:
    return [line.split(" ", 1)[1] for line in (p.path / "verdicts.log").read_text().splitlines()]


def run_id(res: pytest.RunResult) -> str:
    m = re.search(r"recorded run (\S+) in", res.stdout.str())
    assert m, res.stdout.str()
    return m.group(1)


@pytest.mark.slow  # several full pytest runs in a row
def test_a_slower_commit_stays_regression_on_every_rerun_until_accepted(
        repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(3):
        res = run(repo, monkeypatch)
        res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*NO BASELINE: no earlier run of test_perf.test_walk on machine "
                              "'testbox'* at an ancestor commit (2 run(s) of the commit under "
                              "test never judge it (commit a change, or edit the working "
                              "tree, to compare with them)); this run is recorded*"])
    assert verdicts(repo) == ["NO BASELINE"] * 3  # the commit under test never judges itself
    commit(repo.path, "B: physics twice as slow")
    failed = []
    for _ in range(4):
        res = run(repo, monkeypatch, 2.0)
        res.assert_outcomes(failed=1)
        rid = run_id(res)
        failed.append(rid)
        res.stdout.fnmatch_lines([
            "*perfgate REGRESSION: test_perf.test_walk",
            "*baseline: 3 run(s) at*",
            f"*this run never serves as a baseline (re-running cannot pass it); if the "
            f"slowdown is intended, accept it: perfgate accept {rid}"])
    assert verdicts(repo)[3:] == ["REGRESSION"] * 4
    stored = json.loads((repo.path / "results" / "testbox" / "perfgate" / f"{failed[0]}.pgrun")
                        .read_text())
    assert stored["benchmarks"]["test_perf.test_walk"]["verdict"] == "REGRESSION"
    commit(repo.path, "C: on top of B")
    run(repo, monkeypatch, 2.0).assert_outcomes(failed=1)  # B's failed runs did not join

    from pytest_perfgate.history.decisions import accept

    for rid in failed:
        assert accept(repo.path / "results", None, rid).startswith(f"accepted run {rid}")
    commit(repo.path, "D: on top of C")
    res = run(repo, monkeypatch, 2.0)
    res.assert_outcomes(passed=1)
    assert verdicts(repo)[-1] != "REGRESSION"


def test_duplicate_names_are_refused_and_default_names_stay_apart(
        repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    repo.makepyfile(test_names="""
        import pytest
        from conftest import CLOCK

        def step():
            CLOCK.advance(0.001)

        def test_one(perfgate):
            perfgate.measure(step, transitions=1, name="walk")

        def test_two(perfgate):
            perfgate.measure(step, transitions=1, name="walk")

        @pytest.mark.parametrize("v", ["x y", "x_y"])
        def test_param(perfgate, v):
            perfgate.measure(step, transitions=1)
    """)
    res = run(repo, monkeypatch, 1.0, "test_names.py")
    res.assert_outcomes(passed=3, failed=1)
    res.stdout.fnmatch_lines(["*benchmark name 'walk' is measured by two tests, "
                              "test_names.py::test_one and test_names.py::test_two: both would "
                              "record into one series*"])
    rec = json.loads(next((repo.path / "results" / "testbox" / "perfgate").glob("*.pgrun"))
                     .read_text())
    names = sorted(rec["benchmarks"])
    assert names[0] == "test_names.test_param_x_y_" and names[1].startswith(
        "test_names.test_param_x_y_-") and names[2] == "walk"


def test_a_path_valued_option_moves_no_name_and_no_git_lookup(
        repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    (repo.path / "tox.ini").unlink()  # no ini file: the rootdir is free to move
    git(repo.path, "add", "-A", ".")
    git(repo.path, "commit", "-qm", "no ini")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    out, results = elsewhere / "out.json", elsewhere / "results"
    out.write_text("{}")
    results.mkdir()
    head = git(repo.path, "rev-parse", "HEAD")
    for extra in ([f"--perfgate-results-dir={results}"],
                  ["--perfgate-results-dir", str(results)],  # moves pytest's rootdir
                  [f"--perfgate-results-dir={results}", "--perfgate-json", str(out)]):
        res = run(repo, monkeypatch, 1.0, *extra)
        res.assert_outcomes(passed=1)
    recs = [json.loads(p.read_text()) for p in (results / "testbox" / "perfgate").glob("*.pgrun")]
    assert len(recs) == 3
    assert {n for r in recs for n in r["benchmarks"]} == {"test_perf.test_walk"}
    assert {r["commit"] for r in recs} == {head}
    assert json.loads(out.read_text())["benchmarks"][0]["benchmark"] == "test_perf.test_walk"


def test_a_path_valued_option_that_loses_the_ini_file_is_a_usage_error(
        repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("elsewhere") / "out.json"
    out.write_text("{}")
    res = run(repo, monkeypatch, 1.0, "--perfgate-json", str(out))
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*perfgate: pytest read the value of --perfgate-json ({out}) as "
                              "a test path and lost its configuration file (rootdir became *), "
                              "so perfgate_* ini settings would be ignored: write it with '=', "
                              f"e.g. --perfgate-json={out}"])
    run(repo, monkeypatch, 1.0, f"--perfgate-json={out}").assert_outcomes(passed=1)


@pytest.mark.slow  # twenty pytest runs in a row (in-process, on the fake clock: ~5 s)
def test_twenty_unchanged_runs_with_three_windows_give_no_regression(
        repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The history gate's own verdicts: an undecided one is not re-measured (the A/B sides
    of each re-measurement took ~1 s a run, and A/B verdicts are test_remeasure.py's), so
    a false REGRESSION of the record alone shows here. The seeded pure version:
    test_verdict_integrity.py::test_twenty_unchanged_runs_of_three_windows_give_no_regression."""
    monkeypatch.setenv("DRIFT", "0.04")  # run-to-run drift of a shared runner
    (repo.path / "test_perf.py").write_text(PERF_TEST)
    for i in range(20):
        if i % 4 == 0:
            commit(repo.path, f"unchanged {i}")  # a new commit every few runs, code the same
        monkeypatch.setenv("PERF_SEED", str(500 + i))
        monkeypatch.setenv("SLOW", "1")
        repo.runpytest_inprocess(*ARGS[:2], "--perfgate-windows=3", *ARGS[3:],
                                 "--perfgate-remeasure=false").assert_outcomes(passed=1)
    got = verdicts(repo)
    assert got[:4] == ["NO BASELINE"] * 4 and len(got) == 20, got  # 16 judged by the record
    assert "REGRESSION" not in got, got


def test_open_verdicts_are_pytest_warnings_and_nothing_claims_a_record(
        repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    res = run(repo, monkeypatch, 1.0, "-rw", "--perfgate-record=false", "--junitxml=j.xml")
    res.assert_outcomes(passed=1, warnings=1)
    res.stdout.fnmatch_lines(["*PerfgateWarning: test_perf.test_walk: NO BASELINE: no earlier "
                              "run of test_perf.test_walk on machine 'testbox'*nothing is "
                              "recorded (--perfgate-record false)"])
    text = res.stdout.str()
    assert "is recorded at" not in text and "recorded run" not in text
    xml = (repo.path / "j.xml").read_text()
    assert 'property name="perfgate" value="test_perf.test_walk: NO BASELINE: ' in xml
    assert not (repo.path / "results").exists()


def test_reserved_extra_is_a_usage_error_and_the_session_still_reports(
        repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    repo.makepyfile(test_extra="""
        from conftest import CLOCK

        def test_extra(perfgate):
            perfgate.measure(lambda: CLOCK.advance(0.001), 1, extra={"workers": 4})
    """)
    res = run(repo, monkeypatch, 1.0, "-p", "no:randomly")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*PerfgateUsageError: extra key 'workers' is recorded by perfgate "
                              "itself*", "*test_perf.test_walk*NO BASELINE*"])
    assert "INTERNALERROR" not in res.stdout.str()


def test_pytest_benchmark_adoption_refuses_a_taken_name(
        repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pytest_benchmark")
    repo.makepyfile(test_pb="""
        from conftest import CLOCK

        def test_sum(benchmark):
            # measured by perfgate on the fake clock: the call must advance it
            benchmark.pedantic(CLOCK.advance, args=(0.001,), rounds=8, iterations=2)

        def test_walk(perfgate):
            perfgate.measure(lambda: CLOCK.advance(0.001), 1, name="test_pb.test_sum")
    """)
    res = run(repo, monkeypatch, 1.0, "test_pb.py", "-p", "no:randomly")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*benchmark name 'test_pb.test_sum' is measured by two "
                              "tests, test_pb.py::test_sum and test_pb.py::test_walk*"])

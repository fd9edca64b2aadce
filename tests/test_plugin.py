"""The plugin end to end, in pytester sandboxes, on a fake clock (exact, no real timing).

The sandbox's conftest swaps the session's clock for a FakeClock that the perf test's step
advances, so "twice as slow" is exactly twice as slow, whatever the machine does.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import CONFTEST, PERF_TEST

ARGS = ["--perfgate", "--perfgate-machine=testbox", "--perfgate-windows=6",
        "--perfgate-window-time=0.05", "-p", "no:cacheprovider"]


@pytest.fixture
def sandbox(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_perf=PERF_TEST)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    return pytester


_runs: dict[str, int] = {}  # sandbox -> runs so far: each run of a sandbox gets its own seed


def run(p: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, slow: float = 1.0,
        *extra: str) -> pytest.RunResult:
    _runs[str(p.path)] = seed = _runs.get(str(p.path), 0) + 1
    monkeypatch.setenv("SLOW", str(slow))
    monkeypatch.setenv("PERF_SEED", str(seed))
    return p.runpytest_inprocess(*ARGS, *extra)


@pytest.mark.slow  # several full pytest runs in a row
def test_history_then_regression(sandbox: pytest.Pytester,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    first = run(sandbox, monkeypatch)
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*perfgate*", "*test_perf.test_walk*NO BASELINE*",
                                "*NO BASELINE: no earlier run*", "recorded run *"])
    for _ in range(3):
        run(sandbox, monkeypatch).assert_outcomes(passed=1)
    same = run(sandbox, monkeypatch, 1.0, "--perfgate-json=report.json")
    same.assert_outcomes(passed=1)
    rep = json.loads((sandbox.path / "report.json").read_text())
    # Seeded: the same code must be OK (an IMPROVEMENT or a drop here would be a gate bug).
    assert rep["benchmarks"][0]["verdict"] == "OK"
    assert 0.98 < rep["benchmarks"][0]["ratio"] < 1.04
    # The verdict hook saw each verdict once, as it was judged.
    assert (sandbox.path / "verdicts.log").read_text().splitlines() == [
        "test_perf.test_walk NO BASELINE"] + ["test_perf.test_walk INCONCLUSIVE"] * 3 + [
        "test_perf.test_walk OK"]  # 1-3 earlier runs: the spread is unseen, or df 1-2
    assert rep["benchmarks"][0]["baseline_commits"] and len(
        rep["benchmarks"][0]["baseline_commits"]) == 4

    slow = run(sandbox, monkeypatch, 2.0)
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines([
        "*perfgate REGRESSION: test_perf.test_walk",
        "*throughput fell *% (threshold 5%), p=*",
        "*throughput ratio head/baseline: 0.5* [[]0.*-0.*[]] (at 99% confidence), p=*",
        "*baseline: 5 run(s) at*",
        "*grew most: physics*",
    ])
    assert "Traceback" not in slow.stdout.str()
    assert "def test_walk" not in slow.stdout.str()

    files = sorted(p.name for p in (sandbox.path / "results" / "testbox").iterdir())
    assert files == ["machine.json", "perfgate"]  # outside git: no asv result file
    assert len(list((sandbox.path / "results" / "testbox" / "perfgate").glob("*.pgrun"))) == 6


def test_marker_threshold_and_warn_policy(sandbox: pytest.Pytester,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox.makepyfile(test_perf=PERF_TEST.replace(
        "def test_walk", "import pytest\n@pytest.mark.perfgate(threshold=0.6)\ndef test_walk"))
    for _ in range(3):
        run(sandbox, monkeypatch).assert_outcomes(passed=1)
    res = run(sandbox, monkeypatch, 2.0)  # a 50% drop is inside a 60% threshold
    res.assert_outcomes(passed=1)


def test_smoke_mode_records_nothing(sandbox: pytest.Pytester) -> None:
    res = sandbox.runpytest_inprocess("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*perfgate (smoke mode: not measured, not recorded)*",
                              "*test_perf.test_walk*SMOKE*"])
    assert not (sandbox.path / "results").exists()


def test_workload_exception_is_an_error_not_a_regression(
        sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox.makepyfile(test_boom="""
        def test_boom(perfgate):
            def step():
                raise RuntimeError("env exploded")
            perfgate.measure(step, transitions=1)
    """)
    res = run(sandbox, monkeypatch, 1.0, "test_boom.py")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*RuntimeError: env exploded*"])
    assert "REGRESSION" not in res.stdout.str()


def test_bad_flag_is_a_usage_error(pytester: pytest.Pytester) -> None:
    res = pytester.runpytest_subprocess("--perfgate-threshold=abc")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*argument --perfgate-threshold: 'abc' is not a fraction: "
                              "use e.g. 0.05 or 5%"])


def test_bad_ini_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nperfgate_windows = many\n")
    res = pytester.runpytest_subprocess()
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*perfgate: ini option perfgate_windows: 'many' is not a whole "
                              "number: use e.g. 5"])


def test_bad_name_renders(sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # A bad marker is a usage error at collection now: tests/test_preflight.py.
    sandbox.makepyfile(test_bad="""
        def test_name(perfgate):
            perfgate.measure(lambda: None, transitions=1, name="../../etc/x")
    """)
    res = run(sandbox, monkeypatch, 1.0, "test_bad.py")
    res.stdout.fnmatch_lines(["*name='../../etc/x' is not a usable benchmark name*"])


def test_xdist_is_refused(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    res = pytester.runpytest_subprocess("--perfgate", "-n", "2")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--perfgate cannot run under pytest-xdist*-n0*"])


def test_pytest_benchmark_results_are_gated(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile(test_pb="""
        def test_sum(benchmark):
            benchmark.pedantic(sum, args=(range(100),), rounds=12, iterations=5)
    """)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    res = pytester.runpytest_inprocess("--perfgate", "--perfgate-machine=pb",
                                       "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*test_pb.test_sum*NO BASELINE*"])
    runs = list((pytester.path / "results" / "pb" / "perfgate").glob("*.pgrun"))
    rec = json.loads(runs[0].read_text())
    # measured by perfgate (tests/test_benchmark_compat.py), read as calls/s
    assert rec["benchmarks"]["test_pb.test_sum"]["unit"] == "calls/s"


def test_other_fingerprint_is_no_baseline_and_says_why(
        sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CPU", "Xeon A")
    run(sandbox, monkeypatch).assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_CPU", "Xeon B")
    res = run(sandbox, monkeypatch, 2.0)
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines([
        "*NO BASELINE: no results for test_perf.test_walk on this machine fingerprint (*); "
        "1 run exists on fingerprint * which differs in: cpu_model 'Xeon A' -> 'Xeon B'; this "
        "run is recorded at the end of the session and becomes the baseline of later commits*"])


def test_a_dependency_bump_is_judged_against_the_runs_before_it_and_named(
        sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment is part of the change: a slower mujoco-core fails the gate, naming
    the package, where it used to start a new baseline (NO BASELINE, exit 0)."""
    monkeypatch.setenv("FAKE_MUJOCO", "4.0.0")
    for _ in range(5):
        run(sandbox, monkeypatch).assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_MUJOCO", "4.0.1")
    res = run(sandbox, monkeypatch, 1.5, "--perfgate-json=report.json")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*perfgate rebaseline * --reason*",
                              "*REGRESSION*Since the baseline: mujoco-core 4.0.0 -> 4.0.1*"])
    rep = json.loads((sandbox.path / "report.json").read_text())["benchmarks"][0]
    assert rep["verdict"] == "REGRESSION"
    assert rep["environment_changes"] == [{"name": "mujoco-core", "before": "4.0.0",
                                           "after": "4.0.1"}]
    same = run(sandbox, monkeypatch, 1.0)  # the new version at the old speed: named, OK
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*Since the baseline: mujoco-core 4.0.0 -> 4.0.1*"])


def test_markdown_summary_and_no_record(sandbox: pytest.Pytester,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    summary = sandbox.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = run(sandbox, monkeypatch, 1.0, "--perfgate-record=false")
    res.assert_outcomes(passed=1)
    text = summary.read_text()
    assert text.startswith("### perfgate\n\n| benchmark | steps/s | baseline | ratio [CI] |")
    assert "| test_perf.test_walk |" in text and "NO BASELINE" in text
    assert not (sandbox.path / "results").exists()
    assert "recorded run" not in res.stdout.str()


@pytest.mark.slow
def test_worker_group_placement_is_reported(sandbox: pytest.Pytester) -> None:
    sandbox.makepyfile(test_workers_perf="""
        import time

        def make(**kw):
            def step():
                time.sleep(0.001)
            return step

        def test_pinned(perfgate, pinned_workers):
            group = pinned_workers.start(make, n=1, cpus=None, transitions=4)
            perfgate.measure_source(group, transitions=4, name="pinned_sleep")
    """)
    res = sandbox.runpytest_subprocess("--perfgate", "--perfgate-machine=w",
                                       "--perfgate-windows=2", "--perfgate-window-time=0.1",
                                       "--perfgate-warmup-max=0.3", "--perfgate-unstable=warn",
                                       "test_workers_perf.py", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines([
        "*pinned_sleep: worker 0 pid *: cpus unpinned -> *, node -, mempolicy *",
        "*pinned_sleep: placement warning: worker(s) 0 unpinned*"])


# A history that cannot be recorded: tests/test_session_end.py (up front: test_preflight.py).


def test_help_lists_every_option(pytester: pytest.Pytester) -> None:
    from pytest_perfgate.session.options import SPECS

    res = pytester.runpytest_subprocess("--help")
    assert res.ret == 0
    out = res.stdout.str()
    for spec in SPECS:
        assert spec.flag in out and spec.ini in out, spec.flag
    res.stdout.fnmatch_lines(["*--perfgate-threshold=PERFGATE_THRESHOLD*",
                              "*throughput drop that fails a test (default 5%; 2% in*"])


ONLY_SKIP = """
def test_plain():
    pass

def test_perf(perfgate):
    perfgate.measure(lambda: None, transitions=1)
"""


def test_perfgate_only_and_skip_select_the_perf_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mix=ONLY_SKIP)
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--perfgate-only", "-rs")
    res.assert_outcomes(passed=1, skipped=1)
    res.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_mix.py*: not a perf test (--perfgate-only)"])
    assert "ignored" not in res.stdout.str()  # works without --perfgate (smoke mode)
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--perfgate-skip", "-rs")
    res.assert_outcomes(passed=1, skipped=1)
    res.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_mix.py*: a perf test (--perfgate-skip)"])
    pytester.makeini("[pytest]\nperfgate_select = skip\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, skipped=1)  # the ini option alone
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--perfgate-only", "-rs")
    res.stdout.fnmatch_lines(["SKIPPED*not a perf test (--perfgate-only)"])  # flag beats ini
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--perfgate-only",
                                       "--perfgate-skip")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: perfgate: --perfgate-only and --perfgate-skip contradict "
                              "each other: give one of them"])


def test_a_tilde_in_path_options_is_the_home_folder(sandbox: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """bash leaves '~' alone in `--perfgate-json=~/x` (and ini values are never expanded):
    perfgate expands it, so no folder named '~' appears in the project."""
    home = sandbox.path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    run(sandbox, monkeypatch, 1.0, "--perfgate-json=~/report.json",
        "--perfgate-results-dir=~/hist").assert_outcomes(passed=1)
    assert (home / "report.json").is_file()
    assert any((home / "hist").iterdir())
    assert not (sandbox.path / "~").exists()


def test_xdist_refusal_names_the_ini_switch(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeini("[pytest]\nperfgate = true\n")
    res = pytester.runpytest_subprocess("-n", "2")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*perfgate (turned on by the ini option perfgate = true) cannot "
                              "run under pytest-xdist*"])


@pytest.mark.parametrize(("how", "shown"), [
    ("-o", "ini option perfgate = 'maybe' (from -o) is not a true/false value"),
    ("ini", "ini option perfgate in {ini} is not a true/false value"),
])
def test_a_perfgate_switch_that_is_no_bool_names_the_key(pytester: pytest.Pytester, how: str,
                                                         shown: str) -> None:
    args = ["-o", "perfgate=maybe"] if how == "-o" else []
    ini = pytester.makeini("[pytest]\n" + ("perfgate = maybe\n" if how == "ini" else ""))
    res = pytester.runpytest_subprocess(*args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"ERROR: perfgate: {shown.format(ini=ini)}: use true or false, e.g. perfgate = true"
            in res.stderr.str())


def test_an_ab_revision_from_the_environment_is_named_as_such(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    subprocess.run(["git", "init", "-q"], cwd=pytester.path, check=True)
    subprocess.run(["git", "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-q",
                    "--allow-empty", "-m", "x"], cwd=pytester.path, check=True)
    monkeypatch.setenv("PERFGATE_AB", "no-such-rev")
    res = pytester.runpytest_subprocess("--perfgate")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: perfgate: environment variable PERFGATE_AB "
                              "'no-such-rev': not a commit of the repository at *"])


def test_a_tests_marker_is_read_once_into_its_settings(pytester: pytest.Pytester) -> None:
    from pytest_perfgate.plugin.markers import MarkerSettings, settings

    marked, plain = pytester.getitems("import pytest\n\n"
                                      "@pytest.mark.perfgate(threshold='5%', counts=True, "
                                      "memory_threshold=0.1, unit='rows')\n"
                                      "def test_marked():\n    pass\n\n"
                                      "def test_plain():\n    pass\n")
    assert settings(marked) == MarkerSettings(0.05, True, 0.1, "rows")
    assert settings(plain) == MarkerSettings()


DRIFTING = """
from conftest import CLOCK
calls = [0]
def test_walk(perfgate):
    def step():  # slower every call: warm-up never settles, the run is UNSTABLE
        calls[0] += 1
        CLOCK.advance(0.001 * (1 + 0.02 * calls[0]))
    perfgate.measure(step, transitions=16)
"""


def test_a_first_unstable_run_warns_and_a_later_one_fails(sandbox: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Noise alone never fails a first run (it has no baseline to protect); once a baseline
    exists, UNSTABLE fails under the default policy."""
    sandbox.makepyfile(test_perf=DRIFTING)
    first = run(sandbox, monkeypatch, 1.0, "--perfgate-warmup-max=1")
    first.assert_outcomes(passed=1)
    words = " ".join(first.stdout.str().split())
    assert "UNSTABLE" in words and "There is no baseline yet, so nothing to protect" in words
    sandbox.makepyfile(test_perf=PERF_TEST)
    for _ in range(3):
        run(sandbox, monkeypatch).assert_outcomes(passed=1)
    sandbox.makepyfile(test_perf=DRIFTING)
    later = run(sandbox, monkeypatch, 1.0, "--perfgate-warmup-max=1")
    later.assert_outcomes(failed=1)
    assert "nothing to protect" not in later.stdout.str()

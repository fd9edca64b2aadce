"""pytest-benchmark suites under --perfgate: the ``benchmark`` fixture measured by perfgate,
whatever pytest-benchmark's own options say (fake clock: exact, no real timing)."""

from __future__ import annotations

import json

import pytest
from fake_session import FAKE_CLOCK_CONFTEST
from helpers import assert_turns

pytest.importorskip("pytest_benchmark")

SUITE = """
import inspect
import os
import pytest
from conftest import CLOCK

SLOW = float(os.environ.get("SLOW", "1"))

def work(n):
    CLOCK.advance(0.001 * SLOW)
    return n * 2

def test_double(benchmark):
    assert benchmark(work, 21) == 42

@pytest.mark.parametrize("size", [10, 1000])
def test_sized(benchmark, size):
    benchmark(lambda: CLOCK.advance(1e-6 * size))

def test_pedantic(benchmark):
    made = []
    def setup():
        CLOCK.advance(0.5)  # untimed
        made.append(1)
        return (3,), {}
    def target(x):
        CLOCK.advance(0.002)
        return x
    # teardown= came in pytest-benchmark 5.1, which the oldest supported pytest cannot install
    kw = ({"teardown": lambda x: None}
          if "teardown" in inspect.signature(benchmark.pedantic).parameters else {})
    assert benchmark.pedantic(target, setup=setup, rounds=3, **kw) == 3
    assert made

@pytest.mark.perfgate(unit="rows")
def test_rows(benchmark):
    benchmark(lambda: CLOCK.advance(0.0005))
"""

ARGS = ["--perfgate", "--perfgate-machine=pb", "--perfgate-windows=4",
        "--perfgate-window-time=0.05", "-p", "no:cacheprovider"]


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(FAKE_CLOCK_CONFTEST)
    pytester.makepyfile(test_bench=SUITE)
    # the everyday setting of a pytest-benchmark suite: measuring off
    pytester.makeini("[pytest]\naddopts = --benchmark-disable\n"
                     "perfgate_results_dir = results\n")
    return pytester


def _record(p: pytest.Pytester) -> dict:
    runs = sorted((p.path / "results" / "pb" / "perfgate").glob("*.pgrun"))
    return json.loads(runs[-1].read_text())


def test_benchmark_disable_in_addopts_is_measured_under_perfgate(
        suite: pytest.Pytester) -> None:
    res = suite.runpytest_inprocess(*ARGS)
    res.assert_outcomes(passed=5)
    assert "Benchmark fixture was not used" not in res.stdout.str()
    res.stdout.fnmatch_lines([
        "*= perfgate =*",
        "benchmark * now *baseline*",
        "test_bench.test_double *1.00k calls/s*NO BASELINE*",
        "test_bench.test_sized-10 *100k calls/s*NO BASELINE*",
        "test_bench.test_sized-1000 *1.00k calls/s*NO BASELINE*",
        "test_bench.test_pedantic *500 calls/s*NO BASELINE*",
        "test_bench.test_rows *2.00k rows/s*NO BASELINE*",
        "recorded run *"])
    benches = _record(suite)["benchmarks"]
    assert sorted(benches) == ["test_bench.test_double", "test_bench.test_pedantic",
                               "test_bench.test_rows", "test_bench.test_sized-10",
                               "test_bench.test_sized-1000"]
    double = benches["test_bench.test_double"]
    assert double["unit"] == "calls/s" and double["source"] == "perfgate"
    assert double["cores"] > 0.5 and len(double["samples"]) == 4  # perfgate's own windows
    assert benches["test_bench.test_rows"]["unit"] == "rows/s"


def test_without_perfgate_pytest_benchmark_is_left_alone(suite: pytest.Pytester) -> None:
    res = suite.runpytest_inprocess("-p", "no:cacheprovider")
    res.assert_outcomes(passed=5)
    assert "= perfgate =" not in res.stdout.str()
    assert not (suite.path / "results").exists()


@pytest.mark.slow  # several full pytest runs in a row
def test_a_slowed_benchmark_is_a_regression_worded_in_calls(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(3):
        suite.runpytest_inprocess(*ARGS).assert_outcomes(passed=5)
    monkeypatch.setenv("SLOW", "2")
    res = suite.runpytest_inprocess(*ARGS, "-k", "double or rows")
    res.assert_outcomes(failed=1, passed=1)
    res.stdout.fnmatch_lines([
        "*perfgate REGRESSION: test_bench.test_double",
        "*throughput fell 50.0% (threshold 5%)*",
        "*calls/s: 500 now (median window) vs 1.00k baseline*",
        "*warm-up *, 4 windows, cores used 1.00*"])


@pytest.mark.slow  # several full pytest runs in a row
def test_a_noisy_cheap_call_says_what_to_do(pytester: pytest.Pytester,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(FAKE_CLOCK_CONFTEST)
    pytester.makepyfile(test_noisy="""
        import os
        from conftest import CLOCK
        LEVEL = float(os.environ["LEVEL"])
        def test_cheap(benchmark):
            benchmark(lambda: CLOCK.advance(1e-4 * LEVEL))
    """)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    for level in (1.0, 1.3, 0.8, 1.25, 1.0):  # ~25% run-to-run spread
        monkeypatch.setenv("LEVEL", str(level))
        res = pytester.runpytest_inprocess(*ARGS)
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines([
        "*test_noisy.test_cheap: INCONCLUSIVE: measured *, but the noise against 4 baseline "
        "run(s), run-to-run spread *% can only resolve drops of *% or more, above the 5% "
        "threshold. The cause is the spread: this runner's run medians scatter by *%, and "
        "resolving 5% at alpha=0.01 needs a spread below *% however many runs are recorded; "
        "a cheap call's speed drifts between runs: compare in one run with the interleaved A/B "
        "mode (--perfgate-ab BASE_REV), or gate its "
        "instruction counts, which do not drift with the machine (--perfgate-counts), or "
        "raise the threshold. Not re-measured: *"])


@pytest.mark.parametrize(("body", "message"), [
    ("benchmark(42)", "*benchmark(42, ...): the first argument is the function to measure, "
                      "e.g. benchmark(sorted, data)*"),
    ("benchmark.pedantic(len, args=([1],), setup=lambda: None)",
     "*benchmark.pedantic(..., setup=..., args=...): the arguments come either from "
     "args/kwargs or from what setup() returns, not both: have setup() return (args, kwargs)*"),
    ("benchmark.pedantic(len, setup=lambda: 5)",
     "*benchmark.pedantic(setup=...) returned 5: return None or (args, kwargs), e.g. "
     "((data,), {})*"),
    ("benchmark.pedantic(len, args=([1],), teardown=3)",
     "*benchmark.pedantic(..., teardown=3): pass a function, or leave it out*"),
    ("benchmark.weave(len)",
     "*benchmark.weave(...) is not measured under --perfgate (it times calls of a patched "
     "function while the test runs, with no step perfgate can repeat): call benchmark(f, "
     "*args) or benchmark.pedantic(f, ...) instead, or run this test without --perfgate*"),
])
def test_bad_benchmark_calls_are_clear_errors(pytester: pytest.Pytester, body: str,
                                              message: str) -> None:
    pytester.makeconftest(FAKE_CLOCK_CONFTEST)
    pytester.makepyfile(test_bad=f"def test_bad(benchmark):\n    {body}\n")
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    res = pytester.runpytest_inprocess(*ARGS)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([message])


def test_a_bad_unit_marker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad="""
        import pytest
        @pytest.mark.perfgate(unit="rows/s")
        def test_bad(benchmark):
            benchmark(len, [1])
    """)
    res = pytester.runpytest_inprocess("--perfgate", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([
        "*@pytest.mark.perfgate(unit='rows/s') on test_bad.py::test_bad: unit='rows/s' is not "
        "a unit of work: use 1-32 letters, digits, '_' or '-', starting with a letter, the "
        "plural of what one call does, e.g. unit='rows'"])


def test_a_perf_test_may_name_its_unit(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CLOCK_CONFTEST)
    pytester.makepyfile(test_frames="""
        from conftest import CLOCK
        def test_frames(perfgate):
            perfgate.measure(lambda: CLOCK.advance(0.001), transitions=4, unit="frames")
        def test_bad(perfgate):
            perfgate.measure(lambda: None, transitions=4, unit="2 frames")
    """)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    res = pytester.runpytest_inprocess(*ARGS)
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines([
        "*unit='2 frames' is not a unit of work: use 1-32 letters, digits, '_' or '-', "
        "starting with a letter, the plural of what one call does, e.g. unit='frames'*",
        "test_frames.test_frames *4.00k frames/s*NO BASELINE*"])


AB_SUITE = """
from conftest import CLOCK
SLOW = {slow}
def test_steady(benchmark):
    benchmark(CLOCK.advance, 0.002)
def test_changed(benchmark):
    assert benchmark(lambda: CLOCK.advance(0.002 * SLOW) or 7) == 7
"""


@pytest.mark.slow  # real side processes and a git worktree (their steps on the fake clock)
def test_ab_measures_pytest_benchmark_tests_in_both_revisions(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.setenv("PERFGATE_PROFILE", "off")  # no py-spy profile of the REGRESSION

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=pytester.path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    pytester.makeconftest(FAKE_CLOCK_CONFTEST)  # committed: both sides run on the fake clock
    pytester.makeini("[pytest]\naddopts = --benchmark-disable\n"
                     "perfgate_results_dir = results\n")
    pytester.makepyfile(test_pb=AB_SUITE.format(slow=1.0))
    git("add", "-A")
    git("commit", "-qm", "base")
    pytester.makepyfile(test_pb=AB_SUITE.format(slow=2.0))
    git("commit", "-qam", "head: test_changed twice as slow")
    res = pytester.runpytest_subprocess(
        "--perfgate", "--perfgate-machine=ab", "--perfgate-ab=HEAD~1",
        "--perfgate-threshold=10%", "--perfgate-ab-turns=6", "--perfgate-ab-turn-time=0.05",
        "--perfgate-warmup-max=5", "-p", "no:cacheprovider", timeout=300)
    res.assert_outcomes(failed=1, passed=1)
    res.stdout.fnmatch_lines(["*perfgate REGRESSION: test_pb.test_changed",
                              "*calls/s: 250 now (median window) vs 500 baseline (base side's "
                              "median)*"])  # the fake clock: exactly 2x
    assert_turns(res.stdout.str(), 6)
    assert "REGRESSION: test_pb.test_steady" not in res.stdout.str()
    (run,) = (pytester.path / "results" / "ab" / "perfgate").glob("*.pgrun")
    rec = json.loads(run.read_text())
    assert rec["metadata"]["mode"] == "ab"
    for name in ("test_pb.test_steady", "test_pb.test_changed"):  # both sides measured
        assert rec["benchmarks"][name]["extra"]["ab_base"] == "HEAD~1"
        assert rec["benchmarks"][name]["unit"] == "calls/s"
    # the head's figures: the steady call as fast as in the base, the changed one half
    assert rec["benchmarks"]["test_pb.test_steady"]["steps_per_s"] == pytest.approx(500)
    assert rec["benchmarks"]["test_pb.test_changed"]["steps_per_s"] == pytest.approx(250)


def test_a_pedantic_setup_cannot_be_counted_and_says_what_to_do(
        pytester: pytest.Pytester) -> None:
    import shutil

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind not installed: apt-get install valgrind")
    pytester.makeconftest(FAKE_CLOCK_CONFTEST)
    pytester.makepyfile(test_bad="""
        def test_bad(benchmark):
            benchmark.pedantic(len, setup=lambda: (([1],), {}))
    """)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    res = pytester.runpytest_inprocess(*ARGS, "--perfgate-counts")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([
        "*benchmark.pedantic(..., setup=/teardown=...) cannot be counted: callgrind counts one "
        "call of a plain step, and setup's instructions would count as the call's. Mark the "
        "test @pytest.mark.perfgate(counts=False) to keep its wall-time verdict, or call "
        "benchmark(f, *args)*"])


def test_a_kept_fixture_object_is_never_a_silent_pass(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CLOCK_CONFTEST)
    pytester.makepyfile(test_kept="""
        import pytest

        class TestKept:
            @pytest.fixture(autouse=True)
            def setup(self, benchmark):
                self.benchmark = benchmark

            def test_kept(self):
                self.benchmark(len, [1])
    """)
    pytester.makeini("[pytest]\naddopts = --benchmark-disable\n"
                     "perfgate_results_dir = results\n")
    res = pytester.runpytest_inprocess(*ARGS)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([
        "*this test called pytest-benchmark's own fixture object (kept by another fixture, "
        "e.g. self.benchmark = benchmark), which perfgate does not measure, so nothing was "
        "measured: call the benchmark argument the test itself receives, or run this test "
        "without --perfgate*"])


@pytest.mark.slow  # real side processes and a git worktree (their steps on the fake clock)
def test_ab_sides_use_the_configuration_the_run_was_given(pytester: pytest.Pytester) -> None:
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=pytester.path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    pytester.makeconftest(FAKE_CLOCK_CONFTEST)
    # the project's everyday config, which a benchmark run bypasses with -c (as bidict does)
    pytester.makeini("[pytest]\naddopts = --no-such-option\n")
    (pytester.path / "bench.ini").write_text("[pytest]\nperfgate_results_dir = results\n")
    pytester.makepyfile(test_pb=AB_SUITE.format(slow=1.0))
    git("add", "-A")
    git("commit", "-qm", "base")
    git("commit", "--allow-empty", "-qm", "head")
    res = pytester.runpytest_subprocess(
        "-c", "bench.ini", "--perfgate", "--perfgate-machine=ab", "--perfgate-ab=HEAD~1",
        "--perfgate-threshold=10%", "--perfgate-ab-turns=4", "--perfgate-ab-turn-time=0.05",
        "--perfgate-warmup-max=5", "-p", "no:cacheprovider", "-k", "steady", timeout=300)
    res.assert_outcomes(passed=1, deselected=1)
    res.stdout.fnmatch_lines(["*test_pb.test_steady*500 calls/s*"])
    assert "no-such-option" not in res.stdout.str()

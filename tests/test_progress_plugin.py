"""Progress in pytest's terminal output, end to end in pytester sandboxes on a fake clock:
one final line per benchmark in a log, a rewritten status line on a terminal, nothing
under -q or in smoke mode, and pytest's own dots and percentages left intact."""

from __future__ import annotations

import re

import pytest
from fake_session import FAKE_CLOCK_CONFTEST

CONFTEST = FAKE_CLOCK_CONFTEST + """
def fake_configure(config):
    if os.environ.get("FAKE_TTY"):  # the terminal reporter writes to a terminal
        config.pluginmanager.get_plugin("terminalreporter").isatty = lambda: True
"""

PERF_TEST = """
from conftest import CLOCK

def test_walk(perfgate):
    def step():
        CLOCK.advance(0.001)
    perfgate.measure(step, transitions=16)
    perfgate.measure(step, transitions=32, name="walk_twice")

def test_plain():
    pass
"""

ARGS = ["--perfgate", "--perfgate-machine=testbox", "--perfgate-windows=2",
        "--perfgate-window-time=0.05", "--perfgate-warmup-max=0.2", "-p", "no:cacheprovider"]


@pytest.fixture
def sandbox(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_perf=PERF_TEST)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    return pytester


FINAL = re.compile(r"^perfgate: (\S+): ([\d.]+k) steps/s, NO BASELINE \((\d+\.\d) s\)$")


def _run_lines(result: pytest.RunResult) -> list[str]:
    """The lines between the session header and the first summary section."""
    lines = result.outlines
    start = next(i for i, x in enumerate(lines) if "collected " in x)
    end = next(i for i, x in enumerate(lines) if i > start and x.startswith("====="))
    return [x for x in lines[start + 1:end] if x]


def test_a_log_gets_one_line_per_benchmark_and_pytest_keeps_its_dots(sandbox):
    result = sandbox.runpytest_inprocess(*ARGS)
    result.assert_outcomes(passed=2)
    lines = _run_lines(result)
    assert len(lines) == 4, lines
    assert lines[0] == "test_perf.py "  # pytest's line, ended before the measurement
    finals = [FINAL.match(x) for x in lines[1:3]]
    assert all(finals), lines
    assert [m.group(1) for m in finals if m] == ["test_perf.test_walk", "walk_twice"]
    assert "\r" not in result.stdout.str()  # nothing rewritten in a log
    # the step advances the fake clock 1 ms per call: 16 and 32 transitions per ms
    assert [m.group(2) for m in finals if m] == ["16.0k", "32.0k"]
    assert re.fullmatch(r"test_perf\.py \.\. +\[100%\]", lines[3]), lines[3]


def test_quiet_shows_no_progress(sandbox):
    result = sandbox.runpytest_inprocess(*ARGS, "-q")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "perfgate: test_perf" not in out and "walk_twice" not in out.split("=====")[0]
    assert result.outlines[0].startswith("..")  # -q's dots, untouched


def test_smoke_mode_shows_no_progress(sandbox):
    result = sandbox.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert not [x for x in result.outlines if x.startswith("perfgate: test_perf")]


def test_a_terminal_gets_a_rewritten_status_line(sandbox, monkeypatch):
    monkeypatch.setenv("FAKE_TTY", "1")
    result = sandbox.runpytest_subprocess(*ARGS)  # its raw stdout keeps the \r
    result.assert_outcomes(passed=2)
    raw = (sandbox.path / "stdout").read_bytes().decode()  # no newline translation
    start = raw.index("collected ")
    lines = [x for x in raw[start:raw.index("=====", start)].split("\n")[1:] if x]
    assert len(lines) == 4, lines
    assert lines[0] == "test_perf.py "
    # one screen line per benchmark: its statuses, each rewound with \r and blanked to
    # the terminal's width, then its final line
    first = lines[1].split("\r")
    assert first[0] == "" and len({len(s) for s in first[1:]}) == 1  # all padded alike
    first = [s.rstrip() for s in first[1:]]
    assert first[0] == "perfgate: test_perf.test_walk: starting (0.0 s)"
    assert first[1] == "perfgate: test_perf.test_walk: warm-up (0.0 s)"
    assert re.fullmatch(r"perfgate: test_perf.test_walk: warm-up done in [\d.]+ s, "
                        r"(NOT )?steady \([\d.]+ s\)", first[2]), first[2]
    assert [re.sub(r" \([\d.]+ s\)$", "", s) for s in first[3:5]] == [
        "perfgate: test_perf.test_walk: window 1/2 16.0k steps/s",
        "perfgate: test_perf.test_walk: window 2/2 16.0k steps/s"]
    assert FINAL.match(first[5]) and len(first) == 6
    second = [s.rstrip() for s in lines[2].split("\r")[1:]]
    assert second[0] == "perfgate: walk_twice: starting (0.0 s)"
    assert FINAL.match(second[-1])
    assert re.fullmatch(r"test_perf\.py \.\. +\[100%\]", lines[3]), lines[3]


def test_verbose_keeps_the_test_id_before_its_word(sandbox):
    result = sandbox.runpytest_inprocess(*ARGS, "-v")
    result.assert_outcomes(passed=2)
    lines = _run_lines(result)
    assert lines[0] == "test_perf.py::test_walk "
    assert FINAL.match(lines[1]) and FINAL.match(lines[2])
    assert re.fullmatch(r"test_perf\.py::test_walk PASSED +\[ 50%\]", lines[3]), lines[3]
    assert re.fullmatch(r"test_perf\.py::test_plain PASSED +\[100%\]", lines[4]), lines[4]


FAILING = """
from conftest import CLOCK

def test_broken(perfgate):
    calls = []
    def step():
        CLOCK.advance(0.001)
        calls.append(1)
        if len(calls) > 50:
            raise RuntimeError("the env exploded")
    perfgate.measure(step, transitions=16)

def test_after():
    pass
"""


def test_a_measurement_that_raises_gets_its_final_line(sandbox):
    sandbox.makepyfile(test_perf=FAILING)
    result = sandbox.runpytest_inprocess(*ARGS)
    result.assert_outcomes(passed=1, failed=1)
    lines = _run_lines(result)
    assert lines[:3] == ["test_perf.py ",
                         "perfgate: test_perf.test_broken: stopped by RuntimeError (0.1 s)",
                         lines[2]]
    assert re.fullmatch(r"test_perf\.py F\. +\[100%\]", lines[2]), lines[2]

"""--perfgate-cuda-sync / perfgate_cuda_sync beside PERFGATE_CUDA_SYNC: flag > ini > env >
default, a bad value named with its source and the fix, and the chosen mode in the
environment every measuring process reads."""

from __future__ import annotations

import json

import pytest
from fake_session import FAKE_CLOCK_CONFTEST

from pytest_perfgate.session.options import OptionError, Options, parse_cuda_sync

ENV = "PERFGATE_CUDA_SYNC"
FIX = ("is not a CUDA synchronising mode: use edges (the device is synchronised at window "
       "edges only, phases timed by CUDA events) or phases (also at every phase exit, for "
       "diagnosis: it removes the CPU/GPU overlap, so the rate is lower than the workload's)")


def resolve(flags=None, ini=None, env=None) -> Options:  # type: ignore[no-untyped-def]
    return Options.resolve(True, flags or {}, ini or {}, {} if env is None else env)


def test_flag_beats_ini_beats_env_and_the_choice_is_exported() -> None:
    assert resolve().cuda_sync == "edges"
    env = {ENV: "Phases "}
    assert resolve(env=env).cuda_sync == "phases" and env[ENV] == "phases"
    env = {ENV: "phases"}
    assert resolve(ini={"cuda_sync": "edges"}, env=env).cuda_sync == "edges"
    assert env[ENV] == "edges"  # what the sides, workers and the ring's learner will read
    env = {ENV: "edges"}
    assert resolve(flags={"cuda_sync": "phases"}, ini={"cuda_sync": "edges"},
                   env=env).cuda_sync == "phases"
    assert env[ENV] == "phases"
    untouched: dict[str, str] = {}
    resolve(env=untouched)
    assert untouched == {}  # the default is no choice: nothing written


def test_a_bad_value_is_named_with_where_it_came_from() -> None:
    with pytest.raises(OptionError) as e:
        parse_cuda_sync("always")
    assert str(e.value) == f"'always' {FIX}"
    with pytest.raises(OptionError) as e:
        resolve(ini={"cuda_sync": "sometimes"})
    assert str(e.value) == f"ini option perfgate_cuda_sync: 'sometimes' {FIX}"
    with pytest.raises(OptionError) as e:
        resolve(env={ENV: "sometimes"})
    assert str(e.value) == f"environment variable {ENV}: 'sometimes' {FIX}"


def test_a_bad_flag_is_a_usage_error_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--perfgate-cuda-sync=often")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*argument --perfgate-cuda-sync: 'often' {FIX}"])


GPU_TAIL = """
import sys
from pytest_perfgate.gpu.fakes import FakeCuda, fake_torch

CUDA = FakeCuda(CLOCK)
sys.modules["torch"] = fake_torch(CUDA)
"""
LEARNER = """
from conftest import CLOCK, CUDA

def test_learner(perfgate):
    def step():
        with perfgate.phase("update"):
            CUDA.launch(0.003, launch_s=0.0004)
        CLOCK.advance(0.0005)
    perfgate.measure(step, transitions=256, name="learner")
"""


@pytest.mark.slow  # a pytest process
def test_the_ini_option_puts_gpu_time_in_each_phase_over_the_environment(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "edges")
    pytester.makeconftest(FAKE_CLOCK_CONFTEST + GPU_TAIL)
    pytester.makepyfile(test_perf=LEARNER)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\nperfgate_cuda_sync = phases\n")
    res = pytester.runpytest_subprocess("--perfgate", "--perfgate-machine=box",
                                        "--perfgate-windows=3", "--perfgate-window-time=0.05",
                                        "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*learner: CUDA synchronised at every phase exit*"])
    (sidecar,) = (pytester.path / "results").rglob("*.pgrun")
    learner = json.loads(sidecar.read_text())["benchmarks"]["learner"]
    assert learner["gpu"]["sync"] == "phases"
    # synchronised at the phase's exit, its CPU wall holds the launch (0.4 ms) and the 3 ms
    # of GPU work queued behind it (with edges only it would be the launch alone)
    assert learner["phases"]["update"]["ms_per_call"] == pytest.approx(3.4, rel=0.01)

"""The memory gate on GPU memory: ``memory_threshold=`` gates ``<bench>.gpu_mem`` (torch's
peak reserved) like host RSS, through pytest --perfgate with the fake torch.cuda."""

from __future__ import annotations

import json

import pytest
from fake_session import FAKE_CLOCK_CONFTEST

MiB = 2**20

GPU_CONFTEST_TAIL = """
import sys
from pytest_perfgate.gpu.fakes import FakeCuda, fake_torch

CUDA = FakeCuda(CLOCK)
sys.modules["torch"] = fake_torch(CUDA)
"""

GATED = """
import os
import pytest
from conftest import CUDA

@pytest.mark.perfgate(memory_threshold=0.10)
def test_learner(perfgate):
    nbytes = int(os.environ["GPU_MIB"]) * 2**20
    def step():
        CUDA.alloc(nbytes)
        CUDA.launch(0.001, launch_s=0.0001)
        CUDA.free(nbytes)
    perfgate.measure(step, transitions=256, name="learner")
"""


@pytest.mark.slow  # three pytest processes in a row
def test_gpu_memory_is_gated_like_host_memory(pytester: pytest.Pytester,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(FAKE_CLOCK_CONFTEST + GPU_CONFTEST_TAIL)
    pytester.makepyfile(test_perf=GATED)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    args = ["--perfgate", "--perfgate-machine=box", "--perfgate-windows=3",
            "--perfgate-window-time=0.02", "-p", "no:cacheprovider",
            "--perfgate-json=report.json"]

    def verdicts() -> dict[str, str]:
        rep = json.loads((pytester.path / "report.json").read_text())
        return {b["benchmark"]: b["verdict"] for b in rep["benchmarks"]}

    monkeypatch.setenv("GPU_MIB", "768")
    first = pytester.runpytest_subprocess(*args)
    first.assert_outcomes(passed=1)
    assert verdicts() == {"learner": "NO BASELINE", "learner.rss": "NO BASELINE",
                          "learner.gpu_mem": "NO BASELINE"}
    (sidecar,) = (pytester.path / "results").rglob("*.pgrun")
    recorded = json.loads(sidecar.read_text())["benchmarks"]
    assert set(recorded) == {"learner"}  # the verdict's figure is learner's own
    assert recorded["learner"]["memory"]["gpu_peak_reserved"] == 768 * MiB

    monkeypatch.setenv("GPU_MIB", "800")  # +4%: within the threshold
    second = pytester.runpytest_subprocess(*args)
    second.assert_outcomes(passed=1)
    assert verdicts()["learner.gpu_mem"] == "OK"

    monkeypatch.setenv("GPU_MIB", "1024")
    third = pytester.runpytest_subprocess(*args)
    third.assert_outcomes(failed=1)
    assert verdicts()["learner.gpu_mem"] == "REGRESSION"
    assert verdicts()["learner.rss"] != "REGRESSION"  # host memory did not move
    third.stdout.fnmatch_lines([
        "*perfgate REGRESSION: learner.gpu_mem",
        "*GPU peak memory rose 30.6% (1024 MiB now vs 784 MiB, the median of 2 baseline "
        "run(s)' peaks), more than the 10% memory threshold",
        "*GPU peak memory: allocated 1024 MiB, reserved 1024 MiB"])

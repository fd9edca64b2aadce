"""docs/gpu.md's end-to-end example gives the output the page shows; tools/gpu_check.py
says so plainly on a machine without a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


@pytest.mark.slow  # a fresh interpreter: the example puts a fake torch in sys.modules
def test_the_end_to_end_example_prints_what_the_page_shows() -> None:
    page = (ROOT / "docs/gpu.md").read_text()
    section = page[page.index("## A GPU learner measured end to end"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shown = re.search(r"Output:\n\n```\n(.*?)```", section, re.S)
    assert code is not None and shown is not None
    out = subprocess.run([sys.executable, "-c", code.group(1)], env=_env(),
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert out == shown.group(1)


@pytest.mark.slow  # a fresh interpreter
def test_gpu_check_on_a_machine_without_cuda_says_so_and_exits_2() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: tools/gpu_check.py would run its checks")
    res = subprocess.run([sys.executable, str(ROOT / "tools/gpu_check.py")], env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert res.stdout == (f"gpu_check: no CUDA device (torch {torch.__version__}, CUDA "
                          "runtime none: a CPU build): nothing to check; run it on a machine "
                          "with an NVIDIA GPU\n")


GPU_CONFTEST_TAIL = """
import sys
from pytest_perfgate.gpu.fakes import FakeCuda, fake_torch

CUDA = FakeCuda(CLOCK, initialized=False)  # initialised by the learner's first step
sys.modules["torch"] = fake_torch(CUDA)
"""
GPU_PERF = """
from conftest import CLOCK, CUDA

def test_walk(perfgate):
    def step():
        with perfgate.phase("physics"):
            CLOCK.advance(0.001)
    perfgate.measure(step, transitions=8, name="walk")

def test_learner(perfgate):
    def step():
        CUDA.initialized = True
        with perfgate.phase("copy_h2d"):
            CUDA.launch(0.0002, launch_s=0.00002)
        with perfgate.phase("update"):
            CUDA.alloc(768 * 2**20)
            CUDA.launch(0.003, launch_s=0.0004)
            CUDA.free(768 * 2**20)
        CLOCK.advance(0.0005)
    perfgate.measure(step, transitions=256, name="learner")
"""


@pytest.mark.slow  # a pytest process
def test_a_gpu_learner_through_the_plugin(pytester: pytest.Pytester) -> None:
    """The fake torch.cuda on the session's fake clock, through pytest --perfgate: the
    record, the asv series and the summary carry the GPU figures; the CPU test beside it
    records none."""
    import json

    from fake_session import FAKE_CLOCK_CONFTEST

    pytester.makeconftest(FAKE_CLOCK_CONFTEST + GPU_CONFTEST_TAIL)
    pytester.makepyfile(test_perf=GPU_PERF)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    res = pytester.runpytest_subprocess("--perfgate", "--perfgate-machine=box",
                                        "--perfgate-windows=3", "--perfgate-window-time=0.05",
                                        "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines([
        "*learner: peak memory *; GPU peak memory: allocated 768 MiB, reserved 768 MiB; cores*",
        "*learner: CUDA timed: window edges synchronise the device, phases carry GPU time "
        "from CUDA events",
        "*learner: phase update: CPU wall 0.4 ms, GPU 3 ms per call (its kernels run after "
        "the CPU has moved on: the GPU time is what it costs)"])
    (sidecar,) = (pytester.path / "results").rglob("*.pgrun")
    recorded = json.loads(sidecar.read_text())["benchmarks"]
    learner, walk = recorded["learner"], recorded["walk"]
    assert learner["gpu"] == {"sync": "edges", "device": 0}
    assert learner["phases"]["update"]["gpu_ms"] == pytest.approx(3.0, rel=0.01)
    assert learner["steps_per_s"] == pytest.approx(256 / 0.0032, rel=0.01)
    assert learner["memory"]["gpu_peak_reserved"] == 768 * 2**20
    assert "gpu" not in walk and "gpu_ms" not in walk["phases"]["physics"]
    assert not any(k.startswith("gpu") for k in walk.get("memory", {}))
    asv = json.loads((pytester.path / "results" / "benchmarks.json").read_text())
    assert asv["learner.gpu_mem"]["unit"] == "bytes" and "walk.gpu_mem" not in asv


@pytest.mark.slow  # a fresh interpreter
def test_gpu_check_without_torch_says_so_and_exits_2() -> None:
    code = ("import runpy, sys\nsys.modules['torch'] = None\nsys.argv = ['gpu_check.py']\n"
            f"runpy.run_path({str(ROOT / 'tools/gpu_check.py')!r}, run_name='__main__')\n")
    res = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stdout == "gpu_check: no CUDA device: torch is not installed; nothing to check\n"

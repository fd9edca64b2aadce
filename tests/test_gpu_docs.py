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

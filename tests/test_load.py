"""What the installed plugin loads in a pytest run that does not measure (docs/measurement.md).

A fresh interpreter runs pytest on a project that knows nothing of perfgate: the plugin may
load its entry point, the option table and the fixture modules, and nothing heavy. The
time it adds is measured by tools/bench_load.py, never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MAX_MODULES = 8
HEAVY = ("numpy", "scipy", "statistics", "fractions", "psutil", "asv", "filelock",
         "mujoco", "torch", "multiprocessing", "ctypes", "pytest_perfgate.session.gating",
         "pytest_perfgate.core.gate")
PROBE = """
import json, sys, pytest
rc = pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[2:], sys.argv[1]])
print(json.dumps({"rc": int(rc), "modules": sorted(sys.modules)}))
"""


def _loaded(project: Path, *args: str) -> tuple[int, set[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("PYTEST_ADDOPTS", None)
    out = subprocess.run([sys.executable, "-c", PROBE, str(project), *args], env=env,
                         cwd=project, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    got = json.loads(out.splitlines()[-1])
    return got["rc"], set(got["modules"])


@pytest.mark.slow  # two fresh interpreters
def test_a_run_without_perfgate_loads_only_the_entry_point(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
    rc, mods = _loaded(tmp_path)
    rc_off, mods_off = _loaded(tmp_path, "-p", "no:perfgate")
    assert rc == rc_off == 0
    ours = sorted(m for m in mods if m.split(".")[0] == "pytest_perfgate")
    assert "pytest_perfgate.plugin.hooks" in ours  # the plugin did load
    assert len(ours) <= MAX_MODULES, ours
    assert sorted(m for m in HEAVY if m in mods - mods_off) == []


@pytest.mark.slow
def test_a_smoke_perf_test_sets_the_session_up_on_first_use(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_perf.py").write_text(
        "def test_walk(perfgate):\n    perfgate.measure(lambda: None, transitions=1)\n")
    rc, mods = _loaded(tmp_path)
    assert rc == 0
    assert "pytest_perfgate.plugin.measuring" in mods  # registered when the fixture ran


def test_the_entry_point_knows_the_side_processes_by_their_variables() -> None:
    """A side or a counting worker sets the session up at configure (its pytest-benchmark
    tests use no perfgate fixture): the entry point names their variables without importing
    the modules that own them, so the two must agree."""
    from pytest_perfgate.modes.ab.remote import ENV_FD
    from pytest_perfgate.modes.counts.worker import ENV_OUT
    from pytest_perfgate.plugin.hooks import SIDE_ENVS

    assert SIDE_ENVS == (ENV_FD, ENV_OUT)

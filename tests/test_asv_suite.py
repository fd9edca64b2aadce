"""The asv suite in benchmarks/: what asv's own discovery finds there (docs/design.md §6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_perfgate.history import asv

ROOT = Path(__file__).resolve().parents[1]
DISCOVER = """
import json, sys
from asv_runner.discovery import disc_benchmarks
print(json.dumps({b.name: [b.type, b.unit, b.version, b.timeout]
                  for b in disc_benchmarks(sys.argv[1])}))
"""


def test_the_suite_spells_the_series_names_as_the_package_does() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import _perfgate
    finally:
        sys.path.remove(str(ROOT))
    assert (_perfgate.GATED_SUFFIX, _perfgate.SERIES_VERSION) == (asv.GATED_SUFFIX,
                                                                  asv.SERIES_VERSION)


def test_asv_discovers_one_track_per_workload_under_perfgates_names() -> None:
    pytest.importorskip("asv_runner")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", DISCOVER, str(ROOT / "benchmarks")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT.parent,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    names = ["humanoid_batch_256", "humanoid_pinned_workers_256", "ring_pair_humanoid_256"]
    assert found == {asv.gated_series(n): ["track", "seconds", asv.SERIES_VERSION, 300.0]
                     for n in names}
    shipped = (ROOT / "perf" / "test_perf_mujoco.py").read_text() + (
        ROOT / "perf" / "test_perf_ring.py").read_text()
    assert 'name="humanoid_batch_256"' in shipped  # the same workloads, one series each
    assert 'name="ring_pair_humanoid_256"' in shipped

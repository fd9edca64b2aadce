"""Several sessions recording into one results dir at once lose nothing (docs/design.md §6).

benchmarks.json and the asv result files are read-modify-written; unlocked, 4 writers x 20
records lost 19-37 of 80 entries. These tests use real processes, as two pytest sessions are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_perfgate.core import atomic
from pytest_perfgate.core.atomic import LockTimeout
from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.history.store import BENCHMARKS_LOCK, MACHINE_LOCK, History

ROOT = Path(__file__).resolve().parents[1]
COMMITS = ["1" * 40, "2" * 40, "3" * 40, "4" * 40]
META = {"machine": "box", "python": "3.11.7", "arch": "x86_64", "cpu_model": "CPU X"}

WRITER = textwrap.dedent("""
    import sys, time
    from pytest_perfgate.core.results import BenchRecord, PhaseSummary, RunRecord
    from pytest_perfgate.history.store import History
    results, proc, n, start_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    commits = [c * 40 for c in "1234"]
    meta = {"machine": "box", "python": "3.11.7", "arch": "x86_64", "cpu_model": "CPU X"}
    history = History(results, "box")
    while time.time() < start_at:  # all writers start together
        time.sleep(0.001)
    for j in range(n):
        name = f"b{proc}_{j}"
        bench = BenchRecord(name=name, samples=(10.0, 10.1, 10.2), rate=1e5,
                            phases={"physics": PhaseSummary(2.5, 0.7, 1.0)})
        history.record(RunRecord(f"p{proc}-{j}", 100.0 + proc * 100 + j, commits[j % 4], 0,
                                 "main", False, "box", "fpA", meta, {name: bench}))
""")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


@pytest.mark.slow
def test_concurrent_writers_lose_no_entry(tmp_path: Path) -> None:
    results, procs, n = tmp_path / "results", 4, 20
    start_at = time.time() + 3.0  # after every interpreter has imported
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(results), str(p), str(n),
                                 str(start_at)], env=_env(), stderr=subprocess.PIPE, text=True)
               for p in range(procs)]
    for w in writers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
    names = {f"b{p}_{j}" for p in range(procs) for j in range(n)}
    history = History(results, "box")
    assert {r.run_id for r in history.load_runs()} == {f"p{p}-{j}" for p in range(procs)
                                                       for j in range(n)}
    bj = json.loads((results / "benchmarks.json").read_text())
    series = {s for b in names for s in (f"{b}.track_s_per_step", f"{b}.phase.physics")}
    assert series - set(bj) == set(), "benchmarks.json lost entries"
    for i, commit in enumerate(COMMITS):
        rows = json.loads((results / "box" / f"{commit[:8]}-virtualenv-py3.11.json").read_text())
        want = {f"b{p}_{j}" for p in range(procs) for j in range(n) if j % 4 == i}
        got = {k.rsplit(".", 1)[0] for k in rows["results"]}
        assert want - got == set(), f"asv file of {commit[:8]} lost rows"
    assert json.loads((results / "box" / "machine.json").read_text())["machine"] == "box"
    leftovers = [p.name for p in results.rglob(f"*{atomic.TMP_SUFFIX}")]
    assert leftovers == []


HOLDER = textwrap.dedent("""
    import sys, time
    from filelock import FileLock
    with FileLock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(60)
""")


@pytest.mark.parametrize("lock", [MACHINE_LOCK, BENCHMARKS_LOCK])
def test_a_lock_held_too_long_is_an_infrastructure_error_naming_the_lock_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lock: str) -> None:
    history = History(tmp_path / "results", "box")
    lock_file = (history.sidecar_dir if lock == MACHINE_LOCK else history.results_dir) / lock
    lock_file.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_file)], env=_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(atomic, "LOCK_TIMEOUT_S", 0.3)
        run = RunRecord("r1", 1.0, COMMITS[0], 0, None, False, "box", "fpA", META,
                        {"walk": BenchRecord(name="walk", samples=(1.0,), rate=1.0)})
        with pytest.raises(LockTimeout) as exc:
            history.record(run)
    finally:
        holder.kill()
        holder.communicate()  # also closes its stdout pipe
    assert isinstance(exc.value, OSError)  # reported as an infrastructure error, not a verdict
    assert str(exc.value) == (
        f"could not lock {lock_file} within 0.3 s: another process holds it (a pytest session "
        "still recording into the same results dir, or a hung one; `fuser "
        f"{lock_file}` shows which); let it finish or stop it, or record into another "
        "--perfgate-results-dir")
    assert [r.run_id for r in history.load_runs()] == ["r1"]  # the gate's input is kept
    history.record(run)  # the holder is gone: the kernel dropped its lock

"""A history written in the perfgate-1 asv format is rebuilt from its sidecars on the next
record: the old unit (seconds per million env-steps) never shares a line with the new one.

tests/data/asv_perfgate1 was written by the code before the change (two commits, aaaa... and
bbbb..., the second 30% slower), lock files removed.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.history.asv import SERIES_VERSION
from pytest_perfgate.history.asv_rebuild import VIEW_MARK
from pytest_perfgate.history.store import History

OLD = Path(__file__).parent / "data" / "asv_perfgate1"
A, B, C = "a" * 40, "b" * 40, "c" * 40


@pytest.fixture
def old_history(tmp_path: Path) -> History:
    shutil.copytree(OLD, tmp_path / "results")
    return History(tmp_path / "results", "ci-box")


def _new_run(h: History) -> RunRecord:
    old = h.load_runs()[-1]
    bench = BenchRecord(name="humanoid_batch_256", samples=(35.0, 36.0, 37.0),
                        rate=1e6 / 36.0, transitions=256)
    return RunRecord("20261201T120000-new", old.started_at + 3600, C, old.commit_date_ms + 1,
                     "main", False, "ci-box", old.fingerprint, old.metadata,
                     {"humanoid_batch_256": bench})


def test_the_fixture_is_really_the_old_format(old_history: History) -> None:
    files = sorted(p.name for p in old_history.machine_dir.glob("*.json"))
    assert files == ["aaaaaaaa-perfgate-py3.11.json", "bbbbbbbb-perfgate-py3.11.json",
                     "machine.json"]
    row = json.loads((old_history.machine_dir / files[0]).read_text())["results"][
        "humanoid_batch_256"]
    assert row[0] == [pytest.approx(30.175)] and row[2] == "perfgate-1"  # s per Msteps
    assert len(old_history.load_runs()) == 2  # the sidecars read as they always did


def test_the_next_record_rebuilds_every_commit_in_the_new_unit(old_history: History) -> None:
    h = old_history
    h.record(_new_run(h))
    files = sorted(p.name for p in h.machine_dir.glob("*.json"))
    assert files == [f"{c[:8]}-virtualenv-py3.11.json" for c in (A, B, C)] + ["machine.json"]
    values = {}
    for commit in (A, B, C):
        data = json.loads((h.machine_dir / f"{commit[:8]}-virtualenv-py3.11.json").read_text())
        assert all(row[2] == SERIES_VERSION for row in data["results"].values())
        assert not any("steps_per_s" in k or k.endswith("_ms") for k in data["results"])
        values[commit] = data["results"]["humanoid_batch_256.track_s_per_step"][0][0]
    assert values[A] == pytest.approx(30.175e-6)  # seconds per env-step: asv shows us
    assert values[B] / values[A] == pytest.approx(1.3)
    assert values[C] == pytest.approx(36e-6)
    bj = json.loads((h.results_dir / "benchmarks.json").read_text())
    assert {k: v["version"] for k, v in bj.items() if k != "version"} == {
        "humanoid_batch_256.track_s_per_step": SERIES_VERSION,
        "humanoid_batch_256.phase.physics": SERIES_VERSION}
    assert bj["humanoid_batch_256.track_s_per_step"]["unit"] == "seconds"
    assert (h.sidecar_dir / VIEW_MARK).read_text().strip() == SERIES_VERSION
    assert len(h.load_runs()) == 3  # sidecars untouched; nothing read twice


def test_asv_reads_the_rebuilt_files(old_history: History) -> None:
    asv_results = pytest.importorskip("asv.results")
    old_history.record(_new_run(old_history))
    res = asv_results.Results.load(
        str(old_history.machine_dir / f"{B[:8]}-virtualenv-py3.11.json"), machine_name="ci-box")
    assert res.get_result_value("humanoid_batch_256.track_s_per_step", []) == [
        pytest.approx(30.175e-6 * 1.3)]


def test_the_rebuild_runs_once(old_history: History) -> None:
    h = old_history
    h.record(_new_run(h))
    probe = h.machine_dir / "dddddddd-perfgate-py3.11.json"  # a rebuild would delete it
    shutil.copy(OLD / "ci-box" / "aaaaaaaa-perfgate-py3.11.json", probe)
    later = _new_run(h)
    h.record(dataclasses.replace(later, run_id="20261201T130000-newer",
                                 started_at=later.started_at + 60))
    assert probe.exists()


def test_rows_of_other_tools_survive_the_rebuild(old_history: History) -> None:
    h = old_history
    path = h.machine_dir / f"{A[:8]}-virtualenv-py3.11.json"
    theirs = {"suite.time_x": [[1.0], [], "abc", 5, 2.0],
              "humanoid_batch_256": [[30.0], [], "perfgate-1", 5]}  # an old row of ours
    path.write_text(json.dumps({**json.loads((h.machine_dir / "aaaaaaaa-perfgate-py3.11.json")
                                            .read_text()), "env_name": "virtualenv-py3.11",
                                "results": theirs}))
    h.record(_new_run(h))
    rows = json.loads(path.read_text())["results"]
    assert rows["suite.time_x"] == theirs["suite.time_x"]
    assert "humanoid_batch_256" not in rows and "humanoid_batch_256.track_s_per_step" in rows

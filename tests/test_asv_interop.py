"""asv-run results and perfgate's runs in one history, read both ways (docs/design.md §6).

Rows here are written the way `asv run` writes them (checked against a real asv run by
tests/test_asv_continuous.py): asv's env name, its params, a duration in column 4.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
from helpers import C1, C2, C3, ENV, asv_row, asv_writes

from pytest_perfgate.core.results import BenchRecord, PhaseSummary, RunRecord
from pytest_perfgate.history.asv import SERIES_VERSION
from pytest_perfgate.history.asv_runs import is_asv_run
from pytest_perfgate.history.baseline import describe_other_fingerprints, select_baseline
from pytest_perfgate.history.files import HistoryWarning
from pytest_perfgate.history.machine_id import fingerprint
from pytest_perfgate.history.store import History

META: dict[str, Any] = {"machine": "box", "cpu_model": "CPU X", "cpu_logical": 2,
                        "affinity": "0-1", "python": "3.11.7", "arch": "x86_64",
                        "system": "Linux", "kernel": "6.1", "mem_total": 2 ** 30,
                        "versions": {"numpy": "2.0", "mujoco-core": "4.0.1"}}


def plugin_run(run_id: str, commit: str, started: float, s_per_msteps: float = 10.0
               ) -> RunRecord:
    b = BenchRecord(name="walk", samples=(s_per_msteps,) * 3, rate=1e6 / s_per_msteps,
                    phases={"physics": PhaseSummary(2.5, 0.7, 1.0)})
    return RunRecord(run_id, started, commit, 1_700_000_000_000, "main", False, "box",
                     fingerprint(META), META, {"walk": b})






@pytest.fixture
def h(tmp_path: Path) -> History:
    return History(tmp_path / "results", "box")


def test_asv_rows_come_back_as_reduced_runs_clearly_marked(h: History) -> None:
    h.record(plugin_run("p1", C1, 100.0))
    asv_writes(h, C2, {"walk.track_s_per_step": asv_row(12e-6, 200_000),
                       "other_suite.time_sort": asv_row(0.5, 200_000, "abc123")})
    runs = h.load_runs()
    assert [r.run_id for r in runs] == ["p1", f"asv-{C2[:12]}-{ENV}"]
    got = runs[1]
    assert is_asv_run(got) and not is_asv_run(runs[0])
    assert (got.commit, got.started_at, got.dirty, got.machine) == (C2, 200.0, False, "box")
    assert list(got.benchmarks) == ["walk"]  # only our gated series, not other asv benchmarks
    walk = got.benchmarks["walk"]
    assert walk.source == "asv" and walk.samples == (pytest.approx(12.0),)  # s per Msteps
    assert walk.rate == pytest.approx(1e6 / 12.0)
    assert got.metadata["asv_env_name"] == ENV and got.metadata["cpu_model"] == "CPU X"
    assert h.load_runs(asv_runs=False) == [runs[0]]


def test_asv_runs_never_serve_as_a_baseline_for_plugin_runs_but_for_each_other(
        h: History) -> None:
    h.record(plugin_run("p1", C1, 100.0))
    asv_writes(h, C1, {"walk.track_s_per_step": asv_row(11e-6, 150_000)})
    asv_writes(h, C2, {"walk.track_s_per_step": asv_row(12e-6, 200_000)})
    runs = h.load_runs()
    asv_c1, asv_c2 = (r for r in runs if is_asv_run(r))
    assert asv_c1.fingerprint == asv_c2.fingerprint != fingerprint(META)
    ours = select_baseline(runs, "walk", fingerprint=fingerprint(META), head_commit=C3,
                           is_ancestor=lambda c: set(c))
    assert [r.run_id for r, _ in ours] == ["p1"]
    theirs = select_baseline(runs, "walk", fingerprint=asv_c2.fingerprint, head_commit=C2,
                             is_ancestor=lambda c: set(c))
    assert [r.run_id for r, _ in theirs] == [asv_c1.run_id]
    why = describe_other_fingerprints([r for r in runs if is_asv_run(r)], fingerprint(META),
                                      "walk", current_meta=META)
    assert why is not None and f"2 runs exist on fingerprint {asv_c1.fingerprint} (recorded " \
        "by `asv run`, whose files keep no CPU affinity, cgroup quota or NUMA nodes: " \
        "docs/design.md §6) which differs in: " in why, why
    assert "affinity none -> 0-1" in why, why  # versions are the environment, not the machine


def test_a_plugin_run_keeps_the_row_asv_wrote_at_its_commit(h: History) -> None:
    asv_writes(h, C2, {"walk.track_s_per_step": asv_row(12e-6, 200_000)})
    h.record(plugin_run("p2", C2, 300.0, s_per_msteps=30.0))
    rows = json.loads((h.machine_dir / f"{C2[:8]}-{ENV}.json").read_text())["results"]
    assert rows["walk.track_s_per_step"] == asv_row(12e-6, 200_000)  # asv's number stays
    assert rows["walk.phase.physics"][0] == [pytest.approx(2.5e-3)]  # ours fills the rest
    assert {r.run_id for r in h.load_runs()} == {"p2", f"asv-{C2[:12]}-{ENV}"}  # both kept


def test_rows_asv_could_not_measure_or_of_another_version_are_not_runs(h: History) -> None:
    asv_writes(h, C1, {"walk.track_s_per_step": asv_row(None, 1000),  # failed
                       "jump.track_s_per_step": asv_row(math.nan, 1000),  # skipped
                       "old.track_s_per_step": asv_row(1e-5, 1000, "perfgate-1")})
    asv_writes(h, C2, {"walk.track_s_per_step": [[1e-5], [], SERIES_VERSION, 2000]})  # ours
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert h.load_runs() == []
    # a negative time per env-step is no result asv marks as failed: garbage, named
    bad = asv_writes(h, C3, {"neg.track_s_per_step": asv_row(-1.0, 3000)})
    with pytest.warns(HistoryWarning, match=f"skipping rows of history file {bad}: row "
                      "'neg.track_s_per_step': result -1.0 is not seconds per env-step"):
        assert h.load_runs() == []


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"results": [], "commit_hash": 5}'])
def test_an_unreadable_asv_file_is_skipped_with_one_warning(h: History, text: str) -> None:
    asv_writes(h, C2, {"walk.track_s_per_step": asv_row(12e-6, 200_000)})
    bad = h.machine_dir / f"{C1[:8]}-{ENV}.json"
    bad.write_text(text)
    with pytest.warns(HistoryWarning) as caught:
        runs = h.load_runs()
    assert [r.commit for r in runs] == [C2]
    assert len(caught) == 1 and str(caught[0].message).startswith(
        f"not reading asv-run results from history file {bad}: "), caught[0].message


def test_benchmarks_json_gets_our_entries_back_after_asv_run_rewrote_it(h: History) -> None:
    h.record(plugin_run("p1", C1, 100.0))
    bj = h.results_dir / "benchmarks.json"  # `asv run` keeps only its own suite's entries
    suite = {"name": "walk.track_s_per_step", "type": "track", "unit": "seconds",
             "params": [], "param_names": [], "version": SERIES_VERSION,
             "code": "def track_walk(): ..."}
    bj.write_text(json.dumps({"walk.track_s_per_step": suite, "version": 2}))
    h.record(plugin_run("p2", C2, 200.0))
    data = json.loads(bj.read_text())
    assert data["walk.track_s_per_step"] == suite  # asv's discovered entry, real code, kept
    assert data["walk.phase.physics"]["unit"] == "seconds"  # ours back


def test_asvs_durations_survive_a_plugin_rewrite_and_garbage_in_them_does_not(
        h: History) -> None:
    path = asv_writes(h, C2, {"walk.track_s_per_step": asv_row(12e-6, 200_000)})
    data = json.loads(path.read_text())
    data["durations"] = {"<build>": 12.5, "odd": "slow", "nan": math.nan}
    path.write_text(json.dumps(data))
    h.record(plugin_run("p2", C2, 300.0))
    assert json.loads(path.read_text())["durations"] == {"<build>": 12.5}


def test_perfgate_check_judges_an_asv_run_against_earlier_asv_runs(
        h: History, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_perfgate.cli import main

    for i, (commit, value) in enumerate(((C1, 10.0e-6), (C2, 10.3e-6), (C3, 40e-6))):
        asv_writes(h, commit, {"walk.track_s_per_step": asv_row(value, (i + 1) * 100_000)})
    assert not h.machine_dir.joinpath("perfgate").exists()  # asv alone recorded this machine
    status = main(["check", f"asv-{C3[:12]}-{ENV}", "--results-dir", str(h.results_dir),
                   "--repo", str(tmp_path)])  # the one machine folder: no --machine needed
    out = capsys.readouterr().out
    assert out.startswith(f"perfgate check: run asv-{C3[:12]}-{ENV} of machine 'box'"), out
    assert "walk: REGRESSION: throughput fell 74.6%" in out, out  # 4x slower than C1, C2
    assert "baseline: 2 run(s) at 2222222222, 1111111111" in out, out
    assert status == 1

"""The environment a run recorded (history/environment.py), the machine-only fingerprint that
no longer splits the history on a dependency bump, and the rebaseline that accepts one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import record

from pytest_perfgate.cli import main
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.history import environment as env
from pytest_perfgate.history.decisions import load_decisions
from pytest_perfgate.history.machine_id import fingerprint, refingerprint
from pytest_perfgate.history.store import History
from pytest_perfgate.session.options import OptionError, parse_env_vars


class FakeDist:
    def __init__(self, name: str, version: str, editable: bool = False) -> None:
        self.metadata = {"Name": name}
        self.version = version
        self._editable = editable

    def read_text(self, name: str) -> str | None:
        if name == "direct_url.json" and self._editable:
            return json.dumps({"url": "file:///src", "dir_info": {"editable": True}})
        return None


def test_installed_names_every_distribution_once_and_leaves_the_editable_project_out() -> None:
    dists: list[Any] = [FakeDist("NumPy", "2.2.0"), FakeDist("mujoco_core", "4.0.1"),
                        FakeDist("numpy", "1.0"), FakeDist("my-rl", "0.1.dev23", True)]
    versions, editable = env.installed(dists)
    # the first copy on sys.path is what `import` finds
    assert versions == {"mujoco-core": "4.0.1", "numpy": "2.2.0"}
    assert editable == ["my-rl"]


def test_collect_reads_this_process_without_importing() -> None:
    got = env.collect(["MY_KNOB"], {"driver": "550.1", "cuda_runtime": "12.4"},
                      environ={"OMP_NUM_THREADS": "4", "MY_KNOB": "x"})
    assert got["packages"]["pytest"] and got["python"].count(".") == 2
    assert got["vars"]["OMP_NUM_THREADS"] == "4" and got["vars"]["MY_KNOB"] == "x"
    assert got["vars"]["MUJOCO_GL"] is None  # recorded as unset: a later "egl" is a change
    assert (got["gpu_driver"], got["cuda_runtime"]) == ("550.1", "12.4")


def _env(**packages: str) -> dict[str, Any]:
    return {"python": "3.11.2", "packages": packages, "editable": [], "vars": {}}


def test_changes_name_bumps_additions_removals_python_driver_and_variables() -> None:
    before = {**_env(numpy="2.1.3", gym="0.26", torch="2.4.0"), "gpu_driver": "550",
              "vars": {"OMP_NUM_THREADS": None, "MUJOCO_GL": "egl"}}
    after = {**_env(numpy="2.2.0", gym="0.26", scipy="1.14"), "python": "3.11.9",
             "gpu_driver": "560", "vars": {"OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl"}}
    words = [c.words() for c in env.changes(before, after)]
    assert words == ["python 3.11.2 -> 3.11.9", "numpy 2.1.3 -> 2.2.0", "scipy 1.14 added",
                     "torch 2.4.0 removed", "gpu driver 550 -> 560",
                     "$OMP_NUM_THREADS unset -> 1"]
    assert env.changes(before, before) == []


def test_the_project_itself_and_partial_old_records_are_not_changes() -> None:
    head = {**_env(numpy="2.2.0", **{"my-rl": "0.2"}), "editable": ["my-rl"]}
    assert env.changes(_env(numpy="2.2.0", **{"my-rl": "0.1"}), head) == []
    # a run recorded before the whole environment was kept knows a few versions only
    old = env.of_run({"python": "3.11.2", "versions": {"numpy": "2.1.3", "torch": None}})
    assert [c.words() for c in env.changes(old, _env(numpy="2.2.0", scipy="1"))] == [
        "numpy 2.1.3 -> 2.2.0"]


def test_since_baseline_counts_what_differs_from_every_baseline_run() -> None:
    now = _env(numpy="2.2.0", scipy="1.14")
    base = [{env.ENV_KEY: _env(numpy="2.1.3", scipy="1.14")},
            {env.ENV_KEY: _env(numpy="2.1.3", scipy="1.13")}]
    assert env.describe(env.since_baseline(base, now)) == "numpy 2.1.3 -> 2.2.0"
    assert env.since_baseline([], now) == []
    many = [env.Change(f"p{i}", "1", "2") for i in range(9)]
    assert env.describe(many).endswith("p5 1 -> 2 and 3 more")


def test_the_machine_info_hook_still_sets_a_version() -> None:
    meta = {env.ENV_KEY: _env(numpy="2.1.3"), "versions": {"numpy": "9.9"}}
    assert env.of_run(meta)["packages"]["numpy"] == "9.9"


def test_a_dependency_bump_keeps_the_fingerprint_and_old_records_join_it() -> None:
    meta = {"machine": "box", "cpu_model": "EPYC", "cpu_logical": 2, "affinity": "0-1",
            "cgroup_cpu_quota": None, "numa_nodes": 1, "python": "3.11.2",
            "versions": {"numpy": "2.1.3"}, "gpu": {"driver": "550", "devices": []}}
    fp = fingerprint(meta)
    assert fingerprint({**meta, "python": "3.12.0", "versions": {"numpy": "2.2.0"},
                        "gpu": {"driver": "560", "devices": []}}) == fp
    assert fingerprint({**meta, "cpu_model": "Xeon"}) != fp
    old = RunRecord("r1", 1.0, "1" * 40, 0, None, False, "box", "fp-with-numpy-in-it", meta,
                    {})
    assert refingerprint(old).fingerprint == fp
    bare = RunRecord("r2", 1.0, "1" * 40, 0, None, False, "box", "kept", {"mode": "ab"}, {})
    assert refingerprint(bare).fingerprint == "kept"


def test_parse_env_vars() -> None:
    assert parse_env_vars("OMP_NUM_THREADS, MUJOCO_GL\nMY_X") == (
        "OMP_NUM_THREADS", "MUJOCO_GL", "MY_X")
    with pytest.raises(OptionError, match="'1X' is not an environment variable name"):
        parse_env_vars("OMP 1X")
    with pytest.raises(OptionError, match="names no variable"):
        parse_env_vars(" , ")


def test_rebaseline_starts_a_new_baseline_and_is_shown(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    results = tmp_path / "results"
    runs = record(results, [250.0] * 4 + [300.0] * 2)
    new = runs[4]
    assert main(["rebaseline", new.run_id, "--results-dir", str(results),
                 "--reason", "numpy 2.2, intended"]) == 0
    assert f"new baseline on machine box from run {new.run_id}" in capsys.readouterr().out
    d = load_decisions(results, "box")
    assert d.since == new.started_at and d.rebaselines[0].reason == "numpy 2.2, intended"
    loaded = History(results, "box").load_runs()
    assert [d.may_serve(r, "walk") for r in loaded] == [False] * 4 + [True] * 2
    assert main(["history", "walk", "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert f"; new baseline from run {new.run_id} (perfgate rebaseline: numpy 2.2, " \
           "intended)" in out  # on the change point's line, above the run
    # accept and forget keep it
    assert main(["forget", runs[0].run_id, "--results-dir", str(results)]) == 0
    assert load_decisions(results, "box").since == new.started_at


def test_rebaseline_needs_a_reason_and_a_run(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    runs = record(results, [250.0])
    for args, said in (([runs[0].run_id, "--reason", " "], "the reason is empty"),
                       (["20990101T000000-nope00", "--reason", "x"],
                        "no run '20990101T000000-nope00'")):
        with pytest.raises(SystemExit) as e:
            main(["rebaseline", *args, "--results-dir", str(results)])
        assert e.value.code == 2
        assert said in capsys.readouterr().err
    assert load_decisions(results, "box").rebaselines == ()


def test_garbage_rebaselines_are_dropped_with_a_warning(tmp_path: Path) -> None:
    results = tmp_path / "results"
    record(results, [250.0])
    path = results / "box" / "perfgate" / "decisions.pgaccept"
    path.write_text(json.dumps({"perfgate_decisions": 1, "accepted": [], "forgotten": [],
                                "rebaselines": [{"run": "../x", "at": 1.0},
                                                {"run": "r1", "at": "soon"},
                                                {"run": "r2", "at": 5.0, "commit": "c",
                                                 "reason": "ok"}]}))
    with pytest.warns(UserWarning, match="'rebaselines': entries that are no rebaseline"):
        d = load_decisions(results, "box")
    assert [r.run_id for r in d.rebaselines] == ["r2"]


def test_history_marks_an_environment_change(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    h = History(results, "box")
    runs = record(results / "scratch", [250.0] * 6)
    for i, r in enumerate(runs):
        numpy = "2.1.3" if i < 3 else "2.2.0"
        h.record(RunRecord(r.run_id, r.started_at, r.commit, 0, "main", False, "box", "fp",
                           {"mode": "history", env.ENV_KEY: _env(numpy=numpy)}, r.benchmarks))
    assert main(["history", "walk", "--results-dir", str(results), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["events"] == [{"index": 3, "run_id": runs[3].run_id,
                              "what": "environment: numpy 2.1.3 -> 2.2.0"}]

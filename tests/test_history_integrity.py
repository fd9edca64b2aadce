"""History that one bad file cannot break: every file read is checked against its schema.

A bad sidecar is skipped, a bad asv file (machine.json, benchmarks.json, a result file) is
rebuilt, each with ONE HistoryWarning naming the file and what is wrong; the run records and
garbage is never carried into a rewritten file.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_perfgate.core.results import BenchRecord, PhaseSummary, RunRecord
from pytest_perfgate.history.files import HistoryWarning
from pytest_perfgate.history.store import History

META: dict[str, Any] = {"machine": "box", "cpu_model": "CPU X", "cpu_logical": 2,
                        "python": "3.11.7", "arch": "x86_64", "system": "Linux", "kernel": "6.1",
                        "mem_total": 2 ** 30, "versions": {"numpy": "2.0"}}
C1 = "1" * 40


def run(run_id: str, started: float = 100.0, benches: tuple[str, ...] = ("walk",)
        ) -> RunRecord:
    return RunRecord(run_id, started, C1, 1_700_000_000_000, "main", False, "box", "fpA", META,
                     {b: BenchRecord(name=b, samples=(10.0, 10.1, 10.2), rate=1e5,
                                     phases={"physics": PhaseSummary(2.5, 0.7, 1.0)})
                      for b in benches})


@pytest.fixture
def h(tmp_path: Path) -> History:
    return History(tmp_path / "results", "box")


def asv_result(h: History) -> Path:
    return h.machine_dir / f"{C1[:8]}-virtualenv-py3.11.json"


def record_warned(h: History, r: RunRecord) -> list[str]:
    """Record ``r``; the HistoryWarnings it raised (the run must still record)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h.record(r)
    assert (h.sidecar_dir / f"{r.run_id}.pgrun").is_file()
    return [str(w.message) for w in caught if issubclass(w.category, HistoryWarning)]


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        for key in path[:-1]:
            d = d[key]
        if value is _DELETE:
            del d[path[-1]]
        else:
            d[path[-1]] = value
    return edit


_DELETE = object()
BAD_SIDECARS = {
    "steps_per_s is a string": (("benchmarks", "walk", "steps_per_s"), "fast", "steps_per_s"),
    "dirty is a string": (("dirty",), "no", "dirty"),
    "run_id is a number": (("run_id",), 5, "run_id"),
    "started_at is a string": (("started_at",), "yesterday", "started_at"),
    "cores is a list": (("benchmarks", "walk", "cores"), [1], "cores"),
    "phase time is a string": (("benchmarks", "walk", "phases", "physics", "ms_per_call"),
                               "2.5", "ms_per_call"),
    "phases is a list": (("benchmarks", "walk", "phases"), ["physics"], "phases"),
    "metadata is a list": (("metadata",), [1, 2], "metadata"),
    "benchmarks is a list": (("benchmarks",), [], "benchmarks"),
    "a benchmark is a number": (("benchmarks", "walk"), 3, "walk"),
    "sample is infinite": (("benchmarks", "walk", "samples"), [10.0, float("inf")], "samples"),
    "sample is a string": (("benchmarks", "walk", "samples"), ["10"], "samples"),
    "samples missing": (("benchmarks", "walk", "samples"), _DELETE, "samples"),
    "commit missing": (("commit",), _DELETE, "commit"),
    "benchmark name with NUL": (("benchmarks", "walk", "name"), "wa\x00lk", "name"),
    "phase name with NUL": (("benchmarks", "walk", "phases"),
                            {"ph\x00ys": {"ms_per_call": 1.0, "share": 0.1, "cores": 1.0}},
                            "ph\\x00ys"),
}


@pytest.mark.parametrize("case", sorted(BAD_SIDECARS))
def test_a_sidecar_of_the_wrong_shape_is_skipped_with_one_warning(h: History, case: str) -> None:
    path, value, field = BAD_SIDECARS[case]
    h.record(run("good", 50.0))
    data = run("bad", 60.0).to_json()
    _set(path, value)(data)
    bad = h.sidecar_dir / "bad.pgrun"
    bad.write_text(json.dumps(data))
    with pytest.warns(HistoryWarning) as caught:
        runs = h.load_runs()
    assert [r.run_id for r in runs] == ["good"]
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(f"skipping history file {bad}: ") and field in message, message
    assert message.endswith("(delete or move it to silence this warning)")
    # the run at the same commit still records, and the bad file never reaches asv
    h.record(run("later", 70.0))
    assert set(json.loads(asv_result(h).read_text())["results"]) == {
        "walk.track_s_per_step", "walk.phase.physics"}


def test_a_benchmark_name_asv_cannot_take_does_not_stop_its_commit_recording(h: History) -> None:
    data = run("bad", 60.0).to_json()
    data["benchmarks"] = {"a\x00b": data["benchmarks"]["walk"] | {"name": "a\x00b"}}
    h.sidecar_dir.mkdir(parents=True)
    (h.sidecar_dir / "bad.pgrun").write_text(json.dumps(data))
    record_warned(h, run("r2", 70.0))
    assert "walk.track_s_per_step" in json.loads(asv_result(h).read_text())["results"]
    with pytest.warns(HistoryWarning, match="bad.pgrun: .*control characters"):
        assert [r.run_id for r in h.load_runs()] == ["r2"]


def test_machine_json_that_is_not_an_object_is_rebuilt_with_one_warning(h: History) -> None:
    h.machine_dir.mkdir(parents=True)
    (h.machine_dir / "machine.json").write_text('["ab", "cd"]')
    messages = record_warned(h, run("r1"))
    assert messages == [f"rebuilding history file {h.machine_dir / 'machine.json'}: expected a "
                        "JSON object, found a list (rewritten from this run's machine facts)"]
    mj = json.loads((h.machine_dir / "machine.json").read_text())
    assert mj["machine"] == "box" and "a" not in mj and "c" not in mj


def test_machine_json_keeps_user_fields_but_drops_garbage(h: History) -> None:
    h.machine_dir.mkdir(parents=True)
    (h.machine_dir / "machine.json").write_text(json.dumps(
        {"machine": "box", "version": 1, "rack": "r7", "nested": {"x": 1}, "cpu": [1]}))
    messages = record_warned(h, run("r1"))
    assert len(messages) == 1 and "machine.json" in messages[0] and "'nested'" in messages[0]
    mj = json.loads((h.machine_dir / "machine.json").read_text())
    assert mj["rack"] == "r7" and "nested" not in mj and mj["cpu"] == "CPU X"


@pytest.mark.parametrize("text, what", [
    ("[1, 2]", "expected a JSON object, found a list"),
    ('{"version": 1}', "version 1"),
    ("{not json", "not valid JSON"),
])
def test_benchmarks_json_of_the_wrong_shape_is_rebuilt_with_one_warning(
        h: History, text: str, what: str) -> None:
    h.results_dir.mkdir(parents=True)
    (h.results_dir / "benchmarks.json").write_text(text)
    messages = record_warned(h, run("r1"))
    assert len(messages) == 1, messages
    assert messages[0].startswith(f"rebuilding history file {h.results_dir / 'benchmarks.json'}:")
    assert what in messages[0]
    bj = json.loads((h.results_dir / "benchmarks.json").read_text())
    assert bj["version"] == 2 and "walk.track_s_per_step" in bj


def test_benchmarks_json_garbage_entries_are_not_carried(h: History) -> None:
    h.record(run("r1", benches=("other",)))
    path = h.results_dir / "benchmarks.json"
    bj = json.loads(path.read_text())
    bj["junk"] = 5
    bj["liar"] = dict(bj["other.track_s_per_step"], name="somebody-else")
    bj["typo"] = dict(bj["other.track_s_per_step"], name="typo", params="none")
    path.write_text(json.dumps(bj))
    messages = record_warned(h, run("r2", 110.0))
    assert len(messages) == 1
    assert "dropped 3 invalid entries" in messages[0] and "'junk'" in messages[0]
    new = json.loads(path.read_text())
    assert {"other.track_s_per_step", "walk.track_s_per_step"} <= set(new)
    assert not {"junk", "liar", "typo"} & set(new)


@pytest.mark.parametrize("edit, what", [
    (lambda d: d.update(results="abc"), "'results' is a str, expected an object"),
    (lambda d: d.update(result_columns=["result", "mystery"]), "unknown result_columns"),
    (lambda d: d.update(params=["box"]), "'params' is a list, expected an object"),
    (lambda d: d.update(version=7), "version 7"),
])
def test_asv_result_file_of_the_wrong_shape_is_rebuilt_with_one_warning(
        h: History, edit: Callable[[dict[str, Any]], None], what: str) -> None:
    h.record(run("r1", benches=("old",)))
    data = json.loads(asv_result(h).read_text())
    edit(data)
    asv_result(h).write_text(json.dumps(data))
    messages = record_warned(h, run("r2", 110.0))
    assert len(messages) == 1 and messages[0].startswith(
        f"rebuilding history file {asv_result(h)}:") and what in messages[0], messages
    rows = json.loads(asv_result(h).read_text())["results"]
    # the sidecars rebuild what the file lost
    assert {"walk.track_s_per_step", "old.track_s_per_step"} <= set(rows)


def test_asv_result_garbage_rows_are_dropped_and_good_ones_kept(h: History) -> None:
    h.record(run("r1"))
    data = json.loads(asv_result(h).read_text())
    good = [[1.5], [], "v1", 5]
    data["results"].update({
        "kept": good, "short": [], "long": good + [None] * 20, "str_row": "x",
        "bad_value": [["fast"], [], "v1"], "bad_params": [[1.0], "none"],
    })
    asv_result(h).write_text(json.dumps(data))
    messages = record_warned(h, run("r2", 110.0))
    assert len(messages) == 1 and "dropped 5 invalid rows" in messages[0], messages
    rows = json.loads(asv_result(h).read_text())["results"]
    assert rows["kept"] == good
    assert not {"short", "long", "str_row", "bad_value", "bad_params"} & set(rows)
    assert rows["walk.track_s_per_step"][0] == [pytest.approx(10.1e-6)]


def test_sidecars_stay_readable_across_versions(h: History) -> None:
    """Unknown keys (a newer version's fields) are ignored, absent optional ones defaulted,
    counts written as floats by another tool accepted: none of that is garbage."""
    data = run("r1").to_json()
    bench = data["benchmarks"]["walk"]
    for key in ("cores", "steady", "warmup_s", "extra", "source", "phases"):
        del bench[key]
    bench.update(transitions=256.0, verdict="OK", future_field={"x": 1})
    data["future_top_level"] = [1]
    h.sidecar_dir.mkdir(parents=True)
    (h.sidecar_dir / "r1.pgrun").write_text(json.dumps(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (got,) = h.load_runs()
    assert got.benchmarks["walk"].transitions == 256 and got.benchmarks["walk"].phases == {}
    del bench["steps_per_s"]
    (h.sidecar_dir / "r1.pgrun").write_text(json.dumps(data))
    with pytest.warns(HistoryWarning, match="benchmark 'walk': missing key 'steps_per_s'"):
        assert h.load_runs() == []

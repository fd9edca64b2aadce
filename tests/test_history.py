"""History on disk: layout, asv rows, atomic writes, corrupt files, names, baseline rules."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_perfgate.core import atomic
from pytest_perfgate.core.atomic import TMP_SUFFIX, atomic_write, sweep_stale_temps
from pytest_perfgate.core.names import safe_name
from pytest_perfgate.core.results import BenchRecord, PhaseSummary, RunRecord
from pytest_perfgate.history.asv import asv_name
from pytest_perfgate.history.asv_schema import ASV_RESULT_COLUMNS
from pytest_perfgate.history.baseline import describe_other_fingerprints, select_baseline
from pytest_perfgate.history.files import HistoryWarning, default_results_dir, strip_comments
from pytest_perfgate.history.machine_id import refingerprint
from pytest_perfgate.history.store import History, validate_path_name

META: dict[str, Any] = {"machine": "box", "cpu_model": "CPU X", "cpu_logical": 2,
                        "python": "3.11.7", "arch": "x86_64", "system": "Linux", "kernel": "6.1",
                        "mem_total": 2 ** 30, "governor": "performance",
                        "versions": {"numpy": "2.0", "mujoco-core": "4.0.1"}}
C1, C2, C3, SIDE = "1" * 40, "2" * 40, "3" * 40, "5" * 40


def bench(name: str = "walk", scale: float = 1.0, n: int = 6) -> BenchRecord:
    return BenchRecord(name=name, samples=tuple(scale * (10.0 + i % 3 * 0.1) for i in range(n)),
                       rate=1e5 / scale, phases={"physics": PhaseSummary(2.5, 0.7, 1.0)})


def run(run_id: str, commit: str = C1, started: float = 100.0, *, fp: str = "fpA",
        dirty: bool = False, benches: tuple[str, ...] = ("walk",), scale: float = 1.0,
        meta: dict[str, Any] | None = None) -> RunRecord:
    return RunRecord(run_id, started, commit, 1_700_000_000_000, "main", dirty, "box", fp,
                     meta or META, {b: bench(b, scale) for b in benches})


@pytest.fixture
def h(tmp_path: Path) -> History:
    return History(tmp_path / "results", "box")


def asv_file(h: History, commit: str) -> dict[str, Any]:
    return json.loads((h.machine_dir / f"{commit[:8]}-virtualenv-py3.11.json").read_text())


def test_record_writes_sidecar_and_the_asv_view(h: History) -> None:
    r = run("r1")
    sidecar = h.record(r, {"walk": {"code": "def test_walk(): ...", "type": "ignored"}})
    assert sidecar == h.machine_dir / "perfgate" / "r1.pgrun"
    assert h.load_runs() == [refingerprint(r)]  # the machine's fingerprint, from META
    bj = json.loads((h.results_dir / "benchmarks.json").read_text())
    assert bj["version"] == 2
    gated = bj["walk.track_s_per_step"]
    assert (gated["type"], gated["unit"], gated["code"]) == (
        "track", "seconds", "def test_walk(): ...")
    assert bj["walk.phase.physics"]["unit"] == "seconds"
    assert not {"walk", "walk.steps_per_s"} & set(bj)  # higher-is-better: not exported
    mj = json.loads((h.machine_dir / "machine.json").read_text())
    assert mj == {"machine": "box", "os": "Linux", "arch": "x86_64", "cpu": "CPU X",
                  "num_cpu": "2", "ram": "1GiB", "version": 1}
    data = asv_file(h, C1)
    assert data["result_columns"] == ASV_RESULT_COLUMNS and data["version"] == 2
    assert data["env_name"] == "virtualenv-py3.11" and data["date"] == 1_700_000_000_000
    assert data["params"] == {"machine": "box", "os": "Linux", "arch": "x86_64",
                              "cpu": "CPU X", "num_cpu": "2", "ram": "1GiB",
                              "python": "3.11"}
    row = data["results"]["walk.track_s_per_step"]
    assert len(row) == 12  # profile (trailing null) dropped
    assert row[0] == [pytest.approx(10.1e-6)]  # seconds per env-step
    assert row[1:5] == [[], "perfgate-2", 100000, None]
    assert row[9:11] == [[1], [6]]
    assert row[11] == [[pytest.approx(s / 1e6) for s in r.benchmarks["walk"].samples]]
    assert row[5][0] <= row[7][0] <= 10.1e-6 <= row[8][0] <= row[6][0]  # ci_99 around IQR
    assert set(data["results"]) == {"walk.track_s_per_step", "walk.phase.physics"}


def test_asv_loads_our_files_in_process(h: History) -> None:
    asv_results = pytest.importorskip("asv.results")
    h.record(run("r1"))
    res = asv_results.Results.load(str(h.machine_dir / f"{C1[:8]}-virtualenv-py3.11.json"),
                                   machine_name="box")
    assert res.get_result_value("walk.track_s_per_step", []) == [pytest.approx(10.1e-6)]
    assert res.get_result_stats("walk.track_s_per_step", [])[0]["repeat"] == 6
    assert res.get_result_samples("walk.track_s_per_step", [])[0][0] == pytest.approx(1e-5)


def test_benchmarks_json_keeps_entries_it_did_not_write(h: History) -> None:
    h.results_dir.mkdir(parents=True)
    (h.results_dir / "benchmarks.json").write_text(json.dumps(
        {"suite.time_x": {"name": "suite.time_x", "type": "time", "unit": "seconds",
                          "params": [], "param_names": [], "version": "abc"}, "version": 2}))
    h.record(run("r1", benches=("walk",)))
    h.record(run("r2", C2, 200.0, benches=("run",)))
    assert {"suite.time_x", "walk.track_s_per_step", "run.track_s_per_step"} <= set(
        json.loads((h.results_dir / "benchmarks.json").read_text()))


def test_same_commit_later_run_replaces_asv_rows_but_keeps_every_sidecar(h: History) -> None:
    h.record(run("r1", started=100.0, benches=("walk", "run")))
    h.record(run("r2", started=200.0, benches=("walk",), scale=2.0))
    h.record(run("r3", started=300.0, benches=("walk",), scale=3.0, dirty=True))
    assert [r.run_id for r in h.load_runs()] == ["r1", "r2", "r3"]
    rows = asv_file(h, C1)["results"]
    # newest clean run; the dirty one does not replace it
    assert rows["walk.track_s_per_step"][0] == [pytest.approx(20.2e-6)]
    # a benchmark the later runs skipped keeps its row
    assert rows["run.track_s_per_step"][0] == [pytest.approx(10.1e-6)]


def test_run_outside_git_gets_no_asv_result_file(h: History) -> None:
    h.record(run("r1", commit="0" * 40))
    assert h.load_runs()[0].commit == "0" * 40
    assert sorted(p.name for p in h.machine_dir.iterdir()) == ["machine.json", "perfgate"]


def test_atomic_write_keeps_the_old_file_when_the_writer_dies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "benchmarks.json"
    atomic_write(target, b'{"old": 1}')

    def crash(src: str, dst: str) -> None:
        raise KeyboardInterrupt  # killed between write and rename

    monkeypatch.setattr(atomic.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, b'{"new": 1}' * 1000)
    assert target.read_bytes() == b'{"old": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["benchmarks.json"]  # no temp left


def test_record_crash_leaves_history_readable(h: History, monkeypatch: pytest.MonkeyPatch) -> None:
    h.record(run("r1"))
    before = (h.results_dir / "benchmarks.json").read_bytes()
    monkeypatch.setattr(atomic.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(OSError):
        h.record(run("r2", C2, 200.0, benches=("walk", "jump")))
    monkeypatch.undo()
    assert (h.results_dir / "benchmarks.json").read_bytes() == before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.run_id for r in h.load_runs()] == ["r1"]


def test_stale_temp_files_of_ours_are_swept(tmp_path: Path) -> None:
    old = tmp_path / f".x.json.abc{TMP_SUFFIX}"
    fresh = tmp_path / f".y.json.def{TMP_SUFFIX}"
    foreign = tmp_path / ".someone-elses.tmp"
    for p in (old, fresh, foreign):
        p.write_text("partial")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    os.utime(foreign, (time.time() - 7200, time.time() - 7200))
    assert sweep_stale_temps(tmp_path) == 1
    assert not old.exists() and fresh.exists() and foreign.exists()


def test_corrupt_sidecars_are_skipped_with_one_warning_each(h: History) -> None:
    h.record(run("good"))
    bad = {"trunc.pgrun": '{"perfgate_format": 1, "run_id": "t', "list.pgrun": "[1, 2]",
           "future.pgrun": json.dumps({**run("f").to_json(), "perfgate_format": 99}),
           "nokey.pgrun": json.dumps({"perfgate_format": 1})}
    for name, text in bad.items():
        (h.sidecar_dir / name).write_text(text)
    with pytest.warns(HistoryWarning) as caught:
        runs = h.load_runs()
    assert [r.run_id for r in runs] == ["good"]
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 4
    for name in bad:
        assert sum(str(h.sidecar_dir / name) in m for m in messages) == 1
    future = next(m for m in messages if "future.pgrun" in m)
    assert future == (f"skipping history file {h.sidecar_dir / 'future.pgrun'}: unknown "
                      "perfgate_format 99 (this version reads 1) (delete or move it to "
                      "silence this warning)")
    assert any("missing key 'run_id'" in m for m in messages)


def test_one_name_rule_for_every_on_disk_name() -> None:
    for ok in ("gh-runner_2.large", "_private", "a+b@c", "x" * 128):
        assert safe_name(ok, "machine name", "ci-runner-4core") == ok
    for bad in ("-lead", ".hidden", "a..b", "x" * 129, "a b", "é", 7):
        with pytest.raises(ValueError):
            safe_name(bad, "machine name", "ci-runner-4core")
    with pytest.raises(ValueError) as exc:
        safe_name("../../etc/x", "benchmark name", "name='humanoid_256'",
                  shown="name='../../etc/x'")
    assert str(exc.value) == (
        "name='../../etc/x' is not a usable benchmark name: use 1-128 letters, digits, '.', "
        "'_', '+', '@' or '-', starting with a letter, digit or '_', without '..', e.g. "
        "name='humanoid_256'")


def test_machine_and_run_names_cannot_leave_the_results_dir(tmp_path: Path) -> None:
    for bad in ("../up", "a/b", "..", "", "x\x00y", " lead", "a" * 129):
        with pytest.raises(ValueError) as exc:
            History(tmp_path, bad)
        assert str(exc.value) == (
            f"{bad!r} is not a usable machine name: use 1-128 letters, digits, '.', '_', '+', "
            "'@' or '-', starting with a letter, digit or '_', without '..', e.g. "
            "ci-runner-4core")
    assert validate_path_name("gh-runner_2.large") == "gh-runner_2.large"
    h = History(tmp_path / "r", "box")
    with pytest.raises(ValueError,
                       match=r"^'\.\./x' is not a usable run id: .*, e.g. 20240101T120000-ab12cd$"):
        h.record(run("../x"))
    with pytest.raises(ValueError) as exc:
        History(tmp_path / "r", "other").record(run("r1"))
    assert str(exc.value) == ("run 'r1' was measured on machine 'box' but this history is for "
                              "'other': open History(results_dir, 'box') instead")


def test_benchmark_names_are_flattened_for_asv_and_stay_inside(tmp_path: Path) -> None:
    assert asv_name("tests/perf/a.py::test_walk[256-2]") == "tests.perf.a.py.test_walk[256-2]"
    assert asv_name("../../etc/passwd") == "etc.passwd"
    assert asv_name("a\\b") == "a.b"
    with pytest.raises(ValueError) as exc:
        asv_name("bad\x00name")
    assert str(exc.value) == ("benchmark name 'bad\\x00name' is empty or contains control "
                              "characters (NUL, newline...): give the benchmark a printable name")
    h = History(tmp_path / "results", "box")
    h.record(run("r1", benches=("../../../evil",)))
    everything = {p.resolve() for p in tmp_path.rglob("*")}
    assert all(p.is_relative_to((tmp_path / "results").resolve()) for p in everything)
    assert "evil.track_s_per_step" in asv_file(h, C1)["results"]
    assert "../../../evil" in h.load_runs()[0].benchmarks  # the sidecar keeps the real name


def test_default_results_dir(tmp_path: Path) -> None:
    assert default_results_dir(tmp_path) == tmp_path / ".perfgate" / "results"
    conf = tmp_path / "asv.conf.json"
    conf.write_text('{\n // the asv suite\n "version": 1, "repo": ".",\n'
                    ' "results_dir": ".asv/results", // trailing comment\n}\n')
    assert default_results_dir(tmp_path) == (tmp_path / ".asv" / "results").resolve()
    conf.write_text('{"version": 1, "repo": "."}')
    assert default_results_dir(tmp_path) == (tmp_path / "results").resolve()  # asv's default
    conf.write_text('{"results_dir": ')
    with pytest.raises(ValueError, match=r"asv\.conf\.json is not valid JSON \(asv would refuse"):
        default_results_dir(tmp_path)
    conf.write_text('{"results_dir": 3}')
    with pytest.raises(ValueError, match=r"results_dir 3 is not a folder name; set"):
        default_results_dir(tmp_path)


def test_comment_stripper_fallback_keeps_strings() -> None:
    text = '{"url": "http://x//y", /* c */ "a": 1 // end\n}'
    assert json.loads(strip_comments(text)) == {"url": "http://x//y", "a": 1}


class Ancestry:
    """Fake git: main is C1 <- C2 <- C3; SIDE branches off C1."""

    def __init__(self) -> None:
        self.calls: list[set[str]] = []

    def __call__(self, commits: set[str]) -> set[str]:
        self.calls.append(set(commits))
        return commits & {C1, C2, C3}


def test_baseline_is_newest_n_same_fingerprint_ancestors() -> None:
    runs = [run("a", C1, 1), run("b", C2, 2), run("side", SIDE, 3), run("other-fp", C2, 4, fp="B"),
            run("c", C3, 5), run("no-walk", C2, 6, benches=("run",)), run("d", C2, 7)]
    anc = Ancestry()
    got = select_baseline(runs, "walk", fingerprint="fpA", head_commit=C3, is_ancestor=anc, n=3)
    assert [r.run_id for r, _ in got] == ["d", "b", "a"]  # "c" is HEAD's own run
    assert all(b is r.benchmarks["walk"] for r, b in got)
    assert anc.calls == [{C1, C2, SIDE}]  # asked once; HEAD itself needs no question
    assert select_baseline(runs, "jump", fingerprint="fpA", head_commit=C3, is_ancestor=anc) == []


def test_pull_request_runs_never_become_another_pull_requests_baseline() -> None:
    runs = [run("main", C1, 1), run("pr1", SIDE, 2)]
    got = select_baseline(runs, "walk", fingerprint="fpA", head_commit=C2, is_ancestor=Ancestry())
    assert [r.run_id for r, _ in got] == ["main"]


def test_outside_git_compares_with_earlier_runs_outside_git() -> None:
    zeros = "0" * 40
    runs = [run("a", zeros, 1), run("b", zeros, 2)]
    got = select_baseline(runs, "walk", fingerprint="fpA", head_commit=zeros,
                          is_ancestor=lambda s: pytest.fail("git must not be asked"))
    assert [r.run_id for r, _ in got] == ["b", "a"]


def test_explicit_baseline_commit() -> None:
    runs = [run("a", C1, 1), run("a2", C1, 3), run("b", C2, 2), run("x", "12" + "0" * 38, 4)]
    never = Ancestry()
    got = select_baseline(runs, "walk", fingerprint="fpA", head_commit=C3, is_ancestor=never,
                          explicit_commit=C2[:7])
    assert [r.run_id for r, _ in got] == ["b"] and never.calls == []
    got = select_baseline(runs, "walk", fingerprint="fpA", head_commit=C3, is_ancestor=never,
                          explicit_commit=C1)
    assert [r.run_id for r, _ in got] == ["a2", "a"]
    with pytest.raises(ValueError) as exc:
        select_baseline(runs, "walk", fingerprint="fpA", head_commit=C3, is_ancestor=never,
                        explicit_commit="1")
    assert str(exc.value) == ("baseline commit prefix '1' matches several recorded commits "
                              "(111111111111, 120000000000): give more digits")
    with pytest.raises(ValueError, match=r"^baseline size n=0 must be at least 1"):
        select_baseline(runs, "walk", fingerprint="fpA", head_commit=C3, is_ancestor=never, n=0)


def test_describe_other_fingerprints() -> None:
    new_meta = {**META, "versions": {"numpy": "2.0", "mujoco-core": "4.0.2"}, "numa_nodes": 2}
    runs = [run("a", fp="old"), run("b", fp="old"), run("c", fp="cur", benches=("run",)),
            run("d", fp="x", benches=("run",))]
    assert describe_other_fingerprints(runs, "cur", "walk", current_meta=new_meta) == (
        "no results for walk on this machine fingerprint (cur); 2 runs exist on fingerprint "
        "old which differs in: numa_nodes none -> 2")
    assert describe_other_fingerprints(runs, "cur", "walk") == (
        "no results for walk on this machine fingerprint (cur); 2 runs exist on fingerprint old")
    assert describe_other_fingerprints(runs, "old", "jump") is None


def test_non_finite_display_values_never_break_recording(h: History) -> None:
    odd = BenchRecord(name="walk", samples=(10.0,), rate=float("nan"),
                      phases={"physics": PhaseSummary(float("inf"), 0.5, 1.0)})
    r = RunRecord("r1", 1.0, C1, 0, None, False, "box", "fpA", {**META, "when": Path("/x")},
                  {"walk": odd})
    h.record(r)
    rows = asv_file(h, C1)["results"]
    assert set(rows) == {"walk.track_s_per_step"}  # series without a finite value left out
    assert rows["walk.track_s_per_step"][5:7] == [None, None]  # one sample: infinite CI
    assert h.load_runs()[0].metadata["when"] == "/x"

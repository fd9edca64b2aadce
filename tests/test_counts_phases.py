"""Per-phase instruction counts without valgrind: dumps summed by label, the boundary
bookkeeping (innermost wins, "(other)"), the record, the asv series and the report line.
A real callgrind worker: tests/test_counts_phases_valgrind.py (slow)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from pytest_perfgate.core.gate import Rule
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.core.timing import PhaseRecorder, phase
from pytest_perfgate.history.asv import _asv_rows, asv_entries, counts_phases
from pytest_perfgate.modes.counts import phases
from pytest_perfgate.modes.counts.counting import counts_result
from pytest_perfgate.modes.counts.phases import OTHER, PhaseCounts, read_dumps, split_call
from pytest_perfgate.modes.counts.runner import Counts, collect, read_dump
from pytest_perfgate.modes.counts.worker import label
from pytest_perfgate.report.render import notes, top_phase

EVENTS = "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw"


def dump(path: Path, trigger: str, ir: int, l1: int = 0) -> None:
    path.write_text(f"# callgrind format\nversion: 1\ndesc: Trigger: Client Request: "
                    f"{trigger}\n{EVENTS}\nsummary: {ir} 0 0 {l1}\ntotals: {ir} 0 0 {l1}\n")


def worker_output(out: Path) -> None:
    """Call 0 of "walk": a (twice), b, inner nested in b, the tail; and a neighbour
    benchmark whose label shares a prefix."""
    call = label("walk", 0)
    for i, (trigger, ir) in enumerate([
            (f"{call}#phase:{OTHER}", 5), (f"{call}#phase:a", 100), (f"{call}#phase:{OTHER}", 7),
            (f"{call}#phase:a", 100), (f"{call}#phase:b", 250), (f"{call}#phase:inner", 90),
            (f"{call}#phase:b", 50), (call, 8), (label("walk", 0) + "1", 9999),
            (label("walk2", 0), 7777)]):
        dump(out / f"cg.out.{i + 1}", trigger, ir, l1=1)
    (out / "bench-001.json").write_text(json.dumps(
        {"name": "walk", "transitions": 2, "labels": [call]}))


def test_dumps_are_summed_by_label_and_the_phases_add_up_to_the_call(tmp_path: Path) -> None:
    worker_output(tmp_path)
    dumps = read_dumps(sorted(tmp_path.glob("cg.out*")), read_dump)
    whole, per = split_call(dumps, label("walk", 0))
    assert per == {OTHER: 5 + 7 + 8, "a": 200, "b": 300, "inner": 90}
    assert whole["Ir"] == sum(per.values()) == 610
    assert whole["I1mr"] == 8  # every event is summed, not only Ir


def test_collect_records_the_phases_beside_the_whole_call(tmp_path: Path) -> None:
    worker_output(tmp_path)
    (c,) = collect(tmp_path, "t::walk", 0).values()
    assert c.instructions == (610,)
    assert c.phase_ir == {OTHER: (20,), "a": (200,), "b": (300,), "inner": (90,)}
    extra = counts_result(c, "walk").extra
    assert extra["phase_instructions_per_step"] == {OTHER: 10, "a": 100, "b": 150, "inner": 45}
    assert extra["instructions_per_step"] == 305


def test_a_call_without_phases_has_no_breakdown(tmp_path: Path) -> None:
    dump(tmp_path / "cg.out.1", label("walk", 0), 1000)
    (tmp_path / "bench-001.json").write_text(json.dumps(
        {"name": "walk", "transitions": 4, "labels": [label("walk", 0)]}))
    (c,) = collect(tmp_path, "t::walk", 0).values()
    assert (c.instructions, c.phase_ir) == ((1000,), {})
    assert "phase_instructions_per_step" not in counts_result(c, "walk").extra


def test_an_unreadable_dump_is_skipped_with_a_warning_naming_it(tmp_path: Path) -> None:
    dump(tmp_path / "cg.out.1", label("walk", 0), 1000)
    (tmp_path / "cg.out.2").write_text(f"desc: Trigger: Client Request: x\n{EVENTS}\n"
                                       "totals: 12 garbage\n")
    with pytest.warns(UserWarning, match=r"cg.out.2"):
        dumps = read_dumps(sorted(tmp_path.glob("cg.out*")), read_dump)
    assert dumps == {label("walk", 0): {"Ir": 1000, "Dr": 0, "Dw": 0, "I1mr": 0, "D1mr": 0,
                                        "D1mw": 0, "ILmr": 0, "DLmr": 0, "DLmw": 0}}


def fake_dumps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each prepared dump appends its label instead of issuing a client request."""
    made: list[str] = []
    monkeypatch.setattr(phases, "_dumper", lambda lb: lambda: made.append(lb))
    return made


def test_each_boundary_dumps_the_stretch_that_ends_innermost_wins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = fake_dumps(monkeypatch)
    rec = PhaseRecorder()
    counter = PhaseCounts(rec)

    def step() -> None:
        with rec.phase("a"):  # how the fixture's perfgate.phase() reaches it
            pass
        with phase("b"):  # how library code (the pool) reaches it
            with phase("inner"):
                pass

    with counter.learning():
        step()
    assert counter.names == ["a", "b", "inner"] and made == []
    with counter.call("perfgate-counts:walk:0"):
        step()
    assert [m.split("#phase:")[1] for m in made] == [OTHER, "a", OTHER, "b", "inner", "b"]
    assert type(rec).phase is PhaseRecorder.phase and "phase" not in vars(rec)  # restored
    with phase("b"):  # the thread's active recorder is restored too: no dump, no timing
        pass
    assert len(made) == 6 and rec.take() == {}


def test_a_phase_left_out_of_order_ends_the_innermost_stretch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = fake_dumps(monkeypatch)
    rec = PhaseRecorder()
    with PhaseCounts(rec).call("c"):
        a, b = rec.phase("a"), rec.phase("b")
        a.__enter__()
        b.__enter__()
        a.__exit__(None, None, None)  # "b" is still open: the stretch was b's
        b.__exit__(None, None, None)
        b.__exit__(None, None, None)  # never open any more: the stretch was (other)'s
    assert [m.split("#phase:")[1] for m in made] == [OTHER, "a", "b", "b", OTHER]


def test_phases_of_other_threads_are_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    made = fake_dumps(monkeypatch)
    rec = PhaseRecorder()
    with PhaseCounts(rec).call("c"):
        t = threading.Thread(target=lambda: rec.phase("bg").__enter__())
        t.start()
        t.join(10)
    assert made == []


@pytest.mark.parametrize("off", ["0", "false", " Off "])
def test_disabled_counts_the_whole_step_only(monkeypatch: pytest.MonkeyPatch, off: str) -> None:
    made = fake_dumps(monkeypatch)
    monkeypatch.setenv(phases.ENV_PHASES, off)
    rec = PhaseRecorder()
    with PhaseCounts(rec, phases.enabled()).call("c"):
        with rec.phase("a"):
            pass
    assert made == [] and rec.take()["a"].calls == 1  # the recorder's own phase, untouched
    monkeypatch.setenv(phases.ENV_PHASES, "1")
    assert phases.enabled()


def test_a_bad_phase_name_fails_in_the_warm_up_naming_it(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    fake_dumps(monkeypatch)
    rec = PhaseRecorder()
    with pytest.raises(ValueError, match=r"phase\('no/slash'\) is not a usable"):
        with PhaseCounts(rec).learning():
            rec.phase("no/slash")
    assert "phase" not in vars(rec)


def result_with(breakdown: object) -> RunRecord:
    res = counts_result(Counts("walk", 2, (610,), (700,)), "walk")
    res = type(res)(**{**res.__dict__, "extra": {**res.extra,
                                                 "phase_instructions_per_step": breakdown}})
    return RunRecord("r", 1.0, "a" * 40, 0, None, False, "box", "f", {}, {res.name: res})


def test_phases_are_asv_series_beside_the_counts_and_a_report_line() -> None:
    run = result_with({OTHER: 10.0, "a": 100.0, "b": 150.0, "inner": 45.0})
    entries = asv_entries(run, {})
    assert entries["walk.counts.phase.b"]["unit"] == "instructions/env-step"
    assert entries["walk.counts.phase.(other)"]["type"] == "track"
    rows = _asv_rows(run, entries)
    assert rows["walk.counts.phase.inner"][0] == [45.0]
    assert rows["walk.counts"][0] == [305.0]

    (res,) = run.benchmarks.values()
    judged = Judged(res, None, Rule(), "t")
    (line,) = [n for n in notes([judged]) if "by phase" in n]
    assert top_phase(judged) == "b 49%"  # the table's column: the most instructions
    assert line == ("walk.counts: instructions/env-step by phase: b 150 (49%), a 100 (33%), "
                    "inner 45.0 (15%), (other) 10.0 (3%)")


@pytest.mark.parametrize("garbage", [None, "x", [1, 2], {"a": "1", "": 2, "b": float("nan"),
                                                         "c": True}])
def test_a_garbage_breakdown_in_a_sidecar_is_ignored(garbage: object) -> None:
    run = result_with(garbage)
    (res,) = run.benchmarks.values()
    assert counts_phases(res.extra) == {}
    assert top_phase(Judged(res, None, Rule(), "t")) == "-"
    assert not any(".phase." in k for k in asv_entries(run, {}))

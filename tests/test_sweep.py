"""The thread sweep: interleaving logic on a fake clock (exact), the table, ``perfgate sweep``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.turn_order import turn_order
from pytest_perfgate.sim import thread_sweep


def test_interleave_rotates_order_and_reports_per_call_medians():
    clock = FakeClock()
    order: list[str] = []

    def work(name: str, wall: float, cpu: float):
        def fn():
            order.append(name)
            clock.advance(wall, cpu)
        return fn

    calls = {"a": work("a", 0.010, 0.020), "b": work("b", 0.030, 0.030),
             "c": work("c", 0.001, 0.0005)}
    out = thread_sweep.interleave(calls, turns=3, per_turn=2, warmup=1, clock=clock)
    assert order[:3] == ["a", "b", "c"]  # warm-up, once each
    turns = order[3:]
    for t in range(3):  # each turn in the balanced design's order, per_turn calls in a row
        want = [n for n in turn_order(["a", "b", "c"], t) for _ in range(2)]
        assert turns[6 * t:6 * t + 6] == want
    assert turns[6:12] == ["a", "a", "c", "c", "b", "b"]  # not a rotation: a mirrored row
    assert all(x != y for x, y in zip(turns[5::6], turns[6::6], strict=False))
    assert out["a"] == [pytest.approx((0.010, 2.0))] * 3
    assert out["c"] == [pytest.approx((0.001, 0.5))] * 3
    assert thread_sweep.median_ratio(out["b"], out["a"]) == pytest.approx(3.0)


def test_interleave_reports_each_call_to_progress():
    from helpers import Recorder

    clock, rec = FakeClock(), Recorder()
    calls = {"1 unpinned": lambda: clock.advance(0.010), "2 unpinned": lambda: clock.advance(0.005)}
    thread_sweep.interleave(calls, turns=2, clock=clock, progress=rec, steps_per_call=100)
    assert rec.events == [
        ("warmup_started", "1 unpinned"), ("warmup_ended", True, 0.01, "1 unpinned"),
        ("warmup_started", "2 unpinned"), ("warmup_ended", True, 0.005, "2 unpinned"),
        ("window", 1, 2, 10000.0, "1 unpinned"), ("window", 1, 2, 20000.0, "2 unpinned"),
        ("window", 2, 2, 20000.0, "2 unpinned"), ("window", 2, 2, 10000.0, "1 unpinned")]


def test_interleave_rejects_zero_turns():
    with pytest.raises(ValueError, match=r"turns=0, per_turn=1: both must be >= 1"):
        thread_sweep.interleave({"a": lambda: None}, turns=0)


def test_median_ratio_is_paired():
    a = [(1.0, 1), (2.0, 1), (10.0, 1)]  # the machine slowed down 10x in the last turn
    b = [(2.0, 1), (4.0, 1), (20.0, 1)]
    assert thread_sweep.median_ratio(b, a) == 2.0


def test_default_thread_counts():
    assert thread_sweep.default_thread_counts(2, 1024) == [1, 2, 4, 8]
    assert thread_sweep.default_thread_counts(6, 1024) == [1, 2, 4, 6, 8, 16]
    assert thread_sweep.default_thread_counts(8, 3) == [1, 2]


def _row(threads, pinned, ms, ratio, rule=False):
    return thread_sweep.SweepRow(threads, pinned, ms, 1.9, 1000 / ms * 1e3, ratio, rule)


def test_table_marks_the_rule_and_names_the_fastest():
    res = thread_sweep.SweepResult(
        (_row(1, False, 20.0, 1.9), _row(2, False, 10.5, 1.0, rule=True),
         _row(2, True, 10.0, 0.95)), num_envs=1000, frame_skip=3, turns=7,
        metadata={"source": "g1.xml", "usable_cpus": "0-1",
                  "thread_rule": "min(num_envs=1000, 2 usable CPUs)"})
    assert res.table().splitlines() == [
        "MuJoCo pool thread sweep: g1.xml, 1000 envs x 3 substeps, usable CPUs 0-1, 7 turns "
        "interleaved, medians (time vs rule: of paired per-turn ratios)",
        "| threads | pinned | ms/step (cores used) | k env-steps/s | time vs rule |",
        "|---|---|---|---|---|",
        "| 1 | no | 20.00 (1.90) | 50.0 | 1.900 |",
        "| 2 | no | 10.50 (1.90) | 95.2 | 1.000 |  <- sizing rule",
        "| 2 | yes | 10.00 (1.90) | 100.0 | 0.950 |",
        "sizing rule: 2 unpinned (min(num_envs=1000, 2 usable CPUs)); fastest: 2 pinned at "
        "0.950x the rule's time",
    ]


@pytest.mark.parametrize("args, message", [
    (["--threads", "1,x"], "argument --threads: '1,x' is not a list of whole numbers >= 1: "
                           "use e.g. 1,2,4"),
    (["--threads", "0"], "argument --threads: '0' is not a list of whole numbers >= 1"),
    (["--envs", "0"], "argument --envs: '0' is not a batch size, a list or a range of them: "
                      "use whole numbers >= 1, e.g. 1024, 256,1024,4096 or 256..8192 "
                      "(doubling)"),
    (["--envs", "-5"], "argument --envs: '-5' is not a batch size"),
    (["--envs", "1e3"], "argument --envs: '1e3' is not a batch size"),
    (["--envs", "8192..256"], "argument --envs: '8192..256' is not a batch size"),
    (["--workers", "0"], "argument --workers: '0' is not a list of whole numbers >= 1"),
    (["--turn-time", "-1"], "argument --turn-time: '-1' is"),
    (["--envs", "256,512", "--threads", "2", "--no-pinned"],
     "--threads, --no-pinned belong(s) to the thread sweep (one --envs value, no --workers); "
     "the batch sweep sizes each pool by the rule: drop it, or sweep one batch size"),
    (["--turn-time", "0.5"], "--turn-time belongs to the batch sweep (several --envs values "
                             "or --workers); the thread sweep times single steps: use "
                             "--per-turn"),
    (["--turns", "x"], "argument --turns: 'x' is not a whole number: use e.g. 5"),
    (["--settle", "-1"], "argument --settle: '-1' is negative: use a whole number >= 0"),
])
def test_cli_argument_errors(args, message, capsys, monkeypatch):
    from pytest_perfgate.sim import thread_sweep as sw

    monkeypatch.setattr(sw, "run_sweep", None)  # nothing may start
    with pytest.raises(SystemExit) as e:
        main(["sweep", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: perfgate sweep ") and f"perfgate sweep: error: {message}" in err


def test_sweep_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: perfgate sweep [-h] [--model MODEL]")
    assert "humanoid, g1, tiny or a model path" in out


pytest.importorskip("mujoco.batch")


def test_settled_state_tiles_distinct_trajectories():
    from pytest_perfgate.sim.models import load_model

    m = load_model(thread_sweep.resolve_model("tiny"))
    held = thread_sweep.settled_state(m, 10, substeps=20, distinct=4)
    assert held.shape[0] == 10 and np.array_equal(held[4:8], held[:4])
    assert np.array_equal(held[8:], held[:2]) and not np.array_equal(held[0], held[1])


def test_run_sweep_on_the_tiny_model():
    from helpers import Recorder

    rec = Recorder()
    res = thread_sweep.run_sweep(thread_sweep.resolve_model("tiny"), 8, thread_counts=[1, 2],
                                 turns=2, settle_substeps=3, progress=rec)
    assert rec.events[0] == ("started", "thread sweep")
    assert rec.events[-1] == ("finished", "thread sweep", f"{len(res.rows)} configurations x "
                              "2 turns")
    assert {e[-1] for e in rec.events if e[0] == "window"} == {r.label for r in res.rows}
    labels = [r.label for r in res.rows]
    assert labels[:2] == ["1 unpinned", "2 unpinned"] and "1 pinned" in labels
    rule = [r for r in res.rows if r.rule]
    assert len(rule) == 1 and rule[0].time_vs_rule == 1.0
    assert "<- sizing rule" in res.table()
    json.dumps(res.to_dict())


def test_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "thread_sweep.json"
    rc = main(["sweep", "--model", "tiny", "--envs", "4", "--threads", "1,2", "--turns", "2",
               "--no-pinned", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| 2 | no |" in text and "<- sizing rule" in text
    data = json.loads(out.read_text())
    assert data["format"] == 1 and [r["threads"] for r in data["rows"]] == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["thread_sweep.json"]  # no temp file left


def test_cli_bad_model_file(tmp_path, capsys):
    missing = tmp_path / "none.xml"
    assert main(["sweep", "--model", str(missing), "--envs", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfgate sweep: error: ") and str(missing) in err


def test_cli_g1_missing(monkeypatch):
    from pytest_perfgate.sim import models

    monkeypatch.setattr(models, "g1_scene_path", lambda: None)
    with pytest.raises(SystemExit) as e:
        thread_sweep.resolve_model("g1")
    assert str(e.value) == models.G1_MISSING


def test_jsonl_is_one_self_contained_line_per_configuration():
    import json

    res = thread_sweep.SweepResult(
        (_row(1, False, 20.0, 1.9), _row(2, False, 10.5, 1.0, rule=True)), num_envs=1000,
        frame_skip=3, turns=7, metadata={"mujoco_version": "4.0.1", "model_sha256": "ab"})
    lines = [json.loads(x) for x in res.jsonl().splitlines()]
    assert [(x["threads"], x["rule"], x["num_envs"], x["mujoco"]) for x in lines] == [
        (1, False, 1000, "4.0.1"), (2, True, 1000, "4.0.1")]
    assert lines[0]["ms_per_step"] == 20.0 and lines[1]["model_sha256"] == "ab"

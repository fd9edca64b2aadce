"""The batch-size sweep: its plan and checks (no mujoco), the interleaving on a fake clock,
the table and JSON lines, ``perfgate sweep --envs A..B [--workers N]`` end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.sim import batch_plan
from pytest_perfgate.sim.batch_plan import BatchConfig, PlanError
from pytest_perfgate.sim.batch_report import BatchRow, BatchSweepResult


@pytest.mark.parametrize("text, sizes", [
    ("1024", (1024,)), ("256,1024, 4096", (256, 1024, 4096)), ("512,256,512", (512, 256)),
    ("256..8192", (256, 512, 1024, 2048, 4096, 8192)), ("256..1000", (256, 512, 1000)),
    ("7..7", (7,)),
])
def test_parse_envs(text, sizes):
    assert batch_plan.parse_envs(text) == sizes


@pytest.mark.parametrize("text", ["0", "-1", "x", "", "1e3", "256..", "..8", "8..4", "0..8",
                                  "2.5", "256,,-2"])
def test_parse_envs_refuses(text):
    with pytest.raises(PlanError) as e:
        batch_plan.parse_envs(text)
    assert str(e.value) == (f"{text!r} is not a batch size, a list or a range of them: use "
                            "whole numbers >= 1, e.g. 1024, 256,1024,4096 or 256..8192 "
                            "(doubling)")


def test_a_huge_range_stays_short():
    assert len(batch_plan.parse_envs("1..99999999999999999999")) <= batch_plan.MAX_DOUBLINGS + 2


def test_plan_pools_first_then_each_worker_count():
    got = batch_plan.plan([1024, 256], [2], usable_cpus=2)
    assert got == [BatchConfig(256), BatchConfig(1024), BatchConfig(256, 2),
                   BatchConfig(1024, 2)]
    assert [c.label for c in got] == ["256 pool", "1024 pool", "256 2w x 128", "1024 2w x 512"]


def test_plan_refuses_more_workers_than_cpus():
    with pytest.raises(PlanError, match=r"^--workers 3: each worker is pinned to CPUs of its "
                       r"own and only 2 CPU\(s\) are usable here: use at most 2$"):
        batch_plan.plan([1024], [1, 3], usable_cpus=2)


def test_plan_names_the_batch_that_does_not_split():
    with pytest.raises(PlanError) as e:
        batch_plan.plan([1024, 1000], [3], usable_cpus=4)
    assert str(e.value) == ("--envs 1024 with --workers 3: a total batch of 1024 envs does not "
                            "split evenly over 3 workers: use a multiple of 3, e.g. 1023 or "
                            "1026")


def test_a_sweep_that_fails_ends_its_status_line(monkeypatch):
    pytest.importorskip("mujoco.batch")
    from helpers import Recorder

    from pytest_perfgate.sim import batch_sweep, thread_sweep

    def boom(*a, **k):
        raise RuntimeError("no")

    monkeypatch.setattr(batch_sweep, "interleave_windows", boom)
    rec = Recorder()
    with pytest.raises(RuntimeError):
        batch_sweep.run_batch_sweep(thread_sweep.resolve_model("tiny"), [BatchConfig(4)], turns=1,
                                    settle_substeps=1, progress=rec)
    assert rec.events == [("started", "batch sweep"),
                          ("finished", "batch sweep", "stopped by RuntimeError")]


def test_plan_a_batch_smaller_than_the_workers():
    with pytest.raises(PlanError, match=r"^--envs 1 with --workers 2: a total batch of 1 envs "
                       r"does not split evenly over 2 workers: use a multiple of 2, e.g. 2$"):
        batch_plan.plan([1], [2], usable_cpus=2)


def test_cli_reports_a_crashed_worker_as_an_infrastructure_error(monkeypatch, capsys):
    pytest.importorskip("mujoco.batch")
    from pytest_perfgate.placement.workers import WorkerCrashed
    from pytest_perfgate.sim import batch_sweep

    def crash(*a, **k):
        raise WorkerCrashed("worker 0 (pid 7) died during the start: killed by signal SIGKILL")

    monkeypatch.setattr(batch_sweep, "run_batch_sweep", crash)
    assert main(["sweep", "--model", "tiny", "--envs", "4", "--workers", "1"]) == 3
    assert capsys.readouterr().err.endswith(
        "perfgate sweep: error: WorkerCrashed: worker 0 (pid 7) died during the start: killed "
        "by signal SIGKILL\n")


def test_memory_check_counts_every_configuration_at_once():
    configs = batch_plan.plan([1024, 2048, 4096], [2], usable_cpus=2)
    need = batch_plan.needed_bytes(configs, 1000, 10_000)
    assert need == 2 * 7168 * 1000 + 3 * 2 * 10_000
    batch_plan.check_memory(configs, 1000, 10_000, need, "why")  # exactly fits
    batch_plan.check_memory(configs, 1000, 10_000, None, "why")  # unknown: not refused
    with pytest.raises(PlanError) as e:
        batch_plan.check_memory(configs, 1000, 10_000, need - 1, "a bound")
    assert str(e.value) == (
        "--envs up to 4096: the sweep holds all 6 configurations at once (they are "
        "interleaved), about 13.7 MiB (1000 B per env at most: a bound; plus 9.8 KiB per "
        "worker process), but only 13.7 MiB is available: sweep fewer or smaller batch sizes, "
        "e.g. --envs 1024..2048")


def test_memory_check_of_one_size_suggests_the_most_that_fits():
    with pytest.raises(PlanError) as e:
        batch_plan.check_memory([BatchConfig(10_000)] * 4, 1024, 0, 4 * 1024 * 2500, "b")
    assert str(e.value).startswith("--envs 10000: the sweep holds all 4 configurations")
    assert str(e.value).endswith("is available: sweep fewer or smaller batch sizes, "
                                 "e.g. --envs 2500")


def test_available_memory_reads_meminfo_and_the_cgroup_limit(tmp_path: Path):
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    proc.mkdir()
    cg.mkdir()
    (proc / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable:   2048 kB\n")
    assert batch_plan.available_memory(str(proc), str(cg)) == 2048 * 1024
    (cg / "memory.max").write_text("max\n")
    assert batch_plan.available_memory(str(proc), str(cg)) == 2048 * 1024
    (cg / "memory.max").write_text("1048576\n")
    (cg / "memory.current").write_text("524288\n")
    assert batch_plan.available_memory(str(proc), str(cg)) == 524288
    (proc / "meminfo").write_text("garbage")
    (cg / "memory.current").write_text("garbage")
    assert batch_plan.available_memory(str(proc), str(cg)) is None


class Fixed:
    """A WindowSource at a fixed rate on a fake clock; logs its name on every window."""

    def __init__(self, name: str, rate: float, clock: FakeClock, log: list[str],
                 step_s: float = 0.125) -> None:
        self.name, self.rate, self.clock, self.log = name, rate, clock, log
        self.step_s = step_s
        self.asked: list[float] = []

    def run_window(self, d: float) -> RawWindow:
        self.log.append(self.name)
        self.asked.append(d)
        self.clock.advance(d)
        return RawWindow(int(self.rate * d), d, d, calls=max(1, round(d / self.step_s)))


def test_interleave_windows_rotates_and_reports_progress():
    from helpers import Recorder

    from pytest_perfgate.core.turn_order import turn_order
    from pytest_perfgate.sim.batch_sweep import interleave_windows, paired_ratio

    clock, log, rec = FakeClock(), [], Recorder()
    srcs = {n: Fixed(n, r, clock, log) for n, r in (("a", 1000), ("b", 3000), ("c", 2000))}
    out = interleave_windows(srcs, turns=3, turn_s=0.5, progress=rec)
    turns = [n for t in range(3) for n in turn_order(["a", "b", "c"], t)]
    assert log == ["a", "b", "c", *turns]  # warm-ups, then the balanced design's order
    assert turns[3:6] == ["a", "c", "b"]  # a mirrored row: not the old rotation
    assert [e[0] for e in rec.events[:6]] == ["warmup_started", "warmup_ended"] * 3
    assert rec.events[6:9] == [("window", 1, 3, 1000.0, "a"), ("window", 1, 3, 3000.0, "b"),
                               ("window", 1, 3, 2000.0, "c")]
    assert paired_ratio(out["b"], out["a"]) == 3.0


def test_a_slow_step_gets_windows_of_several_steps():
    from pytest_perfgate.sim.batch_sweep import MIN_STEPS, interleave_windows

    clock, log = FakeClock(), []
    fast = Fixed("fast", 100, clock, log, step_s=0.01)
    slow = Fixed("slow", 100, clock, log, step_s=0.4)
    interleave_windows({"fast": fast, "slow": slow}, turns=2, turn_s=0.25)
    assert fast.asked == [0.25, 0.25, 0.25]
    assert slow.asked == [0.25, MIN_STEPS * 0.25, MIN_STEPS * 0.25]  # warm-up: 1 step/0.25 s


def _row(n, workers, sps, vs_pool, vs_first):
    return BatchRow(n, workers, n // workers if workers else n, 1 if workers else 2, sps,
                    n / sps * 1e3 * (workers or 1), 1.9, vs_pool, vs_first)


def test_table_and_jsonl():
    res = BatchSweepResult((_row(256, 0, 15_000, 1.0, 1.0), _row(1024, 0, 18_000, 1.0, 1.2),
                            _row(1024, 2, 19_800, 1.1, 1.32)), frame_skip=1, turns=4,
                           turn_s=0.25, metadata={"source": "humanoid.xml",
                                                  "usable_cpus": "0-1", "mujoco_version": "4.0.1"})
    assert res.table().splitlines() == [
        "MuJoCo batch sweep: humanoid.xml, 1 substep(s), usable CPUs 0-1, 4 turns of 0.25 s "
        "interleaved, medians (x: of paired per-turn ratios of env-steps/s)",
        "| num_envs | run as | threads | k env-steps/s | ms/step (cores used) | x pool, same "
        "envs | x 256 envs, 1 pool |",
        "|---|---|---|---|---|---|---|",
        "| 256 | 1 pool | 2 | 15.0 | 17.07 (1.90) | 1.000 | 1.000 |",
        "| 1024 | 1 pool | 2 | 18.0 | 56.89 (1.90) | 1.000 | 1.200 |",
        "| 1024 | 2 workers x 512 | 1 each | 19.8 | 103.43 (1.90) | 1.100 | 1.320 |",
        "fastest: 1024 envs as 2 workers x 512, 1.320x the env-steps/s of 256 envs as 1 pool",
    ]
    lines = [json.loads(x) for x in res.jsonl().splitlines()]
    assert [(x["num_envs"], x["workers"], x["envs_per_worker"]) for x in lines] == [
        (256, 0, 256), (1024, 0, 1024), (1024, 2, 512)]
    assert all(x["sweep"] == "batch" and x["mujoco"] == "4.0.1" and x["turn_s"] == 0.25
               for x in lines)
    assert json.loads(json.dumps(res.to_dict()))["rows"][2]["vs_pool"] == 1.1


def test_cli_refuses_a_sweep_that_does_not_fit_before_starting(monkeypatch, capsys):
    pytest.importorskip("mujoco.batch")
    from pytest_perfgate.sim import batch_sweep

    monkeypatch.setattr(batch_sweep, "run_batch_sweep", None)  # nothing may start
    monkeypatch.setattr(batch_plan, "available_memory", lambda: 1 << 30)
    from pytest_perfgate.sim.models import load_model
    from pytest_perfgate.sim.thread_sweep import resolve_model

    per_env = batch_sweep.per_env_bytes(load_model(resolve_model("tiny")))
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--model", "tiny", "--envs", "1024..1048576"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: perfgate sweep ")
    assert "perfgate sweep: error: --envs up to 1048576: the sweep holds all 11 " in err
    hint = re.search(r"but only 1\.0 GiB is available: sweep fewer or smaller batch sizes, "
                     r"e\.g\. --envs 1024\.\.(\d+)\n$", err)
    assert hint, err
    fits = batch_plan.parse_envs(f"1024..{hint.group(1)}")  # the hint fits, one more would not
    assert batch_plan.needed_bytes([BatchConfig(e) for e in fits], per_env, 0) <= 1 << 30
    assert batch_plan.needed_bytes([BatchConfig(e) for e in fits] + [BatchConfig(2 * fits[-1])],
                                   per_env, 0) > 1 << 30


def test_cli_batch_sweep_on_the_tiny_model(tmp_path, capsys):
    pytest.importorskip("mujoco.batch")
    out = tmp_path / "rows.jsonl"
    rc = main(["sweep", "--model", "tiny", "--envs", "4..8", "--turns", "2", "--turn-time",
               "0.01", "--settle", "3", "--jsonl", str(out)])
    assert rc == 0
    cap = capsys.readouterr()
    assert "| 4 | 1 pool |" in cap.out and "| 8 | 1 pool |" in cap.out
    assert cap.err.startswith("perfgate sweep: batch sweep: 2 configurations x 2 turns (")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["num_envs"], r["workers"]) for r in rows] == [(4, 0), (8, 0)]
    assert rows[0]["vs_first"] == 1.0 and rows[0]["steps_per_s"] > 0


@pytest.mark.slow  # spawns worker processes
def test_batch_sweep_with_workers_on_the_tiny_model():
    pytest.importorskip("mujoco.batch")
    from pytest_perfgate.sim import batch_sweep, thread_sweep

    model = thread_sweep.resolve_model("tiny")
    configs = batch_sweep.check(model, [4, 8], [1])
    res = batch_sweep.run_batch_sweep(model, configs, turns=2, turn_s=0.05, settle_substeps=3)
    assert [(r.num_envs, r.workers) for r in res.rows] == [(4, 0), (8, 0), (4, 1), (8, 1)]
    assert all(r.steps_per_s > 0 and r.vs_pool is not None for r in res.rows)
    from pytest_perfgate.placement.cpus import usable_cpus

    assert f"| 8 | 1 worker x 8 | {len(usable_cpus())} each |" in res.table()

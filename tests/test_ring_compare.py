"""The pinned-vs-unpinned comparison: its plan, its table, an interleaved run, the CLI."""

from __future__ import annotations

import time
from typing import Any

import pytest
from ring_fakes import SPEC, fake_collector, fake_learner

from pytest_perfgate.cli import main
from pytest_perfgate.placement.cpus import usable_cpus
from pytest_perfgate.ring.pinning_table import compare, plan, table


def test_plan_pins_the_learner_first_and_the_collector_on_the_rest() -> None:
    got = [(c.label, c.collector_cpus, c.learner_cpus, c.threads)
           for c in plan(None, tuple(range(8)))]
    assert got == [("unpinned", None, None, (None, None)),
                   ("capped L1", None, None, (7, 1)), ("pinned L1", "1-7", "0", (None, None)),
                   ("capped L2", None, None, (6, 2)), ("pinned L2", "2-7", "0-1", (None, None)),
                   ("capped L4", None, None, (4, 4)), ("pinned L4", "4-7", "0-3", (None, None))]


def test_a_learner_count_that_leaves_no_collector_core_is_refused() -> None:
    with pytest.raises(ValueError, match=r"learner core counts \[2\]: each must leave the "
                       r"collector at least one of the 2 usable CPUs \(0-1\)"):
        plan((1, 2), (0, 1))


def test_cli_names_a_bad_core_count(capsys: pytest.CaptureFixture[str]) -> None:
    n = len(usable_cpus())
    assert main(["ring-compare", "--learner-cores", str(n)]) == 2
    assert f"learner core counts [{n}]: each must leave the collector" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_runs_every_configuration_interleaved() -> None:
    if len(usable_cpus()) < 2:
        pytest.skip("needs two usable CPUs")
    rows = compare(SPEC, plan((1,)), turns=2, window_s=0.2, settle_s=0.1,
                   collector=fake_collector, learner=fake_learner)
    assert [r["config"] for r in rows] == ["unpinned", "capped L1", "pinned L1"]
    assert (rows[1]["collector_cpus"], rows[1]["learner_cpus"]) == (
        f"{len(usable_cpus()) - 1} thr", "1 thr")
    assert all(r["turns"] == 2 and r["env_steps_per_s"] > 0 for r in rows)
    assert rows[0]["change"] == 0.0
    text = table(rows, SPEC)
    assert text.splitlines()[0] == ("ring pair: 8 envs (split over the collectors), obs (4,), "
                                    "capacity 4")
    assert "pinned L1" in text and "(medians of 2 interleaved turns)" in text


@pytest.mark.parametrize("value,why", [
    ("inf", "'inf' is not a finite number: use e.g. 1.5"),
    ("nan", "'nan' is not a finite number: use e.g. 1.5"),
    ("-1", "'-1' is too small: use a number of seconds >= 0, e.g. 1.5"),
    ("0", "'0' is too small: use a number of seconds > 0, e.g. 1.5"),
    ("soon", "'soon' is not a number of seconds: use e.g. 1.5")])
def test_a_bad_window_is_a_usage_error_before_any_process_starts(
        value: str, why: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_perfgate.ring.pair as pair

    def no_start(self: object) -> None:
        raise AssertionError("a pair was started")

    monkeypatch.setattr(pair.RingPair, "start", no_start)
    with pytest.raises(SystemExit) as info:
        main(["ring-compare", "--window", value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("usage: perfgate ring-compare")
    assert err.splitlines()[-1] == (f"perfgate ring-compare: error: argument --window: "
                                    f"{why}")


def test_plan_sweeps_collectors_over_learner_cores() -> None:
    got = [(c.label, c.collector_cpus, c.learner_cpus, c.collectors)
           for c in plan((0, 1), (0, 1, 2, 3), collectors=(1, 2))]
    assert got == [("unpinned", None, None, 1),
                   ("C1 L-", "0-3", None, 1), ("C2 L-", ["0-1", "2-3"], None, 2),
                   ("capped L1", None, None, 1), ("pinned L1", "1-3", "0", 1),
                   ("C2 L1", ["1-2", "3"], "0", 2)]


def test_two_collectors_of_one_cpu_against_one_of_two_on_a_two_cpu_machine() -> None:
    got = [(c.label, c.collector_cpus, c.learner_cpus)
           for c in plan((0,), (0, 1), collectors=(1, 2))]
    assert got == [("unpinned", None, None), ("C1 L-", "0-1", None),
                   ("C2 L-", ["0", "1"], None)]


def test_more_collectors_than_cpus_left_is_refused() -> None:
    from pytest_perfgate.ring.layout import RingInputError

    with pytest.raises(RingInputError, match=r"^2 collectors with learner cores \[1\]: more "
                       r"collectors than the 1 CPU\(s\) left of 0-1; one CPU at least each$"):
        plan((1,), (0, 1), collectors=(2,))


@pytest.mark.parametrize("argv,why", [
    (["--collectors", "0"], "argument --collectors: '0' is not a list of whole numbers "
                            ">= 1: use e.g. 1,2,4"),
    (["--learner-cores", "-1"], "argument --learner-cores: '-1' is negative: use a whole "
                                "number >= 0, e.g. 50")])
def test_bad_sweep_values_are_usage_errors(argv: list[str], why: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["ring-compare", *argv])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"perfgate ring-compare: error: {why}"


def test_cli_refuses_more_collectors_than_cpus_before_starting(
        capsys: pytest.CaptureFixture[str]) -> None:
    n = len(usable_cpus())
    assert main(["ring-compare", "--collectors", str(n + 1), "--learner-cores", "0"]) == 2
    assert (f"{n + 1} collectors with learner cores [0]: more collectors than the {n} CPU(s)"
            in capsys.readouterr().err)


def sized_collector(ring: Any, rec: Any) -> Any:
    """fake_collector for any num_envs (the sweep splits the envs between collectors)."""
    import numpy as np

    n = ring.spec.num_envs
    z = np.zeros(n, np.float32)

    def once() -> int:
        with rec.phase("env_step"):
            obs = np.ones((n, 4), np.float32)
        with rec.phase("push"):
            ring.push(obs, np.zeros((n, 2), np.float32), z, z > 0, z > 0)
        time.sleep(0.001)
        return n

    return once


@pytest.mark.slow
def test_the_sweep_runs_one_and_two_collectors_interleaved() -> None:
    if len(usable_cpus()) < 2:
        pytest.skip("needs two usable CPUs")
    rows = compare(SPEC, plan((0,), collectors=(1, 2)), turns=2, window_s=0.2, settle_s=0.1,
                   collector=sized_collector, learner=fake_learner)
    assert [r["config"] for r in rows] == ["unpinned", "C1 L-", "C2 L-"]
    assert [r["collectors"] for r in rows] == [1, 1, 2]
    assert all(r["env_steps_per_s"] > 0 and 0 <= r["learner_wait"] <= 1 for r in rows)
    assert "C2 L-" in table(rows, SPEC)

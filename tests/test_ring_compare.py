"""The pinned-vs-unpinned comparison: its plan, its table, an interleaved run, the CLI."""

from __future__ import annotations

import pytest
from test_ring_pair import SPEC, fake_collector, fake_learner

from pytest_perfgate.cli import main
from pytest_perfgate.placement.cpus import usable_cpus
from pytest_perfgate.ring.compare import compare, plan, table


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
    assert text.splitlines()[0] == "ring pair: 8 envs, obs (4,), capacity 4"
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

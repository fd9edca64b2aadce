"""Several collectors per machine: bad input refused up front, the round-robin learner,
real processes measured as one benchmark, a collector dying, the pair under --perfgate.

The workloads are tests/ring_fakes.py's tiny factories (spawn imports them by name).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from helpers import fake_tree, ring_segments
from ring_fakes import SPEC, children, fake_collector, fake_learner

from pytest_perfgate.placement import numa
from pytest_perfgate.placement.cpus import format_cpus, usable_cpus
from pytest_perfgate.placement.workers import WorkerCrashed
from pytest_perfgate.ring.layout import RingInputError
from pytest_perfgate.ring.pair import RingPair
from pytest_perfgate.ring.pair_placement import split_cpus
from pytest_perfgate.ring.rings import Rings
from pytest_perfgate.ring.shm_ring import Ring

slow = pytest.mark.slow




def _fleet(**kw: Any) -> RingPair:
    return RingPair(SPEC, collector=fake_collector, learner=fake_learner, **kw)


# ---- bad input, before any process starts --------------------------------------------
@pytest.fixture
def no_spawn(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing as mp

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("a process was started")

    monkeypatch.setattr(mp.get_context("spawn"), "Process", refuse)


@pytest.mark.parametrize("n", [0, -1, True, 1.5, "2"])
def test_a_collector_count_below_one_or_not_whole_is_refused(n: object,
                                                             no_spawn: None) -> None:
    with pytest.raises(RingInputError) as info:
        _fleet(collectors=n)
    assert str(info.value) == (f"collectors={n!r}: give a whole number >= 1 of collector "
                               "processes")


def test_more_collectors_than_cpus_is_refused(no_spawn: None) -> None:
    cpus = usable_cpus()
    with pytest.raises(RingInputError) as info:
        _fleet(collectors=len(cpus) + 1)
    assert str(info.value) == (f"collectors={len(cpus) + 1}: more collectors than the "
                               f"{len(cpus)} usable CPUs ({format_cpus(cpus)}); use at most "
                               f"{len(cpus)}, one CPU at least each")


def test_one_core_spec_for_several_collectors_is_refused_with_an_example(
        no_spawn: None) -> None:
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two usable CPUs")
    spec = format_cpus(cpus)
    with pytest.raises(RingInputError) as info:
        _fleet(collectors=2, collector_cpus=spec)
    assert str(info.value) == (f"collector_cpus={spec!r} with collectors=2: give one core "
                               f"spec per collector, e.g. {split_cpus(cpus, 2)!r}")


def test_a_wrong_number_of_specs_or_kwargs_is_refused(no_spawn: None) -> None:
    if len(usable_cpus()) < 2:
        pytest.skip("needs two usable CPUs")
    with pytest.raises(RingInputError, match=r"^collector_cpus=\[None\]: 1 core spec\(s\) "
                       r"for 2 collector\(s\); give exactly one per collector$"):
        _fleet(collectors=2, collector_cpus=[None])
    with pytest.raises(RingInputError, match=r"^collector_kwargs: 3 dict\(s\) for 2 "
                       r"collector\(s\); give one dict, or one per collector$"):
        _fleet(collectors=2, collector_kwargs=[{}, {}, {}])


def test_overlapping_collector_specs_are_refused(no_spawn: None) -> None:
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two usable CPUs")
    a, b = str(cpus[0]), f"{cpus[0]},{cpus[1]}"
    with pytest.raises(RingInputError) as info:
        _fleet(collectors=2, collector_cpus=[a, b])
    assert str(info.value) == (f"collector_cpus={[a, b]!r}: collectors 0 and 1 both have "
                               f"CPU {cpus[0]}; give each collector its own CPUs")


def test_unusable_or_shared_nodes_are_refused(no_spawn: None) -> None:
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two usable CPUs")
    nodes = sorted(n.id for n in numa.discover().usable_nodes(cpus))
    with pytest.raises(RingInputError) as info:
        _fleet(collectors=2, collector_nodes=[0, 99])
    bad = [99] if 0 in nodes else [0, 99]
    assert str(info.value) == (f"collector_nodes=[0, 99]: node(s) {bad} "
                               "are not usable here; usable nodes (with CPUs and memory): "
                               f"{nodes or 'none'}, one per collector")
    if nodes:
        with pytest.raises(RingInputError, match=r"two collectors on one node"):
            _fleet(collectors=2, collector_nodes=[nodes[0], nodes[0]])


@pytest.fixture
def five_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulated machine of tests/test_numa_qemu.py, faked: CPUs 0-3 on nodes 0-3, node
    3 without memory, node 4 without CPUs; usable nodes 0-2."""
    from pytest_perfgate.placement import cpus as cpus_mod

    sysfs, proc = fake_tree(tmp_path, {0: "0", 1: "1", 2: "2", 3: "3", 4: ""},
                            has_memory="0-2,4", mems_allowed="0-2,4", online="0-4")
    topo = numa.discover(sysfs, proc)
    monkeypatch.setattr(numa, "discover", lambda *a, **k: topo)
    monkeypatch.setattr(cpus_mod, "usable_cpus", lambda: (0, 1, 2, 3))


def test_nodes_without_memory_or_cpus_are_refused(five_nodes: None, no_spawn: None) -> None:
    for nodes, bad in (([1, 3], [3]), ([4, 1], [4])):
        with pytest.raises(RingInputError) as info:
            _fleet(collectors=2, collector_nodes=nodes)
        assert str(info.value) == (f"collector_nodes={nodes!r}: node(s) {bad} are not usable "
                                   "here; usable nodes (with CPUs and memory): [0, 1, 2], one "
                                   "per collector")


def test_collectors_on_nodes_get_their_nodes_cpus(five_nodes: None, no_spawn: None) -> None:
    pair = _fleet(collectors=2, collector_nodes=[2, 1])
    assert pair.col_cpus == [(2,), (1,)] and pair.nodes == [2, 1]


def test_a_core_spec_overlapping_another_collectors_node_is_refused(
        five_nodes: None, no_spawn: None) -> None:
    # collector 0 is given CPU 2 explicitly; collector 1 gets node 2's CPUs: CPU 2 again.
    with pytest.raises(RingInputError) as info:
        _fleet(collectors=2, collector_nodes=[1, 2], collector_cpus=["2", None])
    assert str(info.value) == ("collector_cpus=['2', None]: collectors 0 and 1 both have CPU "
                               "2; give each collector its own CPUs")


def test_split_cpus_cuts_near_equal_slices_and_refuses_too_many() -> None:
    assert split_cpus([0, 1, 2, 3, 4], 2) == ["0-2", "3-4"]
    assert split_cpus([3, 1], 2) == ["1", "3"]
    with pytest.raises(RingInputError, match=r"collectors=3: give 1 to 2 collectors for the "
                       r"2 CPUs 0-1, one CPU at least each"):
        split_cpus([0, 1], 3)


# ---- the learner's view: Rings ---------------------------------------------------------
def _push(r: Ring, t: float) -> None:
    z = np.zeros(8, np.float32)
    r.push(np.full((8, 4), t, np.float32), np.zeros((8, 2), np.float32), z, z > 0, z > 0)


def test_rings_serve_every_collector_in_turn_and_end_when_all_have() -> None:
    with Ring(SPEC) as a, Ring(SPEC) as b:
        for t in range(3):
            _push(a, t)
            _push(b, 10 + t)
        rings = Rings([a, b])
        got = [rings.pop(max_steps=1, timeout=0) for _ in range(4)]
        assert [int(g.obs[0, 0, 0]) for g in got if g is not None] == [0, 10, 1, 11]
        assert rings.served == [16, 16] and rings.pop(timeout=0.01) is None
        a.finish(np.zeros((8, 4), np.float32))
        b.finish(np.zeros((8, 4), np.float32))
        assert sorted(int(g.obs[0, 0, 0]) for g in (rings.pop(), rings.pop())) == [2, 12]
        assert rings.pop() is None and rings.ended


def test_rings_borrow_serves_every_collector_in_turn_and_releases_each_block() -> None:
    """Views into the serving ring, rotation as pop's, ``last`` naming the ring, the slots
    released when the block ends."""
    with Ring(SPEC) as a, Ring(SPEC) as b:
        for t in range(3):
            _push(a, t)
            _push(b, 10 + t)
        rings = Rings([a, b])
        seen = []
        for _ in range(4):
            with rings.borrow(max_steps=1, timeout=0) as got:
                assert got is not None
                seen.append((rings.last, int(got.obs[0, 0, 0]), int(got.next_obs[0, 0, 0])))
        assert seen == [(0, 0, 1), (1, 10, 11), (0, 1, 2), (1, 11, 12)]
        assert rings.served == [16, 16]
        assert a.stats()["consumed"] == 2 and b.stats()["consumed"] == 2  # released
        with rings.borrow(timeout=0.01) as none:
            assert none is None  # the last steps wait for their successors


def test_rings_borrow_without_next_obs_gives_each_ring_its_end_once() -> None:
    """next_obs=False: each step once written, then per ring one batch of no steps with
    that ring's finish() observation, then None for all."""
    with Ring(SPEC) as a, Ring(SPEC) as b:
        for t in range(2):
            _push(a, t)
            _push(b, 10 + t)
        a.finish(np.full((8, 4), 5, np.float32))
        b.finish(np.full((8, 4), 15, np.float32))
        rings = Rings([a, b])
        steps: dict[int, list[int]] = {0: [], 1: []}
        ends: dict[int, list[int]] = {0: [], 1: []}
        while True:
            with rings.borrow(max_steps=1, timeout=1, next_obs=False) as got:
                if got is None:
                    break
                assert rings.last is not None
                if got.steps == 0:
                    assert got.next_obs is not None
                    ends[rings.last].append(int(got.next_obs[0, 0, 0]))
                else:
                    steps[rings.last].append(int(got.obs[0, 0, 0]))
        assert steps == {0: [0, 1], 1: [10, 11]} and ends == {0: [5], 1: [15]}
        assert rings.ended


def test_a_ring_that_finishes_during_a_pass_still_gives_its_end_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """borrow(next_obs=False) counts a ring as ended once finish() is published, before
    its end batch is delivered: a finish() that lands between the pass over the rings and
    the ended check must not end the stream for the learner."""
    with Ring(SPEC) as a, Ring(SPEC) as b:
        a.finish(np.full((8, 4), 5, np.float32))
        rings = Rings([a, b])
        with rings.borrow(timeout=1, next_obs=False) as got:
            assert got is not None and got.steps == 0 and rings.last == 0
        real = Rings.ended.fget
        assert real is not None
        calls: list[bool] = []

        def ended(self: Rings) -> bool:
            if not calls:  # the collector finishes right now
                b.finish(np.full((8, 4), 15, np.float32))
            calls.append(True)
            return bool(real(self))

        monkeypatch.setattr(Rings, "ended", property(ended))
        with rings.borrow(timeout=1, next_obs=False) as got:
            assert got is not None and got.steps == 0 and rings.last == 1
            assert got.next_obs is not None and int(got.next_obs[0, 0, 0]) == 15
        with rings.borrow(timeout=1, next_obs=False) as got:
            assert got is None


def test_rings_borrow_checks_when_called_and_refuses_reads_inside_its_block() -> None:
    with Ring(SPEC) as a, Ring(SPEC) as b:
        rings = Rings([a, b])
        with pytest.raises(RingInputError, match="min_steps=0"):
            rings.borrow(min_steps=0)
        with pytest.raises(RingInputError, match="next_obs='no'"):
            rings.borrow(next_obs="no")  # type: ignore[arg-type]
        for t in range(2):
            _push(a, t)
        held = rings.borrow(max_steps=1, timeout=0)
        with held as got:
            assert got is not None and rings.last == 0
            with pytest.raises(RuntimeError, match="entered already"):
                held.__enter__()
            with pytest.raises(RingInputError, match="inside an open borrow"):
                rings.pop(timeout=0)
        assert a.stats()["consumed"] == 1


def test_rings_refuse_mixed_specs() -> None:
    from pytest_perfgate.ring.layout import RingSpec

    with Ring(SPEC) as a, Ring(RingSpec(8, (4,), (2,), capacity=5)) as b:
        with pytest.raises(RingInputError, match=r"every collector's ring must have the "
                           r"same RingSpec \(got 2 different ones\)"):
            Rings([a, b])


# ---- real processes ----------------------------------------------------------------------
@slow
def test_two_collectors_are_measured_as_one_benchmark() -> None:
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two usable CPUs")
    before = ring_segments()
    with _fleet(collectors=2, collector_cpus=split_cpus(cpus, 2)) as pair:
        assert len(pair.pids) == 3
        w = pair.run_window(0.4)
        meta = pair.metadata()["ring_pair"]
        placed = {p["side"]: p for p in pair.placements}
    assert w.transitions > 0 and w.streams == 3
    assert meta["collectors"] == 2
    rates = meta["collector_env_steps_per_s"]
    assert len(rates) == 2 and all(r > 0 for r in rates)
    assert 0 <= meta["learner_wait_share"] <= 1 and len(meta["rings"]) == 2
    assert [placed[f"collector {i}"]["pinned"] for i in range(2)] == [True, True]
    assert placed["collector 0"]["actual_cpus"] != placed["collector 1"]["actual_cpus"]
    assert not children() and ring_segments() <= before


@slow
def test_a_collector_dying_is_reported_by_name() -> None:
    import signal

    if len(usable_cpus()) < 2:
        pytest.skip("needs two usable CPUs")
    pair = _fleet(collectors=2, collector_kwargs=[{}, {"die_after": 5,
                                                       "sig": int(signal.SIGKILL)}])
    with pytest.raises(WorkerCrashed) as info:
        pair.start()
        pair.run_window(2.0)
    assert str(info.value).startswith(f"pair collector 1 (pid {pair.pids[1]}) died during "
                                      "the ")
    assert str(info.value).endswith("killed by signal SIGKILL")
    assert not children()
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == "zombie"
               for p in pair.pids)


@slow
def test_the_multi_collector_pair_records_and_gates_under_perfgate(
        pytester: pytest.Pytester) -> None:
    if len(usable_cpus()) < 2:
        pytest.skip("needs two usable CPUs")
    pytester.makepyfile(test_fleet=f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from ring_fakes import SPEC, fake_collector, fake_learner

        def test_fleet(perfgate, ring_pair):
            pair = ring_pair(SPEC, collectors=2, collector=fake_collector,
                             learner=fake_learner)
            perfgate.measure_source(pair, transitions=16, name="fleet")
    """)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    args = ["--perfgate", "--perfgate-machine=fleetbox", "--perfgate-windows=3",
            "--perfgate-window-time=0.2", "--perfgate-warmup-max=3",
            "--perfgate-unstable=warn", "--perfgate-load-limit=64", "-p", "no:cacheprovider",
            "--perfgate-json=report.json"]
    verdicts = []
    for _ in range(3):  # a loaded machine may make a run UNSTABLE: it is then no baseline
        res = pytester.runpytest_subprocess(*args)
        res.assert_outcomes(passed=1)
        res.stdout.fnmatch_lines(["*perfgate: fleet: *steps/s*", "recorded run *"])
        rep = json.loads((pytester.path / "report.json").read_text())
        verdicts.append(rep["benchmarks"][0]["verdict"])
        if verdicts[-1] not in ("NO BASELINE", "UNSTABLE"):
            break
    assert verdicts[0] in ("NO BASELINE", "UNSTABLE"), verdicts  # nothing to judge against
    assert verdicts[-1] not in ("NO BASELINE", "UNSTABLE", None), verdicts  # judged

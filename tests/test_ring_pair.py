"""RingPair with real spawn processes: measured windows, a side crashing, teardown.

The workloads are tiny module-level factories in tests/ring_fakes.py (spawn imports them by
reference); the default humanoid/SAC pair runs in perf/test_perf_ring.py.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from typing import Any

import pytest
from helpers import ring_segments
from ring_fakes import SPEC, children, fake_collector, fake_learner

from pytest_perfgate.placement.cpus import PlacementWarning
from pytest_perfgate.placement.workers import WorkerCrashed
from pytest_perfgate.ring.pair import RingPair

slow = pytest.mark.slow
def _pair(**kw: Any) -> RingPair:
    return RingPair(SPEC, collector=fake_collector, learner=fake_learner, **kw)




@slow
def test_explicit_thread_caps_reach_unpinned_sides() -> None:
    with _pair(threads=(1, 1)) as pair:
        pair.run_window(0.1)
        placement = pair.metadata()["ring_pair"]["placement"]
    assert [(p["side"], p["threads"], p["requested_cpus"]) for p in placement] == [
        ("collector", 1, None), ("learner", 1, None)]


def test_a_bad_thread_cap_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match=r"threads=\(0, None\): give a positive thread cap "
                       r"or None per side, e\.g\. \(1, 1\)"):
        _pair(threads=(0, None))


@slow
def test_pair_measures_collector_steps_and_reports_the_learner() -> None:
    before = ring_segments()
    with _pair() as pair:
        assert ring_segments() == before  # unlinked once both sides mapped it
        w = pair.run_window(0.3)
        meta = pair.metadata()["ring_pair"]
    assert w.transitions > 0 and w.transitions % 8 == 0 and w.streams == 2
    assert {"env_step", "push", "drain", "update"} <= set(w.phases)
    assert meta["learner_samples_per_s"] > 0 and meta["ring"]["pushed"] > 0
    assert [p["side"] for p in meta["placement"]] == ["collector", "learner"]
    assert children() == [] and ring_segments() == before


@slow
def test_learner_crash_is_reported_with_its_exit_code() -> None:
    pair = RingPair(SPEC, collector=fake_collector, learner=fake_learner,
                    learner_kwargs={"exit_after": 3})
    t0 = time.monotonic()
    with pytest.raises(WorkerCrashed, match=r"pair learner \(pid \d+\) died during the "
                       r"(window|first snapshot|snapshot): exit code 7"):
        pair.start()
        for _ in range(50):
            pair.run_window(0.2)
    assert time.monotonic() - t0 < 60  # spawn + import, then the crash within a window
    assert children() == []


@slow
def test_collector_killed_is_reported_with_its_signal() -> None:
    pair = RingPair(SPEC, collector=fake_collector, learner=fake_learner,
                    collector_kwargs={"die_after": 20, "sig": int(signal.SIGKILL)})
    with pytest.raises(WorkerCrashed, match=r"pair collector \(pid \d+\) died during the "
                       r"(window|first snapshot|snapshot): killed by signal SIGKILL"):
        with pair:
            for _ in range(50):
                pair.run_window(0.2)
    assert children() == []


def test_overlapping_core_specs_warn() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        RingPair(SPEC, collector_cpus=str(cpus[0]), learner_cpus=str(cpus[0]))
    msgs = [str(w.message) for w in got if issubclass(w.category, PlacementWarning)]
    assert msgs == [f"collector cpus {cpus[0]} and learner cpus {cpus[0]} overlap on "
                    f"{cpus[0]}: the two sides compete for those cores; give each its own "
                    "slice"]


@slow
def test_a_failing_test_leaves_no_side_no_segment_and_does_not_hang(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from ring_fakes import SPEC, fake_collector, fake_learner

        def test_fails(ring_pair):
            pair = ring_pair(SPEC, collector=fake_collector, learner=fake_learner)
            pair.run_window(0.2)
            assert False, "the test body failed mid-stream"
        """)
    before = ring_segments()
    t0 = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1)
    assert time.monotonic() - t0 < 60
    assert ring_segments() == before and children() == []

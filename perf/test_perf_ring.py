"""Shipped perf test: a collector/learner pair over the shared-memory ring.

The collector steps gymnasium's humanoid (MujocoPool, frame_skip 5) with a small torch
policy and pushes each step; the learner drains the ring and runs SAC updates. The gated
number is collector env-steps/s; learner updates/s, samples consumed/s, the ring's fill and
blocked time, and each side's placement are recorded with the run (docs/design.md §9).
Run as ``pytest --perfgate perf/test_perf_ring.py``; without --perfgate it runs in smoke
mode. It takes no instruction counts (``counts=False``): a measure_source() workload steps in
other processes, which the counting worker cannot follow (docs/design.md §10).
"""

from __future__ import annotations

import os

import pytest


def _halves() -> tuple[str | None, str | None]:
    """Collector on the first half of the usable CPUs, learner on the rest (unpinned on 1)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return None, None
    half = len(cpus) // 2
    return ",".join(map(str, cpus[half:])), ",".join(map(str, cpus[:half]))


@pytest.mark.perfgate(counts=False)  # steps in other processes: callgrind cannot count them
def test_ring_pair_humanoid_256(perfgate, ring_pair):
    collector, learner = _halves()
    pair = ring_pair(num_envs=256, capacity=8, collector_cpus=collector, learner_cpus=learner)
    perfgate.measure_source(pair, transitions=256, name="ring_pair_humanoid_256")


def _slices() -> tuple[list[str] | None, str | None]:
    """Two collectors, one CPU slice each (the learner shares them on a 2-CPU machine, else
    it gets its own slice); unpinned with fewer than 2 CPUs."""
    from pytest_perfgate.ring.pair_placement import split_cpus

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return None, None
    if len(cpus) < 3:
        return split_cpus(cpus, 2), None
    third = len(cpus) // 3
    return split_cpus(cpus[third:], 2), ",".join(map(str, cpus[:third]))


@pytest.mark.perfgate(counts=False)  # steps in other processes: callgrind cannot count them
def test_ring_collectors2_humanoid_256(perfgate, ring_pair):
    """Whole-machine env-steps/s of two collectors (128 envs each, own ring each) drained by
    one learner; per-collector rates and the learner's wait share are recorded."""
    collectors, learner = _slices()
    if collectors is None and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two collectors need two usable CPUs")
    pair = ring_pair(num_envs=128, capacity=8, collectors=2, collector_cpus=collectors,
                     learner_cpus=learner)
    perfgate.measure_source(pair, transitions=256, name="ring_collectors2_humanoid_256")

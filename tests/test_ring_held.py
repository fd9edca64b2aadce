"""pop(out=) into a ring's own buffers: each slot freed once copied, the newest step held in
the buffers for its successor; every read path mixed with it stays exact (ring/held.py).

Children are module-level functions so spawn can import them by reference.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ring_steps import check_batches, episode, keep_copy, obs_step, push_step

from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.rings import Rings
from pytest_perfgate.ring.shm_ring import Ring
from pytest_perfgate.ring.sync import PeerDied


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 4), cap=st.integers(2, 6), steps=st.integers(1, 30),
       p_end=st.sampled_from([0.0, 0.3, 0.7]), critic=st.booleans(),
       seed=st.integers(0, 2**31), pop_max=st.integers(1, 5), pop_min=st.integers(1, 4),
       rows=st.sampled_from([None, 0, 3]), mixed=st.booleans())
def test_held_buffers_match_an_8_field_reference(n: int, cap: int, steps: int, p_end: float,
                                                 critic: bool, seed: int, pop_max: int,
                                                 pop_min: int, rows: int | None,
                                                 mixed: bool) -> None:
    """Wrap-around of the ring and of the buffers' rows, episode ends (final rows copied
    before the slot is freed), batches cut at the buffers' last row, min_steps waits that
    time out with steps held, and (``mixed``) every other read path, and a second set of
    buffers, taking turns with them."""
    rng = np.random.default_rng(seed)
    ref = episode(rng, n, steps, p_end / 2, p_end / 2, critic)
    spec = RingSpec(n, (3,), (2,), capacity=cap, critic_shape=(2,) if critic else None)
    got: list[Any] = []
    with Ring(spec) as ring:
        outs = [ring.buffers(pop_max, None if rows is None else pop_max + 1 + rows)
                for _ in range(2)]
        pick = np.random.default_rng(seed + 1)

        def pop() -> Any:
            how = int(pick.integers(4)) if mixed else 0
            if how == 3:
                with ring.borrow(max_steps=pop_max, timeout=0, min_steps=pop_min) as b:
                    return keep_copy(got, b)
            out = None if how == 2 else outs[how]
            return keep_copy(got, ring.pop(max_steps=pop_max, timeout=0, out=out,
                                            min_steps=pop_min))

        def full_then(write: Any) -> None:
            # Full: drain some, as a consumer would. A pop waiting for min_steps may
            # return None yet free the slots it copied; one that delivers a held step
            # frees nothing. Either way a few pops make room.
            for _ in range(8):
                if write():
                    return
                pop()
            assert write(), "eight pops freed nothing in a full ring"

        for s in ref:
            full_then(lambda s=s: push_step(ring, s, critic))
            if pick.random() < 0.4:
                pop()  # may time out holding what it copied
        full_then(lambda: ring.finish(ref[-1]["ret_next"],
                                      ref[-1]["ret_cnext"] if critic else None, timeout=0))
        for _ in range(4 * steps + 10):
            if pop() is None and ring.ended:
                break
        assert ring.ended and ring.stats()["consumed"] == steps
    check_batches(got, ref, critic)


def test_a_two_slot_ring_is_freed_whole_by_one_pop() -> None:
    """The successor's slot is freed too (its step waits in the buffers): the producer can
    write two more steps at once, where a reader keeping it in the ring frees only one."""
    with Ring(RingSpec(4, (3,), (2,), capacity=2)) as r:
        out = r.buffers(2)
        obs_step(r, 0)
        obs_step(r, 1)
        b = r.pop(out=out, timeout=0)
        assert b is not None and b.obs[0, 0, 0] == 0 and b.next_obs[0, 0, 0] == 1
        assert r.stats()["consumed"] == 1
        assert r.stats()["fill"] == 0  # step 1 is held, not consumable: no successor yet
        obs_step(r, 2)
        obs_step(r, 3)  # both slots free: neither push blocks
        b = r.pop(out=out, timeout=0)
        assert b is not None and b.obs[:, 0, 0].tolist() == [1, 2]
        assert b.next_obs[:, 0, 0].tolist() == [2, 3]


def test_steps_held_count_as_unconsumed_until_delivered() -> None:
    with Ring(RingSpec(4, (3,), (2,), capacity=3)) as r:
        out = r.buffers(4)
        for t in range(2):
            obs_step(r, t)
        assert r.pop(out=out, min_steps=3, timeout=0.05) is None  # copied, held, freed
        assert r.stats()["consumed"] == 0 and r.stats()["fill"] == 1
        for t in range(2, 4):
            obs_step(r, t)
        r.finish(np.full((4, 3), 4, np.float32))
        assert not r.ended
        b = r.pop(out=out, min_steps=3, timeout=0)
        assert b is not None and b.obs[:, 0, 0].tolist() == [0, 1, 2, 3]
        assert b.next_obs[:, 0, 0].tolist() == [1, 2, 3, 4]
        assert r.ended and r.pop(out=out, timeout=0) is None


def test_other_read_paths_get_the_held_step_first() -> None:
    with Ring(RingSpec(4, (3,), (2,), capacity=4)) as r:
        out = r.buffers(2)
        for t in range(3):
            obs_step(r, t)
        b = r.pop(out=out, max_steps=1, timeout=0)
        assert b is not None and b.obs[0, 0, 0] == 0  # step 1 held, step 2 left in the ring
        fresh = r.pop(timeout=0)  # the held step 1 comes first, as a copy
        assert fresh is not None and fresh.obs[:, 0, 0].tolist() == [1]
        assert fresh.next_obs[:, 0, 0].tolist() == [2]
        assert not np.shares_memory(fresh.obs, out["obs"])
        obs_step(r, 3)
        with r.borrow(timeout=0) as v:  # step 2 was left in the ring by that delivery
            assert v is not None and v.obs[:, 0, 0].tolist() == [2]


def test_another_rings_buffers_holding_a_step_are_refused() -> None:
    spec = RingSpec(4, (3,), (2,), capacity=4)
    with Ring(spec) as r1, Ring(spec) as r2:
        out = r1.buffers(2)
        for t in range(3):
            obs_step(r1, t)
            obs_step(r2, 10 + t)
        assert r1.pop(max_steps=1, out=out) is not None
        with pytest.raises(RingInputError, match=r"hold a step of ring .*Rings.buffers"):
            r2.pop(max_steps=1, out=out)
        rings = Rings([r1, r2])
        with pytest.raises(RingInputError, match=r"pass rings.buffers\(k\), one set per ring"):
            rings.pop(out=out)
        bufs = rings.buffers(2)
        seen = sorted(float(b.obs[0, 0, 0]) for b in
                      (rings.pop(max_steps=1, timeout=0, out=bufs) for _ in range(2)) if b)
        assert seen == [1.0, 10.0]  # ring 1 resumes at its held step 1 (delivered first)


def _child_stream(ring: Ring, seed: int, n: int, steps: int) -> None:
    ref = episode(np.random.default_rng(seed), n, steps, 0.1, 0.1, False)
    for s in ref:
        assert push_step(ring, s, False) or _push_wait(ring, s)
    ring.finish(ref[-1]["ret_next"], timeout=30)


def _push_wait(ring: Ring, s: dict[str, Any]) -> bool:
    done = s["terminated"] | s["truncated"]
    return ring.push(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"],
                     final_obs=s["next_obs"][done], timeout=30)


def _child_dies(ring: Ring) -> None:
    obs_step(ring, 0)
    raise SystemExit(5)


def test_a_spawn_collector_into_a_two_slot_ring_comes_out_exact() -> None:
    n, steps = 16, 300
    ring = Ring(RingSpec(n, (3,), (2,), capacity=2))
    p = mp.get_context("spawn").Process(target=_child_stream, args=(ring, 7, n, steps))
    p.start()
    ring.watch(p)
    got: list[Any] = []
    out = ring.buffers(3)
    try:
        while keep_copy(got, ring.pop(max_steps=3, timeout=30, out=out)) is not None:
            pass
    finally:
        p.join(30)
        ring.close()
    assert p.exitcode == 0
    check_batches(got, episode(np.random.default_rng(7), n, steps, 0.1, 0.1, False), False)


def test_a_collector_dying_is_reported_to_a_learner_holding_a_step() -> None:
    ring = Ring(RingSpec(4, (3,), (2,), capacity=2))
    p = mp.get_context("spawn").Process(target=_child_dies, args=(ring,))
    p.start()
    out = ring.buffers(2)
    t0 = time.monotonic()
    try:
        with pytest.raises(PeerDied, match=r"producer \(pid \d+\) died"):
            ring.pop(out=out, timeout=30)
    finally:
        p.join(30)
        ring.close()
    assert time.monotonic() - t0 < 20  # start-up included; the wait itself is ~0.1 s slices


def test_full_batches_move_one_held_row_per_lap_of_the_buffers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A learner that always waits for k steps: the batch never crosses the last row, and
    what is moved to the top to make room is the one row held, not a batch."""
    from pytest_perfgate.ring.buffers import Buffers

    moved: list[int] = []
    real = Buffers.compact
    monkeypatch.setattr(Buffers, "compact", lambda out: (moved.append(out.held), real(out)))
    with Ring(RingSpec(4, (3,), (2,), capacity=8)) as r:
        out = r.buffers(3)  # 7 rows
        starts = []
        for t in range(31):
            obs_step(r, t)
            if t % 3 == 0 and t:
                b = r.pop(out=out, min_steps=3, timeout=0)
                assert b is not None and b.steps == 3
                assert b.obs[:, 0, 0].tolist() == [b.start, b.start + 1, b.start + 2]
                assert b.next_obs[:, 0, 0].tolist() == [b.start + 1, b.start + 2, b.start + 3]
                starts.append(b.start)
    assert starts == list(range(0, 30, 3))
    assert moved and set(moved) == {1} and len(moved) <= len(starts) // 2

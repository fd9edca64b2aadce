"""The ring in one process: next_obs against a plain 8-field reference, and bad input.

Real-process faults (crashes, a killed parent, cleanup) are tests/test_ring_faults.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from helpers import ring_segments
from hypothesis import given, settings
from hypothesis import strategies as st
from ring_steps import episode, obs_step, push_step

from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.mapping import CONSUMED, RingClosed
from pytest_perfgate.ring.shm_ring import Ring


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5), cap=st.integers(2, 5), steps=st.integers(1, 25),
       p_term=st.sampled_from([0.0, 0.2, 0.6]), p_trunc=st.sampled_from([0.0, 0.2, 0.6]),
       critic=st.booleans(), seed=st.integers(0, 2**31), pop_max=st.integers(1, 6),
       pop_min=st.integers(1, 4), mode=st.sampled_from(["copy", "reuse", "borrow"]))
def test_next_obs_matches_an_8_field_reference(n: int, cap: int, steps: int, p_term: float,
                                                p_trunc: float, critic: bool, seed: int,
                                                pop_max: int, pop_min: int, mode: str) -> None:
    """Terminations, truncations, both at once, across wrap-around (steps > capacity),
    popping into fresh arrays, into reused ``buffers()``, or borrowing views, with and
    without waiting for ``min_steps`` (fewer only at the end of the stream)."""
    rng = np.random.default_rng(seed)
    ref = episode(rng, n, steps, p_term, p_trunc, critic)
    spec = RingSpec(n, (3,), (2,), capacity=cap, critic_shape=(2,) if critic else None)
    got: list[Any] = []
    with Ring(spec) as ring:
        out = ring.buffers(pop_max) if mode == "reuse" else None

        def keep(b: Any) -> Any:
            if b is not None:  # views into reused buffers or the ring: keep a copy
                got.append(SimpleNamespace(**{k: None if v is None else np.copy(v)
                                              for k, v in vars(b).items()}))
            return b

        def pop() -> Any:
            if mode != "borrow":
                return keep(ring.pop(max_steps=pop_max, timeout=0, out=out, min_steps=pop_min))
            with ring.borrow(max_steps=pop_max, timeout=0, min_steps=pop_min) as b:
                return keep(b)

        def full_then(write: Any) -> None:
            # Full: drain some, as a consumer would. A pop into the ring's own buffers that
            # waits for more than the ring holds returns None, having freed what it copied.
            for _ in range(3):
                if write():
                    return
                b = pop()
                assert b is not None or mode == "reuse"
            assert write(), "three pops freed nothing in a full ring"

        for s in ref:
            full_then(lambda s=s: push_step(ring, s, critic))
        full_then(lambda: ring.finish(ref[-1]["ret_next"],
                                      ref[-1]["ret_cnext"] if critic else None, timeout=0))
        while pop() is not None:
            pass
        assert ring.ended
    keys = ["obs", "next_obs", "action", "reward", "terminated", "truncated"]
    keys += ["critic_obs", "next_critic_obs"] if critic else []
    for k in keys:
        mine = np.concatenate([getattr(b, k) for b in got]) if got else np.empty(0)
        np.testing.assert_array_equal(mine, np.stack([s[k] for s in ref]), err_msg=k)
    assert sum(len(b.obs) for b in got) == steps


def test_successor_holds_the_reset_obs_and_the_side_store_the_final_one() -> None:
    with Ring(RingSpec(3, (1,), (1,), capacity=2)) as r:
        z = np.zeros((3, 1), np.float32)
        r.push(z, z, np.zeros(3, np.float32), np.array([False, True, False]),
               np.array([False, False, True]), final_obs=np.array([[5.0], [6.0]], np.float32))
        assert r.pop(timeout=0) is None  # the newest step waits for its successor
        r.finish(np.full((3, 1), 9, np.float32))
        b = r.pop(timeout=0)
        assert b is not None
        assert b.next_obs[0, :, 0].tolist() == [9.0, 5.0, 6.0]
        assert r.pop(timeout=0) is None and r.ended
        with pytest.raises(RingClosed, match="push after finish"):
            r.push(z, z, np.zeros(3, np.float32), np.zeros(3, bool), np.zeros(3, bool))


@pytest.mark.parametrize("reuse", [False, True])
def test_min_steps_waits_for_that_many_consumable_steps(reuse: bool) -> None:
    z = np.zeros((1, 1), np.float32)
    args = (np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool))
    with Ring(RingSpec(1, (1,), (1,), capacity=5, overwrite=True)) as r:
        out = r.buffers(4) if reuse else None
        for t in range(3):
            r.push(np.full((1, 1), t, np.float32), z, *args)
        assert r.pop(min_steps=3, timeout=0.05, out=out) is None  # 2 consumable: not enough
        assert r.stats()["consumed"] == 0  # nothing taken by the pop that timed out
        r.push(np.full((1, 1), 3, np.float32), z, *args)
        b = r.pop(min_steps=3, timeout=0, out=out)
        assert b is not None and b.obs[:, 0, 0].tolist() == [0, 1, 2]
        assert b.next_obs[:, 0, 0].tolist() == [1, 2, 3]
        for t in range(4, 10):  # the timed-out pop left no claim: overwriting goes on
            assert r.push(np.full((1, 1), t, np.float32), z, *args, timeout=0)
        assert r.stats()["overwritten"] > 0


def test_pop_into_buffers_copies_steps_as_they_arrive() -> None:
    """A pop waiting for min_steps copies what is there while the producer goes on; the
    producer is a thread here, as it would be another process."""
    import threading
    import time

    z = np.zeros((2, 1), np.float32)
    rest = (z, np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool))
    with Ring(RingSpec(2, (1,), (1,), capacity=4)) as r:
        out = r.buffers(3)
        freed_before_push: list[int] = []

        def produce() -> None:
            for t in range(4):
                freed_before_push.append(int(r._map.h[CONSUMED]))
                r.push(np.full((2, 1), t, np.float32), *rest)
                time.sleep(0.05)

        th = threading.Thread(target=produce)
        th.start()
        b = r.pop(min_steps=3, timeout=10, out=out)
        th.join(10)
        assert b is not None and b.obs[:, 0, 0].tolist() == [0, 1, 2]
        assert b.next_obs[:, 1, 0].tolist() == [1, 2, 3]
        assert r.stats()["pops"] == 1 and r.stats()["consumed"] == 3
        assert freed_before_push[3] >= 1  # step 0 was copied and freed before step 3 came


def test_a_finished_stream_gives_fewer_than_min_steps() -> None:
    z = np.zeros((1, 1), np.float32)
    with Ring(RingSpec(1, (1,), (1,), capacity=5)) as r:
        for t in range(2):
            r.push(np.full((1, 1), t, np.float32), z, np.zeros(1, np.float32),
                   np.zeros(1, bool), np.zeros(1, bool))
        r.finish(np.full((1, 1), 2, np.float32))
        b = r.pop(min_steps=4, timeout=0, out=r.buffers(4))
        assert b is not None and b.next_obs[:, 0, 0].tolist() == [1, 2]
        assert r.pop(min_steps=4, timeout=0, out=r.buffers(4)) is None and r.ended


@pytest.mark.parametrize("cap", [0, 1, -3, 2.5])
def test_capacity_below_two_is_refused_naming_the_value(cap: object) -> None:
    with pytest.raises(RingInputError) as info:
        RingSpec(4, (3,), (2,), capacity=cap)  # type: ignore[arg-type]
    msg = str(info.value)
    assert msg.startswith(f"capacity={cap!r}: a ring needs capacity >= 2.")
    assert "deadlock" in msg


def test_shape_and_dtype_mismatch_name_field_expected_and_got() -> None:
    with Ring(RingSpec(4, (3,), (2,))) as r:
        z = np.zeros(4, np.float32)
        with pytest.raises(RingInputError) as info:
            r.push(np.zeros((4, 5), np.float32), np.zeros((4, 2), np.float32), z,
                   np.zeros(4, bool), np.zeros(4, bool))
        assert str(info.value) == (
            "push: field 'obs' expected shape (4, 3) dtype float32, got shape (4, 5) dtype "
            "float32; convert it or declare the ring with this shape/dtype")
        with pytest.raises(RingInputError, match=r"field 'action' expected shape \(4, 2\) "
                           r"dtype float32, got shape \(4, 2\) dtype float64"):
            r.push(np.zeros((4, 3), np.float32), np.zeros((4, 2)), z, np.zeros(4, bool),
                   np.zeros(4, bool))
        with pytest.raises(RingInputError, match=r"1 env\(s\) ended at this step but "
                           r"final_obs is None"):
            r.push(np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32), z,
                   np.array([1, 0, 0, 0], bool), np.zeros(4, bool))
        assert r.stats()["pushed"] == 0  # nothing half-written


def test_non_finite_values_pass_through_unless_check_finite() -> None:
    obs = np.zeros((2, 1), np.float32)
    obs[1, 0] = np.nan
    args = (obs, np.zeros((2, 1), np.float32), np.array([np.inf, 0], np.float32),
            np.zeros(2, bool), np.zeros(2, bool))
    with Ring(RingSpec(2, (1,), (1,))) as r:
        r.push(*args)
        r.finish(obs)
        b = r.pop(timeout=0)
        assert b is not None and np.isnan(b.obs[0, 1, 0]) and np.isinf(b.reward[0, 0])
    with Ring(RingSpec(2, (1,), (1,), check_finite=True)) as r:
        with pytest.raises(RingInputError, match=r"field 'obs' holds a non-finite value at "
                           r"index \[1, 0\] \(nan\); the ring was created with "
                           "check_finite=True"):
            r.push(*args)


def test_overwrite_mode_drops_the_oldest_and_counts_it() -> None:
    z = np.zeros((1, 1), np.float32)
    with Ring(RingSpec(1, (1,), (1,), capacity=3, overwrite=True)) as r:
        for t in range(7):
            assert r.push(np.full((1, 1), t, np.float32), z, np.zeros(1, np.float32),
                          np.zeros(1, bool), np.zeros(1, bool), timeout=0)
        st_ = r.stats()
        assert st_["overwritten"] == 4 and st_["pushed"] == 7
        b = r.pop(timeout=0)
        assert b is not None
        assert b.obs[:, 0, 0].tolist() == [4.0, 5.0] and b.next_obs[:, 0, 0].tolist() == [5, 6]


def test_block_mode_push_times_out_when_full_and_counts_blocked_time() -> None:
    z = np.zeros((1, 1), np.float32)
    with Ring(RingSpec(1, (1,), (1,), capacity=2)) as r:
        args = (z, z, np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool))
        assert r.push(*args, timeout=0) and r.push(*args, timeout=0)
        assert not r.push(*args, timeout=0.2)
        assert r.stats()["producer_blocked_s"] >= 0.19


def test_segment_is_private_and_removed_on_close() -> None:
    before = ring_segments()
    r = Ring(RingSpec(2, (1,), (1,)))
    (name,) = ring_segments() - before
    assert name == r.name and len(name.rsplit("_", 1)[1]) == 32  # 128 random bits
    assert os.stat(f"/dev/shm/{name}").st_mode & 0o777 == 0o600
    r.close()
    assert ring_segments() == before


def test_borrowing_the_last_slot_gives_views_with_next_obs_from_slot_0() -> None:
    z = np.zeros((2, 1), np.float32)
    rest = (z, np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool))
    with Ring(RingSpec(2, (1,), (1,), capacity=3)) as r:
        for t in range(3):
            r.push(np.full((2, 1), t, np.float32), *rest)
        with r.borrow(timeout=0) as b:
            assert b is not None and b.obs[:, 0, 0].tolist() == [0, 1]
        r.push(np.full((2, 1), 3, np.float32), *rest)  # into slot 0: step 2's successor
        with r.borrow(timeout=0) as b:
            assert b is not None and b.steps == 1
            assert b.obs[0, 0, 0] == 2 and b.next_obs[0, 0, 0] == 3
            ring_obs = r._map.a["obs"]
            assert np.shares_memory(b.obs, ring_obs) and np.shares_memory(b.next_obs, ring_obs)


def _rss_kb(name: str) -> int:
    """Resident kB of this process's mapping of segment ``name`` (/proc/self/smaps)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if name in line:
            return next(int(x.split()[1]) for x in lines[i + 1:] if x.startswith("Rss:"))
    raise AssertionError(f"{name} is not mapped")


def test_slot_fields_are_populated_at_creation_and_the_side_store_is_not() -> None:
    spec = RingSpec(512, (256,), (8,), capacity=4)
    with Ring(spec) as r:
        slots = spec.capacity * spec.slot_bytes()
        side = spec.capacity * 512 * 256 * 4
        rss = _rss_kb(r.name) * 1024
        assert slots <= rss < slots + side // 2


@pytest.mark.parametrize(("kw", "msg"), [
    ({"max_steps": 0}, "max_steps=0: pass a positive int (or None: all consumable steps)"),
    ({"max_steps": 2.5}, "max_steps=2.5: pass a positive int"),
    ({"min_steps": 0}, "min_steps=0: pass a positive int"),
    ({"min_steps": True}, "min_steps=True: pass a positive int")])
@pytest.mark.parametrize("how", ["pop", "reuse", "borrow"])
def test_batch_sizes_below_one_are_refused_naming_the_value(kw: dict[str, Any], msg: str,
                                                            how: str) -> None:
    with Ring(RingSpec(1, (1,), (1,))) as r:
        with pytest.raises(RingInputError) as info:
            if how == "borrow":
                with r.borrow(timeout=0, **kw):
                    pass
            else:
                r.pop(timeout=0, out=r.buffers(2) if how == "reuse" else None, **kw)
        assert str(info.value).startswith(msg)


def test_pop_into_buffers_of_another_ring_names_the_fix() -> None:
    with Ring(RingSpec(2, (3,), (1,))) as r, Ring(RingSpec(2, (4,), (1,))) as other:
        for bad in ({}, other.buffers(2), {"action": 1}):
            with pytest.raises(RingInputError, match=r"not buffers of this ring .* make "
                               r"them with ring.buffers\(max_steps\)"):
                r.pop(timeout=0, out=bad)


@pytest.mark.parametrize("field", ["obs_dtype", "action_dtype", "reward_dtype"])
@pytest.mark.parametrize("dtype", [object, "U3", "S4", "datetime64[s]", [("a", "f4")],
                                   "(2,)f4", "V8"])
def test_a_dtype_the_ring_cannot_hold_is_refused_naming_the_field(field: str,
                                                                   dtype: Any) -> None:
    with pytest.raises(RingInputError) as info:
        RingSpec(4, (3,), (2,), **{field: dtype})
    msg = str(info.value)
    assert msg.startswith(f"{field}={dtype!r} (")
    assert msg.endswith("the ring holds only fixed-size numeric or bool dtypes (raw bytes "
                        "in shared memory: an object or string dtype would hand the other "
                        "process dangling pointers or variable lengths); use e.g. "
                        "'float32', 'int64' or 'bool'")


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "uint32", "bool",
                                   "complex64"])
def test_fixed_size_numeric_and_bool_dtypes_are_held(dtype: str) -> None:
    spec = RingSpec(2, (3,), (1,), capacity=2, obs_dtype=dtype)
    with Ring(spec) as ring:
        obs = np.ones((2, 3), np.dtype(spec.obs_dtype))
        for _ in range(2):
            ring.push(obs, np.zeros((2, 1), np.float32), np.zeros(2, np.float32),
                      np.zeros(2, bool), np.zeros(2, bool))
        b = ring.pop()
        assert b is not None and b.obs.dtype == np.dtype(dtype) and (b.obs == 1).all()


def test_consecutive_pops_into_buffers_start_at_the_carried_next_obs_row() -> None:
    """The last next_obs row of a pop is the next pop's first obs: not copied twice."""
    with Ring(RingSpec(4, (3,), (2,), capacity=5)) as r:
        out = r.buffers(2)
        # every field has the rows: a step held for its successor keeps its action too
        assert out["obs"].shape[0] == 5 and out["action"].shape[0] == 5
        for t in range(4):
            obs_step(r, t)
        a = r.pop(max_steps=2, out=out)
        assert a is not None and a.obs[:, 0, 0].tolist() == [0, 1]
        last = a.next_obs[-1]
        b = r.pop(max_steps=2, out=out, timeout=0)
        assert b is not None and b.obs[:, 0, 0].tolist() == [2]
        assert np.shares_memory(b.obs[0], last) and b.next_obs[:, 0, 0].tolist() == [3]


def test_plain_arrays_shared_by_two_rings_or_skipped_steps_stay_exact() -> None:
    """Plain arrays (not a ring's own buffers, which hold a step: tests/test_ring_held.py)
    keep each step in the ring until its successor arrives, so rings may share them."""
    from pytest_perfgate.ring import batch

    spec = RingSpec(4, (3,), (2,), capacity=4)
    with Ring(spec) as r1, Ring(spec) as r2:
        out = batch.buffers(r1.spec.fields(), 2)
        for t in range(3):
            obs_step(r1, t)
            obs_step(r2, 10 + t)
        b = r1.pop(max_steps=1, out=out)
        assert b is not None and b.obs[0, 0, 0] == 0 and b.next_obs[0, 0, 0] == 1
        b = r2.pop(max_steps=1, out=out)  # another ring: its own first obs
        assert b is not None and b.obs[0, 0, 0] == 10 and b.next_obs[0, 0, 0] == 11
        assert r1.pop(max_steps=1) is not None  # a pop without out= in between
        obs_step(r1, 3)
        b = r1.pop(max_steps=1, out=out)
        assert b is not None and b.obs[0, 0, 0] == 2 and b.next_obs[0, 0, 0] == 3


def test_a_closed_ring_says_so_on_every_operation() -> None:
    ring = Ring(RingSpec(2, (3,), (1,), capacity=2))
    obs, act = np.zeros((2, 3), np.float32), np.zeros((2, 1), np.float32)
    rew, no = np.zeros(2, np.float32), np.zeros(2, bool)
    ring.push(obs, act, rew, no, no)
    out = ring.buffers(2)
    ring.close()
    for op in (lambda: ring.push(obs, act, rew, no, no), lambda: ring.pop(timeout=0.1),
               lambda: ring.pop(out=out, timeout=0.1), ring.stats, lambda: ring.ended):
        with pytest.raises(RingClosed, match="was closed in this process"):
            op()


def test_a_ring_dropped_without_close_leaves_no_segment() -> None:
    import gc


    before = ring_segments()
    gc.disable()  # the segment must go by reference counting alone, with no cycle left
    try:
        ring = Ring(RingSpec(2, (3,), (1,), capacity=2))
        assert ring_segments() - before
        del ring
        assert ring_segments() == before
    finally:
        gc.enable()


@pytest.mark.parametrize("parties", [0, 2.0, True, "2", 17])
def test_a_bad_party_count_is_refused_before_a_segment_exists(parties: object) -> None:
    with pytest.raises(RingInputError, match=f"parties={parties!r}: pass how many"):
        Ring(RingSpec(2, (3,), (1,), capacity=2), parties=parties)  # type: ignore[arg-type]


def test_an_entered_lock_outlives_a_close_in_between() -> None:
    ring = Ring(RingSpec(2, (3,), (1,), capacity=2))
    lock = ring._map.lock
    lock.__enter__()
    ring.close()  # another thread's close: the entered lock still holds the mapping
    lock.__exit__(None, None, None)
    assert not hasattr(ring, "_map")  # closed: hasattr says so instead of raising

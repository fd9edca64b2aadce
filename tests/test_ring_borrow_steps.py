"""``borrow(next_obs=False)``: each step as soon as it is written, next_obs rebuilt by the
learner from the next step's obs, the ended envs' final observations and, at the end,
finish()'s observation; against the plain 8-field reference of tests/test_ring.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ring_steps import episode, push_step

from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.shm_ring import Ring

Z3 = np.zeros((3, 1), np.float32)
FLAGS = (np.zeros(3, np.float32), np.zeros(3, bool), np.zeros(3, bool))


def _rebuild(steps: list[dict[str, Any]], end: dict[str, Any], key: str) -> np.ndarray:
    """next_obs (or next_critic_obs) of every step, as a learner that copies builds it."""
    out = []
    for t, s in enumerate(steps):
        nxt = (steps[t + 1][key] if t + 1 < len(steps) else end[key]).copy()
        envs, final = s["finals_" + key]
        nxt[envs] = final
        out.append(nxt)
    return np.stack(out)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5), cap=st.integers(2, 5), steps=st.integers(1, 25),
       p_term=st.sampled_from([0.0, 0.2, 0.6]), p_trunc=st.sampled_from([0.0, 0.3]),
       critic=st.booleans(), seed=st.integers(0, 2**31), most=st.integers(1, 6),
       least=st.integers(1, 3))
def test_steps_without_next_obs_rebuild_the_8_field_reference(
        n: int, cap: int, steps: int, p_term: float, p_trunc: float, critic: bool,
        seed: int, most: int, least: int) -> None:
    ref = episode(np.random.default_rng(seed), n, steps, p_term, p_trunc, critic)
    spec = RingSpec(n, (3,), (2,), capacity=cap, critic_shape=(2,) if critic else None)
    got: list[dict[str, Any]] = []
    ends: list[dict[str, Any]] = []
    with Ring(spec) as ring:

        def read() -> bool:
            with ring.borrow(max_steps=most, timeout=0, min_steps=least,
                             next_obs=False) as b:
                if b is None:
                    return False
                if b.steps == 0:  # the stream's end: finish()'s observation
                    ends.append({"obs": b.next_obs[0].copy(), "critic_obs": None
                                 if b.next_critic_obs is None else b.next_critic_obs[0].copy()})
                    return True
                assert b.next_obs is None and b.next_critic_obs is None
                for t in range(b.steps):
                    s = {k: np.copy(getattr(b, k)[t]) for k in
                         ("obs", "action", "reward", "terminated", "truncated")}
                    envs, final = b.finals(t)
                    s["finals_obs"] = (envs, final.copy())
                    if critic:
                        s["critic_obs"] = b.critic_obs[t].copy()
                        s["finals_critic_obs"] = (envs, b.final_critic_obs[t, :len(envs)].copy())
                    got.append(s)
                return True

        def until(write: Any) -> None:
            for _ in range(cap + 2):
                if write():
                    return
                read()  # full: drain some, as a learner would
            raise AssertionError("reads freed nothing in a full ring")

        for s in ref:
            until(lambda s=s: push_step(ring, s, critic))
        until(lambda: ring.finish(ref[-1]["ret_next"],
                                  ref[-1]["ret_cnext"] if critic else None, timeout=0))
        while read():
            pass
        assert ring.ended
        with ring.borrow(timeout=0, next_obs=False) as b:
            assert b is None  # the end is told once
    assert len(ends) == 1 and len(got) == steps
    for k in ("obs", "action", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(np.stack([s[k] for s in got]),
                                      np.stack([s[k] for s in ref]), err_msg=k)
    np.testing.assert_array_equal(_rebuild(got, ends[0], "obs"),
                                  np.stack([s["next_obs"] for s in ref]))
    if critic:
        np.testing.assert_array_equal(_rebuild(got, ends[0], "critic_obs"),
                                      np.stack([s["next_critic_obs"] for s in ref]))


def test_a_step_comes_before_its_successor_is_written() -> None:
    with Ring(RingSpec(3, (1,), (1,), capacity=2)) as ring:
        ring.push(np.full((3, 1), 7, np.float32), Z3, *FLAGS)
        with ring.borrow(timeout=0) as b:
            assert b is None  # with next_obs, the step waits for its successor
        with ring.borrow(timeout=0, next_obs=False) as b:
            assert b is not None and b.steps == 1 and b.next_obs is None
            assert b.obs[0, :, 0].tolist() == [7.0, 7.0, 7.0]
        assert ring.stats()["consumed"] == 1
        # both slots free again: two pushes fit without a read
        assert ring.push(Z3, Z3, *FLAGS, timeout=0) and ring.push(Z3, Z3, *FLAGS, timeout=0)


def test_min_steps_counts_written_steps_and_finish_is_no_step() -> None:
    with Ring(RingSpec(3, (1,), (1,), capacity=3)) as ring:
        ring.push(Z3, Z3, *FLAGS)
        with ring.borrow(min_steps=2, timeout=0.01, next_obs=False) as b:
            assert b is None  # one written step, two wanted
        assert ring.stats()["consumed"] == 0  # the timeout claimed nothing
        ring.finish(np.full((3, 1), 9, np.float32))
        with ring.borrow(min_steps=2, timeout=0, next_obs=False) as b:
            assert b is not None and b.steps == 1  # fewer only at the end of the stream
        with ring.borrow(timeout=0, next_obs=False) as b:
            assert b is not None and b.steps == 0 and b.next_obs[0, :, 0].tolist() == [9.0] * 3


def test_finals_name_the_ended_envs_and_their_final_observations() -> None:
    with Ring(RingSpec(3, (1,), (1,), capacity=2)) as ring:
        ring.push(Z3, Z3, np.zeros(3, np.float32), np.array([True, False, False]),
                  np.array([False, False, True]), final_obs=np.array([[5.0], [6.0]], np.float32))
        with ring.borrow(timeout=0, next_obs=False) as b:
            assert b is not None
            envs, final = b.finals(0)
            assert envs.tolist() == [0, 2] and final[:, 0].tolist() == [5.0, 6.0]
        ring.push(Z3, Z3, *FLAGS)
        ring.push(Z3, Z3, *FLAGS)
        with ring.borrow(timeout=0) as b:  # a batch with next_obs has no finals
            assert b is not None
            with pytest.raises(ValueError, match="has next_obs"):
                b.finals(0)


@pytest.mark.parametrize("bad", [None, 0, "no", 1])
def test_next_obs_must_be_a_bool(bad: Any) -> None:
    with Ring(RingSpec(3, (1,), (1,), capacity=2)) as ring:
        with pytest.raises(RingInputError, match=r"next_obs=.*pass True .* or False"):
            ring.borrow(next_obs=bad)


def test_a_step_held_in_pop_buffers_comes_first_with_its_next_obs() -> None:
    with Ring(RingSpec(3, (1,), (1,), capacity=2)) as ring:
        out = ring.buffers(1)
        for t in range(2):
            assert ring.push(np.full((3, 1), t, np.float32), Z3, *FLAGS, timeout=0)
        b = ring.pop(1, 0, out=out)
        assert b is not None and b.obs[0, 0, 0] == 0  # step 1 is held in `out` now
        assert ring.push(np.full((3, 1), 2, np.float32), Z3, *FLAGS, timeout=0)
        with ring.borrow(timeout=0, next_obs=False) as b:
            assert b is not None and b.obs[0, 0, 0] == 1 and b.next_obs[0, 0, 0] == 2
        with ring.borrow(timeout=0, next_obs=False) as b:
            assert b is not None and b.obs[0, 0, 0] == 2 and b.next_obs is None

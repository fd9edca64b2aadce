"""A careless caller's ring arguments: each refused up front, naming the field and the fix,
never a bare TypeError, a silent truncation or a wait that never ends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.shm_ring import Ring

SPEC = {"num_envs": 2, "obs_shape": (3,), "action_shape": (1,)}


@pytest.mark.parametrize(("kw", "message"), [
    ({"obs_shape": "abc"}, "obs_shape='abc': pass a tuple of whole numbers, e.g. (376,)"),
    ({"obs_shape": (None,)}, "obs_shape=(None,): every dimension must be a whole number >= 1 "
                             "(got None)"),
    ({"obs_shape": (float("nan"),)}, "obs_shape=(nan,): every dimension must be a whole "
                                     "number >= 1 (got nan)"),
    ({"obs_shape": (2.7,)}, "obs_shape=(2.7,): every dimension must be a whole number >= 1 "
                            "(got 2.7)"),
    ({"action_shape": (0,)}, "action_shape=(0,): every dimension must be a whole number"),
    ({"critic_shape": 3.0}, "critic_shape=3.0: pass a tuple of whole numbers"),
    ({"obs_shape": (10**30,)}, "bytes of shared memory, more than any machine has"),
    ({"reward_dtype": None}, "reward_dtype=None: name the dtype, e.g. 'float32'"),
])
def test_a_bad_spec_field_is_named(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(RingInputError) as e:
        RingSpec(**{**SPEC, **kw})
    assert message in str(e.value)


def test_an_int_shape_is_one_dimension_as_numpy_takes_it() -> None:
    spec = RingSpec(num_envs=2, obs_shape=376, action_shape=np.int64(6))  # type: ignore[arg-type]
    assert spec.obs_shape == (376,) and spec.action_shape == (6,)


@pytest.mark.parametrize("timeout", [float("nan"), "abc", -1, float("inf"), True])
@pytest.mark.parametrize("call", ["pop", "borrow", "push", "finish"])
def test_a_bad_timeout_is_refused_before_any_wait(call: str, timeout: Any) -> None:
    ring = Ring(RingSpec(**SPEC))  # type: ignore[arg-type]
    obs = np.zeros((2, 3), np.float32)
    calls = {"pop": lambda: ring.pop(timeout=timeout),
             "borrow": lambda: ring.borrow(timeout=timeout),
             "push": lambda: ring.push(obs, np.zeros((2, 1), np.float32),
                                       np.zeros(2, np.float32), np.zeros(2, bool),
                                       np.zeros(2, bool), timeout=timeout),
             "finish": lambda: ring.finish(obs, timeout=timeout)}
    try:
        with pytest.raises(RingInputError) as e:
            calls[call]()
        assert str(e.value) == (f"{call}: timeout={timeout!r}: pass None (wait until there is "
                                "something) or a number of seconds >= 0, e.g. 0.5")
    finally:
        ring.close()


def test_a_numpy_timeout_is_seconds() -> None:
    ring = Ring(RingSpec(**SPEC))  # type: ignore[arg-type]
    try:
        assert ring.pop(timeout=np.float64(0.01)) is None
        with ring.borrow(timeout=np.float32(0.01)) as b:
            assert b is None
    finally:
        ring.close()


@pytest.mark.parametrize("timeout", [float("nan"), "abc", -1])
@pytest.mark.parametrize("call", ["pop", "borrow"])
def test_rings_refuse_a_bad_timeout_too(call: str, timeout: Any) -> None:
    from pytest_perfgate.ring.rings import Rings

    rings = Rings([Ring(RingSpec(**SPEC)), Ring(RingSpec(**SPEC))])  # type: ignore[arg-type]
    try:
        with pytest.raises(RingInputError, match=f"{call}: timeout="):
            rings.pop(timeout=timeout) if call == "pop" else rings.borrow(timeout=timeout)
    finally:
        rings.close()

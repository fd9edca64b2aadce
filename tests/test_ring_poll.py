"""Polling before sleeping (docs/ring.md "Polling before sleeping"): the budget, its
validation, when a side polls and when it sleeps at once, with a fake clock; and that a
waiter which polls needs no bell, with a real second thread."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from pytest_perfgate.ring.layout import MAX_SPIN_US, RingInputError, RingSpec
from pytest_perfgate.ring.mapping import PUBLISHED, W_CONS
from pytest_perfgate.ring.shm_ring import Ring
from pytest_perfgate.ring.waits import SPIN_MISSES

Z = np.zeros((2, 1), np.float32)
FLAGS = (np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class CountingBell:
    """A bell that counts its posts and passes everything through."""

    def __init__(self, real: Any) -> None:
        self.real, self.posts = real, 0

    def post(self) -> None:
        self.posts += 1
        self.real.post()

    def wait(self, timeout: float | None) -> bool:
        return bool(self.real.wait(timeout))


def _ring(spin_us: float, cap: int = 2) -> Ring:
    return Ring(RingSpec(2, (1,), (1,), capacity=cap, spin_us=spin_us))


def test_the_budget_is_off_by_default_and_reaches_the_other_side() -> None:
    assert RingSpec(1, (1,), (1,)).spin_ns() == 0
    assert RingSpec(1, (1,), (1,), spin_us=2.5).spin_ns() == 2500
    import pickle

    with _ring(50) as ring:
        other = pickle.loads(pickle.dumps(ring))  # what a spawn child unpickles
        try:
            assert other._claims.waits.spin_ns == ring._producer.waits.spin_ns == 50_000
        finally:
            other.close()


@pytest.mark.parametrize("bad", [-1, True, "200", None, MAX_SPIN_US + 1, float("nan")])
def test_a_bad_budget_is_refused_naming_it(bad: Any) -> None:
    with pytest.raises(RingInputError, match=r"spin_us=.*microseconds.*0 \(never poll, the "
                                             r"default\).*pinned to CPUs of their own"):
        RingSpec(1, (1,), (1,), spin_us=bad)


def test_polling_stops_at_the_budget_the_deadline_and_after_long_waits() -> None:
    with _ring(100) as ring:
        waits = ring._claims.waits
        clock = waits.clock = FakeClock()
        t0 = clock.now
        assert waits.spin_end(t0, None) == t0 + 100_000
        assert waits.spin_end(t0, 0.0) == 0  # a deadline already passed: no polling
        # the counter does not move: polling ends when the clock reaches the budget
        clock.now = t0 + 100_000
        assert waits.spin(PUBLISHED, ring._map.h[PUBLISHED], t0 + 100_000) == 0
        for _ in range(SPIN_MISSES):  # waits that each outlasted the budget
            waits.spun(t0)
        assert waits.spin_end(clock.now, None) == 0  # sleeps at once now
        assert ring._producer.waits.spin_end(clock.now, None) > 0  # each side its own
        waits.misses -= 1
        clock.now = t0 + 50_000
        waits.spun(t0)  # one short wait
        assert waits.spin_end(clock.now, None) == clock.now + 100_000  # polls again
        assert waits.misses == 0


def test_a_moved_counter_ends_the_poll_at_once() -> None:
    with _ring(100) as ring:
        waits = ring._claims.waits
        waits.clock = FakeClock()
        ring.push(Z, Z, *FLAGS)
        assert waits.spin(PUBLISHED, ring._map.h[PUBLISHED] - 1, 10**18) == 10**18


@pytest.mark.parametrize("spin_us, bells", [(MAX_SPIN_US, 0), (0, 1)])
def test_a_learner_that_polls_needs_no_bell(spin_us: float, bells: int) -> None:
    """The clock is frozen, so a polling learner polls until the step is there however
    slow this machine is; one that sleeps at once needs the producer's bell."""
    with _ring(spin_us) as ring:
        ring._claims.waits.clock = FakeClock()
        producer = ring._producer
        bell = producer.data_bell = CountingBell(producer.data_bell)
        got: list[Any] = []
        waiting = threading.Event()

        def learner() -> None:
            waiting.set()
            with ring.borrow(timeout=30, next_obs=False) as b:  # one push is enough
                got.append(None if b is None else b.obs.copy())

        th = threading.Thread(target=learner)
        th.start()
        assert waiting.wait(30)
        while not (ring._map.h[W_CONS] or spin_us):  # the sleeper announced itself
            threading.Event().wait(0.001)
        ring.push(np.full((2, 1), 4, np.float32), Z, *FLAGS)
        th.join(30)
        assert not th.is_alive()
        assert got and got[0] is not None and got[0][0, 0, 0] == 4
        assert bell.posts == bells


def test_a_producer_that_polls_needs_no_free_bell() -> None:
    with _ring(MAX_SPIN_US) as ring:
        ring._producer.waits.clock = FakeClock()
        claims = ring._claims
        bell = claims.free_bell = CountingBell(claims.free_bell)
        for _ in range(2):
            ring.push(Z, Z, *FLAGS)  # full now
        done = threading.Event()

        def producer() -> None:
            ring.push(Z, Z, *FLAGS, timeout=30)
            done.set()

        th = threading.Thread(target=producer)
        th.start()
        assert ring.pop(timeout=30) is not None  # frees a slot
        th.join(30)
        assert done.is_set() and bell.posts == 0

"""The steady state's short paths: ``pop(out=)`` of one held step (one step copied through
views made once, ring/buffers.py), ``borrow()`` as a class (ring/reader.py) and the mutex
and bells as multiprocessing's C semaphore objects (ring/sync.py). Each must give exactly
what the general path gives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import ring_segments
from ring_steps import check_batches, episode, keep_copy, obs_step, push_step

from pytest_perfgate.ring import sync
from pytest_perfgate.ring.buffers import Buffers
from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.shm_ring import Ring


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How pops copied: one step at a time (the steady state) or runs of steps."""
    seen = {"step": 0, "run": 0}
    for name in ("step", "run"):
        real = getattr(Buffers, f"copy_{name}")

        def counted(out: Buffers, *args: Any, _real: Any = real, _name: str = name) -> None:
            seen[_name] += 1
            _real(out, *args)

        monkeypatch.setattr(Buffers, f"copy_{name}", counted)
    return seen


@pytest.mark.parametrize("critic", [False, True])
def test_one_step_pops_take_the_short_path_and_stay_exact(
        monkeypatch: pytest.MonkeyPatch, critic: bool) -> None:
    """A 2-slot ring read one step per pop, as a learner slower than its collector does:
    after the first pop every pop is the short one, and every transition (episode ends,
    final observations, the buffers' row wrap) equals the 8-field reference."""
    seen = _counting(monkeypatch)
    rng = np.random.default_rng(7)
    ref = episode(rng, 5, 40, 0.15, 0.15, critic)
    spec = RingSpec(5, (3,), (2,), capacity=2, critic_shape=(2,) if critic else None)
    got: list[Any] = []
    with Ring(spec) as ring:
        out = ring.buffers(3)
        assert push_step(ring, ref[0], critic)
        for s in ref[1:]:
            assert push_step(ring, s, critic)
            assert keep_copy(got, ring.pop(out=out, timeout=0)) is not None
        ring.finish(ref[-1]["ret_next"], ref[-1]["ret_cnext"] if critic else None)
        while (b := ring.pop(out=out, timeout=0)) is not None:
            keep_copy(got, b)
        assert ring.ended and ring.stats()["consumed"] == len(ref)
    check_batches(got, ref, critic)
    assert sum(bool(s["terminated"].any() or s["truncated"].any()) for s in ref) > 5
    assert seen["step"] == len(ref) - 2, seen  # all but the first pop's two, and finish()


def test_a_short_pop_that_times_out_keeps_the_held_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counting(monkeypatch)
    with Ring(RingSpec(4, (3,), (2,), capacity=2)) as r:
        out = r.buffers(2)
        for t in range(2):
            obs_step(r, t)
        b = r.pop(out=out, timeout=0)
        assert b is not None and b.obs[0, 0, 0] == 0
        assert r.pop(out=out, timeout=0.02) is None  # step 1 held, nothing new
        assert seen["step"] == 0
        assert r.stats()["consumed"] == 1 and r.stats()["pops"] == 1
        obs_step(r, 2)
        b = r.pop(out=out, timeout=0)
        assert b is not None and b.obs[0, 0, 0] == 1 and b.next_obs[0, 0, 0] == 2
        assert seen["step"] == 1 and r.stats()["pops"] == 2


def test_several_new_steps_are_copied_as_one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counting(monkeypatch)
    with Ring(RingSpec(4, (3,), (2,), capacity=4)) as r:
        out = r.buffers(3)
        for t in range(2):
            obs_step(r, t)
        assert r.pop(out=out, timeout=0) is not None
        for t in range(2, 4):
            obs_step(r, t)
        runs = seen["run"]
        b = r.pop(out=out, timeout=0)  # two new steps: a run, not the one-step copy
        assert b is not None and b.obs[:, 0, 0].tolist() == [1, 2]
        assert seen["run"] == runs + 1 and seen["step"] == 0
        obs_step(r, 4)
        obs_step(r, 5)
        b = r.pop(out=out, timeout=0, min_steps=2)
        assert b is not None and b.obs[:, 0, 0].tolist() == [3, 4]
        assert seen["run"] == runs + 2 and seen["step"] == 0


def test_a_borrow_is_validated_when_called_and_entered_once_at_a_time() -> None:
    with Ring(RingSpec(4, (3,), (2,), capacity=3)) as r:
        with pytest.raises(RingInputError, match="max_steps=0"):
            r.borrow(max_steps=0)  # at the call, before any with
        for t in range(3):
            obs_step(r, t)
        cm = r.borrow(timeout=0)
        with cm as b:
            assert b is not None and b.obs[:, 0, 0].tolist() == [0, 1]
            with pytest.raises(RuntimeError, match="entered already"), cm:
                pass
        obs_step(r, 3)
        with cm as b:  # entered again once left: the next batch
            assert b is not None and b.obs[:, 0, 0].tolist() == [2]


def test_a_borrow_whose_body_raises_releases_its_steps() -> None:
    with Ring(RingSpec(4, (3,), (2,), capacity=2)) as r:
        for t in range(2):
            obs_step(r, t)
        with pytest.raises(KeyError), r.borrow(timeout=0) as b:
            assert b is not None
            raise KeyError("the learner failed")
        assert r.stats()["consumed"] == 1
        obs_step(r, 2)  # slot 0 is free again: this push does not block
        with r.borrow(timeout=0) as b:
            assert b is not None and b.obs[0, 0, 0] == 1 and b.next_obs[0, 0, 0] == 2


def test_the_c_semaphores_are_used_on_glibc_and_the_ctypes_ones_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with Ring(RingSpec(4, (3,), (2,), capacity=2)) as r:
        assert (r._map.mutex._c is not None) == bool(_glibc())
    monkeypatch.setattr(sync.os, "confstr", lambda name: None)  # not glibc
    with Ring(RingSpec(4, (3,), (2,), capacity=2)) as r:
        assert r._map.mutex._c is None and r._map.data_bell._c is None
        out = r.buffers(2)
        for t in range(2):
            obs_step(r, t)
        assert r.pop(out=out, timeout=0) is not None
        assert r.pop(out=out, timeout=0.02) is None  # a sliced ctypes wait that times out
        obs_step(r, 2)
        b = r.pop(out=out, timeout=0)
        assert b is not None and b.obs[0, 0, 0] == 1 and r.stats()["consumed"] == 2


def _glibc() -> str | None:
    import os

    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None


def test_a_ring_dropped_after_short_pops_leaves_no_segment() -> None:
    """The buffers keep views of the ring's mapping for their copies; they must keep
    neither their ring (which refers to the buffers while they hold a step) nor themselves
    alive past their last reference."""
    import gc
    import weakref


    before = ring_segments()
    gc.disable()  # reference counting alone, as for a ring with no buffers
    try:
        ring = Ring(RingSpec(2, (3,), (1,), capacity=2))
        out = ring.buffers(2)
        for t in range(4):
            ring.push(np.full((2, 3), t, np.float32), np.zeros((2, 1), np.float32),
                      np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool))
            if t:
                assert ring.pop(out=out, timeout=0) is not None
        assert out.src is not None and ring_segments() - before
        del ring
        assert ring_segments() == before
        gone = weakref.ref(out)
        del out  # nor may they sit in a cycle (keeping the mapping)
        assert gone() is None
    finally:
        gc.enable()


class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("run", [False, True])
def test_an_interrupt_while_freeing_leaves_the_steps_to_be_copied_again(run: bool) -> None:
    """An exception (Ctrl-C) while a pop waits for the mutex after copying one step (the
    steady state) or a run of steps: the learner that catches it and goes on gets every
    transition once."""
    import signal
    import threading
    import time

    def interrupt(*_: object) -> None:
        raise _Interrupt

    cap, first = (5, 5) if run else (3, 3)
    old = signal.signal(signal.SIGALRM, interrupt)
    got: list[tuple[float, float]] = []

    def keep(b: Any) -> None:
        got.extend(zip(b.obs[:, 0, 0].tolist(), b.next_obs[:, 0, 0].tolist(), strict=True))

    try:
        with Ring(RingSpec(1, (1,), (1,), capacity=cap)) as r:
            out = r.buffers(2 if run else 1)

            def push(t: float) -> None:
                assert r.push(np.full((1, 1), t, np.float32), np.zeros((1, 1), np.float32),
                              np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool),
                              timeout=0)

            for t in range(first):
                push(t)
            b = r.pop(out=out, timeout=0)
            assert b is not None
            keep(b)
            held = threading.Event()

            def hold() -> None:  # the mutex held a moment, as a supervisor's stats() does
                r._map.lock.__enter__()
                held.set()
                time.sleep(0.6)
                r._map.lock.__exit__()

            th = threading.Thread(target=hold)
            th.start()
            held.wait()
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(_Interrupt):
                r.pop(out=out, timeout=0)
            th.join()
            assert r.stats()["consumed"] == len(got) and out.held == 1
            for t in range(first, 8):
                push(t)
                if (b := r.pop(out=out, timeout=0)) is not None:
                    keep(b)
            r.finish(np.full((1, 1), 8, np.float32))
            while (b := r.pop(out=out, timeout=0)) is not None:
                keep(b)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert got == [(float(t), float(t + 1)) for t in range(8)]


def test_reading_a_ring_inside_its_own_open_borrow_is_refused() -> None:
    """The borrowed steps are not released yet: a second read would return them again."""
    with Ring(RingSpec(4, (3,), (2,), capacity=3)) as r:
        for t in range(3):
            obs_step(r, t)
        with r.borrow(timeout=0) as b:
            assert b is not None
            with pytest.raises(RingInputError, match=r"^borrow\(\) inside an open borrow"), \
                    r.borrow(timeout=0):
                pass
            with pytest.raises(RingInputError, match=r"^pop\(\) inside an open borrow"):
                r.pop(timeout=0)
        obs_step(r, 3)
        b2 = r.pop(timeout=0)  # after the block: the next steps, none twice
        assert b2 is not None and b2.start == b.start + b.steps


def test_push_checks_inline_only_arrays_exactly_as_declared(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact ndarrays with no env ended skip check_array; anything else (a subclass, a
    wrong dtype, an ended env) takes the general path and its messages."""
    from pytest_perfgate.ring import producer

    calls: list[str] = []
    real = producer.check_array

    def counted(name: str, *args: Any) -> Any:
        calls.append(name)
        return real(name, *args)

    monkeypatch.setattr(producer, "check_array", counted)

    class Sub(np.ndarray):
        pass

    z = np.zeros((2, 3), np.float32)
    act, rew, no = np.zeros((2, 2), np.float32), np.zeros(2, np.float32), np.zeros(2, bool)
    with Ring(RingSpec(2, (3,), (2,), capacity=4)) as r:
        r.push(z + 1, act, rew, no, no)
        assert calls == []
        r.push((z + 2).view(Sub), act, rew, no, no)
        assert calls.count("obs") == 1
        with pytest.raises(RingInputError, match=r"field 'obs' expected shape \(2, 3\) "
                                                 r"dtype float32, got shape \(2, 3\) dtype"):
            r.push(z.astype(np.float64), act, rew, no, no)
        with pytest.raises(RingInputError, match="1 env.* ended at this step but final_obs"):
            r.push(z, act, rew, np.array([True, False]), no)
        r.finish(z)
        b = r.pop(timeout=0)
        assert b is not None and b.obs[:, 0, 0].tolist() == [1.0, 2.0]

"""Every death is reported: a side that dies before its first push or pop, siblings started
by a supervisor, a child whose parent died, a supervisor waiting on a mutex the dead
producer held. Real spawn processes, generous margins (docs/ring.md "Who is reported dead").

Children are module-level functions so spawn can import them by reference.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from helpers import ring_segments

from pytest_perfgate.ring.layout import RingSpec
from pytest_perfgate.ring.shm_ring import Ring
from pytest_perfgate.ring.sync import CONSUMER, OBSERVER, PRODUCER, PeerDied

slow = pytest.mark.slow
SPEC = RingSpec(4, (3,), (2,), capacity=2)
CTX = mp.get_context("spawn")
MARGIN_S = 1.5  # detection takes one 0.1 s slice; the rest is a loaded machine's slack


def _step(t: float) -> tuple[Any, ...]:
    return (np.full((4, 3), t, np.float32), np.zeros((4, 2), np.float32),
            np.zeros(4, np.float32), np.zeros(4, bool), np.zeros(4, bool))




# ---- children ---------------------------------------------------------------------------
def crash_at_startup(ring: Ring, died_at: Any) -> None:
    died_at.value = time.monotonic()
    raise SystemExit(3)


def pop_and_report(ring: Ring, seen: Any, msg: Any) -> None:
    try:
        ring.pop(timeout=30)
        msg.put("no PeerDied")
    except PeerDied as exc:
        seen.value = time.monotonic()
        msg.put(str(exc))


def push_and_report(ring: Ring, seen: Any, msg: Any) -> None:
    try:
        for t in range(10):
            if not ring.push(*_step(t), timeout=30):
                msg.put("no PeerDied")
                return
        msg.put("never blocked")
    except PeerDied as exc:
        seen.value = time.monotonic()
        msg.put(str(exc))


def die_holding_the_mutex(ring: Ring, died_at: Any) -> None:
    ring.push(*_step(0))
    assert ring._map.mutex.wait(5.0)  # what a kill inside push's critical section leaves
    died_at.value = time.monotonic()
    os._exit(5)


def _join(*procs: Any) -> None:
    for p in procs:
        p.join(10)
        if p.exitcode is None:
            p.kill()
            p.join(5)
    assert not [p for p in procs if p.exitcode is None]


# ---- one side dies before its first operation ------------------------------------------
@slow
def test_a_producer_dead_before_its_first_push_is_reported_to_the_waiting_consumer() -> None:
    died_at = CTX.Value("d", 0.0)
    with Ring(SPEC) as ring:
        p = CTX.Process(target=crash_at_startup, args=(ring, died_at))
        p.start()
        try:
            with pytest.raises(PeerDied) as info:
                ring.pop(timeout=30)
            seen = time.monotonic()
        finally:
            _join(p)
    assert str(info.value).startswith(f"ring producer (pid {p.pid}) died before its first "
                                      "push, having attached to the ring: ")
    assert str(info.value).endswith(("exit code 3", "exited (status reaped by its parent)"))
    assert 0 < seen - died_at.value < MARGIN_S
    assert ring.name not in ring_segments()


@slow
def test_a_consumer_dead_before_its_first_pop_is_reported_to_the_blocked_producer() -> None:
    died_at = CTX.Value("d", 0.0)
    with Ring(SPEC) as ring:
        p = CTX.Process(target=crash_at_startup, args=(ring, died_at))
        p.start()
        p.join(10)  # reaped: the producer can tell only that it exited
        with pytest.raises(PeerDied) as info:
            for t in range(10):
                ring.push(*_step(t), timeout=30)
        assert time.monotonic() - died_at.value > 0
    assert str(info.value) == (f"ring consumer (pid {p.pid}) died before its first pop, "
                               "having attached to the ring: exited (status reaped by its "
                               "parent)")


# ---- siblings started by a supervisor --------------------------------------------------
@slow
@pytest.mark.parametrize("survivor", ["consumer", "producer"])
def test_a_sibling_dead_at_startup_is_reported_to_the_other_sibling(survivor: str) -> None:
    died_at, seen = CTX.Value("d", 0.0), CTX.Value("d", 0.0)
    msg = CTX.Queue()
    ring = Ring(SPEC, parties=2)  # the supervisor only watches
    target = pop_and_report if survivor == "consumer" else push_and_report
    alive = CTX.Process(target=target, args=(ring, seen, msg))
    alive.start()
    time.sleep(0.3)  # the survivor is waiting before its sibling even starts
    dead = CTX.Process(target=crash_at_startup, args=(ring, died_at))
    dead.start()
    try:
        text = msg.get(timeout=30)
    finally:
        _join(alive, dead)
        ring.close()
    other = "producer" if survivor == "consumer" else "consumer"
    first = "push" if other == "producer" else "pop"
    assert text.startswith(f"ring {other} (pid {dead.pid}) died before its first {first}, "
                           "having attached to the ring: "), text
    assert 0 < seen.value - died_at.value < MARGIN_S
    assert ring.name not in ring_segments()


# ---- a child whose parent (the ring's creator) died -----------------------------------
ORPHAN = """
import sys, time, multiprocessing as mp
sys.path.insert(0, {tests!r})
from test_ring_deaths import SPEC, orphan_consumer
from pytest_perfgate.ring.shm_ring import Ring
if __name__ == "__main__":
    ring = Ring(SPEC)
    child = mp.get_context("spawn").Process(target=orphan_consumer, args=(ring, {out!r}))
    child.start()
    while len(ring.parties()) < 2:
        time.sleep(0.01)
    print(child.pid, flush=True)
    time.sleep(120)
"""


def orphan_consumer(ring: Ring, out: str) -> None:
    try:
        ring.pop(timeout=None)  # no timeout: without the report this would hang forever
        text = "no PeerDied"
    except PeerDied as exc:
        text = str(exc)
    Path(out).write_text(f"{time.monotonic()}\n{text}")


@slow
def test_a_child_whose_parent_died_before_pushing_is_told(tmp_path: Path) -> None:
    out = tmp_path / "child.txt"
    script = tmp_path / "orphan.py"
    script.write_text(textwrap.dedent(ORPHAN.format(tests=str(Path(__file__).parent),
                                                    out=str(out))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    before = ring_segments()
    helper = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert helper.stdout is not None
        child = int(helper.stdout.readline())
    finally:
        helper.kill()
        killed = time.monotonic()
        helper.wait(10)
        if helper.stdout is not None:
            helper.stdout.close()  # not read to its end: the orphan still holds the pipe
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen, text = out.read_text().split("\n", 1)
    assert text.startswith(f"ring producer (pid {helper.pid}) died before its first push, "
                           "having attached to the ring: "), text
    assert float(seen) - killed < MARGIN_S, (float(seen) - killed, text)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    assert ring_segments() <= before


# ---- a supervisor waiting on the mutex a dead producer held ---------------------------
@slow
@pytest.mark.parametrize("call", ["stats", "ended"])
def test_a_supervisor_on_the_mutex_of_a_dead_producer_is_told(call: str) -> None:
    died_at = CTX.Value("d", 0.0)
    ring = Ring(SPEC, parties=2)
    seen_c, msg = CTX.Value("d", 0.0), CTX.Queue()
    consumer = CTX.Process(target=pop_and_report, args=(ring, seen_c, msg))
    consumer.start()
    deadline = time.monotonic() + 30
    while len(ring.parties()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # attached: else it would learn of the death while attaching
    producer = CTX.Process(target=die_holding_the_mutex, args=(ring, died_at))
    producer.start()
    try:
        deadline = time.monotonic() + 30
        while died_at.value == 0.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(PeerDied) as info:
            for _ in range(100):  # stats() succeeds until the producer dies with the mutex
                _ = ring.stats() if call == "stats" else ring.ended
                time.sleep(0.05)
        seen = time.monotonic()
        consumer_text = msg.get(timeout=30)
        pushed = ring.stats(lock=False)["pushed"]  # the lock-free read still works
    finally:
        _join(consumer, producer)
        ring.close()
    assert str(info.value).startswith(f"ring producer (pid {producer.pid}) died: ")
    assert consumer_text.startswith(f"ring producer (pid {producer.pid}) died: ")
    assert 0 < seen - died_at.value < MARGIN_S + 0.1
    assert 0 < seen_c.value - died_at.value < MARGIN_S
    assert pushed == 1
    assert ring.name not in ring_segments()


# ---- the party table -------------------------------------------------------------------
def test_roles_are_recorded_and_an_observer_is_never_reported() -> None:
    with Ring(SPEC) as ring:
        assert ring.parties() == [(os.getpid(), 0)]
        ring.push(*_step(0))
        assert ring.parties() == [(os.getpid(), PRODUCER)]
    with Ring(SPEC, parties=2) as sup:
        assert sup.parties() == [(os.getpid(), OBSERVER)]
    with Ring(SPEC) as ring:
        ring.observe()
        assert ring.parties() == [(os.getpid(), OBSERVER)]
    assert CONSUMER not in (PRODUCER, OBSERVER)


def supervise_then_exit(ring: Ring, msg: Any) -> None:
    ring.observe()
    msg.put("observing")


def consume_two(ring: Ring, msg: Any) -> None:
    try:
        b = ring.pop(timeout=30, min_steps=1)
        msg.put(f"popped {b.steps if b else 0}")
    except PeerDied as exc:
        msg.put(str(exc))


@slow
def test_an_observer_that_exits_is_not_taken_for_a_dead_side() -> None:
    msg = CTX.Queue()
    with Ring(SPEC, parties=3) as ring:
        obs = CTX.Process(target=supervise_then_exit, args=(ring, msg))
        obs.start()
        assert msg.get(timeout=30) == "observing"
        _join(obs)
        cons = CTX.Process(target=consume_two, args=(ring, msg))
        cons.start()
        time.sleep(0.5)  # the consumer waits, the observer is long gone
        ring.push(*_step(0))
        ring.push(*_step(1))
        try:
            assert msg.get(timeout=30) == "popped 1"
        finally:
            _join(cons)

"""The ring across real spawn processes: a side crashing, a killed parent, leftovers.

Children are module-level functions so spawn can import them by reference.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
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
from pytest_perfgate.ring.sync import PeerDied

slow = pytest.mark.slow
SPEC = RingSpec(4, (3,), (2,), capacity=2)
CTX = mp.get_context("spawn")


def _step(t: float) -> tuple[Any, ...]:
    return (np.full((4, 3), t, np.float32), np.zeros((4, 2), np.float32),
            np.zeros(4, np.float32), np.zeros(4, bool), np.zeros(4, bool))




# ---- children ---------------------------------------------------------------------------
def consume_then_exit(ring: Ring, steps: int, code: int, died_at: Any) -> None:
    got = 0
    while got < steps:
        b = ring.pop(max_steps=steps - got, timeout=30)
        got += b.steps if b is not None else 0
    died_at.value = time.monotonic()
    os._exit(code)


def produce_then_die(ring: Ring, steps: int, died_at: Any) -> None:
    for t in range(steps):
        ring.push(*_step(t))
    died_at.value = time.monotonic()
    os.kill(os.getpid(), signal.SIGKILL)


def consume_forever(ring: Ring) -> None:
    while ring.pop(timeout=None) is not None:
        pass


# ---- tests ------------------------------------------------------------------------------
@slow
def test_consumer_crash_fails_the_blocked_producer_within_a_second() -> None:
    died_at = CTX.Value("d", 0.0)
    with Ring(SPEC) as ring:
        p = CTX.Process(target=consume_then_exit, args=(ring, 1, 3, died_at))
        p.start()
        try:
            with pytest.raises(PeerDied) as info:
                for t in range(10_000):
                    ring.push(*_step(t))  # blocks once the dead consumer stops draining
            seen = time.monotonic()
        finally:
            p.join(10)
    assert str(info.value) == f"ring consumer (pid {p.pid}) died: exit code 3"
    assert 0 < seen - died_at.value < 1.0
    assert ring.name not in ring_segments()


@slow
def test_producer_crash_fails_the_waiting_consumer_within_a_second() -> None:
    died_at = CTX.Value("d", 0.0)
    with Ring(SPEC) as ring:
        p = CTX.Process(target=produce_then_die, args=(ring, 3, died_at))
        p.start()
        ring.watch(p)
        try:
            got = 0
            with pytest.raises(PeerDied) as info:
                while True:
                    b = ring.pop(timeout=30)
                    got += b.steps if b is not None else 0
            seen = time.monotonic()
        finally:
            p.join(10)
    assert str(info.value) == f"ring producer (pid {p.pid}) died: killed by signal 9"
    assert got == 2  # the third step had no successor: never consumable
    assert 0 < seen - died_at.value < 1.0


HELPER = """
import sys, time, multiprocessing as mp
sys.path.insert(0, {tests!r})
from test_ring_faults import SPEC, _step, consume_forever
from pytest_perfgate.ring.shm_ring import Ring
if __name__ == "__main__":
    ring = Ring(SPEC)
    child = None
    if {spawn!r}:
        child = mp.get_context("spawn").Process(target=consume_forever, args=(ring,))
        child.start()
        ring.push(*_step(0)); ring.push(*_step(1))
        while ring.stats()["consumed"] < 1:
            time.sleep(0.01)
    print(ring.name, child.pid if child else 0, flush=True)
    time.sleep(120)
"""


def _killed_parent(tmp_path: Path, spawn: bool) -> tuple[str, int]:
    script = tmp_path / "helper.py"
    script.write_text(textwrap.dedent(HELPER.format(tests=str(Path(__file__).parent),
                                                    spawn=spawn)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    helper = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert helper.stdout is not None
        name, child = helper.stdout.readline().split()
    finally:
        helper.kill()
        helper.wait(10)
        if helper.stdout is not None:  # not communicate(): the orphan may hold the pipe
            helper.stdout.close()
    return name, int(child)


@slow
def test_killed_parent_leaves_no_orphan_and_no_segment(tmp_path: Path) -> None:
    name, child = _killed_parent(tmp_path, spawn=True)
    assert name not in ring_segments()  # unlinked once the consumer had attached
    deadline = time.monotonic() + 5
    while psutil.pid_exists(child) and time.monotonic() < deadline:
        try:
            if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    alive = psutil.pid_exists(child) and psutil.Process(child).status() != "zombie"
    assert not alive, "the consumer outlived its killed producer"


@pytest.mark.timing  # a stale segment planted in /dev/shm: a ring started beside it sweeps it
@slow
def test_segment_of_a_parent_killed_before_attach_is_swept_at_next_start(
        tmp_path: Path) -> None:
    name, _ = _killed_parent(tmp_path, spawn=False)
    assert name in ring_segments()  # nobody could clean up: the creator was SIGKILLed
    with Ring(SPEC):
        assert name not in ring_segments()

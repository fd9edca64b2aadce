"""Tiny ring workloads for real spawn pairs, at module level so spawn imports them by
reference, and the check that a pair left no process behind."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil

from pytest_perfgate.ring.layout import RingSpec

SPEC = RingSpec(8, (4,), (2,), capacity=4)


def fake_collector(ring: Any, rec: Any, die_after: int = 0, sig: int = 0
                   ) -> Callable[[], int]:
    state = {"t": 0}
    z = np.zeros(8, np.float32)

    def once() -> int:
        state["t"] += 1
        if die_after and state["t"] > die_after:
            os.kill(os.getpid(), sig)
        with rec.phase("env_step"):
            obs = np.full((8, 4), state["t"], np.float32)
        with rec.phase("push"):
            ring.push(obs, np.zeros((8, 2), np.float32), z, z > 0, z > 0)
        time.sleep(0.001)
        return 8

    return once


def fake_learner(ring: Any, rec: Any, exit_after: int = 0) -> Callable[[], int]:
    state = {"n": 0}

    def once() -> int:
        with rec.phase("drain"):
            b = ring.pop(timeout=0.05)
        if b is None:
            return 0
        state["n"] += 1
        if exit_after and state["n"] > exit_after:
            os._exit(7)
        with rec.phase("update"):
            np.testing.assert_array_equal(b.next_obs[:-1], b.obs[1:])
        return b.transitions

    return once


def children() -> list[psutil.Process]:
    """Live descendants, minus multiprocessing's resource tracker (a per-parent singleton
    that spawn starts and that exits with the parent: not a side)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != "zombie" and "resource_tracker" not in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out

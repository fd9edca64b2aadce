"""The workloads of the emulated-NUMA tests: allocate and touch memory (first touch places
it), and a tiny collector/learner pair over the ring.

Imported by each spawn worker inside the QEMU guest as ``guest_workload:make``, and by the
ring pair's sides as ``guest_workload:ring_collector`` / ``guest_workload:ring_learner``.
"""

from __future__ import annotations

PAGE = 4096


def make(num_envs: int = 1, mib: int = 32, oom_victim: bool = False):
    """Allocate ``mib`` MiB and write every page, so the pages exist (on the bound node).

    ``oom_victim`` makes this process the OOM killer's first choice, so a test that fills a
    node knows which process the kernel will kill.
    """
    if oom_victim:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    size = mib << 20
    buf = bytearray(size)
    buf[::PAGE] = b"\x01" * (size // PAGE)  # one write per page: every page is faulted in
    state = {"i": 0}

    def step() -> None:
        i = state["i"] = (state["i"] + PAGE) % size
        buf[i] = (buf[i] + num_envs) & 0xFF

    step.buffer = buf  # keep it alive with the step callable
    return step


def ring_collector(ring, rec, mib: int = 8):
    """A ring-pair collector (``factory(ring, rec) -> once``): touch ``mib`` MiB after
    placement (anonymous pages on the bound node), then push one small step per call, the
    observation holding the step number so the learner can check successor slots."""
    import numpy as np

    size = mib << 20
    buf = bytearray(size)
    buf[::PAGE] = b"\x01" * (size // PAGE)
    spec = ring.spec
    n = spec.num_envs
    state = {"t": 0}
    obs = np.zeros((n, *spec.obs_shape), np.float32)
    action = np.zeros((n, *spec.action_shape), np.float32)
    reward = np.zeros(n, np.float32)
    done = np.zeros(n, bool)

    def once() -> int:
        state["t"] += 1
        with rec.phase("env_step"):
            obs.fill(state["t"])
        with rec.phase("push"):
            ring.push(obs, action, reward, done, done)
        return n

    once.buffer = buf
    return once


def ring_learner(ring, rec):
    """A ring-pair learner: drain whatever ring has data and check that every step's
    ``next_obs`` is its successor's observation, one step number on (a torn or
    misordered slot raises)."""
    import numpy as np

    def once() -> int:
        with rec.phase("drain"):
            b = ring.pop(timeout=0.05)
        if b is None:
            return 0
        with rec.phase("update"):
            if not np.array_equal(b.next_obs, b.obs + 1):
                raise AssertionError(f"steps from {b.start}: next_obs is not the successor "
                                     "step's observation")
        return b.transitions

    return once

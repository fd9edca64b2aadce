"""The workload of the emulated-NUMA test: allocate and touch memory (first touch places it).

Imported by each spawn worker inside the QEMU guest as ``guest_workload:make``.
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

"""Who else used a GPU during a window: the GPU guard's outside load (gpu/guard.py).

NVML lists the processes holding a compute context on a device at each window edge, and
(``nvmlDeviceGetProcessUtilization``) the processes whose kernels ran since a moment, which
also catches one that came and went between the edges. A listed process outside the
workload's tree spoils the window. Inside a container NVML may list host PIDs, none of
them ours: then the contexts are counted instead, less the workload's own, which are the
processes of its tree holding the GPU's device file (/dev/nvidiaN) open.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

SHOWN = 5  # pids named in a reason; more are "..."


def tree_pids() -> set[int]:
    """This process and its descendants (a worker or learner may hold the context)."""
    import psutil

    me = psutil.Process()
    pids = {me.pid}
    try:
        pids.update(c.pid for c in me.children(recursive=True))
    except psutil.Error:
        pass
    return pids


def holding(pids: Iterable[int], minor: int, proc: Path = Path("/proc")) -> int:
    """How many of ``pids`` hold /dev/nvidia``minor`` open (every process with a CUDA
    context on that GPU does); unreadable processes count as not holding it."""
    want = f"/dev/nvidia{minor}"
    n = 0
    for pid in pids:
        fd_dir = proc / str(pid) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd_dir / fd) == want:
                    n += 1
                    break
            except OSError:
                continue
    return n


def _pids(pids: list[int]) -> str:
    return ", ".join(str(p) for p in pids[:SHOWN]) + (", ..." if len(pids) > SHOWN else "")


class Tenants:
    """The other processes on one device. ``own_pids``: the workload's processes, asked
    only when NVML shows a pid other than this one; ``contexts``: how many compute
    contexts the workload holds there when that cannot be read from /proc."""

    def __init__(self, label: str, own_pids: Callable[[], set[int]] = tree_pids,
                 contexts: int = 1, minor: int | None = None, proc: Path = Path("/proc")
                 ) -> None:
        self.label = label
        self._own_pids = own_pids
        self._contexts = contexts
        self.minor = minor
        self.proc = proc

    def contexts(self, own: set[int]) -> int:
        """The workload's own compute contexts on the device."""
        held = holding(own, self.minor, self.proc) if self.minor is not None else 0
        return held or self._contexts

    def others(self, listed: set[int], busy: Mapping[int, int] | None) -> str | None:
        """Why the window is spoiled by another process, or None. ``listed``: the pids
        NVML showed at either edge; ``busy``: pid -> SM % of the processes that used the
        device between the edges (None: NVML would not say)."""
        used = dict(busy or {})
        seen = listed | set(used)
        if not seen or seen == {os.getpid()}:
            return None
        own = self._own_pids()
        if seen & own:
            held = sorted(listed - own)
            ran = sorted(set(used) - own - listed)
            reasons = []
            if held:
                reasons.append(f"another process on {self.label}: pid {held[0]}"
                               if len(held) == 1 else
                               f"{len(held)} other processes on {self.label}: pids "
                               f"{_pids(held)}")
            if ran:
                shown = ", ".join(f"{p} (SM {used[p]}%)" for p in ran[:SHOWN])
                reasons.append(f"another process used {self.label} between the window's "
                               f"edges: pid {shown}" + (", ..." if len(ran) > SHOWN else ""))
            return "; ".join(reasons) or None
        extra = len(seen) - self.contexts(own)  # no pid of ours: count the contexts
        if extra <= 0:
            return None
        return (f"{extra} other compute context(s) on {self.label} (NVML lists {len(seen)} "
                f"processes, none with a pid of this workload: another PID namespace)")

"""Threads a measured process leaves unpinned: torch or a BLAS running more threads than the
CPUs the process may use.

A pool larger than its CPU budget makes its threads wait for each other and for the
process's other work: torch's default intra-op pool made an SB3 SAC ``predict`` 55x slower
on a busy two-core machine (15 ms against 0.27 ms with one thread), and the measurement
becomes a measurement of the scheduler. The probe reads only what the process already
loaded: torch when something imported it (``sys.modules``; it is never imported here), a
BLAS through threadpoolctl when that is installed (else the BLAS is not checked). What it
finds is kept in the benchmark's record (``extra.unpinned_threads``); the plugin warns once
per session, naming the setting that pins it. Each process a workload starts (a worker, a
ring pair's side) checks itself once built and says so in its ready reply: its pools are
the ones that run the step.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KEY = "unpinned_threads"  # the record's extra key


@dataclass(frozen=True)
class Budget:
    """The CPUs a process may use: its affinity mask, or a tighter cgroup CPU quota."""

    cpus: float
    why: str  # how the figure came about, for the message

    @property
    def threads(self) -> int:
        """The most threads a pool should run within it."""
        return max(1, math.floor(self.cpus))


def cpu_budget(usable: Sequence[int] | None = None, quota: float | None = None,
               read_quota: bool = True) -> Budget:
    """This process's budget (``usable``, ``quota``: given instead of read, for tests)."""
    from pytest_perfgate.placement.cgroup import cgroup_cpu_quota
    from pytest_perfgate.placement.cpus import format_cpus, usable_cpus

    cpus = tuple(usable) if usable is not None else usable_cpus()
    if quota is None and read_quota:
        quota = cgroup_cpu_quota()
    if quota is not None and quota < len(cpus):
        return Budget(quota, f"the cgroup's CPU quota of {quota:g} cores")
    return Budget(float(len(cpus)), f"the CPUs this process may run on: "
                  f"{format_cpus(cpus)}")


def unpinned(budget: Budget | None = None, process: str | None = None
             ) -> list[dict[str, Any]]:
    """Each loaded thread pool larger than ``budget`` (default: this process's), as the
    record keeps it: what it is, its threads, the budget and the setting that pins it;
    ``process`` names a process the workload started (a worker, a pair's side)."""
    found = [*_torch(), *_blas()]
    if not found:
        return []
    budget = budget or cpu_budget()
    named = {"process": process} if process else {}
    return [{**f, **named, "budget": budget.cpus, "budget_is": budget.why,
             "setting": f["setting"].format(n=budget.threads)}
            for f in found if f["threads"] > budget.cpus]


def in_processes(meta: Any) -> list[dict[str, Any]]:
    """What the processes a source started found about themselves, wherever its metadata
    keeps their placements (a worker group's ``workers``, a ring pair's sides): each
    placement entry that carries a finding, at any depth."""
    if isinstance(meta, Mapping):
        own = meta.get(KEY)
        out = [dict(f) for f in own if isinstance(f, Mapping)] if isinstance(own, list) else []
        return out + [f for k, v in meta.items() if k != KEY for f in in_processes(v)]
    if isinstance(meta, list | tuple):
        return [f for v in meta for f in in_processes(v)]
    return []


def _torch() -> list[dict[str, Any]]:
    torch = sys.modules.get("torch")
    try:
        n = int(torch.get_num_threads()) if torch is not None else 0
    except Exception:  # a half-imported or stand-in module: nothing to read
        return []
    if n <= 0:
        return []
    return [{"library": "torch", "threads": n, "pool": "intra-op",
             "setting": "torch.set_num_threads({n}) in the test, or OMP_NUM_THREADS={n} "
                        "before torch loads"}]


def _blas() -> list[dict[str, Any]]:
    try:
        import threadpoolctl  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return []
    try:
        pools = threadpoolctl.threadpool_info()
    except Exception:  # threadpoolctl's own trouble reading a library: nothing to say
        return []
    out = []
    for p in pools:
        if p.get("user_api") != "blas" or not isinstance(p.get("num_threads"), int):
            continue
        path = str(p.get("filepath") or "")
        out.append({"library": f"{p.get('internal_api')} ({path.rsplit('/', 1)[-1]})",
                    "threads": p["num_threads"], "pool": "BLAS",
                    "setting": "OMP_NUM_THREADS={n} before numpy loads, or "
                               "threadpoolctl.threadpool_limits({n}) in the test"})
    return out


def describe(found: Mapping[str, Any]) -> str:
    """One finding as the warning says it."""
    where = f"in the {found['process']} process, " if found.get("process") else ""
    return (f"{where}{found['library']} runs {found['threads']} {found['pool']} threads on a CPU "
            f"budget of {found['budget']:g} ({found['budget_is']}): they contend for the "
            f"cores, which makes the step slower and noisier than pinned; pin them: "
            f"{found['setting']}")

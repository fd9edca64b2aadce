"""Plans and launchers behind the ``pinned_workers`` and ``numa_workers`` fixtures.

Plain classes, usable from the asv suite or a script: each ``start()`` turns a user request
into :class:`~pytest_perfgate.placement.spec.WorkerSpec` s, starts a WorkerGroup and
remembers it, so ``close()`` (the fixture's teardown) stops every group even when the test failed.
Explicit requests (a core spec, a node list) are strict: unhonoured placement is an error.
Automatic plans only warn.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

from pytest_perfgate.placement import cpus as _cpus
from pytest_perfgate.placement import numa as _numa
from pytest_perfgate.placement.spec import WorkerSpec
from pytest_perfgate.placement.workers import DEFAULT_TIMEOUTS, Timeouts, WorkerGroup


def split_slices(cpus: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """n contiguous, near-equal slices of ``cpus`` (the first ones one larger)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}: pass a positive number of workers")
    if n > len(cpus):
        raise ValueError(f"n={n} workers cannot each get their own CPU out of "
                         f"{_cpus.format_cpus(cpus)} ({len(cpus)} CPUs): use n <= {len(cpus)} "
                         "or cpus=None to run unpinned")
    q, r = divmod(len(cpus), n)
    out, i = [], 0
    for k in range(n):
        size = q + (k < r)
        out.append(tuple(cpus[i:i + size]))
        i += size
    return out


def numa_split(total_batch: int, nodes: Sequence[int]) -> list[int]:
    """Split a total batch evenly over one worker per node; indivisible is an error."""
    n = len(nodes)
    if isinstance(total_batch, bool) or not isinstance(total_batch, int) or total_batch < 1:
        raise ValueError(f"total batch {total_batch!r}: pass a positive int")
    if n < 1:
        raise ValueError("numa_split needs at least one node")
    if total_batch % n:
        lo = total_batch - total_batch % n
        raise ValueError(f"total batch size {total_batch} is not divisible by {n} workers "
                         f"(one per NUMA node {_cpus.format_cpus(nodes)}): use a multiple of "
                         f"{n}, e.g. {lo or n} or {lo + n}")
    return [total_batch // n] * n


class _Launcher:
    def __init__(self, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        self.timeouts = timeouts
        self.groups: list[WorkerGroup] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every group this launcher started (bounded, never raises)."""
        while self.groups:
            self.groups.pop().close()

    def _launch(self, specs: list[WorkerSpec]) -> WorkerGroup:
        group = WorkerGroup(specs, self.timeouts)
        self.groups.append(group)
        group.start()
        return group


class PinnedWorkers(_Launcher):
    """``start(factory, n=2, cpus="0:5,7")``: n spawn workers, each on its own CPU slice."""

    def start(self, factory: str | Callable[..., Callable[[], object]], *, n: int = 1,
              cpus: Any = "auto", threads: int | str | None = None, transitions: int = 1,
              kwargs: Mapping[str, Any] | None = None) -> WorkerGroup:
        """``cpus``: "auto" (split the usable CPUs, warn if placement fails), None (unpinned),
        one core spec split into n slices, or a list of n specs (one per worker)."""
        usable = _cpus.usable_cpus()
        strict = cpus != "auto"
        if cpus == "auto":
            slices: list[tuple[int, ...] | None] = list(split_slices(usable, n)) \
                if n <= len(usable) else [None] * n
        elif cpus is None:
            slices = [None] * n
        elif isinstance(cpus, (list, tuple)) and any(not isinstance(c, int) or
                                                     isinstance(c, bool) for c in cpus):
            if len(cpus) != n:
                raise ValueError(f"cpus lists {len(cpus)} per-worker specs but n={n}: give "
                                 "one spec per worker")
            slices = [_cpus.parse_cpus(c, usable) for c in cpus]
        else:
            parsed = _cpus.parse_cpus(cpus, usable)
            assert parsed is not None
            slices = list(split_slices(parsed, n))
        specs = [WorkerSpec(factory, s, None, "bind",
                            _cpus.resolve_threads(threads, s) if s else _int_or_none(threads),
                            transitions, dict(kwargs or {}), strict) for s in slices]
        return self._launch(specs)


class NumaWorkers(_Launcher):
    """``start(factory, total_batch=4096)``: one worker per usable NUMA node, batch split."""

    def __init__(self, timeouts: Timeouts = DEFAULT_TIMEOUTS, sysfs_root: str = "/sys",
                 proc_root: str = "/proc") -> None:
        super().__init__(timeouts)
        self.sysfs_root, self.proc_root = sysfs_root, proc_root

    def plan(self, total_batch: int, nodes: Sequence[int] | None = None
             ) -> list[tuple[int | None, tuple[int, ...], int]]:
        """(node, cpus, batch share) per worker; no usable node gives one unbound worker."""
        usable = _cpus.usable_cpus()
        topo = _numa.discover(self.sysfs_root, self.proc_root)
        ok = {n.id: n for n in topo.usable_nodes(usable)}
        if nodes is not None:
            bad = [n for n in nodes if n not in ok]
            if bad or not nodes:
                raise ValueError(
                    f"NUMA node(s) {list(bad) or list(nodes)} are not usable (a usable node has "
                    f"memory, is in Mems_allowed and owns one of our CPUs); usable nodes: "
                    f"{sorted(ok) or 'none'}\n" + "\n".join(topo.describe()))
            chosen = [ok[n] for n in nodes]
        else:
            chosen = list(ok.values())
        if not chosen:
            warnings.warn(_cpus.PlacementWarning(
                "no usable NUMA node found (no /sys/devices/system/node?): running one "
                "worker without memory binding"), stacklevel=3)
            return [(None, tuple(usable), total_batch)]
        shares = numa_split(total_batch, [n.id for n in chosen])
        return [(n.id, tuple(c for c in n.cpus if c in set(usable)), share)
                for n, share in zip(chosen, shares, strict=True)]

    def start(self, factory: str | Callable[..., Callable[[], object]], *, total_batch: int,
              batch_kwarg: str = "num_envs", nodes: Sequence[int] | None = None,
              mempolicy: str = "bind", threads: int | str | None = None,
              kwargs: Mapping[str, Any] | None = None) -> WorkerGroup:
        """Each worker gets ``factory(**kwargs, <batch_kwarg>=share)`` and counts ``share``
        transitions per step; ``nodes`` makes the placement explicit (and strict)."""
        specs = []
        for node, cpus, share in self.plan(total_batch, nodes):
            kw = {**(kwargs or {}), batch_kwarg: share}
            specs.append(WorkerSpec(factory, cpus, node, mempolicy,
                                    _cpus.resolve_threads(threads, cpus, self.sysfs_root),
                                    share, kw, strict=nodes is not None))
        return self._launch(specs)


def _int_or_none(threads: int | str | None) -> int | None:
    if threads is None or isinstance(threads, str):
        return None  # "physical"/"logical" mean nothing without a CPU slice
    return _cpus.resolve_threads(threads, ())

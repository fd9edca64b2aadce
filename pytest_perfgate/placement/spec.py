"""What a worker is asked to run and where, and what it reports back about its placement.

Plain data: a :class:`WorkerSpec` travels pickled to the spawn child, a :class:`Placement`
comes back in its ready reply. The group that moves them is
:mod:`pytest_perfgate.placement.workers`; placement itself is docs/design.md §4.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_perfgate.placement import cpus as _cpus


@dataclass(frozen=True)
class WorkerSpec:
    """One worker: what to run and where. Picklable; it travels to a spawn child.

    ``factory`` is "module:callable" (imported in the child, after placement) or a picklable
    callable; ``factory(**kwargs)`` returns ``step()``, each call advancing ``transitions``
    env-steps. ``strict`` makes a placement that cannot be honoured an error, not a warning.
    """

    factory: str | Callable[..., Callable[[], object]]
    cpus: tuple[int, ...] | None = None
    node: int | None = None
    mempolicy: str = "bind"
    threads: int | None = None  # thread cap; default: len(cpus), else unset
    transitions: int = 1
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    strict: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.factory, str):
            mod, _, attr = self.factory.partition(":")
            if not mod or not attr:
                raise ValueError(f"factory={self.factory!r}: use 'package.module:callable'")
        elif not callable(self.factory):
            raise TypeError(f"factory={self.factory!r} is neither 'module:callable' nor "
                            "callable")
        if isinstance(self.transitions, bool) or not isinstance(self.transitions, int) \
                or self.transitions < 1:
            raise ValueError(f"transitions={self.transitions!r}: pass the env-steps one "
                             "step() call advances, a positive int (e.g. num_envs)")
        if self.cpus is not None:
            object.__setattr__(self, "cpus", tuple(self.cpus))
        if self.mempolicy not in ("bind", "preferred", "interleave"):
            raise ValueError(f"mempolicy={self.mempolicy!r}: use 'bind', 'preferred' or "
                             "'interleave'")

    @property
    def thread_cap(self) -> int | None:
        return self.threads or (len(self.cpus) if self.cpus else None)


@dataclass(frozen=True)
class Placement:
    """Requested vs actual placement of one worker, as the worker read it back."""

    index: int
    pid: int
    requested_cpus: tuple[int, ...] | None
    actual_cpus: tuple[int, ...]
    pinned: bool  # affinity read back equal to the request
    node: int | None
    mempolicy: str | None  # the policy read back, e.g. "bind:1"
    membound: bool | None  # None: no node requested
    threads: int | None
    proof: Mapping[str, Any] | None = None  # /proc/self/numa_maps summary
    # What the worker could not set up about itself (e.g. dying with its parent).
    warnings: tuple[str, ...] = ()
    # thread pools larger than the worker's CPUs (placement/unpinned.py), as it found them
    unpinned_threads: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "warnings", tuple(self.warnings))  # lists off the pipe
        object.__setattr__(self, "unpinned_threads", tuple(self.unpinned_threads))

    @property
    def verified(self) -> bool:
        return (self.requested_cpus is None or self.pinned) and self.membound is not False

    def as_dict(self) -> dict[str, Any]:
        return {"worker": self.index, "pid": self.pid,
                "requested_cpus": None if self.requested_cpus is None
                else _cpus.format_cpus(self.requested_cpus),
                "actual_cpus": _cpus.format_cpus(self.actual_cpus), "pinned": self.pinned,
                "node": self.node, "mempolicy": self.mempolicy, "membound": self.membound,
                "threads": self.threads, "verified": self.verified,
                "numa_maps": dict(self.proof) if self.proof else None,
                **({"unpinned_threads": [dict(f) for f in self.unpinned_threads]}
                   if self.unpinned_threads else {})}


def placement_line(w: Mapping[str, Any]) -> str:
    """One worker's placement line, from :meth:`Placement.as_dict` (the form a result's
    metadata stores), so the live group and the run report render it the same way."""
    req = w.get("requested_cpus") or "unpinned"
    node = "-" if w.get("node") is None else w["node"]
    return (f"worker {w.get('worker')} pid {w.get('pid')}: cpus {req} -> "
            f"{w.get('actual_cpus')}, node {node}, mempolicy {w.get('mempolicy') or '-'}, "
            f"threads {w.get('threads') or '-'}: "
            + ("verified" if w.get("verified") else "NOT verified"))


def render_placement(placements: Sequence[Placement], notes: Sequence[str] = ()) -> list[str]:
    """Terminal lines: one per worker, then the placement warnings."""
    return [placement_line(p.as_dict()) for p in placements] + [f"warning: {n}" for n in notes]


def placement_notes(specs: Sequence[WorkerSpec], usable: Sequence[int],
                    quota: float | None) -> list[str]:
    """Warnings about a plan: unpinned workers, oversubscription, a cgroup CPU quota."""
    notes = []
    unpinned = [i for i, s in enumerate(specs) if s.cpus is None]
    if unpinned:
        notes.append(f"worker(s) {_cpus.format_cpus(unpinned)} unpinned: the scheduler may "
                     "move them between cores mid-window; pass cpus= to pin")
    want = sum(s.thread_cap or 1 for s in specs)
    if want > len(usable):
        notes.append(f"{len(specs)} worker(s) want {want} threads but only {len(usable)} CPUs "
                     f"({_cpus.format_cpus(usable)}) are usable: oversubscribed; use fewer "
                     "workers or threads")
    if quota is not None and quota < len(usable):
        notes.append(f"cgroup CPU quota is {quota:g} cores but {len(usable)} CPUs are "
                     "usable: throughput is capped by the quota, not the CPU count")
    return notes


def worker_warnings(placements: Sequence[Placement]) -> list[str]:
    """What workers could not set up about themselves, one note per problem."""
    return [f"worker {p.index}: {w}" for p in placements for w in p.warnings]


def placement_failure(p: Placement) -> str | None:
    """Why an explicit request was not honoured (an error when strict), or None."""
    if p.requested_cpus is not None and not p.pinned:
        return (f"requested CPUs {_cpus.format_cpus(p.requested_cpus)} but runs on "
                f"{_cpus.format_cpus(p.actual_cpus)}")
    if p.membound is False:
        return (f"requested memory policy on node {p.node} but the policy is "
                f"{p.mempolicy or 'unknown'}")
    return None

"""How many threads a MuJoCo pool runs and where: the sizing rule and its checks.

Kept apart from :mod:`.pool` because it needs neither mujoco nor numpy: the sweep and the
fixtures plan threads before anything heavy is imported (docs/design.md §7).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass


class OversubscriptionWarning(UserWarning):
    """More pool threads than CPUs to run them: it works, but costs 11-16% on Linux hosts."""


@dataclass(frozen=True)
class ThreadPlan:
    """How many threads a pool runs and where: the sizing rule's answer, with its reason."""

    nthread: int
    cpu_ids: tuple[int, ...] | None  # pinned set, or None for "wherever the OS puts them"
    usable: tuple[int, ...]
    reason: str

    @property
    def oversubscribed(self) -> bool:
        return self.nthread > len(self.cpu_ids if self.cpu_ids is not None else self.usable)


def positive_int(name: str, value: object, fix: str) -> int:
    """``value`` if it is an int >= 1 (not a bool), else ValueError "<name>=<value>: <fix>"."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r}: {fix}")
    return value


def _strict_cpus(cpu_ids: object, usable: tuple[int, ...]) -> tuple[int, ...]:
    """cpu_ids resolved against the usable set; any CPU outside it is an error, not a drop."""
    from pytest_perfgate.placement import cpus

    where = f"the usable CPUs are {cpus.format_cpus(usable)} (this process's affinity mask)"
    if isinstance(cpu_ids, str):
        with warnings.catch_warnings():
            warnings.simplefilter("error", cpus.PlacementWarning)
            try:
                chosen = cpus.parse_cpus(cpu_ids, usable)
            except (cpus.PlacementWarning, cpus.CpuSpecError) as exc:
                raise ValueError(f"cpu_ids={cpu_ids!r}: {exc}; {where}") from None
        assert chosen is not None
        return chosen
    if isinstance(cpu_ids, int) and not isinstance(cpu_ids, bool):
        cpu_ids = (cpu_ids,)
    if not isinstance(cpu_ids, (list, tuple, range, set, frozenset)) or not cpu_ids or any(
            isinstance(c, bool) or not isinstance(c, int) for c in cpu_ids):
        raise ValueError(f"cpu_ids={cpu_ids!r}: pass a non-empty list of CPU ids, a core spec "
                         f"such as '0:3,7', or None for no pinning; {where}")
    outside = sorted(set(cpu_ids) - set(usable))
    if outside:
        raise ValueError(f"cpu_ids={cpu_ids!r}: CPUs {cpus.format_cpus(outside)} are outside "
                         f"the usable set; {where}")
    return tuple(sorted(set(cpu_ids)))


def plan_threads(num_envs: int, cpu_ids: object = None,
                 threads: int | str | None = None) -> ThreadPlan:
    """The sizing rule (docs/design.md §7): the gain comes from the thread count, not pinning.

    explicit cpu_ids -> len(cpu_ids), pinned there; otherwise min(num_envs, usable CPUs);
    threads="physical" -> physical cores of that set; an int overrides (warns if it
    oversubscribes). Never more threads than simulations unless asked explicitly.
    """
    from pytest_perfgate.placement import cpus

    num_envs = positive_int("num_envs", num_envs,
                             "pass the number of simulations, a positive int (e.g. 1024)")
    usable = cpus.usable_cpus()
    pinned = None if cpu_ids is None else _strict_cpus(cpu_ids, usable)
    base = pinned if pinned is not None else usable
    where = f"{len(base)} {'pinned' if pinned is not None else 'usable'} CPUs"
    if threads is None or threads == "logical":
        n, reason = min(num_envs, len(base)), f"min(num_envs={num_envs}, {where})"
    elif threads == "physical":
        phys = len(cpus.physical_cpus(base))
        n, reason = min(num_envs, phys), f"min(num_envs={num_envs}, {phys} physical cores)"
    else:
        n = positive_int("threads", threads,
                          "use a positive int, None (one per usable CPU) or 'physical'")
        reason = f"threads={n} requested"
    plan = ThreadPlan(n, pinned, usable, reason)
    if plan.oversubscribed:
        warnings.warn(OversubscriptionWarning(
            f"threads={n} oversubscribes {where} (measured cost 11-16% on Linux hosts); "
            "pass threads=None to size to the CPUs"), stacklevel=3)
    return plan


def thread_ids() -> set[int]:
    """Thread ids of this process (Linux); empty elsewhere, where we cannot see them."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()

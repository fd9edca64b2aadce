"""Our cgroup: where it sits in each hierarchy, and the CPU quota along its ancestry.

A cgroup CPU quota (cpu.max, or cpu.cfs_quota_us on v1) never shows up in the affinity mask,
so a 2-CPU quota on a 64-CPU box is visible only here (docs/design.md §4). Roots are
parameters so tests build fake trees; every reading degrades to None, never raises.
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_perfgate.placement.cpus import read_int


def _quota_v2(path: Path) -> float | None:
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return int(quota) / int(period) if int(period) > 0 else None
    except ValueError:
        return None


def _quota_v1(dirpath: Path) -> float | None:
    q, p = read_int(dirpath / "cpu.cfs_quota_us"), read_int(dirpath / "cpu.cfs_period_us")
    if q is None or p is None or q <= 0 or p <= 0:
        return None  # -1 means unlimited
    return q / p


def own_cgroup(proc_cgroup: Path, controller: str = "cpu") -> tuple[str | None, str | None]:
    """(v2 path, v1 path of ``controller``) of our cgroup, from /proc/self/cgroup."""
    v2 = v1 = None
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif controller in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def cgroup_cpu_quota(root: str | os.PathLike[str] = "/sys/fs/cgroup",
                     proc_cgroup: str | os.PathLike[str] = "/proc/self/cgroup") -> float | None:
    """The tightest cgroup CPU quota in cores along our cgroup's ancestry, or None.

    The quota (cpu.max, or cpu.cfs_quota_us on v1) is invisible in the affinity mask, so it
    is read only to warn that fewer cores than CPUs are really available.
    """
    root = Path(root)
    v2, v1 = own_cgroup(Path(proc_cgroup))
    found: list[float] = []
    candidates: list[tuple[Path, bool]] = []
    if v2 is not None:
        candidates.append((root, True))
    for sub in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (root / sub).is_dir():
            candidates.append((root / sub, False))
    for base, is_v2 in candidates:
        rel = (v2 if is_v2 else v1) or "/"
        d = base / rel.lstrip("/")
        # Walk up to the hierarchy root: a parent's limit binds its children too. Inside a
        # container the namespace root is the container's own cgroup.
        while True:
            q = _quota_v2(d / "cpu.max") if is_v2 else _quota_v1(d)
            if q is not None:
                found.append(q)
            if d == base or base not in d.parents:
                break
            d = d.parent
    return min(found) if found else None

"""CPU sets: the core-spec grammar, usable CPUs, physical cores, pinning and thread caps.

Pure parsing plus thin OS probes (after pyperf's ``_cpu_utils``). Probes return booleans or
None instead of raising for "unsupported"; the caller decides severity (an explicit request
that cannot be honoured is an error, an automatic placement only warns).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

CpuSpec = str | int | Sequence[int] | None

GRAMMAR = ('core spec grammar: ITEM[,ITEM...] where ITEM is N, N-M or N:M (inclusive, N <= M, '
           'ASCII digits, whitespace allowed), e.g. "0:5,7"; or an int, or a list of ints; '
           'None disables pinning')

# Env vars read by OpenMP, MKL, OpenBLAS, BLIS, numexpr and Accelerate when they *load*; so
# they must be set before the worker imports numpy/torch.
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                   "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")

_ITEM = re.compile(r"([0-9]+)(?:\s*([-:])\s*([0-9]+))?", re.ASCII)
_LIST_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+))?", re.ASCII)
# Ids at or beyond this in a kernel list are corruption, not CPUs or nodes: a list is never
# enumerated past it (docs/design.md §4).
MAX_CPU_ID = 1 << 16


class CpuSpecError(ValueError):
    """A malformed or unsatisfiable core spec; the message names the bad token."""


class PlacementWarning(UserWarning):
    """Placement was degraded (cores dropped, pinning or memory binding not applied)."""


def _bad(spec: object, token: object, why: str) -> CpuSpecError:
    return CpuSpecError(f"invalid core spec {spec!r}: {why} (bad token {token!r}); {GRAMMAR}")


def _intervals(spec: CpuSpec) -> list[tuple[int, int]]:
    """The spec as inclusive (lo, hi) intervals, validated but never enumerated."""
    if isinstance(spec, bool):
        raise _bad(spec, spec, "a bool is not a core number")
    if isinstance(spec, int):
        if spec < 0:
            raise _bad(spec, spec, "core numbers are >= 0")
        return [(spec, spec)]
    if isinstance(spec, str):
        if not spec.strip():
            raise _bad(spec, spec, "empty spec; use None to disable pinning")
        out = []
        for raw in spec.split(","):
            token = raw.strip()
            m = _ITEM.fullmatch(token)
            if m is None:
                why = "empty item" if not token else "not N, N-M or N:M"
                raise _bad(spec, token, why)
            lo = int(m.group(1))
            hi = int(m.group(3)) if m.group(3) is not None else lo
            if hi < lo:
                raise _bad(spec, token, f"range end {hi} is below its start {lo}")
            out.append((lo, hi))
        return out
    if isinstance(spec, (list, tuple, set, frozenset, range)):
        if not spec:
            raise _bad(spec, spec, "empty list; use None to disable pinning")
        out = []
        for item in spec:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise _bad(spec, item, "list items must be ints >= 0")
            out.append((item, item))
        return out
    raise _bad(spec, spec, f"unsupported type {type(spec).__name__}")


def parse_cpulist(text: str) -> tuple[int, ...]:
    """A kernel cpulist or nodelist ("0-3,8"; "" for none) as sorted ids.

    ValueError on anything else, including ids >= :data:`MAX_CPU_ID`. This is the kernel's
    own format (sysfs, /proc/self/status), not the user-facing core spec of :func:`parse_cpus`.
    """
    text = text.strip()
    if not text:
        return ()
    out: set[int] = set()
    for item in text.split(","):
        m = _LIST_ITEM.fullmatch(item.strip())
        if m is None:
            raise ValueError(f"bad item {item!r}")
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        if hi < lo or hi >= MAX_CPU_ID:
            raise ValueError(f"bad range {item!r}")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def format_cpus(cpus: Iterable[int]) -> str:
    """Compact form for messages and reports: (0, 1, 2, 5) -> "0-2,5"."""
    return _format_intervals([(c, c) for c in sorted(set(cpus))])


def _format_intervals(ivs: list[tuple[int, int]]) -> str:
    merged: list[list[int]] = []
    for lo, hi in sorted(ivs):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in merged) or "(none)"


def _subtract(ivs: list[tuple[int, int]], points: Iterable[int]) -> list[tuple[int, int]]:
    """Intervals minus a finite set of points, without enumerating the intervals."""
    pts = sorted(set(points))
    out: list[tuple[int, int]] = []
    for lo, hi in ivs:
        cur = lo
        for p in pts:
            if p < cur or p > hi:
                continue
            if p > cur:
                out.append((cur, p - 1))
            cur = p + 1
        if cur <= hi:
            out.append((cur, hi))
    return out


def parse_cpus(spec: CpuSpec, usable: Iterable[int] | None = None) -> tuple[int, ...] | None:
    """Resolve a core spec against the usable CPUs; None means "do not pin".

    Cores outside ``usable`` are dropped with a :class:`PlacementWarning` naming them; a spec
    with no usable core at all is an error (the request cannot be honoured).
    """
    if spec is None:
        return None
    ivs = _intervals(spec)
    pool = sorted(set(usable_cpus() if usable is None else usable))
    # Cost is O(len(usable) x len(items)): a range is compared, never expanded.
    chosen = tuple(c for c in pool if any(lo <= c <= hi for lo, hi in ivs))
    dropped = _subtract(ivs, chosen)
    if not chosen:
        raise CpuSpecError(f"core spec {spec!r} selects no usable CPU (usable: "
                           f"{format_cpus(pool)}); pick cores from that set or pass None "
                           "to disable pinning")
    if dropped:
        warnings.warn(PlacementWarning(
            f"core spec {spec!r}: dropped CPUs {_format_intervals(dropped)} outside the usable "
            f"set {format_cpus(pool)}; pinning to {format_cpus(chosen)}"), stacklevel=2)
    return chosen


def usable_cpus() -> tuple[int, ...]:
    """CPUs this process may run on: its affinity mask (honours taskset and cpusets).

    Falls back to range(os.cpu_count()) where sched_getaffinity does not exist (macOS).
    """
    getaff = getattr(os, "sched_getaffinity", None)
    if getaff is not None:
        try:
            return tuple(sorted(getaff(0)))
        except OSError:
            pass
    return tuple(range(os.cpu_count() or 1))


def read_int(path: Path) -> int | None:
    """The integer in a sysfs/cgroup file, or None when missing or not an integer."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def physical_cpus(cpus: Iterable[int], sysfs_root: str | os.PathLike[str] = "/sys"
                  ) -> tuple[int, ...]:
    """One logical CPU (the lowest) per unique (package, core) pair among ``cpus``.

    A CPU whose topology files are missing counts as its own core, so the answer degrades
    to "all logical CPUs" rather than to an undercount.
    """
    base = Path(sysfs_root) / "devices/system/cpu"
    seen: dict[tuple[object, ...], int] = {}
    for c in sorted(set(cpus)):
        topo = base / f"cpu{c}" / "topology"
        pkg, core = read_int(topo / "physical_package_id"), read_int(topo / "core_id")
        key: tuple[object, ...] = ((pkg, core) if pkg is not None and core is not None
                                   else ("cpu", c))
        seen.setdefault(key, c)
    return tuple(sorted(seen.values()))


def resolve_threads(policy: int | str | None, cpus: Sequence[int],
                    sysfs_root: str | os.PathLike[str] = "/sys") -> int:
    """Thread count for a CPU slice: None/"logical" -> len(cpus), "physical" -> cores, int."""
    if policy is None or policy == "logical":
        return max(1, len(cpus))
    if policy == "physical":
        return max(1, len(physical_cpus(cpus, sysfs_root)))
    if isinstance(policy, int) and not isinstance(policy, bool) and policy >= 1:
        return policy
    raise ValueError(f"threads={policy!r}: use a positive int, 'logical' or 'physical'")


def set_affinity(cpus: Iterable[int], pid: int = 0) -> bool:
    """Pin ``pid`` (0 = calling thread) to exactly ``cpus``; True only if read back equal.

    Never raises for "unsupported" (no sched_setaffinity, cpuset refusal): returns False.
    """
    want = set(cpus)
    setaff = getattr(os, "sched_setaffinity", None)
    getaff = getattr(os, "sched_getaffinity", None)
    if setaff is None or getaff is None or not want:
        return False
    # An id near 2**30 makes CPython allocate a 128 MB mask: refuse absurd ids up front.
    limit = max(os.cpu_count() or 1, 1) * 4 + 1024
    if any(c < 0 or c >= limit for c in want):
        return False
    try:
        setaff(pid, want)
        return set(getaff(pid)) == want
    except OSError:
        return False


def cap_threads_env(n: int) -> dict[str, str]:
    """Env vars that cap BLAS/OpenMP pools at ``n`` threads; apply before importing them."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"thread cap {n!r}: pass a positive int (the slice size)")
    return {k: str(n) for k in THREAD_ENV_VARS}

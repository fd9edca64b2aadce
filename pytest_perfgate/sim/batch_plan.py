"""What a batch sweep will run, checked before anything starts: sizes, worker splits, memory.

A sweep holds every configuration at once (they are interleaved), so its memory is the sum
over all of them; one that does not fit must be refused before an hour of set-up ends in
the OOM killer. Needs neither mujoco nor numpy: the command line checks its arguments
first (docs/design.md §7).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MAX_DOUBLINGS = 40  # "1..2**40" is already far past any machine's memory


class PlanError(ValueError):
    """A sweep that cannot run as asked; the message names the value and the fix."""


@dataclass(frozen=True)
class BatchConfig:
    """One configuration: ``num_envs`` in one in-process pool (workers=0), or split evenly
    over ``workers`` spawn workers pinned to their own CPUs."""

    num_envs: int
    workers: int = 0

    @property
    def envs_per_worker(self) -> int:
        return self.num_envs // self.workers if self.workers else self.num_envs

    @property
    def label(self) -> str:
        if not self.workers:
            return f"{self.num_envs} pool"
        return f"{self.num_envs} {self.workers}w x {self.envs_per_worker}"


def parse_envs(text: str) -> tuple[int, ...]:
    """'1024' -> (1024,); '256,1024' as given; '256..8192' -> 256, 512, ..., 8192 (doubling,
    the end always included)."""
    raw = str(text).strip()
    try:
        if ".." in raw:
            a, b = (int(x) for x in raw.split("..", 1))
            if a < 1 or b < a:
                raise ValueError
            out = [a]
            while out[-1] * 2 < b and len(out) <= MAX_DOUBLINGS:
                out.append(out[-1] * 2)
            if out[-1] != b:
                out.append(b)
            return tuple(out)
        vals = tuple(int(x) for x in raw.split(",") if x.strip())
        if not vals or min(vals) < 1:
            raise ValueError
        return tuple(dict.fromkeys(vals))
    except ValueError:
        raise PlanError(f"{text!r} is not a batch size, a list or a range of them: use whole "
                        "numbers >= 1, e.g. 1024, 256,1024,4096 or 256..8192 (doubling)"
                        ) from None


def plan(envs: Sequence[int], workers: Sequence[int], usable_cpus: int) -> list[BatchConfig]:
    """The pool at every size, then each worker count at every size, smallest first."""
    for n in workers:
        if n > usable_cpus:
            raise PlanError(f"--workers {n}: each worker is pinned to CPUs of its own and only "
                            f"{usable_cpus} CPU(s) are usable here: use at most {usable_cpus}")
    for e in envs:
        for n in workers:
            if e % n:
                lo = e - e % n
                eg = f"{lo} or {lo + n}" if lo else f"{n}"
                raise PlanError(f"--envs {e} with --workers {n}: a total batch of {e} envs "
                                f"does not split evenly over {n} workers: use a multiple of "
                                f"{n}, e.g. {eg}")
    sizes = sorted(set(envs))
    return [BatchConfig(e, w) for w in (0, *sorted(set(workers))) for e in sizes]


def needed_bytes(configs: Sequence[BatchConfig], per_env: int, per_process: int) -> int:
    """Memory of all configurations alive at once: every env, plus each worker process."""
    return sum(c.num_envs * per_env + c.workers * per_process for c in configs)


def check_memory(configs: Sequence[BatchConfig], per_env: int, per_process: int,
                 available: int | None, why_per_env: str) -> None:
    """Refuse a sweep whose configurations cannot all fit in ``available`` bytes."""
    need = needed_bytes(configs, per_env, per_process)
    if available is None or need <= available:
        return
    if len({c.num_envs for c in configs}) == 1:  # one size (the thread sweep): the most
        room = available - needed_bytes(configs, 0, per_process)
        most = room // (per_env * len(configs)) if room > 0 else 0
        hint = f"e.g. --envs {most}" if most >= 1 else "fewer configurations"
    else:
        fits = [c for c in configs if needed_bytes(
            [d for d in configs if d.num_envs <= c.num_envs], per_env, per_process) <= available]
        hint = (f"e.g. --envs {min(c.num_envs for c in configs)}.."
                f"{max(c.num_envs for c in fits)}" if fits else "fewer envs and workers")
    workers = max(c.workers for c in configs)
    raise PlanError(
        f"--envs {_envs(configs)}: the sweep holds all "
        f"{len(configs)} configurations at once (they are interleaved), about "
        f"{_size(need)} ({_size(per_env)} per env at most: {why_per_env}"
        + (f"; plus {_size(per_process)} per worker process" if workers else "")
        + f"), but only {_size(available)} is available: sweep fewer or smaller batch sizes, "
        + hint)


def _envs(configs: Sequence[BatchConfig]) -> str:
    sizes = {c.num_envs for c in configs}
    return f"{max(sizes)}" if len(sizes) == 1 else f"up to {max(sizes)}"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def available_memory(proc: str = "/proc", cgroup: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process may still use: MemAvailable, capped by a cgroup v2 limit
    (memory.max - memory.current). None when neither can be read."""
    found: list[int] = []
    try:
        for line in Path(proc, "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path(cgroup, "memory.max").read_text().strip()
        if limit != "max":
            used = int(Path(cgroup, "memory.current").read_text().strip())
            found.append(max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def process_rss(proc: str = "/proc") -> int:
    """This process's resident memory (what a worker importing the same modules costs)."""
    try:
        pages = int(Path(proc, "self", "statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0

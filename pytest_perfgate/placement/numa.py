"""NUMA: topology discovery from a sysfs/proc root, memory policy by syscall, binding proof.

Discovery takes its roots as parameters so tests build fake trees. Memory policy goes through
the raw set_mempolicy/get_mempolicy syscalls via ctypes, not libnuma: numa_set_membind
returns void (failure is invisible) and libnuma prints to stderr. Every call is confirmed by
reading the policy back; "unsupported" (non-Linux, unknown arch, EPERM under seccomp) returns
False with one warning per reason, never stderr spam.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import sys
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_perfgate.placement.cpus import (
    PlacementWarning,
    format_cpus,
    parse_cpulist,
    usable_cpus,
)

if TYPE_CHECKING:
    from pytest_perfgate.gpu.nvml import Nvml

MPOL_DEFAULT, MPOL_PREFERRED, MPOL_BIND, MPOL_INTERLEAVE, MPOL_LOCAL = 0, 1, 2, 3, 4
MPOL_F_STATIC_NODES, MPOL_F_RELATIVE_NODES, MPOL_F_NUMA_BALANCING = 1 << 15, 1 << 14, 1 << 13
MPOL_MODE_FLAGS = MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES | MPOL_F_NUMA_BALANCING
MODE_NAMES = {MPOL_DEFAULT: "default", MPOL_PREFERRED: "preferred", MPOL_BIND: "bind",
              MPOL_INTERLEAVE: "interleave", MPOL_LOCAL: "local"}
# (set_mempolicy, get_mempolicy) syscall numbers per architecture.
_SYSCALLS = {"x86_64": (238, 239), "amd64": (238, 239), "aarch64": (237, 236),
             "arm64": (237, 236)}
_MASK_BITS = 1024  # the kernel's MAX_NUMNODES is at most 1024

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(PlacementWarning(message), stacklevel=3)


@dataclass(frozen=True)
class Node:
    id: int
    cpus: tuple[int, ...]
    has_memory: bool
    allowed: bool  # listed in this process's Mems_allowed (its cpuset)


@dataclass(frozen=True)
class Topology:
    nodes: tuple[Node, ...]
    mems_allowed: tuple[int, ...] | None  # None when /proc did not say
    problems: tuple[str, ...] = ()  # unreadable files, named, for the placement report

    def usable_nodes(self, cpus: Iterable[int]) -> tuple[Node, ...]:
        """Nodes with memory, allowed by Mems_allowed, owning a CPU in ``cpus``."""
        mask = set(cpus)
        return tuple(n for n in self.nodes
                     if n.has_memory and n.allowed and mask.intersection(n.cpus))

    def describe(self) -> list[str]:
        lines = []
        for n in self.nodes:
            flags = [] if n.has_memory else ["no memory"]
            if not n.cpus:
                flags.append("no CPUs")
            if not n.allowed:
                flags.append("outside Mems_allowed")
            lines.append(f"node{n.id}: cpus {format_cpus(n.cpus)}"
                         + (f" ({', '.join(flags)})" if flags else ""))
        return lines + [f"problem: {p}" for p in self.problems]


def discover(sysfs_root: str | os.PathLike[str] = "/sys",
             proc_root: str | os.PathLike[str] = "/proc") -> Topology:
    """Read the NUMA topology; no node directory (non-NUMA kernel, macOS) gives no nodes."""
    base = Path(sysfs_root) / "devices/system/node"
    problems: list[str] = []

    def read_list(path: Path) -> tuple[int, ...] | None:
        try:
            return parse_cpulist(path.read_text())
        except OSError:
            return None
        except ValueError as exc:
            problems.append(f"{path}: unreadable list ({exc}); node treated as unusable")
            return None

    online = read_list(base / "online")
    if online is None:
        if base.is_dir():
            online = tuple(sorted(int(p.name[4:]) for p in base.glob("node[0-9]*")
                                  if p.name[4:].isdigit()))
        else:
            return Topology((), _mems_allowed(Path(proc_root)), tuple(problems))
    with_memory = read_list(base / "has_memory")
    allowed = _mems_allowed(Path(proc_root))
    nodes = []
    for nid in online:
        cpus = read_list(base / f"node{nid}" / "cpulist")
        if with_memory is not None:
            has_mem = nid in with_memory
        else:  # older kernels: fall back to the node's MemTotal
            has_mem = _node_mem_kb(base / f"node{nid}" / "meminfo") > 0
        # A corrupt cpulist was recorded in problems; with no CPUs the node is unusable.
        nodes.append(Node(nid, cpus or (), has_mem,
                          allowed is None or nid in allowed))
    return Topology(tuple(nodes), allowed, tuple(problems))


def _node_mem_kb(path: Path) -> int:
    try:
        m = re.search(r"MemTotal:\s+([0-9]+)", path.read_text())
    except OSError:
        return 0
    return int(m.group(1)) if m else 0


def _mems_allowed(proc_root: Path) -> tuple[int, ...] | None:
    try:
        for line in (proc_root / "self/status").read_text().splitlines():
            if line.startswith("Mems_allowed_list:"):
                return parse_cpulist(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return None


# ---- memory policy -------------------------------------------------------------------

@dataclass(frozen=True)
class MemPolicy:
    """A thread's memory policy: base mode, mode flags (kept to restore exactly), nodes."""

    mode: int
    flags: int = 0
    nodes: tuple[int, ...] = ()

    def __str__(self) -> str:
        name = MODE_NAMES.get(self.mode, f"mode{self.mode}")
        return f"{name}:{format_cpus(self.nodes)}" if self.nodes else name


_Mask = ctypes.c_ulong * (_MASK_BITS // (8 * ctypes.sizeof(ctypes.c_ulong)))


def _syscalls() -> tuple[int, int] | None:
    if not sys.platform.startswith("linux"):
        _warn_once("platform", f"memory binding is unsupported on {sys.platform}: "
                   "workers run without a NUMA memory policy")
        return None
    nums = _SYSCALLS.get(platform.machine().lower())
    if nums is None:
        _warn_once("arch", f"memory binding: no syscall numbers known for architecture "
                   f"{platform.machine()!r}; workers run without a NUMA memory policy")
    return nums


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _fail(err: int, what: str) -> None:
    if err in (errno.EPERM, errno.ENOSYS):
        _warn_once(f"errno{err}", f"{what} refused ({errno.errorcode.get(err, err)}: a "
                   "container seccomp profile?); workers run without a NUMA memory policy. "
                   "Run with --security-opt seccomp=unconfined or CAP_SYS_NICE to bind.")
    else:
        _warn_once(f"{what}:{err}", f"{what} failed: {os.strerror(err)}")


def get_mempolicy() -> MemPolicy | None:
    """The calling thread's policy, or None when it cannot be read (warned once)."""
    nums = _syscalls()
    if nums is None:
        return None
    mode, mask = ctypes.c_int(0), _Mask()
    libc = _libc()
    rc = libc.syscall(ctypes.c_long(nums[1]), ctypes.byref(mode), mask,
                      ctypes.c_ulong(_MASK_BITS + 1), None, ctypes.c_ulong(0))
    if rc != 0:
        _fail(ctypes.get_errno(), "get_mempolicy")
        return None
    nbits = 8 * ctypes.sizeof(ctypes.c_ulong)
    nodes = tuple(i for i in range(_MASK_BITS) if mask[i // nbits] >> (i % nbits) & 1)
    return MemPolicy(mode.value & ~MPOL_MODE_FLAGS, mode.value & MPOL_MODE_FLAGS, nodes)


def set_mempolicy(policy: MemPolicy) -> bool:
    """Apply ``policy`` to the calling thread; True only if reading it back agrees.

    The kernel narrows a node set to the cpuset silently, so agreement means the read-back
    nodes are a non-empty subset of the requested ones.
    """
    nums = _syscalls()
    if nums is None:
        return False
    if any(n < 0 or n >= _MASK_BITS for n in policy.nodes):
        raise ValueError(f"NUMA node ids {policy.nodes}: must be in 0..{_MASK_BITS - 1}")
    mask = _Mask()
    nbits = 8 * ctypes.sizeof(ctypes.c_ulong)
    for n in policy.nodes:
        mask[n // nbits] |= 1 << (n % nbits)
    libc = _libc()
    # maxnode is one more than the mask's bits: the kernel decrements it (off by one).
    rc = libc.syscall(ctypes.c_long(nums[0]), ctypes.c_int(policy.mode | policy.flags),
                      mask if policy.nodes else None,
                      ctypes.c_ulong(_MASK_BITS + 1 if policy.nodes else 0))
    if rc != 0:
        _fail(ctypes.get_errno(), f"set_mempolicy({policy})")
        return False
    got = get_mempolicy()
    if got is None or got.mode != policy.mode or got.flags != policy.flags:
        return False
    if not policy.nodes:
        return True
    return bool(got.nodes) and set(got.nodes) <= set(policy.nodes)


def bind_memory(nodes: Iterable[int], mode: str = "bind") -> bool:
    """Bind (or prefer) the calling thread's future allocations to ``nodes``."""
    modes = {"bind": MPOL_BIND, "preferred": MPOL_PREFERRED, "interleave": MPOL_INTERLEAVE}
    if mode not in modes:
        raise ValueError(f"mempolicy={mode!r}: use one of {sorted(modes)}")
    nodes = tuple(sorted(set(nodes)))
    if not nodes:
        raise ValueError("bind_memory needs at least one NUMA node")
    return set_mempolicy(MemPolicy(modes[mode], 0, nodes))


# ---- proof of binding -----------------------------------------------------------------

@dataclass(frozen=True)
class NumaMapsProof:
    """What /proc/<pid>/numa_maps says: policies seen and where anonymous pages landed."""

    policies: tuple[str, ...]  # distinct policy strings, e.g. ("bind:1",)
    anon_kb: dict[int, int]  # node -> kB of anonymous (heap/stack) pages there

    def share_on(self, nodes: Iterable[int]) -> float | None:
        total = sum(self.anon_kb.values())
        return sum(self.anon_kb.get(n, 0) for n in set(nodes)) / total if total else None

    def as_dict(self) -> dict[str, object]:
        return {"policies": list(self.policies),
                "anon_kb": {str(k): v for k, v in sorted(self.anon_kb.items())}}


def parse_numa_maps(text: str) -> NumaMapsProof:
    """Parse numa_maps lines: ``<addr> <policy> [anon=N] [N<node>=<pages>] kernelpagesize_kB=K``."""
    policies: dict[str, None] = {}
    anon: dict[int, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        policies.setdefault(fields[1])
        kv = dict(f.split("=", 1) for f in fields[2:] if "=" in f)
        if "anon" not in kv:
            continue
        try:
            page_kb = int(kv.get("kernelpagesize_kB", "4"))
            per_node = {int(k[1:]): int(v) for k, v in kv.items()
                        if k[:1] == "N" and k[1:].isdigit()}
            if "file" in kv and int(kv["anon"]) < sum(per_node.values()):
                continue  # N<node> also counts the file's page cache: not our anonymous pages
            for node, pages in per_node.items():
                anon[node] = anon.get(node, 0) + pages * page_kb
        except ValueError:
            continue
    return NumaMapsProof(tuple(policies), anon)


def read_numa_maps(pid: int | str = "self",
                   proc_root: str | os.PathLike[str] = "/proc") -> NumaMapsProof | None:
    try:
        return parse_numa_maps((Path(proc_root) / str(pid) / "numa_maps").read_text())
    except OSError:
        return None


def gpu_local_nodes(device: int | str = 0, *, sysfs_root: str | os.PathLike[str] = "/sys",
                    proc_root: str | os.PathLike[str] = "/proc", nvml: Nvml | None = None
                    ) -> list[int] | None:
    """The NUMA node local to a GPU, for ``numa_workers.start(nodes=...)``: ``[node]``.

    A platform that reports no node (-1) warns and gives None, which places workers as if
    no node were named. A GPU that cannot be found, or whose node is not usable here (no
    memory, outside Mems_allowed, none of our CPUs), is an error: the request cannot be
    honoured. ``device``: an NVML index or a PCI address ("0000:01:00.0")."""
    from pytest_perfgate.gpu.locality import locate

    loc = locate(device, sysfs_root, nvml)
    if loc.node is None:
        _warn_once(f"gpu-node:{loc.bus_id}",
                   f"{loc.device} reports no NUMA node (numa_node is -1: a one-node machine "
                   "or a VM that hides it): GPU-local placement falls back to the usual one")
        return None
    topo = discover(sysfs_root, proc_root)
    usable = {n.id for n in topo.usable_nodes(usable_cpus())}
    if loc.node not in usable:
        raise ValueError(f"{loc.device} is local to NUMA node {loc.node}, which is not usable "
                         f"here (a usable node has memory, is in Mems_allowed and owns one of "
                         f"our CPUs); usable nodes: {sorted(usable) or 'none'}")
    return [loc.node]


def gpu_local_cpus(device: int | str = 0, *, sysfs_root: str | os.PathLike[str] = "/sys",
                   nvml: Nvml | None = None) -> tuple[int, ...] | None:
    """The CPUs local to a GPU that this process may use, for a core spec (``cpus=``,
    ``learner_cpus=``). None (with a warning) where the platform reports no locality;
    an error where none of the GPU's local CPUs is usable here."""
    from pytest_perfgate.gpu.locality import locate

    loc = locate(device, sysfs_root, nvml)
    if loc.node is None or loc.cpulist is None:
        _warn_once(f"gpu-cpus:{loc.bus_id}",
                   f"{loc.device} reports no NUMA node (numa_node is -1: a one-node machine "
                   "or a VM that hides it): GPU-local placement falls back to the usual one")
        return None
    try:
        local = parse_cpulist(loc.cpulist)
    except ValueError as exc:
        raise ValueError(f"{loc.device}: unreadable local_cpulist {loc.cpulist!r} ({exc})"
                         ) from None
    ours = set(usable_cpus())
    cpus = tuple(c for c in local if c in ours)
    if not cpus:
        raise ValueError(f"{loc.device} is local to CPUs {format_cpus(local)}, none of which "
                         f"this process may use (its CPUs: {format_cpus(sorted(ours))})")
    return cpus

"""Why a worker died of SIGKILL: the OOM killer, said for certain when the kernel says so.

A worker bound to a NUMA node with a strict ``bind`` policy cannot fall back to other nodes;
when its node fills up, the kernel's OOM killer ends it with SIGKILL, which from the parent
looks like any other kill. :class:`OomWatch` reads what it can before the workers start (the
cgroup's ``oom_kill`` counter, each bound node's free memory) and, after a SIGKILL, looks for
proof: the kernel log line naming the worker's pid (``/dev/kmsg``, readable by root), or the
cgroup counter having risen. Every probe returns None when the platform does not offer it;
the caller then says only what it knows.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_perfgate.placement.cgroup import own_cgroup

_KMSG_MAX_BYTES = 8 << 20  # the kernel ring buffer is far smaller; bounds a strange file
# "Out of memory: Killed process 131 (python3.11) ..." (also "Memory cgroup out of memory:")
# and "oom-kill:constraint=...,task=python3.11,pid=131,uid=0".
_KILLED = re.compile(r"Killed process (\d+)\b")
_OOM_KILL = re.compile(r"oom-kill:.*\bpid=(\d+)\b")


@dataclass(frozen=True)
class NodeMemory:
    """A NUMA node's memory as /sys/devices/system/node/nodeN/meminfo reports it."""

    node: int
    total_kb: int
    free_kb: int

    def describe(self) -> str:
        return f"{self.total_kb // 1024} MiB, {self.free_kb // 1024} MiB free"


def read_node_memory(node: int, sysfs_root: str | os.PathLike[str] = "/sys"
                     ) -> NodeMemory | None:
    """MemTotal and MemFree of ``node``, or None when the file is missing or unreadable."""
    path = Path(sysfs_root) / f"devices/system/node/node{node}/meminfo"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    values = {}
    for key in ("MemTotal", "MemFree"):
        m = re.search(rf"\b{key}:\s+([0-9]+) kB", text)
        if m is None:
            return None
        values[key] = int(m.group(1))
    return NodeMemory(node, values["MemTotal"], values["MemFree"])


def oom_kill_count(cgroup_root: str | os.PathLike[str] = "/sys/fs/cgroup",
                   proc_cgroup: str | os.PathLike[str] = "/proc/self/cgroup") -> int | None:
    """How many processes of our cgroup the OOM killer has killed so far, or None.

    cgroup v2 keeps it in ``memory.events``, v1 in ``memory.oom_control`` (Linux >= 4.13);
    both count global and cgroup OOM kills of the cgroup's processes.
    """
    root = Path(cgroup_root)
    v2, v1 = own_cgroup(Path(proc_cgroup), "memory")
    candidates = []
    if v2 is not None:
        candidates.append(root / v2.lstrip("/") / "memory.events")
    if v1 is not None:
        candidates.append(root / "memory" / v1.lstrip("/") / "memory.oom_control")
    for path in candidates:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        m = re.search(r"^oom_kill\s+([0-9]+)$", text, re.M)
        if m:
            return int(m.group(1))
    return None


def read_kernel_log(path: str | os.PathLike[str] = "/dev/kmsg") -> list[str] | None:
    """The kernel log's messages (one string per record), or None when it cannot be read.

    /dev/kmsg hands out one record per read and EAGAIN at the end when opened non-blocking;
    EPIPE means records were overwritten while reading (go on). A regular file (tests) is
    read the same way.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        while size < _KMSG_MAX_BYTES:
            try:
                chunk = os.read(fd, 16384)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                if not chunks:
                    return None
                break
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    records = []
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        if line.startswith(" "):  # a continuation line ("SUBSYSTEM=...") of the record above
            continue
        records.append(line.split(";", 1)[1] if ";" in line.split(" ", 1)[0] else line)
    return records


def kernel_oom_line(pid: int, records: Iterable[str]) -> str | None:
    """The kernel's line saying the OOM killer killed ``pid``, if it logged one."""
    hit = None
    for rec in records:
        for pattern in (_KILLED, _OOM_KILL):
            m = pattern.search(rec)
            if m and int(m.group(1)) == pid:
                hit = rec.strip()
                if pattern is _KILLED:
                    return hit
    return hit


@dataclass(frozen=True)
class OomWatch:
    """What was known before the workers started, to explain a SIGKILL afterwards."""

    oom_kills: int | None
    nodes: Mapping[int, NodeMemory] = field(default_factory=dict)
    sysfs_root: str = "/sys"
    cgroup_root: str = "/sys/fs/cgroup"
    proc_cgroup: str = "/proc/self/cgroup"
    kmsg: str = "/dev/kmsg"

    @classmethod
    def snapshot(cls, nodes: Iterable[int], *, sysfs_root: str = "/sys",
                 cgroup_root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup",
                 kmsg: str = "/dev/kmsg") -> OomWatch:
        mem = {n: m for n in sorted(set(nodes))
               if (m := read_node_memory(n, sysfs_root)) is not None}
        return cls(oom_kill_count(cgroup_root, proc_cgroup), mem, sysfs_root, cgroup_root,
                   proc_cgroup, kmsg)

    def explain(self, index: int, pid: int, what: str, node: int | None = None,
                mempolicy: str | None = None) -> str:
        """Why worker ``index`` (``pid``) died of SIGKILL during ``what`` ("the start"), as
        certain as the evidence allows."""
        evidence = None
        records = read_kernel_log(self.kmsg)
        if records is not None:
            line = kernel_oom_line(pid, records)
            if line:
                evidence = f"the kernel logged: {line}"
        if evidence is None and self.oom_kills is not None:
            now = oom_kill_count(self.cgroup_root, self.proc_cgroup)
            if now is not None and now > self.oom_kills:
                evidence = (f"this cgroup's oom_kill counter rose from {self.oom_kills} to "
                            f"{now} while it ran")
        bound = node is not None and mempolicy == "bind"
        where = ""
        if node is not None:
            mem = self.nodes.get(node)
            facts = f" ({mem.describe()} before the start)" if mem else ""
            where = (f" while bound to node {node}{facts}" if bound else
                     f" on node {node}, mempolicy {mempolicy or 'unknown'}{facts}")
        if evidence is None:
            known = ("the kernel log was not readable" if records is None
                     else "the kernel logged no OOM kill of it")
            return (f"worker {index} (pid {pid}) was killed by SIGKILL during {what}{where}: "
                    f"the workload crashed or something killed it ({known}, so an OOM kill "
                    "cannot be told apart from another kill)")
        fix = ("bind it to a node with room, or use mempolicy='preferred'" if bound else
               "give it less to allocate, or more memory (the cgroup's limit or the machine's)")
        return (f"worker {index} (pid {pid}) was killed by the OOM killer during {what}{where}: "
                f"{fix} ({evidence})")

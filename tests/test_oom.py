"""Explaining a worker's SIGKILL: the OOM killer only when the kernel or the cgroup says so."""

from __future__ import annotations

from pathlib import Path

from pytest_perfgate.placement.oom import (
    NodeMemory,
    OomWatch,
    kernel_oom_line,
    oom_kill_count,
    read_kernel_log,
    read_node_memory,
)

KMSG = """\
6,1,0,-;Command line: console=ttyS0
4,812,9812801,-;oom-kill:constraint=CONSTRAINT_MEMORY_POLICY,nodemask=4,cpuset=/,mems_allowed=0-4,global_oom,task_memcg=/,task=python3.11,pid=131,uid=0
3,813,9812802,-;Out of memory: Killed process 131 (python3.11) total-vm:54448kB, \
anon-rss:38540kB, file-rss:4kB, shmem-rss:7420kB
 SUBSYSTEM=memory
3,814,9812803,-;Out of memory: Killed process 1312 (other) total-vm:1kB
"""


def _sysfs(tmp_path: Path, node: int, total_kb: int, free_kb: int) -> str:
    d = tmp_path / "sys" / "devices/system/node" / f"node{node}"
    d.mkdir(parents=True)
    (d / "meminfo").write_text(f"Node {node} MemTotal:  {total_kb} kB\n"
                               f"Node {node} MemFree:   {free_kb} kB\n"
                               f"Node {node} MemUsed:   {total_kb - free_kb} kB\n")
    return str(tmp_path / "sys")


def _cgroup_v2(tmp_path: Path, kills: int) -> tuple[str, str]:
    root = tmp_path / "cg"
    (root / "job").mkdir(parents=True, exist_ok=True)
    (root / "job" / "memory.events").write_text(
        f"low 0\nhigh 0\nmax 3\noom 2\noom_kill {kills}\noom_group_kill 0\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job\n")
    return str(root), str(proc)


def test_kernel_log_names_the_killed_pid_exactly(tmp_path: Path) -> None:
    (tmp_path / "kmsg").write_text(KMSG)
    records = read_kernel_log(tmp_path / "kmsg")
    assert records is not None and len(records) == 4  # the continuation line is not a record
    assert kernel_oom_line(131, records) == (
        "Out of memory: Killed process 131 (python3.11) total-vm:54448kB, anon-rss:38540kB, "
        "file-rss:4kB, shmem-rss:7420kB")
    assert kernel_oom_line(13, records) is None  # 13 is a prefix of 131 and 1312: no match
    assert kernel_oom_line(99, records) is None
    # Only the oom-kill summary line (older kernels print no "Killed process" line).
    assert kernel_oom_line(131, [records[1]]) is not None


def test_unreadable_or_missing_kernel_log_is_none(tmp_path: Path) -> None:
    assert read_kernel_log(tmp_path / "absent") is None
    assert read_kernel_log(tmp_path) is None  # a directory


def test_node_memory_and_garbage(tmp_path: Path) -> None:
    sysfs = _sysfs(tmp_path, 4, 131072, 2048)
    assert read_node_memory(4, sysfs) == NodeMemory(4, 131072, 2048)
    assert read_node_memory(4, sysfs).describe() == "128 MiB, 2 MiB free"  # type: ignore
    assert read_node_memory(5, sysfs) is None
    (tmp_path / "sys/devices/system/node/node4/meminfo").write_bytes(b"\xff\xfe garbage")
    assert read_node_memory(4, sysfs) is None


def test_cgroup_counters_v2_and_v1(tmp_path: Path) -> None:
    root, proc = _cgroup_v2(tmp_path, 7)
    assert oom_kill_count(root, proc) == 7
    v1 = tmp_path / "v1"
    (v1 / "memory" / "a" / "b").mkdir(parents=True)
    (v1 / "memory" / "a" / "b" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (tmp_path / "cgroup1").write_text("4:memory:/a/b\n3:cpuset:/\n0::/\n")
    assert oom_kill_count(v1, tmp_path / "cgroup1") == 2
    assert oom_kill_count(tmp_path / "nothing", tmp_path / "cgroup1") is None
    assert oom_kill_count(root, tmp_path / "no-proc-file") is None


def test_explained_for_certain_from_the_kernel_log(tmp_path: Path) -> None:
    (tmp_path / "kmsg").write_text(KMSG)
    watch = OomWatch.snapshot([4], sysfs_root=_sysfs(tmp_path, 4, 131072, 2048),
                              cgroup_root=str(tmp_path / "none"), kmsg=str(tmp_path / "kmsg"))
    assert watch.explain(0, 131, "the start", 4, "bind") == (
        "worker 0 (pid 131) was killed by the OOM killer during the start while bound to "
        "node 4 (128 MiB, 2 MiB free before the start): bind it to a node with room, or use "
        "mempolicy='preferred' (the kernel logged: Out of memory: Killed process 131 "
        "(python3.11) total-vm:54448kB, anon-rss:38540kB, file-rss:4kB, shmem-rss:7420kB)")


def test_explained_from_the_cgroup_counter_when_the_log_is_closed(tmp_path: Path) -> None:
    root, proc = _cgroup_v2(tmp_path, 1)
    watch = OomWatch.snapshot([], cgroup_root=root, proc_cgroup=proc,
                              kmsg=str(tmp_path / "absent"))
    assert watch.oom_kills == 1
    _cgroup_v2(tmp_path, 2)  # the kill happened while the worker ran
    assert watch.explain(3, 77, "the window") == (
        "worker 3 (pid 77) was killed by the OOM killer during the window: give it less to "
        "allocate, or more memory (the cgroup's limit or the machine's) (this cgroup's "
        "oom_kill counter rose from 1 to 2 while it ran)")


def test_an_ordinary_kill_is_not_called_an_oom_kill(tmp_path: Path) -> None:
    (tmp_path / "kmsg").write_text(KMSG)
    root, proc = _cgroup_v2(tmp_path, 4)
    sysfs = _sysfs(tmp_path, 1, 262144, 200000)
    watch = OomWatch.snapshot([1], sysfs_root=sysfs, cgroup_root=root, proc_cgroup=proc,
                              kmsg=str(tmp_path / "kmsg"))
    assert watch.explain(1, 500, "the window", 1, "preferred") == (
        "worker 1 (pid 500) was killed by SIGKILL during the window on node 1, mempolicy "
        "preferred (256 MiB, 195 MiB free before the start): the workload crashed or something "
        "killed it (the kernel logged no OOM kill of it, so an OOM kill cannot be told apart from "
        "another kill)")
    closed = OomWatch.snapshot([], cgroup_root=str(tmp_path / "none"),
                               kmsg=str(tmp_path / "absent"))
    assert closed.explain(0, 5, "the start") == (
        "worker 0 (pid 5) was killed by SIGKILL during the start: the workload crashed or "
        "something killed it (the kernel log was not readable, so an OOM kill cannot be told "
        "apart from another kill)")

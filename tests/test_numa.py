"""NUMA discovery on fake sysfs/proc trees, memory policy by syscall, numa_maps proof."""

from __future__ import annotations

import ctypes
import errno
import platform
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import fake_tree

from pytest_perfgate.placement import numa
from pytest_perfgate.placement.cpus import PlacementWarning
from pytest_perfgate.placement.launchers import numa_split
from pytest_perfgate.placement.numa import (
    MPOL_BIND,
    MPOL_F_STATIC_NODES,
    MPOL_PREFERRED,
    MemPolicy,
    Node,
    bind_memory,
    discover,
    get_mempolicy,
    parse_numa_maps,
    set_mempolicy,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux") or
                                platform.machine() not in ("x86_64", "aarch64"),
                                reason="memory policy syscalls need Linux on x86_64/aarch64")


def test_usable_node_rule_on_a_four_node_tree(tmp_path: Path) -> None:
    # node1 memoryless, node2 CPU-less, node3 outside Mems_allowed: only node0 qualifies.
    sysfs, proc = fake_tree(tmp_path, {0: "0-1", 1: "2-3", 2: "", 3: "4-5"},
                            has_memory="0,2-3", mems_allowed="0-2", online="0-3")
    topo = discover(sysfs, proc)
    assert topo.nodes == (Node(0, (0, 1), True, True), Node(1, (2, 3), False, True),
                          Node(2, (), True, True), Node(3, (4, 5), True, False))
    assert topo.mems_allowed == (0, 1, 2)
    assert [n.id for n in topo.usable_nodes(range(8))] == [0]
    assert topo.usable_nodes([2, 3, 4, 5]) == ()  # our mask misses node0's CPUs
    assert topo.describe() == ["node0: cpus 0-1", "node1: cpus 2-3 (no memory)",
                               "node2: cpus (none) (no CPUs)",
                               "node3: cpus 4-5 (outside Mems_allowed)"]


def test_corrupt_cpulist_is_named_and_makes_the_node_unusable(tmp_path: Path) -> None:
    sysfs, proc = fake_tree(tmp_path, {0: "0-1", 1: "2-zz"}, has_memory="0-1",
                            mems_allowed="0-1", online="0-1")
    topo = discover(sysfs, proc)
    assert [n.id for n in topo.usable_nodes(range(4))] == [0]
    path = sysfs / "devices/system/node/node1/cpulist"
    assert topo.problems == (f"{path}: unreadable list (bad item '2-zz'); node treated as "
                             "unusable",)
    assert topo.describe()[-1] == f"problem: {topo.problems[0]}"


def test_no_numa_directory_gives_no_nodes(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    topo = discover(tmp_path / "sys", tmp_path / "proc")
    assert topo.nodes == () and topo.usable_nodes(range(4)) == ()
    assert topo.mems_allowed is None


def test_missing_online_and_has_memory_fall_back_to_dirs_and_meminfo(tmp_path: Path) -> None:
    sysfs, proc = fake_tree(tmp_path, {0: "0", 1: "1"}, has_memory=None, mems_allowed="0-1")
    base = sysfs / "devices/system/node"
    (base / "node0/meminfo").write_text("Node 0 MemTotal:       16384 kB\n")
    (base / "node1/meminfo").write_text("Node 1 MemTotal:           0 kB\n")
    topo = discover(sysfs, proc)
    assert [(n.id, n.has_memory) for n in topo.nodes] == [(0, True), (1, False)]


def test_numa_split() -> None:
    assert numa_split(4096, [0, 1]) == [2048, 2048]
    with pytest.raises(ValueError) as info:
        numa_split(1000, [0, 1, 3])
    assert str(info.value) == ("total batch size 1000 is not divisible by 3 workers (one per "
                               "NUMA node 0-1,3): use a multiple of 3, e.g. 999 or 1002")


def in_thread(fn: Callable[[], Any]) -> Any:
    """Memory policy is per thread: experiment on a throwaway one."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(30)
    return out[0]


@linux_only
def test_bind_and_preferred_are_read_back_and_restored_with_flags() -> None:
    node = min(n.id for n in discover().nodes if n.has_memory) if discover().nodes else 0

    def run() -> tuple[Any, ...]:
        before = get_mempolicy()
        bound = bind_memory([node])
        after_bind = get_mempolicy()
        preferred = bind_memory([node], "preferred")
        after_pref = get_mempolicy()
        static = set_mempolicy(MemPolicy(MPOL_BIND, MPOL_F_STATIC_NODES, (node,)))
        after_static = get_mempolicy()
        restored = set_mempolicy(before)
        return (before, bound, after_bind, preferred, after_pref, static, after_static,
                restored, get_mempolicy())

    res = in_thread(run)
    before, bound, after_bind, preferred, after_pref, static, after_static, restored, end = res
    if before is None:
        pytest.skip("get_mempolicy is refused here (seccomp?)")
    assert bound and after_bind == MemPolicy(MPOL_BIND, 0, (node,))
    assert preferred and after_pref == MemPolicy(MPOL_PREFERRED, 0, (node,))
    assert static and after_static == MemPolicy(MPOL_BIND, MPOL_F_STATIC_NODES, (node,))
    assert str(after_static) == f"bind:{node}"
    assert restored and end == before


@linux_only
def test_request_outside_the_cpuset_is_refused_with_one_warning(monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.setattr(numa, "_warned", set())
    with pytest.warns(PlacementWarning) as rec:
        assert in_thread(lambda: bind_memory([1000])) is False
        assert in_thread(lambda: bind_memory([1000])) is False
    assert [str(w.message) for w in rec] == ["set_mempolicy(bind:1000) failed: Invalid argument"]


def test_eperm_under_seccomp_warns_once_and_returns_false(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    class Refusing:
        def syscall(self, *args: object) -> int:
            ctypes.set_errno(errno.EPERM)
            return -1

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(numa, "_libc", Refusing)
    monkeypatch.setattr(numa, "_warned", set())
    with pytest.warns(PlacementWarning) as rec:
        assert bind_memory([0]) is False
        assert bind_memory([0]) is False
        assert get_mempolicy() is None
    assert [str(w.message) for w in rec] == [
        "set_mempolicy(bind:0) refused (EPERM: a container seccomp profile?); workers run "
        "without a NUMA memory policy. Run with --security-opt seccomp=unconfined or "
        "CAP_SYS_NICE to bind."]


def test_unknown_architecture_and_platform_are_unsupported(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setattr(numa, "_warned", set())
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "machine", lambda: "sparc64")
    with pytest.warns(PlacementWarning) as rec:
        assert bind_memory([0]) is False
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.warns(PlacementWarning) as rec2:
        assert get_mempolicy() is None
    assert str(rec[0].message) == ("memory binding: no syscall numbers known for architecture "
                                   "'sparc64'; workers run without a NUMA memory policy")
    assert str(rec2[0].message) == ("memory binding is unsupported on darwin: workers run "
                                    "without a NUMA memory policy")


def test_bind_memory_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError) as info:
        bind_memory([0], "sticky")
    assert str(info.value) == "mempolicy='sticky': use one of ['bind', 'interleave', 'preferred']"
    with pytest.raises(ValueError) as info:
        bind_memory([])
    assert str(info.value) == "bind_memory needs at least one NUMA node"


NUMA_MAPS = """\
55d0c0a00000 bind:1 file=/usr/bin/python3.11 mapped=10 N0=10 kernelpagesize_kB=4
55d0c1000000 bind:1 heap anon=300 dirty=300 N1=300 kernelpagesize_kB=4
7f0000000000 bind:1 anon=2 dirty=2 N0=1 N1=1 kernelpagesize_kB=2048
7ffd00000000 default stack anon=5 dirty=5 N1=5 kernelpagesize_kB=4
garbage
"""


def test_numa_maps_proof() -> None:
    proof = parse_numa_maps(NUMA_MAPS)
    assert proof.policies == ("bind:1", "default")
    assert proof.anon_kb == {1: 300 * 4 + 2048 + 5 * 4, 0: 2048}
    assert proof.share_on([1]) == pytest.approx(3268 / 5316)
    assert proof.as_dict() == {"policies": ["bind:1", "default"],
                               "anon_kb": {"0": 2048, "1": 3268}}
    assert parse_numa_maps("").share_on([0]) is None


@linux_only
def test_numa_maps_of_this_process_is_readable() -> None:
    proof = numa.read_numa_maps()
    if proof is None:
        pytest.skip("no /proc/self/numa_maps (kernel without NUMA)")
    assert sum(proof.anon_kb.values()) > 0


def test_numa_maps_ignores_shared_library_page_cache() -> None:
    from pytest_perfgate.placement.numa import parse_numa_maps

    text = ("7f00 bind:0 file=/usr/lib/libpython3.11.so.1.0 anon=21 dirty=21 N1=21 N4=15 "
            "kernelpagesize_kB=4\n"
            "7f10 bind:0 anon=4099 dirty=4099 N0=4099 kernelpagesize_kB=4\n")
    assert parse_numa_maps(text).anon_kb == {0: 4099 * 4}

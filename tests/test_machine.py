"""Machine metadata from fake /proc and /sys trees; fingerprints and their explanations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_perfgate.history import machine_id
from pytest_perfgate.history.machine_id import (
    asv_machine_json,
    cgroup_cpu_quota,
    collect_metadata,
    describe_mismatch,
    fingerprint,
    fingerprint_fields,
)

VERSIONS = {"numpy": "2.0.1", "torch": None, "mujoco": "4.0.0", "mujoco-core": "4.0.1",
            "asv": "0.6.6", "scipy": "1.14", "psutil": "6", "pytest": "8", "pytest-perfgate": "0"}
CPUINFO = "".join(
    f"processor\t: {i}\nmodel name\t: AMD EPYC  7K62 48-Core Processor\nphysical id\t: {i // 4}\n"
    f"core id\t\t: {(i % 4) // 2}\n\n" for i in range(8))


def put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """8 logical CPUs, 4 cores with SMT, 2 NUMA nodes, cgroup v2 quota of 2.5 CPUs."""
    put(tmp_path, "proc/cpuinfo", CPUINFO)
    for cpu in range(8):
        put(tmp_path, f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list",
            f"{cpu - cpu % 2}-{cpu - cpu % 2 + 1}\n")
        put(tmp_path, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", "performance\n")
    put(tmp_path, "sys/devices/system/cpu/online", "0-7\n")
    put(tmp_path, "sys/devices/system/cpu/smt/active", "1\n")
    put(tmp_path, "sys/devices/system/cpu/cpufreq/boost", "1\n")
    for node in (0, 1):
        put(tmp_path, f"sys/devices/system/node/node{node}/cpulist", f"{node * 4}-{node * 4 + 3}")
    put(tmp_path, "sys/devices/system/node/online", "0-1\n")
    put(tmp_path, "proc/self/status", "Name:\tpython\nCpus_allowed_list:\t0-3,6\n")
    put(tmp_path, "proc/self/cgroup", "0::/ci/job1\n")
    put(tmp_path, "sys/fs/cgroup/cpu.max", "max 100000\n")
    put(tmp_path, "sys/fs/cgroup/ci/cpu.max", "400000 100000\n")
    put(tmp_path, "sys/fs/cgroup/ci/job1/cpu.max", "250000 100000\n")
    put(tmp_path, "proc/meminfo", "MemTotal:       16384000 kB\nMemFree: 1 kB\n")
    put(tmp_path, "proc/sys/kernel/osrelease", "6.1.0-test\n")
    put(tmp_path, "etc/os-release", 'NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12"\n')
    return tmp_path


def test_reads_every_field_from_a_fake_tree(box: Path) -> None:
    meta = collect_metadata("ci-4core", root=box, versions=VERSIONS)
    assert meta["machine"] == "ci-4core"
    assert meta["cpu_model"] == "AMD EPYC 7K62 48-Core Processor"
    assert (meta["cpu_logical"], meta["cpu_physical"], meta["smt"]) == (8, 4, True)
    assert meta["numa_nodes"] == 2
    assert (meta["affinity"], meta["affinity_count"]) == ("0-3,6", 5)
    assert meta["cgroup_cpu_quota"] == 2.5  # the tightest level along the cgroup path
    assert (meta["governor"], meta["turbo"]) == ("performance", True)
    assert meta["mem_total"] == 16384000 * 1024
    assert (meta["os"], meta["kernel"]) == ("Debian GNU/Linux 12", "6.1.0-test")
    assert meta["versions"]["mujoco-core"] == "4.0.1"


def test_cgroup_v1_quota_and_unlimited(tmp_path: Path) -> None:
    put(tmp_path, "proc/self/cgroup", "4:memory:/x\n1:cpu,cpuacct:/docker/abc\n")
    put(tmp_path, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n")
    put(tmp_path, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n")
    put(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    put(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1.5
    (tmp_path / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(tmp_path) is None


def test_odd_or_missing_files_never_raise(tmp_path: Path) -> None:
    put(tmp_path, "proc/cpuinfo", "\x00\xff garbage without colons\n")
    put(tmp_path, "proc/self/status", "Cpus_allowed_list:\t0-99999999999\n")  # not enumerated
    put(tmp_path, "proc/self/cgroup", "0::/a\nnonsense\n")
    put(tmp_path, "sys/fs/cgroup/cpu.max", "banana\n")
    put(tmp_path, "proc/meminfo", "MemTotal: lots\n")
    put(tmp_path, "sys/devices/system/cpu/cpu0/topology/thread_siblings_list", "x-y")
    (tmp_path / "sys/devices/system/cpu/intel_pstate").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/intel_pstate/no_turbo").mkdir()  # a dir, not a file
    meta = collect_metadata(None, root=tmp_path, versions={})
    assert meta["machine"]  # hostname fallback
    for key in ("cpu_physical", "numa_nodes", "affinity", "cgroup_cpu_quota", "governor",
                "turbo", "mem_total"):
        assert meta[key] is None, key
    fingerprint(meta)  # still hashable


HEAVY = ("numpy", "torch", "mujoco", "asv", "asv_runner", "scipy", "multiprocessing")
PROBE = """
import json, sys
import pytest_perfgate.plugin.hooks
after_plugin = sorted(m for m in HEAVY if m in sys.modules)
from pytest_perfgate.history import machine_id
meta = machine_id.collect_metadata(None)
print(json.dumps({"after_plugin": after_plugin,
                  "after_metadata": sorted(m for m in HEAVY if m in sys.modules),
                  "meta": meta}))
"""


@pytest.mark.slow  # a fresh interpreter
def test_plugin_import_and_live_metadata_leave_heavy_modules_unimported() -> None:
    """In a fresh interpreter: numpy, torch, mujoco, asv, multiprocessing... stay unloaded
    after importing the plugin and collecting the live machine's metadata (versions come
    from distribution metadata, never from importing the package)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{PROBE}"], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    got = json.loads(out.splitlines()[-1])
    assert got["after_plugin"] == [] and got["after_metadata"] == [], got
    meta = got["meta"]
    assert meta["cpu_logical"] >= 1 and meta["affinity_count"] >= 1
    assert meta["python"].count(".") == 2
    assert set(meta["versions"]) == set(machine_id.VERSIONED)
    assert meta["versions"]["pytest"] == pytest.__version__


def test_corrupt_kernel_lists_degrade_to_fallbacks(tmp_path: Path) -> None:
    put(tmp_path, "proc/cpuinfo", CPUINFO)  # 8 processor blocks
    put(tmp_path, "sys/devices/system/cpu/online", "0-7,oops\n")
    put(tmp_path, "proc/self/status", "Cpus_allowed_list:\t3-1\n")
    meta = collect_metadata(None, root=tmp_path, versions={})
    assert meta["cpu_logical"] == 8  # from /proc/cpuinfo, not the corrupt online list
    assert meta["affinity"] is None and meta["affinity_count"] is None
    put(tmp_path, "sys/devices/system/cpu/online", "0-2,5\n")
    put(tmp_path, "proc/self/status", "Cpus_allowed_list:\t0-2,5,7-8\n")
    meta = collect_metadata(None, root=tmp_path, versions={})
    assert (meta["cpu_logical"], meta["affinity"], meta["affinity_count"]) == (4, "0-2,5,7-8", 6)


def test_fingerprint_keys_on_comparability_only(box: Path) -> None:
    meta = collect_metadata("ci-4core", root=box, versions=VERSIONS)
    fp = fingerprint(meta)
    assert len(fp) == 12 and fp == fingerprint(dict(meta))
    # volatile, or the environment (history/environment.py: named in verdicts, never a
    # new history)
    volatile = {**meta, "governor": "powersave", "turbo": False, "kernel": "6.2",
                "python": "3.12.1", "versions": {**VERSIONS, "asv": "0.7",
                                                 "mujoco-core": "4.0.2"}}
    assert fingerprint(volatile) == fp
    for change in ({"machine": "other"}, {"affinity": "0-1"}, {"cgroup_cpu_quota": 2.0},
                   {"numa_nodes": 1}, {"cpu_model": "Xeon"}, {"cpu_logical": 16}):
        assert fingerprint({**meta, **change}) != fp, change


def test_describe_mismatch_renders_what_changed(box: Path) -> None:
    a = fingerprint_fields(collect_metadata("ci", root=box, versions=VERSIONS))
    b = dict(a, numa_nodes=1, affinity="0-1")
    assert describe_mismatch(a, b) == f"affinity {a['affinity']} -> 0-1, numa_nodes 2 -> 1"
    c = dict(a, cpu_model="Intel Xeon")
    assert describe_mismatch(a, c) == ("cpu_model 'AMD EPYC 7K62 48-Core Processor' -> "
                                       "'Intel Xeon'")
    assert describe_mismatch(a, a) == "nothing (same fields)"


def test_asv_machine_json(box: Path) -> None:
    meta = collect_metadata("ci-4core", root=box, versions=VERSIONS)
    assert asv_machine_json(meta) == {
        "machine": "ci-4core", "os": "Linux", "arch": meta["arch"],
        "cpu": "AMD EPYC 7K62 48-Core Processor", "num_cpu": "8",
        "ram": "16GiB", "version": 1}


def test_asv_machine_json_stays_put_across_kernel_updates_and_boots(box: Path) -> None:
    """asv draws one line per distinct set of these fields: a kernel update or MemTotal
    moving by a few KiB between boots must not split a machine's history."""
    meta = collect_metadata("ci-4core", root=box, versions=VERSIONS)
    later = dict(meta, kernel="6.1.99-other", mem_total=meta["mem_total"] + 4096)
    assert asv_machine_json(later) == asv_machine_json(meta)
    assert asv_machine_json(dict(meta, mem_total=None))["ram"] == ""

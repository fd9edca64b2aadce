"""Runs inside the QEMU guest (PID 1's child): exercise NUMA discovery, binding and workers.

It reports facts, not verdicts: one line ``PERFGATE_NUMA_RESULT <json>`` on stdout, which
tests/test_numa_qemu.py parses and asserts on (so a failure shows the whole picture). Any
exception is reported in the same line under "error" with its traceback.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import sys
import time
import traceback
import warnings

MARKER = "PERFGATE_NUMA_RESULT "
T0 = time.monotonic()


def _elapsed() -> float:
    return round(time.monotonic() - T0, 2)


def _children(pid: int) -> list[str]:
    """Live processes whose parent is ``pid``, as "pid:state:cmdline"."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(f"{d}:{fields[0]}:{cmd[:120]}")
    return out


def _offnode_lines(pid: int, node: int | None) -> list[str]:
    """numa_maps lines of ``pid`` with anonymous pages and pages off ``node`` (diagnostics:
    these are what NumaMapsProof counts against the bound node)."""
    try:
        with open(f"/proc/{pid}/numa_maps") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        return [f"unreadable: {exc}"]
    keep = [ln for ln in lines if " anon=" in ln
            and any(t[:1] == "N" and "=" in t and t[1:].split("=")[0] != str(node)
                   for t in ln.split()[2:])]
    return keep[:12]


def run(res: dict) -> None:
    from pytest_perfgate.placement import cpus, numa
    from pytest_perfgate.placement.launchers import NumaWorkers
    from pytest_perfgate.placement.workers import Timeouts, WorkerCrashed, WorkerGroup, WorkerSpec

    res["timings"]["imports_s"] = _elapsed()
    topo = numa.discover("/sys", "/proc")
    usable_cpus = cpus.usable_cpus()
    res["topology"] = [{"id": n.id, "cpus": list(n.cpus), "has_memory": n.has_memory,
                        "allowed": n.allowed} for n in topo.nodes]
    res["describe"] = topo.describe()
    res["mems_allowed"] = None if topo.mems_allowed is None else list(topo.mems_allowed)
    res["usable_cpus"] = list(usable_cpus)
    res["usable_nodes"] = [n.id for n in topo.usable_nodes(usable_cpus)]
    before = numa.get_mempolicy()
    res["parent_policy_before"] = str(before)

    # Binding this thread directly: a CPU-less node with memory works, a memoryless one not.
    direct: dict = {}
    memory_only = [n.id for n in topo.nodes if n.has_memory and not n.cpus]
    memoryless = [n.id for n in topo.nodes if not n.has_memory]
    if memory_only:
        node = memory_only[0]
        ok = numa.bind_memory([node])
        policy = str(numa.get_mempolicy())
        blob = mmap.mmap(-1, 16 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        # Its own VMA (no merge with a neighbour: the flag differs) and 4 kB pages.
        blob.madvise(mmap.MADV_NOHUGEPAGE)
        blob[::4096] = b"\x01" * ((16 << 20) // 4096)
        restored = numa.set_mempolicy(before)
        # Only this mapping's line: the whole process's totals move on their own (khugepaged
        # collapses sparse heap ranges into huge pages on other nodes meanwhile).
        ptr = ctypes.c_char.from_buffer(blob)
        addr = ctypes.addressof(ptr)
        del ptr
        with open("/proc/self/numa_maps") as f:
            line = next((ln for ln in f if int(ln.split()[0], 16) == addr), "")
        direct["memory_only"] = {"node": node, "bound": ok, "policy": policy,
                                 "restored": restored, "line": line.strip(),
                                 "kb": numa.parse_numa_maps(line).anon_kb}
        blob.close()
    if memoryless:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ok = numa.bind_memory([memoryless[0]])
        direct["memoryless"] = {"node": memoryless[0], "bound": ok,
                                "policy_after": str(numa.get_mempolicy()),
                                "warnings": [str(w.message) for w in caught]}
        numa.set_mempolicy(before)
    res["direct"] = direct

    # Explicit requests for unusable nodes are errors naming the rule.
    launcher = NumaWorkers(Timeouts(start=100.0, step=60.0))
    refused = {}
    for n in topo.nodes:
        if n.id not in res["usable_nodes"]:
            try:
                launcher.plan(len(res["usable_nodes"]) or 1, nodes=[n.id])
                refused[str(n.id)] = None
            except ValueError as exc:
                refused[str(n.id)] = str(exc)
    res["explicit_unusable"] = refused
    res["plan"] = [[node, list(c), share] for node, c, share in
                   launcher.plan(2 * max(1, len(res["usable_nodes"])))]

    # One worker per usable node, each touching 32 MiB after placement.
    t = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            group = launcher.start("guest_workload:make",
                                   total_batch=2 * max(1, len(res["usable_nodes"])),
                                   kwargs={"mib": 32})
            res["timings"]["start_s"] = round(time.monotonic() - t, 2)
            res["parent_policy_after_start"] = str(numa.get_mempolicy())
            res["parent_affinity_after_start"] = sorted(os.sched_getaffinity(0))
            t = time.monotonic()
            placements = group.collect_proof()
            res["placements"] = [p.as_dict() for p in placements]
            res["report"] = group.report_lines()
            window = group.run_window(1.0)
            res["window"] = {"transitions": window.transitions, "calls": window.calls,
                             "streams": window.streams}
            res["timings"]["proof_and_window_s"] = round(time.monotonic() - t, 2)
            res["worker_pids"] = group.pids
            res["offnode_maps"] = {str(p.index): _offnode_lines(p.pid, p.node)
                                   for p in placements}
        finally:
            launcher.close()
    res["warnings"] = [str(w.message) for w in caught]
    res["exitcodes"] = group.exitcodes

    # Binding, not first-touch locality: a worker on the memoryless node's CPU, bound to
    # the CPU-less node. Local allocation would put its pages elsewhere.
    memory_only = [n.id for n in topo.nodes if n.has_memory and not n.cpus]
    cpus_without_memory = [c for n in topo.nodes if not n.has_memory for c in n.cpus]
    if memory_only and cpus_without_memory:
        from pytest_perfgate.placement.oom import read_node_memory
        node = memory_only[0]
        res["node_memory_before_cross"] = str(read_node_memory(node))
        spec = WorkerSpec("guest_workload:make", cpus=(cpus_without_memory[0],),
                          node=node, kwargs={"mib": 32, "num_envs": 1})
        t = time.monotonic()
        with WorkerGroup([spec], Timeouts(start=100.0, step=60.0)) as cross:
            res["cross"] = cross.collect_proof()[0].as_dict()
        res["cross"]["exitcode"] = cross.exitcodes[0]
        res["timings"]["cross_s"] = round(time.monotonic() - t, 2)

        # A worker strictly bound to that node asking for more than the node holds: the OOM
        # killer ends it, and the error must say so for certain (not guess).
        mem = read_node_memory(node)
        assert mem is not None, f"node {node} has no readable meminfo"
        spec = WorkerSpec("guest_workload:make", cpus=(cpus_without_memory[0],), node=node,
                          kwargs={"mib": mem.total_kb // 1024 + 64, "oom_victim": True})
        t = time.monotonic()
        try:
            with WorkerGroup([spec], Timeouts(start=100.0, step=60.0)):
                res["oom"] = {"error": None}
        except WorkerCrashed as exc:
            res["oom"] = {"error": str(exc), "node": node}
        res["timings"]["oom_s"] = round(time.monotonic() - t, 2)
    time.sleep(0.2)
    res["leftover_children"] = [c for c in _children(os.getpid())
                                if "resource_tracker" not in c]


def main() -> int:
    res: dict = {"timings": {}, "error": None, "python": sys.version.split()[0],
                 "kernel": os.uname().release}
    try:
        with open("/proc/uptime") as f:
            res["timings"]["boot_s"] = float(f.read().split()[0])
        run(res)
    except BaseException as exc:
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()
    res["timings"]["guest_total_s"] = _elapsed()
    line = MARKER + json.dumps(res, sort_keys=True, default=str) + "\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    return 1 if res["error"] else 0


if __name__ == "__main__":
    sys.exit(main())

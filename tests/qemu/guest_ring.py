"""Runs inside the QEMU guest: a ring pair with two collectors, each bound to its own node.

Started by /init when the kernel command line says ``perfgate_guest=guest_ring``. It
reports facts, not verdicts: one line ``PERFGATE_NUMA_RESULT <json>`` on stdout, which
tests/test_numa_qemu.py parses and asserts on. Per side: the placement the side read back
itself, its /proc/<pid>/status ``Cpus_allowed_list`` / ``Mems_allowed_list``, its numa_maps
(policies, anonymous pages per node) and the pages per node of every ring segment it maps;
then the windows, each collector's rate, every ring's stats, exit codes, and what is left
(children, /dev/shm segments). Any exception is reported under "error" with its traceback.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import warnings

from guest_numa import MARKER, _children, _elapsed

COLLECTOR_MIB = 16  # what each collector touches after placement (guest_workload)
WINDOWS, WINDOW_S = 2, 1.5


def _status(pid: int) -> dict[str, str]:
    """The placement lines of /proc/<pid>/status (Mems_allowed_list is the cpuset's
    memory nodes, not the memory policy: docs/design.md §4)."""
    keep = ("Cpus_allowed_list", "Mems_allowed_list")
    with open(f"/proc/{pid}/status") as f:
        pairs = (ln.split(":", 1) for ln in f if ":" in ln)
        return {k: v.strip() for k, v in pairs if k in keep}


def _segment_pages(pid: int, names: list[str]) -> dict[str, dict[str, int]]:
    """kB per node of each named shared-memory segment mapped by ``pid`` (numa_maps lines
    ``<addr> <policy> file=/dev/shm/<name> ... N<node>=<pages> kernelpagesize_kB=K``)."""
    out: dict[str, dict[str, int]] = {}
    with open(f"/proc/{pid}/numa_maps") as f:
        for line in f:
            name = next((n for n in names if n in line), None)
            if name is None:
                continue
            kv = dict(t.split("=", 1) for t in line.split()[2:] if "=" in t)
            page_kb = int(kv.get("kernelpagesize_kB", "4"))
            per = out.setdefault(name, {})
            for k, v in kv.items():
                if k[:1] == "N" and k[1:].isdigit():
                    per[k[1:]] = per.get(k[1:], 0) + int(v) * page_kb
    return out


def _other_policy_lines(pid: int, placed: dict) -> list[str]:
    """numa_maps lines whose policy is not the side's own (diagnostics: a library may mbind
    its own buffers, e.g. OpenBLAS's MPOL_PREFERRED-local ones)."""
    own = placed.get("mempolicy")
    with open(f"/proc/{pid}/numa_maps") as f:
        return [ln.strip() for ln in f if ln.split()[1:2] != [own]][:8]


def run(res: dict) -> None:
    from pytest_perfgate.placement import cpus, numa
    from pytest_perfgate.ring.layout import RingSpec
    from pytest_perfgate.ring.pair import RingPair

    res["timings"]["imports_s"] = _elapsed()
    topo = numa.discover()
    usable = topo.usable_nodes(cpus.usable_cpus())
    res["usable_nodes"] = [n.id for n in usable]
    res["node_cpus"] = {str(n.id): list(n.cpus) for n in topo.nodes}
    if len(usable) < 3:
        raise RuntimeError(f"need 3 usable nodes (2 collectors, 1 learner): {topo.describe()}")
    learner_node, col_nodes = usable[0], [n.id for n in usable[-2:]]
    res["collector_nodes"] = col_nodes
    res["learner_cpus"] = list(learner_node.cpus)
    spec = RingSpec(num_envs=64, obs_shape=(64,), action_shape=(8,), capacity=16)
    res["ring_slot_bytes"] = spec.layout()[1]
    res["parent_policy_before"] = str(numa.get_mempolicy())
    res["parent_affinity_before"] = sorted(os.sched_getaffinity(0))
    pair = RingPair(spec, collector="guest_workload:ring_collector",
                    learner="guest_workload:ring_learner", collectors=2,
                    collector_nodes=col_nodes,
                    learner_cpus=cpus.format_cpus(learner_node.cpus),
                    collector_kwargs={"mib": COLLECTOR_MIB}, start_timeout=300.0,
                    snap_timeout=120.0)
    t = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            pair.start()
            res["timings"]["start_s"] = round(time.monotonic() - t, 2)
            res["parent_policy_after_start"] = str(numa.get_mempolicy())
            res["parent_affinity_after_start"] = sorted(os.sched_getaffinity(0))
            t = time.monotonic()
            res["windows"] = [{"transitions": w.transitions, "wall_s": round(w.wall_s, 3),
                               "streams": w.streams}
                              for w in (pair.run_window(WINDOW_S) for _ in range(WINDOWS))]
            res["timings"]["windows_s"] = round(time.monotonic() - t, 2)
            meta = pair.metadata()["ring_pair"]
            res["rates"] = meta["collector_env_steps_per_s"]
            res["learner_samples_per_s"] = meta["learner_samples_per_s"]
            res["rings"] = meta["rings"]
            names = [r.name for r in pair.rings]
            res["ring_names"] = names
            res["sides"] = [{"side": side, "pid": pid, "placement": placed,
                             "status": _status(pid),
                             "numa_maps": (m.as_dict() if (m := numa.read_numa_maps(pid))
                                           is not None else None),
                             "segments": _segment_pages(pid, names),
                             "other_policy_lines": _other_policy_lines(pid, placed)}
                            for side, pid, placed in zip(pair.names, pair.pids,
                                                         pair.placements, strict=True)]
        finally:
            pair.close()
    res["notes"] = pair.notes
    res["warnings"] = [str(w.message) for w in caught]
    res["exitcodes"] = pair.exitcodes
    time.sleep(0.2)
    res["leftover_children"] = [c for c in _children(os.getpid())
                                if "resource_tracker" not in c]
    res["leftover_segments"] = [f for f in os.listdir("/dev/shm")
                                if f.startswith("perfgate_ring_")]


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
    sys.stdout.write(MARKER + json.dumps(res, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
    return 1 if res["error"] else 0


if __name__ == "__main__":
    sys.exit(main())

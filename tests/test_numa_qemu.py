"""NUMA placement on an emulated multi-node machine (QEMU, software emulation).

The guest has 4 CPUs over 5 NUMA nodes:

    node 0: CPU 0, 384 MiB      node 3: CPU 3, no memory  (memoryless: not usable)
    node 1: CPU 1, 256 MiB      node 4: no CPU, 512 MiB   (CPU-less: not usable)
    node 2: CPU 2, 256 MiB

Node 4 is sized to hold the whole unpacked initramfs plus the workers bound to it: the guest
kernel puts the initramfs's pages (unswappable) on whichever nodes it likes at boot, and a
node that only sometimes has room made the test fail at random (the cross-node worker was
OOM-killed). The test checks that margin before booting. A last scenario fills node 4 on
purpose and asserts the worker's error says, for certain, that the OOM killer ended it.

It boots the Debian cloud kernel with an initramfs (tests/qemu/build_initramfs.py) carrying
busybox, this Python and the code under test; tests/qemu/guest_numa.py discovers the
topology, starts one NumaWorkers worker per usable node (each touching 32 MiB after
placement), reads every worker's /proc/<pid>/numa_maps and prints one JSON line that this
test asserts on. KVM is not used (guests hang under KVM on these machines): TCG only.

A second boot of the same image (kernel parameter ``perfgate_guest=guest_ring``) runs
tests/qemu/guest_ring.py: a ring pair with two collectors, ``collector_nodes=[1, 2]``, the
learner on node 0's CPU, and checks each collector's affinity, memory policy, anonymous
pages and ring pages, and that the learner drained both rings.

Needs the Debian packages qemu-system-x86, linux-image-cloud-amd64 and busybox-static;
without them the tests are skipped, naming what is missing (a failure instead when
PERFGATE_REQUIRE_QEMU=1, for a CI that installed them). About 25 s each here.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import load_file

from pytest_perfgate.placement.cpus import format_cpus
from pytest_perfgate.placement.numa import NumaMapsProof

HERE = Path(__file__).resolve().parent
APT = "apt-get install -y qemu-system-x86 linux-image-cloud-amd64 busybox-static"
MARKER = "PERFGATE_NUMA_RESULT "
QEMU_TIMEOUT_S = 160.0  # the whole test must stay under 3 minutes
# (node id, CPUs, memory in MiB or None for a memoryless node)
NODES = [(0, [0], 384), (1, [1], 256), (2, [2], 256), (3, [3], None), (4, [], 512)]
USABLE, MEMORYLESS, CPULESS = [0, 1, 2], 3, 4
WORKER_MIB = 32  # what guest_workload.make touches in each worker (set in guest_numa.py)
# What node 4 must hold besides the unpacked initramfs: a worker (interpreter ~45 MiB +
# WORKER_MIB), the 16 MiB direct-binding buffer, the node's own page structs (~1.6%) and
# kernel slack.
NODE4_NEEDS_MIB = 45 + WORKER_MIB + 16 + 16 + 64

pytestmark = pytest.mark.slow


def _load_builder():
    return load_file("perfgate_qemu_builder", HERE / "qemu" / "build_initramfs.py")


def _skip(what: str) -> None:
    msg = f"emulated NUMA machine unavailable: {what} is missing; install it with `{APT}` (Debian)"
    if os.environ.get("PERFGATE_REQUIRE_QEMU") == "1":  # CI that installed them: no skipping
        pytest.fail(msg + " (PERFGATE_REQUIRE_QEMU=1)")
    pytest.skip(msg)


def _find_kernel() -> str:
    env = os.environ.get("PERFGATE_QEMU_KERNEL")
    cands = [env] if env else sorted(
        glob.glob("/boot/vmlinuz-*-cloud-amd64"),
        key=lambda p: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", p)])
    for k in reversed(cands):
        if k and os.path.isfile(k) and os.access(k, os.R_OK):
            return k
    _skip("a readable cloud kernel /boot/vmlinuz-*-cloud-amd64 (linux-image-cloud-amd64)")
    raise AssertionError("unreachable")


def qemu_command(qemu: str, kernel: str, initrd: str, guest: str | None = None) -> list[str]:
    """``guest``: the guest script /init runs (tests/qemu/build_initramfs.py), by default
    guest_numa."""
    total = sum(m for _, _, m in NODES if m)
    cmd = [qemu, "-machine", "q35", "-accel", "tcg,thread=multi", "-cpu", "max",
           "-m", f"{total}M", "-smp", f"{sum(len(c) for _, c, _ in NODES)},"
           f"sockets={sum(len(c) for _, c, _ in NODES)},cores=1,threads=1"]
    for nid, _cpus, mib in NODES:
        if mib:
            cmd += ["-object", f"memory-backend-ram,id=mem{nid},size={mib}M",
                    "-numa", f"node,nodeid={nid},memdev=mem{nid}"]
        else:
            cmd += ["-numa", f"node,nodeid={nid}"]
    for nid, cpus, _ in NODES:
        for cpu in cpus:  # one CPU per socket: socket-id == CPU index
            cmd += ["-numa", f"cpu,node-id={nid},socket-id={cpu}"]
    append = "console=ttyS0 quiet panic=-1" + (f" perfgate_guest={guest}" if guest else "")
    return [*cmd, "-kernel", kernel, "-initrd", initrd, "-append", append,
            "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio"]


def _run_qemu(cmd: list[str], timeout_s: float = QEMU_TIMEOUT_S) -> tuple[str, float]:
    t = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        tail = out.decode(errors="replace")[-4000:]
        pytest.fail(f"the QEMU guest did not finish within {timeout_s:.0f} s "
                    f"(killed). Command: {' '.join(cmd)}\n--- serial console tail ---\n{tail}")
    finally:
        if proc.poll() is None:  # pragma: no cover - belt and braces
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out.decode(errors="replace"), time.monotonic() - t


def _result(console: str, cmd: list[str], rc: int | None = None) -> dict:
    for line in console.splitlines():
        i = line.find(MARKER)
        if i >= 0:
            return json.loads(line[i + len(MARKER):].strip())
    pytest.fail(f"the guest printed no {MARKER.strip()} line (qemu exit {rc}). "
                f"Command: {' '.join(cmd)}\n--- serial console tail ---\n{console[-4000:]}")
    raise AssertionError("unreachable")


def _console_tail(console: str, lines: int = 40) -> str:
    """The console's last lines without the (long) result line: kernel messages such as the
    OOM killer's are what explains a failing guest."""
    keep = [ln for ln in console.splitlines() if MARKER not in ln]
    return "\n".join(keep[-lines:])


def _image() -> tuple[str, str, Path, str]:
    """(qemu, kernel, initramfs, how it was got) or a skip naming what is missing."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        _skip(f"a Linux x86_64 host (this is {sys.platform}/{platform.machine()}; the guest "
              "runs this interpreter)")
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        _skip("qemu-system-x86_64 (package qemu-system-x86)")
        raise AssertionError("unreachable")
    kernel = _find_kernel()
    builder = _load_builder()
    t = time.monotonic()
    try:
        initrd, built = builder.build()
    except builder.Missing as exc:
        _skip(str(exc))
    return qemu, kernel, initrd, f"{'built' if built else 'cached'} in {time.monotonic() - t:.1f} s"


def test_numa_workers_on_emulated_multinode_machine() -> None:
    qemu, kernel, initrd, got = _image()

    unpacked_mib = len(gzip.decompress(initrd.read_bytes())) / 2**20
    node4_mib = dict((n, m) for n, _, m in NODES)[CPULESS]
    assert unpacked_mib + NODE4_NEEDS_MIB <= node4_mib, (
        f"the initramfs unpacks to {unpacked_mib:.0f} MiB: node {CPULESS} ({node4_mib} MiB) "
        "could fill up with it and OOM-kill the cross-node worker at random; enlarge the node "
        "in NODES or trim the image")

    cmd = qemu_command(qemu, kernel, str(initrd))
    console, qemu_s = _run_qemu(cmd)
    res = _result(console, cmd)
    timings = res.get("timings", {})
    print(f"initramfs {initrd.name} ({got}); qemu ran {qemu_s:.1f} s; guest timings {timings}")
    print(f"initramfs unpacks to {unpacked_mib:.0f} MiB; node {CPULESS} before the cross-node "
          f"worker: {res.get('node_memory_before_cross')}; OOM scenario: {res.get('oom')}")
    print("\n".join(res.get("describe", []) + res.get("report", [])))

    tail = f"\n--- serial console tail ---\n{_console_tail(console)}"
    assert res["error"] is None, (f"the guest failed: {res['error']}\n{res.get('traceback')}"
                                  + tail)
    assert "PERFGATE_GUEST_EXIT=0" in console, tail

    # Topology as emulated, and the usable-node rule.
    topo = {n["id"]: n for n in res["topology"]}
    assert sorted(topo) == [n for n, _, _ in NODES], res["describe"]
    for nid, cpus, mib in NODES:
        assert topo[nid]["cpus"] == cpus, res["describe"]
        assert topo[nid]["has_memory"] is bool(mib), res["describe"]
    assert res["usable_cpus"] == [0, 1, 2, 3]
    assert res["usable_nodes"] == USABLE, res["describe"]
    for nid in (MEMORYLESS, CPULESS):
        msg = res["explicit_unusable"][str(nid)]
        assert msg and "not usable" in msg and f"[{nid}]" in msg, msg
    assert res["plan"] == [[n, [n], 2] for n in USABLE]

    # Direct binding: a CPU-less node with memory can be bound; a memoryless one cannot.
    mem_only = res["direct"]["memory_only"]
    assert mem_only["node"] == CPULESS and mem_only["bound"] is True
    assert mem_only["policy"] == f"bind:{CPULESS}" and mem_only["restored"] is True
    kb = {int(k): v for k, v in mem_only["kb"].items()}
    assert kb.get(CPULESS, 0) >= 16 * 1024 and sum(kb.values()) == kb[CPULESS], mem_only
    memless = res["direct"]["memoryless"]
    assert memless["node"] == MEMORYLESS and memless["bound"] is False, memless
    assert memless["policy_after"] == "default"
    assert len(memless["warnings"]) == 1, memless

    # One worker per usable node, pinned and bound, its pages on its node.
    placements = res["placements"]
    assert [p["node"] for p in placements] == USABLE
    for p in placements:
        node = p["node"]
        assert p["requested_cpus"] == str(node) and p["actual_cpus"] == str(node), p
        assert p["pinned"] is True and p["membound"] is True and p["verified"] is True, p
        assert p["mempolicy"] == f"bind:{node}", p
        maps = p["numa_maps"]
        assert maps is not None, f"worker {p['worker']}: no numa_maps proof"
        assert maps["policies"] == [f"bind:{node}"], maps
        proof = NumaMapsProof(tuple(maps["policies"]),
                              {int(k): v for k, v in maps["anon_kb"].items()})
        share = proof.share_on([node])
        assert share is not None and share > 0.9, (
            f"worker {p['worker']} bound to node {node}: only {share:.1%} of its anonymous "
            f"pages are there: {maps['anon_kb']}; off-node mappings: "
            f"{res['offnode_maps'][str(p['worker'])]}")
        assert proof.anon_kb[node] >= WORKER_MIB * 1024, maps  # the touched buffer is there
        assert not set(proof.anon_kb) & {MEMORYLESS}, maps
    assert res["warnings"] == []

    # A worker on CPU 3 (memoryless node 3) bound to node 4 (no CPUs): its pages are on
    # node 4, which no CPU is local to, so binding (not first-touch locality) put them there.
    cross = res["cross"]
    assert cross["requested_cpus"] == str(MEMORYLESS) and cross["pinned"] is True, cross
    assert cross["node"] == CPULESS and cross["membound"] is True, cross
    assert cross["mempolicy"] == f"bind:{CPULESS}", cross
    kb = {int(k): v for k, v in cross["numa_maps"]["anon_kb"].items()}
    share = NumaMapsProof(tuple(cross["numa_maps"]["policies"]), kb).share_on([CPULESS])
    assert share is not None and share > 0.9 and kb[CPULESS] >= WORKER_MIB * 1024, kb
    assert cross["exitcode"] == 0

    # Filling node 4 on purpose: the OOM killer ends the worker, and the error says so for
    # certain (from the kernel log), with the node and its memory, and what to do.
    oom = res["oom"]["error"]
    assert oom is not None, "a worker asking for more than node 4 holds was not killed"
    assert re.fullmatch(
        r"worker 0 \(pid \d+\) was killed by the OOM killer during the start while bound to "
        rf"node {CPULESS} \(\d+ MiB, \d+ MiB free before the start\): bind it to a node with "
        r"room, or use mempolicy='preferred' \(the kernel logged: .*Killed process \d+ .*\)",
        oom), oom + tail

    # The parent is restored exactly, the window ran, and the workers are gone.
    assert res["parent_policy_before"] == res["parent_policy_after_start"] == "default"
    assert res["parent_affinity_after_start"] == [0, 1, 2, 3]
    assert res["window"]["streams"] == 3 and res["window"]["transitions"] > 0
    assert res["exitcodes"] == [0, 0, 0]
    assert res["leftover_children"] == []


RING_TIMEOUT_S = 300.0  # three spawn sides importing numpy under emulation, two windows
RING_NODES = [1, 2]  # guest_ring: the collectors on the last two usable nodes
COLLECTOR_MIB = 16  # what each collector touches after placement (guest_ring.py)


def _kb(d: dict[str, int]) -> str:
    return ", ".join(f"N{k}={v} kB" for k, v in sorted(d.items())) or "none"


def test_ring_pair_collectors_bound_to_their_own_nodes() -> None:
    """Two collectors with ``collector_nodes=[1, 2]``, the learner on node 0's CPU: each
    collector runs on its node's CPU under bind:<node>, its anonymous pages and its ring's
    pages are on that node, and the learner drained both rings."""
    qemu, kernel, initrd, got = _image()
    cmd = qemu_command(qemu, kernel, str(initrd), guest="guest_ring")
    console, qemu_s = _run_qemu(cmd, RING_TIMEOUT_S)
    res = _result(console, cmd)
    print(f"initramfs {initrd.name} ({got}); qemu ran {qemu_s:.1f} s; guest timings "
          f"{res.get('timings')}")
    rates = res.get("rates") or []
    for i, s in enumerate(res.get("sides", [])):
        p, maps = s["placement"], s["numa_maps"] or {}
        rate = f"; {rates[i]:.0f} env-steps/s" if i < len(rates) else ""
        print(f"{s['side']} (pid {s['pid']}): node {p['node']}, Cpus_allowed_list "
              f"{s['status'].get('Cpus_allowed_list')}, Mems_allowed_list "
              f"{s['status'].get('Mems_allowed_list')}, mempolicy {p['mempolicy']}, numa_maps "
              f"policies {maps.get('policies')}, anonymous {_kb(maps.get('anon_kb', {}))}; "
              + "; ".join(f"ring {res['ring_names'].index(n)} {_kb(kb)}"
                          for n, kb in sorted(s["segments"].items())) + rate
              + f"; mappings under another policy: {s['other_policy_lines']}")
    for i, r in enumerate(res.get("rings", [])):
        print(f"ring {i}: pushed {r['pushed']}, consumed {r['consumed']}, pops {r['pops']}, "
              f"overwritten {r['overwritten']}, learner waited {r['consumer_wait_s']:.2f} s")
    print(f"windows {res.get('windows')}; learner {res.get('learner_samples_per_s', 0):.0f} "
          f"samples/s; notes {res.get('notes')}")

    tail = f"\n--- serial console tail ---\n{_console_tail(console)}"
    assert res["error"] is None, (f"the guest failed: {res['error']}\n{res.get('traceback')}"
                                  + tail)
    assert "PERFGATE_GUEST_EXIT=0" in console, tail
    assert res["usable_nodes"] == USABLE and res["collector_nodes"] == RING_NODES
    node_cpus = {nid: cpus for nid, cpus, _ in NODES}
    sides = {s["side"]: s for s in res["sides"]}
    assert sorted(sides) == ["collector 0", "collector 1", "learner"]
    names = res["ring_names"]
    slot_kb = res["ring_slot_bytes"] // 1024
    for i, node in enumerate(RING_NODES):
        s = sides[f"collector {i}"]
        p = s["placement"]
        # Pinned to the node's CPUs (derived from collector_nodes) and bound to the node.
        assert p["node"] == node and p["membound"] is True, p
        assert p["mempolicy"] == f"bind:{node}", p
        assert p["pinned"] is True and p["actual_cpus"] == node_cpus[node], p
        assert s["status"]["Cpus_allowed_list"] == format_cpus(node_cpus[node]), s["status"]
        # The cpuset's memory nodes (every node with memory), not the policy: numa_maps is
        # the proof.
        assert s["status"]["Mems_allowed_list"] == format_cpus(
            [nid for nid, _, mib in NODES if mib]), s["status"]
        maps = s["numa_maps"]
        assert maps is not None and maps["policies"][0] == f"bind:{node}", maps
        # numpy's OpenBLAS mbinds its own buffer MPOL_PREFERRED with no node ("local"); on
        # a collector pinned to its node's CPUs, local is that node. Nothing else differs.
        assert set(maps["policies"]) <= {f"bind:{node}", "local"}, maps
        for line in s["other_policy_lines"]:
            assert line.split()[1] == "local", line
            on = {t.split("=")[0][1:] for t in line.split()[2:] if re.match(r"N\d+=", t)}
            assert on <= {str(node)}, line
        proof = NumaMapsProof(tuple(maps["policies"]),
                              {int(k): v for k, v in maps["anon_kb"].items()})
        share = proof.share_on([node])
        assert share is not None and share > 0.9, (s["side"], maps["anon_kb"])
        assert proof.anon_kb[node] >= COLLECTOR_MIB * 1024, maps
        # Its own ring only, every page of it on its node.
        assert set(s["segments"]) == {names[i]}, s["segments"]
        kb = s["segments"][names[i]]
        assert set(kb) == {str(node)} and kb[str(node)] >= slot_kb // 2, (
            f"{s['side']} bound to node {node}: its ring's pages are on {_kb(kb)}")
    lrn = sides["learner"]
    assert lrn["placement"]["pinned"] is True and lrn["placement"]["actual_cpus"] == [0]
    assert lrn["status"]["Cpus_allowed_list"] == "0"
    assert set(lrn["segments"]) == set(names), lrn["segments"]  # it maps both rings

    # The learner drained both rings; each collector has its own rate.
    assert len(res["rings"]) == 2 and len(rates) == 2, res["rings"]
    for r, rate in zip(res["rings"], rates, strict=True):
        assert r["consumed"] > 0 and r["overwritten"] == 0, r
        assert 0 <= r["pushed"] - r["consumed"] <= r["capacity"], r  # block mode: bounded
        assert rate > 0, rates
    assert all(w["streams"] == 3 and w["transitions"] > 0 for w in res["windows"])
    assert res["warnings"] == [] and res["notes"] == [], (res["warnings"], res["notes"])

    # The parent is restored exactly, and nothing is left.
    assert res["parent_policy_before"] == res["parent_policy_after_start"] == "default"
    assert res["parent_affinity_before"] == res["parent_affinity_after_start"] == [0, 1, 2, 3]
    assert res["exitcodes"] == [0, 0, 0]
    assert res["leftover_children"] == [] and res["leftover_segments"] == []

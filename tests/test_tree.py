"""The workload is a process tree (core/tree.py): real child processes, generous margins.

No figure here depends on the machine's speed: each test compares what the tree counted
with what the same processes report about themselves, or with a floor far below it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from pytest_perfgate.core.load import LoadSample
from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.timing import phase
from pytest_perfgate.core.tree import MemorySample, PeakMemory, ProcessTree
from pytest_perfgate.core.window import RawWindow

SPIN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"
HOLD = ("import sys, time\nb = b'x' * {n}\nsys.stdout.write('ready\\n'); sys.stdout.flush()\n"
        "time.sleep({s})\n")


@pytest.fixture
def spinner():
    procs: list[subprocess.Popen[bytes]] = []

    def start(seconds: float = 30.0) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds)])
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def own_cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def test_a_window_counts_the_cpu_time_of_a_busy_child(spinner) -> None:
    child = spinner()
    time.sleep(0.2)
    src = LoopSource(lambda: time.sleep(0.005), 1)
    mine0, kid0 = time.process_time(), own_cpu(child.pid)
    w = src.run_window(0.6)
    mine, kid = time.process_time() - mine0, own_cpu(child.pid) - kid0
    assert kid > 0.02  # the child ran (a loaded machine still gives it that much)
    # what the window counted is this process plus the child, not this process alone
    assert w.cpu_s > mine + 0.5 * kid
    assert w.cpu_s < mine + kid + 0.05  # psutil ticks are 10 ms
    assert w.memory["processes"] >= 2


def test_a_reaped_child_still_counts() -> None:
    """A child the step starts and waits for is gone at the window's end: its CPU time is in
    the children times of its parent (RUSAGE_CHILDREN)."""
    def step() -> None:
        subprocess.run([sys.executable, "-c", SPIN.format(s=0.15)], check=True)

    src = LoopSource(step, 1)
    mine0 = time.process_time()
    w = src.run_window(0.3)
    mine = time.process_time() - mine0
    assert w.cpu_s > mine + 0.02


SERVER = """
import resource, subprocess, sys
for line in sys.stdin:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", {spin!r}], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    sys.stdout.write(f"{{used}}\\n"); sys.stdout.flush()
"""


def test_a_grandchild_reaped_by_a_child_counts_in_its_window() -> None:
    """A server process that runs and reaps a helper per request: the helper's CPU time
    moves into the server's children times, and the window that saw it counts it."""
    server = subprocess.Popen([sys.executable, "-c", SERVER.format(spin=SPIN.format(s=0.15))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    helpers: list[float] = []
    assert server.stdin is not None and server.stdout is not None

    def step() -> None:
        server.stdin.write("go\n")
        server.stdin.flush()
        helpers.append(float(server.stdout.readline()))

    try:
        src = LoopSource(step, 1)
        src.run_window(0.01)  # lists the server
        helpers.clear()
        w = src.run_window(0.4)
        assert sum(helpers) > 0.02
        assert w.cpu_s > 0.8 * sum(helpers)
    finally:
        server.kill()
        server.communicate()


def test_grandchildren_are_listed(tmp_path) -> None:
    code = (f"import subprocess, sys, time\n"
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
            f"open({str(tmp_path / 'pid')!r}, 'w').write(str(p.pid))\n"
            f"time.sleep(30)\n")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        for _ in range(200):
            if (tmp_path / "pid").exists() and (tmp_path / "pid").read_text():
                break
            time.sleep(0.05)
        grandchild = int((tmp_path / "pid").read_text())
        tree = ProcessTree()
        tree.refresh(force=True)
        assert tree.processes >= 3
        assert {parent.pid, grandchild} <= set(tree._members)
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()


def test_the_load_guard_does_not_take_the_childs_work_for_outside_load(spinner) -> None:
    """Outside load = machine busy cores minus the tree's: a probe that sees exactly the
    workload's cores busy (the child's included) leaves the window unspoiled."""
    child = spinner()
    time.sleep(0.2)

    class TreeProbe:
        """Busy cores = what this process and the child really used (psutil)."""
        def __init__(self) -> None:
            self.t0 = time.monotonic()

        def sample(self) -> LoadSample:
            used = time.process_time() + own_cpu(child.pid)
            return LoadSample(busy=int(used * 1000), total=int(time.monotonic() * 1000) * 2,
                              ncpu=2)

    cfg = MeasureConfig(windows=2, window_s=0.3, warmup_window_s=0.1, warmup_span=1,
                        warmup_max_s=0.2, stability_tol=float("inf"), load_limit=0.2)
    m = Meter(cfg, load_probe=TreeProbe()).measure(LoopSource(lambda: time.sleep(0.002), 1))
    assert m.remeasured == 0 and m.polluted_kept == 0
    assert all(w.other_load is not None and w.other_load < 0.2 for w in m.windows)
    assert m.cores > 0.02


def test_phases_count_the_children_busy_inside_them(spinner) -> None:
    child = spinner()
    time.sleep(0.2)

    def step() -> None:
        with phase("env_step"):
            time.sleep(0.01)

    kid0 = own_cpu(child.pid)
    w = LoopSource(step, 1).run_window(0.6)
    assert own_cpu(child.pid) - kid0 > 0.02  # the child ran meanwhile
    # this process sleeps in the phase; its cores there come from the child alone
    assert w.phases["env_step"].cores > 0.02


def test_memory_of_a_child_counts_in_the_peak() -> None:
    n = 150 * 2**20
    p = subprocess.Popen([sys.executable, "-c", HOLD.format(n=n, s=30)],
                         stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        w = LoopSource(lambda: time.sleep(0.005), 1).run_window(0.05)
        assert w.memory["peak_rss"] >= n
        assert w.memory["rss"] >= n
        assert w.memory["processes"] >= 2
        if os.path.exists("/proc/self/smaps_rollup"):
            assert w.memory["uss"] >= n  # the child's bytes are its own
    finally:
        p.kill()
        p.communicate()


def test_the_peak_is_this_measurements_not_the_processs() -> None:
    """A big allocation freed before the measurement starts is not its peak (Linux resets
    the high-water mark at the start)."""
    blob = b"y" * (300 * 2**20)
    del blob
    w = LoopSource(lambda: None, 1).run_window(0.02)
    if w.memory and sys.platform.startswith("linux"):
        assert w.memory["peak_rss"] < psutil.Process().memory_info().rss + 200 * 2**20


def test_peak_memory_keeps_the_largest_sample() -> None:
    peak = PeakMemory()
    assert peak.summary() == {}
    peak.add(MemorySample(rss=100, uss=60, pss=80, hwm=150, hwm_since_start=True, processes=2))
    peak.add(MemorySample(rss=90, uss=50, pss=70, hwm=120, hwm_since_start=True, processes=3))
    assert peak.summary() == {"peak_rss": 150, "rss": 90, "uss": 50, "pss": 70,
                              "processes": 3}
    lifetime = PeakMemory()  # a high-water mark that could not be reset is not this run's
    lifetime.add(MemorySample(rss=100, uss=0, pss=0, hwm=10**9, hwm_since_start=False,
                              processes=1))
    assert lifetime.summary() == {"peak_rss": 100, "rss": 100, "processes": 1}


def test_memory_travels_through_the_wire_and_adds_up_across_workers() -> None:
    a = RawWindow(10, 1.0, 1.0, memory={"peak_rss": 100, "rss": 90, "processes": 1})
    b = RawWindow(10, 1.0, 1.0, memory={"peak_rss": 50, "rss": 40, "processes": 2})
    assert RawWindow.from_wire(a.to_wire()) == a
    both = RawWindow.parallel([a, b], 1.0)
    assert both.memory == {"peak_rss": 150, "rss": 130, "processes": 3}
    assert RawWindow.from_wire({"transitions": 1, "wall_s": 1, "cpu_s": 1}).memory == {}

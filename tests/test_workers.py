"""Spawn workers with real processes: windows, placement, and every way a worker can fail.

The workloads below are module-level so spawn children can import them by reference. Each
failure test ends with a clear error and, checked by the autouse fixture, nothing running.
Margins are generous: a test asserts a deadline only where the alternative is a 60 s wait.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.timing import phase
from pytest_perfgate.placement import child
from pytest_perfgate.placement import cpus as _cpus
from pytest_perfgate.placement.launchers import NumaWorkers, PinnedWorkers, split_slices
from pytest_perfgate.placement.spec import (
    Placement,
    WorkerSpec,
    placement_failure,
    placement_line,
    placement_notes,
    render_placement,
    worker_warnings,
)
from pytest_perfgate.placement.workers import (
    PlacementError,
    Timeouts,
    WorkerCrashed,
    WorkerError,
    WorkerGroup,
    WorkerTimeout,
)

FAST = Timeouts(start=60.0, step=5.0, stop=2.0, term=1.0)
slow = pytest.mark.slow  # spawns worker processes
HERE = Path(__file__).parent


# ---- workloads (run inside spawn children) ----------------------------------------------
def spin(ms: float = 0.5, num_envs: int = 1) -> Callable[[], None]:
    def step() -> None:
        with phase("physics"):
            end = time.perf_counter() + ms / 1e3
            while time.perf_counter() < end:
                pass
    return step


def check_thread_env(expect: str) -> Callable[[], None]:
    got = os.environ.get("OMP_NUM_THREADS")
    if got != expect:
        raise AssertionError(f"OMP_NUM_THREADS={got!r} in the worker, expected {expect!r}")
    return spin()


def boom_in_setup() -> Callable[[], None]:
    raise ValueError("boom in setup")


def exit_in_setup() -> Callable[[], None]:
    os._exit(3)


def hang_in_setup() -> Callable[[], None]:
    time.sleep(600)
    raise AssertionError("unreachable")


def hang_in_step(ignore_sigterm: bool = False) -> Callable[[], None]:
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return lambda: time.sleep(600)


def boom_in_step() -> Callable[[], None]:
    def step() -> None:
        raise RuntimeError("physics exploded")
    return step


def not_a_step() -> int:
    return 42


# ---- harness -------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    yield
    # multiprocessing's resource tracker is a per-parent singleton that spawn starts and that
    # exits with the parent: not a worker, so not a leftover.
    kids = [p for p in psutil.Process().children(recursive=True)
            if "multiprocessing.resource_tracker" not in " ".join(_cmdline(p))]
    _, alive = psutil.wait_procs(kids, timeout=5)
    for p in alive:
        p.kill()
    assert not alive, f"leftover processes: {alive}"


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def two_cpus() -> tuple[int, int]:
    usable = _cpus.usable_cpus()
    if len(usable) < 2:
        pytest.skip("needs two usable CPUs")
    return usable[0], usable[1]


# ---- the happy path --------------------------------------------------------------------------
@slow
@pytest.mark.timing  # counts calls in a 0.3 s window and asserts no late window
def test_pinned_group_measures_synchronised_windows() -> None:
    a, b = two_cpus()
    specs = [WorkerSpec(spin, cpus=(a,), transitions=4),
             WorkerSpec(spin, cpus=(b,), transitions=4)]
    with WorkerGroup(specs, FAST) as g:
        t0 = time.monotonic()
        w = g.run_window(0.3)
        span = time.monotonic() - t0
        assert span >= 0.3  # the replies came after the whole window, not before its end
        assert w.streams == 2 and w.transitions == 4 * w.calls
        # Each call spins >= 0.5 ms and only calls finishing inside the window count: at
        # most 600 per worker (+1 straddling the start), at least some on a loaded machine.
        assert 10 < w.calls <= 2 * (600 + 1), w.calls
        assert w.phases["physics"].calls == w.calls  # phases cover exactly the counted calls
        assert 0 < w.cpu_s < 2 * 0.3 * 1.5  # two busy workers, never more than ~2 cores
        assert [p.actual_cpus for p in g.placements] == [(a,), (b,)]
        assert all(p.verified and p.pinned for p in g.placements)
        # PR_SET_PDEATHSIG took (prctl returned 0): no worker reports an orphan risk.
        assert [p.warnings for p in g.placements] == [(), ()] and g.notes == []
        lat = g.latency(5)
        assert [len(x) for x in lat] == [5, 5] and all(t > 0 for x in lat for t in x)
        m = Meter(MeasureConfig.smoke()).measure(g)
        assert m.steps_per_s > 0 and "physics" in m.phases
        lines = g.report_lines()
        assert lines[0] == (f"worker 0 pid {g.pids[0]}: cpus {a} -> {a}, node -, mempolicy "
                            f"{g.placements[0].mempolicy}, threads 1: verified")
        meta = g.metadata()
        assert meta["workers"][1]["actual_cpus"] == str(b) and meta["late_windows"] == 0
    assert g.exitcodes == [0, 0]  # stopped politely, not killed


@slow
def test_thread_cap_reaches_the_worker_and_parent_is_restored() -> None:
    a, b = two_cpus()
    aff, env = os.sched_getaffinity(0), os.environ.get("OMP_NUM_THREADS")
    spec = WorkerSpec(check_thread_env, cpus=(a, b), kwargs={"expect": "2"})
    with WorkerGroup([spec], FAST) as g:
        assert g.placements[0].threads == 2
    assert os.sched_getaffinity(0) == aff and os.environ.get("OMP_NUM_THREADS") == env


@slow
def test_factory_by_module_string() -> None:
    with WorkerGroup([WorkerSpec("test_workers:spin", kwargs={"ms": 0.1})], FAST) as g:
        assert g.run_window(0.1).calls > 0
    assert "unpinned" in g.notes[0]


@slow
def test_memory_bound_worker_proves_its_pages_landed_on_the_node() -> None:
    from pytest_perfgate.placement import numa

    nodes = numa.discover().usable_nodes(_cpus.usable_cpus())
    if not nodes or numa.get_mempolicy() is None:
        pytest.skip("no usable NUMA node or memory policy refused here")
    node = nodes[0]
    pol_before = numa.get_mempolicy()
    with WorkerGroup([WorkerSpec(spin, cpus=node.cpus, node=node.id)], FAST) as g:
        (p,) = g.collect_proof()
        assert p.membound is True and p.mempolicy == f"bind:{node.id}"
        assert p.proof is not None and f"bind:{node.id}" in p.proof["policies"]
        assert set(p.proof["anon_kb"]) == {str(node.id)}
    assert numa.get_mempolicy() == pol_before


# ---- failures ---------------------------------------------------------------------------------
@slow
def test_exception_in_setup_carries_the_worker_traceback() -> None:
    g = WorkerGroup([WorkerSpec(spin), WorkerSpec(boom_in_setup)], FAST)
    with pytest.raises(WorkerError) as info:
        g.start()
    msg = str(info.value)
    assert msg.startswith("worker 1 failed during the start: ValueError: boom in setup (in "
                          "start (calling factory <function boom_in_setup")
    assert "--- worker traceback ---" in msg
    assert 'raise ValueError("boom in setup")' in (info.value.worker_traceback or "")


@slow
def test_os_exit_in_setup_is_a_crash_with_its_exit_code() -> None:
    g = WorkerGroup([WorkerSpec(exit_in_setup)], FAST)
    with pytest.raises(WorkerCrashed) as info:
        g.start()
    (pid,) = g.pids
    assert str(info.value) == (f"worker 0 (pid {pid}) died during the start: exited with code "
                               "3; the workload crashed or was killed")


@slow
def test_sigkill_mid_window_is_detected_promptly() -> None:
    with WorkerGroup([WorkerSpec(spin), WorkerSpec(spin)], FAST) as g:
        pid = g.pids[1]
        killer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
        killer.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(WorkerCrashed) as info:
                g.run_window(60.0)
        finally:
            killer.join()
        elapsed = time.monotonic() - t0
    # Detection is through the sentinel; missing it would mean waiting out the 60 s window.
    assert elapsed < 20, elapsed
    # Not an OOM kill, and the message must not claim one (whether or not /dev/kmsg is
    # readable here).
    msg = str(info.value)
    assert msg.startswith(f"worker 1 (pid {pid}) was killed by SIGKILL during the window: the "
                          "workload crashed or something killed it ("), msg
    assert "OOM killer" not in msg


@slow
def test_hang_in_setup_times_out_then_is_killed() -> None:
    g = WorkerGroup([WorkerSpec(hang_in_setup)], Timeouts(start=2.0, stop=0.5, term=1.0))
    with pytest.raises(WorkerTimeout) as info:
        g.start()
    assert str(info.value) == ("worker(s) 0 did not finish the start in time (hang?); they were "
                               "terminated, then killed. Raise Timeouts(start=...) if the "
                               "workload is slow")
    assert g.exitcodes == [-signal.SIGTERM]


@slow
def test_hang_mid_window_times_out() -> None:
    with WorkerGroup([WorkerSpec(spin), WorkerSpec(hang_in_step)],
                     Timeouts(step=1.0, stop=0.5, term=1.0)) as g:
        with pytest.raises(WorkerTimeout) as info:
            g.run_window(0.2)
    assert str(info.value).startswith("worker(s) 1 did not finish the window in time (hang?)")
    assert "Timeouts(step=...)" in str(info.value)
    assert g.exitcodes == [0, -signal.SIGTERM]


@slow
def test_worker_ignoring_sigterm_is_killed() -> None:
    with WorkerGroup([WorkerSpec(hang_in_step, kwargs={"ignore_sigterm": True})],
                     Timeouts(step=1.0, stop=0.5, term=0.5)) as g:
        with pytest.raises(WorkerTimeout):
            g.run_window(0.1)
    assert g.exitcodes == [-signal.SIGKILL]


@slow
def test_exception_mid_window_carries_the_traceback() -> None:
    with WorkerGroup([WorkerSpec(boom_in_step)], FAST) as g:
        with pytest.raises(WorkerError) as info:
            g.run_window(0.1)
    assert str(info.value).startswith("worker 0 failed during the window: RuntimeError: physics "
                                      "exploded (in window)")
    assert 'raise RuntimeError("physics exploded")' in (info.value.worker_traceback or "")


def test_unpicklable_spec_is_refused_before_spawning() -> None:
    g = WorkerGroup([WorkerSpec(spin, kwargs={"ms": lambda: 1})], FAST)
    with pytest.raises(WorkerError) as info:
        g.start()
    assert str(info.value).startswith("worker 0: its WorkerSpec cannot be pickled for a spawn "
                                      "worker (")
    assert "lambda" in str(info.value)
    assert str(info.value).endswith("pass the factory as 'module:callable' and picklable kwargs")
    assert g.pids == []


@slow
def test_unimportable_factory_names_it() -> None:
    g = WorkerGroup([WorkerSpec("no_such_module_xyz:make")], FAST)
    with pytest.raises(WorkerError) as info:
        g.start()
    assert str(info.value).startswith(
        "worker 0 failed during the start: ModuleNotFoundError: No module named "
        "'no_such_module_xyz' (in start (importing factory 'no_such_module_xyz:make'))")


@slow
def test_factory_returning_a_non_callable() -> None:
    with pytest.raises(WorkerError) as info:
        WorkerGroup([WorkerSpec(not_a_step)], FAST).start()
    assert "returned 42; it must return a step() callable" in str(info.value)


def test_spec_validation_messages() -> None:
    with pytest.raises(ValueError) as info:
        WorkerSpec("spin")
    assert str(info.value) == "factory='spin': use 'package.module:callable'"
    with pytest.raises(ValueError) as info:
        WorkerSpec(spin, transitions=0)
    assert str(info.value) == ("transitions=0: pass the env-steps one step() call advances, a "
                               "positive int (e.g. num_envs)")
    with pytest.raises(ValueError) as info:
        WorkerSpec(spin, mempolicy="local")
    assert str(info.value) == "mempolicy='local': use 'bind', 'preferred' or 'interleave'"


@slow
def test_workers_die_with_their_parent(tmp_path: Path) -> None:
    # Workers hung inside step() never read their pipe: only PR_SET_PDEATHSIG can end them.
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {str(HERE)!r})
        from pytest_perfgate.placement.workers import WorkerGroup, WorkerSpec
        g = WorkerGroup([WorkerSpec("test_workers:hang_in_step")] * 2)
        g.start()
        g._broadcast(("window", time.monotonic(), 600.0))  # both stuck in step(), deaf
        time.sleep(0.5)
        print(*g.pids, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    # Output to a file, not a pipe: surviving orphans would hold a pipe open forever.
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as fo, err.open("w") as fe:
        rc = subprocess.run([sys.executable, "-c", script], stdout=fo, stderr=fe,
                            timeout=120).returncode
    assert rc == -signal.SIGKILL, err.read_text()
    pids = [int(p) for p in out.read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.05)
    for p in alive:  # do not leak them even when the test fails
        os.kill(p, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived their killed parent"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---- placement report and plans (no processes) -------------------------------------------
def test_placement_failure_is_an_error_when_explicit() -> None:
    p = Placement(0, 11, (2, 3), (0, 1, 2, 3), False, 1, "default", False, 2)
    assert placement_failure(p) == "requested CPUs 2-3 but runs on 0-3"
    assert not p.verified
    assert render_placement([p]) == ["worker 0 pid 11: cpus 2-3 -> 0-3, node 1, mempolicy "
                                     "default, threads 2: NOT verified"]
    q = Placement(1, 12, None, (0,), False, 1, "default", False, None)
    assert placement_failure(q) == ("requested memory policy on node 1 but the policy is "
                                      "default")
    assert issubclass(PlacementError, WorkerError)


class FakeLibc:
    def __init__(self, rc: int, err: int = 0) -> None:
        self.rc, self.err = rc, err
        self.calls: list[tuple[int, ...]] = []

    def prctl(self, *args: int) -> int:
        self.calls.append(args)
        ctypes.set_errno(self.err)
        return self.rc


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_failed_pdeathsig_is_reported_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    ok = FakeLibc(0)
    monkeypatch.setattr(child, "_libc", lambda: ok)
    assert child._die_with_parent(os.getppid()) is None
    assert ok.calls == [(child.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)]
    monkeypatch.setattr(child, "_libc", lambda: FakeLibc(-1, errno.EPERM))
    refused = child._die_with_parent(os.getppid())
    assert refused == ("prctl(PR_SET_PDEATHSIG) failed (Operation not permitted): this worker "
                       "is not killed with its parent; a killed parent can leave it running "
                       "if it hangs inside step()")
    monkeypatch.setattr(child, "_libc", lambda: object())  # a libc without prctl
    missing = child._die_with_parent(os.getppid())
    assert missing is not None and missing.startswith("prctl is unavailable (")
    # The ready reply carries it; the parent reports it with the placement.
    p = Placement(0, 11, None, (0,), False, None, None, None, None, warnings=[refused])
    assert p.warnings == (refused,)
    notes = worker_warnings([p])
    assert notes == [f"worker 0: {refused}"]
    assert render_placement([p], notes)[1] == f"warning: worker 0: {refused}"


def test_placement_line_renders_the_stored_form() -> None:
    p = Placement(2, 7, None, (0, 1), False, None, None, None, None)
    assert placement_line(p.as_dict()) == ("worker 2 pid 7: cpus unpinned -> 0-1, node -, "
                                           "mempolicy -, threads -: verified")


def test_placement_notes_render() -> None:
    specs = [WorkerSpec(spin), WorkerSpec(spin, cpus=(0, 1, 2))]
    assert placement_notes(specs, (0, 1, 2), 1.5) == [
        "worker(s) 0 unpinned: the scheduler may move them between cores mid-window; pass "
        "cpus= to pin",
        "2 worker(s) want 4 threads but only 3 CPUs (0-2) are usable: oversubscribed; use "
        "fewer workers or threads",
        "cgroup CPU quota is 1.5 cores but 3 CPUs are usable: throughput is capped by the "
        "quota, not the CPU count"]
    assert render_placement([], ["x"]) == ["warning: x"]


def test_split_slices() -> None:
    assert split_slices((0, 1, 2, 3, 4), 2) == [(0, 1, 2), (3, 4)]
    with pytest.raises(ValueError) as info:
        split_slices((0, 1), 3)
    assert str(info.value) == ("n=3 workers cannot each get their own CPU out of 0-1 (2 CPUs): "
                               "use n <= 2 or cpus=None to run unpinned")


def fake_numa(root: Path) -> tuple[str, str]:
    base = root / "sys/devices/system/node"
    for nid, cpulist in {0: "0-1", 1: "2-3", 2: "4-5"}.items():
        (base / f"node{nid}").mkdir(parents=True)
        (base / f"node{nid}/cpulist").write_text(cpulist)
    (base / "online").write_text("0-2")
    (base / "has_memory").write_text("0-1")  # node2 is memoryless
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/status").write_text("Mems_allowed_list:\t0-2\n")
    return str(root / "sys"), str(root / "proc")


def test_numa_plan_one_worker_per_usable_node(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cpus, "usable_cpus", lambda: (0, 1, 2, 3, 4, 5))
    launcher = NumaWorkers(sysfs_root=fake_numa(tmp_path)[0], proc_root=str(tmp_path / "proc"))
    assert launcher.plan(4096) == [(0, (0, 1), 2048), (1, (2, 3), 2048)]
    with pytest.raises(ValueError) as info:
        launcher.plan(4095)
    assert str(info.value).startswith("total batch size 4095 is not divisible by 2 workers")
    with pytest.raises(ValueError) as info:
        launcher.plan(4096, nodes=[2])
    assert str(info.value).splitlines()[0] == (
        "NUMA node(s) [2] are not usable (a usable node has memory, is in Mems_allowed and "
        "owns one of our CPUs); usable nodes: [0, 1]")
    assert "node2: cpus 4-5 (no memory)" in str(info.value)


def test_numa_plan_without_numa_runs_one_unbound_worker(tmp_path: Path) -> None:
    launcher = NumaWorkers(sysfs_root=str(tmp_path), proc_root=str(tmp_path))
    with pytest.warns(_cpus.PlacementWarning) as rec:
        plan = launcher.plan(64)
    assert plan == [(None, _cpus.usable_cpus(), 64)]
    assert str(rec[0].message) == ("no usable NUMA node found (no /sys/devices/system/node?): "
                                   "running one worker without memory binding")


@slow
def test_launchers_start_and_always_clean_up() -> None:
    a, b = two_cpus()
    with PinnedWorkers(FAST) as pinned, NumaWorkers(FAST) as per_node:
        g = pinned.start(spin, n=2, cpus=[a, b], transitions=2)
        assert [p.requested_cpus for p in g.placements] == [(a,), (b,)]
        assert g.run_window(0.1).transitions % 2 == 0
        h = per_node.start(spin, total_batch=8)
        assert sum(s.transitions for s in h.specs) == 8
        assert all(s.kwargs["num_envs"] == s.transitions for s in h.specs)
    assert g.exitcodes and h.exitcodes  # both closed by the launchers


@slow
def test_fixture_cleans_up_after_a_failing_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        from test_workers import spin

        def test_fails(pinned_workers, tmp_path_factory):
            g = pinned_workers.start(spin, n=1, cpus=None)
            with open({str(pytester.path / 'pids')!r}, "w") as f:
                f.write(str(g.pids[0]))
            assert False, "deliberate"
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    pid = int((pytester.path / "pids").read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@slow
def test_explicit_placement_that_cannot_be_honoured_is_an_error() -> None:
    # CPU 999 passes WorkerSpec (no parsing there) but the kernel refuses it.
    g = WorkerGroup([WorkerSpec(spin, cpus=(999,))], FAST)
    with pytest.raises(PlacementError) as info:
        g.start()
    assert str(info.value) == (
        f"worker 0: requested CPUs 999 but runs on {_cpus.format_cpus(_cpus.usable_cpus())}; "
        "pass cpus=None / node=None to run unplaced, or fix the request")


@slow
def test_automatic_placement_that_fails_only_warns() -> None:
    with pytest.warns(_cpus.PlacementWarning) as rec:
        with WorkerGroup([WorkerSpec(spin, cpus=(999,), strict=False)], FAST) as g:
            assert not g.placements[0].verified
            assert g.run_window(0.05).calls > 0
    msg = f"worker 0: requested CPUs 999 but runs on {_cpus.format_cpus(_cpus.usable_cpus())}"
    assert [str(w.message) for w in rec] == [msg]
    assert msg in g.notes and f"warning: {msg}" in g.report_lines()


@slow
def test_group_misuse_messages() -> None:
    g = WorkerGroup([WorkerSpec(spin)], FAST)
    with g:
        with pytest.raises(ValueError) as info:
            g.run_window(0)
        assert str(info.value) == "window duration 0: must be > 0 seconds"
        with pytest.raises(ValueError) as info:
            g.latency(0)
        assert str(info.value) == "steps=0: pass a positive int"
        with pytest.raises(WorkerError) as info2:
            g.start()
        assert str(info2.value) == "this WorkerGroup was already started; create a new one"
    with pytest.raises(WorkerError) as info2:
        g.run_window(0.1)
    assert str(info2.value) == "the worker group is closed; start a new one"
    with pytest.raises(ValueError) as info:
        WorkerGroup([])
    assert str(info.value) == "WorkerGroup needs at least one WorkerSpec"

"""Placing a spawn worker: what the parent lends it at exec, and the child's main loop.

The group itself (supervision, windows) is :mod:`pytest_perfgate.placement.workers`.

Order matters: die with the parent, place this process (affinity, memory policy, thread-cap
env) and only then unpickle the spec and import the workload, so OpenMP/BLAS pools size
themselves from the placed mask and first-touch pages land on the bound node.
The protocol is ``(tag, body)`` tuples of plain data over one duplex Pipe.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_perfgate.core.timing import PhaseRecorder, activate
from pytest_perfgate.core.tree import PeakMemory, ProcessTree
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.placement import cpus as _cpus
from pytest_perfgate.placement import numa as _numa
from pytest_perfgate.placement import unpinned

if TYPE_CHECKING:
    from pytest_perfgate.gpu.cuda import CudaTimer

PR_SET_PDEATHSIG = 1


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _die_with_parent(parent_pid: int) -> str | None:
    """Have the kernel SIGKILL this worker when the parent thread that spawned it exits.

    Linux only (PR_SET_PDEATHSIG, docs/design.md §5). prctl's return value is checked: when
    the guard cannot be set (prctl refused, e.g. by a seccomp profile, or missing from libc)
    the reason is returned, the worker carries it in its ready reply and the parent shows it
    as a placement warning. The worker still runs: between commands it polls its pipe and
    exits when the parent is gone, so only a worker stuck inside ``step()`` could outlive a
    killed parent, and the warning says so. None means the guard is in place (or, off
    Linux, that there is none to set).
    """
    problem = None
    if sys.platform.startswith("linux"):
        try:
            rc = _libc().prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            err = ctypes.get_errno() if rc != 0 else 0
        except (OSError, AttributeError) as exc:
            rc, err = -1, 0
            problem = f"prctl is unavailable ({exc})"
        if rc != 0 and problem is None:
            problem = f"prctl(PR_SET_PDEATHSIG) failed ({os.strerror(err) if err else rc})"
        if problem is not None:
            problem += (": this worker is not killed with its parent; a killed parent can "
                        "leave it running if it hangs inside step()")
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    return problem


def _place(cpus: tuple[int, ...] | None, node: int | None, mempolicy: str,
           threads: int | None) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the parent reports placement; keep stderr quiet
        pinned = _cpus.set_affinity(cpus) if cpus is not None else False
        membound = _numa.bind_memory([node], mempolicy) if node is not None else None
        pol = _numa.get_mempolicy()
    if threads:
        os.environ.update(_cpus.cap_threads_env(threads))  # applies even if pinning failed
    return {"pid": os.getpid(), "requested_cpus": cpus, "actual_cpus": _cpus.usable_cpus(),
            "pinned": pinned, "node": node, "mempolicy": None if pol is None else str(pol),
            "membound": membound, "threads": threads}


def _resolve(factory: Any) -> Callable[..., Any]:
    if not isinstance(factory, str):
        return factory
    mod, _, attr = factory.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class _Stopped(Exception):
    """The parent asked to stop in the middle of a window (it is shutting the group down)."""


class _GpuSteps:
    """When each step's GPU work completed, so a worker that uses CUDA counts the steps the
    device finished in the window, not the launches its host made (a host runs ahead of
    the device by as much as the launch queue holds).

    The device is synchronised before the window's first step and an event recorded at
    once: the device is idle, so that event completes when it is recorded, and each step's
    end event, read after the closing synchronise, dates that step's completion on the
    host's clock."""

    def __init__(self, cuda: CudaTimer, now: Callable[[], int]) -> None:
        self.cuda = cuda
        cuda.synchronize()
        self.anchor = cuda.record()
        self.anchor_ns = now()
        self.marks: list[Any] = []

    def mark(self) -> None:
        self.marks.append(self.cuda.record())

    def completed(self, start_ns: int, end_ns: int) -> int:
        """Steps whose GPU work completed in [start_ns, end_ns); synchronises first."""
        self.cuda.synchronize()
        done = [self.anchor_ns + self.cuda.elapsed_ns(self.anchor, ev) for ev in self.marks]
        events = [self.anchor, *self.marks]
        self.cuda.release(list(zip(events[::2], events[1::2], strict=False)))
        return sum(start_ns <= t < end_ns for t in done)


def _window(step: Callable[[], object], rec: PhaseRecorder, t0: float, d: float,
            conn: Any, transitions: int, tree: ProcessTree | None = None,
            peak: PeakMemory | None = None, cuda: CudaTimer | None = None,
            now: Callable[[], int] = time.monotonic_ns) -> dict[str, Any]:
    """Count calls completed in [t0, t0 + d); CPU and phases cover exactly those calls.

    CPU time and memory are this worker's process tree's (the worker and what it started,
    core/tree.py): the parent adds up its workers, so nothing is counted twice. The pipe is
    polled every ~0.1 s (not every call): the parent sends nothing mid-window except
    "stop", which must not wait for a long window to end.

    With ``cuda`` (this worker initialised CUDA) a call is completed when the device has
    finished its work (:class:`_GpuSteps`), the window's phases carry their GPU time from
    CUDA events read after the closing synchronise, and the window says how it was timed
    and what the device's memory peaked at, as an in-process window does.
    """
    cpu = tree.cpu_ns if tree is not None else time.process_time_ns
    if tree is not None and peak is not None:
        tree.refresh()
        peak.add(tree.memory)
    check = now() + 100_000_000

    def stop_requested(t: int) -> bool:
        nonlocal check
        if t < check:
            return False
        check = t + 100_000_000
        return bool(conn.poll(0))

    start, end = int(t0 * 1e9), int((t0 + d) * 1e9)
    late = max(0, now() - start) / 1e9
    gpu = _GpuSteps(cuda, now) if cuda is not None else None
    # a CUDA worker's pre-roll phases go to a recorder of their own, dropped: reading their
    # events at the start edge would wait for the device inside the window
    pre = rec if gpu is None else PhaseRecorder()
    count = 0
    ca = cb = 0
    with activate(pre):
        # Step right away (pre-roll): calls straddle both edges, so the count is unbiased.
        while True:
            step()
            if gpu is not None:
                gpu.mark()
            t = now()
            if t >= start:
                break
            if stop_requested(t):
                raise _Stopped
    with activate(rec):
        ca = cpu()
        if gpu is None:
            rec.take()
        if t < end:
            count = 1
            while True:
                step()
                if gpu is not None:
                    gpu.mark()
                t = now()
                if t >= end:
                    break
                count += 1
                if stop_requested(t):
                    raise _Stopped
        cb = cpu()
    if gpu is not None:
        count = gpu.completed(start, end)
    if tree is not None and peak is not None:
        cb += tree.settle()  # reaped by a descendant meanwhile
        if tree.refresh():
            cb += tree.late_ns  # started meanwhile
            peak.add(tree.memory)
    # a CUDA worker's phases are read here only (their events are complete now)
    taken = rec.take() if count or gpu is not None else {}
    phases = taken if count else {}
    memory = peak.summary() if peak is not None else {}
    if cuda is not None:
        memory.update(cuda.memory())
    window = RawWindow(count * transitions, d, (cb - ca) / 1e9 if count else 0.0, phases,
                       count, memory=memory, gpu=cuda.describe() if cuda is not None else {})
    return {"window": window.to_wire(), "late_s": late}


def _cuda_timer(rec: PhaseRecorder, current: CudaTimer | None) -> CudaTimer | None:
    """The CUDA timer once this worker initialised CUDA through torch (looked for before
    each window, as an in-process measurement does: the factory or the first step often
    initialises it); torch is never imported for it."""
    if current is not None or "torch" not in sys.modules:
        return current
    from pytest_perfgate.gpu.cuda import timer_if_active

    timer = timer_if_active()
    if timer is not None:
        timer.synchronize()
        rec.use_device(timer)
        timer.reset_peak()
    return timer


def _latency(step: Callable[[], object], rec: PhaseRecorder, n: int,
             now: Callable[[], int] = time.perf_counter_ns) -> dict[str, Any]:
    """Each of ``n`` calls' latency. Where the worker uses CUDA (its recorder times phases
    on the device) a call starts on an idle device and ends when the device has finished
    its work: a launch returns before its kernels run, and the phases' event pairs can only
    be read once they completed."""
    dev = rec.device
    out = []
    with activate(rec):
        for _ in range(n):
            if dev is not None:
                dev.synchronize()
            t = now()
            step()
            if dev is not None:
                dev.synchronize()
            out.append((now() - t) / 1e9)
    rec.take()
    return {"latencies": out}


def _send(conn: Any, tag: str, body: dict[str, Any]) -> None:
    try:
        conn.send((tag, body))
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        conn.send(("error", {"error": f"cannot send the {tag!r} reply: {exc}",
                             "traceback": traceback.format_exc()}))


class placed_like:
    """Give the calling (parent) thread a worker's affinity, mempolicy and thread env, then
    restore them.

    Affinity and memory policy are per thread and inherited through fork+exec, so the spawn
    child starts placed before its interpreter imports anything.
    """

    def __init__(self, cpus: tuple[int, ...] | None, node: int | None, mempolicy: str,
                 threads: int | None) -> None:
        self.cpus, self.node, self.mempolicy, self.threads = cpus, node, mempolicy, threads

    def __enter__(self) -> None:
        self._aff = _cpus.usable_cpus() if self.cpus is not None else None
        self._pol = _numa.get_mempolicy() if self.node is not None else None
        cap = self.threads
        self._env = {k: os.environ.get(k) for k in _cpus.THREAD_ENV_VARS} if cap else None
        if cap:
            os.environ.update(_cpus.cap_threads_env(cap))
        if self.cpus is not None:
            _cpus.set_affinity(self.cpus)
        if self._pol is not None and self.node is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the child reports the real outcome
                _numa.bind_memory([self.node], self.mempolicy)

    def __exit__(self, *exc: object) -> None:
        if self._pol is not None:
            _numa.set_mempolicy(self._pol)
        if self._aff is not None:
            _cpus.set_affinity(self._aff)
        if self._env is not None:
            for k, v in self._env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def worker_main(conn: Any, placement: tuple[Any, ...], payload: bytes, index: int,
                parent_pid: int) -> None:
    """Entry point of a spawn worker: place, build, then serve window/steps/proof/stop."""
    orphan_risk = _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    stage = "start"
    try:
        info = _place(*placement)
        info["index"] = index
        info["warnings"] = [orphan_risk] if orphan_risk else []
        stage = "start (loading the WorkerSpec)"
        spec = pickle.loads(payload)
        stage = f"start (importing factory {spec.factory!r})"
        factory = _resolve(spec.factory)
        stage = f"start (calling factory {spec.factory!r})"
        step = factory(**dict(spec.kwargs))
        if not callable(step):
            raise TypeError(f"factory {spec.factory!r} returned {step!r}; it must return "
                            "a step() callable")
        torch = sys.modules.get("torch")
        if torch is not None and spec.thread_cap:
            torch.set_num_threads(spec.thread_cap)  # the env cap is read only at load time
        info["unpinned_threads"] = unpinned.unpinned(process=f"worker {index}")
        conn.send(("ready", info))
        rec = PhaseRecorder()
        tree, peak = ProcessTree(), PeakMemory()
        tree.start()
        rec.count_children(tree)
        cuda: CudaTimer | None = None
        while True:
            if not conn.poll(1.0):
                if os.getppid() != parent_pid:
                    return
                continue
            msg = conn.recv()
            stage = msg[0]
            if msg[0] == "stop":
                return
            if msg[0] == "window":
                cuda = _cuda_timer(rec, cuda)
                body = _window(step, rec, msg[1], msg[2], conn, spec.transitions, tree, peak,
                               cuda)
            elif msg[0] == "steps":
                cuda = _cuda_timer(rec, cuda)
                body = _latency(step, rec, msg[1])
            elif msg[0] == "proof":
                proof = _numa.read_numa_maps()
                body = {"proof": None if proof is None else proof.as_dict()}
            else:
                raise ValueError(f"unknown command {msg[0]!r}")
            _send(conn, msg[0], body)
    except (EOFError, BrokenPipeError, _Stopped):
        return  # the parent went away or is closing the group: nothing to report
    except BaseException as exc:
        try:
            conn.send(("error", {"error": f"{type(exc).__name__}: {exc} (in {stage})",
                                 "traceback": traceback.format_exc()}))
        except Exception:
            pass
        os._exit(1)

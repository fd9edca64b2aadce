"""tools/gpu_check.py's timing checks on a real GPU: one learner step timed three ways side
by side, and what the CUDA-correct edges cost.

The reference is the script's own: ``torch.cuda.Event`` pairs around a synchronised loop of
the step, using nothing of perfgate's. Each other way is shown as its ratio to it: about
1.0 means the GPU work is timed, near 0 means only its launches are.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

Result = tuple[bool, str]  # (passed, what was checked)

STEP = '''
import torch

from pytest_perfgate import phase

KERNEL_REPEATS = {repeats}  # the head commit doubles it: the kernel's work done twice


def make_step(batch=4096, obs=64, width=1024):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                              torch.nn.Linear(width, width)).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    host = torch.randn(batch, obs)  # pageable: the copy waits for the GPU, as a plain .to() does
    proj = torch.randn(obs, width, device=dev) / 8
    w = torch.randn(width, width, device=dev) / 32

    def step():
        with phase("copy_h2d"):
            x = host.to(dev)
        with phase("update"):
            h = x @ proj
            for _ in range(KERNEL_REPEATS):
                h = torch.tanh(h @ w)
            loss = net(h).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return step
'''
NAIVE_STEPS = 5  # a host timer around this many steps: fewer launches than CUDA's queue holds


def learner_step(repeats: int = 4) -> Callable[[], None]:
    namespace: dict[str, Any] = {}
    exec(STEP.format(repeats=repeats), namespace)
    step: Callable[[], None] = namespace["make_step"]()
    return step


def measure(step: Callable[[], object], cuda: bool, windows: int = 6) -> Any:
    """perfgate's measurement of ``step`` (one transition a call)."""
    from pytest_perfgate.core.loop import LoopSource
    from pytest_perfgate.core.measure import MeasureConfig, Meter

    cfg = MeasureConfig(windows=windows, window_s=0.5, warmup_max_s=5.0)
    return Meter(cfg).measure(LoopSource(step, 1, cuda=cuda))


def own_events_ms(torch: Any, step: Callable[[], object], n: int = 100) -> float:
    """ms per step by the script's own CUDA events around a synchronised loop."""
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    for _ in range(n):
        step()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / n


def naive_host_ms(torch: Any, step: Callable[[], object]) -> float:
    """ms per step by a host timer around a few steps, never synchronising: the launches."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(NAIVE_STEPS):
        step()
    ms = (time.perf_counter() - t0) * 1e3 / NAIVE_STEPS
    torch.cuda.synchronize()
    return ms


def three_ways(torch: Any) -> tuple[list[Result], Any]:
    """The same learner step timed by perfgate's edges, by host timers alone and by the
    script's own events; returns the checks and the edges' measurement."""
    from pytest_perfgate.gpu.cuda import SYNC_ENV

    print("\n== 3. one learner step, timed three ways")
    step = learner_step()
    own = own_events_ms(torch, step)
    os.environ.pop(SYNC_ENV, None)
    edges = measure(step, cuda=True)
    host = measure(step, cuda=False)
    naive = naive_host_ms(torch, step)
    rows = [("perfgate, CUDA-correct edges (default)", 1e3 / edges.steps_per_s),
            ("perfgate, host timers only (cuda=False)", 1e3 / host.steps_per_s),
            (f"a host timer around {NAIVE_STEPS} steps, no synchronise", naive),
            ("own CUDA events, synchronised loop (reference)", own)]
    print(f"  {'':50} {'ms/step':>9} {'ratio':>7}")
    for label, ms in rows:
        print(f"  {label:50} {ms:9.3f} {ms / own:7.2f}")
    print(f"  {'phase':10} {'host wall':>10} {'edges wall':>11} {'edges GPU':>10} (ms per call)")
    for name in ("copy_h2d", "update"):
        h, e = host.phases[name], edges.phases[name]
        print(f"  {name:10} {h.ms_per_call:10.3f} {e.ms_per_call:11.3f} "
              f"{e.gpu_ms_per_call or 0:10.3f}")
    gpu_ms = sum(p.gpu_ms_per_call or 0 for p in edges.phases.values())
    return [
        (0.9 <= rows[0][1] / own <= 1.15, "the edges time the step's GPU work (ratio ~1.0)"),
        (0.5 <= gpu_ms / own <= 1.1, "the phases' GPU time accounts for the step"),
        (all(p.gpu_ns is not None for p in edges.phases.values()), "every phase has a GPU time"),
        ((edges.phases["update"].gpu_ms_per_call or 0.0) > 2 * edges.phases["update"].ms_per_call,
         "the update's CPU wall is its launches: its GPU time is larger, and both are kept"),
        (edges.memory.get("gpu_peak_allocated", 0) > 0, "a GPU memory peak was recorded"),
    ], edges


def _per_call_us(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n / 1e3


def edge_costs(torch: Any) -> list[Result]:
    """What the CUDA-correct timing adds: per window (two synchronises of the idle device
    and reading a pair), per phase (two event records, and reading the pair back) and per
    step of a step that synchronises anyway (an ``.item()``)."""
    from pytest_perfgate.core.timing import PhaseRecorder, activate, phase
    from pytest_perfgate.gpu.cuda import CudaTimer

    print("\n== 4. what the CUDA edges cost")
    timer = CudaTimer(torch.cuda)
    timer.synchronize()
    sync_us = _per_call_us(timer.synchronize, 2000)
    n = 20000

    def empty_phase() -> None:
        with phase("p"):
            pass

    costs = {}
    for label, rec in (("host", PhaseRecorder()), ("device", PhaseRecorder())):
        if label == "device":
            rec.use_device(timer)
        with activate(rec):
            costs[label] = _per_call_us(empty_phase, n)
        timer.synchronize()
        t0 = time.perf_counter_ns()
        rec.take()
        costs[label + " read"] = (time.perf_counter_ns() - t0) / n / 1e3
    x = torch.zeros(1, device="cuda")

    def item_step() -> None:
        with phase("update"):
            x.add_(1)
        x.sum().item()

    on, off = measure(item_step, True, 4), measure(item_step, False, 4)
    per_phase = costs["device"] - costs["host"] + costs["device read"] - costs["host read"]
    per_item = 1e6 / on.steps_per_s - 1e6 / off.steps_per_s
    print(f"  per window: {2 * sync_us:.1f} us (two synchronises of the idle device)")
    records = costs["device"] - costs["host"]
    print(f"  per phase:  {per_phase:.2f} us (two event records {records:.2f} us, reading the "
          f"pair after the window {costs['device read']:.2f} us)")
    print(f"  per .item()-style step: {per_item:.2f} us ({1e6 / on.steps_per_s:.1f} us a step "
          f"with the edges, {1e6 / off.steps_per_s:.1f} us without)")
    return [(sync_us > 0 and per_phase > 0, "the edges' costs were measured")]

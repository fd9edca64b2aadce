"""Check perfgate's GPU support on a real GPU, in one command (docs/gpu.md).

    python tools/gpu_check.py          # about 3-6 minutes on one GPU

Prints, for the GPU that torch calls current:

1. ``pytest --perfgate --perfgate-ab`` in a scratch git repository whose head commit runs
   the step's kernel twice (2x slower): REGRESSION expected; and the same commit against
   itself (A/A): no REGRESSION expected. It runs first, while this process holds no CUDA
   context (the A/B controller's GPU guard would count it as another process);
2. the GPU part of the machine's fingerprint, read through NVML (torch as the fallback),
   and that no UUID reached it;
3. a learner-like step (a host batch copied to the GPU, an MLP update) measured
   three ways side by side: host timers only, CUDA-correct window edges with CUDA-event
   phase times (the default), and the per-phase synchronising mode;
4. GPU memory peaks (torch allocated and reserved, NVML device used);
5. the noise guard on the real device: a quiet window, then one beside a second process
   running matrix products on the same GPU, which must be named.

Exit 0 when every check passed, 1 when one failed, 2 on a machine without a CUDA device
(nothing is checked there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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
PERF_TEST = '''
from workstep import make_step


def test_learner(perfgate):
    step = make_step() if perfgate.runs_step else (lambda: None)
    perfgate.measure(step, transitions=4096, name="gpu_learner")
'''
NEIGHBOUR = '''
import sys, time, torch
x = torch.randn(8192, 8192, device="cuda")
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    y = x @ x
    torch.cuda.synchronize()
'''

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    if not ok:
        failures.append(what)


def fingerprint(torch: Any) -> None:
    from pytest_perfgate.gpu.fingerprint import describe, fingerprint_fields, gpu_metadata

    print("\n== 2. the GPU in the fingerprint")
    gpu = gpu_metadata()
    for line in describe(gpu):
        print(f"  {line}")
    print(f"  fingerprint fields: {fingerprint_fields(gpu)}")
    check(gpu is not None and bool(gpu.get("devices")), "the visible GPUs were read")
    uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "") or "")
    check(not uuid or uuid not in json.dumps(gpu), "no UUID in the metadata")


def measure(step: Any, cuda: bool, label: str) -> Any:
    from pytest_perfgate.core.loop import LoopSource
    from pytest_perfgate.core.measure import MeasureConfig, Meter

    cfg = MeasureConfig(windows=6, window_s=0.5, warmup_max_s=5.0)
    m = Meter(cfg).measure(LoopSource(step, 4096, cuda=cuda))
    print(f"  measured: {label}: {m.steps_per_s:,.0f} samples/s")
    return m


def phases(torch: Any) -> Any:
    from pytest_perfgate.core.memory import gpu_memory_line
    from pytest_perfgate.gpu.cuda import SYNC_ENV

    print("\n== 3. phases without and with CUDA-correct edges")
    namespace: dict[str, Any] = {}
    exec(STEP.format(repeats=4), namespace)
    step = namespace["make_step"]()
    host = measure(step, False, "host timers only")
    edges = measure(step, True, "CUDA-correct edges (default)")
    os.environ[SYNC_ENV] = "phases"
    try:
        synced = measure(step, True, "synchronised at every phase (diagnosis)")
    finally:
        del os.environ[SYNC_ENV]
    print(f"  {'':10} {'host only':>12} {'edges':>12} {'edges: GPU':>12} {'per-phase':>12}")
    print(f"  {'samples/s':10} {host.steps_per_s:12,.0f} {edges.steps_per_s:12,.0f} "
          f"{'':12} {synced.steps_per_s:12,.0f}")
    for name in ("copy_h2d", "update"):
        h, e, s = host.phases[name], edges.phases[name], synced.phases[name]
        print(f"  {name:10} {h.ms_per_call:9.3f} ms {e.ms_per_call:9.3f} ms "
              f"{e.gpu_ms_per_call or 0:9.3f} ms {s.ms_per_call:9.3f} ms")
    per_step_ms = 1e3 * 4096 / edges.steps_per_s
    gpu_ms = sum(p.gpu_ms_per_call or 0 for p in edges.phases.values())
    print(f"  per step: {per_step_ms:.3f} ms wall (edges), {gpu_ms:.3f} ms GPU from events")
    check(all(p.gpu_ns is not None for p in edges.phases.values()),
          "every phase has a GPU time")
    check(0.5 <= gpu_ms / per_step_ms <= 1.1,
          "the phases' GPU time accounts for the step's wall time (GPU-bound step)")
    update, copy = edges.phases["update"], edges.phases["copy_h2d"]
    check((update.gpu_ms_per_call or 0.0) > 2 * update.ms_per_call,
          "the update's CPU wall is its launches: its GPU time is larger, and both are shown")
    check(host.phases["copy_h2d"].ms_per_call > 2 * (copy.gpu_ms_per_call or 0.0),
          "host timers charge the update's GPU time to the next copy (visibly wrong)")
    print("\n== 4. GPU memory")
    print(f"  {gpu_memory_line(edges.memory) or 'no GPU memory was read'}")
    check(edges.memory.get("gpu_peak_allocated", 0) > 0, "a GPU memory peak was recorded")
    return step


def guard(torch: Any, step: Any) -> None:
    from pytest_perfgate.gpu.guard import GpuGuard

    print("\n== 5. the noise guard on the real device")
    found = GpuGuard.for_cuda(torch.cuda)
    if found is None:
        print("  NVML is not installed (pip install 'pytest-perfgate[gpu]'): guard not checked")
        failures.append("guard: NVML missing")
        return
    # the workload is this process alone: the neighbour it starts is not part of it
    g = GpuGuard(found.nvml, found.devices, own_pids=lambda: {os.getpid()})

    def window(seconds: float) -> str | None:
        a = g.sample()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            step()
        torch.cuda.synchronize()
        b = g.sample()
        st = b.states[g.devices[0]]
        bits = "unknown" if st.throttle is None else f"{st.throttle:#x}"
        print(f"  SM clock {st.sm_clock_mhz} MHz, throttle bits {bits}, "
              f"processes {list(st.pids or ())}")
        return g.spoiled(a, b)

    quiet = window(1.0)
    print(f"  quiet window: {quiet or 'not spoiled'}")
    nb = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, "20"])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and nb.poll() is None:
            pids = g.nvml.state(g.devices[0]).pids or ()
            if len(pids) >= 2:
                break
            time.sleep(0.5)
        busy = window(2.0)
    finally:
        nb.kill()
        nb.wait(30)
    print(f"  window beside a second process: {busy or 'not spoiled'}")
    check(busy is not None and ("process" in busy or "context" in busy),
          "the second process on the GPU spoils the window, named")


def ab() -> None:
    print("\n== 1. --perfgate-ab: a 2x slower kernel, then A/A")
    with tempfile.TemporaryDirectory(prefix="perfgate-gpu-check-") as tmp:
        repo = Path(tmp)
        git = ["git", "-c", "user.name=gpu-check", "-c", "user.email=gpu-check@localhost"]

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(args, cwd=repo, capture_output=True, text=True, timeout=400)

        run("git", "init", "-q")
        (repo / "test_perf.py").write_text(PERF_TEST)
        for repeats, msg in ((4, "base"), (8, "head: the kernel's work done twice")):
            (repo / "workstep.py").write_text(STEP.format(repeats=repeats))
            run("git", "add", "-A")
            run(*git, "commit", "-q", "-m", msg)
        # each side imports workstep from its own checkout (pytest puts the test's folder first)
        env = {**os.environ, "PERFGATE_MACHINE": "gpu-check", "PYTHONPATH": str(ROOT)}
        for base, want in (("HEAD~1", "REGRESSION"), ("HEAD", "no REGRESSION")):
            report = repo / f"report-{base.replace('~', '_')}.json"
            t0 = time.monotonic()
            res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                  "--perfgate", f"--perfgate-ab={base}",
                                  "--perfgate-record=false", f"--perfgate-json={report}",
                                  "test_perf.py"], cwd=repo, env=env, capture_output=True,
                                 text=True, timeout=400)
            try:
                b = json.loads(report.read_text())["benchmarks"][0]
            except (OSError, ValueError, IndexError, KeyError):
                print(textwrap.indent((res.stdout + res.stderr)[-3000:], "    "))
                check(False, f"A/B against {base} wrote a report")
                continue
            ci = b.get("ci") or [float("nan")] * 2
            print(f"  against {base}: {b['verdict']}, ratio {b['ratio']:.3f} "
                  f"[{ci[0]:.3f}-{ci[1]:.3f}], {time.monotonic() - t0:.0f} s")
            got = b["verdict"] == "REGRESSION"
            check(got if want == "REGRESSION" else not got, f"against {base}: {want}")


def main() -> int:
    try:
        import torch
    except ImportError:
        print("gpu_check: no CUDA device: torch is not installed; nothing to check")
        return 2
    if not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device (torch {torch.__version__}, CUDA runtime "
              f"{torch.version.cuda or 'none: a CPU build'}): nothing to check; run it on a "
              "machine with an NVIDIA GPU")
        return 2
    t0 = time.monotonic()
    print(f"gpu_check: torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.device_count()} device(s)")
    ab()  # before this process initialises CUDA
    print(f"\ndevice: {torch.cuda.get_device_name()}")
    fingerprint(torch)
    step = phases(torch)
    guard(torch, step)
    print(f"\n{'all checks passed' if not failures else 'FAILED: ' + '; '.join(failures)} "
          f"({time.monotonic() - t0:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Check perfgate's GPU support on a real GPU, in one command (docs/gpu.md).

    python tools/gpu_check.py          # about 3-5 minutes on one GPU

Prints, for the GPU that torch calls current:

1. ``pytest --perfgate --perfgate-ab`` in a scratch git repository whose head commit runs
   the step's kernel twice (2x slower): REGRESSION expected; and the same commit against
   itself (A/A): no REGRESSION expected. It runs first, while this process holds no CUDA
   context (the A/B controller's GPU guard would count it as another process);
2. the GPU part of the machine's fingerprint, read through NVML, against
   ``nvidia-smi --query-gpu`` and against what torch reads (the same model either way),
   and that no UUID reached it;
3. a learner-like step timed three ways side by side: perfgate's CUDA-correct edges,
   host timers only, and the script's own CUDA events around a synchronised loop
   (tools/gpu_check_timing.py), with their ratios;
4. what the edges cost per window, per phase and per ``.item()``-style step;
5. a ring pair with ``learner_device="cuda"`` moving exactly 1M transitions
   (tools/gpu_check_ring.py);
6. the noise guard on the real device: a quiet window, then one beside a second process
   running matrix products on the same GPU, which must be named.

Exit 0 when every check passed, 1 when one failed, 2 on a machine without a CUDA device
(nothing is checked there: it says so and why).
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
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]  # also when run by runpy, not as a script

from gpu_check_ring import exact_transfer  # noqa: E402
from gpu_check_timing import STEP, Result, edge_costs, three_ways  # noqa: E402

NO_GPU = 2  # the exit code without a CUDA device

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
SMI_FIELDS = "name,memory.total,compute_cap"

failures: list[str] = []


def check(results: list[Result]) -> None:
    for ok, what in results:
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            failures.append(what)


def nvidia_smi() -> list[dict[str, str]] | None:
    """The GPUs as ``nvidia-smi --query-gpu`` lists them (NVML's order), None without it.
    A driver older than 510 has no compute_cap field: asked again without it."""
    for fields in (SMI_FIELDS, SMI_FIELDS.rsplit(",", 1)[0]):
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        return [dict(zip(fields.split(","), (c.strip() for c in line.split(",")),
                         strict=False)) for line in out.splitlines() if line.strip()]
    return None


def fingerprint(torch: Any) -> None:
    from pytest_perfgate.gpu.fingerprint import describe, fingerprint_fields, gpu_metadata

    print("\n== 2. the GPU in the fingerprint")
    gpu = gpu_metadata()
    for line in describe(gpu):
        print(f"  {line}")
    model = fingerprint_fields(gpu).get("gpu")
    print(f"  model (what a GPU benchmark's baseline must match): {model}")
    devices = (gpu or {}).get("devices") or []
    smi = nvidia_smi()
    print(f"  nvidia-smi --query-gpu={SMI_FIELDS}: {smi}")
    rows = smi or []
    names = {r.get("name") for r in rows}
    memory = {int(r["memory.total"]) for r in rows}
    caps = {r["compute_cap"] for r in rows if "compute_cap" in r}
    # nvidia-smi lists no slice, and gives NVML's memory figure (torch's is a little lower)
    whole = [d for d in devices if d["mig"] != "enabled" and (gpu or {}).get("source") == "nvml"]
    check([(bool(devices), "the visible GPUs were read"),
           (bool(rows) and all(str(d["name"]).split(" MIG ")[0] in names for d in devices),
            "their names are nvidia-smi's"),
           (bool(rows) and all(d["memory_total"] // 2**20 in memory for d in whole),
            "their memory is nvidia-smi's"),
           (bool(rows) and (not caps or all(d["compute_capability"] in caps
                                            for d in devices)),
            "their compute capability is nvidia-smi's (where its driver gives it)")])
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    by_torch = {"source": "torch", "devices": [
        {"name": p.name, "memory_total": int(p.total_memory),
         "compute_capability": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count}
        for p in props]}
    print(f"  read by torch: {describe(by_torch)[:-1]}")
    uuid = str(getattr(props[0], "uuid", "") or "")
    check([(fingerprint_fields(by_torch).get("gpu") == model,
            "torch's reading gives the same model (the fingerprint does not depend on "
            "nvidia-ml-py)"),
           (not uuid or uuid not in json.dumps(gpu), "no UUID in the metadata")])


def guard(torch: Any) -> None:
    from gpu_check_timing import learner_step

    from pytest_perfgate.gpu.guard import GpuGuard

    print("\n== 6. the noise guard on the real device")
    found = GpuGuard.for_cuda(torch.cuda)
    if found is None:
        print("  NVML is not installed (pip install 'pytest-perfgate[gpu]'): guard not checked")
        failures.append("guard: NVML missing")
        return
    # the workload is this process alone: the neighbour it starts is not part of it
    g = GpuGuard(found.nvml, found.devices, own_pids=lambda: {os.getpid()})
    step = learner_step()

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
            if len(g.nvml.state(g.devices[0]).pids or ()) >= 2:
                break
            time.sleep(0.5)
        busy = window(2.0)
    finally:
        nb.kill()
        nb.wait(30)
    print(f"  window beside a second process: {busy or 'not spoiled'}")
    check([(busy is not None and ("process" in busy or "context" in busy),
            "the second process on the GPU spoils the window, named")])


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
                check([(False, f"A/B against {base} wrote a report")])
                continue
            ci = b.get("ci") or [float("nan")] * 2
            print(f"  against {base}: {b['verdict']}, ratio {b['ratio']:.3f} "
                  f"[{ci[0]:.3f}-{ci[1]:.3f}], {time.monotonic() - t0:.0f} s")
            got = b["verdict"] == "REGRESSION"
            check([(got if want == "REGRESSION" else not got, f"against {base}: {want}")])


def main() -> int:
    try:
        import torch
    except ImportError:
        print("gpu_check: no CUDA device: torch is not installed; nothing to check")
        return NO_GPU
    if not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device (torch {torch.__version__}, CUDA runtime "
              f"{torch.version.cuda or 'none: a CPU build'}): nothing to check; run it on a "
              "machine with an NVIDIA GPU")
        return NO_GPU
    t0 = time.monotonic()
    print(f"gpu_check: torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.device_count()} device(s)")
    ab()  # before this process initialises CUDA
    print(f"\ndevice: {torch.cuda.get_device_name()}")
    fingerprint(torch)
    results, _ = three_ways(torch)
    check(results)
    check(edge_costs(torch))
    check(exact_transfer())
    guard(torch)
    print(f"\n{'all checks passed' if not failures else 'FAILED: ' + '; '.join(failures)} "
          f"({time.monotonic() - t0:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""The GPUs a run was measured on: recorded with every run; their model decides
comparability for the benchmarks that ran on them, the driver and CUDA runtime are the
environment.

Read through NVML (:mod:`.nvml`) without importing torch; torch's CUDA runtime version is
read from its ``version.py`` as text. Where NVML is missing but an NVIDIA driver is loaded,
torch answers in a child process, so the measured process never initialises CUDA for it.
Both sources give the same fields (None where unknown, shown as "unknown"), and the model
is made of what both read alike: the name (a MIG slice's carries its profile, "MIG
1g.10gb") and the compute capability. Memory and SM count are recorded and shown, not
matched: NVML's total memory counts what the driver reserves and CUDA's does not, and NVML
gives a whole GPU's SM count on some drivers only. Serial numbers, UUIDs and PCI
addresses are never read into the record: results get published.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_perfgate.gpu.nvml import Nvml
from pytest_perfgate.gpu.visible import visible

DRIVER_FILE = "proc/driver/nvidia/version"  # present wherever the NVIDIA driver is loaded
TORCH_PROBE_TIMEOUT_S = 120.0
_TORCH_PROBE = """
import json, torch
out = {"cuda_runtime": torch.version.cuda, "devices": []}
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out["devices"].append({"name": p.name, "memory_total": int(p.total_memory),
                               "compute_capability": f"{p.major}.{p.minor}",
                               "sm_count": int(p.multi_processor_count)})
print(json.dumps(out))
"""


def torch_cuda_runtime(modules: Mapping[str, Any] | None = None) -> str | None:
    """The CUDA runtime torch was built with ("12.8"; None for a CPU build), without
    importing torch: its version.py is read as text unless torch is already loaded."""
    torch = (sys.modules if modules is None else modules).get("torch")
    version = getattr(torch, "version", None) if torch is not None else None
    if version is not None:
        cuda = getattr(version, "cuda", None)
        return str(cuda) if cuda else None
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except (OSError, StopIteration):
        return None
    m = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return m.group(1) if m else None


def driver_from_proc(root: Path) -> str | None:
    """The kernel module's version from /proc/driver/nvidia/version."""
    try:
        text = (root / DRIVER_FILE).read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for [^ ]+)?\s+([0-9][0-9.]*)", text)
    return m.group(1) if m else None


def _torch_probe() -> dict[str, Any] | None:
    try:
        out = subprocess.run([sys.executable, "-c", _TORCH_PROBE], capture_output=True,
                             text=True, timeout=TORCH_PROBE_TIMEOUT_S, check=True).stdout
        got = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return got if isinstance(got, dict) else None


def gpu_metadata(nvml: Nvml | None = None, *, env: Mapping[str, str] | None = None,
                 root: Path = Path("/"), torch_probe: Any = _torch_probe,
                 modules: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The visible GPUs and the versions that drive them; None on a machine without one.

    ``nvml``: an opened NVML (default: this process's, if nvidia-ml-py is installed);
    ``torch_probe``: the fallback asked where NVML is missing and a driver is loaded."""
    from pytest_perfgate.gpu import nvml as nvml_mod

    env = os.environ if env is None else env
    nv = nvml if nvml is not None else nvml_mod.shared()
    runtime = torch_cuda_runtime(modules)
    if nv is not None and nv.count() > 0:
        devices = [nv.info(t) for t in visible(nv, env)]
        if not devices:
            return None
        return {"source": "nvml", "devices": [_fields(d) for d in devices],
                "driver": nv.driver(), "cuda_driver": nv.cuda_driver(),
                "cuda_runtime": runtime}
    driver = driver_from_proc(root)
    if driver is None:
        return None  # no NVIDIA driver: a CPU machine, and nothing is started to ask
    got = torch_probe() if torch_probe is not None else None
    devices = [_fields(d) for d in (got or {}).get("devices", []) if isinstance(d, dict)]
    if not devices:
        return None
    return {"source": "torch", "devices": devices, "driver": driver, "cuda_driver": None,
            "cuda_runtime": (got or {}).get("cuda_runtime") or runtime}


DEVICE_FIELDS = ("name", "memory_total", "compute_capability", "sm_count", "mig",
                 "persistence", "power_limit_w", "app_clock_sm_mhz", "app_clock_mem_mhz")
UNKNOWN = "unknown"


def _fields(d: Mapping[str, Any]) -> dict[str, Any]:
    """Every device field, whichever source read it (None: not read)."""
    return {k: d.get(k) for k in DEVICE_FIELDS}


def _device_words(d: Mapping[str, Any]) -> str:
    """A device in words, every field in place: "unknown" where it was not read."""
    mem = d.get("memory_total")
    return (f"{d.get('name') or 'unknown GPU'} "
            f"({f'{mem / 2**30:.1f} GiB' if mem else f'memory {UNKNOWN}'}, "
            f"cc {d.get('compute_capability') or UNKNOWN}, "
            f"{f'{sms} SMs' if (sms := d.get('sm_count')) else f'SMs {UNKNOWN}'})")


def _model_words(d: Mapping[str, Any]) -> str:
    """What of a device decides comparability, read alike by NVML and torch."""
    return f"{d.get('name') or 'unknown GPU'} (cc {d.get('compute_capability') or UNKNOWN})"


def fingerprint_fields(gpu: Mapping[str, Any] | None) -> dict[str, Any]:
    """What of the GPU decides comparability: the devices' model, the driver, the CUDA
    runtime. Empty without a GPU, so a CPU machine's fingerprint is what it always was."""
    if not gpu:
        return {}
    words = [_model_words(d) for d in gpu.get("devices") or [] if isinstance(d, Mapping)]
    grouped = [f"{words.count(w)}x {w}" if words.count(w) > 1 else w
               for w in dict.fromkeys(words)]
    return {"gpu": " + ".join(grouped) or None, "gpu_driver": gpu.get("driver"),
            "cuda_runtime": gpu.get("cuda_runtime")}


FINGERPRINT_KEYS = ("gpu", "gpu_driver", "cuda_runtime")


def describe(gpu: Mapping[str, Any] | None) -> list[str]:
    """``perfgate machine``'s lines on the GPUs: one per device, then the versions."""
    if not gpu:
        return ["no GPU (no NVIDIA driver, or none visible)"]
    lines = []
    for i, d in enumerate(gpu.get("devices") or []):
        settings = [f"{k} {d[k]}" for k in ("mig", "persistence") if d.get(k)]
        if d.get("power_limit_w") is not None:
            settings.append(f"power limit {d['power_limit_w']:g} W")
        if d.get("app_clock_sm_mhz") is not None:
            settings.append(f"application clocks {d['app_clock_sm_mhz']}/"
                            f"{d.get('app_clock_mem_mhz')} MHz (SM/memory)")
        lines.append(f"{i}: {_device_words(d)}" + (f"; {', '.join(settings)}"
                                                    if settings else ""))
    lines.append(f"driver {gpu.get('driver') or 'unknown'}, CUDA driver "
                 f"{gpu.get('cuda_driver') or 'unknown'}, CUDA runtime (torch) "
                 f"{gpu.get('cuda_runtime') or 'none'}; read through {gpu.get('source')}")
    return lines

"""The GPUs a run was measured on: recorded with every run, and the part that decides
comparability (device, driver, CUDA runtime) joins the machine's fingerprint.

Read through NVML (:mod:`.nvml`) without importing torch; torch's CUDA runtime version is
read from its ``version.py`` as text. Where NVML is missing but an NVIDIA driver is loaded,
torch answers in a child process, so the measured process never initialises CUDA for it.
Serial numbers, UUIDs and PCI addresses are never read into the record: results get
published.
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


def visible_indices(nvml: Nvml, env: Mapping[str, str]) -> list[int]:
    """NVML indices of the devices CUDA_VISIBLE_DEVICES leaves visible (all when unset).
    Numbers are taken as NVML indices (CUDA's order matches it under
    CUDA_DEVICE_ORDER=PCI_BUS_ID); GPU-/MIG- UUID prefixes are matched."""
    n = nvml.count()
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(n))
    out: list[int] = []
    for tok in (t.strip() for t in raw.split(",")):
        if tok.isdigit():
            if int(tok) >= n:
                break  # CUDA stops at the first invalid entry
            out.append(int(tok))
        elif tok.startswith(("GPU-", "MIG-")):
            hits = [i for i in range(n) if _uuid_starts(nvml, i, tok)]
            if not hits:
                break
            out.append(hits[0])
        else:
            break
    return list(dict.fromkeys(out))


def _uuid_starts(nvml: Nvml, index: int, prefix: str) -> bool:
    got = nvml._call("nvmlDeviceGetUUID", nvml.handle(index))
    text = got.decode() if isinstance(got, bytes) else str(got or "")
    return bool(text) and text.startswith(prefix)


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
        devices = [nv.info(i) for i in visible_indices(nv, env)]
        if not devices:
            return None
        return {"source": "nvml", "devices": devices, "driver": nv.driver(),
                "cuda_driver": nv.cuda_driver(), "cuda_runtime": runtime}
    driver = driver_from_proc(root)
    if driver is None:
        return None  # no NVIDIA driver: a CPU machine, and nothing is started to ask
    got = torch_probe() if torch_probe is not None else None
    devices = [d for d in (got or {}).get("devices", []) if isinstance(d, dict)]
    if not devices:
        return None
    return {"source": "torch", "devices": devices, "driver": driver, "cuda_driver": None,
            "cuda_runtime": (got or {}).get("cuda_runtime") or runtime}


def _device_words(d: Mapping[str, Any]) -> str:
    parts = []
    if d.get("memory_total"):
        parts.append(f"{d['memory_total'] / 2**30:.1f} GiB")
    if d.get("compute_capability"):
        parts.append(f"cc {d['compute_capability']}")
    if d.get("sm_count"):
        parts.append(f"{d['sm_count']} SMs")
    if d.get("mig") == "enabled":
        parts.append("MIG")
    return f"{d.get('name') or 'unknown GPU'} ({', '.join(parts)})" if parts else str(
        d.get("name") or "unknown GPU")


def fingerprint_fields(gpu: Mapping[str, Any] | None) -> dict[str, Any]:
    """What of the GPU decides comparability: the devices, the driver, the CUDA runtime.
    Empty without a GPU, so a CPU machine's fingerprint is what it always was."""
    if not gpu:
        return {}
    words = [_device_words(d) for d in gpu.get("devices") or [] if isinstance(d, Mapping)]
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

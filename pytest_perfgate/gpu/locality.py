"""Where a GPU sits: its PCI address, and the NUMA node and CPUs the kernel says are local
to it (``/sys/bus/pci/devices/<bus id>/numa_node`` and ``local_cpulist``).

Reading only; placement/numa.py decides what to do with it. The sysfs root is a parameter
so tests build fake trees.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pytest_perfgate.gpu.nvml import Nvml

BUS_ID = re.compile(r"(?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


class LocalityError(ValueError):
    """The GPU named cannot be found; the message says how to name it."""


@dataclass(frozen=True)
class GpuLocality:
    """``node`` None: the platform reports none (numa_node -1, one-node machines, many
    VMs). ``cpulist``: the kernel's text, parsed by the caller."""

    device: str  # "GPU 0 (0000:01:00.0)", for messages
    bus_id: str
    node: int | None
    cpulist: str | None


def normalize_bus_id(text: str) -> str | None:
    """"00000000:01:00.0" (NVML) or "01:00.0" -> "0000:01:00.0" (sysfs); None if not one."""
    t = text.strip().lower()
    if not BUS_ID.fullmatch(t):
        return None
    if t.count(":") == 1:
        t = "0000:" + t
    domain, rest = t.split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def bus_id_of(device: int | str, nvml: Nvml | None = None) -> str:
    """The sysfs PCI address of ``device``: an NVML index, or a PCI address as is."""
    if isinstance(device, str):
        got = normalize_bus_id(device)
        if got is None:
            raise LocalityError(f"GPU {device!r} is not a PCI bus id: give an NVML index such "
                                "as 0, or an address such as '0000:01:00.0' (nvidia-smi "
                                "--query-gpu=pci.bus_id --format=csv)")
        return got
    if nvml is None:
        from pytest_perfgate.gpu import nvml as nvml_mod

        nvml = nvml_mod.shared()
    if nvml is None:
        raise LocalityError(f"GPU {device}: finding its PCI address needs NVML: pip install "
                            "'pytest-perfgate[gpu]', or give the address, e.g. "
                            "'0000:01:00.0'")
    n = nvml.count()
    bus = nvml.bus_id(device) if 0 <= device < n else None
    if bus is None or normalize_bus_id(bus) is None:
        raise LocalityError(f"GPU {device}: NVML lists {n} device(s) and no PCI address for "
                            "this one: give an index below that, or the address")
    return str(normalize_bus_id(bus))


def locate(device: int | str, sysfs_root: str | os.PathLike[str] = "/sys",
           nvml: Nvml | None = None) -> GpuLocality:
    """The node and local CPUs of ``device`` as sysfs states them."""
    bus = bus_id_of(device, nvml)
    name = f"GPU {device} ({bus})" if not isinstance(device, str) else f"GPU {bus}"
    base = Path(sysfs_root) / "bus/pci/devices" / bus
    if not base.is_dir():
        raise LocalityError(f"{name}: {base} does not exist: no such PCI device here")
    try:
        raw = (base / "numa_node").read_text().strip()
        node = int(raw)
    except (OSError, ValueError):
        node = -1
    try:
        cpulist: str | None = (base / "local_cpulist").read_text().strip() or None
    except OSError:
        cpulist = None
    return GpuLocality(name, bus, node if node >= 0 else None, cpulist)

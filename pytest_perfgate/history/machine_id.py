"""Which machine produced a result, and whether two results may be compared at all.

Everything is read from /proc and /sys under a ``root`` (so tests can build fake trees) and
every probe degrades to ``None`` on an odd or missing file: metadata must never fail a run.
The fingerprint hashes only what the machine is (hardware seen by the process and its CPU
budget): runs on another fingerprint are another machine's history. What the code ran on
(Python, packages, the GPU driver) is the environment (:mod:`.environment`): part of the
change under test, recorded with each run and named in verdicts, never a new history.
Volatile things such as the frequency governor or memory size are recorded only.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_perfgate.placement.cgroup import cgroup_cpu_quota as _cgroup_cpu_quota
from pytest_perfgate.placement.cpus import format_cpus, parse_cpulist

# Distributions whose version is recorded. "mujoco" 4.x is a meta-package over "mujoco-core",
# which carries the physics (docs/design.md §7): both are kept, the core decides the fingerprint.
VERSIONED = ("numpy", "torch", "mujoco", "mujoco-core", "asv", "scipy", "psutil",
             "pytest", "pytest-perfgate")
FINGERPRINT_KEYS = ("machine", "cpu_model", "cpu_logical", "affinity", "cgroup_cpu_quota",
                    "numa_nodes")
if TYPE_CHECKING:
    from pytest_perfgate.core.results import RunRecord

GpuProbe = Callable[[], "dict[str, Any] | None"]


def _read(root: Path, rel: str) -> str | None:
    """Text of ``root/rel`` or None on any error (missing, permission, binary garbage)."""
    try:
        return (root / rel.lstrip("/")).read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _cpus(text: str | None) -> set[int] | None:
    """A kernel cpulist read from a file as a set; None when missing or malformed."""
    if text is None:
        return None
    try:
        return set(parse_cpulist(text))
    except ValueError:
        return None


def _cpuinfo(root: Path) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per processor block."""
    text = _read(root, "proc/cpuinfo") or ""
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, sep, value = line.partition(":")
        if sep:
            blocks[-1][key.strip().lower()] = value.strip()
    return [b for b in blocks if b]


def _cpu_model(blocks: list[dict[str, str]]) -> str | None:
    for key in ("model name", "cpu model", "hardware", "processor", "cpu"):
        for b in blocks:
            value = b.get(key)
            if value and not value.isdigit():
                return re.sub(r"\s+", " ", value)
    return platform.processor() or None


def _physical_cores(root: Path, blocks: list[dict[str, str]]) -> int | None:
    """Distinct cores: sysfs sibling groups first, /proc/cpuinfo (package, core) pairs next."""
    base = root / "sys/devices/system/cpu"
    groups: set[str] = set()
    try:
        cpu_dirs = [p for p in base.iterdir() if re.fullmatch(r"cpu\d+", p.name)]
    except OSError:
        cpu_dirs = []
    for d in cpu_dirs:
        sib = _read(d, "topology/core_cpus_list") or _read(d, "topology/thread_siblings_list")
        if sib and _cpus(sib) is not None:
            groups.add(sib.strip())
    if groups:
        return len(groups)
    pairs = {(b.get("physical id"), b.get("core id")) for b in blocks if "core id" in b}
    return len(pairs) or None


def _affinity(root: Path, live: bool) -> set[int] | None:
    """CPUs this process may run on: sched_getaffinity live, /proc/self/status otherwise."""
    if live and hasattr(os, "sched_getaffinity"):
        try:
            return set(os.sched_getaffinity(0))
        except OSError:
            pass
    for line in (_read(root, "proc/self/status") or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return _cpus(line.split(":", 1)[1])
    return None


def cgroup_cpu_quota(root: Path) -> float | None:
    """Effective cgroup CPU limit in CPUs under a (fake or real) filesystem root, or None.

    cpu.max never shows up in the affinity mask (docs/design.md §4), so a 2-CPU quota on a
    64-CPU box is only visible here. The reading itself is
    :func:`pytest_perfgate.placement.cgroup.cgroup_cpu_quota`.
    """
    q = _cgroup_cpu_quota(root / "sys/fs/cgroup", root / "proc/self/cgroup")
    return round(q, 3) if q is not None else None


def _governor(root: Path) -> str | None:
    base = root / "sys/devices/system/cpu"
    found: set[str] = set()
    try:
        dirs = sorted(p for p in base.iterdir() if re.fullmatch(r"cpu\d+", p.name))
    except OSError:
        dirs = []
    for d in dirs:
        g = _read(d, "cpufreq/scaling_governor")
        if g and g.strip():
            found.add(g.strip())
    return ",".join(sorted(found)) or None


def _turbo(root: Path) -> bool | None:
    no_turbo = _read(root, "sys/devices/system/cpu/intel_pstate/no_turbo")
    if no_turbo is not None and no_turbo.strip() in ("0", "1"):
        return no_turbo.strip() == "0"
    boost = _read(root, "sys/devices/system/cpu/cpufreq/boost")
    if boost is not None and boost.strip() in ("0", "1"):
        return boost.strip() == "1"
    return None


def speed_figures(root: str | os.PathLike[str] = "/") -> str:
    """The machine's state that moves its speed, now: load, frequency governor, turbo, the
    CPUs' current clocks (as far as the kernel shows them)."""
    base = Path(root)
    parts = []
    with contextlib.suppress(OSError):
        parts.append("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    parts.append(f"governor {_governor(base) or 'unknown'}")
    turbo = _turbo(base)
    parts.append(f"turbo {'unknown' if turbo is None else 'on' if turbo else 'off'}")
    mhz = [float(b["cpu mhz"]) for b in _cpuinfo(base) if _is_number(b.get("cpu mhz"))]
    if mhz:
        parts.append(f"clocks {min(mhz):.0f}-{max(mhz):.0f} MHz")
    return ", ".join(parts)


def _is_number(text: str | None) -> bool:
    try:
        return text is not None and float(text) > 0
    except ValueError:
        return False


def _numa_nodes(root: Path) -> int | None:
    try:
        n = sum(1 for p in (root / "sys/devices/system/node").iterdir()
                if re.fullmatch(r"node\d+", p.name))
    except OSError:
        return None
    return n or None


def _mem_total(root: Path) -> int | None:
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read(root, "proc/meminfo") or "", re.M)
    return int(m.group(1)) * 1024 if m else None


def _os_name(root: Path) -> str:
    text = _read(root, "etc/os-release") or _read(root, "usr/lib/os-release") or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.M)
    return m.group(1) if m else platform.system()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def package_versions() -> dict[str, str | None]:
    """Installed versions without importing anything (importing torch costs seconds)."""
    return {name: _version(name) for name in VERSIONED}


def collect_metadata(machine_name: str | None = None, *, root: str | os.PathLike[str] = "/",
                     versions: Mapping[str, str | None] | None = None,
                     gpu: GpuProbe | None = None) -> dict[str, Any]:
    """Everything recorded about the machine with each run.

    ``machine_name`` wins over the hostname: ephemeral CI runners get a new hostname per
    job, which would start a new, empty history every time. A non-default ``root`` reads a
    fake tree and skips the live per-process calls, the GPUs included. ``gpu`` reads the
    GPUs (default on the live machine: gpu/fingerprint.py, NVML then torch); the key
    ``gpu`` is present only where one was found.
    """
    base = Path(root)
    live = base.resolve() == Path("/")
    blocks = _cpuinfo(base)
    logical = os.cpu_count() if live else None
    if logical is None:
        online = _cpus(_read(base, "sys/devices/system/cpu/online"))
        logical = len(online) if online else (len(blocks) or None)
    physical = _physical_cores(base, blocks)
    affinity = _affinity(base, live)
    smt_active = _read(base, "sys/devices/system/cpu/smt/active")
    smt = (smt_active.strip() == "1" if smt_active and smt_active.strip() in ("0", "1")
           else (logical > physical if logical and physical else None))
    kernel = (_read(base, "proc/sys/kernel/osrelease") or "").strip() or platform.release()
    vers = dict(versions) if versions is not None else package_versions()
    if gpu is None and live:
        from pytest_perfgate.gpu.fingerprint import gpu_metadata

        gpu = gpu_metadata
    gpus = gpu() if gpu is not None else None
    return {
        "machine": machine_name or socket.gethostname() or platform.node() or "unknown",
        "cpu_model": _cpu_model(blocks),
        "cpu_logical": logical,
        "cpu_physical": physical,
        "smt": smt,
        "numa_nodes": _numa_nodes(base),
        "affinity": format_cpus(affinity) if affinity else None,
        "affinity_count": len(affinity) if affinity else None,
        "cgroup_cpu_quota": cgroup_cpu_quota(base),
        "governor": _governor(base),
        "turbo": _turbo(base),
        "mem_total": _mem_total(base),
        "system": platform.system(),
        "os": _os_name(base),
        "kernel": kernel,
        "arch": platform.machine(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "versions": vers,
        **({"gpu": gpus} if gpus else {}),
    }


def fingerprint_fields(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that decide whether two results are comparable, by display name: the
    machine only. The GPU model decides it too, for a benchmark that used the GPU
    (:func:`gpu_model`, applied by the baseline rule per benchmark)."""
    return {k: meta.get(k) for k in FINGERPRINT_KEYS}


def gpu_model(meta: Mapping[str, Any]) -> str | None:
    """The GPUs as hardware (name, a MIG slice's profile in it, and compute capability;
    no driver): a benchmark that ran on the GPU is compared only with runs on the same
    GPUs."""
    from pytest_perfgate.gpu.fingerprint import fingerprint_fields as gpu_fields

    gpu = meta.get("gpu")
    return gpu_fields(gpu if isinstance(gpu, Mapping) else None).get("gpu")


def fingerprint(meta: Mapping[str, Any]) -> str:
    """Short stable hash of :func:`fingerprint_fields` (12 hex digits). Computed from a
    run's metadata whenever it is read (:func:`refingerprint`), so runs recorded when the
    fingerprint held package versions join the same machine's history."""
    blob = json.dumps(fingerprint_fields(meta), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def refingerprint(run: RunRecord) -> RunRecord:
    """``run`` with the fingerprint today's rule gives its recorded metadata (a record
    whose metadata holds no machine facts keeps the one it carries)."""
    if not any(k in run.metadata for k in FINGERPRINT_KEYS[1:]):
        return run
    fp = fingerprint(run.metadata)
    return run if fp == run.fingerprint else replace(run, fingerprint=fp)


def describe_mismatch(a_fields: Mapping[str, Any], b_fields: Mapping[str, Any]) -> str:
    """What differs between two fingerprints, e.g. "mujoco 4.0.0 -> 4.0.1, numa_nodes 1 -> 2"."""
    keys = list(FINGERPRINT_KEYS) + sorted((set(a_fields) | set(b_fields)) - set(FINGERPRINT_KEYS))
    diffs = [f"{k} {_show(a_fields.get(k))} -> {_show(b_fields.get(k))}"
             for k in keys if a_fields.get(k) != b_fields.get(k)]
    return ", ".join(diffs) if diffs else "nothing (same fields)"


def _show(value: Any) -> str:
    if value is None:
        return "none"
    text = str(value)
    return repr(text) if (" " in text or not text) else text


def asv_machine_json(meta: Mapping[str, Any]) -> dict[str, Any]:
    """machine.json as asv writes it (all values strings, "version": 1).

    Its fields become the graph parameters of every result row, and asv draws each distinct
    set as its own line, restarting regression detection. So they hold only what stays put
    for one machine: the OS without its kernel release (updated routinely) and RAM in whole
    GiB (MemTotal moves by a few KiB between boots); both stay exact in the run records.
    """
    mem = meta.get("mem_total")
    return {
        "machine": str(meta.get("machine")),
        "os": str(meta.get("system") or platform.system()),
        "arch": str(meta.get("arch") or ""),
        "cpu": str(meta.get("cpu_model") or ""),
        "num_cpu": str(meta.get("cpu_logical") or ""),
        # no space: asv's graph page fails to draw ("Invalid dimensions for plot") for a
        # ram value with one (seen with asv 0.6.6 in tests/test_asv_publish.py)
        "ram": f"{max(1, round(mem / 2 ** 30))}GiB" if isinstance(mem, (int, float)) and mem > 0
        else "",
        "version": 1,
    }


# One machine for asv and perfgate: `asv run --machine NAME` takes the machine's fields from
# ~/.asv-machine.json into every result file's params; asv publish draws one line per
# distinct params, so perfgate writes the same fields under the same NAME (docs/design.md §6).


def default_asv_machine_file() -> Path:
    """Where asv looks (its Machine.get_machine_file_path)."""
    return Path("~/.asv-machine.json").expanduser()


def asv_machine_file_problem(path: Path) -> str | None:
    """Why asv's machine file cannot be written at ``path`` (None: it can). Its folder must
    exist: a typo in the path must not leave new folders behind."""
    if path.is_dir():
        return f"asv machine file {path} is a folder: give a file path, e.g. ~/.asv-machine.json"
    if not path.parent.is_dir():
        return (f"asv machine file {path}: its folder {path.parent} does not exist: give a "
                "path in an existing folder, e.g. ~/.asv-machine.json")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return f"asv machine file {path}: cannot write in {path.parent}: give a writable folder"
    return None


def machine_name(given: str | None) -> str:
    """The machine name runs record under: ``given`` (checked by the caller's parser), else
    the hostname through the one name rule (core/names.py): a hostname that is not a usable
    folder name (``../evil``, an RTL mark) is refused, never written anywhere. ValueError
    names it and the fix."""
    from pytest_perfgate.core.names import safe_name

    if given:
        return safe_name(given, "machine name", "runner-gpu-03")
    host = socket.gethostname() or platform.node() or "unknown"
    try:
        return safe_name(host, "machine name", "runner-gpu-03", shown=f"the hostname {host!r}")
    except ValueError as e:
        raise ValueError(f"{e}: set --machine (or PERFGATE_MACHINE)") from None


def write_asv_machine_file(meta: Mapping[str, Any], path: Path | None = None) -> Path:
    """Add or replace the entry for ``meta["machine"]`` in asv's machine file, keeping every
    other machine in it. A file that is not asv's format is left alone: ValueError names it."""
    from pytest_perfgate.core.atomic import atomic_write, load_json
    from pytest_perfgate.history.files import describe, dump_json

    path = path or default_asv_machine_file()
    problem = asv_machine_file_problem(path)
    if problem is not None:
        raise ValueError(problem)
    try:
        data = load_json(path)
    except FileNotFoundError:
        data = {"version": 1}
    except (OSError, ValueError) as exc:
        raise ValueError(f"asv machine file {path} is unreadable ({exc}): fix or move it, "
                         "then run this again") from None
    if not isinstance(data, dict) or data.get("version", 1) != 1:
        raise ValueError(f"asv machine file {path} holds {describe(data)} without asv's "
                         "\"version\": 1: fix or move it, then run this again")
    entry = {k: v for k, v in asv_machine_json(meta).items() if k != "version"}
    data[entry["machine"]] = entry
    data["version"] = 1
    atomic_write(path, dump_json(data))
    return path

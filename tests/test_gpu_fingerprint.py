"""The GPU in the machine's metadata and fingerprint, through a fake NVML (no GPU here)."""

from __future__ import annotations

import hashlib
import json
import sys
import types
from pathlib import Path

import pytest

from pytest_perfgate.gpu import nvml as nvml_mod
from pytest_perfgate.gpu.fakes import FakeDevice, FakeNvml
from pytest_perfgate.gpu.fingerprint import (
    describe,
    driver_from_proc,
    gpu_metadata,
    torch_cuda_runtime,
)
from pytest_perfgate.gpu.nvml import Nvml, Target
from pytest_perfgate.gpu.visible import visible
from pytest_perfgate.history.machine_id import (
    collect_metadata,
    fingerprint,
    fingerprint_fields,
    gpu_model,
)

CUDA_TORCH = {"torch": types.SimpleNamespace(version=types.SimpleNamespace(cuda="12.8"))}


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """The fake where the real one is read: ``import pynvml``."""
    fake = FakeNvml([FakeDevice(), FakeDevice()])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml_mod.forget()
    yield fake
    nvml_mod.forget()


def test_each_visible_device_is_recorded_without_serial_or_uuid(fake_nvml) -> None:
    fake_nvml.devices[1].mig = (0, 0)  # MIG supported, off: the whole GPU is the device
    fake_nvml.devices[1].attributes = "answer"  # some drivers give a whole GPU's SM count
    gpu = gpu_metadata(env={}, modules=CUDA_TORCH)
    assert gpu == {
        "source": "nvml", "driver": "575.51.03", "cuda_driver": "12.9", "cuda_runtime": "12.8",
        "devices": [{"name": "NVIDIA GeForce RTX 5090", "memory_total": 32607 * 2**20,
                     "compute_capability": "12.0", "sm_count": sms, "mig": mig,
                     "persistence": "enabled", "power_limit_w": 575.0,
                     "app_clock_sm_mhz": 2407, "app_clock_mem_mhz": 14001}
                    for mig, sms in ((None, None), ("disabled", 170))]}
    text = json.dumps(gpu)
    assert "serial" not in fake_nvml.calls
    for secret in ("8f2c1e9a", "1652223012345", "01:00.0"):
        assert secret not in text


def test_cuda_visible_devices_decides_what_is_visible(fake_nvml) -> None:
    nv = Nvml(fake_nvml)
    fake_nvml.devices[1].uuid = "GPU-77aa0000-0000-4000-8000-000000000001"
    gpu0, gpu1 = Target(0), Target(1)
    assert visible(nv, {}) == [gpu0, gpu1]
    assert visible(nv, {"CUDA_VISIBLE_DEVICES": "1"}) == [gpu1]
    assert visible(nv, {"CUDA_VISIBLE_DEVICES": "GPU-77aa"}) == [gpu1]
    assert visible(nv, {"CUDA_VISIBLE_DEVICES": "1,0"}) == [gpu1, gpu0]
    assert visible(nv, {"CUDA_VISIBLE_DEVICES": "0,7,1"}) == [gpu0]  # stops at 7
    assert visible(nv, {"CUDA_VISIBLE_DEVICES": ""}) == []
    assert gpu_metadata(nv, env={"CUDA_VISIBLE_DEVICES": "-1"}) is None


def test_a_cpu_machine_records_no_gpu_and_keeps_its_fingerprint(tmp_path: Path) -> None:
    """No NVML, no driver: no gpu key, nothing started, and the fingerprint hashes the
    machine's fields only."""
    asked = []
    assert gpu_metadata(None, env={}, root=tmp_path, torch_probe=lambda: asked.append(1)) \
        is None
    assert asked == []
    meta = collect_metadata("m", root=tmp_path, versions={"numpy": "2.0"}, gpu=lambda: None)
    assert "gpu" not in meta
    old = ("machine", "cpu_model", "cpu_logical", "affinity", "cgroup_cpu_quota",
           "numa_nodes")
    assert tuple(fingerprint_fields(meta)) == old
    blob = json.dumps({k: fingerprint_fields(meta)[k] for k in old}, sort_keys=True)
    assert fingerprint(meta) == hashlib.sha256(blob.encode()).hexdigest()[:12]


def test_a_driver_upgrade_is_the_environment_and_the_gpu_model_the_hardware(fake_nvml
                                                                         ) -> None:
    """A driver or CUDA runtime upgrade keeps every baseline and is named in the verdicts;
    another GPU is another machine for the benchmarks that ran on it (select_baseline's
    ``gpu``), and nothing for the CPU-only ones."""
    from pytest_perfgate.history import environment

    def meta(**change: object) -> dict:
        gpu = gpu_metadata(env={}, modules=CUDA_TORCH)
        assert gpu is not None
        gpu.update(change)
        return collect_metadata("m", root="/nonexistent", versions={}, gpu=lambda: gpu)

    base = meta()
    assert gpu_model(base) == "2x NVIDIA GeForce RTX 5090 (cc 12.0)"
    for change in ({"driver": "580.1"}, {"cuda_runtime": "13.0"},
                   {"devices": base["gpu"]["devices"][:1]}):
        assert fingerprint(meta(**change)) == fingerprint(base)
    assert gpu_model(meta(driver="580.1", cuda_runtime="13.0")) == gpu_model(base)
    assert gpu_model(meta(devices=base["gpu"]["devices"][:1])) != gpu_model(base)
    found = environment.changes(environment.of_run(base),
                                environment.of_run(meta(driver="580.1")))
    assert [c.words() for c in found] == ["gpu driver 575.51.03 -> 580.1"]
    # settings are recorded, not matched: a power limit change keeps the baseline
    assert gpu_model(meta(devices=[{**d, "power_limit_w": 400.0}
                                   for d in base["gpu"]["devices"]])) == gpu_model(base)


def test_without_nvml_torch_answers_in_a_child_where_a_driver_is_loaded(tmp_path: Path,
                                                                       monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    nvml_mod.forget()
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  575.51.03  Wed Mar 26 2025\n")
    assert driver_from_proc(tmp_path) == "575.51.03"
    probe = {"cuda_runtime": "12.8", "devices": [
        {"name": "NVIDIA RTX 6000 Ada Generation", "memory_total": 48 * 2**30,
         "compute_capability": "8.9", "sm_count": 142}]}
    gpu = gpu_metadata(None, env={}, root=tmp_path, torch_probe=lambda: probe)
    assert gpu == {"source": "torch", "driver": "575.51.03", "cuda_driver": None,
                   "cuda_runtime": "12.8",
                   "devices": [{**probe["devices"][0], "mig": None, "persistence": None,
                                "power_limit_w": None, "app_clock_sm_mhz": None,
                                "app_clock_mem_mhz": None}]}
    assert gpu_metadata(None, env={}, root=tmp_path, torch_probe=lambda: None) is None
    nvml_mod.forget()


def test_torch_cuda_runtime_is_read_without_importing_torch(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (pkg / "version.py").write_text("__version__ = '2.13.0+cu128'\ncuda: Optional[str] = "
                                    "'12.8'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # find_spec looks there first
    assert torch_cuda_runtime({}) == "12.8"
    assert "torch" not in sys.modules
    (pkg / "version.py").write_text("cuda: Optional[str] = None\n")
    assert torch_cuda_runtime({}) is None
    assert torch_cuda_runtime(CUDA_TORCH) == "12.8"


def test_perfgate_machine_shows_the_gpus(fake_nvml, monkeypatch, capsys) -> None:
    from pytest_perfgate.cli import main

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    fake_nvml.devices[0].app_clocks = None
    assert main(["machine", "--machine", "gpu-box"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = lines.index("GPUs (name and compute capability match; memory and SMs are shown; "
                     "driver and CUDA are the environment; settings are recorded):")
    runtime = torch_cuda_runtime() or "none"
    assert lines[at + 1:at + 3] == [
        "  0: NVIDIA GeForce RTX 5090 (31.8 GiB, cc 12.0, SMs unknown); persistence enabled, "
        "power limit 575 W",
        f"  driver 575.51.03, CUDA driver 12.9, CUDA runtime (torch) {runtime}; read through "
        "nvml"]
    assert "  gpu                    NVIDIA GeForce RTX 5090 (cc 12.0) " \
        "(for the benchmarks that ran on the GPU)" in lines
    assert "8f2c1e9a" not in out


def test_describe_says_when_there_is_no_gpu() -> None:
    assert describe(None) == ["no GPU (no NVIDIA driver, or none visible)"]

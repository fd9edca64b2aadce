"""MIG slices, refused NVML queries and CUDA_VISIBLE_DEVICES, as a real driver answers them,
through the fake NVML (no GPU here): the device a run uses is found, described alike by
NVML and torch, and watched without counting another tenant's processes."""

from __future__ import annotations

import pytest
from gpu_fakes import ME, SLICE_1G, h100, installed, slice_1g, slice_7g

from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.gpu.fakes import FakeCuda, FakeDevice, FakeNvml
from pytest_perfgate.gpu.fingerprint import describe, fingerprint_fields, gpu_metadata
from pytest_perfgate.gpu.guard import GpuGuard
from pytest_perfgate.gpu.nvml import Nvml, Target
from pytest_perfgate.gpu.visible import cuda_target, visible


def test_a_mig_entry_is_the_slice_it_names() -> None:
    nv = Nvml(FakeNvml([FakeDevice(), h100(slice_1g(), slice_1g(uuid="MIG-2b" + "0" * 34))]))
    assert visible(nv, {"CUDA_VISIBLE_DEVICES": SLICE_1G}) == [Target(1, 0)]
    assert visible(nv, {"CUDA_VISIBLE_DEVICES": "MIG-2b,0"}) == [Target(1, 1), Target(0)]
    # a GPU in MIG mode is its slices to CUDA, whether named by index or left visible
    assert visible(nv, {"CUDA_VISIBLE_DEVICES": "1"}) == [Target(1, 0), Target(1, 1)]
    assert visible(nv, {}) == [Target(0), Target(1, 0), Target(1, 1)]
    assert visible(nv, {"CUDA_VISIBLE_DEVICES": "MIG-ffff"}) == []


def slice_metadata(make_slice) -> dict:
    nv = Nvml(FakeNvml([h100(make_slice())]))
    uuid = nv.uuid(Target(0, 0))
    gpu = gpu_metadata(nv, env={"CUDA_VISIBLE_DEVICES": uuid}, modules={})
    assert gpu is not None
    return gpu


def test_a_1g_and_a_7g_slice_are_different_machines_for_a_gpu_benchmark() -> None:
    small, large = slice_metadata(slice_1g), slice_metadata(slice_7g)
    assert small["devices"][0] == {
        "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "memory_total": 9984 * 2**20,
        "compute_capability": "9.0", "sm_count": 16, "mig": "enabled",
        "persistence": "enabled", "power_limit_w": 700.0, "app_clock_sm_mhz": 2407,
        "app_clock_mem_mhz": 14001}
    assert fingerprint_fields(small)["gpu"] == "NVIDIA H100 80GB HBM3 MIG 1g.10gb (cc 9.0)"
    assert fingerprint_fields(large)["gpu"] == "NVIDIA H100 80GB HBM3 MIG 7g.80gb (cc 9.0)"
    assert describe(large)[0] == ("0: NVIDIA H100 80GB HBM3 MIG 7g.80gb (79.0 GiB, cc 9.0, "
                                  "132 SMs); mig enabled, persistence enabled, power limit "
                                  "700 W, application clocks 2407/14001 MHz (SM/memory)")


@pytest.mark.parametrize("attributes", ["unsupported", "none"])
def test_a_refused_sm_count_is_unknown_and_the_text_does_not_depend_on_nvml(
        monkeypatch: pytest.MonkeyPatch, tmp_path, attributes: str) -> None:
    """nvmlDeviceGetAttributes is documented for MIG devices only: on a whole H100 it may
    raise NotSupported or give nothing. With nvidia-ml-py or without it (torch answers in
    a child, its total memory a little below NVML's), the record has the same fields and
    the fingerprint the same text."""
    fake = FakeNvml([h100()])
    fake.devices[0].attributes = attributes
    nvml_gpu = gpu_metadata(Nvml(fake), env={}, modules={})
    assert nvml_gpu is not None and nvml_gpu["devices"][0]["sm_count"] is None
    assert describe(nvml_gpu)[0].startswith(
        "0: NVIDIA H100 80GB HBM3 (79.6 GiB, cc 9.0, SMs unknown)")
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text("Kernel Module  575.51.03\n")
    probe = {"cuda_runtime": None, "devices": [
        {"name": "NVIDIA H100 80GB HBM3", "memory_total": 85_024_112_640,
         "compute_capability": "9.0", "sm_count": 132}]}
    with installed(monkeypatch, None):
        torch_gpu = gpu_metadata(None, env={}, root=tmp_path, torch_probe=lambda: probe,
                                 modules={})
    assert torch_gpu is not None
    assert set(torch_gpu["devices"][0]) == set(nvml_gpu["devices"][0])
    assert fingerprint_fields(torch_gpu)["gpu"] == fingerprint_fields(nvml_gpu)["gpu"]
    assert describe(torch_gpu)[0] == "0: NVIDIA H100 80GB HBM3 (79.2 GiB, cc 9.0, 132 SMs)"


def test_the_guard_finds_its_device_through_cuda_visible_devices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's current device 0 is the first device CUDA_VISIBLE_DEVICES lists, not NVML's
    GPU 0; its UUID, where torch gives one NVML knows, finds it first."""
    fake = FakeNvml([FakeDevice(pids=[ME, 4242]), FakeDevice(pids=[ME])])
    fake.devices[1].uuid = "GPU-77aa0000-0000-4000-8000-000000000001"
    cuda = FakeCuda(FakeClock())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with installed(monkeypatch, fake):
        g = GpuGuard.for_cuda(cuda)
        assert g is not None and g.devices == (Target(1),)
        assert g.spoiled(g.sample(), g.sample()) is None  # GPU 0's neighbour is not ours
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        cuda.props.uuid = "77aa0000-0000-4000-8000-000000000001"  # torch's form: no prefix
        assert GpuGuard.for_cuda(cuda).devices == (Target(1),)  # type: ignore[union-attr]


def test_on_a_mig_gpu_the_guard_watches_its_slice_not_the_other_tenants(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([h100(slice_1g(pids=[ME]), slice_1g(pids=[4242], uuid="MIG-2b" + "0" * 34))])
    cuda = FakeCuda(FakeClock())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", SLICE_1G)
    with installed(monkeypatch, fake):
        g = GpuGuard.for_cuda(cuda)
        assert g is not None and g.devices == (Target(0, 0),)
        assert g.spoiled(g.sample(), g.sample()) is None  # 4242 runs on the other slice
        a = g.sample()
        fake.devices[0].slices[0].pids.append(5151)
        fake.devices[0].throttle, fake.devices[0].sm_clock = 0x20, 1600  # the parent's
        assert g.spoiled(a, g.sample()) == (
            "another process on GPU 0 MIG 0: pid 5151; GPU 0 MIG 0 throttled: thermal "
            "(software slowdown), SM clock 1600 MHz (highest 2407)")
    assert cuda_target(Nvml(fake), 1, {"CUDA_VISIBLE_DEVICES": SLICE_1G}) is None

"""GPU-local placement on fake sysfs trees and a fake NVML, and the GPU learner's surface
(no GPU here)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpu_fakes import h100, installed, slice_1g
from ring_fakes import SPEC

from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.gpu.cuda import CudaTimer, PendingPhases
from pytest_perfgate.gpu.fakes import FakeCuda, FakeDevice, FakeNvml
from pytest_perfgate.gpu.locality import LocalityError, bus_id_of, normalize_bus_id
from pytest_perfgate.gpu.nvml import Nvml
from pytest_perfgate.placement import numa
from pytest_perfgate.placement.cpus import PlacementWarning
from pytest_perfgate.ring.layout import RingInputError
from pytest_perfgate.ring.pair import RingPair

BUS = "0000:41:00.0"


def machine(root: Path, numa_node: str, local: str = "8-15") -> tuple[Path, Path, Nvml]:
    """Two nodes (CPUs 0-7, 8-15), one GPU at BUS; NVML names it as index 0."""
    base = root / "sys/devices/system/node"
    for nid, cpus in ((0, "0-7"), (1, "8-15")):
        (base / f"node{nid}").mkdir(parents=True)
        (base / f"node{nid}/cpulist").write_text(cpus + "\n")
    (base / "online").write_text("0-1\n")
    (base / "has_memory").write_text("0-1\n")
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/status").write_text("Mems_allowed_list:\t0-1\n")
    dev = root / "sys/bus/pci/devices" / BUS
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text(numa_node + "\n")
    (dev / "local_cpulist").write_text(local + "\n")
    return root / "sys", root / "proc", Nvml(FakeNvml([FakeDevice(bus_id="00000000:41:00.0")]))


@pytest.fixture(autouse=True)
def sixteen_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numa, "usable_cpus", lambda: tuple(range(16)))
    monkeypatch.setattr(numa, "_warned", set())


def test_the_gpu_local_node_and_cpus(tmp_path: Path) -> None:
    sysfs, proc, nv = machine(tmp_path, "1")
    assert numa.gpu_local_nodes(0, sysfs_root=sysfs, proc_root=proc, nvml=nv) == [1]
    assert numa.gpu_local_cpus(0, sysfs_root=sysfs, nvml=nv) == tuple(range(8, 16))
    assert numa.gpu_local_nodes(BUS, sysfs_root=sysfs, proc_root=proc) == [1]  # no NVML


def test_a_platform_without_locality_warns_and_falls_back(tmp_path: Path) -> None:
    sysfs, proc, nv = machine(tmp_path, "-1", local="0-15")
    with pytest.warns(PlacementWarning) as got:
        assert numa.gpu_local_nodes(0, sysfs_root=sysfs, proc_root=proc, nvml=nv) is None
    assert str(got[0].message) == (
        "GPU 0 (0000:41:00.0) reports no NUMA node (numa_node is -1: a one-node machine or a "
        "VM that hides it): GPU-local placement falls back to the usual one")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert numa.gpu_local_nodes(0, sysfs_root=sysfs, proc_root=proc, nvml=nv) is None
    with pytest.warns(PlacementWarning):
        assert numa.gpu_local_cpus(0, sysfs_root=sysfs, nvml=nv) is None


def test_a_request_that_cannot_be_honoured_is_an_error(tmp_path: Path, monkeypatch) -> None:
    sysfs, proc, nv = machine(tmp_path, "1")
    (proc / "self/status").write_text("Mems_allowed_list:\t0\n")
    with pytest.raises(ValueError) as e:
        numa.gpu_local_nodes(0, sysfs_root=sysfs, proc_root=proc, nvml=nv)
    assert str(e.value) == (
        "GPU 0 (0000:41:00.0) is local to NUMA node 1, which is not usable here (a usable "
        "node has memory, is in Mems_allowed and owns one of our CPUs); usable nodes: [0]")
    monkeypatch.setattr(numa, "usable_cpus", lambda: (0, 1))
    with pytest.raises(ValueError) as e:
        numa.gpu_local_cpus(0, sysfs_root=sysfs, nvml=nv)
    assert str(e.value) == ("GPU 0 (0000:41:00.0) is local to CPUs 8-15, none of which this "
                            "process may use (its CPUs: 0-1)")
    with pytest.raises(LocalityError) as e:
        numa.gpu_local_nodes("0000:99:00.0", sysfs_root=sysfs, proc_root=proc)
    assert str(e.value) == (f"GPU 0000:99:00.0: {sysfs}/bus/pci/devices/0000:99:00.0 does "
                            "not exist: no such PCI device here")


def test_naming_a_gpu(monkeypatch) -> None:
    assert normalize_bus_id("00000000:41:00.0") == BUS
    assert normalize_bus_id("41:00.0") == BUS
    assert normalize_bus_id("gpu0") is None
    nv = Nvml(FakeNvml([FakeDevice()]))
    assert bus_id_of(0, nv) == "0000:01:00.0"
    with pytest.raises(LocalityError) as e:
        bus_id_of(3, nv)
    assert str(e.value) == ("GPU 3: NVML lists 1 device(s) and no PCI address for this one: "
                            "give an index below that, or the address")
    with pytest.raises(LocalityError) as e:
        bus_id_of("first")
    assert str(e.value) == (
        "GPU 'first' is not a PCI bus id: give an NVML index such as 0, or an address such "
        "as '0000:01:00.0' (nvidia-smi --query-gpu=pci.bus_id --format=csv)")
    from pytest_perfgate.gpu import nvml as nvml_mod

    monkeypatch.setattr(nvml_mod, "shared", lambda: None)
    with pytest.raises(LocalityError) as e:
        bus_id_of(0)
    assert str(e.value) == ("GPU 0: finding its PCI address needs NVML: pip install "
                            "'pytest-perfgate[gpu]', or give the address, e.g. '0000:01:00.0'")


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    """Two GPUs where ``import pynvml`` finds them, CUDA_VISIBLE_DEVICES unset."""
    fake = FakeNvml([FakeDevice(), FakeDevice(uuid="GPU-77aa" + "0" * 32)])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with installed(monkeypatch, fake):
        yield fake


def test_the_ring_pair_takes_a_learner_device_and_gpu_local_cpus(monkeypatch,
                                                                 two_gpus) -> None:
    pair = RingPair(SPEC, learner_device="cuda:1")
    assert pair.kwargs[1] == {"device": "cuda:1"} and pair.cuda_device == 1
    cpu = RingPair(SPEC)  # the CPU learner stays the default
    assert "device" not in cpu.kwargs[1] and cpu.cuda_device is None
    assert RingPair(SPEC, learner_device="cuda").cuda_device == 0
    with pytest.raises(RingInputError) as e:
        RingPair(SPEC, learner_device="gpu")
    assert str(e.value) == "learner_device='gpu': use 'cpu' (the default), 'cuda' or 'cuda:N'"
    monkeypatch.setattr(numa, "gpu_local_cpus", lambda device: (1,) if device == 0 else None)
    assert RingPair(SPEC, learner_cpus="gpu").cpus[1] == (1,)
    assert RingPair(SPEC, learner_cpus="gpu:2").cpus[1] is None  # fell back, warned there

    def missing(device: object) -> None:
        raise LocalityError(f"GPU {device}: no such PCI device here")

    monkeypatch.setattr(numa, "gpu_local_cpus", missing)
    with pytest.raises(RingInputError) as e:
        RingPair(SPEC, learner_cpus="gpu:0000:99:00.0")
    assert str(e.value) == ("learner_cpus='gpu:0000:99:00.0': GPU 0000:99:00.0: no such PCI "
                            "device here")


def test_learner_cpus_gpu_is_the_learners_own_gpu(monkeypatch, two_gpus) -> None:
    """"gpu" follows learner_device through CUDA_VISIBLE_DEVICES to NVML's GPU: on a
    two-socket machine the other GPU's CPUs are the wrong socket."""
    from pytest_perfgate.placement import cpus as cpus_mod

    local = {0: (0, 1), 1: (8, 9)}  # NVML GPU -> its local CPUs
    monkeypatch.setattr(numa, "gpu_local_cpus", lambda device: local[device])
    monkeypatch.setattr(cpus_mod, "usable_cpus", lambda: tuple(range(16)))

    def learner_cpus(device: str) -> object:
        return RingPair(SPEC, learner_cpus="gpu", learner_device=device).cpus[1]

    assert learner_cpus("cuda:1") == (8, 9)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert learner_cpus("cuda:0") == (8, 9) and learner_cpus("cuda:1") == (0, 1)
    assert learner_cpus("cpu") == (8, 9)  # CUDA's first device
    assert RingPair(SPEC, learner_cpus="gpu:0", learner_device="cuda:0").cpus[1] == (0, 1)
    two_gpus.devices[1] = h100(slice_1g())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0," + slice_1g().uuid)
    assert learner_cpus("cuda:1") == (8, 9)  # a slice: its GPU's CPUs


def test_a_cuda_device_that_is_not_there_is_refused_before_anything_starts(
        monkeypatch, two_gpus) -> None:
    def refusal(device: str) -> str:
        with pytest.raises(RingInputError) as e:
            RingPair(SPEC, learner_device=device)
        return str(e.value)

    assert refusal("cuda:2") == ("learner_device='cuda:2': CUDA sees 2 device(s) here: use "
                                 "'cuda:0' to 'cuda:1'")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert refusal("cuda:1") == (
        "learner_device='cuda:1': CUDA sees 1 device(s) here with CUDA_VISIBLE_DEVICES='1': "
        "use 'cuda:0', or list more devices in CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert refusal("cuda") == ("learner_device='cuda': CUDA sees no device here with "
                               "CUDA_VISIBLE_DEVICES='': run the learner on 'cpu', or on a "
                               "machine with a GPU")


def test_a_cuda_learner_without_cuda_says_so() -> None:
    torch = pytest.importorskip("torch")
    from pytest_perfgate.ring.workloads import cuda_device

    assert cuda_device("cpu", torch).type == "cpu"
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError) as e:
        cuda_device("cuda", torch)
    assert str(e.value) == (f"learner_device='cuda', but torch {torch.__version__} sees no "
                            "CUDA device here (a CPU build, or no driver): run the learner on "
                            "'cpu' or on a machine with a GPU")
    with pytest.raises(ValueError) as e:
        cuda_device("meta", torch)
    assert str(e.value) == "learner_device='meta': use 'cpu' or 'cuda' (or 'cuda:N')"
    with pytest.raises(ValueError) as e:
        cuda_device("tpu", torch)  # torch's own words, then what to use
    assert str(e.value).startswith("learner_device='tpu': Expected one of cpu, cuda")
    assert str(e.value).endswith("; use 'cpu' or 'cuda' (or 'cuda:N')")


class Sink:
    def __init__(self) -> None:
        self.added: list[tuple[str, int]] = []

    def add_gpu(self, name: str, gpu_ns: int) -> None:
        self.added.append((name, gpu_ns))


def test_a_free_running_learner_reports_gpu_time_once_the_device_is_past_it() -> None:
    clock = FakeClock()
    cuda = FakeCuda(clock)
    sink = Sink()
    gpu = PendingPhases(CudaTimer(cuda), sink)
    for _ in range(3):
        ev = gpu.start()
        cuda.launch(0.004, launch_s=0.0)
        gpu.end("update", ev)
    assert gpu.flush() == 0 and sink.added == []  # nothing waited for
    clock.advance(0.009)  # the device is past two of them
    assert gpu.flush() == 2
    assert sink.added == [("update", 4_000_000), ("update", 4_000_000)]
    cuda.synchronize()
    assert gpu.flush() == 1 and cuda.synchronizations == 1  # the test's, not the flush's


class FakeRing:
    """What sac_learner reads of a ring: its spec, pop() and the wait counter."""

    def __init__(self) -> None:
        import numpy as np

        self.spec = SPEC
        self.waited_ns = 0
        n = SPEC.num_envs
        self.batch = type("B", (), {
            "transitions": n, "obs": np.ones((n, 4), np.float32),
            "next_obs": np.ones((n, 4), np.float32), "action": np.zeros((n, 2), np.float32),
            "reward": np.ones(n, np.float32), "terminated": np.zeros(n, np.float32)})()

    def pop(self, max_steps: int, timeout: float) -> object:
        return self.batch


def test_the_cpu_learner_stays_the_default_and_keeps_its_phases() -> None:
    pytest.importorskip("torch")
    from pytest_perfgate.ring.sides import SideRecorder
    from pytest_perfgate.ring.workloads import sac_learner

    rec = SideRecorder()
    once = sac_learner(FakeRing(), rec, batch_size=8, hidden=8)  # type: ignore[arg-type]
    assert [once() for _ in range(3)] == [8, 8, 8]
    assert sorted(rec.take()) == ["drain", "update", "wait_data"]


def test_an_unreadable_local_cpulist_is_named(tmp_path: Path) -> None:
    sysfs, _, nv = machine(tmp_path, "1", local="8-x")
    with pytest.raises(ValueError) as e:
        numa.gpu_local_cpus(0, sysfs_root=sysfs, nvml=nv)
    assert str(e.value).startswith("GPU 0 (0000:41:00.0): unreadable local_cpulist '8-x' (")


def test_the_gpu_local_node_plugs_into_numa_workers(tmp_path: Path, monkeypatch) -> None:
    from pytest_perfgate.placement import cpus as cpus_mod
    from pytest_perfgate.placement.launchers import NumaWorkers

    monkeypatch.setattr(cpus_mod, "usable_cpus", lambda: tuple(range(16)))
    sysfs, proc, nv = machine(tmp_path, "1")
    nodes = numa.gpu_local_nodes(0, sysfs_root=sysfs, proc_root=proc, nvml=nv)
    plan = NumaWorkers(sysfs_root=str(sysfs), proc_root=str(proc)).plan(4096, nodes)
    assert plan == [(1, tuple(range(8, 16)), 4096)]  # one worker, on the GPU's node

"""The fakes for the tests and the docs' examples, in one place: no GPU here.

:class:`FakeCuda` (gpu/fake_cuda.py) is ``torch.cuda`` on a fake clock: kernels queue on
streams, events complete when their stream reaches them, ``synchronize`` waits for one
device. :class:`FakeNvml` (gpu/fake_nvml.py) is pynvml over :class:`FakeDevice` objects,
MIG slices and refused queries included. Both are injected where the real ones are read:
``sys.modules["torch"]`` (through :func:`fake_torch`) and ``sys.modules["pynvml"]``.
"""

from pytest_perfgate.gpu.fake_cuda import FakeClock, FakeCuda, FakeEvent, FakeStream, fake_torch
from pytest_perfgate.gpu.fake_nvml import (
    FakeDevice,
    FakeMig,
    FakeNvml,
    NVMLError,
    NVMLError_NotFound,
    NVMLError_NotSupported,
)

__all__ = ["FakeClock", "FakeCuda", "FakeDevice", "FakeEvent", "FakeMig", "FakeNvml",
           "FakeStream", "NVMLError", "NVMLError_NotFound", "NVMLError_NotSupported",
           "fake_torch"]

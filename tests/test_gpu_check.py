"""The parts of tools/gpu_check.py that can run without a GPU do what the real check relies
on: its own event timing sees GPU work, its ring check counts every transition once
(tests/test_gpu_docs.py runs the whole script here, where it says there is no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.gpu.fakes import FakeCuda, fake_torch

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def test_its_own_reference_times_the_gpu_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference the other timings are divided by: 2 ms of kernels a step, launched in
    0.1 ms, is 2 ms a step."""
    monkeypatch.syspath_prepend(str(TOOLS))
    from gpu_check_timing import own_events_ms

    cuda = FakeCuda(FakeClock())
    assert own_events_ms(fake_torch(cuda), lambda: cuda.launch(0.002, launch_s=0.0001)) \
        == pytest.approx(2.0, rel=0.01)


@pytest.mark.slow  # a real ring pair: two spawn processes
def test_its_ring_check_counts_every_transition_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TOOLS))  # the sides import the factories by module
    from gpu_check_ring import exact_transfer

    got = exact_transfer(total=20_000, num_envs=100, device="cpu", timeout_s=60.0)
    assert got == [(True, "exactly 20,000 transitions reached the learner"),
                   (True, "each transition once, none lost or repeated (sums of the indices)")]

"""The study's injected slowdown: each step lengthened by a fraction of its own time."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_perfgate.modes.ab.slowdown import Slowed


class FakeClock:
    """Advances 1 unit per read; a step advances it by its cost."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_each_step_is_lengthened_by_the_fraction_of_its_own_duration() -> None:
    clock = FakeClock()
    costs = iter([100.0, 300.0, 100.0])

    def step() -> str:
        clock.now += next(costs) - 1.0  # the step's read of the clock after it counts 1
        return "stepped"

    src = SimpleNamespace(step=step)
    slowed = Slowed(src, clock=clock)
    slowed.set(0.1)
    spans = []
    for _ in range(2):
        t0 = clock.now
        assert src.step() == "stepped"
        spans.append(clock.now - t0)
    # 100 units of step (+1 read) then a wait until 10% of it has passed, in 1-unit reads:
    # the wait scales with each step's own cost, 100 -> ~10, 300 -> ~30
    assert 110 <= spans[0] <= 113 and 330 <= spans[1] <= 333
    slowed.set(0)
    t0 = clock.now
    src.step()
    assert clock.now - t0 == 99.0  # off: the step alone, no clock reads


def test_negative_fractions_turn_it_off() -> None:
    src = SimpleNamespace(step=lambda: None)
    slowed = Slowed(src, clock=FakeClock())
    slowed.set(-0.5)
    assert slowed.fraction == 0.0

"""Injected slowdown for the verdict-quality study: only calibration sides load this.

``perfgate calibrate`` measures whether the A/B gate catches a known slowdown; the side
started with ``SideSpec(calibration=True)`` wraps its step in :class:`Slowed` and sets the
slowdown on the controller's request. Production A/B sides never import this module.
"""

from __future__ import annotations

import time
from typing import Any

CALIBRATE_S = 0.5  # of stepping, split over the rounds, to measure a step's cost
ROUNDS = 5  # step cost and spin cost measured alternately, this many times
SPIN_MIN_S = 0.01  # a spin-cost measurement lasts at least this long


class Slowed:
    """After each step, spin for ``fraction`` of its cost.

    The spin is a fixed count of loop iterations calibrated on the step's measured cost, so
    it is real extra work that the machine's speed affects like any other.
    """

    def __init__(self, source: Any) -> None:
        self.source = source
        self.fraction = 0.0
        self._spins = 0
        inner = source.step

        def step() -> object:
            out = inner()
            n = self._spins
            while n:
                n -= 1
            return out

        source.step = step

    def _spin_cost(self) -> float:
        n, t = 10_000, 0.0
        while t < SPIN_MIN_S:
            n *= 2
            t0 = time.perf_counter()
            k = n
            while k:
                k -= 1
            t = time.perf_counter() - t0
        return t / n

    def set(self, fraction: float) -> None:
        """Calibrate the spin to ``fraction`` of one step's current cost (0 turns it off).

        Step cost and spin cost are measured alternately and the median of their ratios is
        used: the machine's speed drifts (docs/design.md §1), so a spin cost measured once,
        at another moment than the step's, biased the injected slowdown (10% measured as 7%).
        """
        self._spins = 0
        self.fraction = fraction
        if fraction <= 0:
            return
        ratios = []
        for _ in range(ROUNDS):
            w = self.source.run_window(CALIBRATE_S / ROUNDS)
            ratios.append(w.wall_s / max(1, w.calls) / self._spin_cost())
        self._spins = max(1, int(fraction * sorted(ratios)[ROUNDS // 2]))

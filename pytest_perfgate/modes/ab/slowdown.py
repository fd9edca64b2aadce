"""Injected slowdown for the verdict-quality study: only calibration sides load this.

``perfgate calibrate`` measures whether the A/B gate catches a known slowdown; the side
started with ``SideSpec(calibration=True)`` wraps its step in :class:`Slowed` and sets the
slowdown on the controller's request. Production A/B sides never import this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class Slowed:
    """After each step, busy-wait for ``fraction`` of that step's own wall time.

    A slowdown a merge causes scales with the step: when the machine runs 1.3x slower the
    slower code is 1.3x slower too. A spin of a fixed iteration count calibrated once does
    not scale so, and on this drifting machine it delivered +1.28% for +2% over 60 quiet
    trials (docs/ab.md "The injected slowdown"). Measured against the step's own duration,
    each call is exactly ``1 + fraction`` times as long as it would have been, whatever the
    machine is doing; the wait is real CPU work (the side's core stays busy).
    """

    def __init__(self, source: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        self.source = source
        self.fraction = 0.0
        inner = source.step

        def step() -> object:
            f = self.fraction
            if f <= 0:
                return inner()
            t0 = clock()
            out = inner()
            t1 = clock()
            end = t1 + (t1 - t0) * f
            while clock() < end:
                pass
            return out

        source.step = step

    def set(self, fraction: float) -> None:
        """Make every later step ``fraction`` slower (0 turns it off)."""
        self.fraction = max(0.0, float(fraction))

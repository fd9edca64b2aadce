"""Group-sequential looks for the paired A/B test: stop early when the evidence is clear,
with the false-alarm rate controlled across all looks (docs/design.md §3).

Peeking at a significance test after every batch of turns and stopping at the first
"significant" one inflates the false-alarm rate far above ``alpha``. A group-sequential
design fixes the looks in advance (at a fraction ``t`` of the maximum turns each) and
spends ``alpha`` over them with a Lan-DeMets spending function of O'Brien-Fleming type,
``alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))``: almost nothing at the early looks
(only a gross regression stops there), nearly all of it at the last. Each look's boundary
``c_k`` solves ``P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = alpha(t_k) -
alpha(t_{k-1})`` under no change, where the statistics of the looks are those of one
Brownian motion (``corr(Z_i, Z_j) = sqrt(t_i / t_j)``); the probability is integrated
numerically over a grid (Armitage, McPherson and Rowe's recursion), deterministic, with
scipy's normal distribution and root finder.

The boundaries also give repeated confidence intervals (Jennison and Turnbull): the
interval ``estimate +- c_k x se`` at look ``k`` covers the true ratio at every look at
once with probability ``1 - alpha`` on each side, so "no drop larger than X" stays true
whenever the test stops.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_LOOK_TURNS = 8  # looks closer than this many turns apart are merged (few-turn runs)
MAX_LOOKS = 10  # more looks buy almost nothing under O'Brien-Fleming spending
GRID = 1201  # grid points per look for the numerical integration


def obf_spent(t: float, alpha: float) -> float:
    """The O'Brien-Fleming-type Lan-DeMets spending function: alpha spent by fraction t."""
    from scipy import stats  # type: ignore[import-untyped]

    if t <= 0:
        return 0.0
    if t >= 1:
        return alpha
    return float(2 * stats.norm.sf(stats.norm.isf(alpha / 2) / math.sqrt(t)))


@functools.lru_cache(maxsize=64)
def boundaries(fractions: tuple[float, ...], alpha: float, spend_all: bool = True
               ) -> tuple[float, ...]:
    """One-sided z boundaries at the looks ``fractions`` (increasing). With ``spend_all``
    the last look spends the rest of ``alpha`` whatever its fraction: a run cut short (its
    turns ran out) ends where it stops at level alpha in all. Earlier looks' boundaries do
    not depend on later ones."""
    import numpy as np
    from scipy import optimize, stats

    if not fractions or any(b <= a for a, b in itertools.pairwise(fractions)) \
            or fractions[0] <= 0:
        raise ValueError(f"look fractions {fractions!r} must be increasing and > 0")
    norm = stats.norm
    out: list[float] = []
    spent = 0.0
    grid = dens = weights = None
    prev_t = 0.0
    for k, t in enumerate(fractions):
        total = alpha if spend_all and k == len(fractions) - 1 else obf_spent(t, alpha)
        inc = max(total - spent, 1e-300)
        spent = max(total, spent)
        if k == 0:
            c = float(norm.isf(inc))
            b = c * math.sqrt(t)
            grid = np.linspace(-8 * math.sqrt(t), b, GRID)
            dens = norm.pdf(grid, scale=math.sqrt(t))
        else:
            assert grid is not None and dens is not None
            sd = math.sqrt(t - prev_t)
            weights = np.full(GRID, grid[1] - grid[0])
            weights[[0, -1]] /= 2
            mass = weights * dens

            def crossing(level: float, mass: np.ndarray = mass, grid: np.ndarray = grid,
                         sd: float = sd, inc: float = inc) -> float:
                """Alpha crossing at ``level`` now, less what this look may spend."""
                return float(np.sum(mass * norm.sf((level - grid) / sd))) - inc

            lo, hi = float(grid[0]), float(grid[-1]) + 12 * sd
            if crossing(hi) >= 0:  # the alpha left is too small to resolve: never cross
                b = hi
            else:
                b = float(optimize.brentq(crossing, lo, hi, xtol=1e-10))
            c = b / math.sqrt(t)
            new = np.linspace(-8 * math.sqrt(t), b, GRID)
            dens = (norm.pdf((new[:, None] - grid[None, :]) / sd) / sd) @ mass
            grid = new
        out.append(c)
        prev_t = t
    return tuple(out)


@dataclass(frozen=True)
class Design:
    """Where the looks are (turns per side at each) and each look's nominal level: the
    one-sided p-value below which that look stops for a regression (or an improvement)."""

    max_turns: int
    looks: tuple[int, ...]
    alpha: float

    @property
    def levels(self) -> tuple[float, ...]:
        return self.levels_at(self.looks)

    def levels_at(self, looks: Sequence[int], final: bool = True) -> tuple[float, ...]:
        """Nominal levels of looks taken at these turn counts; ``final``: the last spends the
        rest of alpha (a run whose turns were cut short still ends at level alpha in all)."""
        from scipy import stats

        fr = tuple(min(n / self.max_turns, 1.0) for n in looks)
        return tuple(float(stats.norm.sf(c)) for c in boundaries(fr, self.alpha, final))

    def level(self, taken: Sequence[int], final: bool) -> float:
        """The nominal one-sided level of the latest look in ``taken`` (kept turns at each)."""
        return self.levels_at(tuple(taken), final)[-1]


def plan(max_turns: int, looks: int, alpha: float) -> Design:
    """``looks`` evenly spaced looks up to ``max_turns``, merged where they would be closer
    than MIN_LOOK_TURNS apart (a 6-turn run has one look)."""
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 2:
        raise ValueError(f"max_turns={max_turns!r}: the paired test needs >= 2 turns, e.g. 96")
    if isinstance(looks, bool) or not isinstance(looks, int) or not 1 <= looks <= MAX_LOOKS:
        raise ValueError(f"looks={looks!r}: give a whole number of looks from 1 to {MAX_LOOKS}, "
                         "e.g. 4")
    k = max(1, min(looks, max_turns // MIN_LOOK_TURNS))
    at = tuple(sorted({math.ceil(max_turns * (i + 1) / k) for i in range(k)}))
    return Design(max_turns, at, alpha)

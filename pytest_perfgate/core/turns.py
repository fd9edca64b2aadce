"""The order in which configurations take their turns when measured interleaved.

Interleaving cancels the machine's drift (docs/design.md §1), but a configuration can also
inherit what the one before it left behind: a queue's feeder thread still freeing pickles,
pages to fault back in, a cold cache. Rotating the starting point keeps the cycle, so each
configuration would always follow the same neighbour (measured on the ring benchmark: the
path after ``mp.Queue`` ran 0.61 ms per step against 0.48 after the others). A Williams
design (a Latin square balanced for first-order carryover, Williams 1949) puts every
configuration in every position equally often and right after every other one equally
often: once per n turns for an even n, twice per 2n turns for an odd n.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def williams_rows(n: int) -> list[list[int]]:
    """The rows of a Williams design for ``n`` configurations (n rows if n is even, 2n if
    odd): each a permutation of range(n)."""
    if n < 1:
        raise ValueError(f"n={n!r}: need at least one configuration")
    base, lo, hi = [0], 1, n - 1
    while len(base) < n:  # 0, 1, n-1, 2, n-2, ...
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    rows = [[(b + r) % n for b in base] for r in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def turn_order(items: Sequence[T], turn: int) -> list[T]:
    """``items`` in the order of turn ``turn`` (counted from 0) of a Williams design."""
    rows = williams_rows(len(items))
    return [items[i] for i in rows[turn % len(rows)]]

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
    odd), each a permutation of range(n), in an order that runs as one stream: no row
    starts with the item the previous one ended with (for n >= 3, the last row wrapping
    to the first included), and for an odd n the mirrored rows alternate with the others,
    so a study shorter than 2n turns gets some of each."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}: need at least one configuration")
    base, lo, hi = [0], 1, n - 1
    while len(base) < n:  # 0, 1, n-1, 2, n-2, ...
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    rows = [[(b + r) % n for b in base] for r in range(n)]
    if n % 2 == 0:
        return rows  # row r ends with r + n/2 and row r + 1 starts with r + 1: no repeat
    return _chain(rows, [row[::-1] for row in rows])


def _chain(plain: list[list[int]], mirrored: list[list[int]]) -> list[list[int]]:
    """plain and mirrored rows alternately, each next row starting with another item than
    the one its predecessor ended with (and the last row than the first starts with)."""
    def search(out: list[list[int]], left: tuple[list[list[int]], list[list[int]]]
               ) -> list[list[int]] | None:
        pool = left[len(out) % 2]
        if not pool:
            return out if out[-1][-1] != out[0][0] else None
        for i, row in enumerate(pool):
            if out and row[0] == out[-1][-1]:
                continue
            rest = pool[:i] + pool[i + 1:]
            got = search([*out, row], (rest, left[1]) if len(out) % 2 == 0
                         else (left[0], rest))
            if got is not None:
                return got
        return None

    return search([], (plain, mirrored)) or plain + mirrored


def turn_order(items: Sequence[T], turn: int) -> list[T]:
    """``items`` in the order of turn ``turn`` (counted from 0) of a Williams design."""
    rows = williams_rows(len(items))
    return [items[i] for i in rows[turn % len(rows)]]

"""core/turn_order.py: the balanced order configurations take turns in."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from pytest_perfgate.core.turn_order import turn_order, williams_rows
from pytest_perfgate.sim.thread_sweep import rotation


@pytest.mark.parametrize("n", range(1, 10))
def test_every_configuration_follows_every_other_equally_often(n: int) -> None:
    rows = williams_rows(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(r) == list(range(n)) for r in rows)
    follows = Counter((r[i], r[i + 1]) for r in rows for i in range(n - 1))
    want = 1 if n % 2 == 0 else 2
    assert follows == {(a, b): want for a in range(n) for b in range(n) if a != b}
    positions = Counter((i, x) for r in rows for i, x in enumerate(r))
    assert set(positions.values()) == {len(rows) // n}  # each in every position alike


@pytest.mark.parametrize("n", range(3, 12))
def test_run_back_to_back_no_configuration_follows_itself(n: int) -> None:
    """The rows run as one stream (turn after turn, the last wrapping to the first)."""
    rows = williams_rows(n)
    stream = [x for row in rows for x in row]
    stream += stream[:1]
    assert all(a != b for a, b in itertools.pairwise(stream))
    if n % 2:  # plain and mirrored rows alternate: a short study gets both kinds
        evens, odds = {tuple(r) for r in rows[0::2]}, {tuple(r) for r in rows[1::2]}
        assert {r[::-1] for r in odds} == evens and not evens & odds


def test_a_rotation_would_not_be_balanced_and_the_sweep_uses_the_design() -> None:
    names = ["a", "b", "c", "d"]
    rotated = [names[k:] + names[:k] for k in range(4)]
    assert {r[r.index("a") + 1] for r in rotated if r[-1] != "a"} == {"b"}  # always b
    order = [n for _, n in rotation(names, 4)]
    after_a = {order[i + 1] for i in range(len(order) - 1) if order[i] == "a" and i % 4 != 3}
    assert after_a == {"b", "c", "d"}
    assert turn_order(names, 5) == turn_order(names, 1)  # periodic


def test_no_configurations_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="n=0: need at least one configuration"):
        williams_rows(0)

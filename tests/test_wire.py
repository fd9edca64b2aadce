"""One encoding of a window for every pipe: nothing a path needs is dropped on the way."""

from __future__ import annotations

import pytest

from pytest_perfgate.core.timing import PhaseStats
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.modes.ab import _decode, _encode

W = RawWindow(4096, 1.0, 3.5, {"physics": PhaseStats(10, 900_000_000, 3_000_000_000),
                               "observe": PhaseStats(10, 50_000_000, 40_000_000)}, 10, streams=4)


def test_round_trip_keeps_every_field_including_streams() -> None:
    assert RawWindow.from_wire(W.to_wire()) == W
    assert _decode(_encode(W)) == W  # the A/B side pipe: streams survive (phase shares)


def test_parallel_windows_add_up_and_count_streams() -> None:
    one = RawWindow(100, 1.0, 0.9, {"p": PhaseStats(5, 10, 9)}, 5)
    two = RawWindow(50, 1.0, 1.0, {"p": PhaseStats(2, 20, 20), "q": PhaseStats(1, 1, 1)}, 2)
    both = RawWindow.parallel([one, two], 1.0)
    assert both == RawWindow(150, 1.0, 1.9, {"p": PhaseStats(7, 30, 29),
                                             "q": PhaseStats(1, 1, 1)}, 7, streams=2)


@pytest.mark.parametrize("bad", [{}, {"transitions": "x", "wall_s": 1, "cpu_s": 1},
                                 {"transitions": 1, "wall_s": 1, "cpu_s": 1, "phases": {"p": 3}}])
def test_malformed_windows_are_named(bad: dict) -> None:
    with pytest.raises(ValueError, match="malformed window"):
        RawWindow.from_wire(bad)

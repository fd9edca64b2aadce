"""Interleaved A/B: a base process and a head process measured in alternating short turns.

Written by hand: no benchmarking library alternates two live processes (docs/design.md §3).

- :mod:`.remote`: the controller's handle on a side process (:class:`Side`, :class:`Pair`,
  :class:`RemoteSource`, :class:`SideSpec`, :class:`SideError`);
- :mod:`.controller`: :class:`ABController`, the mode of the controlling pytest process
  (starts the sides, judges each pair), and :func:`start_ab` (the base revision's worktree);
- :mod:`.turns`: ABBA turn pairs, the load-change rule and the sequential looks;
- :mod:`.by_sides`: a perf test run by its sides alone (the controller sets none up);
- :mod:`.side`: :class:`ABSide`, the mode of a side process (serves windows);
- :mod:`.checkout`: the base revision's worktree, removed on SIGTERM too, swept after SIGKILL;
- :mod:`.slowdown`: the slowdown injector, loaded only by calibration sides.

Protocol (over a socketpair inherited by the side process, pickled tuples of plain data):
side -> ("bench", name, transitions, meta) when its test reaches ``perfgate.measure``
(meta: what the controller judges it by, side.announcement); side -> ("end",) when its test
measures nothing more;
controller -> ("window", seconds) and side -> ("raw", RawWindow.to_wire()); controller ->
("extra",) and side -> ("extra", dict) after the windows: what the side's process adds to the
record (a ring pair's ``ring_pair``); controller -> ("done",) returns from measure; side ->
("error", text) when the step (or its source's metadata) raised. Calibration
sides also take controller -> ("slowdown", fraction) and answer ("ok", fraction). Only one
side runs at a time: the other waits idle.
"""

from pytest_perfgate.modes.ab.abba import interleave, measure_pair
from pytest_perfgate.modes.ab.checkout import sweep_stale, term_as_interrupt
from pytest_perfgate.modes.ab.controller import (
                                                 AB,
                                                 ABController,
                                                 ABSetup,
                                                 ABSetupError,
                                                 start_ab,
                                                 worktree,
)
from pytest_perfgate.modes.ab.remote import (
                                                 START_TIMEOUT_S,
                                                 Pair,
                                                 RemoteSource,
                                                 Side,
                                                 SideError,
                                                 SideSpec,
                                                 _decode,
                                                 _encode,
                                                 window_bound,
)
from pytest_perfgate.modes.ab.side import ABSide, is_side_process, serve, side_connection

__all__ = [
                                                 "AB",
                                                 "START_TIMEOUT_S",
                                                 "ABController",
                                                 "ABSetup",
                                                 "ABSetupError",
                                                 "ABSide",
                                                 "Pair",
                                                 "RemoteSource",
                                                 "Side",
                                                 "SideError",
                                                 "SideSpec",
                                                 "_decode",
                                                 "_encode",
                                                 "interleave",
                                                 "is_side_process",
                                                 "measure_pair",
                                                 "serve",
                                                 "side_connection",
                                                 "start_ab",
                                                 "sweep_stale",
                                                 "term_as_interrupt",
                                                 "window_bound",
                                                 "worktree",
]

"""The ``@pytest.mark.perfgate(...)`` marker: what it takes, checked for every test at
collection, before any test runs (a bad one used to surface as an INTERNALERROR, or only
when its test ran)."""

from __future__ import annotations

import pytest

from pytest_perfgate.core.metric import rate_unit
from pytest_perfgate.session.checks import PerfgateUsageError
from pytest_perfgate.session.options import OptionError, parse_fraction

KWARGS: tuple[str, ...] = ("threshold", "counts", "memory_threshold")
EXAMPLE = "@pytest.mark.perfgate(threshold=0.1)"
KWARGS = (*KWARGS, "unit")  # what one call (or transition) is: "rows" reads as rows/s


def parse_threshold(raw: object) -> float:
    """A marker threshold: "5%", "0.05" or a number, never a bool or a list."""
    if isinstance(raw, str):
        return parse_fraction(raw)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise OptionError(f"{raw!r} is not a fraction: use e.g. 0.05 or \"5%\"")
    return parse_fraction(repr(raw))


def problems(item: pytest.Item) -> list[str]:
    """What is wrong with the perfgate markers on ``item`` (every one, not only the closest)."""
    out = []
    for mark in item.iter_markers("perfgate"):
        shown = ", ".join([*(repr(a) for a in mark.args),
                           *(f"{k}={v!r}" for k, v in mark.kwargs.items())])
        where = f"@pytest.mark.perfgate({shown}) on {item.nodeid}"
        if mark.args:
            out.append(f"{where}: takes keyword arguments only, e.g. {EXAMPLE}")
        unknown = sorted(set(mark.kwargs) - set(KWARGS))
        if unknown:
            out.append(f"{where}: unknown argument(s) {', '.join(unknown)}; it takes "
                       f"{', '.join(KWARGS)}, e.g. {EXAMPLE}")
        if "counts" in mark.kwargs and not isinstance(mark.kwargs["counts"], bool):
            out.append(f"{where}: counts={mark.kwargs['counts']!r} is not a boolean: use "
                       "counts=True to count this test's instructions under valgrind, "
                       "counts=False to never count them")
        if "unit" in mark.kwargs:
            try:
                rate_unit(mark.kwargs["unit"], "unit=", "unit='rows'")
            except ValueError as e:
                out.append(f"{where}: {e}")
        if "threshold" in mark.kwargs:
            try:
                parse_threshold(mark.kwargs["threshold"])
            except OptionError as e:
                out.append(f"{where}: {e}")
        if "memory_threshold" in mark.kwargs:
            try:
                parse_threshold(mark.kwargs["memory_threshold"])
            except OptionError as e:
                out.append(f"{where}: memory_threshold: {e}; it is the rise of peak memory "
                           "that fails the test, e.g. memory_threshold=0.10 (or \"10%\")")
    return out


def marker_memory_threshold(item: pytest.Item) -> float | None:
    """The closest perfgate marker's memory_threshold= (None: peak memory is not gated).
    Checked at collection (:func:`problems`)."""
    mark = item.get_closest_marker("perfgate")
    if mark is None or "memory_threshold" not in mark.kwargs:
        return None
    return parse_threshold(mark.kwargs["memory_threshold"])


def marker_counts(item: pytest.Item) -> bool | None:
    """The closest perfgate marker's counts= (None: --perfgate-counts decides)."""
    mark = item.get_closest_marker("perfgate")
    if mark is None or not isinstance(mark.kwargs.get("counts"), bool):
        return None
    return bool(mark.kwargs["counts"])


def marker_unit(item: pytest.Item) -> str | None:
    """The closest perfgate marker's unit= (None: env-steps, or calls for pytest-benchmark's
    ``benchmark``), checked at collection."""
    mark = item.get_closest_marker("perfgate")
    unit = None if mark is None else mark.kwargs.get("unit")
    return unit if isinstance(unit, str) else None


def marker_threshold(item: pytest.Item) -> float | None:
    """The closest perfgate marker's threshold (None: the session's). Every marker was
    checked at collection (:meth:`PerfgatePlugin.check_items`); this re-raises for items
    created later, e.g. by a plugin."""
    mark = item.get_closest_marker("perfgate")
    if mark is None or "threshold" not in mark.kwargs:
        return None
    raw = mark.kwargs["threshold"]
    try:
        return parse_threshold(raw)
    except OptionError as e:
        raise PerfgateUsageError(f"@pytest.mark.perfgate(threshold={raw!r}) on {item.nodeid}: "
                                 f"{e}") from None

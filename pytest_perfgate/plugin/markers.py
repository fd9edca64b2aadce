"""The ``@pytest.mark.perfgate(...)`` marker: what it takes, checked for every test at
collection, before any test runs (a bad one used to surface as an INTERNALERROR, or only
when its test ran)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_perfgate.core.metric import rate_unit
from pytest_perfgate.session.checks import PerfgateUsageError
from pytest_perfgate.session.options import OptionError, parse_fraction

# unit=: what one call (or transition) is: "rows" reads as rows/s
KWARGS: tuple[str, ...] = ("threshold", "counts", "memory_threshold", "unit")
EXAMPLE = "@pytest.mark.perfgate(threshold=0.1)"


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


@dataclass(frozen=True)
class MarkerSettings:
    """What a test's closest perfgate marker asks, read once per test (None: the session's
    option decides, or, for ``unit``, env-steps, or calls for pytest-benchmark's
    ``benchmark``; ``memory_threshold`` None: peak memory is not gated)."""

    threshold: float | None = None
    counts: bool | None = None
    memory_threshold: float | None = None
    unit: str | None = None


def settings(item: pytest.Item) -> MarkerSettings:
    """The closest perfgate marker's settings. Every marker was checked at collection
    (:func:`problems`); a bad threshold re-raises here for items created later, e.g. by a
    plugin."""
    mark = item.get_closest_marker("perfgate")
    if mark is None:
        return MarkerSettings()
    kw = mark.kwargs
    try:
        threshold = parse_threshold(kw["threshold"]) if "threshold" in kw else None
    except OptionError as e:
        raise PerfgateUsageError(f"@pytest.mark.perfgate(threshold={kw['threshold']!r}) on "
                                 f"{item.nodeid}: {e}") from None
    memory = kw.get("memory_threshold")
    counts, unit = kw.get("counts"), kw.get("unit")
    return MarkerSettings(threshold,
                        counts if isinstance(counts, bool) else None,
                        None if memory is None else parse_threshold(memory),
                        unit if isinstance(unit, str) else None)

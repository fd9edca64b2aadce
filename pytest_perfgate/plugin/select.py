"""``--perfgate-only`` / ``--perfgate-skip``: run only the perf tests, or all but them.

The shorthands pytest-benchmark users know (``--benchmark-only``/``--benchmark-skip``) for
``--perfgate-select only|skip`` (ini ``perfgate_select``). A perf test is one that measures:
it uses the ``perfgate`` fixture, or pytest-benchmark's ``benchmark``, which ``--perfgate``
adopts. Skipped, not deselected, so the summary says why each test did not run.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pytest_perfgate.session.options import OptionError

REASONS = {"only": "not a perf test (--perfgate-only)", "skip": "a perf test (--perfgate-skip)"}


def from_flags(config: pytest.Config, select: str | None) -> str | None:
    """The --perfgate-select value the shorthands ask for; contradictions are an error."""
    chosen = [v for v in ("only", "skip") if config.getoption(f"perfgate_{v}")]
    if len(chosen) == 2 or (chosen and select not in (None, chosen[0])):
        given = [f"--perfgate-{v}" for v in chosen] + ([f"--perfgate-select {select}"]
                                                      if select else [])
        raise OptionError(f"{' and '.join(given)} contradict each other: give one of them")
    return chosen[0] if chosen else select


def is_perf_test(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return "perfgate" in names or "benchmark" in names


def apply(items: Sequence[pytest.Item], select: str) -> None:
    """Mark the tests ``select`` leaves out as skipped, with the reason."""
    if select == "all":
        return
    for item in items:
        if is_perf_test(item) == (select == "skip"):
            item.add_marker(pytest.mark.skip(reason=REASONS[select]))

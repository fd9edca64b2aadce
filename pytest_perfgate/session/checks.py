"""The perf-test API's arguments, checked once, before anything is measured.

Every message names the value and the fix; :class:`PerfgateUsageError` is what the plugin
shows instead of a traceback.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pytest_perfgate.core.metric import ENV_STEPS, is_unit, rate_unit
from pytest_perfgate.core.names import safe_name


class PerfgateUsageError(ValueError):
    """A perf test called the API wrongly; the message names the value and the fix."""


def check_name(name: str) -> str:
    """Benchmark names end up in asv file names: the one safe-name rule (core/names.py)."""
    try:
        return safe_name(name, "benchmark name", "name='humanoid_256'", shown=f"name={name!r}")
    except ValueError as e:
        raise PerfgateUsageError(str(e)) from None


# Keys of BenchResult.extra that perfgate itself writes and the report reads (ab_pairs:
# where reports written before the pairs had a key of their own kept them).
RESERVED_EXTRA = frozenset({"workers", "placement_warnings", "late_windows", "ab_base",
                            "ab_base_commit", "ab_base_samples", "ab_pairs", "rounds",
                            "unpinned_threads"})


def check_extra(extra: object, source_keys: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``extra=`` must be a JSON-ready mapping with str keys, apart from perfgate's own keys
    (and those the measured source records): checked before anything is measured."""
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        raise PerfgateUsageError(f"extra={extra!r} must be a dict of str keys to JSON values, "
                                 "e.g. extra={'num_envs': 256}")
    out = dict(extra)
    for k, v in out.items():
        if not isinstance(k, str):
            raise PerfgateUsageError(f"extra key {k!r} is not a str: use str keys, e.g. "
                                     "extra={'num_envs': 256}")
        taken = RESERVED_EXTRA | source_keys
        if k in taken:
            raise PerfgateUsageError(
                f"extra key {k!r} is recorded by perfgate itself (reserved: "
                f"{', '.join(sorted(taken))}): rename it, e.g. extra={{'my_{k}': ...}}")
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise PerfgateUsageError(f"extra[{k!r}]={v!r} cannot be recorded as JSON ({e}): "
                                     "use str, numbers, bools, None, lists and dicts") from None
    return out


def check_threshold(threshold: object) -> float | None:
    """A fraction like the flag takes: 0.05 or '5%'."""
    if threshold is None:
        return None
    from pytest_perfgate.session.options import OptionError, parse_fraction

    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, str)):
        raise PerfgateUsageError(f"threshold={threshold!r} is not a fraction: use e.g. "
                                 "threshold=0.05 or threshold='5%'")
    try:
        return parse_fraction(str(threshold))
    except OptionError as e:
        raise PerfgateUsageError(f"threshold={threshold!r}: {e}") from None


def check_windows(windows: object, window_time: object) -> None:
    if windows is not None and (isinstance(windows, bool) or not isinstance(windows, int)
                                or windows < 1):
        raise PerfgateUsageError(f"windows={windows!r} must be a whole number >= 1, e.g. "
                                 "windows=8 (4 or more let the gate see a run's own noise)")
    if window_time is not None and (isinstance(window_time, bool)
                                    or not isinstance(window_time, (int, float))
                                    or not math.isfinite(window_time) or window_time <= 0):
        raise PerfgateUsageError(f"window_time={window_time!r} must be a finite number of "
                                 "seconds > 0, e.g. window_time=1.0")


def check_unit(unit: object) -> str:
    """``unit=`` (what one transition is, "frames"; None: env-steps) as the rate unit its
    results carry ("frames/s"); a rate unit already made passes as it is."""
    if unit is None:
        return ENV_STEPS.unit
    if isinstance(unit, str) and unit.endswith("/s") and is_unit(unit):
        return unit
    try:
        return rate_unit(unit, "unit=", "unit='frames'")
    except ValueError as e:
        raise PerfgateUsageError(str(e)) from None

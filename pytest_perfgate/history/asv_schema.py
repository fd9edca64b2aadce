"""What a well-formed asv file holds, field by field: the checks every read of
benchmarks.json, machine.json and a result file goes through before its rows are kept.

asv writes these files without a schema of its own, and anything may have edited them;
each check returns what is wrong (None: nothing), for the warning that names the file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_perfgate.history.files import describe

# What asv would refuse in the files perfgate rewrites: each check names the problem; a
# file, entry or row that fails is never carried into a rewrite (asv would stop on it).

ASV_RESULT_COLUMNS = ["result", "params", "version", "started_at", "duration",
                      "stats_ci_99_a", "stats_ci_99_b", "stats_q_25", "stats_q_75",
                      "stats_number", "stats_repeat", "samples", "profile"]


def machine_field_problem(key: str, value: Any) -> str | None:
    if isinstance(value, str) or (key == "version" and value == 1):
        return None
    return f"{describe(value)}, expected a string"


def benchmarks_json_problem(data: Mapping[str, Any]) -> str | None:
    version = data.get("version")
    return None if version == 2 else f"version {version!r}, this writes asv's version 2"


_BENCH_TYPES = ("time", "track", "mem", "peakmem")  # what asv's benchmarks.json holds


def bench_entry_problem(key: str, entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return f"{describe(entry)}, expected an object"
    if entry.get("name") != key:
        return f"its name is {entry.get('name')!r}"
    if entry.get("type") not in _BENCH_TYPES:
        return f"type {entry.get('type')!r} is not one of {', '.join(_BENCH_TYPES)}"
    for field, kind in (("unit", str), ("version", str), ("params", list),
                        ("param_names", list)):
        if not isinstance(entry.get(field), kind):
            return f"{field} is {describe(entry.get(field))}"
    return None


def asv_result_problem(data: Mapping[str, Any]) -> str | None:
    """What makes a result file unusable as a whole (its rows are then not carried over)."""
    if data.get("version") != 2:
        return f"version {data.get('version')!r}, this writes asv's version 2"
    if data.get("result_columns") != ASV_RESULT_COLUMNS:
        return (f"unknown result_columns {data.get('result_columns')!r}, this writes "
                f"{ASV_RESULT_COLUMNS}")
    for key in ("results", "params", "durations"):
        if not isinstance(data.get(key, {}), dict):
            return f"{key!r} is {describe(data[key])}, expected an object"
    return None


def _num(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _nums(v: Any) -> bool:
    return isinstance(v, list) and all(_num(x) for x in v)


# One check per asv result column, in ASV_RESULT_COLUMNS order (asv's own row layout).
_COLUMN_CHECKS: list[Callable[[Any], bool]] = (
    [_nums,  # result
     lambda v: isinstance(v, list) and all(isinstance(x, list) for x in v),  # params
     lambda v: v is None or isinstance(v, str),  # version
     _num, _num]  # started_at, duration
    + [lambda v: v is None or _nums(v)] * 6  # stats_*
    + [lambda v: v is None or (isinstance(v, list)
                               and all(x is None or _nums(x) for x in v)),  # samples
       lambda v: v is None or isinstance(v, str)])  # profile


def row_problem(key: str, row: Any) -> str | None:
    if not isinstance(row, list):
        return f"{describe(row)}, expected a list"
    if not 1 <= len(row) <= len(ASV_RESULT_COLUMNS):
        return f"{len(row)} columns, expected 1 to {len(ASV_RESULT_COLUMNS)}"
    for column, check, value in zip(ASV_RESULT_COLUMNS, _COLUMN_CHECKS, row, strict=False):
        if not check(value):
            return f"column {column!r} holds {value!r}"[:120]
    return None

"""The plugin's JSON report read back into verdicts, so a later CI step can gate on them.

The inverse of :func:`pytest_perfgate.report.render.to_json`. It is the one record of an
A/B run's verdicts (the paired evidence is not kept in history, docs/design.md §3), so
``perfgate check --report`` gates both modes alike. Every field is checked: a ValueError
names the entry and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import load_json
from pytest_perfgate.core.gate import Outcome, Verdict
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.memory import from_record
from pytest_perfgate.core.results import BenchRecord
from pytest_perfgate.core.settings import Settings


def read_report(path: Path) -> list[Judged]:
    """Every benchmark of the report at ``path``; OSError when unreadable, ValueError when
    it is not a perfgate JSON report (naming what is wrong)."""
    try:
        data = load_json(Path(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("perfgate_report") != 1:
        raise ValueError("not a perfgate JSON report (no \"perfgate_report\": 1; write one "
                         "with pytest --perfgate-json=PATH)")
    entries = data.get("benchmarks")
    if not isinstance(entries, list):
        raise ValueError("field 'benchmarks' is not a list")
    return [_entry(e, i) for i, e in enumerate(entries)]


def _entry(e: Any, i: int) -> Judged:
    if not isinstance(e, Mapping):
        raise ValueError(f"benchmarks[{i}] is not an object")
    where = f"benchmarks[{i}] ({e.get('benchmark')!r})"
    try:
        result = BenchRecord.from_json(e["result"])
        fails = e["fails"]
        if not isinstance(fails, bool):
            raise ValueError(f"field 'fails' is {fails!r}, expected true or false")
        verdict = None if e["verdict"] is None else _verdict(e)
        alpha = _num(e.get("alpha"))
        rule = Settings(float(e["threshold"]), Settings.alpha if alpha is None else alpha,
                        _policy(e, "unstable", verdict, Outcome.UNSTABLE),
                        _policy(e, "inconclusive", verdict, Outcome.INCONCLUSIVE)).rule()
        commits = [str(c) for c in e.get("baseline_commits") or []]
        base = _num(e.get("baseline_steps_per_s"))
        memory = from_record(result)
        if memory is not None:  # an entry of a memory verdict holds its figure as its result
            result = replace(result, name=memory[0])
        return Judged(result, verdict, rule, str(e["test"]), commits, base, where=result.where,
                      pairs=_pairs(e), remeasured=e.get("remeasured") is True,
                      memory=None if memory is None else memory[1])
    except KeyError as k:
        raise ValueError(f"{where}: missing key {k}") from None
    except (TypeError, ValueError) as x:
        raise ValueError(f"{where}: {x}") from None


def _policy(e: Mapping[str, Any], key: str, verdict: Verdict | None, outcome: Outcome) -> str:
    """The policy the verdict was judged by, as recorded; a report written before policies
    were recorded says only whether the verdict failed: "fail" when that verdict, of that
    outcome, failed, else "warn"."""
    if key in e:
        return str(e[key])  # Rule names a bad value
    failed = e["fails"] and verdict is not None and verdict.outcome is outcome
    return "fail" if failed else "warn"


def _pairs(e: Mapping[str, Any]) -> tuple[Verdict, ...]:
    """Each pair of side processes' verdict; a report written before they had a key of
    their own kept them in the result's ``extra.ab_pairs``."""
    found = e.get("pairs")
    if found is None:
        found = (e["result"].get("extra") or {}).get("ab_pairs") or []
    if not isinstance(found, list) or not all(isinstance(p, Mapping) for p in found):
        raise ValueError(f"field 'pairs' is {found!r}, expected a list of objects")
    return tuple(_verdict(p, "outcome") for p in found)


def _verdict(e: Mapping[str, Any], key: str = "verdict") -> Verdict:
    outcome = Outcome(e[key])  # ValueError names an unknown verdict
    ci = e.get("ci")
    return Verdict(outcome, str(e.get("message") or ""), _num(e.get("ratio")),
                   (float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2
                   else None, _num(e.get("p_value")), _num(e.get("resolvable_drop")))


def _num(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None

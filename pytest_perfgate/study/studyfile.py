"""A calibration study on disk: written once, re-judged offline (``perfgate calibrate
--analyse``), several sittings merged into one; every field read back is checked, since a
study file may have been edited or damaged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from pytest_perfgate.study.trials import FORMAT, StudyConfig, StudyError, TrialRecord


def save(path: Path, cfg: StudyConfig, trials: Sequence[TrialRecord],
         meta: Mapping[str, Any]) -> None:
    """Write the raw study (re-analyse it later with ``perfgate calibrate --analyse``)."""
    data = {"format": FORMAT, "config": asdict(cfg), "meta": dict(meta),
            "trials": [asdict(t) for t in trials]}
    from pytest_perfgate.core.atomic import atomic_write

    atomic_write(Path(path), json.dumps(data).encode())


def load(path: Path) -> tuple[StudyConfig, list[TrialRecord], dict[str, Any]]:
    """Read a study written by :func:`save`; a bad file is a :class:`StudyError`."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise StudyError(f"cannot read study file {path}: {exc}; give a file written by "
                         "`perfgate calibrate --save`") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StudyError(f"{path}: format {data.get('format') if isinstance(data, dict) else '?'!r}"
                         f" is not {FORMAT}; re-run the study with this version")
    try:
        c = dict(data["config"])
        c["slowdowns"] = tuple(float(x) for x in c["slowdowns"])
        trials: list[TrialRecord] = []
        for t in data["trials"]:
            t = dict(t)
            for k in ("base", "head", "hist_base", "hist_head", "probes"):
                t[k] = tuple(t.get(k, ()))
            t["loads"] = tuple(tuple(p) for p in t.get("loads", ()))
            trials.append(check_trial(TrialRecord(**t), len(trials), path))
        return StudyConfig(**c), trials, dict(data.get("meta") or {})
    except StudyError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise StudyError(f"{path}: not a study written by `perfgate calibrate --save` "
                         f"({type(exc).__name__}: {exc}); re-run the study with --save") from None


def _positive(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x) and x > 0


def check_trial(t: TrialRecord, i: int, path: Path) -> TrialRecord:
    """A trial read from a file, checked field by field: turns of positive seconds, as many
    of head as of base (and of loads, when recorded), known costs; the message names the
    trial, the field and the value."""
    def bad(field: str, value: Any, want: str) -> StudyError:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return StudyError(f"{path}: trial {i} ({field} = {shown}) {want}; the file was edited "
                          "or damaged: re-run the study with --save")

    if type(t.index) is not int:
        raise bad("index", t.index, "is not a whole number")
    if type(t.slowdown) not in (int, float) or not 0 <= t.slowdown < 1:
        raise bad("slowdown", t.slowdown, "is not a fraction in [0, 1)")
    for field in ("base", "head", "hist_base", "hist_head"):
        turns = getattr(t, field)
        if not all(_positive(x) for x in turns):
            raise bad(field, turns, "holds a value that is not a positive number of seconds")
    if len(t.base) < 2 or len(t.head) != len(t.base):
        raise bad("base/head", (len(t.base), len(t.head)),
                  "needs the same number of turns on both sides, at least 2")
    if len(t.hist_head) != len(t.hist_base):
        raise bad("hist_base/hist_head", (len(t.hist_base), len(t.hist_head)),
                  "needs as many history windows on both sides")
    if t.loads and (len(t.loads) != len(t.base) or not all(
            len(p) == 2 and all(x is None or (type(x) in (int, float) and math.isfinite(x)
                                              and x >= 0) for x in p) for p in t.loads)):
        raise bad("loads", t.loads, "is not one (base, head) pair of busy cores per turn")
    for field in ("turn_wall", "warmup_s", "started_s", "hist_wall", "wall_s"):
        v = getattr(t, field)
        if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
            raise bad(field, v, "is not a number of seconds >= 0")
    if type(t.steady) is not bool or not isinstance(t.verdict, str):
        raise bad("steady/verdict", (t.steady, t.verdict), "has the wrong type")
    return t


MERGED_KEYS = ("turns", "turn_s", "looks", "load", "threshold", "alpha", "history")


def merge(studies: Sequence[tuple[Path, StudyConfig, list[TrialRecord], dict[str, Any]]]
          ) -> tuple[StudyConfig, list[TrialRecord], dict[str, Any]]:
    """Several sittings of one study as one: the same settings (MERGED_KEYS), trials
    renumbered in order, each sitting's meta kept under "sittings". One file: itself."""
    if len(studies) == 1:
        return studies[0][1], studies[0][2], studies[0][3]
    first_path, first, _, _ = studies[0]
    trials: list[TrialRecord] = []
    sittings = []
    for path, cfg, recs, meta in studies:
        for key in MERGED_KEYS:
            if getattr(cfg, key) != getattr(first, key):
                raise StudyError(f"{path}: {key}={getattr(cfg, key)!r}, but {first_path} has "
                                 f"{getattr(first, key)!r}: merge only sittings of the same "
                                 "study settings")
        trials += [replace(t, index=len(trials) + i) for i, t in enumerate(recs)]
        sittings.append({**meta, "trials": len(recs), "file": str(path)})
    cfg = replace(first, aa_trials=sum(t.slowdown == 0 for t in trials),
                  slowdowns=tuple(sorted({t.slowdown for t in trials if t.slowdown > 0}))
                  or first.slowdowns)
    meta = {"command": " + ".join(str(m.get("command", "?")) for m in sittings),
            "nodeid": sittings[0].get("nodeid"), "bench": sittings[0].get("bench"),
            "started": sittings[0].get("started"), "finished": sittings[-1].get("finished"),
            "wall_s": round(sum(float(m.get("wall_s") or 0) for m in sittings), 1),
            "loadavg_before": sittings[0].get("loadavg_before"),
            "loadavg_after": sittings[-1].get("loadavg_after"), "sittings": sittings}
    return cfg, trials, meta

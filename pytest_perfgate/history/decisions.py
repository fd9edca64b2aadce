"""A person's word on recorded runs: accept a run that failed the gate, or forget a run.

A run whose benchmark failed the gate (REGRESSION, UNSTABLE: ``BenchResult.verdict``) never
serves as a baseline or in the run-to-run spread, or re-running slow code would launder its
own regression (docs/design.md §2). When the slowdown is intended, a person accepts the run
and later commits are judged against it; a run that should never judge anything (a
benchmark measured on a machine that was busy, a broken build) can be forgotten. The
decisions live beside the run sidecars, one small file per machine:

    <results dir>/<machine>/perfgate/decisions.pgaccept

(not ``.json``: asv parses every ``*.json`` below a machine folder). Run files are never
changed or deleted, so a decision can always be undone.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import atomic_write, load_json, locked
from pytest_perfgate.core.names import is_safe_name, safe_name
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.history.files import HistoryWarning
from pytest_perfgate.history.machine_id import refingerprint

DECISIONS_FILE = "decisions.pgaccept"
DECISIONS_FORMAT = 1
FAILED_VERDICTS = frozenset({"REGRESSION", "UNSTABLE"})  # outcomes that never set a level
_SIDECARS = "perfgate"  # = history.store.SIDECAR_DIR (store imports this module's users)
_SUFFIX = ".pgrun"


class AcceptError(ValueError):
    """accept/forget could not find or record the run; the message names it and the fix."""


@dataclass(frozen=True)
class Rebaseline:
    """A person's word that runs from ``run_id`` on are the new baseline (an intended
    dependency upgrade): runs started before ``at`` judge nothing any more."""

    run_id: str
    at: float  # the run's started_at
    commit: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run_id, "at": self.at, "commit": self.commit, "reason": self.reason}


@dataclass(frozen=True)
class Decisions:
    """Which runs a person accepted or forgot on one machine, and where they started a new
    baseline."""

    accepted: frozenset[str] = frozenset()
    forgotten: frozenset[str] = frozenset()
    rebaselines: tuple[Rebaseline, ...] = ()  # oldest first

    @property
    def since(self) -> float | None:
        """Runs started before this judge nothing (the newest rebaseline)."""
        return max((r.at for r in self.rebaselines), default=None)

    def may_serve(self, run: RunRecord, bench: str) -> bool:
        """Whether ``run``'s result of ``bench`` may be part of a baseline or the spread."""
        if run.run_id in self.forgotten:
            return False
        since = self.since
        if since is not None and run.started_at < since:
            return False
        result = run.benchmarks.get(bench)
        if result is None:
            return False
        return result.verdict not in FAILED_VERDICTS or run.run_id in self.accepted


def decisions_path(results_dir: str | os.PathLike[str], machine: str) -> Path:
    return Path(results_dir) / machine / _SIDECARS / DECISIONS_FILE


class DecisionsUnreadable(OSError):
    """accept/forget found a decisions file it cannot read: rewriting it would drop every
    decision it holds (a forgotten run would serve as a baseline again)."""


def load_decisions(results_dir: str | os.PathLike[str], machine: str, strict: bool = False
                   ) -> Decisions:
    """The machine's decisions; none when the file is missing. A malformed file is skipped
    with a HistoryWarning naming it (failed runs then stay out of baselines: fail closed);
    entries that are no run id are dropped with one. ``strict`` (before a rewrite) raises
    DecisionsUnreadable for either instead."""
    path = decisions_path(results_dir, machine)
    fix = "fix or delete the file, then accept again"
    try:
        data = load_json(path)
        got, problems = _parse(data)
    except FileNotFoundError:
        return Decisions()
    except (OSError, ValueError) as e:
        if strict:
            raise DecisionsUnreadable(_unreadable(path, str(e))) from None
        warnings.warn(HistoryWarning(f"skipping {path}: {e} (accepted runs count as not "
                                     f"accepted, forgotten ones as not forgotten; {fix})"),
                      stacklevel=2)
        return Decisions()
    if problems:
        if strict:
            raise DecisionsUnreadable(_unreadable(path, "; ".join(problems)))
        warnings.warn(HistoryWarning(f"reading {path} without {'; '.join(problems)} ({fix})"),
                      stacklevel=2)
    return got


def _unreadable(path: Path, problem: str) -> str:
    return (f"cannot read the decisions file {path} ({problem}): fix it, or delete it (which "
            "drops every accept and forget recorded there), then run this again")


def _parse(data: Any) -> tuple[Decisions, list[str]]:
    """The decisions in ``data``, and what was dropped from it (entries that are no run
    id); ValueError when it is no decisions file at all."""
    if not isinstance(data, dict) or data.get("perfgate_decisions") != DECISIONS_FORMAT:
        raise ValueError(f"not a perfgate decisions file (format {DECISIONS_FORMAT})")
    sets, problems = [], []
    for key in ("accepted", "forgotten"):
        ids = data.get(key, [])
        if not isinstance(ids, list):
            problems.append(f"{key!r}: not a list of run ids")
            ids = []
        bad = [i for i in ids if not is_safe_name(i)]
        if bad:
            problems.append(f"{key!r}: {len(bad)} value(s) that are no run id "
                            f"({', '.join(repr(b) for b in bad[:3])})")
        sets.append(frozenset(i for i in ids if is_safe_name(i)))
    marks = data.get("rebaselines", [])
    kept = [m for m in marks if _rebaseline(m) is not None] if isinstance(marks, list) else []
    if not isinstance(marks, list) or len(kept) < len(marks):
        problems.append("'rebaselines': entries that are no rebaseline "
                        "({\"run\", \"at\", \"commit\", \"reason\"})")
    found = tuple(sorted((r for r in map(_rebaseline, kept) if r is not None),
                         key=lambda r: r.at))
    return Decisions(sets[0], sets[1], found), problems


def _rebaseline(m: Any) -> Rebaseline | None:
    if not isinstance(m, dict) or not is_safe_name(m.get("run")):
        return None
    at, commit, reason = m.get("at"), m.get("commit", ""), m.get("reason", "")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) \
            or not isinstance(commit, str) or not isinstance(reason, str):
        return None
    return Rebaseline(m["run"], float(at), commit, reason)


def _save(results_dir: str | os.PathLike[str], machine: str, d: Decisions) -> None:
    data: dict[str, Any] = {"perfgate_decisions": DECISIONS_FORMAT,
                            "accepted": sorted(d.accepted), "forgotten": sorted(d.forgotten)}
    if d.rebaselines:
        data["rebaselines"] = [r.to_json() for r in d.rebaselines]
    atomic_write(decisions_path(results_dir, machine),
                 (json.dumps(data, indent=2) + "\n").encode("utf-8"))


def find_run(results_dir: str | os.PathLike[str], machine: str | None, run_id: str
             ) -> tuple[str, Path]:
    """(machine, sidecar path) of ``run_id``; with ``machine`` None, every machine folder
    is searched and the run id must be found in exactly one."""
    try:
        safe_name(run_id, "run id", "20240101T120000-ab12cd")
        if machine is not None:
            safe_name(machine, "machine name", "ci-runner-4core")
    except ValueError as e:
        raise AcceptError(str(e)) from None
    root = Path(results_dir)
    if root.exists() and not root.is_dir():
        raise AcceptError(f"results dir {root} is a file, not a folder: pass the folder your "
                          "perf runs record into (with one folder per machine)")
    if not root.is_dir():
        raise AcceptError(f"results dir {root} does not exist: pass the folder your perf "
                          "runs record into (--perfgate-results-dir in pytest, --results-dir "
                          "in the perfgate command)")
    names = [machine] if machine is not None else sorted(
        p.name for p in root.iterdir() if (p / _SIDECARS).is_dir())
    hits = [(m, root / m / _SIDECARS / f"{run_id}{_SUFFIX}") for m in names]
    hits = [(m, p) for m, p in hits if p.is_file()]
    if not hits:
        where = f"machine {machine!r}" if machine is not None else \
            f"any machine ({', '.join(names) or 'none recorded'})"
        raise AcceptError(f"no run {run_id!r} in {root} for {where}: the id is the one "
                          "printed as 'recorded run RUN_ID' at the end of a session, and "
                          f"the file name in {root}/<machine>/{_SIDECARS}/RUN_ID{_SUFFIX}")
    if len(hits) > 1:
        raise AcceptError(f"run {run_id!r} exists for machines "
                          f"{', '.join(m for m, _ in hits)}: name the machine")
    return hits[0]


def _read(path: Path) -> RunRecord:
    try:
        return refingerprint(RunRecord.from_json(load_json(path)))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise AcceptError(f"cannot read run file {path}: {e}") from None


def _failed(run: RunRecord) -> list[str]:
    """'bench (VERDICT)' for each benchmark of the run that failed the gate."""
    return [f"{n} ({b.verdict})" for n, b in sorted(run.benchmarks.items())
            if b.verdict in FAILED_VERDICTS]


def _failed_siblings(folder: Path, run: RunRecord) -> list[str]:
    """Other failed runs of the same code on the same machine: same commit, same dirty
    flag, same fingerprint. Accepting one accepts them all: the newest baseline runs must
    all show the new level, or the next commit is judged against a mix of old and new."""
    out = []
    for p in sorted(folder.glob(f"*{_SUFFIX}")):
        if p.stem == run.run_id:
            continue
        try:
            other = refingerprint(RunRecord.from_json(load_json(p)))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # the store warns about unreadable records when it loads them
        if (other.commit, other.dirty, other.fingerprint) == (run.commit, run.dirty,
                                                              run.fingerprint) \
                and _failed(other):
            out.append(other.run_id)
    return out


def accept(results_dir: str | os.PathLike[str], machine: str | None, run_id: str) -> str:
    """Let ``run_id`` (and the other failed runs of the same code on that machine) serve as
    a baseline although they failed the gate; undoes a forget. Returns the message to print;
    raises AcceptError naming the problem and the fix."""
    m, path = find_run(results_dir, machine, run_id)
    run = _read(path)
    failed = _failed(run)
    siblings = _failed_siblings(path.parent, run) if failed else []
    ids = {run_id, *siblings}
    with locked(path.parent / ".decisions.lock"):
        d = load_decisions(results_dir, m, strict=True)
        _save(results_dir, m, replace(d, accepted=d.accepted | ids,
                                      forgotten=d.forgotten - ids))
    if failed:
        also = (f" together with {len(siblings)} other failed run(s) of commit "
                f"{run.commit[:10]} ({', '.join(siblings)})" if siblings else "")
        return (f"accepted run {run_id} on machine {m}{also}: {', '.join(failed)} now "
                f"serve(s) as the baseline for later commits (undo: perfgate forget "
                f"{run_id})")
    return (f"accepted run {run_id} on machine {m}: it failed no gate, so it already "
            "served as a baseline; it still does")


def forget(results_dir: str | os.PathLike[str], machine: str | None, run_id: str) -> str:
    """Keep ``run_id`` out of every baseline and spread (its files stay); undoes an accept.
    Returns the message to print; raises AcceptError naming the problem and the fix."""
    m, path = find_run(results_dir, machine, run_id)
    with locked(path.parent / ".decisions.lock"):
        d = load_decisions(results_dir, m, strict=True)
        _save(results_dir, m, replace(d, accepted=d.accepted - {run_id},
                                      forgotten=d.forgotten | {run_id}))
    return (f"forgot run {run_id} on machine {m}: it no longer serves as a baseline or in "
            f"the run-to-run spread; its files stay (undo: perfgate accept {run_id})")


def rebaseline(results_dir: str | os.PathLike[str], machine: str | None, run_id: str,
               reason: str) -> str:
    """Start a new baseline at ``run_id`` (an intended upgrade): it and later runs judge
    later commits, earlier ones no more; it and its failed siblings are accepted. Returns
    the message to print; raises AcceptError naming the problem and the fix."""
    if not reason.strip():
        raise AcceptError("the reason is empty: say why the baseline starts again, e.g. "
                          "--reason 'numpy 2.2 upgrade, intended'")
    m, path = find_run(results_dir, machine, run_id)
    run = _read(path)
    siblings = _failed_siblings(path.parent, run) if _failed(run) else []
    ids = {run_id, *siblings}
    mark = Rebaseline(run_id, run.started_at, run.commit, reason.strip())
    with locked(path.parent / ".decisions.lock"):
        d = load_decisions(results_dir, m, strict=True)
        marks = tuple(sorted([*(r for r in d.rebaselines if r.run_id != run_id), mark],
                             key=lambda r: r.at))
        _save(results_dir, m, replace(d, accepted=d.accepted | ids,
                                      forgotten=d.forgotten - ids, rebaselines=marks))
    return (f"new baseline on machine {m} from run {run_id} (commit {run.commit[:10]}): "
            "runs recorded before it judge nothing any more; the history keeps them, and "
            f"the site marks the change ({reason.strip()})")

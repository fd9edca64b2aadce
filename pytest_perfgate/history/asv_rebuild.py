"""Rebuild a machine's asv view from its sidecars when the series format changed.

The sidecars are the source of truth; the asv files are derived (docs/design.md §6). When
SERIES_VERSION changes (perfgate-1: seconds per million env-steps under the bare benchmark
name, a "perfgate-py3.11" result file per commit; perfgate-2: seconds per env-step under
``N.track_s_per_step`` in asv's "virtualenv-py3.11" file), the next record on a machine:

- deletes that machine's result files perfgate-1 named after its own environment
  (``*-perfgate-py*.json``: every row in them was ours);
- drops rows of an older perfgate series version from the other result files (rows `asv run`
  wrote, and rows of other tools, are kept);
- rewrites every commit's result file from the sidecars;
- records the version it built in ``perfgate/.asv-view`` (:func:`mark_view`; not *.json,
  so asv skips it).

benchmarks.json loses entries of older versions on every merge
(:func:`pytest_perfgate.history.asv.merge_benchmarks_json`), so an old unit and a new one
are never drawn on one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import atomic_write
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.history.asv import (
    OLD_ENV_PREFIX,
    SERIES_VERSION,
    current_row,
    write_asv_result,
)
from pytest_perfgate.history.files import dump_json, read_json, warn_history

VIEW_MARK = ".asv-view"


def view_version(sidecar_dir: Path) -> str | None:
    """The series version the machine's asv view was last built with (None: never)."""
    try:
        return (sidecar_dir / VIEW_MARK).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def needs_rebuild(machine_dir: Path, sidecar_dir: Path) -> bool:
    """True when the view was built by another version, or was never marked but holds
    result files (a history from before the mark existed)."""
    if view_version(sidecar_dir) == SERIES_VERSION:
        return False
    return any(p.name != "machine.json" for p in machine_dir.glob("*.json"))


def rebuild_asv_view(machine_dir: Path, sidecar_dir: Path, machine: str,
                     runs: Iterable[RunRecord],
                     entries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Rebuild the machine's result files from ``runs`` (its sidecars); return what changed,
    one line per file, for the caller's log. Call under the machine's lock."""
    done: list[str] = []
    for path in sorted(machine_dir.glob("*.json")):
        if path.name == "machine.json":
            continue
        if f"-{OLD_ENV_PREFIX}" in path.name:
            path.unlink(missing_ok=True)
            done.append(f"removed {path.name} (perfgate-1 rows, rebuilt from the sidecars)")
            continue
        data = read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
            continue  # not ours to judge: write_asv_result warns if it ever rewrites it
        kept = {k: v for k, v in data["results"].items()
                if not isinstance(v, list) or current_row(v)}
        if len(kept) != len(data["results"]):
            atomic_write(path, dump_json({**data, "results": kept}, compact=True))
            done.append(f"dropped {len(data['results']) - len(kept)} old rows from {path.name}")
    by_commit: dict[str, list[RunRecord]] = {}
    for run in runs:
        if any(c != "0" for c in run.commit):
            by_commit.setdefault(run.commit, []).append(run)
    for commit, same in sorted(by_commit.items()):
        newest = max(same, key=lambda r: r.started_at)
        write_asv_result(machine_dir, machine, newest, same, entries)
        done.append(f"wrote {commit[:8]} from {len(same)} sidecar(s)")
    return done


def mark_view(sidecar_dir: Path) -> None:
    """Record that the view holds SERIES_VERSION (a failure only means another rebuild)."""
    if view_version(sidecar_dir) == SERIES_VERSION:
        return
    try:
        atomic_write(sidecar_dir / VIEW_MARK, f"{SERIES_VERSION}\n".encode())
    except OSError as exc:
        warn_history(sidecar_dir / VIEW_MARK, str(exc), "not marking")

"""Crash-safe file writes: the one atomic write every results file goes through.

A writer killed mid-write corrupted plain ``json.dump`` files 20 times out of 20 and this
0 times out of 20 (docs/design.md §6): the temp file lives in the target's folder (so the
rename is atomic), is fsynced, then replaces the target, and the folder is fsynced so the
rename itself survives a power cut. Temp names end in :data:`TMP_SUFFIX`, never ``.json``,
because asv parses every ``*.json`` below a machine folder.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

TMP_SUFFIX = ".perfgate-tmp"
STALE_TMP_S = 3600.0  # a temp file this old belongs to a writer that was killed


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either the old or the new content, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def sweep_stale_temps(folder: Path, now: float | None = None,
                      max_age_s: float = STALE_TMP_S) -> int:
    """Delete our temp files older than ``max_age_s`` (left by killed writers)."""
    now = time.time() if now is None else now
    removed = 0
    with contextlib.suppress(OSError):
        for p in folder.glob(f".*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > max_age_s:
                    p.unlink()
                    removed += 1
    return removed


__all__ = ["atomic_write", "sweep_stale_temps", "TMP_SUFFIX", "STALE_TMP_S"]

"""Where a results dir is and how history files are read and written.

Every write goes through :func:`pytest_perfgate.core.files.atomic_write`; reads of files we
are about to rewrite never fail the run (a warning names the file instead).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

from pytest_perfgate.core.files import TMP_SUFFIX, atomic_write, sweep_stale_temps

DEFAULT_RESULTS = Path(".perfgate") / "results"


class HistoryWarning(UserWarning):
    """A history file was skipped or could not be written; the run itself carries on."""


def dump_json(obj: Any, compact: bool = False, strict: bool = True) -> bytes:
    """asv files are strict JSON; sidecars (read only by us) may hold NaN and odd types."""
    kw: dict[str, Any] = {"allow_nan": not strict, "default": None if strict else str}
    text = (json.dumps(obj, separators=(",", ":"), **kw) if compact
            else json.dumps(obj, indent=4, sort_keys=True, **kw) + "\n")
    return text.encode("utf-8")


def read_json(path: Path, warn: bool = False) -> Any:
    """A JSON file we are about to rewrite; None when missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if warn and not isinstance(exc, FileNotFoundError):
            warnings.warn(HistoryWarning(f"rewriting unreadable history file {path}: {exc}"),
                          stacklevel=2)
        return None


def default_results_dir(rootdir: str | os.PathLike[str]) -> Path:
    """asv.conf.json's ``results_dir`` (relative to that file) when present, else a local one.

    Like asv, a config without ``results_dir`` means "results" next to it; // comments and
    trailing commas are accepted because asv accepts them (json5).
    """
    root = Path(rootdir)
    for conf in (root / "asv.conf.json", root / "asv.conf.jsonc"):
        if conf.is_file():
            data = load_jsonc(conf)
            value = data.get("results_dir", "results") if isinstance(data, dict) else None
            if not isinstance(value, str) or not value:
                raise ValueError(f"{conf}: results_dir {value!r} is not a folder name; set "
                                 "\"results_dir\": \"results\" or remove the key")
            return (conf.parent / os.path.expanduser(value)).resolve()
    return root / DEFAULT_RESULTS


def load_jsonc(path: Path) -> Any:
    """A JSON file that may hold comments and trailing commas, read as asv reads it."""
    text = path.read_text(encoding="utf-8")
    try:
        import json5  # asv's own dependency for its config loader
        return json5.loads(text)
    except ImportError:
        return json.loads(strip_comments(text))
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON (asv would refuse it too): {exc}") from exc


def strip_comments(text: str) -> str:
    """Remove // and /* */ comments outside strings (fallback when json5 is missing)."""
    pattern = r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/'
    return re.sub(pattern, lambda m: m.group(1) or "", text, flags=re.S)


__all__ = ["HistoryWarning", "DEFAULT_RESULTS", "default_results_dir", "dump_json",
           "read_json", "load_jsonc", "strip_comments", "atomic_write", "sweep_stale_temps",
           "TMP_SUFFIX"]

"""Where a results dir is and how history files are read and written.

Every write goes through :func:`pytest_perfgate.core.atomic.atomic_write`; reads of files we
are about to rewrite never fail the run (a warning names the file instead).
"""

from __future__ import annotations

import calendar
import json
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import (
    load_json,
    loads_json,
)

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
        return load_json(path)
    except (OSError, ValueError) as exc:
        if warn and not isinstance(exc, FileNotFoundError):
            warn_history(path, f"not valid JSON ({exc})", "rebuilding")
        return None


def warn_history(path: Path, problem: str, action: str = "rebuilding", then: str = "") -> None:
    """The one warning a bad history file gets: which file, what is wrong, what we did."""
    warnings.warn(HistoryWarning(f"{action} history file {path}: {problem}"
                                 + (f" ({then})" if then else "")), stacklevel=3)


def read_object(path: Path, then: str, check: Callable[[dict[str, Any]], str | None]
                = lambda _: None) -> dict[str, Any]:
    """The JSON object in a file we are about to rewrite, {} when missing.

    A file that is unreadable, not an object, or fails ``check`` (which names the problem)
    is rebuilt from scratch: {} with one HistoryWarning naming it and the problem; ``then``
    says what the rewrite will hold.
    """
    try:
        data = load_json(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        warn_history(path, f"not valid JSON ({exc})", then=then)
        return {}
    problem = (f"expected a JSON object, found {describe(data)}" if not isinstance(data, dict)
               else check(data))
    if problem:
        warn_history(path, problem, then=then)
        return {}
    return data


def keep_valid(path: Path, entries: Mapping[str, Any], check: Callable[[str, Any], str | None],
               what: str) -> dict[str, Any]:
    """The entries that pass ``check`` (which names what is wrong with one entry); the others
    are dropped with one HistoryWarning listing them, so garbage never reaches a rewrite."""
    kept: dict[str, Any] = {}
    bad: list[str] = []
    for key, value in entries.items():
        problem = check(key, value)
        if problem is None:
            kept[key] = value
        else:
            bad.append(f"{key!r}: {problem}")
    if bad:
        shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        warn_history(path, f"dropped {len(bad)} invalid {what} ({shown})", action="rewriting")
    return kept


def describe(value: Any) -> str:
    """'a list', 'a str'... for messages about a value of the wrong JSON type."""
    names = {dict: "an object", list: "a list", str: "a str", bool: "a bool", int: "an int",
             float: "a float", type(None): "null"}
    return names.get(type(value), type(value).__name__)


RUN_ID_STAMP = re.compile(r"\d{8}T\d{6}")  # a run id starts with its UTC start, to the second


@dataclass(frozen=True)
class Unreadable:
    """A run file skipped with a warning, and when its run started as far as that can be
    told (None: not at all): a command that judges "the newest run" must not judge an
    older one in its place, which would be a pass in disguise."""

    path: Path
    run_id: str | None = None  # a sidecar named like perfgate's run ids
    started_at: float | None = None  # an asv row whose start time was readable

    def may_be_newer_than(self, run_id: str, started_at: float) -> bool:
        if self.run_id is not None:
            if RUN_ID_STAMP.match(run_id):  # compared as written: one clock, one format
                return self.run_id[:15] >= run_id[:15]
            try:
                stamp = calendar.timegm(time.strptime(self.run_id[:15], "%Y%m%dT%H%M%S"))
            except ValueError:
                return True  # "20241399T..." names no time: it could be any run
            return stamp >= int(started_at)
        return self.started_at is not None and self.started_at >= started_at


def unreadable_sidecar(path: Path) -> Unreadable:
    """What a skipped sidecar's name tells about its run (perfgate names it by run id)."""
    return Unreadable(path, run_id=path.stem if RUN_ID_STAMP.match(path.stem) else None)


def default_results_dir(rootdir: str | os.PathLike[str]) -> Path:
    """asv.conf.json's ``results_dir`` (relative to that file) when present, else a local one.

    Like asv, a config without ``results_dir`` means "results" next to it; // comments and
    trailing commas are accepted because asv accepts them (json5).
    """
    root = Path(rootdir)
    for conf in (root / "asv.conf.json", root / "asv.conf.jsonc"):
        if conf.is_file():
            data = load_jsonc(conf)
            if not isinstance(data, dict):
                raise ValueError(f"{conf} holds {describe(data)}, not asv's JSON object")
            value = data.get("results_dir", "results")
            if not isinstance(value, str) or not value:
                raise ValueError(f"{conf}: results_dir {value!r} is not a folder name; set "
                                 "\"results_dir\": \"results\" or remove the key")
            return (conf.parent / os.path.expanduser(value)).resolve()
    return root / DEFAULT_RESULTS


def load_jsonc(path: Path) -> Any:
    """A JSON file that may hold comments and trailing commas, read as asv reads it."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (asv would refuse it too): {exc}") from None
    try:
        import json5  # asv's own dependency for its config loader
        return json5.loads(text)
    except ImportError:
        return loads_json(strip_comments(text))
    except RecursionError:
        raise ValueError(f"{path} is nested too deep to be asv's config") from None
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON (asv would refuse it too): {exc}") from exc


def strip_comments(text: str) -> str:
    """Remove // and /* */ comments outside strings (fallback when json5 is missing)."""
    pattern = r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/'
    return re.sub(pattern, lambda m: m.group(1) or "", text, flags=re.S)

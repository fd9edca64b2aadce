"""One machine for asv and perfgate: write perfgate's machine facts into asv's machine file.

`asv run --machine NAME` takes the machine's fields from ``~/.asv-machine.json`` and puts
them, with the Python version, into every result file's ``params``; perfgate writes the same
fields (:func:`pytest_perfgate.history.machine.asv_machine_json`). asv publish draws one line
per distinct params, so both must hold the same values, and the same NAME (the machine
folder). ``perfgate machine --asv-machine-file`` writes this machine's entry under its
perfgate name (docs/design.md §6).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_perfgate.core.files import atomic_write, load_json
from pytest_perfgate.history.files import describe, dump_json
from pytest_perfgate.history.machine import asv_machine_json


def default_asv_machine_file() -> Path:
    """Where asv looks (its Machine.get_machine_file_path)."""
    return Path("~/.asv-machine.json").expanduser()


def write_asv_machine_file(meta: Mapping[str, Any], path: Path | None = None) -> Path:
    """Add or replace the entry for ``meta["machine"]`` in asv's machine file, keeping every
    other machine in it. A file that is not asv's format is left alone: ValueError names it."""
    path = path or default_asv_machine_file()
    try:
        data = load_json(path)
    except FileNotFoundError:
        data = {"version": 1}
    except (OSError, ValueError) as exc:
        raise ValueError(f"asv machine file {path} is unreadable ({exc}): fix or move it, "
                         "then run this again") from None
    if not isinstance(data, dict) or data.get("version", 1) != 1:
        raise ValueError(f"asv machine file {path} holds {describe(data)} without asv's "
                         "\"version\": 1: fix or move it, then run this again")
    entry = {k: v for k, v in asv_machine_json(meta).items() if k != "version"}
    data[entry["machine"]] = entry
    data["version"] = 1
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, dump_json(data))
    return path


__all__ = ["default_asv_machine_file", "write_asv_machine_file"]

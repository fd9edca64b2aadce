"""Argument converters shared by the commands.

Every converter is a ``parse_*`` function that raises :class:`OptionError` with a message
naming the bad value and the fix (the plugin's options use the same ones), adapted to
argparse by :func:`argparse_type`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_perfgate.cli._out import UsageError
from pytest_perfgate.session.options import (
    OptionError,
    parse_fraction,
    parse_path,
    parse_positive_int,
)


def parse_count(text: str) -> int:
    """A whole number >= 0 (a count that may be zero: no trials of that kind)."""
    try:
        v = int(str(text).strip())
    except ValueError:
        raise OptionError(f"{text!r} is not a whole number: use e.g. 50") from None
    if v < 0:
        raise OptionError(f"{text!r} is negative: use a whole number >= 0, e.g. 50")
    return v


def parse_int_list(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4): whole numbers >= 1, in the order given."""
    try:
        out = tuple(parse_positive_int(p) for p in str(text).split(",") if p.strip())
    except OptionError:
        out = ()
    if not out:
        raise OptionError(f"{text!r} is not a list of whole numbers >= 1: use e.g. 1,2,4")
    return out


def parse_fractions(text: str) -> tuple[float, ...]:
    """'0.02,3%,0.05' -> (0.02, 0.03, 0.05): sorted fractions in (0, 1)."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise OptionError(f"{text!r} lists no fractions: use e.g. 0.02,0.03,0.05,0.10")
    return tuple(sorted({parse_fraction(p) for p in parts}))


def parse_cpu_set(text: str) -> set[int]:
    """A core spec ('1', '0-1', '0:1,3') naming at least one CPU."""
    from pytest_perfgate.placement.cpus import parse_cpus

    try:
        got = parse_cpus(text)
    except ValueError as exc:
        raise OptionError(f"{text!r}: {exc}") from None
    if not got:
        raise OptionError(f"{text!r} names no CPU: use e.g. 1 or 0-1")
    return set(got)


def from_env(var: str, parse: Callable[[str], Any]) -> Any:
    """The parsed value of environment variable ``var`` (None when unset or empty); a bad
    value is a usage error naming the variable."""
    raw = os.environ.get(var)
    if not raw:
        return None
    try:
        return parse(raw)
    except OptionError as e:
        raise UsageError(f"environment variable {var}: {e}") from None


def parse_repo(text: str) -> Path:
    """--repo: an existing folder. A path that is missing or a file would make the history
    look like it was recorded outside git, where every earlier run counts as a baseline."""
    path = Path(parse_path(text)).expanduser()
    if not path.exists():
        raise OptionError(f"{text!r} does not exist: give the git checkout the runs were "
                          "recorded from, e.g. --repo .")
    if not path.is_dir():
        raise OptionError(f"{text!r} is a file, not a folder: give the git checkout the runs "
                          "were recorded from, e.g. --repo .")
    return path


def folder_problem(path: Path, shown: str, example: str) -> str | None:
    """Why ``path`` cannot become a folder this command writes (None: it can; missing
    folders are made): it is a file, it lies below a file, or its nearest existing folder
    is not writable."""
    if path.exists() and not path.is_dir():
        return f"{shown} is a file, not a folder: give a folder, e.g. {example}"
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{shown}: {parent} is a file, not a folder: give a path in a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{shown}: cannot write in {parent}: give a writable folder"
    return None


def parse_output_file(text: str) -> Path:
    """A file the command writes when it is done: refused now if it never could be (a
    folder, a path under a file, no permission), so a long run never ends in a traceback."""
    from pytest_perfgate.core.atomic import output_problem

    path = Path(parse_path(text)).expanduser()
    why = output_problem(path, repr(text), str(path / "out.json"))
    if why is not None:
        raise OptionError(why)
    return path

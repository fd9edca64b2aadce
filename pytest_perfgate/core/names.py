"""The one rule for names that end up as file or folder names (machines, runs, benchmarks).

A machine name becomes a folder under the results dir, a run id a file name, and asv publish
turns benchmark names into file names: one alphabet for all of them keeps every path inside
the results dir and valid on every filesystem asv publishes to.
"""

from __future__ import annotations

import re

_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+@-]{0,127}")
RULE = ("use 1-128 letters, digits, '.', '_', '+', '@' or '-', starting with a letter, digit "
        "or '_', without '..'")


def is_safe_name(text: object) -> bool:
    """True when ``text`` may be used as one file or folder name under the results dir."""
    return isinstance(text, str) and _SAFE.fullmatch(text) is not None and ".." not in text


def safe_name(text: object, what: str, example: str, shown: str | None = None) -> str:
    """Return ``text`` if :func:`is_safe_name`, else raise ValueError naming it and the fix.

    The message reads "<shown> is not a usable <what>: use ..., e.g. <example>"; ``shown``
    defaults to ``repr(text)`` (pass e.g. ``f"name={text!r}"`` to echo the caller's keyword).
    """
    if not is_safe_name(text):
        raise ValueError(f"{shown if shown is not None else repr(text)} is not a usable "
                         f"{what}: {RULE}, e.g. {example}")
    assert isinstance(text, str)
    return text

"""Which files declare a tree's dependencies, and whether two trees declare the same ones.

A pull request that only changes ``requirements.txt`` changes what the code runs on: its base
must run on the base's declaration. Two trees are compared by what their declarations say,
not by their bytes: a comment, a reordered table or a ruff setting in pyproject.toml declares
nothing new and builds nothing.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Globs relative to the project's top folder (``perfgate_env_files`` replaces them).
DEFAULT_PATTERNS = ("pyproject.toml", "requirements*.txt", "requirements/*.txt",
                    "constraints*.txt", "constraints/*.txt", "uv.lock", "poetry.lock",
                    "Pipfile.lock", "environment.yml", "environment.yaml")
_PYPROJECT_KEYS = (("project", "dependencies"), ("project", "optional-dependencies"),
                   ("dependency-groups",), ("tool", "poetry", "dependencies"),
                   ("tool", "poetry", "group"), ("build-system", "requires"))


class DeclarationError(ValueError):
    """A declaration cannot be read (the message names the file and the fix)."""


def found(tree: Path, patterns: Sequence[str] = DEFAULT_PATTERNS) -> list[str]:
    """The declaration files in ``tree``, as paths relative to it, sorted."""
    out: set[str] = set()
    for pattern in patterns:
        for p in tree.glob(pattern):
            if p.is_file():
                out.add(p.relative_to(tree).as_posix())
    return sorted(out)


def _dig(data: Any, keys: Sequence[str]) -> Any:
    for k in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(k)
    return data


def meaning(path: Path) -> str:
    """What a declaration says, in a form two trees compare by: pyproject.toml's dependency
    tables only, a lock file's pins, a requirements file's lines without comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DeclarationError(f"cannot read {path}: {e}: fix the file or leave it out of "
                               "perfgate_env_files") from None
    if path.name == "pyproject.toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise DeclarationError(f"{path} is not valid TOML ({e}): fix it") from None
        return json.dumps([_dig(data, k) for k in _PYPROJECT_KEYS], sort_keys=True,
                          default=str)
    if path.suffix == ".txt":
        lines = (re.sub(r"(^|\s)#.*", "", line).strip() for line in text.splitlines())
        return "\n".join(line for line in lines if line)
    return text


def changed(ref: Path, tree: Path, patterns: Sequence[str] = DEFAULT_PATTERNS) -> list[str]:
    """The declarations that say something else in ``tree`` than in ``ref`` (added or
    removed ones included), relative paths."""
    names = sorted(set(found(ref, patterns)) | set(found(tree, patterns)))
    out = []
    for name in names:
        a, b = ref / name, tree / name
        if a.is_file() != b.is_file() or (a.is_file() and meaning(a) != meaning(b)):
            out.append(name)
    return out

"""Which functions the change between base and head touched (git's diff of the two trees).

A profile names the functions that grew; a callee that grew only because a changed caller
calls it more (numpy's ``mean`` under a ``normalize_obs`` that now normalises twice) did not
change itself. Knowing which function's lines the diff touched lets the report name the
changed one and show the callee as where its time went, instead of naming a function that
did not change. Written by hand: git gives the changed lines, :mod:`ast` the functions'
spans; no library maps one onto the other.
"""

from __future__ import annotations

import ast
import re
import subprocess
from functools import lru_cache
from pathlib import Path

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
GIT_TIMEOUT_S = 60.0


class Changes:
    """The head tree's lines the diff from ``base_commit`` touched, by path relative to
    ``head`` (the checkout: its uncommitted changes count; new untracked files are changed
    throughout). ``unknown``: git could not say, so nothing is called changed or not."""

    def __init__(self, head: Path, base_commit: str) -> None:
        self.head = head
        self.lines: dict[str, set[int]] = {}
        self.new_files: set[str] = set()
        self.unknown: str | None = None
        try:
            diff = _git(head, "diff", "-U0", "--no-color", "--no-ext-diff", "--no-renames",
                        base_commit, "--")
            untracked = _git(head, "ls-files", "--others", "--exclude-standard")
        except (OSError, subprocess.SubprocessError, RuntimeError) as e:
            self.unknown = str(e)
            return
        self.new_files = {p for p in untracked.splitlines() if p.endswith(".py")}
        path = None
        for line in diff.splitlines():
            if line.startswith("+++ "):
                target = line[4:]
                path = target[2:] if target.startswith("b/") else None
                if path is not None:
                    self.lines.setdefault(path, set())
                continue
            m = _HUNK.match(line)
            if m and path is not None:
                start, count = int(m[1]), int(m[2] if m[2] is not None else 1)
                # a pure deletion (count 0) touches the line it follows
                self.lines[path].update(range(start, start + max(count, 1)))

    def function_changed(self, path: str, first_line: int) -> bool | None:
        """Whether the function starting at ``first_line`` of ``path`` (relative to the
        head tree) has a changed line; None where that cannot be told."""
        if self.unknown is not None or first_line <= 0:
            return None
        if path in self.new_files:
            return True
        touched = self.lines.get(path)
        if not touched:
            return False
        span = _span(str(self.head / path), first_line)
        if span is None:
            return None
        lo, hi = span
        return any(lo <= n <= hi for n in touched)


@lru_cache(maxsize=256)
def _span(path: str, first_line: int) -> tuple[int, int] | None:
    """The lines of the function (or class, or module) whose code starts at
    ``first_line``: decorators included, as Python's ``co_firstlineno`` counts them; for a
    lambda or a comprehension, the innermost function around it."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    if first_line == 1:
        return 1, 1 << 30  # module level code: any change of the file
    enclosing: tuple[int, int] | None = None  # a lambda's or comprehension's function
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            lo = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            hi = node.end_lineno or node.lineno
            if first_line in (node.lineno, lo):
                return lo, hi
            if lo <= first_line <= hi and (enclosing is None or lo >= enclosing[0]):
                enclosing = (lo, hi)
    return enclosing


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "core.quotepath=false", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {done.stderr.strip()[:300]}")
    return done.stdout

"""Writing the reports to disk: one rule for "can this path take a report", checked up front
and applied at the end, and writes that never end a measured session in a traceback.

The same :func:`problem` runs at configure time (a usage error, or a warning for
``GITHUB_STEP_SUMMARY``, which Actions sets by itself) and again just before writing. Each
report is written on its own; a failure comes back as a message naming the path, where it
came from and the fix, so one bad path never stops the other report or the history record
(the plugin prints it under the verdict table and ends the run with the infrastructure exit
status, never a regression's).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import output_problem
from pytest_perfgate.core.judged import Judged

JSON = "json"
MARKDOWN = "markdown"
JSONL = "jsonl"
_WHAT = {JSON: "JSON report", MARKDOWN: "markdown summary", JSONL: "JSON lines log"}
_EXAMPLE = {JSON: "perfgate.json", MARKDOWN: "perfgate.md", JSONL: "perfgate.jsonl"}
ENV_SUMMARY = "GITHUB_STEP_SUMMARY"


@dataclass(frozen=True)
class Target:
    """One report file: which report, where, and where the path came from."""

    kind: str  # JSON or MARKDOWN
    path: Path  # absolute
    source: str  # e.g. "--perfgate-json", "environment variable GITHUB_STEP_SUMMARY"

    @property
    def automatic(self) -> bool:
        """Set by the CI runner, not by the user: never creates folders, never a usage error."""
        return self.source.endswith(ENV_SUMMARY)

    @property
    def what(self) -> str:
        return _WHAT[self.kind]

    def shown(self) -> str:
        return f"{self.source} {self.path}"


def targets(options: Any, base: Path, where: Mapping[str, str]) -> list[Target]:
    """The reports ``options`` asks for; relative paths are taken from ``base`` (the folder
    pytest was invoked from), once, so a test that changes directory moves nothing."""
    out = []
    for kind in (JSON, MARKDOWN, JSONL):
        value = getattr(options, kind)
        if value:
            path = Path(os.path.expanduser(value))
            out.append(Target(kind, path if path.is_absolute() else base / path,
                              where.get(kind, f"--perfgate-{kind}")))
    return out


def problem(t: Target) -> str | None:
    """Why ``t`` cannot be written (None: it can). Missing folders of a path the user gave
    are created (as pytest's --junitxml does); the runner's own summary path is not."""
    why = output_problem(t.path, t.shown(), str(t.path / _EXAMPLE[t.kind]),
                         create_folders=not t.automatic)
    if why is not None and t.automatic and why.endswith("does not exist"):
        why += (" (the runner sets this variable; unset it or point it at a writable file to "
                "keep the summary)")
    return why


def same_file(found: Sequence[Target]) -> str | None:
    """Two reports into one file would write into each other: one of them must move."""
    for i, a in enumerate(found):
        for b in found[i + 1:]:
            if a.path == b.path:
                return (f"{a.shown()} and {b.shown()} name the same file: the {b.what} "
                        f"would be written into the {a.what}; give them different paths")
    return None


def write(found: Sequence[Target], judged: Sequence[Judged], meta: Mapping[str, Any],
          run: Mapping[str, Any] | None = None) -> tuple[list[Target], list[str]]:
    """Write every report that can be written; return those written and an error per other."""
    from pytest_perfgate.report import render

    done: list[Target] = []
    errors: list[str] = []
    for t in found:
        why = problem(t)
        if why is None:
            try:
                if t.kind == JSON:
                    render.write_json(str(t.path), judged, dict(meta))
                else:
                    text = (render.markdown(judged) if t.kind == MARKDOWN
                            else render.jsonl(judged, meta, run or {}))
                    t.path.parent.mkdir(parents=True, exist_ok=True)
                    with open(t.path, "a", encoding="utf-8") as f:
                        f.write(text)
            except Exception as e:
                why = f"{t.shown()}: {type(e).__name__}: {e}"
        if why is None:
            done.append(t)
        else:
            errors.append(f"could not write the {t.what}: {why}")
    return done, errors

"""What every command prints: one rule per condition, one exit status per kind.

Exit statuses (the table in docs/cli.md): 0 done (``check``: passed), 1 ``check`` only: a
verdict fails, 2 a usage error (argparse's: the value and the fix, before any work), 3 an
infrastructure error (no history or an unreadable one, a library missing, a file that could
not be written): never a pass. Errors and warnings go to stderr as ``perfgate CMD: ...``, so
that ``--json`` leaves stdout one JSON document; with ``--json`` an infrastructure error is
also that document (``"error"``), so a script reads every outcome the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import RunRecord

OK, FAIL, USAGE, INFRA = 0, 1, 2, 3
SCHEMA_VERSION = 1  # bump when a field of the --json documents changes meaning


class UsageError(Exception):
    """A value to change (exit 2): ``perfgate`` prints it as argparse prints a bad flag; a
    Python caller of a command's ``run`` gets the exception."""


PYTEST_USAGE_ERROR = 4  # pytest.ExitCode.USAGE_ERROR (this module does not import pytest)
MISSING_PATH = "file or directory not found"  # pytest's exit 4 for a test path that is absent


def inner_usage_error(output: str) -> str:
    """The message of a usage error of the pytest run a command started: pytest's own error
    lines (its bad option or value, named with its source) and where the fix goes."""
    said = [line.strip() for line in output.splitlines()
            if "error:" in line or line.startswith("ERROR")] or output.strip().splitlines()[-3:]
    return ("pytest refused its arguments or settings (exit 4): " + " ".join(said)[-600:]
            + ": fix the pytest arguments given after the revisions, or the PERFGATE_* "
            "variable or ini option it names")


@dataclass
class Reply:
    """What one command run says besides its printed lines: the ``--json`` body, the
    infrastructure problem that stopped it, the history warnings shown (each once)."""

    prog: str  # "perfgate check": the prefix of every message
    json: bool = False  # --json: one document on stdout, the printed lines on stderr
    body: dict[str, Any] = field(default_factory=dict)
    infra_problem: str | None = None
    warned: set[str] = field(default_factory=set)

    def infra(self, message: str) -> int:
        """Print an infrastructure error (kept for the CI outputs and --json); its status."""
        print(f"{self.prog}: infrastructure error: {message}", file=sys.stderr)
        self.infra_problem = message
        return INFRA

    def emit(self, run: Callable[[], int]) -> int:
        """``run()``; with ``json`` its printed lines go to stderr and stdout gets one JSON
        document (``body``, and ``"error"`` on exit 3), so a script reads every outcome the
        same way. A usage error leaves before any JSON (argparse's message)."""
        if not self.json:
            return run()
        with contextlib.redirect_stdout(sys.stderr):
            status = run()
        doc: dict[str, Any] = dict(self.body)
        if status == INFRA:  # "error" is set whenever the exit is 3, whichever path said so
            problems = doc.get("problems")
            problem = self.infra_problem or (
                "; ".join(map(str, problems)) if isinstance(problems, list) and problems
                else "not judged: see the messages on stderr")
            doc["error"] = {"kind": "infrastructure", "message": problem}
        doc = {"schema": SCHEMA_VERSION, "command": self.prog.split()[-1], "exit": status,
               "error": None, "version": version(), **doc}
        print(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False))
        return status


def version() -> str:
    """The installed pytest-perfgate's version (the plugin and this command are one), in
    ``--version`` and every ``--json`` document."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("pytest-perfgate")
    except PackageNotFoundError:
        return "unknown (not installed: run from an installed package)"


def number(x: float | None) -> float | None:
    """A JSON number (JSON has no inf or nan: those become null)."""
    return None if x is None or not math.isfinite(x) else float(x)


def run_json(run: RunRecord) -> dict[str, Any]:
    return {"run_id": run.run_id, "machine": run.machine, "commit": run.commit,
            "dirty": run.dirty, "branch": run.branch, "started_at": number(run.started_at)}


def verdict_json(j: Judged, run_id: str | None) -> dict[str, Any]:
    """One benchmark's verdict as the schema in docs/cli.md names it."""
    v = j.verdict
    fails = v is not None and v.fails(j.rule)
    accept = None
    if fails and run_id is not None:
        accept = f"perfgate accept {run_id}"
    return {
        "benchmark": j.name,
        "outcome": None if v is None else v.outcome.value,
        "fails": fails,
        "message": None if v is None else v.message,
        "ratio": None if v is None else number(v.ratio),
        "ci": None if v is None or v.ci is None else [number(v.ci[0]), number(v.ci[1])],
        "p_value": None if v is None else number(v.p_value),
        "threshold": number(j.rule.threshold),
        "steps_per_s": number(j.result.rate),
        "baseline_steps_per_s": number(j.baseline_rate),
        "baseline_commits": list(j.baseline_commits),
        "accept": accept,
    }


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout (schema: docs/cli.md); "
                        "messages go to stderr")

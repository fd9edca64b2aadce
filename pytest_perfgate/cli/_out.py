"""What every history command prints: one rule per condition, one exit status per kind.

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
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import RunRecord

OK, FAIL, USAGE, INFRA = 0, 1, 2, 3
T = TypeVar("T")
SCHEMA_VERSION = 1  # bump when a field of the --json documents changes meaning


def infra(args: argparse.Namespace, message: str) -> int:
    """Print an infrastructure error (kept on ``args`` for the CI outputs and --json)."""
    print(f"{args.parser.prog}: infrastructure error: {message}", file=sys.stderr)
    args.infra_problem = message
    return INFRA


def find_history(args: argparse.Namespace) -> Any:
    """The machine's runs (a :class:`~pytest_perfgate.history.lookup.MachineRuns`), or the
    infrastructure status (printed); several machines and none named is a usage error."""
    from pytest_perfgate.cli.common_args import history_location
    from pytest_perfgate.history.lookup import HistoryMissing, MachineAmbiguous, machine_runs

    results, machine = history_location(args)
    try:
        return warned(args, lambda: machine_runs(results, machine))
    except MachineAmbiguous as e:
        args.parser.error(str(e))
    except HistoryMissing as e:
        return infra(args, str(e))


def with_history_warnings(prog: str, call: Callable[[], T], seen: set[str] | None = None
                          ) -> T:
    """Run ``call``, printing each HistoryWarning (a skipped file, named) as one line on
    stderr instead of Python's warning format; a message already in ``seen`` (the same file
    read again) is not repeated."""
    from pytest_perfgate.history.files import HistoryWarning

    seen = set() if seen is None else seen
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HistoryWarning)
        try:
            return call()
        finally:
            for w in caught:
                if not issubclass(w.category, HistoryWarning):
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
                elif str(w.message) not in seen:
                    seen.add(str(w.message))
                    print(f"{prog}: warning: {w.message}", file=sys.stderr)


def warned(args: argparse.Namespace, call: Any) -> Any:
    """``call()`` with each skipped history file named once, as one line on stderr."""
    if not hasattr(args, "warned"):
        args.warned = set()
    return with_history_warnings(args.parser.prog, call, args.warned)


def _num(x: float | None) -> float | None:
    """A JSON number (JSON has no inf or nan: those become null)."""
    return None if x is None or not math.isfinite(x) else float(x)


def run_json(run: RunRecord) -> dict[str, Any]:
    return {"run_id": run.run_id, "machine": run.machine, "commit": run.commit,
            "dirty": run.dirty, "branch": run.branch, "started_at": _num(run.started_at)}


def verdict_json(j: Judged, run_id: str | None) -> dict[str, Any]:
    """One benchmark's verdict as the schema in docs/cli.md names it."""
    v = j.verdict
    fails = v is not None and v.fails(j.rule)
    accept = None
    if fails and run_id is not None:
        accept = f"perfgate accept {run_id}"
    return {
        "benchmark": j.result.name,
        "outcome": None if v is None else v.outcome.value,
        "fails": fails,
        "message": None if v is None else v.message,
        "ratio": None if v is None else _num(v.ratio),
        "ci": None if v is None or v.ci is None else [_num(v.ci[0]), _num(v.ci[1])],
        "p_value": None if v is None else _num(v.p_value),
        "threshold": _num(j.rule.threshold),
        "steps_per_s": _num(j.result.steps_per_s),
        "baseline_steps_per_s": _num(j.baseline_steps_per_s),
        "baseline_commits": list(j.baseline_commits),
        "accept": accept,
    }


def version() -> str:
    from pytest_perfgate.cli import version as _version

    return _version()


def emit_json(args: argparse.Namespace, body: dict[str, Any], status: int) -> None:
    """Print the one JSON document of this command (stdout, nothing else on it)."""
    doc = {"schema": SCHEMA_VERSION, "command": args.parser.prog.split()[-1],
           "exit": status, "error": None, "version": version(), **body}
    print(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False))


def run_with_json(args: argparse.Namespace, body: Callable[[], int]) -> int:
    """Run ``body``; with ``--json`` its human output goes to stderr and stdout gets one
    JSON document: what ``body`` left in ``args.json_body`` (or, on an infrastructure
    error, ``"error"``). A usage error exits 2 before any JSON (argparse's message)."""
    if not getattr(args, "json", False):
        return body()
    args.json_body = {}
    with contextlib.redirect_stdout(sys.stderr):
        status = body()
    doc: dict[str, Any] = dict(args.json_body)
    if status == INFRA:  # "error" is set whenever the exit is 3, whichever path said so
        problems = doc.get("problems")
        problem = getattr(args, "infra_problem", None) or (
            "; ".join(map(str, problems)) if isinstance(problems, list) and problems
            else "not judged: see the messages on stderr")
        doc["error"] = {"kind": "infrastructure", "message": problem}
    emit_json(args, doc, status)
    return status


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout (schema: docs/cli.md); "
                        "messages go to stderr")


__all__ = [
    "FAIL",
    "INFRA",
    "OK",
    "SCHEMA_VERSION",
    "USAGE",
    "add_json_argument",
    "emit_json",
    "find_history",
    "infra",
    "run_json",
    "run_with_json",
    "verdict_json",
    "warned",
]

"""``perfgate check`` in CI: gating a pytest report, GitHub annotations, the step summary.

A CI job measures in one step (``pytest --perfgate ... --perfgate-json=R``) and gates in the
next (``perfgate check --report R --pytest-exit $status``), so the gate's exit status tells a
regression (1) from an infrastructure error (3) even though pytest exits 1 for both a failed
gate and a crashed workload (docs/design.md §12). Not a command module (leading underscore).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pytest_perfgate.cli._out import Reply
from pytest_perfgate.cli.common_args import parse_output_file
from pytest_perfgate.report.github import INFRA, PASS, REGRESSION, USAGE, GateResult
from pytest_perfgate.session.options import OptionError, argparse_type, parse_path, parse_policy

PYTEST_EXITS = {0: "all tests passed", 1: "tests failed", 2: "interrupted",
                3: "internal error: the run could not be recorded or a report written",
                4: "usage error", 5: "no tests collected"}


def add_ci_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--report", type=argparse_type(parse_path), default=None, metavar="PATH",
                    help="gate on the verdicts of this JSON report (pytest --perfgate-json; "
                    "history or A/B mode) instead of judging a recorded run; they were judged "
                    "by pytest's rule, so the rule options here do not apply")
    ap.add_argument("--pytest-exit", type=argparse_type(_exit_status), default=None, metavar="N",
                    help="with --report: the exit status of the pytest run that wrote it, so "
                    "a crashed or interrupted run is an infrastructure error, never a pass")
    ap.add_argument("--no-baseline", type=argparse_type(parse_policy("fail", "warn")),
                    default="warn", metavar="{fail,warn}",
                    help="benchmarks with NO BASELINE: warn (a warning, "
                    "exit 0) or fail (exit 3: nothing was gated; default warn)")
    ap.add_argument("--github", action=argparse.BooleanOptionalAction, default=None,
                    help="print GitHub Actions annotations: ::error at each failing test's "
                    "file and line (default: on when GITHUB_ACTIONS=true)")
    ap.add_argument("--summary", type=argparse_type(parse_output_file), default=None,
                    metavar="PATH", help="append a markdown section (e.g. "
                    "$GITHUB_STEP_SUMMARY)")
    ap.add_argument("--title", default=None,
                    help="names this gate in the summary and annotations (e.g. 'PR vs "
                    "merge base')")


def _exit_status(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise OptionError(f"{text!r} is not an exit status: pass pytest's $? (a whole "
                          "number), e.g. --pytest-exit \"$status\"") from None


def gate_report(report: str | Path, code: int | None) -> GateResult:
    """The verdicts of a pytest report plus pytest's exit status, as one gate outcome."""
    from pytest_perfgate.core.judged import failing
    from pytest_perfgate.report import render
    from pytest_perfgate.report.github import not_gated
    from pytest_perfgate.report.readback import read_report

    path = Path(report)
    said = f"pytest exited {code} ({PYTEST_EXITS.get(code, 'unknown status')})" \
        if code is not None else ""
    if code == 4:
        return GateResult(USAGE, problems=[f"{said} before measuring: see its output"])
    try:
        judged = read_report(path)
    except FileNotFoundError:
        why = ("it measured nothing: every perf test skipped or deselected?" if code == 0
               else f"{said} before writing it" if code is not None
               else "run pytest --perfgate --perfgate-json=PATH first")
        return GateResult(INFRA, problems=[f"no report at {path}: {why}"])
    except (OSError, ValueError) as e:
        return GateResult(INFRA, problems=[f"cannot read the report {path}: {e}"])
    print(f"perfgate check: the verdicts in {path}" + (f" ({said})" if said else ""))
    for line in render.table(judged) + render.notes(judged):
        print(line)
    problems = []
    bad = failing(judged)
    if code not in (None, 0, 1):
        problems.append(f"{said}; the verdicts it reached are shown")
    elif code == 1 and not bad:
        problems.append(f"{said} but no verdict failed: a perf test errored outside the gate "
                        "(a crashed workload or A/B side; its error is in pytest's output)")
    elif code == 0 and not judged:
        problems.append("the report holds no benchmark: nothing was gated")
    status = REGRESSION if bad else INFRA if problems else PASS
    return GateResult(status, judged, problems, not_gated(judged))


def emit(gate: GateResult, reply: Reply, *, report: str | Path | None, no_baseline: str,
         github: bool | None, summary: str | Path | None, title: str | None) -> int:
    """Apply the NO BASELINE policy, print the headline and the annotations, append the
    summary; return the exit status."""
    from pytest_perfgate.report import github as gh

    if gate.status == PASS and gate.not_gated and no_baseline == "fail":
        gate.status = INFRA
        gate.problems.append(f"{len(gate.not_gated)} benchmark(s) have no baseline on this "
                             "machine, so nothing judged them (--no-baseline fail): record "
                             "runs of an earlier commit first (seed the history)")
    for text in gate.problems:
        if text != reply.infra_problem:  # not printed where it was found
            print(f"perfgate check: infrastructure error: {text}")
    shown = title or ("report " + Path(report).name if report else "history")
    print(f"perfgate check: {shown}: {gate.headline}")
    if github is None:
        github = os.environ.get("GITHUB_ACTIONS") == "true"
    if github:
        for line in gh.annotation_lines(gate, title or ""):
            print(line)
    if summary is not None:
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(gh.summary(gate, shown))
        except OSError as e:
            print(f"perfgate check: infrastructure error: could not append the summary to "
                  f"{summary}: {e}")
            return gate.status or INFRA
    return gate.status

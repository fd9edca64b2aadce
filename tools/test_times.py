"""Print where a test run's time went: the slowest tests and each phase's wall time.

`bash run.sh test` runs the suite in two phases (the parallel one under pytest-xdist, then
the tests marked `timing` one at a time) and hands both JUnit XML files to this script, so
every run shows the 20 slowest tests next to the budget (docs/testing.md). JUnit XML is
what pytest and pytest-xdist already write; this reads it with the standard library.

    python tools/test_times.py PHASE.xml [PHASE.xml ...] [--most 20] [--budget-s 900]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    nodeid: str
    seconds: float
    phase: str


@dataclass(frozen=True)
class Phase:
    name: str
    wall_s: float
    tests: int


def read(path: Path) -> tuple[Phase, list[Case]] | None:
    """One JUnit XML file: its phase (named after the file) and its test cases; None, with a
    warning naming the file, when it is missing or not JUnit XML (an interrupted phase)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"test_times: skipped {path}: {e}", file=sys.stderr)
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    name = path.stem
    cases: list[Case] = []
    wall = 0.0
    for suite in suites:
        wall += float(suite.get("time") or 0.0)
        for case in suite.iter("testcase"):
            cls, test = case.get("classname") or "", case.get("name") or ""
            module = cls.replace(".", "/") + ".py" if cls else "?"
            cases.append(Case(f"{module}::{test}", float(case.get("time") or 0.0), name))
    return Phase(name, wall, len(cases)), cases


def render(phases: list[Phase], cases: list[Case], most: int, budget_s: float | None) -> str:
    lines = [f"{most} slowest tests (setup + call + teardown):"]
    for c in sorted(cases, key=lambda c: c.seconds, reverse=True)[:most]:
        lines.append(f"  {c.seconds:7.1f} s  [{c.phase}]  {c.nodeid}")
    total = sum(p.wall_s for p in phases)
    for p in phases:
        lines.append(f"phase {p.name}: {p.tests} tests in {p.wall_s:.0f} s wall")
    verdict = ""
    if budget_s is not None:
        verdict = (f" (budget {budget_s:.0f} s: within)" if total <= budget_s
                   else f" (budget {budget_s:.0f} s: OVER by {total - budget_s:.0f} s; see "
                        "docs/testing.md before adding more slow tests)")
    lines.append(f"all phases: {total:.0f} s wall{verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--most", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=None)
    args = parser.parse_args(argv)
    phases: list[Phase] = []
    cases: list[Case] = []
    for path in args.files:
        got = read(path)
        if got is not None:
            phases.append(got[0])
            cases.extend(got[1])
    if phases:
        print(render(phases, cases, args.most, args.budget_s))
    return 0  # a report, never a failure of the run


if __name__ == "__main__":
    sys.exit(main())

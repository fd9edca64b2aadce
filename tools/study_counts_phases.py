"""What recording per-phase instruction counts costs the whole-step count (docs/design.md §10).

    python tools/study_counts_phases.py --pairs 1
        the shipped humanoid pool benchmark (perf/test_perf_mujoco.py::test_humanoid_batch_256,
        whose pool steps through phases hold/act/physics/observe/reward/reset) counted in
        separate callgrind workers, alternately with per-phase dumps and without
        (PERFGATE_COUNTS_PHASES=0): whole-step instructions per env-step of each, their
        relative difference, and the per-phase breakdown (which adds up to the whole).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_perfgate.modes.counts.phases import ENV_PHASES, per_step  # noqa: E402
from pytest_perfgate.modes.counts.runner import Counts, run_counts  # noqa: E402

SHIPPED = "perf/test_perf_mujoco.py::test_humanoid_batch_256"


def count(nodeid: str, phases_on: bool) -> tuple[Counts, float]:
    os.environ[ENV_PHASES] = "1" if phases_on else "0"
    t0 = time.monotonic()
    (c,) = run_counts(nodeid, ROOT).values()
    return c, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1, help="(phases on, phases off) pairs")
    ap.add_argument("--test", default=SHIPPED, help="the perf test to count")
    args = ap.parse_args(argv)
    on: list[float] = []
    off: list[float] = []
    print(f"{'worker':<12} {'instr/env-step':>16} {'wall s':>7}  phases (instr/env-step)")
    for i in range(args.pairs):
        for phases_on in ((True, False) if i % 2 == 0 else (False, True)):
            c, wall = count(args.test, phases_on)
            ipe = c.per_step()[0]
            (on if phases_on else off).append(ipe)
            by = per_step(c.phase_ir, c.transitions)
            shown = ", ".join(f"{n} {v:,.1f}" for n, v in sorted(by.items(), key=lambda kv: -kv[1]))
            if by:
                shown += f"; sum {sum(by.values()):,.1f}"
            print(f"{'phases ' + ('on' if phases_on else 'off'):<12} {ipe:>16,.1f} {wall:>7.1f}  "
                  f"{shown or '-'}")
    a, b = sum(on) / len(on), sum(off) / len(off)
    print(f"whole step, mean: phases on {a:,.1f}, off {b:,.1f} instr/env-step: "
          f"{(a / b - 1) * 100:+.4f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

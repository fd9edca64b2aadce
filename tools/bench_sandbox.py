"""What the pull-request sandbox costs a measurement: the shipped perf suite (or a part of it)
inside the sandbox vs outside, in short alternating turns (docs/ci.md, "The sandbox").

Each turn is one ``pytest --perfgate PERF_TESTS`` run (nothing recorded, a JSON report),
outside (A) or inside ``pytest_perfgate/cli/_sandbox.py`` (B), in the order A B B A, B A A B,
... so a drift of the machine falls on both sides alike. Per benchmark: the median
throughput of each side, the median of the per-pair ratios B/A and its spread (min-max of
the pairs), then the wall time of each side's runs (the sandbox's start included).

    python tools/bench_sandbox.py [--pairs 6] [--tests perf] [-- extra pytest args]
    python tools/bench_sandbox.py --pairs 10 --tests perf/test_perf_mujoco.py -- -k humanoid

Target: every benchmark's median ratio within its pairs' spread of 1.0 (no measurable cost),
and the sandbox's start under 50 ms a run. Run on a quiet machine; needs bwrap.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = ROOT / "pytest_perfgate" / "cli" / "_sandbox.py"


def one_run(sandboxed: bool, tests: str, extra: list[str], out: Path, home: Path
            ) -> tuple[dict[str, float], float]:
    """One turn: each benchmark's steps/s, and the run's wall time in seconds."""
    report = out / f"report-{time.monotonic_ns()}.json"
    argv = [sys.executable, "-m", "pytest", tests, "--perfgate", "--perfgate-only", "-q",
            "-p", "no:cacheprovider", "--perfgate-record=false",
            f"--perfgate-json={report}", *extra]
    if sandboxed:  # as the workflow starts it: the launcher, the report's folder writable
        argv = [sys.executable, "-I", "-S", str(SANDBOX), f"--rw={out}", "--", *argv]
    env = {**os.environ, "HOME": str(home), "PERFGATE_CACHE_DIR": str(out / "cache")}
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1) or not report.exists():
        sys.exit(f"bench_sandbox: the {'sandboxed' if sandboxed else 'bare'} run failed "
                 f"(exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    data = json.loads(report.read_text())
    report.unlink()
    return {b["benchmark"]: float(b["steps_per_s"]) for b in data["benchmarks"]}, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=6, help="A/B pairs (default 6)")
    ap.add_argument("--tests", default="perf", help="the perf tests (default: perf)")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="-- more pytest arguments")
    args = ap.parse_args()
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as where:
        out, home = Path(where) / "out", Path(where) / "home"
        out.mkdir()
        home.mkdir()
        print("warm-up pair (not counted) ...", flush=True)
        one_run(False, args.tests, extra, out, home)
        one_run(True, args.tests, extra, out, home)
        rates: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        walls: dict[bool, list[float]] = {False: [], True: []}
        for i in range(args.pairs):
            order = (False, True) if i % 2 == 0 else (True, False)  # A B, B A, ...
            for sandboxed in order:
                r, w = one_run(sandboxed, args.tests, extra, out, home)
                rates[sandboxed].append(r)
                walls[sandboxed].append(w)
            print(f"pair {i + 1}/{args.pairs}: wall bare {walls[False][-1]:.2f} s, "
                  f"sandbox {walls[True][-1]:.2f} s", flush=True)
    print(f"\n{'benchmark':<50} {'bare':>12} {'sandbox':>12} {'ratio':>7} {'pairs':>15}")
    for name in sorted(rates[False][0]):
        bare = [r[name] for r in rates[False]]
        inside = [r[name] for r in rates[True]]
        ratios = [b / a for a, b in zip(bare, inside, strict=True)]
        print(f"{name:<50} {statistics.median(bare):>12.4g} {statistics.median(inside):>12.4g} "
              f"{statistics.median(ratios):>7.3f} {min(ratios):>7.3f}-{max(ratios):<7.3f}")
    diffs = [b - a for a, b in zip(walls[False], walls[True], strict=True)]
    print(f"\nwall time a run: bare {statistics.median(walls[False]):.2f} s, sandbox "
          f"{statistics.median(walls[True]):.2f} s, median difference "
          f"{statistics.median(diffs) * 1000:+.0f} ms (pairs {min(diffs) * 1000:+.0f} to "
          f"{max(diffs) * 1000:+.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Study: does history mode decide, now that it re-measures its baseline when the record
cannot resolve the threshold?

A scratch repository with a numpy step: a base commit recorded ``--baseline-runs`` times
(history mode, as `pytest --perfgate` on main records it), then trials, each a head commit
(a branch off the base) that is unchanged, ~10% or ~20% slower, in a seeded random order.
Each trial is one `pytest --perfgate` run of the head, judged against the base's runs
(not recorded, so every trial meets the same history). Prints per kind: the verdicts, the
share judged REGRESSION with its exact 95% interval, how many were re-measured, and the
wall time per verdict. The JSON keeps each trial's verdict message (the record's spread,
the turns, the look that stopped it) and every pair; the scratch repository is removed at
the end unless ``--keep``.

    python tools/study_remeasure.py --trials 20 --out /tmp/remeasure.json

Every figure in docs/measurement.md's study comes from this script's output.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_perfgate.study.findings import Rate
from pytest_perfgate.study.hog import hog_for

STEP = """
import numpy as np

X = np.random.default_rng(0).random(4096)
SLOWER = {slower}  # extra work per step, as a fraction


def test_walk(perfgate):
    extra = X[: int(len(X) * SLOWER)] if SLOWER else None

    def step():
        np.sort(X)
        if extra is not None:
            np.sort(extra)
    perfgate.measure(step, transitions=8)
"""
KINDS = {"unchanged": 0.0, "10% slower": 0.11, "20% slower": 0.25}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def run(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    env["PERFGATE_PROFILE"] = "off"  # the verdict's own cost, as before profiles existed
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "--perfgate", "--perfgate-machine=study",
                           "--perfgate-threshold=5%", *args, "test_walk.py"], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=900)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20, help="trials per kind")
    ap.add_argument("--baseline-runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write every trial as JSON")
    ap.add_argument("--keep", action="store_true",
                    help="keep the scratch repository (its history and each trial's report)")
    ap.add_argument("--load", choices=("quiet", "one", "both"), default="quiet",
                    help="a neighbour's load through the whole study (baseline runs and "
                    "trials): none, a hog toggling on one core, or on both (2-5 s on, 2-5 s "
                    "off, as perfgate calibrate --load)")
    args = ap.parse_args()
    hog = hog_for(args.load, args.seed)
    if hog is None:
        return study(args)
    with hog:
        return study(args)


def study(args: argparse.Namespace) -> int:
    repo = Path(tempfile.mkdtemp(prefix="perfgate-study-remeasure-"))
    try:
        return trials_in(repo, args)
    finally:
        if args.keep:
            print(f"scratch repository kept: {repo}")
        else:
            shutil.rmtree(repo, ignore_errors=True)


def trials_in(repo: Path, args: argparse.Namespace) -> int:
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "study@example.com")
    git(repo, "config", "user.name", "study")
    (repo / "pytest.ini").write_text("[pytest]\nperfgate_results_dir = results\n")
    (repo / ".gitignore").write_text("results/\n")
    (repo / "test_walk.py").write_text(STEP.format(slower=0.0))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    for _ in range(args.baseline_runs):
        done = run(repo)
        if done.returncode != 0:
            print(done.stdout + done.stderr)
            return 3
    heads = {}
    for kind, slower in KINDS.items():
        git(repo, "checkout", "-q", "-b", kind.replace(" ", "-").replace("%", "pc"), "main")
        (repo / "test_walk.py").write_text(STEP.format(slower=slower))
        git(repo, "commit", "-qam", kind, "--allow-empty")
        heads[kind] = git(repo, "rev-parse", "HEAD")
    order = [k for k in KINDS for _ in range(args.trials)]
    random.Random(args.seed).shuffle(order)
    trials = []
    for i, kind in enumerate(order):
        git(repo, "checkout", "-q", heads[kind])
        report = repo / f"trial-{i}.json"
        t0 = time.monotonic()
        run(repo, "--perfgate-record=false", f"--perfgate-json={report}")
        wall = time.monotonic() - t0
        try:
            (entry,) = json.loads(report.read_text())["benchmarks"]
        except (OSError, ValueError):
            entry = {"verdict": "ERROR", "message": "no report"}
        pairs = entry.get("pairs", (entry.get("result") or {}).get("extra", {}).get(
            "ab_pairs")) or []  # reports before "pairs" kept them in the result's extra
        trials.append({"kind": kind, "verdict": entry["verdict"], "ratio": entry.get("ratio"),
                       "remeasured": entry.get("remeasured", str(entry.get(
                           "message", "")).startswith("re-measured")),
                       "pairs": pairs, "wall_s": wall, "message": entry.get("message")})
        print(f"[{i + 1}/{len(order)}] {kind}: {entry['verdict']} ratio {entry.get('ratio')}"
              f" ({wall:.0f} s){' re-measured' if trials[-1]['remeasured'] else ''}"
              + (f", pairs {[p['outcome'] for p in pairs]}" if pairs else ""), flush=True)
    print(f"\n{args.baseline_runs} baseline runs, {args.trials} trials per kind, threshold 5%, "
          f"load {args.load}")
    print("| head | REGRESSION | verdicts | re-measured | fresh pairs | wall per verdict "
          "(median) |")
    print("|---|---|---|---|---|---|")
    for kind in KINDS:
        mine = [t for t in trials if t["kind"] == kind]
        counts: dict[str, int] = {}
        for t in mine:
            counts[t["verdict"]] = counts.get(t["verdict"], 0) + 1
        reg = Rate(counts.get("REGRESSION", 0), len(mine))
        shown = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
        fresh = sum(max(0, len(t.get("pairs", [])) - 1) for t in mine)
        print(f"| {kind} | {reg} | {shown} | {sum(t['remeasured'] for t in mine)}/{len(mine)} "
              f"| {fresh} | {statistics.median(t['wall_s'] for t in mine):.1f} s |")
    if args.out is not None:
        args.out.write_text(json.dumps({"trials": trials, "args": vars(args) | {
            "out": str(args.out)}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

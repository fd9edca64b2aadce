"""Study: does a pair of A/B side processes carry a bias of its own, with identical code?

The A/B verdict's interval covers the turns of one base process and one head process. If
two processes of the same code run at steadily different speeds (memory layout, hash
seed, where the scheduler puts them), that difference is in every turn, the turns cannot
show it, and identical code can be judged REGRESSION. Each trial here is a fresh
``pytest --perfgate --perfgate-ab=HEAD`` of unchanged code (base and head are the same
commit), so each trial is a new pair of processes: the spread of the trials' log ratios
against the intervals each trial claims is the pair-to-pair bias.

Each trial's JSON lists every pair it measured (``pairs``: a called change is measured
again by fresh pairs, docs/ab.md), so the study gives both rates: the verdict's, and the
first pair's alone.

Workloads: ``numpy`` (a sort, Python around it), ``mujoco`` (gymnasium's HalfCheetah-v5
in a SyncVectorEnv of 2: MuJoCo's C code, where the false alarm was seen), ``ring`` (a
learner-bound collector/learner pair over the ring: two processes that meet) and ``tiny``
(a call of a few microseconds under pytest-benchmark's fixture: a per-process offset).
Prints per trial the ratio and its interval; then the A/A false-alarm shares (REGRESSION
and IMPROVEMENT) with their exact 95% intervals, how
many intervals exclude 1 (honest intervals exclude it about as often as their level allows;
far more often means a bias between process pairs), and the standard deviation of the
trials' log ratios beside the median half-width of their intervals.

    python tools/study_process_pairs.py --workload mujoco --trials 20 --out /tmp/pairs.json
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_perfgate.study.findings import Rate

WORKLOADS = {
    "numpy": '''
import numpy as np

X = np.random.default_rng(0).random(4096)


def test_walk(perfgate):
    perfgate.measure(lambda: np.sort(X), transitions=8)
''',
    "mujoco": '''
import gymnasium as gym
import numpy as np
import pytest


@pytest.fixture
def envs():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("HalfCheetah-v5")] * 2)
    yield envs
    envs.close()


def test_walk(perfgate, envs):
    rng = np.random.default_rng(0)
    low, high = envs.action_space.low, envs.action_space.high
    perfgate.measure_vector_env(envs, lambda obs: rng.uniform(low, high).astype(np.float32),
                                seed=0)
''',
    # a learner-bound ring pair: the collector blocks in push while one SAC update a batch
    # runs on the learner side; its throughput is how the two processes meet
    "ring": '''
def test_walk(perfgate, ring_pair):
    pair = ring_pair(num_envs=16, capacity=4, threads=(1, 1),
                     learner_kwargs={"hidden": 256, "batch_size": 512})
    perfgate.measure_source(pair, transitions=16, name="ring_walk")
''',
    # a tiny call under pytest-benchmark's own fixture (gated in calls/s): a per-process
    # offset is the whole story here
    "tiny": '''
def small(n=24):
    return sum(i * i for i in range(n))


def test_walk(benchmark):
    benchmark(small)
''',
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def trial(repo: Path, i: int, threshold: str) -> dict[str, Any]:
    report = repo / f"trial-{i}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    env["PERFGATE_PROFILE"] = "off"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--perfgate", "--perfgate-machine=study", "--perfgate-ab=HEAD",
                    f"--perfgate-threshold={threshold}", "--perfgate-record=false",
                    f"--perfgate-json={report}", "test_walk.py"], cwd=repo, env=env,
                   capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    try:
        (entry,) = json.loads(report.read_text())["benchmarks"]
    except (OSError, ValueError):
        return {"verdict": "ERROR", "ratio": None, "ci": None, "wall_s": wall}
    pairs = entry.get("pairs", entry.get("result", {}).get("extra", {}).get("ab_pairs")) or [
        {"ratio": entry.get("ratio"), "ci": entry.get("ci"), "outcome": entry["verdict"]}]
    return {"verdict": entry["verdict"], "ratio": entry.get("ratio"), "ci": entry.get("ci"),
            "first_pair": pairs[0]["outcome"], "pairs": pairs, "wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="mujoco")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--threshold", default="2%", help="the A/B mode's default")
    ap.add_argument("--out", type=Path, default=None, help="write every trial as JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfgate-study-pairs-") as tmp:
        repo = Path(tmp)
        git(repo, "init", "-q")
        git(repo, "config", "user.email", "study@example.com")
        git(repo, "config", "user.name", "study")
        (repo / "pytest.ini").write_text("[pytest]\nperfgate_results_dir = results\n")
        (repo / ".gitignore").write_text("results/\n*.json\n")
        (repo / "test_walk.py").write_text(WORKLOADS[args.workload])
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "the code")
        trials = []
        for i in range(args.trials):
            t = trial(repo, i, args.threshold)
            trials.append(t)
            print(f"[{i + 1}/{args.trials}] {t['verdict']} ratio {t['ratio']} ci {t['ci']} "
                  f"pairs {len(t.get('pairs', []))} ({t['wall_s']:.0f} s)", flush=True)
    # the spread between pairs is the first pair's: a fresh pair is measured only after a
    # first pair called a regression, so the verdict's figures are a selected sample
    firsts = [t["pairs"][0] for t in trials if t.get("pairs")]
    judged = [(float(r), float(c[0]), float(c[1])) for f in firsts
              if isinstance(r := f.get("ratio"), (int, float))
              and isinstance(c := f.get("ci"), list)]
    logs = [math.log(r) for r, _, _ in judged]
    halves = [(math.log(hi) - math.log(lo)) / 2 for _, lo, hi in judged]
    excl = sum(1 for _, lo, hi in judged if not lo <= 1.0 <= hi)
    alarms = Rate(sum(t["verdict"] == "REGRESSION" for t in trials), len(trials))
    raised = Rate(sum(t["verdict"] == "IMPROVEMENT" for t in trials), len(trials))
    first = Rate(sum(t.get("first_pair") == "REGRESSION" for t in trials), len(trials))
    first_up = Rate(sum(t.get("first_pair") == "IMPROVEMENT" for t in trials), len(trials))
    print(f"\n{args.workload}, {len(trials)} A/A trials (fresh processes each), threshold "
          f"{args.threshold}: REGRESSION {alarms}, IMPROVEMENT {raised}; verdicts "
          f"{dict(sorted(collections.Counter(t['verdict'] for t in trials).items()))}; "
          f"first pairs' intervals excluding 1: {excl}/{len(judged)}")
    print(f"the first pair alone (the verdict before fresh pairs had to measure it too): "
          f"REGRESSION {first}, IMPROVEMENT {first_up}; called changes measured again: "
          f"{sum(len(t.get('pairs', [])) > 1 for t in trials)}")
    if len(logs) >= 2:
        print(f"trial-to-trial sd of the log ratio {statistics.stdev(logs):.4f}; median "
              f"interval half-width {statistics.median(halves):.4f}")
    if args.out is not None:
        args.out.write_text(json.dumps({"trials": trials, "args": {
            k: str(v) for k, v in vars(args).items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Study: does the differential profile name the function a slowdown hides in?

A scratch repository with an RL-like numpy step made of five functions (observation
normalising, a two-layer policy, action clipping, a reward, running statistics). Each
trial is a head commit that makes one function, picked at random (seeded), slower by
3-10% of the whole step: a pure-Python loop in its body (its own time) or extra numpy calls
from it (time in native code under it), alternating. Each trial is one
``pytest --perfgate --perfgate-ab HEAD~1 --perfgate-profile`` run (the profile taken
whatever the verdict); it counts as named when the first function of the profile is the
one changed. Prints a line per trial and the summary, with the exact 95% interval.

    python tools/study_profile.py --trials 10 --out /tmp/profile-study.json

Every figure in docs/profile.md's study comes from this script's output.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

from pytest_perfgate.study.findings import Rate

FUNCTIONS = ("normalize_obs", "policy", "clip_actions", "reward", "update_stats")
POLICY = '''
import numpy as np

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((17, 64)) * 0.1
W2 = RNG.standard_normal((64, 6)) * 0.1
STATS = {{"mean": np.zeros(17), "n": 0}}


def normalize_obs(o):
{normalize_obs}    return (o - o.mean(0)) / (o.std(0) + 1e-8)


def policy(o):
{policy}    return np.tanh(np.tanh(o @ W1) @ W2)


def clip_actions(a):
{clip_actions}    return np.clip(a, -0.9, 0.9)


def reward(o, a):
{reward}    return (o[:, :6] * a).sum(1) - 0.01 * (a * a).sum(1)


def update_stats(o):
{update_stats}    STATS["n"] += 1
    STATS["mean"] += (o.mean(0) - STATS["mean"]) / STATS["n"]


def step(o):
    n = normalize_obs(o)
    a = clip_actions(policy(n))
    r = reward(n, a)
    update_stats(o)
    return r
'''
TEST = '''
import numpy as np
from policy import step

OBS = np.random.default_rng(1).random((64, 17))


def test_policy(perfgate):
    perfgate.measure(lambda: step(OBS), transitions=64)
'''


ARG = {"normalize_obs": "o", "policy": "o", "clip_actions": "a", "reward": "o",
       "update_stats": "o"}


def body(fn: str, kind: str, n: int) -> str:
    if kind == "python":
        return f"    for _ in range({n}):\n        pass\n"
    return f"    for _ in range({n}):\n        np.sqrt(np.abs({ARG[fn]})).sum()\n"


def source(injected: dict[str, str]) -> str:
    return POLICY.format(**{f: injected.get(f, "") for f in FUNCTIONS})


def calibrate(where: Path) -> tuple[float, float, float]:
    """The step's time, one pass of the Python loop, one extra numpy call (seconds)."""
    sys.path.insert(0, str(where))
    import numpy as np
    import policy  # type: ignore[import-not-found]

    obs = np.random.default_rng(1).random((64, 17))
    step = min(timeit.repeat(lambda: policy.step(obs), number=200, repeat=7)) / 200
    loop = min(timeit.repeat("for _ in range(1000): pass", number=100, repeat=7)) / 1e5
    call = min(timeit.repeat(lambda: np.sqrt(np.abs(obs)).sum(), number=500, repeat=7)) / 500
    sys.path.pop(0)
    return step, loop, call


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=s@e", "-c", "user.name=s", *args], cwd=repo,
                   check=True, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--seed", type=int, default=20261203)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="perfgate-profile-study-") as tmp:
        repo = Path(tmp) / "repo"
        (repo / "perf").mkdir(parents=True)
        (repo / "perf" / "policy.py").write_text(source({}))
        (repo / "perf" / "test_policy.py").write_text(TEST)
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "base")
        step_s, loop_s, call_s = calibrate(repo / "perf")
        print(f"step {step_s * 1e6:.1f} us; a loop pass {loop_s * 1e9:.1f} ns; an extra "
              f"numpy call {call_s * 1e6:.2f} us", flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
        for i in range(args.trials):
            fn = rng.choice(FUNCTIONS)
            kind = "python" if i % 2 == 0 else "numpy"
            target = rng.uniform(0.03, 0.10)
            n = max(1, round(target * step_s / (loop_s if kind == "python" else call_s)))
            git(repo, "checkout", "-q", "-B", "trial", "main")
            (repo / "perf" / "policy.py").write_text(source({fn: body(fn, kind, n)}))
            git(repo, "commit", "-qam", f"{fn} slower")
            report = Path(tmp) / f"r{i}.json"
            t0 = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "--perfgate", "--perfgate-ab=main",
                 "--perfgate-record=false", "--perfgate-profile", f"--perfgate-json={report}",
                 f"--perfgate-profile-dir={Path(tmp) / f'p{i}'}", "-p", "no:randomly",
                 "-p", "no:cacheprovider", "test_policy.py"],
                cwd=repo / "perf", capture_output=True, text=True, env=env, timeout=900)
            seconds = time.monotonic() - t0
            try:
                entry = json.loads(report.read_text())["benchmarks"][0]
            except (OSError, ValueError, IndexError, KeyError):
                print(f"trial {i}: no report (exit {done.returncode}):\n"
                      + done.stdout[-2000:], flush=True)
                rows.append({"trial": i, "function": fn, "kind": kind, "error": True})
                continue
            profile = entry["result"]["extra"].get("profile", {})
            grew = profile.get("grew") or []
            first = grew[0]["function"] if grew else None
            row = {"trial": i, "function": fn, "kind": kind, "target": round(target, 4),
                   "loop": n, "verdict": entry["verdict"], "ratio": entry["ratio"],
                   "named_first": first == fn, "first": first,
                   "share": grew[0]["share"] if grew else None,
                   "named": [g["function"] for g in grew[:3]],
                   "explained": profile.get("explained"), "error": profile.get("error"),
                   "seconds": round(seconds, 1),
                   "profile_s": profile.get("cost_s")}
            rows.append(row)
            print(f"trial {i}: {fn:<13} {kind:<6} target {target:5.1%}  ratio "
                  f"{entry['ratio'] or float('nan'):.3f} {entry['verdict']:<12} first: "
                  f"{first} ({'yes' if first == fn else 'NO'}; share "
                  f"{(row['share'] or 0):.0%}) named {row['named']}  {seconds:.0f} s "
                  f"(profile {row['profile_s']} s)", flush=True)
    ok = [r for r in rows if not r.get("error")]
    named = sum(1 for r in ok if r["named_first"])
    rate = Rate(named, len(ok))
    secs = sorted(float(r["seconds"]) for r in ok)
    print(f"named first: {named}/{len(ok)} ({rate}); REGRESSION verdicts: "
          f"{sum(1 for r in ok if r['verdict'] == 'REGRESSION')}/{len(ok)}; median "
          f"seconds per trial: {secs[len(secs) // 2] if secs else 0}")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "seed": args.seed}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

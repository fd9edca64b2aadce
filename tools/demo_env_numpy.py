"""A real dependency change, measured independently and by the gate: numpy 2.x -> 1.26.4.

numpy 2.0 sorts float arrays with SIMD kernels that 1.26 lacks, so a pull request that pins
numpy back (or an upgrade the other way) moves a sort-heavy step. This script

1. builds the environment with numpy ``--old`` laid over this one (pytest_perfgate/envs/),
2. measures ``np.sort`` of 200k float64 in both environments in alternating turns (a fresh
   process per turn, ``--turns`` each, medians): the independent figure,
3. runs the gate on a scratch repository whose head commit changes only the pin in
   requirements.txt (``pytest --perfgate --perfgate-ab=HEAD~1``, real clock): it must say
   REGRESSION and name numpy with both versions.

    python tools/demo_env_numpy.py --turns 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_perfgate.envs.build import build
from pytest_perfgate.history.environment import installed
from pytest_perfgate.sim.settled import cache_dir

STEP = ("import numpy as np, time, json\n"
        "a = np.random.default_rng(0).random(200_000)\n"
        "for _ in range(5): np.sort(a)\n"
        "t = []\n"
        "for _ in range(30):\n"
        "    s = time.perf_counter(); np.sort(a); t.append(time.perf_counter() - s)\n"
        "t.sort(); print(json.dumps([np.__version__, t[len(t) // 2]]))\n")

PERF = """
import numpy as np

def test_sort(perfgate):
    a = np.random.default_rng(0).random(200_000)
    perfgate.measure(lambda: np.sort(a), transitions=1)
"""


def turn(python: str) -> tuple[str, float]:
    out = subprocess.run([python, "-c", STEP], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    version, seconds = json.loads(out)
    return version, seconds


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="1.26.4", help="the numpy the head pins")
    ap.add_argument("--turns", type=int, default=10)
    args = ap.parse_args()
    ref, _ = installed()
    new = ref.get("numpy")
    cache = cache_dir() or Path(tempfile.gettempdir()) / "pytest-perfgate"
    old_python, tool, cached = build({"numpy": args.old}, cache, ref)
    print(f"numpy {new} here; numpy {args.old} laid over it with {tool} "
          f"({'cached' if cached else 'built'}): {old_python}")

    times: dict[str, list[float]] = {new or "?": [], args.old: []}
    for i in range(args.turns):
        order = [sys.executable, old_python] if i % 2 == 0 else [old_python, sys.executable]
        for python in order:
            version, seconds = turn(python)
            times[version].append(seconds)
    med = {v: statistics.median(t) for v, t in times.items()}
    print(f"independent, {args.turns} alternating turns per side (median ms per sort): "
          + ", ".join(f"numpy {v}: {m * 1e3:.3f}" for v, m in med.items())
          + f"; throughput {args.old} / {new}: {med[new or '?'] / med[args.old]:.3f}")

    with tempfile.TemporaryDirectory(prefix="demo-env-") as tmp:
        repo = Path(tmp)
        git(repo, "init", "-q")
        git(repo, "config", "user.email", "d@example.com")
        git(repo, "config", "user.name", "d")
        (repo / "test_perf.py").write_text(PERF)
        (repo / "pytest.ini").write_text("[pytest]\n")
        (repo / "requirements.txt").write_text(f"numpy=={new}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "base")
        (repo / "requirements.txt").write_text(f"numpy=={args.old}\n")
        git(repo, "commit", "-qam", f"pin numpy {args.old}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
        done = subprocess.run(
            [old_python, "-m", "pytest", "--perfgate", "--perfgate-ab=HEAD~1",
             "--perfgate-machine=demo", "--perfgate-record=false", "-p", "no:cacheprovider",
             f"--perfgate-json={repo / 'report.json'}", "test_perf.py"],
            cwd=repo, env=env, capture_output=True, text=True, timeout=900)
        lines = [ln for ln in done.stdout.splitlines()
                 if ln.startswith("perfgate: the ") or "Since the base" in ln]
        print("\n".join(lines))
        rep = json.loads((repo / "report.json").read_text())["benchmarks"][0]
        print(f"gate: exit {done.returncode}, {rep['verdict']}, ratio {rep['ratio']:.3f} "
              f"[{rep['ci'][0]:.3f}-{rep['ci'][1]:.3f}], environment_changes "
              f"{rep['environment_changes']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

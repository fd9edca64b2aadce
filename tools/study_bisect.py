"""Does ``perfgate bisect`` name the commit that cost throughput, and does ``asv find``?
(docs/bisect.md)

    python tools/study_bisect.py --trials 10 --commits 32 --step 5%
        builds one scratch git repository per trial: a package whose step does 100 sorts of
        2000 random floats, ``--commits`` first-parent commits after GOOD (most touch only a
        notes file), one of them, chosen at random, adding ``--step`` extra numpy work
        (5% = 5 more sorts: real work the machine's speed affects like the rest, not a sleep).
        Each repository is searched by ``perfgate bisect GOOD HEAD`` (the product's
        defaults: 96 turns x 0.1 s, threshold 2%) and by ``asv find GOOD^..HEAD time_step``
        (asv's bisection, one measurement per commit, the project built and installed into
        a virtualenv at each commit). Prints per trial the slow commit, what each named,
        the probes or benchmarks run and the wall time; then the tally.
    python tools/study_bisect.py --trials 1 --seed 7 --no-asv
        one trial, perfgate only (trials are independent: run them in short sittings).
    python tools/study_bisect.py --trials 3 --step 3% --steps 2 --gap 10 --no-asv
        two 3% steps 10 commits apart (the second at a random place, the first 10 commits
        before it): a hit is both named, and nothing else.

Run it under ``flock /tmp/perfgate-timing.lock`` on a shared machine: a measurement beside
another one measures both.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parents[1]

BASE_SORTS = 100
PACKAGE = '''"""The scratch project's workload: numpy sorts, {sorts} per step."""
import numpy as np

SORTS = {sorts}
X = np.random.default_rng(0).random(2000)


def step():
    for _ in range(SORTS):
        np.sort(X)
'''
PERF_TEST = '''from workpkg import step


def test_step(perfgate):
    perfgate.measure(step, transitions=1)
'''
ASV_BENCH = '''from workpkg import step


def time_step():
    step()
'''
PYPROJECT = '''[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "workpkg"
version = "0.1"
dependencies = ["numpy"]

[tool.setuptools]
packages = ["workpkg"]
'''
ASV_CONF = {
    "version": 1, "project": "workpkg", "repo": ".", "branches": ["main"],
    "environment_type": "virtualenv", "pythons": [f"{sys.version_info[0]}.{sys.version_info[1]}"],
    "build_command": ["python -m pip wheel --no-deps -w {build_cache_dir} {build_dir}"],
    "install_command": ["in-dir={env_dir} python -m pip install {wheel_file}"],
    "benchmark_dir": "benchmarks", "env_dir": ".asv/env", "results_dir": ".asv/results",
    "html_dir": ".asv/html",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def build(repo: Path, commits: int, slow_at: list[int], step: float) -> tuple[str, list[str]]:
    """The scratch repository: a root commit, GOOD, then ``commits`` commits of which each
    one listed in ``slow_at`` (0-based) adds ``step`` of the base work more. Returns GOOD and
    the commits."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "study@example.com")
    git(repo, "config", "user.name", "study")
    (repo / "workpkg").mkdir()
    (repo / "tests").mkdir()
    (repo / "benchmarks").mkdir()
    (repo / "tests" / "test_perf.py").write_text(PERF_TEST)
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "benchmarks" / "bench.py").write_text(ASV_BENCH)
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "asv.conf.json").write_text(json.dumps(ASV_CONF, indent=2))
    (repo / "pytest.ini").write_text("[pytest]\nperfgate_machine = study\n")
    (repo / ".gitignore").write_text(".asv/\n.perfgate/\n*.egg-info/\nbuild/\n")
    pkg = repo / "workpkg" / "__init__.py"
    pkg.write_text(PACKAGE.format(sorts=BASE_SORTS))
    (repo / "NOTES.txt").write_text("root\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "root")
    with (repo / "NOTES.txt").open("a") as f:
        f.write("good\n")
    git(repo, "commit", "-qam", "GOOD")
    good = git(repo, "rev-parse", "HEAD")
    hashes = []
    for i in range(commits):
        if i in slow_at:
            done = sum(1 for k in slow_at if k <= i)
            pkg.write_text(PACKAGE.format(sorts=round(BASE_SORTS * (1 + done * step))))
        with (repo / "NOTES.txt").open("a") as f:
            f.write(f"commit {i}\n")
        git(repo, "commit", "-qam", f"commit {i}" + (" (slower)" if i in slow_at else ""))
        hashes.append(git(repo, "rev-parse", "HEAD"))
    return good, hashes


def run_perfgate(repo: Path, good: str, extra: list[str]) -> dict[str, object]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest_perfgate.cli", "bisect", *extra,
                           good, "HEAD", "tests/test_perf.py"], cwd=repo, capture_output=True,
                          text=True)
    out = proc.stdout + proc.stderr
    named = re.findall(r"^first bad commit: ([0-9a-f]{10})", out, re.M)
    ranges = re.findall(r"^the step is in one of (\d+) commits", out, re.M)
    probes = re.search(r"^(\d+) probes? in ", out, re.M)
    return {"named": named, "ranges": [int(r) for r in ranges], "rc": proc.returncode,
            "probes": int(probes.group(1)) if probes else None,
            "seconds": time.monotonic() - start, "output": out}


def run_asv(repo: Path, good: str, home: Path) -> dict[str, object]:
    env = {**os.environ, "HOME": str(home)}
    asv = [sys.executable, "-m", "asv"]
    subprocess.run([*asv, "machine", "--yes", "--machine", "study"], cwd=repo, env=env,
                   capture_output=True, text=True)
    start = time.monotonic()
    proc = subprocess.run([*asv, "find", "--machine", "study", f"{good}^..HEAD", "time_step"],
                          cwd=repo, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    found = re.search(r"Greatest regression found: ([0-9a-f]{8})", out)
    runs = len(re.findall(r"For workpkg commit", out))
    return {"named": [found.group(1)] if found else [], "rc": proc.returncode,
            "benchmarks": runs, "seconds": time.monotonic() - start, "output": out}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--commits", type=int, default=32)
    ap.add_argument("--step", default="5%", help="the slowdown, e.g. 5%% or 0.05")
    ap.add_argument("--steps", type=int, default=1, help="how many slow commits (default 1)")
    ap.add_argument("--gap", type=int, default=10, help="commits between two slow commits")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-asv", action="store_true", help="skip asv find")
    ap.add_argument("--dir", type=Path, default=None, help="keep the repositories here")
    ap.add_argument("bisect_args", nargs="*", help="extra perfgate bisect options, after --")
    args = ap.parse_args()
    step = float(args.step.rstrip("%")) / (100 if args.step.endswith("%") else 1)
    if args.steps < 1 or (args.steps - 1) * args.gap >= args.commits:
        ap.error(f"--steps {args.steps} --gap {args.gap} do not fit in --commits "
                 f"{args.commits}: need (steps - 1) x gap < commits")
    rng = random.Random(args.seed)
    top = args.dir or Path(tempfile.mkdtemp(prefix="study-bisect-"))
    print(f"study_bisect: {args.trials} trials, {args.commits} commits, {args.steps} x a "
          f"{step:.0%} step ({BASE_SORTS} -> {round(BASE_SORTS * (1 + step))} sorts"
          f"{f', {args.gap} commits apart' if args.steps > 1 else ''}), seed {args.seed}, "
          f"repositories in {top}; load average {load()}", flush=True)
    tally = {"perfgate": 0, "asv": 0}
    probes: list[int] = []
    walls: list[float] = []
    asv_walls: list[float] = []
    for t in range(args.trials):
        first = rng.randrange(args.commits - (args.steps - 1) * args.gap)
        slow_at = [first + k * args.gap for k in range(args.steps)]
        repo = top / f"trial-{t}"
        good, hashes = build(repo, args.commits, slow_at, step)
        truth = [hashes[i] for i in slow_at]
        pg = run_perfgate(repo, good, args.bisect_args)
        (top / f"trial-{t}-perfgate.txt").write_text(str(pg["output"]))
        retried = str(pg["output"]).count("-> inconclusive")
        hit = sorted(cast("list[str]", pg["named"])) == sorted(h[:10] for h in truth)
        tally["perfgate"] += hit
        probes.append(int(str(pg["probes"])))
        walls.append(float(str(pg["seconds"])))
        ranges = f" (ranges of {pg['ranges']} commits)" if pg["ranges"] else ""
        where = ", ".join(f"#{i} {h[:10]}" for i, h in zip(slow_at, truth, strict=True))
        line = (f"trial {t}: slow commit {where}; perfgate bisect named "
                f"{pg['named'] or 'nothing'}{ranges} {'HIT' if hit else 'MISS'}, exit "
                f"{pg['rc']}, {pg['probes']} probes ({retried} inconclusive), "
                f"{pg['seconds']:.0f} s")
        if not hit:
            print(pg["output"], flush=True)
        print(f"  ({top / f'trial-{t}-perfgate.txt'}: its output)", flush=True)
        if not args.no_asv:
            home = repo.parent / f"home-{t}"
            home.mkdir(exist_ok=True)
            a = run_asv(repo, good, home)
            (top / f"trial-{t}-asv.txt").write_text(str(a["output"]))
            ahit = a["named"] == [truth[0][:8]] if args.steps == 1 else False
            tally["asv"] += ahit
            asv_walls.append(float(str(a["seconds"])))
            line += (f"; asv find named {a['named'] or 'nothing'} {'HIT' if ahit else 'MISS'}, "
                     f"exit {a['rc']}, {a['benchmarks']} benchmarks, {a['seconds']:.0f} s")
            if not a["named"]:
                print(str(a["output"])[-3000:], flush=True)
        print(line + f"; load average {load()}", flush=True)
    n = args.trials
    print(f"tally: perfgate bisect named the slow commit in {tally['perfgate']}/{n} trials "
          f"(probes per trial {probes}, wall {sum(walls):.0f} s total, "
          f"{sum(walls) / max(n, 1):.0f} s per trial)", flush=True)
    if not args.no_asv:
        print(f"tally: asv find named it in {tally['asv']}/{n} trials (wall "
              f"{sum(asv_walls):.0f} s total, {sum(asv_walls) / max(n, 1):.0f} s per trial)")
    print(f"load average at the end {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

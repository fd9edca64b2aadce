"""Demo: what an A/B run of a stable-baselines3 perf test starts, counted while it runs.

A scratch repository holds the perf test an SB3 user writes: a ``SubprocVecEnv`` of
``--workers`` HalfCheetah-v5 envs in a fixture, stepped by a PPO policy. Base and head are
the same code. ``pytest --perfgate --perfgate-ab HEAD~1`` runs under each given Python
(each venv's pytest_perfgate: compare a checkout before and after a change); a sampler
counts the run's processes and sums their resident memory every 0.2 s, and prints the peaks.

    python tools/demo_ab_sides_sb3.py [--python PY ...] [--workers N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

TEST = '''
import numpy as np
import pytest
import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import SubprocVecEnv


@pytest.fixture
def envs():
    envs = SubprocVecEnv([lambda: gym.make("HalfCheetah-v5")] * {n}, start_method="fork")
    yield envs
    envs.close()


def test_ppo_rollout(perfgate, envs):
    model = PPO("MlpPolicy", envs, n_steps=8, batch_size=8, device="cpu", seed=0)
    policy = lambda obs: model.predict(obs, deterministic=True)[0]
    perfgate.measure_vector_env(envs, policy, seed=0)
'''


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def project(root: Path, workers: int) -> None:
    git(root, "init", "-q")
    git(root, "config", "user.email", "demo@example.com")
    git(root, "config", "user.name", "demo")
    (root / "pytest.ini").write_text("[pytest]\nperfgate_results_dir = results\n")
    (root / ".gitignore").write_text("results/\n.perfgate/\n")
    (root / "test_sb3.py").write_text(TEST.format(n=workers))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    git(root, "commit", "--allow-empty", "-qm", "head")


def run(python: str, root: Path) -> tuple[int, int, float, str]:
    """(exit status, peak processes, peak resident MiB, last output line)."""
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--perfgate",
           "--perfgate-ab=HEAD~1", "--perfgate-ab-turns=16", "--perfgate-machine=demo",
           "test_sb3.py"]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT)
        top = psutil.Process(proc.pid)
        peak_n, peak_mb = 0, 0.0
        while proc.poll() is None:
            try:
                tree = [top, *top.children(recursive=True)]
                mb = sum(p.memory_info().rss for p in tree) / 2**20
            except psutil.Error:
                continue
            peak_n, peak_mb = max(peak_n, len(tree)), max(peak_mb, mb)
            time.sleep(0.2)
        log.seek(0)
        lines = log.read().decode(errors="replace").strip().splitlines()
    return proc.returncode, peak_n, peak_mb, lines[-1] if lines else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", nargs="+", default=[sys.executable])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfgate-sb3-") as tmp:
        root = Path(tmp)
        project(root, args.workers)
        for py in args.python:
            code, n, mb, last = run(py, root)
            print(f"{py}: exit {code}, peak {n} processes, peak {mb:.0f} MiB resident; "
                  f"{last}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Demo: the differential profile on gymnasium's MuJoCo env, the way a user gates it.

A scratch repository holds what an RL project writes around gymnasium: ``HalfCheetah-v5``
with an observation wrapper and a reward wrapper (its ``wrappers.py``), gated with
``perfgate.measure_vector_env``. Two cases, each a head commit that slows one of the
project's functions by about 15% of the vector env's step, judged by
``pytest --perfgate --perfgate-ab HEAD~1 --perfgate-profile`` (the profile taken whatever
the verdict; without the flag, after a REGRESSION):

- ``workers``: an async vector env (2 worker processes); a pure-Python loop in the
  observation wrapper's ``center``: the time is spent in the workers, not the test process.
- ``native``: a sync vector env; ``contact_cost`` calls ``mujoco.mj_forward`` again: the
  time is spent in MuJoCo's C code reached through Python.

Prints each run's profile lines as pytest printed them, for docs/profile.md.

    python tools/demo_profile_gymnasium.py [--case workers|native|both]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

WRAPPERS = '''
import gymnasium as gym
import mujoco
import numpy as np


def center(obs):
{center}    return (obs - obs.mean()).astype(np.float32)


def contact_cost(sim):
{contact}    return 5e-4 * float(np.square(np.clip(sim.data.cfrc_ext, -1, 1)).sum())


class Centered(gym.ObservationWrapper):
    def observation(self, obs):
        return center(obs)


class ContactPenalty(gym.Wrapper):
    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        return obs, reward - contact_cost(self.env.unwrapped), term, trunc, info


def make():
    return ContactPenalty(Centered(gym.make("HalfCheetah-v5")))
'''
TEST = '''
import gymnasium as gym
import numpy as np
import pytest

from wrappers import make


@pytest.fixture
def envs():
    envs = gym.vector.{vector}([make] * {n})
    yield envs
    envs.close()


def test_cheetah(perfgate, envs):
    rng = np.random.default_rng(0)
    low, high = envs.action_space.low, envs.action_space.high
    perfgate.measure_vector_env(envs, lambda obs: rng.uniform(low, high).astype(np.float32),
                                seed=0)
'''
CASES = {"workers": ("AsyncVectorEnv", 2, "center"),
         "native": ("SyncVectorEnv", 2, "contact_cost")}


def injected(fn: str, n: int) -> str:
    if fn == "center":
        return f"    for _ in range({n}):\n        pass\n"
    return (f"    for _ in range({n}):\n"
            "        mujoco.mj_forward(sim.model, sim.data)\n")


def calibrate(vector: str, n: int) -> tuple[float, float, float]:
    """The vector env's step, one Python loop pass, one mj_forward (seconds)."""
    import gymnasium as gym
    import mujoco

    envs = getattr(gym.vector, vector)([lambda: gym.make("HalfCheetah-v5")] * n)
    envs.reset(seed=0)
    a = envs.action_space.sample()
    step = min(timeit.repeat(lambda: envs.step(a), number=200, repeat=5)) / 200
    envs.close()
    env = gym.make("HalfCheetah-v5")
    env.reset(seed=0)
    sim: Any = env.unwrapped  # a MujocoEnv: its model and data
    fwd = min(timeit.repeat(lambda: mujoco.mj_forward(sim.model, sim.data), number=200,
                            repeat=5)) / 200
    loop = min(timeit.repeat("for _ in range(1000): pass", number=100, repeat=5)) / 1e5
    env.close()
    return step, loop, fwd


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=d@e", "-c", "user.name=d", *args], cwd=repo,
                   check=True, capture_output=True)


def run_case(case: str, tmp: Path, slow: float) -> None:
    vector, n, fn = CASES[case]
    step, loop, fwd = calibrate(vector, n)
    print(f"{vector} of {n}: step {step * 1e6:.1f} us; a loop pass {loop * 1e9:.1f} ns; "
          f"mj_forward {fwd * 1e6:.1f} us", flush=True)
    per_env = step / n if vector == "SyncVectorEnv" else step  # async: the workers overlap
    repo = tmp / case
    (repo / "perf").mkdir(parents=True)
    (repo / "perf" / "wrappers.py").write_text(WRAPPERS.format(center="", contact=""))
    (repo / "perf" / "test_cheetah.py").write_text(TEST.format(vector=vector, n=n))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    k = max(1, round(slow * per_env / (loop if fn == "center" else fwd)))
    body = injected(fn, k)
    (repo / "perf" / "wrappers.py").write_text(WRAPPERS.format(
        center=body if fn == "center" else "", contact=body if fn != "center" else ""))
    git(repo, "commit", "-qam", f"{fn} slower")
    print(f"== {case}: gym.vector.{vector} of {n} HalfCheetah-v5; head adds to {fn}():\n"
          + body.rstrip(), flush=True)
    report = tmp / f"{case}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--perfgate", "--perfgate-ab=HEAD~1",
         "--perfgate-record=false", "--perfgate-profile", f"--perfgate-json={report}",
         "-p", "no:randomly", "-p", "no:cacheprovider", "test_cheetah.py"],
        cwd=repo / "perf", capture_output=True, text=True, env=env, timeout=1200)
    out = done.stdout.splitlines()
    at = next((i for i, line in enumerate(out) if line.startswith("benchmark ")), None)
    shown = out[at:] if at is not None else out[-40:]
    print(f"exit {done.returncode}")
    print("\n".join(line for line in shown if not line.startswith("=")), flush=True)
    try:
        profile = json.loads(report.read_text())["benchmarks"][0]["result"]["extra"].get(
            "profile", {})
    except (OSError, ValueError, IndexError, KeyError):
        print("(no report)")
        return
    grew = profile.get("grew") or []
    first = grew[0]["function"] if grew else None
    print(f"-> named first: {first} ({'the injected one' if first == fn else 'NOT ' + fn})\n",
          flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=("workers", "native", "both"), default="both")
    ap.add_argument("--slow", type=float, default=0.15, help="the step's share to add")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfgate-profile-gym-") as tmp:
        for case in (("workers", "native") if args.case == "both" else (args.case,)):
            run_case(case, Path(tmp), args.slow)
    return 0


if __name__ == "__main__":
    sys.exit(main())

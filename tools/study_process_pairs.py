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

A change instead of A/A (ring only): ``--change 3%`` makes the head's collector (or, with
``--side learner``, its learner) spend 3% more of its own working time per step, base and
head two commits; ``--truth 4`` first measures the pair's true throughput change outside
the gate (fresh base and head pairs, windows alternated), so the verdicts can be held to it:

    python tools/study_process_pairs.py --workload ring --change 3% --truth 4 --trials 20
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


# A change for the ring workload: each step of one side spends this share of its own
# working time more (a spin on the clock: CPU time, the same size at any clock speed). The
# collector's working time leaves out the time it blocked in push, so +3% is 3% of what the
# collector itself does; the learner's is its whole step (a learner-bound pair rarely waits).
# With --inside the collector's change is spent inside its simulation step instead (the
# env_step phase, most of its work), where a slower simulation would show in the record.
CHANGED_SIDE = '''
import time

from pytest_perfgate.ring import workloads

SHARE = {share!r}
SIDE = {side!r}
LEARNER = {learner!r}
INSIDE = {inside!r}


def _slower(once, ring=None):
    if not SHARE:
        return once

    def step():
        t0, b0 = time.perf_counter_ns(), ring.blocked_ns if ring is not None else 0
        n = once()
        worked = time.perf_counter_ns() - t0 - ((ring.blocked_ns - b0) if ring else 0)
        end = time.perf_counter_ns() + int(SHARE * worked)
        while time.perf_counter_ns() < end:
            pass
        return n

    return step


def _slower_env_step():
    from pytest_perfgate.sim.pool import MujocoPool

    step = MujocoPool.step

    def slower(self, actions):
        t0 = time.perf_counter_ns()
        out = step(self, actions)
        end = time.perf_counter_ns() + int(SHARE * (time.perf_counter_ns() - t0))
        while time.perf_counter_ns() < end:
            pass
        return out

    MujocoPool.step = slower


def collector(ring, rec, **kw):
    if SIDE == "collector" and SHARE and INSIDE:
        _slower_env_step()  # inside the env_step phase, as a slower simulation would be
    once = workloads.humanoid_collector(ring, rec, **kw)
    return _slower(once, ring) if SIDE == "collector" and not INSIDE else once


def learner(ring, rec, **kw):
    once = (sb3_learner if LEARNER == "sb3" else workloads.sac_learner)(ring, rec, **kw)
    return _slower(once) if SIDE == "learner" else once
'''

# a third party's learner on the ring: stable-baselines3's own SAC.train() on its own replay
# buffer, fed with what the ring delivers (no .format here: the code has braces)
SB3_LEARNER = '''

def sb3_learner(ring, rec, batch_size=256, **_):
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import DummyVecEnv

    sp = ring.spec
    n, ow, aw = sp.num_envs, int(np.prod(sp.obs_shape)), int(np.prod(sp.action_shape))

    class Spaces(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (ow,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (aw,), np.float32)

        def reset(self, *, seed=None, options=None):
            return np.zeros(ow, np.float32), {}

        def step(self, action):
            return np.zeros(ow, np.float32), 0.0, False, False, {}

    model = SAC("MlpPolicy", DummyVecEnv([Spaces] * n), batch_size=batch_size,
                buffer_size=64 * n, learning_starts=0, device="cpu", seed=0)
    model.set_logger(configure(None, [""]))
    infos = [{} for _ in range(n)]

    def once():
        waited0 = ring.waited_ns
        with rec.phase("drain"):
            b = ring.pop(max_steps=64, timeout=0.05)
        rec.add("wait_data", ring.waited_ns - waited0)
        if b is None:
            return 0
        steps = b.transitions // n
        obs, nxt = b.obs.reshape(steps, n, ow), b.next_obs.reshape(steps, n, ow)
        act = b.action.reshape(steps, n, aw)
        rew, done = b.reward.reshape(steps, n), b.terminated.reshape(steps, n)
        for k in range(steps):
            model.replay_buffer.add(obs[k], nxt[k], act[k], rew[k], done[k], infos)
        with rec.phase("update"):
            model.train(gradient_steps=1, batch_size=batch_size)
        return b.transitions

    return once
'''

RING_CHANGED = '''
def test_walk(perfgate, ring_pair):
    pair = ring_pair(num_envs=16, capacity=4, threads=(1, 1),
                     collector="changed_side:collector", learner="changed_side:learner",
                     learner_kwargs={learner_kwargs})
    perfgate.measure_source(pair, transitions=16, name="ring_walk")
'''
LEARNER_KWARGS = {"ours": {"hidden": 256, "batch_size": 512}, "sb3": {"batch_size": 256}}


def side_module(share: float, side: str, learner: str, inside: bool = False) -> str:
    """The changed side's module text: base (share 0) or head; ``inside``: the collector's
    change is spent in its simulation step (phase env_step), else after its whole step."""
    return (CHANGED_SIDE.format(share=share, side=side, learner=learner, inside=inside)
            + SB3_LEARNER)


def _share(text: str) -> float:
    try:
        v = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a share such as 3% or 0.03") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a share from 0% to under 100%")
    return v


def truth(repo: Path, share: float, side: str, learner: str, pairs: int,
          inside: bool = False, turns: int = 8, window_s: float = 1.0) -> str:
    """The pair's true change, outside the gate: a base pair and a head pair alive side by
    side (each parked while the other runs), their windows alternated; the throughput ratio
    (head/base, env-steps per second from the windows' own counts) per turn, and its median
    over ``pairs`` fresh pairs of pairs (the spread between pairs is part of the truth)."""
    sys.path.insert(0, str(repo))
    (repo / "truth_base.py").write_text(side_module(0.0, side, learner, inside))
    (repo / "truth_head.py").write_text(side_module(share, side, learner, inside))
    from pytest_perfgate.ring.pair import RingPair
    from pytest_perfgate.ring.workloads import humanoid_spec

    def pair(module: str) -> RingPair:
        return RingPair(humanoid_spec(16, 4), threads=(1, 1), collector=f"{module}:collector",
                        learner=f"{module}:learner", learner_kwargs=LEARNER_KWARGS[learner])

    medians, every = [], []
    for k in range(pairs):
        with pair("truth_base") as base, pair("truth_head") as head:
            for p in (base, head):
                p.run_window(3.0)  # warm-up
            ratios = []
            for t in range(turns):
                order = (base, head) if (t + k) % 2 == 0 else (head, base)
                rate = {id(p): (w := p.run_window(window_s)).transitions / w.wall_s
                        for p in order}
                ratios.append(rate[id(head)] / rate[id(base)])
        medians.append(statistics.median(ratios))
        every += ratios
    return (f"truth ({side} +{share:.1%}, {window_s:g} s windows): head/base throughput, "
            f"median over {len(every)} "
            f"interleaved turns {statistics.median(every):.3f}; per pair of pairs "
            + ", ".join(f"{m:.3f}" for m in medians))


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def trial(repo: Path, i: int, threshold: str, base: str = "HEAD",
          extra: tuple[str, ...] = ()) -> dict[str, Any]:
    report = repo / f"trial-{i}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    env["PERFGATE_PROFILE"] = "off"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--perfgate", "--perfgate-machine=study", f"--perfgate-ab={base}",
                    f"--perfgate-threshold={threshold}", "--perfgate-record=false",
                    f"--perfgate-json={report}", *extra, "test_walk.py"], cwd=repo, env=env,
                   capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    try:
        (entry,) = json.loads(report.read_text())["benchmarks"]
    except (OSError, ValueError):
        return {"verdict": "ERROR", "ratio": None, "ci": None, "wall_s": wall}
    pairs = entry.get("pairs") or entry.get("result", {}).get("extra", {}).get("ab_pairs") or [
        {"ratio": entry.get("ratio"), "ci": entry.get("ci"), "outcome": entry["verdict"]}]
    return {"verdict": entry["verdict"], "ratio": entry.get("ratio"), "ci": entry.get("ci"),
            "first_pair": pairs[0]["outcome"], "pairs": pairs, "wall_s": wall,
            "message": entry.get("message")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="mujoco")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--threshold", default="2%", help="the A/B mode's default")
    ap.add_argument("--out", type=Path, default=None, help="write every trial as JSON")
    ap.add_argument("--change", type=_share, default=None, metavar="SHARE",
                    help="ring only: the head spends SHARE (e.g. 3%%) more of one side's "
                         "working time per step; base and head are then two commits")
    ap.add_argument("--side", choices=("collector", "learner"), default="collector",
                    help="the side --change slows")
    ap.add_argument("--inside", action="store_true",
                    help="with --change on the collector: spend it inside the simulation "
                         "step (phase env_step) rather than after the whole step")
    ap.add_argument("--pytest-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for each trial's pytest (repeat it), e.g. "
                         "--pytest-arg=--perfgate-load-limit=16")
    ap.add_argument("--truth-window", type=float, default=1.0, metavar="S",
                    help="the truth's window, seconds (the A/B mode's turns are 0.1 s)")
    ap.add_argument("--learner", choices=sorted(LEARNER_KWARGS), default="ours",
                    help="with --change: the learner, ours (sac_learner) or stable-baselines3's "
                         "SAC.train()")
    ap.add_argument("--truth", type=int, default=0, metavar="PAIRS",
                    help="with --change: first measure the pair's true change outside the "
                         "gate, PAIRS fresh base/head pairs of pairs, windows interleaved")
    args = ap.parse_args()
    if args.change is not None and args.workload != "ring":
        ap.error(f"--change {args.change:.1%}: only the ring workload has a side to change")
    with tempfile.TemporaryDirectory(prefix="perfgate-study-pairs-") as tmp:
        repo = Path(tmp)
        git(repo, "init", "-q")
        git(repo, "config", "user.email", "study@example.com")
        git(repo, "config", "user.name", "study")
        (repo / "pytest.ini").write_text("[pytest]\nperfgate_results_dir = results\n")
        (repo / ".gitignore").write_text("results/\n*.json\n")
        changed = args.change is not None
        (repo / "test_walk.py").write_text(
            RING_CHANGED.replace("{learner_kwargs}", repr(LEARNER_KWARGS[args.learner]))
            if changed else WORKLOADS[args.workload])
        if changed:
            (repo / "changed_side.py").write_text(
                side_module(0.0, args.side, args.learner, args.inside))
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "the code")
        if changed:
            if args.truth:
                print(truth(repo, args.change, args.side, args.learner, args.truth, args.inside,
                            turns=max(8, round(8 / args.truth_window)),
                            window_s=args.truth_window),
                      flush=True)
            (repo / "changed_side.py").write_text(
                side_module(args.change, args.side, args.learner, args.inside))
            git(repo, "commit", "-qam", f"the {args.side} does {args.change:.1%} more",
                "--allow-empty")
        if args.trials == 0:
            return 0  # the truth alone
        trials = []
        for i in range(args.trials):
            t = trial(repo, i, args.threshold, "HEAD~1" if changed else "HEAD",
                      tuple(args.pytest_arg))
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
    what = (f"{args.side} +{args.change:.1%} ({args.learner} learner)"
            if args.change is not None else "A/A")
    print(f"\n{args.workload}, {len(trials)} {what} trials (fresh processes each), threshold "
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

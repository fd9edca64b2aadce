"""Sized MujocoPool vs the alternatives, ratios measured interleaved in one run.

    python tools/bench_pool.py [--envs 1024] [--turns 30] [--memory-envs 4096]

Every contender steps the same held state (a contact-rich state settled from 64 distinct
trajectories, tiled) once per call, so each call does identical physics; the contenders
run in short turns, rotated, and each ratio is the median over turns of the paired time
ratio (the machine's speed drifts 1.5x over seconds, pairing cancels it: docs/design.md §1).
All contenders are first checked to produce bit-identical states from the held state.
The pool runs with a never-terminating hook here so that it does the same work as the raw
loops; its reward/reset phases are then just the hook call.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import mujoco
import mujoco.rollout
import numpy as np
from mujoco.batch import Batch

from pytest_perfgate.core.load import LoadSample, ProcStatProbe
from pytest_perfgate.sim.models import humanoid_xml_path, load_model
from pytest_perfgate.sim.pool import MujocoPool, plan_threads
from pytest_perfgate.sim.thread_sweep import interleave, median_ratio, settled_state
from pytest_perfgate.sim.threads import OversubscriptionWarning

INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION
FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS


class NeverDone:
    """Reward hook that never terminates: the pool then does the raw loops' work."""

    def __init__(self, n):
        self.reward, self.done = np.zeros(n), np.zeros(n, bool)

    def __call__(self, pool, obs, actions):
        return self.reward, self.done


class RawBatch:
    """What a user writes on mujoco.batch directly: write ctrl, step, gather obs."""

    def __init__(self, model, n, nthread, held):
        self.b = Batch(model, n, nthread)
        self.held, self.ctrl = held, self.b.bind("ctrl")
        self.qpos, self.qvel = self.b.bind("qpos"), self.b.bind("qvel")
        self.obs = np.zeros((n, model.nq + model.nv))

    def step(self, actions):
        self.b.state[...] = self.held
        self.ctrl[...] = actions
        self.b.step()
        self.obs[:, :self.qpos.shape[1]] = self.qpos
        self.obs[:, self.qpos.shape[1]:] = self.qvel
        return self.obs


class ThreadPoolEnvs:
    """A Python thread pool over one MjData per env (mj_step releases the GIL)."""

    def __init__(self, model, n, nthread, held):
        self.m, self.held, self.nq = model, held, model.nq
        self.datas = [mujoco.MjData(model) for _ in range(n)]
        self.obs = np.zeros((n, model.nq + model.nv))
        self.chunks = np.array_split(np.arange(n), nthread)
        self.ex = ThreadPoolExecutor(nthread)

    def _run(self, ids, actions):
        m, nq, obs, held = self.m, self.nq, self.obs, self.held
        for i in ids:
            d = self.datas[i]
            mujoco.mj_setState(m, d, held[i], INTEGRATION)
            d.ctrl[:] = actions[i]
            mujoco.mj_step(m, d)
            obs[i, :nq] = d.qpos
            obs[i, nq:] = d.qvel

    def step(self, actions):
        list(self.ex.map(lambda ids: self._run(ids, actions), self.chunks))
        return self.obs


class OpenLoopRollout:
    """mujoco.rollout.Rollout, stateless: the held state is its initial state each call,
    and the controls are given up front (open loop), so step() ignores its argument."""

    def __init__(self, model, n, nthread, held, actions):
        self.r = mujoco.rollout.Rollout(nthread=nthread)
        self.m, self.models = model, [model] * n  # skip_checks wants one model per rollout
        self.datas = [mujoco.MjData(model) for _ in range(nthread)]
        d = mujoco.MjData(model)
        full = np.zeros((n, mujoco.mj_stateSize(model, FULL)))
        self.warm = np.zeros((n, model.nv))
        for i in range(n):
            mujoco.mj_setState(model, d, held[i], INTEGRATION)
            mujoco.mj_getState(model, d, full[i], FULL)
            self.warm[i] = d.qacc_warmstart
        self.init, self.control = full, actions[:, None, :].copy()
        self.state = np.zeros((n, 1, full.shape[1]))
        self.sens = np.zeros((n, 1, model.nsensordata))

    def step(self, actions):
        self.r.rollout(self.models, self.datas, self.init, self.control, nstep=1,
                       initial_warmstart=self.warm, state=self.state, sensordata=self.sens,
                       skip_checks=True)
        return self.state[:, 0, 1:1 + self.m.nq + self.m.nv]  # after the time slot


RSS_SNIPPET = """
import sys, mujoco
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) * 1024
from pytest_perfgate.core.load import LoadSample, ProcStatProbe
from pytest_perfgate.sim.models import humanoid_xml_path, load_model
m = load_model(humanoid_xml_path()); n = int(sys.argv[2]); kind = sys.argv[1]
mujoco.mj_step(m, mujoco.MjData(m))  # warm the library before the baseline
base = rss()
if kind == 'pool':
    from pytest_perfgate.sim.pool import MujocoPool
    p = MujocoPool(m, n); p.step(); p.step()
    print(rss() - base, p.bytes_per_env())
else:
    ds = [mujoco.MjData(m) for _ in range(n)]
    for d in ds: mujoco.mj_step(m, d)
    print(rss() - base, 0)
"""


def rss_per_env(kind: str, n: int) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", RSS_SNIPPET, kind, str(n)], capture_output=True,
                         text=True, timeout=300, check=True).stdout.split()
    return int(out[0]) / n, int(out[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, default=1024)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--settle", type=int, default=300, help="substeps to settle (3 ms each)")
    ap.add_argument("--memory-envs", type=int, default=4096)
    args = ap.parse_args()
    n = args.envs
    model = load_model(humanoid_xml_path())
    rule = plan_threads(n)
    t = rule.nthread
    held = settled_state(model, n, args.settle)
    lo, hi = model.actuator_ctrlrange.T
    actions = np.random.default_rng(1).uniform(lo, hi, (n, model.nu))

    pools = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscriptionWarning)
        for k in (1, 2, 4):
            pools[k] = MujocoPool(model, n, threads=None if k == 1 else k * t,
                                  reward_fn=NeverDone(n))
            pools[k].hold(held)
    raw = RawBatch(model, n, t, held)
    tp = ThreadPoolEnvs(model, n, t, held)
    ro = OpenLoopRollout(model, n, t, held, actions)
    contenders = {"pool": lambda: pools[1].step(actions), "raw": lambda: raw.step(actions),
                  "threads": lambda: tp.step(actions), "rollout": lambda: ro.step(actions),
                  "pool2x": lambda: pools[2].step(actions),
                  "pool4x": lambda: pools[4].step(actions)}
    ref = pools[1].step(actions)[0].copy()

    def first(out):
        return out[0] if isinstance(out, tuple) else out

    same = {k: bool(np.array_equal(first(f()), ref)) for k, f in contenders.items()}
    probe = ProcStatProbe()
    before, c0, w0 = probe.sample(), time.process_time(), time.perf_counter()
    s = interleave(contenders, args.turns, per_turn=1)
    after, ours = probe.sample(), (time.process_time() - c0) / (time.perf_counter() - w0)
    busy = LoadSample.busy_cores(before, after) if before and after else None
    ms = {k: statistics.median(x[0] for x in v) * 1e3 for k, v in s.items()}
    cores = {k: statistics.median(x[1] for x in v) for k, v in s.items()}

    def line(label, other, note=""):
        r = median_ratio(s[other], s["pool"])  # time(other)/time(pool): >1 = pool faster
        paired = zip(s[other], s["pool"], strict=True)
        q = statistics.quantiles([o[0] / p[0] for o, p in paired], n=4)
        print(f"| {label} | {ms['pool']:.1f} ({cores['pool']:.2f}) | {ms[other]:.1f} "
              f"({cores[other]:.2f}) | {r:.3f}x [{q[0]:.3f}-{q[2]:.3f}] | {note} |")

    print(f"bench_pool: gymnasium humanoid, {n} envs, 1 substep per call, held settled state "
          f"({args.settle} substeps), usable CPUs {len(rule.usable)}, sized pool = {t} threads "
          f"({rule.reason}); {args.turns} turns interleaved, rotated; medians; mujoco "
          f"{mujoco.__version__}")
    if busy is not None:
        print(f"whole machine during the run: {busy:.2f} busy cores, {ours:.2f} of them ours "
              f"({max(0.0, busy - ours):.2f} cores of outside load)")
    print("identical states from the held state: "
          + ", ".join(f"{k}={'yes' if v else 'NO'}" for k, v in same.items()))
    print("| comparison | pool ms (cores) | other ms (cores) | pool speed / other [IQR] | note |")
    print("|---|---|---|---|---|")
    line(f"sized pool vs raw mujoco.batch, {t} threads", "raw", "target >= 0.95x")
    line(f"sized pool vs Python thread pool of {t} over per-env MjData", "threads",
         "expect >= 1.4x")
    line(f"sized pool vs mujoco.rollout open loop, nthread={t}", "rollout", "report")
    line(f"sized pool ({t}) vs 2x oversubscribed ({2 * t} threads)", "pool2x", "report")
    line(f"sized pool ({t}) vs 4x oversubscribed ({4 * t} threads)", "pool4x", "report")
    for p in pools.values():
        p.close()
    tp.ex.shutdown()
    mn = args.memory_envs
    rss_pool, est = rss_per_env("pool", mn)
    rss_data, _ = rss_per_env("mjdata", mn)
    print(f"memory, {mn} humanoids: pool RSS +{rss_pool * mn / 2**20:.1f} MiB "
          f"({rss_pool:.0f} B/env; bytes_per_env() estimate {est} B/env, counts each thread's "
          f"MjData arena as allocated); one MjData per env RSS +{rss_data * mn / 2**20:.0f} MiB "
          f"({rss_data:.0f} B/env): {rss_data / rss_pool:.0f}x less with the pool")


if __name__ == "__main__":
    main()

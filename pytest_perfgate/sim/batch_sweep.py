"""Batch-size sweep: env-steps/s over num_envs, one in-process pool vs N worker processes.

Throughput grows with the batch until the physics saturates the CPUs or memory bandwidth,
and one placed worker per NUMA node measured 1.74x (2048 envs) and 1.86x (8192 envs) the
single pool on a whole machine (docs/design.md §7). Here every configuration (a
:class:`~pytest_perfgate.sim.pool.MujocoPool` sized by the rule, or a
:class:`~pytest_perfgate.placement.workers.WorkerGroup` of N pinned workers, each stepping
num_envs/N) is alive at once and runs a short window per turn in the sweep's rotation
(:func:`.sweep.rotation`), because back-to-back measurements compare the machine's drift,
not the configurations (§1); ratios are medians of paired per-turn ratios. Everything is
checked before anything is started: bad sizes, worker counts that do not divide a batch or
outnumber the CPUs, and a sweep that would not fit in memory.

    perfgate sweep --model humanoid --envs 256..8192 --workers 2
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.measure import completed_window
from pytest_perfgate.core.progress import NULL_PROGRESS, Progress
from pytest_perfgate.core.window import RawWindow, WindowSource
from pytest_perfgate.sim.batch_plan import BatchConfig
from pytest_perfgate.sim.batch_report import BatchRow, BatchSweepResult
from pytest_perfgate.sim.thread_sweep import rotation, settled_state


def held_pool(model: str, num_envs: int, frame_skip: int = 1, settle: int = 300,
              seed: int = 0, keyframe: int | str | None = None
              ) -> tuple[Any, Callable[[], object]]:
    """A pool sized by the rule to this process's CPUs, held on the settled state every
    configuration steps (same seed: the same rows), and its step with fixed actions."""
    import numpy as np

    from pytest_perfgate.sim.pool import MujocoPool

    pool = MujocoPool(model, num_envs, frame_skip=frame_skip, seed=seed, keyframe=keyframe)
    try:
        pool.hold(settled_state(pool.model, num_envs, settle, seed=seed,
                                keyframe=pool.keyframe_id))
        m = pool.model
        lo, hi = m.actuator_ctrlrange.T if m.nu else (0.0, 0.0)
        actions = np.random.default_rng(seed).uniform(lo, hi, (num_envs, m.nu))
    except BaseException:
        pool.close()
        raise
    return pool, lambda: pool.step(actions)


def make_worker_step(model: str, num_envs: int, **kw: Any) -> Callable[[], object]:
    """A worker's workload (the ``WorkerSpec`` factory, imported after placement)."""
    return held_pool(model, num_envs, **kw)[1]


PER_ENV_WHY = ("MjData's per-simulation buffer, which bounds what mujoco.batch keeps per env, "
               "plus the pool's own arrays")


def per_env_bytes(model: Any) -> int:
    """An upper bound on one env's memory in a held pool (see :data:`PER_ENV_WHY`)."""
    import mujoco

    m = model
    nstate = mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    own = 8 * (2 * (m.nq + m.nv) + m.nu + 2 * nstate)  # obs, actions, held + settled state
    return int(mujoco.MjData(m).nbuffer) + own


def check(model: Any, envs: Sequence[int], workers: Sequence[int], copies: int = 1
          ) -> list[BatchConfig]:
    """Every configuration of the sweep, or PlanError naming the value and the fix, before
    anything is started (``model`` is loaded to size its envs). ``copies``: pools per
    configuration (the thread sweep holds one per thread count and pinning)."""
    from pytest_perfgate.placement.cpus import usable_cpus
    from pytest_perfgate.sim.batch_plan import available_memory, check_memory, plan, process_rss
    from pytest_perfgate.sim.models import load_model

    configs = plan(envs, workers, len(usable_cpus()))
    check_memory(configs * copies, per_env_bytes(load_model(model)), process_rss(),
                 available_memory(), PER_ENV_WHY)
    return configs


MIN_STEPS = 4  # a window is at least this many of its source's steps long


def interleave_windows(sources: Mapping[str, WindowSource], turns: int, turn_s: float,
                       progress: Progress = NULL_PROGRESS) -> dict[str, list[RawWindow]]:
    """One window per source per turn, in rotation, after one warm-up window each.

    A window lasts ``turn_s``. A worker group counts only the steps completed inside its
    window, and with one or two of them the count would be mostly rounding, so its windows
    last at least :data:`MIN_STEPS` of its steps (timed in its warm-up). An in-process loop
    times whole calls exactly and needs no such margin."""
    length: dict[str, float] = {}
    for name, src in sources.items():
        progress.warmup_started(name)
        w = completed_window(src, turn_s)
        step_s = w.wall_s * w.streams / w.calls if w.calls else 0.0
        exact = isinstance(src, LoopSource)
        length[name] = turn_s if exact else max(turn_s, MIN_STEPS * step_s)
        progress.warmup_ended(True, w.wall_s, name)
    out: dict[str, list[RawWindow]] = {n: [] for n in sources}
    for t, name in rotation(list(sources), turns):
        w = completed_window(sources[name], length[name])
        out[name].append(w)
        progress.window_done(t + 1, turns, w.transitions / w.wall_s, name)
    return out


def paired_ratio(a: Sequence[RawWindow], b: Sequence[RawWindow]) -> float:
    """Median over turns of rate(a)/rate(b): both saw the same machine in each turn."""
    return statistics.median((x.transitions / x.wall_s) / (y.transitions / y.wall_s)
                             for x, y in zip(a, b, strict=True))


def _row(cfg: BatchConfig, ws: Sequence[RawWindow], threads: int,
         same_pool: Sequence[RawWindow] | None, first: Sequence[RawWindow]) -> BatchRow:
    rates = [w.transitions / w.wall_s for w in ws]
    ms = [w.wall_s * w.streams / w.calls * 1e3 for w in ws if w.calls]
    return BatchRow(cfg.num_envs, cfg.workers, cfg.envs_per_worker, threads,
                    statistics.median(rates), statistics.median(ms) if ms else float("nan"),
                    statistics.median(w.cpu_s / w.wall_s for w in ws),
                    paired_ratio(ws, same_pool) if same_pool is not None else None,
                    paired_ratio(ws, first))


def run_batch_sweep(model: str, configs: Sequence[BatchConfig], *, frame_skip: int = 1,
                    turns: int = 20, turn_s: float = 0.25, settle_substeps: int = 300,
                    seed: int = 0, keyframe: int | str | None = None,
                    progress: Progress = NULL_PROGRESS) -> BatchSweepResult:
    """Start every configuration (checked by :func:`.batch_plan.check`), interleave their
    windows, and close them all, also on failure."""
    import contextlib

    from pytest_perfgate.placement.cpus import usable_cpus
    from pytest_perfgate.placement.launchers import split_slices
    from pytest_perfgate.placement.spec import WorkerSpec
    from pytest_perfgate.placement.workers import WorkerGroup
    from pytest_perfgate.sim.thread_sweep import pin_order

    usable = pin_order(usable_cpus())
    kw: dict[str, Any] = {"frame_skip": frame_skip, "settle": settle_substeps, "seed": seed,
                          "keyframe": keyframe}
    sources: dict[str, WindowSource] = {}
    threads: dict[str, int] = {}
    meta: dict[str, Any] = {}
    progress.started("batch sweep")
    with contextlib.ExitStack() as stack:
        stack.push(_stopped(progress, "batch sweep"))
        for cfg in configs:
            if cfg.workers == 0:
                pool, step = held_pool(model, cfg.num_envs, **kw)
                stack.callback(pool.close)
                sources[cfg.label] = LoopSource(step, cfg.num_envs)
                threads[cfg.label] = pool.plan.nthread
                meta = meta or pool.metadata()
                continue
            slices = split_slices(usable, cfg.workers)
            specs = [WorkerSpec(f"{__name__}:make_worker_step", s, None, "bind", len(s),
                                cfg.envs_per_worker,
                                {**kw, "model": model, "num_envs": cfg.envs_per_worker})
                     for s in slices]
            group = stack.enter_context(WorkerGroup(specs))
            sources[cfg.label] = group
            threads[cfg.label] = min(len(s) for s in slices)
        windows = interleave_windows(sources, turns, turn_s, progress)
    pools = {c.num_envs: windows[c.label] for c in configs if c.workers == 0}
    first = windows[configs[0].label]
    rows = tuple(_row(c, windows[c.label], threads[c.label], pools.get(c.num_envs), first)
                 for c in configs)
    result = BatchSweepResult(rows, frame_skip, turns, turn_s, meta)
    progress.finished("batch sweep", f"{len(rows)} configurations x {turns} turns")
    return result


def _stopped(progress: Progress, name: str) -> Callable[..., bool]:
    """An exit callback that ends the status line with the reason the sweep stopped."""
    def on_exit(kind: type[BaseException] | None, *_: object) -> bool:
        if kind is not None:
            progress.finished(name, f"stopped by {kind.__name__}")
        return False
    return on_exit

"""MujocoPool: N copies of a model stepped by mujoco.batch, sized to the CPUs we may use.

Why a pool of our own rather than raw Batch: a default of 2 x cpu_count threads lost 11-16%,
and Batch's own default (nthread=0) ignores the affinity mask (docs/design.md §7). The pool
applies one sizing rule (:mod:`.threads`), optionally pins its threads, times every part of
an env step as a named phase (so reports show where the time goes and how many cores each
part used), and can hold its state so a benchmark steps identical physics on every call
(otherwise the cost drifts 2x as humanoids fall, docs/design.md §1 and §7). About 300 lines:
one class (the env step and its state) and its default reward hook; thread sizing lives in
:mod:`.threads`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from pytest_perfgate.core.timing import phase
from pytest_perfgate.sim.models import load_model, model_fingerprint, require_mujoco
from pytest_perfgate.sim.threads import (
    plan_threads,
    positive_int,
    thread_ids,
)

# reward_fn(pool, obs, actions) -> (reward (n,), terminated (n,) bool)
RewardFn = Callable[["MujocoPool", Any, Any], "tuple[Any, Any]"]


class MujocoPool:
    """num_envs simulations of one model on a mujoco.batch.Batch, stepped like a vector env.

    ``step(actions)`` returns ``(obs, reward, terminated)``; ``obs`` is a preallocated buffer
    that the next step overwrites (copy it to keep it). Done envs are reset inside the step
    and their rows of ``obs`` show the reset state, as vector envs' autoreset does.
    """

    def __init__(self, model: Any, num_envs: int, *, cpu_ids: object = None,
                 threads: int | str | None = None, frame_skip: int = 1,
                 obs: Sequence[str] = ("qpos", "qvel"), reward_fn: RewardFn | None = None,
                 seed: int = 0, hold_state: bool = False, keyframe: int | str | None = None,
                 reset_noise: float = 0.0) -> None:
        require_mujoco()
        import mujoco.batch
        import numpy as np

        self.frame_skip = positive_int("frame_skip", frame_skip,
                                        "pass the number of physics substeps per env step, >= 1")
        self.plan = plan_threads(num_envs, cpu_ids, threads)
        self.num_envs = num_envs
        self._source = model
        self.model = load_model(model)
        self.obs_fields = self._check_obs(obs, mujoco.batch.DATA_FIELDS)
        self.keyframe_id = self._keyframe(keyframe)
        self.reset_noise = float(reset_noise)
        self._rng = np.random.default_rng(seed)
        self.reward_fn: RewardFn = reward_fn if reward_fn is not None else FallDetector(self)
        self.worker_tids: tuple[int, ...] = ()
        self._batch: Any = self._make_batch(mujoco.batch.Batch)
        b = self._batch
        self._state, self.ctrl, self.qpos, self.qvel = (b.state, b.bind("ctrl"), b.bind("qpos"),
                                                        b.bind("qvel"))
        self._views = [b.bind(f) for f in self.obs_fields]
        widths = [int(np.prod(v.shape[1:])) for v in self._views]
        self._slices = [slice(sum(widths[:i]), sum(widths[:i + 1])) for i in range(len(widths))]
        self._obs = np.zeros((num_envs, sum(widths)), np.float64)
        self._held: Any = None
        self._fingerprint: dict[str, Any] | None = None
        self.steps = 0
        self.reset()
        if hold_state:
            self.hold()

    # construction -------------------------------------------------------------------
    def _check_obs(self, obs: Sequence[str], fields: frozenset[str]) -> tuple[str, ...]:
        names = (obs,) if isinstance(obs, str) else tuple(obs)
        bad = [n for n in names if n not in fields]
        if bad or not names:
            raise ValueError(f"obs field {bad[0] if bad else None!r} is not an MjData field "
                             "mujoco.batch can bind; use e.g. ('qpos', 'qvel', 'sensordata')")
        return names

    def _keyframe(self, keyframe: int | str | None) -> int:
        if keyframe is None:
            return -1
        if isinstance(keyframe, str):
            names = [self.model.key(i).name for i in range(self.model.nkey)]
            if keyframe not in names:
                raise ValueError(f"keyframe={keyframe!r} is not in the model (keyframes: "
                                 f"{names or 'none'}); pass one of them or None")
            return names.index(keyframe)
        if isinstance(keyframe, bool) or not 0 <= keyframe < self.model.nkey:
            raise ValueError(f"keyframe={keyframe!r}: the model has {self.model.nkey} "
                             "keyframes; pass an index below that, a name, or None")
        return keyframe

    def _make_batch(self, batch_cls: Any) -> Any:
        """Build the Batch; pinned pools build it on a pinned caller (threads inherit it)."""
        from pytest_perfgate.placement import cpus

        before = thread_ids()
        if self.plan.cpu_ids is None:
            batch = batch_cls(self.model, self.num_envs, self.plan.nthread)
        else:
            saved = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
            if saved is None or not cpus.set_affinity(self.plan.cpu_ids):
                raise RuntimeError(f"cannot pin the pool to CPUs "
                                   f"{cpus.format_cpus(self.plan.cpu_ids)} on this platform; "
                                   "pass cpu_ids=None to run unpinned")
            try:
                batch = batch_cls(self.model, self.num_envs, self.plan.nthread)
            finally:
                os.sched_setaffinity(0, saved)
        self.worker_tids = tuple(sorted(thread_ids() - before))
        return batch

    # the env step -------------------------------------------------------------------
    def step(self, actions: Any = None) -> tuple[Any, Any, Any]:
        """Write actions, advance frame_skip substeps, observe, score, reset the done envs."""
        import numpy as np

        b = self._live()
        if self._held is not None:
            with phase("hold"):
                self._state[...] = self._held
        with phase("act"):
            if actions is not None:
                self._check_actions(actions)
                self.ctrl[...] = actions
        with phase("physics"):
            if self.plan.cpu_ids is None:
                b.step(nstep=self.frame_skip)
            else:
                self._step_pinned(b)
        with phase("observe"):
            self._gather(None)
        with phase("reward"):
            reward, terminated = self.reward_fn(self, self._obs, actions)
        with phase("reset"):
            done = np.flatnonzero(terminated)
            if done.size:
                self._reset_ids(done)
                self._gather(done)
        self.steps += 1
        return self._obs, reward, terminated

    def _step_pinned(self, b: Any) -> None:
        # Batch runs one share of the work on the caller's thread: pin it for the call too.
        # A caller already pinned to the same CPUs (a pinned collector) pays nothing; any
        # other caller migrates twice per step, which only tiny models notice.
        saved = os.sched_getaffinity(0)
        want = set(self.plan.cpu_ids or ())
        if saved == want:
            b.step(nstep=self.frame_skip)
            return
        os.sched_setaffinity(0, want)
        try:
            b.step(nstep=self.frame_skip)
        finally:
            os.sched_setaffinity(0, saved)

    def _check_actions(self, actions: Any) -> None:
        import numpy as np

        want = (self.num_envs, self.model.nu)
        if not isinstance(actions, np.ndarray):
            raise TypeError(f"actions of type {type(actions).__name__}: pass a numpy float "
                            f"array of shape {want} (tensor.numpy() for a CPU tensor)")
        if actions.shape != want:
            raise ValueError(f"actions of shape {actions.shape}: the pool needs {want} "
                             f"(num_envs={self.num_envs}, nu={self.model.nu})")
        if actions.dtype.kind != "f":
            raise TypeError(f"actions of dtype {actions.dtype}: pass float32 or float64 "
                            "(integer or bool controls are almost always a bug)")

    def _gather(self, ids: Any) -> None:
        for view, sl in zip(self._views, self._slices, strict=True):
            flat = view.reshape(self.num_envs, -1)
            if ids is None:
                self._obs[:, sl] = flat
            else:
                self._obs[ids, sl] = flat[ids]

    def _reset_ids(self, ids: Any) -> None:
        mujoco = require_mujoco()
        b = self._live()
        if self.reset_noise <= 0:
            b.reset(ids, self.keyframe_id)
            return
        b.reset(ids, self.keyframe_id, stage=mujoco.mjtStage.mjSTAGE_NONE)
        s = self.reset_noise
        self.qpos[ids] += self._rng.uniform(-s, s, (len(ids), self.model.nq))
        self.qvel[ids] += self._rng.uniform(-s, s, (len(ids), self.model.nv))
        b.forward(ids)

    # state --------------------------------------------------------------------------
    def reset(self) -> Any:
        """Reset every env (keyframe, then noise if configured); returns the obs buffer."""
        import numpy as np

        self._reset_ids(np.arange(self.num_envs, dtype=np.int32))
        self._gather(None)
        return self._obs

    def snapshot(self) -> Any:
        """A copy of every env's integration state (qpos, qvel, act, warm start, ctrl...)."""
        return self._live().state.copy()

    def _check_snapshot(self, snapshot: Any) -> Any:
        if getattr(snapshot, "shape", None) != self._state.shape:
            raise ValueError(f"snapshot of shape {getattr(snapshot, 'shape', None)}: expected "
                             f"{self._state.shape} from this pool's snapshot()")
        return snapshot

    def restore(self, snapshot: Any) -> None:
        """Put back a snapshot(); derived obs fields (sensordata...) refresh at the next step."""
        self._state[...] = self._check_snapshot(snapshot)
        self._gather(None)

    def hold(self, snapshot: Any = None) -> None:
        """Start every step from ``snapshot`` (default: now), so each call costs the same."""
        self._held = self.snapshot() if snapshot is None else self._check_snapshot(snapshot).copy()

    def release(self) -> None:
        """Stop holding: steps continue from wherever the state is."""
        self._held = None

    # reporting ----------------------------------------------------------------------
    def bytes_per_env(self) -> int:
        """Memory one env costs: its state row, bound outputs and obs row, plus its share of
        the per-thread MjData (Batch keeps one MjData per thread, not per env)."""
        import numpy as np

        b = self._live()
        row = b.state.itemsize * b.nstate + self._obs.itemsize * self._obs.shape[1] + 9
        row += sum(v.nbytes // self.num_envs for v in self._views
                   if not np.shares_memory(v, b.state))  # bound outputs: copied out per call
        per_thread = self.model.nbuffer + self.model.narena
        return int(row + self.plan.nthread * per_thread / self.num_envs)

    def metadata(self) -> dict[str, Any]:
        """What a recorded result needs to be compared fairly: sizing, model, versions."""
        from pytest_perfgate.placement.cpus import format_cpus

        meta = {
            "num_envs": self.num_envs, "threads": self.plan.nthread,
            "thread_rule": self.plan.reason,
            "pinned_cpus": None if self.plan.cpu_ids is None else format_cpus(self.plan.cpu_ids),
            "usable_cpus": format_cpus(self.plan.usable),
            "oversubscribed": self.plan.oversubscribed, "frame_skip": self.frame_skip,
            "obs": list(self.obs_fields), "obs_dim": int(self._obs.shape[1]),
            "hold_state": self._held is not None, "bytes_per_env": self.bytes_per_env(),
        }
        if self._fingerprint is None:  # compiling and hashing a big scene costs ~0.1 s
            self._fingerprint = model_fingerprint(self._source, self.model)
        meta.update(self._fingerprint)
        return meta

    # lifecycle ----------------------------------------------------------------------
    def _live(self) -> Any:
        if self._batch is None:
            raise RuntimeError("this MujocoPool is closed; create a new one")
        return self._batch

    @property
    def batch(self) -> Any:
        """The underlying mujoco.batch.Batch, for bind()/expand() beyond what the pool does."""
        return self._live()

    def close(self) -> None:
        """Drop the Batch (its threads end with it); safe to call twice."""
        self._batch = None
        self._views = []
        self._held = None

    def __enter__(self) -> MujocoPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._batch is None else f"threads={self.plan.nthread}"
        return f"<MujocoPool num_envs={self.num_envs} {state} frame_skip={self.frame_skip}>"


class FallDetector:
    """Default reward hook: alive bonus 1.0; terminated when a free root falls below 70% of
    its start height (1.4 m -> 0.98 m for gymnasium's humanoid, whose rule is z < 1.0).
    Models without a free root joint never terminate and earn 0: a cheap, honest default.
    """

    def __init__(self, pool: MujocoPool) -> None:
        import numpy as np

        m = pool.model
        free = m.njnt > 0 and int(m.jnt_type[0]) == 0 and int(m.jnt_qposadr[0]) == 0
        self.min_height: float | None = None
        if free:
            z0 = m.key_qpos[pool.keyframe_id][2] if pool.keyframe_id >= 0 else m.qpos0[2]
            self.min_height = 0.7 * float(z0)
        self._zero = np.zeros(pool.num_envs)
        self._never = np.zeros(pool.num_envs, bool)

    def __call__(self, pool: MujocoPool, obs: Any, actions: Any) -> tuple[Any, Any]:
        if self.min_height is None:
            return self._zero, self._never
        terminated = pool.qpos[:, 2] < self.min_height
        return (~terminated).astype(float), terminated

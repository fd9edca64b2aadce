"""One step of a vector env driven by a policy: the most common RL workload.

Two APIs: gymnasium's ``VectorEnv`` and stable-baselines3's ``VecEnv`` (``SubprocVecEnv``,
``DummyVecEnv``, or any object with its ``reset``/``step_async``/``step_wait``/``num_envs``:
``reset()`` returns the observations, the action space is one env's, ended envs reset
themselves).

:class:`VectorEnvStep` is a plain callable (no pytest): ``perfgate.measure_vector_env`` and
the asv suite measure it the same way. Each call is ``actions = policy(obs)`` (phase
``policy``) then ``envs.step(actions)`` (phase ``env_step``), so one call advances
``num_envs`` env-steps. Sync and async envs and every autoreset mode work: with
``AutoresetMode.DISABLED`` the envs that ended are reset inside ``env_step`` (gymnasium's
``reset_mask``), as a training loop must. An ``AsyncVectorEnv`` steps in worker processes:
perfgate counts them as the workload (docs/vector-envs.md).

Everything is checked when the object is built, before anything is measured: the object
is an open VectorEnv, ``reset`` and ``step`` work, and the policy's actions fit the batched
action space. gymnasium is imported here only, on first use.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from pytest_perfgate.core.timing import phase


class VectorEnvError(ValueError):
    """The vector env or its policy cannot be measured; the message says what to change."""


def _gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as exc:
        raise VectorEnvError(f"measuring a vector env needs gymnasium ({exc}): "
                             "pip install 'pytest-perfgate[mujoco]' (or gymnasium)") from None
    return gymnasium


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."


class VectorEnvStep:
    """``step()`` = policy then ``envs.step``; ``transitions`` = ``envs.num_envs``.

    ``seed`` goes to the first ``envs.reset``. The env is not closed here: whoever made it
    closes it (the test, or ``with envs:``).
    """

    def __init__(self, envs: Any, policy: Callable[[Any], Any], *,
                 seed: int | None = None) -> None:
        gym = _gymnasium()
        if "mujoco" in sys.modules:  # a MuJoCo env: say so if two builds share its folder
            from pytest_perfgate.sim.models import mujoco_clash

            clash = mujoco_clash()
            if clash:
                raise VectorEnvError(clash)
        vector_env = gym.vector.VectorEnv
        self._sb3 = not isinstance(envs, vector_env) and is_sb3_vec_env(envs)
        if not isinstance(envs, vector_env) and not self._sb3:
            hint = (" (a single env: wrap it, e.g. gymnasium.vector.SyncVectorEnv([lambda: "
                    "env]), or make it with gymnasium.make_vec(env_id, num_envs=4))"
                    if isinstance(envs, gym.Env) else
                    " (make one with gymnasium.make_vec(env_id, num_envs=4, "
                    "vectorization_mode='async'))")
            raise VectorEnvError(f"envs={envs!r} is a {type(envs).__name__}, neither a "
                                 "gymnasium.vector.VectorEnv nor a stable-baselines3 VecEnv "
                                 f"(reset, step_async, step_wait, num_envs){hint}")
        if getattr(envs, "closed", False):
            raise VectorEnvError(f"envs={envs!r} is closed: measure it before envs.close() "
                                 "(or make a new one)")
        num = getattr(envs, "num_envs", None)
        if isinstance(num, bool) or not isinstance(num, int) or num < 1:
            raise VectorEnvError(f"envs.num_envs={num!r}: a vector env steps one env or more "
                                 "at a time: make it with num_envs >= 1")
        if not callable(policy):
            raise VectorEnvError(f"policy={policy!r} is not callable: pass a function "
                                 "obs -> actions, e.g. lambda obs: envs.action_space.sample()")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise VectorEnvError(f"seed={seed!r}: pass an int or None")
        self.envs = envs
        self.policy = policy
        self.num_envs = int(envs.num_envs)
        self.transitions = self.num_envs
        mode = (getattr(envs, "metadata", None) or {}).get("autoreset_mode")
        self.autoreset_mode = getattr(mode, "value", None if mode is None else str(mode))
        modes = getattr(gym.vector, "AutoresetMode", None)  # gymnasium >= 1.1
        self._manual_reset = modes is not None and mode == modes.DISABLED
        try:
            self.obs = self._reset(seed)
        except Exception as exc:
            raise VectorEnvError(f"envs.reset(seed={seed!r}) raised {_short(exc)}: the env "
                                 "must reset before it can be measured") from exc
        actions = self._check_actions(self.obs)
        try:
            self.obs, _, _ = self._step(actions)
        except VectorEnvError:
            raise
        except Exception as exc:
            raise VectorEnvError(f"envs.step(actions) raised {_short(exc)} on the first "
                                 "step: fix the env (or the actions the policy "
                                 "returns) before measuring it") from exc

    def _reset(self, seed: int | None) -> Any:
        if not self._sb3:
            obs, _ = self.envs.reset(seed=seed)
            return obs
        if seed is not None and callable(getattr(self.envs, "seed", None)):
            self.envs.seed(seed)  # stable-baselines3 seeds before reset(), which takes none
        return self.envs.reset()

    def _batched_space(self) -> tuple[Any, Any, Any, str]:
        """(space, shape, dtype, how to sample) of one step's actions for every env."""
        space = self.envs.action_space
        shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
        if not self._sb3:
            return space, shape, dtype, "envs.action_space.sample()"
        # stable-baselines3: the action space is one env's
        batched = None if shape is None else (self.num_envs, *tuple(shape))
        return space, batched, dtype, ("np.stack([envs.action_space.sample() for _ in "
                                       "range(envs.num_envs)])")

    def _check_actions(self, obs: Any) -> Any:
        """The policy's first actions, checked against the batched action space."""
        import numpy as np

        space, want_shape, want_dtype, sample = self._batched_space()
        try:
            actions = self.policy(obs)
        except Exception as exc:
            raise VectorEnvError(f"policy(obs) raised {_short(exc)} on the env's first "
                                 "observations") from exc
        if want_shape is None or want_dtype is None:  # Dict/Tuple spaces: ask the space
            if not self._sb3 and not space.contains(actions):
                raise VectorEnvError(f"policy(obs) returned {_describe(actions)}, which is not "
                                     f"in envs.action_space {space}: return one action per "
                                     f"env ({self.num_envs})")
            return actions
        arr = np.asarray(actions)
        single = space if self._sb3 else self.envs.single_action_space
        fix = (f"return an array of shape {tuple(want_shape)} and dtype {want_dtype} "
               f"(num_envs={self.num_envs} actions of the one-env action space {single}), "
               f"e.g. {sample}")
        if arr.shape != tuple(want_shape):
            raise VectorEnvError(f"policy(obs) returned {_describe(actions)}: {fix}")
        kind_ok = (np.issubdtype(arr.dtype, np.integer) if np.issubdtype(want_dtype, np.integer)
                   else np.issubdtype(arr.dtype, np.floating)
                   if np.issubdtype(want_dtype, np.floating) else arr.dtype == want_dtype)
        if not kind_ok:
            raise VectorEnvError(f"policy(obs) returned {_describe(actions)}: {fix}")
        return actions

    def _step(self, actions: Any) -> tuple[Any, ...]:
        if self._sb3:  # ended envs reset themselves, their final obs in the infos
            self.envs.step_async(actions)
            obs, reward, done, _infos = self.envs.step_wait()
            return obs, reward, done
        obs, reward, terminated, truncated, _info = self.envs.step(actions)
        done = terminated | truncated
        if self._manual_reset and done.any():  # AutoresetMode.DISABLED: reset the ended
            obs, _ = self.envs.reset(options={"reset_mask": done})
        return obs, reward, done

    def __call__(self) -> None:
        with phase("policy"):
            actions = self.policy(self.obs)
        with phase("env_step"):
            self.obs, *_ = self._step(actions)

    def metadata(self) -> dict[str, Any]:
        """What is recorded with the benchmark (``extra["vector_env"]``)."""
        envs = self.envs
        spec = getattr(envs, "spec", None)
        return {"vector_env": {"class": type(envs).__name__, "num_envs": self.num_envs,
                               "env_id": getattr(spec, "id", None),
                               "autoreset_mode": self.autoreset_mode}}


SB3_API = ("reset", "step_async", "step_wait")


def is_sb3_vec_env(envs: Any) -> bool:
    """An object with stable-baselines3's VecEnv API (its class need not be SB3's: any
    object with that API is driven the same way)."""
    return (all(callable(getattr(envs, m, None)) for m in SB3_API)
            and isinstance(getattr(envs, "num_envs", None), int)
            and getattr(envs, "action_space", None) is not None)


def _describe(value: Any) -> str:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"a {type(value).__name__} of shape {tuple(shape)} and dtype {dtype}"
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__name__} {text}"

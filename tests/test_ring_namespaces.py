"""/dev/shm is shared by containers with PID namespaces of their own: a pid in a ring's
name means nothing there. A live ring is never swept as stale from another namespace (its
creator holds a lock the kernel drops only with the process), and a ring too large for
/dev/shm is refused before it is made (a write past the space died of SIGBUS)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.segment import SHM_DIR, check_space
from pytest_perfgate.ring.shm_ring import Ring

ROOT = str(Path(__file__).resolve().parents[1])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="a PID namespace of its own needs root and unshare(1)")
def test_a_ring_made_in_another_pid_namespace_does_not_sweep_a_live_one() -> None:
    ring = Ring(RingSpec(num_envs=2, obs_shape=(3,), action_shape=(1,)), parties=3)
    try:
        mine = SHM_DIR / ring.name
        assert mine.exists()  # named until both sides map it: the window the sweep covers
        code = ("import sys; sys.path.insert(0, sys.argv[1]); "
                "from pytest_perfgate.ring.segment import sweep_stale; print(sweep_stale())")
        done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                               "-c", code, ROOT], capture_output=True, text=True, timeout=60)
        if done.returncode != 0 and "Operation not permitted" in done.stderr:
            pytest.skip(f"no PID namespace here: {done.stderr.strip()}")
        assert done.returncode == 0, done.stderr
        assert ring.name not in done.stdout and mine.exists(), done.stdout
    finally:
        ring.close()


@pytest.mark.timing  # a stale segment planted in /dev/shm: a ring started beside it sweeps it
def test_a_dead_creators_segment_is_still_swept(tmp_path: Path) -> None:
    """The lock goes with its process: a segment whose creator died is removed."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import os\n"
            "from pytest_perfgate.ring.shm_ring import Ring\n"
            "from pytest_perfgate.ring.layout import RingSpec\n"
            "r = Ring(RingSpec(num_envs=2, obs_shape=(3,), action_shape=(1,)), parties=3)\n"
            "print(r.name, flush=True); os._exit(0)\n")
    done = subprocess.run([sys.executable, "-c", code, ROOT], capture_output=True, text=True,
                          timeout=60, check=True)
    name = done.stdout.strip()
    assert (SHM_DIR / name).exists()
    from pytest_perfgate.ring.segment import sweep_stale

    assert name in sweep_stale()
    assert not (SHM_DIR / name).exists()


def test_a_ring_larger_than_dev_shm_is_refused_before_it_is_made() -> None:
    st = os.statvfs(SHM_DIR)
    free = st.f_bavail * st.f_frsize
    with pytest.raises(RingInputError) as e:
        check_space(free + 2**30)
    assert f"and {SHM_DIR} has" in str(e.value) and "--shm-size" in str(e.value)
    before = set(os.listdir(SHM_DIR))
    obs = (free // (4 * 2 * 8)) + 1024  # float32, 2 envs, 8 slots: just past the space
    with pytest.raises(RingInputError, match="MiB of shared memory"):
        Ring(RingSpec(num_envs=2, obs_shape=(int(obs),), action_shape=(1,)))
    assert set(os.listdir(SHM_DIR)) - before == set()  # nothing left behind

"""The settled-state cache: hits, misses, bad files, unwritable folders, what the key covers."""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_perfgate.sim import settled
from pytest_perfgate.sim.settled import CACHE_ENV, SettledCacheWarning, SettleKey, cache_dir

pytest.importorskip("mujoco.batch")

from pytest_perfgate.sim.models import load_model, tiny_xml
from pytest_perfgate.sim.thread_sweep import settled_state


@pytest.fixture
def tiny() -> Any:
    return load_model(tiny_xml())


@pytest.fixture
def key(tiny: Any) -> SettleKey:
    return settled.settle_key(tiny, 4, 20, 0, -1)


def once(arr: Any) -> Any:
    """A compute function that may run one time only (a second call means a missed hit)."""
    calls = []

    def compute() -> Any:
        assert not calls, "computed again: the cache missed"
        calls.append(1)
        return arr

    return compute


def test_a_miss_computes_and_stores_then_a_hit_reads_the_same_bytes(tmp_path: Path,
                                                                     tiny: Any,
                                                                     key: SettleKey) -> None:
    fresh = settled.settle(tiny, 4, 20)
    compute = once(fresh)
    first = settled.cached(key, compute, tmp_path)
    assert key.path(tmp_path).is_file()
    second = settled.cached(key, compute, tmp_path)
    assert second.tobytes() == fresh.tobytes() == first.tobytes()


def test_a_cached_state_equals_a_freshly_computed_one_bit_for_bit(tiny: Any) -> None:
    miss = settled_state(tiny, 10, substeps=20, distinct=4)  # the session's temp cache
    hit = settled_state(tiny, 10, substeps=20, distinct=4)
    fresh = settled_state(tiny, 10, substeps=20, distinct=4, cache=False)
    assert hit.dtype == fresh.dtype and hit.shape == fresh.shape == (10, fresh.shape[1])
    assert hit.tobytes() == fresh.tobytes() == miss.tobytes()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
def test_settling_is_the_same_bytes_on_one_thread_as_on_several(tiny: Any) -> None:
    """The parent settles on all its CPUs, the counting worker on one: one key fits both."""
    saved = os.sched_getaffinity(0)
    several = settled.settle(tiny, 8, 50, seed=3)
    try:
        os.sched_setaffinity(0, {min(saved)})
        one = settled.settle(tiny, 8, 50, seed=3)
    finally:
        os.sched_setaffinity(0, saved)
    assert one.tobytes() == several.tobytes()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong shape", "wrong dtype",
                                    "nan", "pickle", "a folder"])
def test_a_bad_file_is_ignored_with_a_warning_naming_it_and_replaced(
        tmp_path: Path, tiny: Any, key: SettleKey, damage: str) -> None:
    good = settled.settle(tiny, 4, 20)
    path = key.path(tmp_path)
    path.parent.mkdir(parents=True)
    settled.store(path, good)
    if damage == "garbage":
        path.write_bytes(b"\x00not numpy at all")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:-9])
    elif damage == "wrong shape":
        np.save(path, good[:3])
    elif damage == "wrong dtype":
        np.save(path, good.astype(np.float32))
    elif damage == "nan":
        bad = good.copy()
        bad[1, 2] = np.nan
        np.save(path, bad)
    elif damage == "pickle":
        np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    else:
        path.unlink()
        path.mkdir()
    with pytest.warns(SettledCacheWarning) as rec:
        out = settled.cached(key, once(good), tmp_path)
    assert out.tobytes() == good.tobytes()
    text = str(rec[0].message)
    assert text.startswith(f"settled-state cache file {path} was ignored: ")
    assert "recomputing" in text
    if damage == "wrong shape":
        assert f"holds float64 (3, {key.nstate}), not float64 (4, {key.nstate})" in text
    if damage != "a folder":  # the next run hits again
        assert settled.load(path, key.shape).tobytes() == good.tobytes()


def test_an_unwritable_cache_only_warns(tmp_path: Path, tiny: Any, key: SettleKey) -> None:
    (tmp_path / "file").write_text("")
    root = tmp_path / "file" / "cache"  # below a file: no folder can be made there (even as root)
    good = settled.settle(tiny, 4, 20)
    with pytest.warns(SettledCacheWarning) as rec:
        out = settled.cached(key, lambda: good, root)
    assert out.tobytes() == good.tobytes()
    text = str(rec[0].message)
    assert text.startswith(f"cannot write the settled-state cache file {key.path(root)} (")
    assert text.endswith(f"set {CACHE_ENV} to a writable folder")


def test_a_missing_file_is_a_quiet_miss(tmp_path: Path, key: SettleKey) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settled.load(key.path(tmp_path), key.shape) is None


def test_no_home_settles_every_time_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                key: SettleKey) -> None:
    for name in (CACHE_ENV, "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", no_home)
    with pytest.warns(SettledCacheWarning, match="no folder for the settled-state cache"):
        assert settled.cached(key, lambda: np.zeros(key.shape)).shape == key.shape


def test_every_input_of_settling_is_in_the_key(tiny: Any, key: SettleKey) -> None:
    digests = {key.digest}
    for other in (settled.settle_key(tiny, 5, 20, 0, -1), settled.settle_key(tiny, 4, 21, 0, -1),
                  settled.settle_key(tiny, 4, 20, 1, -1), settled.settle_key(tiny, 4, 20, 0, 0)):
        digests.add(other.digest)
    changed = load_model(tiny_xml())
    changed.opt.timestep *= 2  # the same XML, compiled then changed: the compiled bytes differ
    digests.add(settled.settle_key(changed, 4, 20, 0, -1).digest)
    for field, value in (("mujoco_version", "3.0.0"), ("numpy_version", "1.0.0"),
                         ("machine", "aarch64"), ("nstate", key.nstate + 1),
                         ("dtype", "float32"), ("scheme", key.scheme + 1)):
        digests.add(dataclasses.replace(key, **{field: value}).digest)
    assert len(digests) == 12
    assert settled.settle_key(load_model(tiny_xml()), 4, 20, 0, -1) == key  # recompiled: same


def test_the_cache_folder_comes_from_the_variable_then_xdg_then_home(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert cache_dir({CACHE_ENV: "rel", "XDG_CACHE_HOME": "/x"}) == tmp_path / "rel"
    assert cache_dir({CACHE_ENV: "", "XDG_CACHE_HOME": "/x"}) == Path("/x/pytest-perfgate")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home = tmp_path / "home" / ".cache" / "pytest-perfgate"
    assert cache_dir({"XDG_CACHE_HOME": "relative/ignored"}) == home
    assert cache_dir({}) == home


def test_the_counting_worker_is_pointed_at_the_parents_cache(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    from pytest_perfgate.modes.counts.runner import worker_env

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(CACHE_ENV, "rel")  # the worker may start elsewhere: made absolute
    assert worker_env(tmp_path / "out")[CACHE_ENV] == str(tmp_path / "rel")


@pytest.mark.parametrize("kwargs, text", [
    ({"num_envs": 0}, "num_envs=0: pass a whole number >= 1"),
    ({"substeps": -1}, "substeps=-1: pass a whole number >= 0"),
    ({"seed": 1.5}, "seed=1.5: pass a whole number >= 0"),
    ({"distinct": True}, "distinct=True: pass a whole number >= 1"),
    ({"keyframe": -2}, "keyframe=-2: pass a whole number >= -1"),
])
def test_bad_settling_arguments_name_the_value(tiny: Any, kwargs: dict[str, Any],
                                               text: str) -> None:
    args: dict[str, Any] = {"num_envs": 4, **kwargs}
    with pytest.raises(ValueError) as e:
        settled_state(tiny, **args)
    assert str(e.value) == text


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """No file written or checked yet in this process: as the counting worker starts."""
    monkeypatch.setattr(settled, "_TRUSTED", {})


def test_rows_settled_alone_are_the_rows_settled_together(tiny: Any) -> None:
    """What makes a sample check cheap and exact: each env is independent of the others."""
    full = settled.settle(tiny, 9, 30, seed=2)
    part = settled.settle(tiny, 9, 30, seed=2, which=[0, 4, 8])
    assert part.tobytes() == full[[0, 4, 8]].tobytes()
    assert settled.sample_rows(9)[0] == 0 and settled.sample_rows(9)[-1] == 8


def test_a_planted_state_is_refused_with_a_warning_naming_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny: Any, fresh_process: None) -> None:
    """A file of the right shape and finite values, but not the settled state (every body
    a metre higher): what code sharing the cache's user could leave."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    good = settled.settle(tiny, 4, 20)
    key = settled.settle_key(tiny, 4, 20, 0, -1)
    planted = good.copy()
    planted[:, 2] += 1.0
    key.path(tmp_path).parent.mkdir(parents=True)
    np.save(key.path(tmp_path), planted)
    with pytest.warns(SettledCacheWarning) as rec:
        out = settled.settled_rows(tiny, 4, 20)
    assert out.tobytes() == good.tobytes()
    (warning,) = rec
    assert str(warning.message).startswith(
        f"settled-state cache file {key.path(tmp_path)} was ignored: row(s) 0, ")
    assert "differ from the same rows settled now" in str(warning.message)
    assert np.load(key.path(tmp_path)).tobytes() == good.tobytes()  # replaced


def test_a_state_another_process_wrote_is_checked_and_used(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny: Any, fresh_process: None) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    good = settled.settle(tiny, 4, 20)
    key = settled.settle_key(tiny, 4, 20, 0, -1)
    key.path(tmp_path).parent.mkdir(parents=True)
    np.save(key.path(tmp_path), good)
    calls: list[list[int]] = []
    real = settled.settle

    def counting(*args: Any) -> Any:
        calls.append(list(args[5]) if len(args) > 5 else list(range(args[1])))
        return real(*args)

    monkeypatch.setattr(settled, "settle", counting)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settled.settled_rows(tiny, 4, 20).tobytes() == good.tobytes()
        assert settled.settled_rows(tiny, 4, 20).tobytes() == good.tobytes()
    assert len(calls) == 1 and len(calls[0]) <= 3  # one sample, then known by its digest


def test_one_wrong_row_is_named_when_the_sample_holds_it(tiny: Any) -> None:
    good = settled.settle(tiny, 6, 20)
    bad = good.copy()
    bad[3, 0] += 1e-12
    rows = [0, 3, 5]
    fresh = settled.settle(tiny, 6, 20, which=rows)
    assert settled.differs(good, rows, fresh) is None
    assert settled.differs(bad, rows, fresh) == (
        "row(s) 3 differ from the same rows settled now (a file written by other code: this "
        "state is not what the key says)")


def test_without_its_check_a_planted_state_would_be_used(tmp_path: Path, tiny: Any,
                                                          key: SettleKey) -> None:
    """What the check in settled_rows stops: the file alone passes every other test."""
    good = settled.settle(tiny, 4, 20)
    planted = good.copy()
    planted[:, 2] += 1.0
    key.path(tmp_path).parent.mkdir(parents=True)
    np.save(key.path(tmp_path), planted)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = settled.cached(key, once(good), tmp_path)
    assert out.tobytes() == planted.tobytes()

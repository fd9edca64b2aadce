"""Core-spec grammar, usable/physical CPUs, pinning, thread caps and cgroup quotas."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from pytest_perfgate.placement import cpus
from pytest_perfgate.placement.cgroup import cgroup_cpu_quota
from pytest_perfgate.placement.cpus import (
    GRAMMAR,
    MAX_CPU_ID,
    CpuSpecError,
    PlacementWarning,
    cap_threads_env,
    format_cpus,
    parse_cpulist,
    parse_cpus,
    physical_cpus,
    resolve_threads,
    set_affinity,
    usable_cpus,
)

EIGHT = tuple(range(8))


@pytest.mark.parametrize("spec, expected", [
    ("0:5,7", (0, 1, 2, 3, 4, 5, 7)),
    ("0-5", (0, 1, 2, 3, 4, 5)),
    (" 1 : 2 ,\t6 ", (1, 2, 6)),
    ("3", (3,)),
    ("2,2,1-2", (1, 2)),
    (4, (4,)),
    ([6, 1], (1, 6)),
    ((0,), (0,)),
    (None, None),
])
def test_valid_specs(spec: object, expected: tuple[int, ...] | None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing here is outside the usable set
        assert parse_cpus(spec, EIGHT) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("spec, token, why", [
    ("5:2", "'5:2'", "range end 2 is below its start 5"),
    ("1,,2", "''", "empty item"),
    ("-1", "'-1'", "not N, N-M or N:M"),
    ("a", "'a'", "not N, N-M or N:M"),
    ("\u0663", "'\u0663'", "not N, N-M or N:M"),  # ARABIC-INDIC DIGIT THREE: int() takes it
    ("1_000", "'1_000'", "not N, N-M or N:M"),  # int() takes this too
    ("0:", "'0:'", "not N, N-M or N:M"),
    (True, "True", "a bool is not a core number"),
    (-3, "-3", "core numbers are >= 0"),
    ("", "''", "empty spec; use None to disable pinning"),
    ([], "[]", "empty list; use None to disable pinning"),
    ([1, False], "False", "list items must be ints >= 0"),
    (1.5, "1.5", "unsupported type float"),
])
def test_malformed_specs_name_the_token_and_show_the_grammar(spec: object, token: str,
                                                             why: str) -> None:
    with pytest.raises(CpuSpecError) as info:
        parse_cpus(spec, EIGHT)  # type: ignore[arg-type]
    assert str(info.value) == f"invalid core spec {spec!r}: {why} (bad token {token}); {GRAMMAR}"
    assert isinstance(info.value, ValueError)


def test_grammar_message_renders() -> None:
    assert GRAMMAR == ('core spec grammar: ITEM[,ITEM...] where ITEM is N, N-M or N:M '
                       '(inclusive, N <= M, ASCII digits, whitespace allowed), e.g. "0:5,7"; '
                       'or an int, or a list of ints; None disables pinning')


def test_huge_range_is_resolved_against_the_usable_set_without_enumerating() -> None:
    # Enumerating 10**18 ids would never finish: this test returning at all is the proof.
    with pytest.warns(PlacementWarning) as rec:
        assert parse_cpus(f"0:{10**18}", (0, 1, 2, 3)) == (0, 1, 2, 3)
    assert str(rec[0].message) == (
        f"core spec '0:{10**18}': dropped CPUs 4-{10**18} outside the usable set 0-3; "
        "pinning to 0-3")


def test_cores_outside_the_usable_set_are_dropped_with_a_warning_naming_them() -> None:
    with pytest.warns(PlacementWarning) as rec:
        assert parse_cpus("0:5,7,40", (0, 1, 2, 3)) == (0, 1, 2, 3)
    assert str(rec[0].message) == ("core spec '0:5,7,40': dropped CPUs 4-5,7,40 outside the "
                                   "usable set 0-3; pinning to 0-3")


def test_spec_with_no_usable_core_is_an_error() -> None:
    with pytest.raises(CpuSpecError) as info:
        parse_cpus("8:9", (0, 1, 2, 3))
    assert str(info.value) == ("core spec '8:9' selects no usable CPU (usable: 0-3); pick cores "
                               "from that set or pass None to disable pinning")


def test_default_usable_set_is_the_affinity_mask() -> None:
    assert parse_cpus(list(usable_cpus())) == usable_cpus()


def test_kernel_lists_parse_through_the_one_cpulist_parser() -> None:
    assert parse_cpulist("0-2,8\n") == (0, 1, 2, 8)
    assert parse_cpulist("\n") == ()
    assert parse_cpulist(" 3 , 1-2,2") == (1, 2, 3)
    for bad in ("1-0", "x", "0-99999999", f"0-{MAX_CPU_ID}", "1,,2", "-1", "0:3"):
        with pytest.raises(ValueError):
            parse_cpulist(bad)


def test_format_cpus() -> None:
    assert format_cpus([7, 0, 1, 2, 5]) == "0-2,5,7"
    assert format_cpus([]) == "(none)"


def test_usable_cpus_uses_the_affinity_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 1}, raising=False)
    assert usable_cpus() == (1, 3)


def test_usable_cpus_falls_back_to_cpu_count_without_affinity(monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert usable_cpus() == (0, 1, 2)


def _topology(root: Path, cpu: int, package: int | None, core: int | None) -> None:
    d = root / f"devices/system/cpu/cpu{cpu}/topology"
    d.mkdir(parents=True)
    if package is not None:
        (d / "physical_package_id").write_text(f"{package}\n")
    if core is not None:
        (d / "core_id").write_text(f"{core}\n")


def test_physical_cpus_keeps_one_logical_cpu_per_package_core_pair(tmp_path: Path) -> None:
    # Two packages, two cores each, SMT siblings n and n+4 (Intel-style numbering).
    for cpu in range(8):
        _topology(tmp_path, cpu, package=(cpu % 4) // 2, core=cpu % 2)
    assert physical_cpus(range(8), tmp_path) == (0, 1, 2, 3)
    assert physical_cpus([5, 1, 6], tmp_path) == (1, 6)  # 5 is 1's sibling
    assert resolve_threads("physical", list(range(8)), tmp_path) == 4


def test_physical_cpus_counts_cpus_without_topology_as_their_own_core(tmp_path: Path) -> None:
    _topology(tmp_path, 0, package=0, core=0)
    _topology(tmp_path, 1, package=0, core=0)
    _topology(tmp_path, 2, package=None, core=None)
    assert physical_cpus([0, 1, 2, 3], tmp_path) == (0, 2, 3)


def test_resolve_threads() -> None:
    assert resolve_threads(None, (0, 1, 2)) == 3
    assert resolve_threads("logical", (0, 1)) == 2
    assert resolve_threads(5, (0,)) == 5
    with pytest.raises(ValueError) as info:
        resolve_threads("many", (0,))
    assert str(info.value) == "threads='many': use a positive int, 'logical' or 'physical'"


def test_set_affinity_round_trips_on_this_machine() -> None:
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no sched_setaffinity on this platform")
    before = os.sched_getaffinity(0)
    try:
        one = min(before)
        assert set_affinity([one]) is True
        assert os.sched_getaffinity(0) == {one}
    finally:
        os.sched_setaffinity(0, before)


def test_set_affinity_reports_unsupported_without_raising(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    assert set_affinity([0]) is False


def test_set_affinity_reports_refusal_and_silent_narrowing(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    def refuse(pid: int, mask: set[int]) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sched_setaffinity", refuse, raising=False)
    assert set_affinity([0]) is False
    # The kernel drops CPUs outside the cpuset without an error: only read-back tells.
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, mask: None, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert set_affinity([0, 1]) is False
    assert set_affinity([0]) is True


def test_set_affinity_refuses_absurd_ids_before_asking_the_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, m: calls.append(m), raising=False)
    assert set_affinity([2**30]) is False
    assert calls == []  # CPython would have built a 128 MB mask


def test_cap_threads_env() -> None:
    env = cap_threads_env(3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "3"
    assert set(env) == set(cpus.THREAD_ENV_VARS)
    with pytest.raises(ValueError) as info:
        cap_threads_env(0)
    assert str(info.value) == "thread cap 0: pass a positive int (the slice size)"


def _cgroup(tmp_path: Path, own: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cg"
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    proc = tmp_path / "cgroup"
    proc.write_text(own)
    return root, proc


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, "0::/ci/job\n", {"ci/job/cpu.max": "150000 100000\n"})
    assert cgroup_cpu_quota(root, proc) == 1.5


def test_cgroup_v2_parent_limit_binds_the_child(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, "0::/ci/job\n", {"ci/job/cpu.max": "max 100000\n",
                                                     "ci/cpu.max": "50000 100000\n"})
    assert cgroup_cpu_quota(root, proc) == 0.5


def test_cgroup_v2_unlimited(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, "0::/job\n", {"job/cpu.max": "max 100000\n"})
    assert cgroup_cpu_quota(root, proc) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, "4:cpu,cpuacct:/docker/abc\n",
                         {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000\n",
                          "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
                          "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
                          "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    assert cgroup_cpu_quota(root, proc) == 2.0


def test_cgroup_missing_files_mean_no_quota(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path / "nope", tmp_path / "nope2") is None

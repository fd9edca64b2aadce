"""The change-point wrapper (ruptures PELT on log values) on synthetic series, fixed seeds."""

from __future__ import annotations

import math
import random
import sys

import pytest

from pytest_perfgate.report import changepoints
from pytest_perfgate.report.changepoints import MIN_POINTS, MissingLibrary, detect, noise


def series(n: int, sigma: float, steps: dict[int, float], seed: int = 3,
           level: float = 250.0) -> list[float]:
    """``n`` log-normal run medians; ``steps[i]`` multiplies every value from run i on."""
    rng = random.Random(seed)
    out, f = [], 1.0
    for i in range(n):
        f *= steps.get(i, 1.0)
        out.append(level * f * math.exp(rng.gauss(0, sigma)))
    return out


def test_a_one_percent_step_in_instruction_counts_is_found_where_it_began() -> None:
    x = series(40, 2.3e-7, {23: 1.01})  # the counts' run-to-run noise (README)
    [cp] = detect(x)
    assert cp.index == 23
    assert cp.ratio == pytest.approx(1.01, rel=1e-5)
    assert cp.before == pytest.approx(250, rel=1e-5)


def test_exact_counts_with_a_one_off_blip_have_none_but_a_tenth_of_a_percent_shows() -> None:
    counts = [3328668.1] + [3328630.4] * 19  # the first worker wrote the bytecode cache
    assert detect(counts) == []
    [cp] = detect(counts[:10] + [c * 1.001 for c in counts[10:]])
    assert cp.index == 10


def test_a_ten_percent_step_under_one_percent_noise_and_two_steps() -> None:
    [cp] = detect(series(30, 0.01, {12: 1.10}))
    assert abs(cp.index - 12) <= 1 and cp.ratio == pytest.approx(1.10, rel=0.02)
    both = detect(series(45, 0.01, {15: 1.10, 30: 1 / 1.2}, seed=5))
    assert [c.index for c in both] == [15, 30]
    assert both[1].ratio == pytest.approx(1 / 1.2, rel=0.02)


def test_a_long_history_is_segmented_whole() -> None:
    x = series(3000, 0.3, {1000: 2.0, 2000: 0.5})  # this runner's noise, 2x steps
    assert [abs(c.index - t) <= 20 for c, t in zip(detect(x), (1000, 2000), strict=True)] \
        == [True, True]


def test_flat_series_have_no_change_points() -> None:
    for seed in range(5):
        assert detect(series(40, 0.05, {}, seed=seed)) == []
    assert detect([100.0] * 20) == []  # exactly repeating counts: the noise floor, no split


def test_a_small_step_under_wall_time_noise_is_not_claimed() -> None:
    # 3% under this machine's drift (sigma ~ 0.3 of the log run medians) is invisible
    assert detect(series(40, 0.3, {20: 1.03}, seed=11)) == []


def test_too_short_series_have_none_and_bad_values_are_refused() -> None:
    assert detect([1.0, 2.0, 2.0][: MIN_POINTS - 1]) == []
    assert detect([]) == []
    with pytest.raises(ValueError, match=r"positive finite values, found \[0.0\]"):
        detect([1.0, 1.0, 0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="nan"):
        detect([1.0, float("nan"), 1.0, 1.0])


def test_noise_is_robust_to_the_step_it_looks_for() -> None:
    x = series(40, 0.02, {20: 2.0})
    assert 0.01 < noise(x) < 0.04  # the step is one difference among 39
    assert noise([5.0]) == changepoints.NOISE_FLOOR


def test_missing_library_names_the_install_command(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ruptures", None)  # import ruptures -> ImportError
    with pytest.raises(MissingLibrary) as exc:
        detect(series(10, 0.01, {}))
    assert str(exc.value) == ("change points need the ruptures library, which is not "
                              "installed: pip install 'pytest-perfgate[report]'  (or: pip "
                              "install ruptures)")


def test_a_step_at_the_newest_run_waits_for_its_second_run() -> None:
    """A change point needs MIN_SEGMENT runs on each side, also after the refinement that
    moves PELT's split: one slower newest run is not a change point yet; two are."""
    flat = [100.0, 100.5, 99.5, 100.2, 99.8, 100.1, 99.9, 100.3]
    assert detect([*flat, 92.0]) == []
    (cp,) = detect([*flat, 92.0, 92.3])
    assert cp.index == len(flat) and cp.after == pytest.approx(92.15)

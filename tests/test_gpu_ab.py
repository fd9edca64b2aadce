"""The A/B load-change rule and GPU-spoiled turns: a pair whose GPU guard spoiled one turn
only is left out, the reason named; pure over Window objects (no sides, no timing)."""

from __future__ import annotations

import random

from pytest_perfgate.core.gate import Outcome, Rule
from pytest_perfgate.core.sequential import plan
from pytest_perfgate.core.window import Window
from pytest_perfgate.modes.ab.abba import load_changed, run_looks

RULE = Rule(threshold=0.02, alpha=0.01)
HOT = "GPU 0 throttled: thermal, SM clock 1500 MHz (highest 2407)"
FOREIGN = "another process on GPU 0: pid 4242"


def turn(wall_s: float = 0.1, load: float | None = 0.0, gpu: str | None = None) -> Window:
    return Window(10_000, wall_s, 0.1, other_load=load, polluted=gpu is not None,
                  gpu_spoiled=gpu)


def test_a_gpu_spoil_on_one_side_only_leaves_the_pair_out_naming_it() -> None:
    assert load_changed(turn(gpu=HOT), turn(), 0.25) == (
        "the GPU guard spoiled one of its turns only (base: GPU 0 throttled: thermal, SM "
        "clock 1500 MHz (highest 2407))")
    assert load_changed(turn(), turn(gpu=FOREIGN), 0.25) == (
        "the GPU guard spoiled one of its turns only (head: another process on GPU 0: pid "
        "4242)")
    # without /proc/stat readings the GPU guard still decides
    assert load_changed(turn(load=None), turn(load=None, gpu=HOT), 0.25) is not None


def test_a_gpu_spoil_on_both_sides_cancels_like_a_load_on_both() -> None:
    assert load_changed(turn(gpu=HOT), turn(gpu=HOT), 0.25) is None
    assert load_changed(turn(gpu=HOT), turn(gpu=FOREIGN), 0.25) is None
    assert load_changed(turn(), turn(), 0.25) is None
    assert load_changed(turn(load=1.0, gpu=HOT), turn(load=0.1, gpu=HOT), 0.25) == (
        "the outside load changed between its two turns")


def _feed(pairs: list[tuple[Window, Window]]):  # type: ignore[no-untyped-def]
    return lambda i: pairs[i] if i < len(pairs) else None


def test_the_looks_leave_gpu_spoiled_pairs_out_and_count_them_by_reason() -> None:
    rng = random.Random(5)
    design = plan(24, 1, RULE.alpha)
    pairs = []
    for i in range(30):
        b, h = 0.1 * (1 + rng.gauss(0, 0.002)), 0.1 * (1 + rng.gauss(0, 0.002))
        # the head's turn is spoiled and 40% slower in 4 pairs: kept, they would read as a
        # regression of the code
        spoil = i in (2, 7, 11, 19)
        pairs.append((turn(b), turn(h * 1.4 if spoil else h, gpu=HOT if spoil else None)))
    pairs[5] = (turn(0.1, load=1.5), turn(0.1, load=0.0))
    looks = run_looks(_feed(pairs), design, RULE, 0.25)
    assert looks.verdict.outcome is Outcome.OK
    assert len(looks.kept) == 24 and looks.excluded == 5
    assert not {2, 5, 7, 11, 19} & set(looks.kept)
    assert looks.summary()["left_out"] == {
        f"the GPU guard spoiled one of its turns only (head: {HOT})": 4,
        "the outside load changed between its two turns": 1}


def test_too_few_pairs_kept_names_the_gpu_as_well_as_the_load() -> None:
    design = plan(8, 1, RULE.alpha)  # left out at most max(2, 8 // 4) + 1 pairs
    pairs = [(turn(), turn(gpu=FOREIGN)) for _ in range(2)] + \
        [(turn(load=2.0), turn(load=0.0))] * 10
    looks = run_looks(_feed(pairs), design, RULE, 0.25)
    assert looks.verdict.outcome is Outcome.INCONCLUSIVE
    assert looks.verdict.message == (
        "only 0 turn pair(s) kept: 3 pair(s) were left out (the outside load changed between "
        "the two turns of 1 pair(s); the GPU guard spoiled one of its turns only (head: "
        "another process on GPU 0: pid 4242) in 2 pair(s)), so their ratios measure the "
        "other work on this machine or its GPU, not the code; run again when the machine "
        "is quiet")

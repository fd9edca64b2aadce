"""Which process bounds a collector/learner pair, said with its verdict (core/bound.py)."""

from __future__ import annotations

from pytest_perfgate.core import bound

LEARNER_BOUND = {"learner_wait_share": 0.02, "learner_updates_per_s": 29.1,
                 "collector_env_steps_per_s": [812.4]}
PHASES = {"policy": 0.3, "env_step": 2.1, "push": 6.4, "wait_data": 0.1, "update": 30.0}


def test_a_learner_bound_pair_is_named_with_its_figures() -> None:
    assert bound.bound(LEARNER_BOUND, PHASES) == (
        "the learner bounds the pair: the collector is blocked in push 73% of its loop "
        "(6.40 ms per step), the learner waits for data 2% of its time (learner 29.1 "
        "updates/s; collector 812 env-steps/s)")


def test_a_collector_bound_pair_is_named() -> None:
    meta = {"learner_wait_share": 0.6, "collector_env_steps_per_s": [400.0, 390.0]}
    assert bound.bound(meta, {"policy": 1.0, "env_step": 3.0, "push": 0.05}) == (
        "the collector bounds the pair: the collector is blocked in push 1% of its loop "
        "(0.05 ms per step), the learner waits for data 60% of its time (collectors 400, "
        "390 env-steps/s)")


def test_a_slower_collector_beside_a_learner_that_bounds_the_pair_is_said_as_such() -> None:
    head = {**PHASES, "env_step": 2.4}  # the collector's own work +12.5%
    said = bound.note({"ring_pair": LEARNER_BOUND}, PHASES, head, 0.02)
    assert said == ("the collector got slower (policy + env_step 2.40 -> 2.70 ms per step), "
                    "but the learner bounds the pair, so its throughput follows the learner")
    # within the threshold: only the bound is said
    assert bound.note({"ring_pair": LEARNER_BOUND}, PHASES, PHASES, 0.02).startswith(
        "the learner bounds the pair")


def test_nothing_is_said_of_what_is_no_ring_pair() -> None:
    assert bound.note({}, PHASES, PHASES, 0.02) is None
    assert bound.note({"ring_pair": "garbage"}, PHASES, PHASES, 0.02) is None
    assert bound.note({"ring_pair": LEARNER_BOUND}, {}, {"update": 1.0}, 0.02) is None
    assert bound.bound({"learner_wait_share": None}, PHASES) is None

"""Which process bounds a collector/learner pair, said with its verdict.

A ring pair's throughput is the slower side's: a learner-bound pair's collector spends its
loop blocked in ``push`` and a collector-bound pair's learner waits for data
(``wait_data``). So a change in the process that does not bound the pair moves the waiting,
not the throughput, and a slower collector beside a learner that bounds the pair is news
about the collector, not a regression of the pair. Read from what a ring pair records
(``extra["ring_pair"]``, ring/pair.py) and its phases, by their names: the collector's loop
is ``policy``, ``env_step`` and ``push``, the learner's ``wait_data`` and its work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

COLLECTOR_WORK = ("policy", "env_step")  # the collector's own work per step
BLOCKED = "push"  # a collector waiting for room in the ring
WAITED = "wait_data"  # a learner waiting for transitions


def bound(ring_pair: Mapping[str, Any], phases: Mapping[str, float]) -> str | None:
    """The sentence naming the process that bounds the pair, with the figures it rests
    on; None when the record does not say (not a ring pair, no phases)."""
    work = sum(phases.get(n, 0.0) for n in COLLECTOR_WORK)
    push = phases.get(BLOCKED)
    wait = ring_pair.get("learner_wait_share")
    if push is None or not isinstance(wait, int | float) or work + push <= 0:
        return None
    blocked = push / (work + push)
    updates = ring_pair.get("learner_updates_per_s")
    steps = ring_pair.get("collector_env_steps_per_s") or []
    rates = []
    if isinstance(updates, int | float):
        rates.append(f"learner {updates:.1f} updates/s")
    if steps and all(isinstance(s, int | float) for s in steps):
        rates.append("collector" + ("s " if len(steps) > 1 else " ")
                     + ", ".join(f"{s:.0f}" for s in steps) + " env-steps/s")
    who = "the learner" if blocked > wait else "the collector"
    return (f"{who} bounds the pair: the collector is blocked in push {blocked:.0%} of its "
            f"loop ({push:.2f} ms per step), the learner waits for data {wait:.0%} of its "
            f"time" + (f" ({'; '.join(rates)})" if rates else ""))


def off_bound_change(ring_pair: Mapping[str, Any], base: Mapping[str, float],
                     head: Mapping[str, float], threshold: float) -> str | None:
    """When the learner bounds the pair and the collector's own work per step changed by
    more than ``threshold``: the sentence saying so (the pair's throughput follows the
    learner, not it); else None."""
    said = bound(ring_pair, head)
    if said is None or not said.startswith("the learner"):
        return None
    before = sum(base.get(n, 0.0) for n in COLLECTOR_WORK)
    after = sum(head.get(n, 0.0) for n in COLLECTOR_WORK)
    if before <= 0 or abs(after / before - 1) <= threshold:
        return None
    how = "slower" if after > before else "faster"
    return (f"the collector got {how} ({' + '.join(COLLECTOR_WORK)} {before:.2f} -> "
            f"{after:.2f} ms per step), but the learner bounds the pair, so its throughput "
            "follows the learner")


def note(extra: Mapping[str, Any], base: Mapping[str, float], head: Mapping[str, float],
         threshold: float) -> str | None:
    """What a ring pair's verdict says about its bound: the off-bound change when there is
    one, else which process bounds it."""
    ring_pair = extra.get("ring_pair")
    if not isinstance(ring_pair, Mapping):
        return None
    return off_bound_change(ring_pair, base, head, threshold) or bound(ring_pair, head)

"""Pinned vs unpinned pairs, over learner core counts and collector counts, interleaved.

The pinned-vs-unpinned table of docs/design.md §9: collector env-steps/s, change vs unpinned,
env_step ms and push ms per configuration. All pairs are started once and parked with
SIGSTOP; each turn resumes one, settles it for a short window, measures one window and
parks it again, in a balanced order (core/turn_order.py), so drift hits every configuration alike
(docs/design.md §1). Figures are medians over turns.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any

from pytest_perfgate.core.turn_order import turn_order
from pytest_perfgate.placement import cpus as _cpus
from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.pair import RingPair
from pytest_perfgate.ring.pair_placement import split_cpus


@dataclass
class Config:
    label: str
    collector_cpus: str | list[str] | None  # one core spec per collector when several
    learner_cpus: str | None
    threads: tuple[int | None, int | None] = (None, None)  # caps without pinning
    collectors: int = 1
    learner_wait: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    env_step_ms: list[float] = field(default_factory=list)
    push_ms: list[float] = field(default_factory=list)

    def row(self, base: float) -> dict[str, Any]:
        rate = statistics.median(self.rates) if self.rates else 0.0
        def where(cpus: str | list[str] | None, threads: int | None) -> str:
            if isinstance(cpus, list):
                return "|".join(cpus)
            return cpus or (f"{threads} thr" if threads else "unpinned")

        return {"config": self.label, "collector_cpus": where(self.collector_cpus,
                                                              self.threads[0]),
                "learner_cpus": where(self.learner_cpus, self.threads[1]),
                "env_steps_per_s": rate,
                "change": rate / base - 1 if base else 0.0,
                "env_step_ms": statistics.median(self.env_step_ms or [0.0]),
                "push_ms": statistics.median(self.push_ms or [0.0]), "turns": len(self.rates),
                "collectors": self.collectors,
                "learner_wait": statistics.median(self.learner_wait or [0.0])}


def plan(learner_cores: tuple[int, ...] | None = None,
         usable: tuple[int, ...] | None = None,
         collectors: tuple[int, ...] = (1,)) -> list[Config]:
    """Unpinned first; then, per learner core count k, the same thread caps unpinned
    (collector len(cpus)-k threads, learner k) and pinned (learner on its first k cores, the
    collector on the rest): the capped row tells what pinning adds beyond the thread caps.
    k = 0: the learner unpinned, the collectors on every CPU. Per collector count c > 1
    (or k = 0): the collectors on c slices of the collectors' CPUs ("C{c} L{k}")."""
    cpus = tuple(sorted(usable if usable is not None else _cpus.usable_cpus()))
    counts = learner_cores or tuple(k for k in (1, 2, 4, 8) if k < len(cpus))
    bad = [k for k in counts if not 0 <= k < len(cpus)]
    if bad:
        raise ValueError(f"learner core counts {bad}: each must leave the collector at least "
                         f"one of the {len(cpus)} usable CPUs ({_cpus.format_cpus(cpus)})")
    for c in collectors:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise RingInputError(f"collector count {c!r}: give whole numbers >= 1")
        tight = [k for k in counts if c > len(cpus) - k]
        if tight:
            raise RingInputError(f"{c} collectors with learner cores {tight}: more collectors "
                                 f"than the {len(cpus) - max(tight)} CPU(s) left of "
                                 f"{_cpus.format_cpus(cpus)}; one CPU at least each")
    out = [Config("unpinned", None, None)]
    for k in counts:
        for c in collectors:
            lk = f"L{k}" if k else "L-"
            learner = _cpus.format_cpus(cpus[:k]) if k else None
            if c == 1 and k:
                out.append(Config(f"capped L{k}", None, None, (len(cpus) - k, k)))
                out.append(Config(f"pinned L{k}", _cpus.format_cpus(cpus[k:]), learner))
            elif c == 1:
                out.append(Config(f"C1 {lk}", _cpus.format_cpus(cpus), None))
            else:
                out.append(Config(f"C{c} {lk}", split_cpus(cpus[k:], c), learner,
                                  collectors=c))
    return out


def spec_for(spec: RingSpec, collectors: int) -> RingSpec:
    """Each of ``collectors`` collectors steps its share of ``spec.num_envs`` envs, so every
    configuration steps the same envs in total."""
    if spec.num_envs < collectors:
        raise RingInputError(f"{spec.num_envs} envs for {collectors} collectors: give each "
                             "collector one env at least (--envs >= collectors)")
    return dataclasses.replace(spec, num_envs=spec.num_envs // collectors)


def compare(spec: RingSpec, configs: list[Config], *, turns: int = 10,
            window_s: float = 1.0, settle_s: float = 0.5, **pair_kw: Any) -> list[dict[str, Any]]:
    """Run every configuration interleaved; rows as :meth:`Config.row`."""
    if turns < 1 or window_s <= 0 or settle_s < 0:
        raise ValueError(f"turns={turns!r}, window_s={window_s!r}, settle_s={settle_s!r}: "
                         "need turns >= 1, window_s > 0, settle_s >= 0")
    # Every pair is built (and so checked) before the first one starts.
    pairs = [RingPair(spec_for(spec, c.collectors), collector_cpus=c.collector_cpus,
                      learner_cpus=c.learner_cpus, threads=c.threads,
                      collectors=c.collectors, **pair_kw) for c in configs]
    try:
        for p in pairs:
            p.start()
            p.pause()
        for turn in range(turns):
            for i in turn_order(range(len(configs)), turn):
                c, p = configs[i], pairs[i]
                p.resume()
                if settle_s:
                    p.run_window(settle_s)
                w = p.run_window(window_s)
                p.pause()
                c.rates.append(w.transitions / w.wall_s)
                c.learner_wait.append(p.learner_waits[-1] if p.learner_waits else 0.0)
                ph = w.phases
                if "env_step" in ph:
                    c.env_step_ms.append(ph["env_step"].ms_per_call)
                if "push" in ph:
                    waited = ph["wait_free"].wall_ns if "wait_free" in ph else 0
                    c.push_ms.append((ph["push"].wall_ns - waited) / 1e6 / ph["push"].calls)
    finally:
        for p in pairs:
            p.close()
    base = statistics.median(configs[0].rates) if configs[0].rates else 0.0
    return [c.row(base) for c in configs]


def table(rows: list[dict[str, Any]], spec: RingSpec) -> str:
    """The pinned-vs-unpinned table (docs/design.md §9), plus the sizes used."""
    head = (f"{'config':<12} {'collector':>9} {'learner':>9} {'env-steps/s':>12} "
            f"{'vs unpinned':>11} {'env_step ms':>11} {'push ms':>8} {'learner wait':>12}")
    lines = [f"ring pair: {spec.num_envs} envs (split over the collectors), obs "
             f"{spec.obs_shape}, capacity {spec.capacity}", head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['config']:<12} {r['collector_cpus']:>9} {r['learner_cpus']:>9} "
                     f"{r['env_steps_per_s']:>12.0f} {r['change']:>+10.1%} "
                     f"{r['env_step_ms']:>11.2f} {r['push_ms']:>8.3f} "
                     f"{r.get('learner_wait', 0.0):>12.0%}")
    lines.append(f"(medians of {rows[0]['turns'] if rows else 0} interleaved turns)")
    return "\n".join(lines)

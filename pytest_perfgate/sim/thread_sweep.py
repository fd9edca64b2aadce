"""Thread-scaling sweep: nthread x pinned/unpinned, measured interleaved, sizing rule marked.

Why interleaved: this machine class drifts up to 1.5x over seconds (docs/design.md §1), so
configurations measured back to back compare the machine's moods, not the configurations.
Here every configuration runs a short turn in a balanced order and we keep the medians of many
turns; every pool steps the same held state, so each call does identical physics.

    perfgate sweep --model humanoid --envs 1024
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_perfgate.core.atomic import atomic_write
from pytest_perfgate.core.progress import NULL_PROGRESS, Progress
from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock
from pytest_perfgate.core.turn_order import turn_order


def rotation(names: Sequence[str], turns: int) -> Iterator[tuple[int, str]]:
    """(turn, name) for every name in every turn, in a balanced order: each name follows
    each other one equally often (core/turn_order.py)."""
    names = list(names)
    for t in range(turns):
        for name in turn_order(names, t):
            yield t, name


def interleave(calls: Mapping[str, Callable[[], object]], turns: int, per_turn: int = 1,
               warmup: int = 1, clock: Clock = SYSTEM_CLOCK, progress: Progress = NULL_PROGRESS,
               steps_per_call: int = 0) -> dict[str, list[tuple[float, float]]]:
    """Run each callable ``per_turn`` times per turn, in :func:`rotation` order.

    Returns, per name, one (wall seconds per call, cores used) sample per turn. With
    ``steps_per_call``, ``progress`` hears each call's env-steps/s as it is measured.
    """
    if turns < 1 or per_turn < 1:
        raise ValueError(f"turns={turns}, per_turn={per_turn}: both must be >= 1")
    names = list(calls)
    for name in names:
        if warmup:
            progress.warmup_started(name)
            w0 = clock.wall_ns()
        for _ in range(warmup):
            calls[name]()
        if warmup:
            progress.warmup_ended(True, (clock.wall_ns() - w0) / 1e9, name)
    out: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for t, name in rotation(names, turns):
        fn = calls[name]
        c0, w0 = clock.cpu_ns(), clock.wall_ns()
        for _ in range(per_turn):
            fn()
        w1, c1 = clock.wall_ns(), clock.cpu_ns()
        wall = (w1 - w0) / 1e9
        out[name].append((wall / per_turn, (c1 - c0) / 1e9 / wall if wall > 0 else 0.0))
        if steps_per_call and wall > 0:
            progress.window_done(t + 1, turns, steps_per_call * per_turn / wall, name)
    return out


def median_ratio(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Median over turns of time(a)/time(b): paired, so the machine's drift cancels."""
    return statistics.median(x[0] / y[0] for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class SweepRow:
    threads: int
    pinned: bool
    ms_per_step: float
    cores: float
    steps_per_s: float
    time_vs_rule: float  # median paired ratio of this config's time to the rule's
    rule: bool = False

    @property
    def label(self) -> str:
        return _label(self.threads, self.pinned)


def _label(threads: int, pinned: bool) -> str:
    return f"{threads} {'pinned' if pinned else 'unpinned'}"


@dataclass(frozen=True)
class SweepResult:
    rows: tuple[SweepRow, ...]
    num_envs: int
    frame_skip: int
    turns: int
    metadata: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        """The report, one row per (threads, pinned) configuration."""
        meta = self.metadata
        lines = [f"MuJoCo pool thread sweep: {meta.get('source', '?')}, {self.num_envs} envs x "
                 f"{self.frame_skip} substeps, usable CPUs {meta.get('usable_cpus', '?')}, "
                 f"{self.turns} turns interleaved, medians (time vs rule: of paired "
                 "per-turn ratios)",
                 "| threads | pinned | ms/step (cores used) | k env-steps/s | time vs rule |",
                 "|---|---|---|---|---|"]
        for r in self.rows:
            mark = "  <- sizing rule" if r.rule else ""
            lines.append(f"| {r.threads} | {'yes' if r.pinned else 'no'} | "
                         f"{r.ms_per_step:.2f} ({r.cores:.2f}) | {r.steps_per_s / 1e3:.1f} | "
                         f"{r.time_vs_rule:.3f} |{mark}")
        rule = next((r for r in self.rows if r.rule), None)
        if rule is not None:
            best = min(self.rows, key=lambda r: r.time_vs_rule)
            lines.append(f"sizing rule: {rule.label} ({meta.get('thread_rule', '')}); fastest: "
                         f"{best.label} at {best.time_vs_rule:.3f}x the rule's time")
        return "\n".join(lines)

    def jsonl(self) -> str:
        """One self-contained JSON line per configuration (appended across sweeps)."""
        common = {"num_envs": self.num_envs, "frame_skip": self.frame_skip,
                  "turns": self.turns, "mujoco": self.metadata.get("mujoco_version"),
                  "model_sha256": self.metadata.get("model_sha256")}
        return "".join(json.dumps({**common, **asdict(r)}, sort_keys=True, default=str) + "\n"
                       for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"format": 1, "num_envs": self.num_envs, "frame_skip": self.frame_skip,
                "turns": self.turns, "metadata": self.metadata,
                "rows": [asdict(r) for r in self.rows]}


def default_thread_counts(num_usable: int, num_envs: int) -> list[int]:
    """Powers of two up to 4x the usable CPUs (oversubscription shows), plus the CPU count."""
    counts = {num_usable}
    n = 1
    while n <= 4 * num_usable:
        counts.add(n)
        n *= 2
    return sorted(c for c in counts if c <= num_envs)


def thread_configs(num_envs: int, thread_counts: Sequence[int] | None = None,
                   pinned: bool = True) -> list[tuple[int, bool]]:
    """(threads, pinned) of every pool the thread sweep holds, the sizing rule's included."""
    from pytest_perfgate.sim.pool import plan_threads

    rule = plan_threads(num_envs)
    counts = sorted(set(thread_counts or default_thread_counts(len(rule.usable), num_envs))
                    | {rule.nthread})
    return [(n, False) for n in counts] + ([(n, True) for n in counts] if pinned else [])


def settled_state(model: Any, num_envs: int, substeps: int = 300, distinct: int = 64,
                  seed: int = 0, keyframe: int = -1, cache: bool = True) -> Any:
    """A representative held state: ``distinct`` envs under random actions for ``substeps``,
    tiled to num_envs rows. Humanoids are on the ground, in contact, by 300 substeps (0.9 s);
    settling 64 and tiling costs 1/16 of settling 1024, at the same per-env step cost. With
    ``cache`` the settled rows are computed once per model and parameters and read back
    after (:mod:`.settled`: the counting worker skips settling under valgrind)."""
    import numpy as np

    from pytest_perfgate.sim.settled import settled_rows

    num_envs, distinct = _whole("num_envs", num_envs, 1), _whole("distinct", distinct, 1)
    substeps, seed = _whole("substeps", substeps, 0), _whole("seed", seed, 0)
    keyframe = _whole("keyframe", keyframe, -1)  # -1: the model's qpos0
    k = min(distinct, num_envs)
    rows = settled_rows(model, k, substeps, seed, keyframe, cache=cache)
    return np.tile(rows, (-(-num_envs // k), 1))[:num_envs].copy()


def _whole(name: str, value: object, least: int) -> int:
    """``value`` as an int if it is a whole number >= ``least``; else a ValueError naming it."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name}={value!r}: pass a whole number >= {least}")
    return int(value)


def pin_order(usable: tuple[int, ...]) -> list[int]:
    """One CPU per physical core first, then the SMT siblings: 'n pinned' spreads over cores."""
    from pytest_perfgate.placement.cpus import physical_cpus

    phys = list(physical_cpus(usable))
    return phys + [c for c in usable if c not in phys]


def run_sweep(model: Any, num_envs: int, *, frame_skip: int = 1,
              thread_counts: Sequence[int] | None = None, pinned: bool = True,
              turns: int = 20, per_turn: int = 1, settle_substeps: int = 300, seed: int = 0,
              clock: Clock = SYSTEM_CLOCK, progress: Progress = NULL_PROGRESS,
              **pool_kw: Any) -> SweepResult:
    """Build one pool per configuration, hold them all on one settled state, interleave.

    ``pool_kw`` go to every MujocoPool (keyframe, obs, reward_fn...)."""
    import warnings

    import numpy as np

    from pytest_perfgate.sim.pool import MujocoPool, plan_threads
    from pytest_perfgate.sim.threads import OversubscriptionWarning

    rule = plan_threads(num_envs)
    configs = thread_configs(num_envs, thread_counts, pinned)
    order = pin_order(rule.usable)
    pools: dict[tuple[int, bool], MujocoPool] = {}
    progress.started("thread sweep")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OversubscriptionWarning)
            for n, pin in configs:
                cpus = order[:min(n, len(order))] if pin else None
                pools[(n, pin)] = MujocoPool(model, num_envs, threads=n, cpu_ids=cpus,
                                             frame_skip=frame_skip, seed=seed, **pool_kw)
        first = pools[(rule.nthread, False)]
        rng = np.random.default_rng(seed)
        lo, hi = (first.model.actuator_ctrlrange.T if first.model.nu else (0.0, 0.0))
        actions = rng.uniform(lo, hi, (num_envs, first.model.nu))
        held = settled_state(first.model, num_envs, settle_substeps, seed=seed,
                             keyframe=first.keyframe_id)
        for p in pools.values():
            p.hold(held)
        calls = {_label(n, pin): (lambda p=p: p.step(actions)) for (n, pin), p in pools.items()}
        samples = interleave(calls, turns, per_turn, clock=clock, progress=progress,
                             steps_per_call=num_envs)
        ref = samples[_label(rule.nthread, False)]
        rows = []
        for n, pin in configs:
            s = samples[_label(n, pin)]
            ms = statistics.median(x[0] for x in s) * 1e3
            rows.append(SweepRow(n, pin, ms, statistics.median(x[1] for x in s),
                                 num_envs / ms * 1e3, median_ratio(s, ref),
                                 rule=(n == rule.nthread and not pin)))
        meta = first.metadata()
        meta["thread_rule"] = rule.reason
        progress.finished("thread sweep", f"{len(rows)} configurations x {turns} turns")
        return SweepResult(tuple(rows), num_envs, frame_skip, turns, meta)
    except BaseException as e:  # a status line on screen is ended, the reason given
        progress.finished("thread sweep", f"stopped by {type(e).__name__}")
        raise
    finally:
        for p in pools.values():
            p.close()


def resolve_model(name: str) -> str:
    """CLI model names: humanoid, g1, tiny, or a path to a model file."""
    from pytest_perfgate.sim import models

    if name == "humanoid":
        return models.humanoid_xml_path()
    if name == "tiny":
        return models.tiny_xml()
    if name == "g1":
        path = models.g1_scene_path()
        if path is None:
            raise SystemExit(models.G1_MISSING)
        return path
    return name


def write_json(path: str, data: dict[str, Any]) -> None:
    """Atomic write: a killed run never leaves half a file."""
    atomic_write(path, json.dumps(data, indent=1).encode("utf-8"))

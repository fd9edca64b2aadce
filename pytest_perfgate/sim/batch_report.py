"""A batch sweep's result: rows, the table, one JSON line per configuration, the JSON file."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class BatchRow:
    num_envs: int
    workers: int  # 0: one in-process pool
    envs_per_worker: int
    threads: int  # pool threads (per worker: its CPU slice)
    steps_per_s: float  # median over turns
    ms_per_step: float  # one batch step of one stepping loop (a worker's share)
    cores: float  # CPU seconds per wall second, all workers together
    vs_pool: float | None  # paired ratio of steps/s to the pool at the same num_envs
    vs_first: float  # paired ratio of steps/s to the sweep's first (smallest pool) row

    @property
    def run_as(self) -> str:
        if not self.workers:
            return "1 pool"
        return f"{self.workers} worker{'s' if self.workers > 1 else ''} x {self.envs_per_worker}"


def _ratio(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.3f}"


@dataclass(frozen=True)
class BatchSweepResult:
    rows: tuple[BatchRow, ...]
    frame_skip: int
    turns: int
    turn_s: float
    metadata: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        meta = self.metadata
        first = self.rows[0]
        lines = [f"MuJoCo batch sweep: {meta.get('source', '?')}, {self.frame_skip} substep(s), "
                 f"usable CPUs {meta.get('usable_cpus', '?')}, {self.turns} turns of "
                 f"{self.turn_s:g} s interleaved, medians (x: of paired per-turn ratios "
                 "of env-steps/s)",
                 f"| num_envs | run as | threads | k env-steps/s | ms/step (cores used) | "
                 f"x pool, same envs | x {first.num_envs} envs, {first.run_as} |",
                 "|---|---|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {r.num_envs} | {r.run_as} | {r.threads}"
                         f"{' each' if r.workers else ''} | {r.steps_per_s / 1e3:.1f} | "
                         f"{r.ms_per_step:.2f} ({r.cores:.2f}) | {_ratio(r.vs_pool)} | "
                         f"{_ratio(r.vs_first)} |")
        best = max(self.rows, key=lambda r: r.vs_first)
        lines.append(f"fastest: {best.num_envs} envs as {best.run_as}, "
                     f"{best.vs_first:.3f}x the env-steps/s of {first.num_envs} envs as "
                     f"{first.run_as}")
        return "\n".join(lines)

    def jsonl(self) -> str:
        """One self-contained JSON line per configuration (appended across sweeps)."""
        common = {"sweep": "batch", "frame_skip": self.frame_skip, "turns": self.turns,
                  "turn_s": self.turn_s, "mujoco": self.metadata.get("mujoco_version"),
                  "model_sha256": self.metadata.get("model_sha256")}
        return "".join(json.dumps({**common, **asdict(r)}, sort_keys=True, default=str) + "\n"
                       for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"format": 1, "sweep": "batch", "frame_skip": self.frame_skip,
                "turns": self.turns, "turn_s": self.turn_s, "metadata": self.metadata,
                "rows": [asdict(r) for r in self.rows]}

"""Profile both sides of an A/B pair in interleaved turns, after their verdict.

Each turn attaches py-spy to one side (and its subprocesses), runs one window there, and
stops the sampler: base, head, head, base, ... as the verdict's own turns, so the
machine's drift cancels within a pair here too. The verdict's turns are over before the
first profiled one, so sampling never disturbs what was judged; the sampler slows both
sides alike (it pauses a process to read its stacks), and the profile's per-step times are
read against each other, never against the verdict's rates.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import atomic_write
from pytest_perfgate.core.window import WindowSource
from pytest_perfgate.profile.attribute import Turn, attribute
from pytest_perfgate.profile.changed import Changes
from pytest_perfgate.profile.spy import ProfilerUnavailable, Recording, SpyConfig
from pytest_perfgate.profile.stacks import diff_folded, folded, merged, parse, where_time_goes

WHEN = ("regression", "always", "off")
PROFILE_TURNS = 6  # per side: a t interval over 6 pairs
PROFILE_TURN_S = 0.75


@dataclass(frozen=True)
class ProfilePlan:
    """When to profile (after a REGRESSION, always, never) and how long."""

    when: str = "regression"
    turns: int = PROFILE_TURNS
    turn_s: float = PROFILE_TURN_S
    spy: SpyConfig = field(default_factory=SpyConfig)

    def wanted(self, regression: bool) -> bool:
        return self.when == "always" or (self.when == "regression" and regression)


@dataclass(frozen=True)
class Target:
    """One side to profile: its windows, its process, and the tree its code runs from."""

    source: WindowSource
    pid: int
    root: Path


def _turn(target: Target, seconds: float, spy: SpyConfig, scratch: Path) -> Turn:
    rec = Recording(target.pid, scratch / f"{target.pid}.raw", spy)
    try:
        raw = target.source.run_window(seconds)
    except BaseException:
        rec.kill()
        raise
    text = rec.stop()
    return Turn(parse(text, (target.root,)), raw.transitions, raw.wall_s)


def profile_pair(base: Target, head: Target, plan: ProfilePlan, out_dir: Path, name: str,
                 changes: Changes | None, per: str = "env-step") -> dict[str, Any]:
    """Profile ``base`` and ``head`` in ABBA turns and subtract; the report's entry
    (:meth:`Attribution.to_json`, the flame graph files, the cost, ``per``: the benchmark's
    unit of work its times are per) or ``{"error": why}`` when py-spy cannot sample here.
    Side failures (:class:`SideError`) go on up."""
    started = time.monotonic()
    pairs: list[tuple[Turn, Turn]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="perfgate-profile-") as tmp:
            scratch = Path(tmp)
            for i in range(plan.turns):
                if i % 2 == 0:
                    b = _turn(base, plan.turn_s, plan.spy, scratch)
                    h = _turn(head, plan.turn_s, plan.spy, scratch)
                else:
                    h = _turn(head, plan.turn_s, plan.spy, scratch)
                    b = _turn(base, plan.turn_s, plan.spy, scratch)
                pairs.append((b, h))
    except ProfilerUnavailable as e:
        return {"error": str(e)}
    changed = None
    if changes is not None and changes.unknown is None:
        def changed(f: Any) -> bool | None:
            return changes.function_changed(f.file, f.line) if f.ours else False
    att = attribute(pairs, plan.spy.rate, changed, per=per)
    files = write_files(out_dir, name, pairs, plan.spy.rate)
    return {**att.to_json(), "per": per, "rate": plan.spy.rate, "native": plan.spy.native,
            "turn_s": plan.turn_s, "cost_s": round(time.monotonic() - started, 2),
            "files": files}


def write_files(out_dir: Path, name: str, pairs: list[tuple[Turn, Turn]], rate: float
                ) -> dict[str, str]:
    """base.folded, head.folded (ns per env-step per stack) and diff.folded (both
    columns), under ``out_dir/<name>``; the paths written. A folder that cannot be
    written leaves the profile without files, never the verdict without its profile."""
    folder = out_dir / re.sub(r"[^\w.-]+", "_", name)[:120]
    b = merged([p[0].stacks for p in pairs])
    h = merged([p[1].stacks for p in pairs])
    scale_b = 1e9 / rate / max(1, sum(p[0].steps for p in pairs))
    scale_h = 1e9 / rate / max(1, sum(p[1].steps for p in pairs))
    texts = {"base": folded(b, scale_b), "head": folded(h, scale_h),
             "diff": diff_folded(b, h, scale_b, scale_h)}
    out: dict[str, str] = {}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for key, text in texts.items():
            path = folder / f"{key}.folded"
            atomic_write(path, text.encode())
            out[key] = str(path)
    except OSError:
        return {}
    return out



def profile_one(target: Target, plan: ProfilePlan, out_dir: Path, name: str,
                per: str = "env-step") -> dict[str, Any]:
    """One side alone (history mode's own run, with nothing to subtract): where its time
    per ``per`` (its unit of work) goes, charged to the nearest function of the measured tree
    (:func:`where_time_goes`); the flame graph file; or ``{"error": why}``."""
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="perfgate-profile-") as tmp:
            turns = [_turn(target, plan.turn_s, plan.spy, Path(tmp))
                     for _ in range(plan.turns)]
    except ProfilerUnavailable as e:
        return {"error": str(e)}
    stacks = merged([t.stacks for t in turns])
    steps = max(1, sum(t.steps for t in turns))
    folder = out_dir / re.sub(r"[^\w.-]+", "_", name)[:120]
    files: dict[str, str] = {}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / "run.folded", folded(stacks, 1e9 / plan.spy.rate / steps)
                     .encode())
        files["run"] = str(folder / "run.folded")
    except OSError:
        pass
    return {"turns": len(turns), "per": per,
            "spent": where_time_goes(stacks, steps, plan.spy.rate),
            "rate": plan.spy.rate, "native": plan.spy.native, "turn_s": plan.turn_s,
            "cost_s": round(time.monotonic() - started, 2), "files": files}

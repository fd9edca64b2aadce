"""Lever pilot for the verdict-quality study: turn length x pinning, A/A only.

Two pairs of side processes of the same checkout stay alive side by side: one free to run
anywhere, one started with this process pinned to one CPU (the sides inherit it, so their
MuJoCo pools size themselves to one thread). Rounds visit every (pair, turn length) in a
random order, so the machine's drift hits every configuration alike. Each visit is one A/A
trial of ~``--seconds`` per side; what matters is the spread of the trial's mean log ratio
(the estimate's real noise at equal cost) and its bias.

    python tools/study_verdicts.py --rounds 6 --seconds 5 --out /tmp/levers.json

The full study is ``perfgate calibrate`` (pytest_perfgate/cli/calibrate.py); the figures
are in docs/verdict-quality.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
from pathlib import Path

import psutil

import pytest_perfgate
from pytest_perfgate.cli.calibrate import DEFAULT_NODEID
from pytest_perfgate.modes.ab import START_TIMEOUT_S, Pair, RemoteSource, Side, SideSpec, interleave


def start_pair(root: Path, nodeid: str, cpus: set[int] | None) -> Pair:
    plugin_root = str(Path(pytest_perfgate.__file__).resolve().parent.parent)
    before = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        pair = Pair(Side(SideSpec("base", root, calibration=True), nodeid, plugin_root),
                    Side(SideSpec("head", root, calibration=True), nodeid, plugin_root))
    finally:
        os.sched_setaffinity(0, before)
    for side in (pair.base, pair.head):
        side.recv(START_TIMEOUT_S, "its measure() call")
    return pair


class IdleWatch:
    """A source that also records how much CPU the *other* side burns while this one runs."""

    def __init__(self, src: RemoteSource, other_pid: int, sink: list[float]) -> None:
        self.src, self.other, self.sink = src, psutil.Process(other_pid), sink

    def run_window(self, d: float):
        c0 = sum(self.other.cpu_times()[:2])
        w = self.src.run_window(d)
        self.sink.append((sum(self.other.cpu_times()[:2]) - c0) / w.wall_s)
        return w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--turn-times", default="0.1,0.25,0.5")
    ap.add_argument("--pin", default="1")
    ap.add_argument("--out", type=Path, default=Path("/tmp/levers.json"))
    ns = ap.parse_args()
    root = Path.cwd()
    pinned = {int(c) for c in ns.pin.split(",")}
    pairs = {"free": start_pair(root, DEFAULT_NODEID, None),
             f"pinned{ns.pin}": start_pair(root, DEFAULT_NODEID, pinned)}
    turn_times = [float(x) for x in ns.turn_times.split(",")]
    rows = []
    try:
        srcs = {k: (RemoteSource(p.base), RemoteSource(p.head)) for k, p in pairs.items()}
        for b, h in srcs.values():
            b.inject_slowdown(0.0)
            h.inject_slowdown(0.0)
            interleave(b, h, 4, 0.25)  # warm
        rng = random.Random(0)
        t0 = time.monotonic()
        for r in range(ns.rounds):
            configs = [(k, t) for k in pairs for t in turn_times]
            rng.shuffle(configs)
            for k, t in configs:
                b, h = srcs[k]
                idle: list[float] = []
                turns = max(2, round(ns.seconds / t))
                pb, ph = pairs[k].base.proc.pid, pairs[k].head.proc.pid
                bw, hw = interleave(IdleWatch(b, ph, idle), IdleWatch(h, pb, idle), turns, t)
                d = [math.log((y.wall_s / y.transitions) / (x.wall_s / x.transitions))
                     for x, y in zip(bw, hw, strict=True)]
                rows.append({"round": r, "pair": k, "turn_s": t, "turns": turns,
                             "mean": statistics.fmean(d), "sd": statistics.stdev(d),
                             "median": statistics.median(d),
                             "speed": statistics.median(x.wall_s / x.transitions * 1e6 for x in bw),
                             "cores": statistics.median(x.cpu_s / x.wall_s for x in bw),
                             "idle_cpu": statistics.fmean(idle), "at": time.monotonic() - t0})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        for p in pairs.values():
            p.done()
            p.close()
    ns.out.write_text(json.dumps(rows))
    print(f"\n{'config':<20} {'n':>3} {'sd(trial mean)':>15} {'mean':>8} {'turn sd':>8} "
          f"{'s/Msteps':>9} {'idle cpu':>8}")
    for k in pairs:
        for t in turn_times:
            g = [x for x in rows if x["pair"] == k and x["turn_s"] == t]
            print(f"{k + ' ' + str(t) + 's':<20} {len(g):>3} "
                  f"{statistics.stdev(x['mean'] for x in g):>15.2%} "
                  f"{statistics.fmean(x['mean'] for x in g):>+8.2%} "
                  f"{statistics.median(x['sd'] for x in g):>8.2%} "
                  f"{statistics.median(x['speed'] for x in g):>9.0f} "
                  f"{statistics.fmean(x['idle_cpu'] for x in g):>8.2f}")


if __name__ == "__main__":
    main()

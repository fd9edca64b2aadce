"""The sequential A/B gate's error rates on many more trials than a machine can measure:
resampled from measured A/A trials.

Each simulated trial picks one recorded A/A trial of a ``perfgate calibrate --save`` study
and draws its turn pairs with replacement (pair by pair, so each pair keeps its base and
head turn and their outside loads), multiplies the head turns by 1 + slowdown, and feeds
them to the gate's own look loop (``run_looks``, the load-change rule included). This keeps
the measured per-turn noise, its tails and its load changes, and drops what resampling
cannot keep (drift across turns, which the ABBA pairs cancel). Each simulated trial keeps
its source trial's measured shift, which already holds that trial's noise, and adds
resampling noise of the same size: the error rates come out pessimistic. ``--center``
removes each trial's median shift first: only the shape of the noise is kept, and the
rates come out optimistic. The two bracket the truth; the measured trials are the
evidence (docs/ab.md).

    git show origin/study-data:2026-12-01/quiet2.json > quiet2.json   # docs/studies.md
    python tools/sim_sequential.py quiet2.json \
        [--runs 20000] [--turns 192] [--looks 4] [--slowdowns 0,0.02,0.03]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

from pytest_perfgate.core.gate import Outcome
from pytest_perfgate.core.sequential import plan
from pytest_perfgate.core.window import Window
from pytest_perfgate.modes.ab.abba import run_looks
from pytest_perfgate.study.analysis import LOAD_CHANGE
from pytest_perfgate.study.findings import Rate
from pytest_perfgate.study.studyfile import load


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("studies", nargs="+", type=Path)
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--turns", type=int, default=None, help="most turns (default: the study's)")
    ap.add_argument("--looks", type=int, default=None)
    ap.add_argument("--slowdowns", default="0,0.02,0.03")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--center", action="store_true",
                    help="remove each trial's median shift (optimistic; default pessimistic)")
    args = ap.parse_args()
    trials, cfg = [], None
    for path in args.studies:
        cfg, got, _ = load(path)
        trials += [t for t in got if t.slowdown == 0 and t.steady and len(t.base) >= 8]
    if not trials or cfg is None:
        print("no steady A/A trials in these studies", file=sys.stderr)
        return 2
    turns, looks = args.turns or cfg.turns, args.looks or cfg.looks
    rule = cfg.rule()
    design = plan(turns, looks, rule.alpha)
    rng = random.Random(args.seed)
    print(f"{len(trials)} A/A trials ({sum(len(t.base) for t in trials)} turn pairs) from "
          f"{', '.join(map(str, args.studies))}; design: at most {turns} turns, {looks} "
          f"looks, threshold {rule.threshold:.0%}, alpha {rule.alpha}; {args.runs} runs each, "
          f"{'centred (optimistic)' if args.center else 'uncentred (pessimistic)'}:")
    for s in (float(x) for x in args.slowdowns.split(",")):
        counts = {o: 0 for o in Outcome}
        used = 0
        for _ in range(args.runs):
            t = rng.choice(trials)
            loads = t.loads or ((None, None),) * len(t.base)
            shift = statistics.median(h / b for b, h in zip(t.base, t.head, strict=True)) \
                if args.center else 1.0
            pool = [(b, h / shift, ld) for b, h, ld in zip(t.base, t.head, loads, strict=True)]

            def feed(i: int, pool: list = pool, s: float = s) -> tuple[Window, Window]:
                b, h, (lb, lh) = rng.choice(pool)
                return (Window(10**6, b, 0.0, other_load=lb),
                        Window(10**6, h * (1 + s), 0.0, other_load=lh))

            looks_ = run_looks(feed, design, rule, LOAD_CHANGE)
            counts[looks_.verdict.outcome] += 1
            used += len(looks_.pairs)
        bad = counts[Outcome.REGRESSION]
        rate = Rate(bad, args.runs)
        what = "false alarms" if s == 0 else "caught"
        print(f"  +{s:.0%}: {what} {rate}; INCONCLUSIVE {counts[Outcome.INCONCLUSIVE]}, "
              f"OK {counts[Outcome.OK]}, IMPROVEMENT {counts[Outcome.IMPROVEMENT]}; "
              f"{used / args.runs:.0f} turn pairs per verdict")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

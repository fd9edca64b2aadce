"""How often asv's own step detection flags a step in perfgate's gated series, by weighting.

asv publish weights each commit's point by 2 / (width of its 99% interval) and runs its
Potts step detector (asv.step_detect) on the per-commit values; the Regressions page lists a
series when detect_regressions finds a jump. This simulates perfgate's exported rows (a run
median and asv's own compute_stats over the run's windows) for a step still present at the
newest commits, with run-to-run drift that no run's interval shows, and counts how often
asv flags it with the intervals perfgate exports, with none (equal weights), and with each
interval floored at the drift. Seeded: the figures repeat exactly.

    python tools/study_asv_steps.py [--trials 300] [--drift 0.02]
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Sequence

from asv import _stats
from asv.step_detect import detect_regressions, detect_steps
from asv_runner.statistics import compute_stats  # type: ignore[import-untyped]

# (level factor, window noise) per commit: a 10% step after five commits, still present.
PLANS = {
    "one tight run after the step": [(1.0, .02)] * 5 + [(1.1, .02), (1.1, .002), (1.1, .02),
                                                        (1.1, .02)],
    "one tight run before the step": [(1.0, .02)] * 4 + [(1.0, .002)] + [(1.1, .02)] * 4,
    "window noise 0.5-3%": [(1.0, n) for n in (.01, .03, .005, .02, .01)]
    + [(1.1, n) for n in (.03, .005, .02, .01)],
    "intervals 2-27% wide": [(1.0, n) for n in (.02, .08, .005, .05, .03)]
    + [(1.1, n) for n in (.08, .005, .06, .04)],
}


def flagged(values: Sequence[float], weights: Sequence[float | None] | None) -> bool:
    """What asv's Regressions page decides for one series (threshold 5%, its default)."""
    steps = detect_steps(list(values), None if weights is None else list(weights))
    latest, best, jumps = detect_regressions(steps, 0.05)
    return bool(jumps) and latest / best >= 1.05


def trial(plan: Sequence[tuple[float, float]], windows: int, drift: float,
          rng: random.Random) -> dict[str, bool]:
    values, exported, floored = [], [], []
    for factor, noise in plan:
        level = 1e-6 * factor * math.exp(rng.gauss(0, drift))
        samples = [level * math.exp(rng.gauss(0, noise)) for _ in range(windows)]
        value, stats = compute_stats(samples, 1)
        values.append(value)
        exported.append(_stats.get_weight(stats))
        half = (stats["ci_99_b"] - stats["ci_99_a"]) / 2
        floored.append(1 / max(half, value * 2.576 * drift))
    return {"exported intervals": flagged(values, exported), "no intervals":
            flagged(values, None), "intervals floored at the drift": flagged(values, floored)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--drift", type=float, default=0.02, help="run-to-run sigma (log)")
    args = ap.parse_args()
    for name, plan in PLANS.items():
        for windows in (4, 8):
            rng = random.Random(0)
            counts: dict[str, int] = {}
            for _ in range(args.trials):
                for k, hit in trial(plan, windows, args.drift, rng).items():
                    counts[k] = counts.get(k, 0) + hit
            shown = ", ".join(f"{k} {v}/{args.trials}" for k, v in counts.items())
            print(f"{name}, {windows} windows, drift {args.drift:.0%}: {shown}")


if __name__ == "__main__":
    main()

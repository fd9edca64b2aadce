"""Which change-point library finds known steps in perfgate's series, under this machine's noise?

Synthetic series of N run medians (log scale) with one known step (+1%, +3%, +10% time per
env-step) at varied positions, plus A/A series (no step), under three noise models:

* ``counts``: instruction counts, Gaussian, sigma from docs/counts.md's counts study (10 workers
  ranged 0.00007%: sigma ~ range / 3.08, the expected range of 10 normals);
* ``here``: the log deviations of real run medians of one unchanged benchmark recorded on
  this machine (``--noise-from``), resampled i.i.d.;
* ``here-in-order``: that real series itself, in recorded order (its drift episodes kept), a
  step multiplied onto its tail;
* ``here-calm``: Gaussian, sigma = the robust point-to-point noise of that real series (MAD of
  successive differences: the noise between drift episodes, a lower bound);
* ``trust-study``: Gaussian, sigma from docs/measurement.md's trust study (run medians of unchanged
  code ranged 82-444 s/Msteps over ~50 runs in 35 minutes: sigma ~ ln(5.4) / 4.5).

Per library: detection rate (a change point within +-2 runs of the step), false change
points per series, mean position error of the detected ones, runtime per series. Libraries
that cannot share perfgate's environment (signal-processing-algorithms pins numpy < 2,
apache-otava pulls BigQuery and older scipy) run in their own interpreter (--python-spa,
--python-otava), this file acting as the worker (``--worker LIB``).

    python tools/study_changepoints.py --noise-from RESULTS --machine here --bench humanoid \
        --python-spa /tmp/spa/bin/python --python-otava /tmp/otava/bin/python
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STEPS = (0.01, 0.03, 0.10, 0.30, 1.00)  # the last two: what wall time here can see
TOLERANCE = 2  # runs between the found and the true position that still count as found


def worker(lib: str) -> None:
    """Read {"series": [[log values]...], "seed": int} on stdin, print found change points."""
    import numpy as np

    job = json.load(sys.stdin)
    out, t0 = [], time.perf_counter()
    if lib == "spa":
        from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

        np.random.seed(job["seed"])  # its permutation test draws from numpy's global state
        out = [sorted(int(i) for i in e_divisive(np.asarray(x), pvalue=0.05,
                                                 permutations=100)) for x in job["series"]]
    elif lib == "otava":
        from otava.analysis import compute_change_points

        out = [sorted(int(c.index) for c in compute_change_points(
            list(x), window_len=50, max_pvalue=0.001)[0]) for x in job["series"]]
    print(json.dumps({"cps": out, "seconds": time.perf_counter() - t0}))


def detect_ruptures(series: list[list[float]]) -> tuple[list[list[int]], float]:
    """perfgate's own wrapper (ruptures PELT), on the exponentiated values it is given."""
    from pytest_perfgate.report.changepoints import detect

    t0 = time.perf_counter()
    out = [[c.index for c in detect([math.exp(v) for v in x])] for x in series]
    return out, time.perf_counter() - t0


def real_medians(results: Path, machine: str, bench: str) -> list[float]:
    from pytest_perfgate.history.store import History

    runs = History(results, machine).load_runs()
    names = {n for r in runs for n in r.benchmarks if bench in n}
    if len(names) != 1:
        sys.exit(f"--bench {bench!r} matches {sorted(names)}: give one benchmark")
    name = names.pop()
    return [r.benchmarks[name].value for r in runs if name in r.benchmarks]


def make_cases(args: argparse.Namespace, real: list[float]) -> list[dict[str, Any]]:
    """Every series of the study with its noise model, step and true position."""
    import numpy as np

    rng = np.random.default_rng(args.seed)
    n = args.runs
    logs = np.log(real)
    devs = logs - np.median(logs)
    from pytest_perfgate.report.changepoints import noise

    calm = noise(real)
    noises: dict[str, Any] = {
        "counts": lambda: rng.normal(0, 0.0000007 / 3.08, n),
        "here": lambda: rng.choice(devs, n, replace=True),
        "here-calm": lambda: rng.normal(0, calm, n),
        "trust-study": lambda: rng.normal(0, math.log(444 / 82) / 4.5, n),
    }
    cases = []
    for model, draw in noises.items():
        for step in (0.0, *STEPS):
            for pos in ((None,) if step == 0 else (n // 5, n // 2, n - n // 5)):
                for _ in range(args.trials if step else 3 * args.trials):
                    x = draw()
                    if pos is not None:
                        x[pos:] += math.log1p(step)
                    cases.append({"model": model, "step": step, "pos": pos, "x": list(x)})
    m = len(logs)  # the real series in its own order: A/A once, then steps at 4 positions
    cases.append({"model": "here-in-order", "step": 0.0, "pos": None, "x": list(devs)})
    for step in STEPS:
        for pos in (m // 5, 2 * m // 5, 3 * m // 5, 4 * m // 5):
            x = devs.copy()
            x[pos:] += math.log1p(step)
            cases.append({"model": "here-in-order", "step": step, "pos": pos, "x": list(x)})
    return cases


def run_lib(lib: str, python: str | None, series: list[list[float]], seed: int
            ) -> tuple[list[list[int]], float] | None:
    if lib == "ruptures":
        return detect_ruptures(series)
    if python is None:
        return None
    got = subprocess.run([python, __file__, "--worker", lib], check=True, text=True,
                         input=json.dumps({"series": series, "seed": seed}),
                         capture_output=True, timeout=1800)
    data = json.loads(got.stdout)
    return data["cps"], data["seconds"]


def score(cases: list[dict[str, Any]], found: list[list[int]]) -> dict[tuple[str, float], Any]:
    cells: dict[tuple[str, float], Any] = {}
    for case, cps in zip(cases, found, strict=True):
        c = cells.setdefault((case["model"], case["step"]),
                             {"n": 0, "hit": 0, "false": 0, "err": []})
        c["n"] += 1
        near = [i for i in cps if case["pos"] is not None and abs(i - case["pos"]) <= TOLERANCE]
        if near:
            c["hit"] += 1
            c["err"].append(min(abs(i - case["pos"]) for i in near))
        c["false"] += len(cps) - (1 if near else 0)
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--noise-from", type=Path, help="results dir holding the real runs")
    ap.add_argument("--machine", default="here")
    ap.add_argument("--bench", default="humanoid")
    ap.add_argument("--runs", type=int, default=40, help="runs per synthetic series")
    ap.add_argument("--trials", type=int, default=10, help="series per (noise, step) cell")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--python-spa", help="interpreter with signal-processing-algorithms")
    ap.add_argument("--python-otava", help="interpreter with apache-otava")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker)
    if args.noise_from is None:
        ap.error("--noise-from RESULTS is required (a results dir with real runs)")
    from pytest_perfgate.report.changepoints import noise

    real = real_medians(args.noise_from, args.machine, args.bench)
    logs = [math.log(v) for v in real]
    print(f"real series: {len(real)} runs of {args.bench!r}, run medians "
          f"{min(real):.4g}-{max(real):.4g} ({max(real) / min(real):.2f}x), stdev of log "
          f"{statistics.stdev(logs):.3f}, robust point-to-point sigma (here-calm) "
          f"{noise(real):.3f}")
    cases = make_cases(args, real)
    series = [c["x"] for c in cases]
    for lib, py in (("ruptures", None), ("spa", args.python_spa), ("otava", args.python_otava)):
        got = run_lib(lib, py, series, args.seed)
        if got is None:
            print(f"\n{lib}: skipped (no interpreter given)")
            continue
        found, seconds = got
        print(f"\n{lib}: {seconds / len(series) * 1000:.1f} ms per series "
              f"({len(series)} series)")
        print(f"  {'noise':<14} {'step':>5} {'series':>6} {'detected':>9} {'false/series':>12}"
              f" {'pos err':>7}")
        for (model, step), c in score(cases, found).items():
            rate = "-" if step == 0 else f"{c['hit'] / c['n']:.0%}"
            err = f"{statistics.fmean(c['err']):.2f}" if c["err"] else "-"
            print(f"  {model:<14} {step:>5.0%} {c['n']:>6} {rate:>9} "
                  f"{c['false'] / c['n']:>12.2f} {err:>7}")


if __name__ == "__main__":
    main()

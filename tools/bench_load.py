"""What the installed plugin costs a pytest run that does not use ``--perfgate``.

Two figures (docs/measurement.md, "What the plugin costs when unused"):

- time: a small project's pytest run with the plugin vs the same run with
  ``-p no:perfgate``, alternated (A, B, A, B, ...; bytecode cached, a warm-up pair first),
  the medians of each side and of the per-pair differences, so the machine's drift cancels;
- modules: in a fresh interpreter, which of the package's own modules, and which heavy ones
  (numpy, scipy, statistics, fractions, psutil, ...), that same run loaded.

    python tools/bench_load.py [--pairs 40] [--tests 50]

Target: <= 15 ms added, <= 8 package modules, no heavy module.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("numpy", "scipy", "statistics", "fractions", "psutil", "asv", "filelock",
         "mujoco", "torch", "multiprocessing", "ctypes")

COUNT = f"""\
import sys, pytest
HEAVY = {HEAVY!r}
rc = pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[2:], sys.argv[1]])
ours = sorted(m for m in sys.modules if m == "pytest_perfgate" or
              m.startswith("pytest_perfgate."))
heavy = sorted(m for m in HEAVY if m in sys.modules)
print("PERFGATE-MODULES " + __import__("json").dumps({{"rc": int(rc), "ours": ours,
                                                       "heavy": heavy}}))
"""


def make_project(where: Path, tests: int) -> Path:
    """A project that knows nothing of perfgate: ``tests`` trivial tests, a pytest.ini."""
    (where / "pytest.ini").write_text("[pytest]\n")
    body = "".join(f"def test_{i}():\n    assert {i} + 1 > {i}\n\n" for i in range(tests))
    (where / "test_plain.py").write_text(body)
    return where


def run_once(project: Path, disable: bool) -> float:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project)]
    if disable:
        cmd[3:3] = ["-p", "no:perfgate"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=project)
    dt = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"pytest failed ({' '.join(cmd)}):\n{done.stdout}\n{done.stderr}")
    return dt


def modules(project: Path, disable: bool = False) -> dict[str, object]:
    extra = ["-p", "no:perfgate"] if disable else []
    done = subprocess.run([sys.executable, "-c", COUNT, str(project), *extra],
                          capture_output=True, text=True, cwd=project)
    for line in done.stdout.splitlines():
        if line.startswith("PERFGATE-MODULES "):
            out: dict[str, object] = json.loads(line.split(" ", 1)[1])
            return out
    raise SystemExit(f"no module list printed:\n{done.stdout}\n{done.stderr}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pairs", type=int, default=40, help="alternated pairs (default 40)")
    ap.add_argument("--tests", type=int, default=50, help="trivial tests in the project")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfgate-load-") as tmp:
        project = make_project(Path(tmp), args.tests)
        run_once(project, False)  # compile the bytecode of both sides, warm the disk cache
        run_once(project, True)
        on, off, diff = [], [], []
        for i in range(args.pairs):
            first_off = i % 2 == 1  # alternate the order inside a pair too
            a = run_once(project, first_off)
            b = run_once(project, not first_off)
            t_on, t_off = (b, a) if first_off else (a, b)
            on.append(t_on)
            off.append(t_off)
            diff.append(t_on - t_off)
        mods = modules(project)
        without = modules(project, disable=True)
    ours = mods["ours"]
    assert isinstance(ours, list)
    # heavy modules pytest or another installed plugin loads anyway are not ours
    heavy = sorted(set(mods["heavy"]) - set(without["heavy"]))  # type: ignore[call-overload]
    print(f"load average {os.getloadavg()[0]:.2f}; {args.pairs} alternated pairs, "
          f"{args.tests} trivial tests")
    print(f"with the plugin:     median {statistics.median(on) * 1e3:7.1f} ms")
    print(f"-p no:perfgate:      median {statistics.median(off) * 1e3:7.1f} ms")
    print(f"added (paired):      median {statistics.median(diff) * 1e3:7.1f} ms "
          f"(quartiles {statistics.quantiles(diff, n=4)[0] * 1e3:.1f} .. "
          f"{statistics.quantiles(diff, n=4)[2] * 1e3:.1f} ms)")
    print(f"package modules loaded: {len(ours)}: {', '.join(ours)}")
    print(f"heavy modules it added: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()

"""Start a counting worker (one perf test under callgrind) and read back its counts.

The worker is a pytest run of the one test, like an A/B side (the step is a closure the
test's fixtures build, so it cannot be pickled into a placement worker; re-running the test
rebuilds it). It runs deterministic: one CPU in its affinity mask (so pools size themselves
to one simulation thread), BLAS/OpenMP/torch at one thread, ``PYTHONHASHSEED=0``,
``PYTHONMALLOC=malloc``, ASLR off through ``setarch -R`` when that works (docs/design.md §10).
Every wait is bounded; a worker that overruns is killed with its process group.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_perfgate.core import group
from pytest_perfgate.modes.counts import client, phases
from pytest_perfgate.modes.counts.worker import ENV_OUT
from pytest_perfgate.sim.settled import CACHE_ENV, cache_dir

TIMEOUT_S = 600.0  # start-up under valgrind, the test's own set-up, 3 calls of the step
L1_MISS_CYCLES = 10  # estimated cycles = Ir + 10 x L1 misses + 100 x LL misses (KCachegrind)
LL_MISS_CYCLES = 100
INSTALL = "install valgrind (`apt-get install valgrind`) or run without --perfgate-counts"
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "NUMEXPR_NUM_THREADS")


class CountsError(RuntimeError):
    """The counting worker failed (crashed, hung, wrote no counts): infrastructure, not a
    verdict."""


@dataclass(frozen=True)
class Counts:
    """One benchmark's counted calls: instructions and estimated cycles per call."""

    name: str
    transitions: int
    instructions: tuple[int, ...]
    est_cycles: tuple[int, ...]
    events: dict[str, int] = field(default_factory=dict)  # the last call's raw events
    phases_s: dict[str, float] = field(default_factory=dict)  # where the worker's time went
    phase_ir: dict[str, tuple[int, ...]] = field(default_factory=dict)  # Ir per phase, per call

    def per_step(self) -> tuple[float, ...]:
        return tuple(i / self.transitions for i in self.instructions)

    def cycles_per_step(self) -> tuple[float, ...]:
        return tuple(c / self.transitions for c in self.est_cycles)


def unavailable() -> str | None:
    """Why counts cannot be taken here (a skip reason naming the fix), or None."""
    why = client.unsupported()
    if why:
        return why
    if shutil.which("valgrind") is None:
        return f"instruction counts need valgrind, which is not on PATH: {INSTALL}"
    return None


def est_cycles(events: dict[str, int]) -> int:
    """Ir + 10 x (I1mr + D1mr + D1mw) + 100 x (ILmr + DLmr + DLmw)."""
    l1 = sum(events.get(k, 0) for k in ("I1mr", "D1mr", "D1mw"))
    ll = sum(events.get(k, 0) for k in ("ILmr", "DLmr", "DLmw"))
    return events.get("Ir", 0) + L1_MISS_CYCLES * l1 + LL_MISS_CYCLES * ll


def read_dump(path: Path) -> tuple[str | None, dict[str, int]]:
    """(trigger label, totals per event) of one callgrind dump file."""
    trigger, names, totals = None, [], []
    with path.open(errors="replace") as f:
        for line in f:
            if line.startswith("desc: Trigger: Client Request: "):
                trigger = line.split(": ", 3)[-1].strip()
            elif line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith("summary:") or line.startswith("totals:"):
                totals = [int(x) for x in line.split()[1:]]
    totals += [0] * (len(names) - len(totals))  # callgrind drops trailing zeros
    return trigger, dict(zip(names, totals, strict=True))


def command(nodeid: str, plugin_root: str, out: Path) -> list[str]:
    """The worker's command line: [setarch -R] valgrind callgrind python -c boot nodeid."""
    boot = ("import os, sys; cpu = min(os.sched_getaffinity(0)); "
            f"os.sched_setaffinity(0, {{cpu}}); sys.path.insert(0, {plugin_root!r}); "
            "import pytest_perfgate.plugin.hooks; sys.path.pop(0); import pytest; "
            "sys.exit(pytest.main(sys.argv[1:]))")
    vg = [shutil.which("valgrind") or "valgrind", "--tool=callgrind", "--collect-atstart=no",
          "--instr-atstart=no", "--cache-sim=yes", "--dump-line=no",
          f"--callgrind-out-file={out / 'cg.out'}", "--log-file=" + str(out / "valgrind.log")]
    py = [sys.executable, "-c", boot, nodeid, "-q", "-p", "no:cacheprovider", "-p",
          "no:randomly", "-p", "no:xdist"]
    return aslr_off() + vg + py


def aslr_off() -> list[str]:
    """``setarch -R`` when it works here (a container may refuse the personality call)."""
    setarch = shutil.which("setarch")
    if setarch is None:
        return []
    ok = subprocess.run([setarch, "-R", "true"], capture_output=True, timeout=10)
    return [setarch, "-R"] if ok.returncode == 0 else []


def worker_env(out: Path) -> dict[str, str]:
    """The worker's environment: deterministic, and pointed at the parent's settled-state
    cache (a relative or defaulted folder resolved here, so both read one file)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PERFGATE_SIDE_FD")}
    env.update({ENV_OUT: str(out), "PYTHONHASHSEED": "0", "PYTHONMALLOC": "malloc"})
    env.update({k: "1" for k in THREAD_ENV})
    cache = cache_dir()  # the folder this process, which ran the test first, settled into
    if cache is not None:
        env[CACHE_ENV] = str(cache)
    return env


def run_counts(nodeid: str, cwd: Path, timeout_s: float = TIMEOUT_S) -> dict[str, Counts]:
    """Run test ``nodeid`` under callgrind; its counts per benchmark name."""
    why = unavailable()
    if why:
        raise CountsError(why)
    plugin_root = str(Path(__file__).resolve().parents[3])
    with tempfile.TemporaryDirectory(prefix="perfgate-counts-") as tmp:
        out = Path(tmp)
        args = command(nodeid, plugin_root, out)
        (out / "started").write_text(repr(time.time()))
        with (out / "worker.log").open("wb") as log:
            proc = group.popen(args, cwd=cwd, env=worker_env(out), stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                code = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                raise CountsError(f"the counting worker for {nodeid} ran over {timeout_s:g} s "
                                  f"and was killed.{_tail(out)}") from None
            except BaseException:  # interrupted (Ctrl-C, SIGTERM): the worker goes too
                _kill(proc)
                raise
        return collect(out, nodeid, code)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """End the worker's process group (valgrind and anything it started) at once: nothing
    of a count outlives its run; bounded."""
    group.stop(proc, term_wait=0.0, kill_wait=30.0)


def collect(out: Path, nodeid: str, code: int) -> dict[str, Counts]:
    """The counts a finished worker left in ``out``."""
    dumps = phases.read_dumps(sorted(out.glob("cg.out*")), read_dump)
    found: dict[str, Counts] = {}
    for path in sorted(out.glob("bench-*.json")):
        entry = json.loads(path.read_text())
        if "error" in entry:
            raise CountsError(f"{entry['name']}: {entry['error']}")
        missing = [lb for lb in entry["labels"] if lb not in dumps]
        if missing:
            raise CountsError(f"the counting worker for {nodeid} left no dump for "
                              f"{missing[0]}.{_tail(out)}")
        calls = [phases.split_call(dumps, lb) for lb in entry["labels"]]  # (whole, phases)
        ev = [whole for whole, _ in calls]
        names = sorted({p for _, per in calls for p in per})
        found[entry["name"]] = Counts(entry["name"], int(entry["transitions"]),
                                      tuple(e.get("Ir", 0) for e in ev),
                                      tuple(est_cycles(e) for e in ev), ev[-1],
                                      _phases(out, entry),
                                      {p: tuple(per.get(p, 0) for _, per in calls)
                                       for p in names})
    if not found:
        raise CountsError(f"the counting worker for {nodeid} (exit code {code}) reached no "
                          f"perfgate.measure() call.{_tail(out)}")
    return found


def _phases(out: Path, entry: dict[str, Any]) -> dict[str, float]:
    """Seconds from the worker's start to its measure() call, then per part of counting."""
    phases = dict(entry.get("phases_s") or {})
    try:
        started = float((out / "started").read_text())
        phases = {"to_measure": float(entry["reached_at"]) - started, **phases}
    except (KeyError, OSError, TypeError, ValueError):
        pass  # timing is informative only
    return phases


def _tail(out: Path, lines: int = 25) -> str:
    text = []
    for name in ("worker.log", "valgrind.log"):
        p = out / name
        if p.exists():
            text += p.read_text(errors="replace").splitlines()[-lines:]
    return ("\nIts output ends with:\n" + "\n".join(text)) if text else ""

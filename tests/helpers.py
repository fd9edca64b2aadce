"""What several test modules share: recorded histories, asv rows, plugin test projects, the
progress tests' fake status line, a fake NUMA sysfs tree, the calibration study's fake
machine, and skipping for a missing tool.

One module of helpers, imported by the tests (``from helpers import ...``), so no test
module imports another.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fake_session import FAKE_CLOCK_CONFTEST

from pytest_perfgate.core.metric import INSTRUCTIONS
from pytest_perfgate.core.progress import Progress
from pytest_perfgate.core.results import BenchRecord, PhaseSummary, RunRecord
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.history.asv import COUNTS_SOURCE, SERIES_VERSION
from pytest_perfgate.history.asv_schema import ASV_RESULT_COLUMNS
from pytest_perfgate.history.store import History
from pytest_perfgate.study import trials as cal

# --- external tools the tests need -----------------------------------------------------------

NODE_DIR = Path(__file__).parent / "node"  # the node packages the tests use (package.json)


def need_tool(reason: str) -> None:
    """Skip with the reason, or fail where CI installed the tools (PERFGATE_REQUIRE_TOOLS=1)."""
    if os.environ.get("PERFGATE_REQUIRE_TOOLS") == "1":
        pytest.fail(reason + " (PERFGATE_REQUIRE_TOOLS=1: this CI installs it, so it must run)")
    pytest.skip(reason)


# --- recorded histories (the `perfgate` command tests) ---------------------------------------

PERF = """
import time
SLOW = {slow}
try:
    from conftest import CLOCK  # a project on the fake clock (repo(..., fake_clock=True))
except ImportError:
    pass
def test_walk(perfgate):
    def step():
        with perfgate.phase("physics"):
            {body}
    perfgate.measure(step, transitions=8)
"""

# a perf test with two measure() calls: "warm" the same everywhere, "walk" SLOW times slower
TWO_CALLS = """
import time
SLOW = {slow}
def test_walk(perfgate):
    perfgate.measure(lambda: time.sleep(0.002), transitions=8, name="warm")
    perfgate.measure(lambda: time.sleep(0.002 * SLOW), transitions=8, name="walk")
"""


ARGS = ["--perfgate", "--perfgate-machine=ab", "--perfgate-ab=HEAD~1", "--perfgate-threshold=10%",
        "--perfgate-ab-turns=6", "--perfgate-ab-turn-time=0.05", "--perfgate-warmup-max=5",
        "-p", "no:cacheprovider"]


def git(p: pytest.Pytester, *args: str) -> None:
    subprocess.run(["git", *args], cwd=p.path, check=True, capture_output=True)


# A perf test's step on the project's fake clock (FAKE_CLOCK_CONFTEST): SLOW times 2 ms of fake
# time per step, so a run measures in no real time and its verdict is exact. What a test checks
# of the mode's logic (paths, pairs, exit codes, records) needs no real time; the few tests of
# the measurement itself keep real sleeps and are marked `timing`.
FAKE_STEP = "CLOCK.advance(0.002 * SLOW)"


def project_start(p: pytest.Pytester, fake_clock: bool = True) -> None:
    """A git repository with a committer, an ini keeping history in results/ and, with
    ``fake_clock``, the fake clock's conftest: where every scratch project starts."""
    git(p, "init", "-q")
    git(p, "config", "user.email", "t@example.com")
    git(p, "config", "user.name", "t")
    p.makeini("[pytest]\nperfgate_results_dir = results\n")
    if fake_clock:
        p.makeconftest(FAKE_CLOCK_CONFTEST)


def repo(p: pytest.Pytester, head_body: str, head_slow: float = 1.0,
         base_body: str = "time.sleep(0.002 * SLOW)", fake_clock: bool = False) -> None:
    """A git project of two commits, base and head, each with test_perf.py (PERF).

    ``fake_clock``: the project's conftest.py is FAKE_CLOCK_CONFTEST (in both commits, so
    the A/B sides and bisect probes of either revision run on it), and the steps may use
    ``CLOCK`` (FAKE_STEP)."""
    project_start(p, fake_clock)
    p.makepyfile(test_perf=PERF.format(slow=1.0, body=base_body))
    git(p, "add", "-A")
    git(p, "commit", "-qm", "base")
    p.makepyfile(test_perf=PERF.format(slow=head_slow, body=head_body))
    git(p, "commit", "--allow-empty", "-qam", "head")


CONFTEST = FAKE_CLOCK_CONFTEST + """
def pytest_perfgate_machine_info(config, info):
    if os.environ.get("FAKE_MUJOCO"):
        info["versions"] = {**info["versions"], "mujoco-core": os.environ["FAKE_MUJOCO"]}
    if os.environ.get("FAKE_CPU"):
        info["cpu_model"] = os.environ["FAKE_CPU"]

def pytest_perfgate_verdict(config, judged):
    outcome = "SMOKE" if judged.verdict is None else judged.verdict.outcome.value
    with open("verdicts.log", "a") as f:
        f.write(f"{judged.result.name} {outcome}\\n")
"""


PERF_TEST = """
import os, random
from conftest import CLOCK

def test_walk(perfgate):
    slow = float(os.environ.get("SLOW", "1"))
    seed = int(os.environ.get("PERF_SEED", "0"))  # one per run: reproducible, yet runs differ
    run = random.Random(seed).gauss(0, 0.01)   # run-to-run drift
    rng = random.Random(seed + 1000)
    def step():
        with perfgate.phase("physics"):
            CLOCK.advance(0.001 * slow * (1 + run + rng.gauss(0, 0.01)))
        with perfgate.phase("observe"):
            CLOCK.advance(0.0002)
    perfgate.measure(step, transitions=16)
"""


C1, C2, C3 = "1" * 40, "2" * 40, "3" * 40


PARAMS = {"machine": "box", "os": "Linux", "arch": "x86_64", "cpu": "CPU X",
          "num_cpu": "2", "ram": "1GiB", "python": "3.11"}


ENV = "virtualenv-py3.11"


def asv_writes(h: History, commit: str, rows: dict[str, list[Any]], date: int = 1_700_000_000_000
               ) -> Path:
    """What `asv run` leaves behind: its result file (merged with ours if present), and
    the machine's machine.json."""
    h.machine_dir.mkdir(parents=True, exist_ok=True)
    if not (h.machine_dir / "machine.json").exists():
        (h.machine_dir / "machine.json").write_text(json.dumps({**PARAMS, "version": 1}))
    path = h.machine_dir / f"{commit[:8]}-{ENV}.json"
    old = json.loads(path.read_text()) if path.exists() else {"results": {}}
    data = {"commit_hash": commit, "env_name": ENV, "date": date, "params": PARAMS,
            "python": "3.11", "requirements": {}, "env_vars": {},
            "result_columns": ASV_RESULT_COLUMNS, "results": {**old["results"], **rows},
            "durations": {}, "version": 2}
    path.write_text(json.dumps(data))
    return path


def asv_row(value: float | None, started_ms: int, version: str = SERIES_VERSION) -> list[Any]:
    return [[value], [], version, started_ms, 21.5]  # asv always stores a duration


def record(results: Path, levels: Sequence[float], machine: str = "box",
           names: Sequence[str] = ("walk",), mode: str = "history",
           counts: Sequence[float] | None = None, sigma: float = 0.0,
           first_commit: int = 1, dirty: bool = False,
           fingerprints: Sequence[str] = (), test_file: str | None = None,
           commits: Sequence[str] = ()) -> list[RunRecord]:
    """One run per level (s/Msteps), each at its own commit (1111..., 2222..., wrapping;
    ``commits``: these instead); ``counts``: instructions per env-step of each run (a
    ``<name>.counts`` result)."""
    rng = random.Random(7)
    runs = []
    for i, level in enumerate(levels):
        benches = {}
        for name in names:
            samples = tuple(level * math.exp(rng.gauss(0, sigma)) for _ in range(6))
            phases = {"physics": PhaseSummary(level * 0.256, 0.9, 1.0)}
            benches[name] = BenchRecord(name, samples, 1e6 / level, phases=phases,
                                        verdict="OK", test_file=test_file)
            if counts is not None:
                c = (counts[i],) * 3
                extra = {"est_cycles_per_step": counts[i] * 1.25,
                         "phase_instructions_per_step": {"physics": counts[i] * 0.95,
                                                         "reset": counts[i] * 0.05}}
                benches[name + ".counts"] = BenchRecord(name + ".counts", c, 1e6 / counts[i],
                                                        source=COUNTS_SOURCE, extra=extra,
                                                        unit=INSTRUCTIONS.unit)
        digit = "123456789abcdef"[(first_commit - 1 + i) % 15]
        commit = commits[i] if commits else digit * 40
        run = RunRecord(f"20240101T{i:06d}-aa{i:04d}", 1704067200.0 + 3600 * i, commit, 0,
                        "main", dirty, machine, fingerprints[i] if fingerprints else "fp",
                        {"mode": mode}, benches)
        History(results, machine).record(run)
        runs.append(run)
    return runs


STEP = [250.0] * 8 + [300.0] * 8  # a 20% slowdown at the 9th run (commit 9999...)


def record_runs(results: Path, runs: list[tuple[str, float]], machine: str = "box",
                mode: str = "history", threshold: float | None = None) -> None:
    """One run of benchmark "walk" per (commit digit, level), a little noise each."""
    rng = random.Random(7)
    for i, (commit_digit, level) in enumerate(runs):
        samples = tuple(level * (1 + rng.gauss(0, 0.005)) for _ in range(8))
        b = BenchRecord("walk", samples, 1e6 / level, verdict="OK", threshold=threshold)
        History(results, machine).record(RunRecord(
            f"20240101T0000{i:02d}-aaaa{i:02d}", float(i), commit_digit * 40, 0, "main", False,
            machine, "fp", {"mode": mode}, {"walk": b}))


BASE = [("1", 10.0), ("2", 10.05), ("3", 9.95), ("4", 10.0), ("5", 10.02)]


# --- progress events (the progress and sweep tests) --------------------------------------

class Recorder(Progress):
    """An observer that keeps every event as a tuple."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def started(self, name: str) -> None:
        self.events.append(("started", name))

    def warmup_started(self, side: str = "") -> None:
        self.events.append(("warmup_started", side))

    def warmup_ended(self, steady: bool, seconds: float, side: str = "") -> None:
        self.events.append(("warmup_ended", steady, round(seconds, 6), side))

    def window_done(self, k: int, total: int, steps_per_s: float, side: str = "") -> None:
        self.events.append(("window", k, total, round(steps_per_s, 6), side))

    def window_redone(self, k: int, total: int, other_load: float) -> None:
        self.events.append(("redone", k, total, round(other_load, 6)))

    def finished(self, name: str, summary: str) -> None:
        self.events.append(("finished", name, summary))


class FakeStatus:
    """A status line that records what it was asked to show."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.shown: list[str] = []
        self.done_lines: list[str] = []

    def show(self, text: str) -> None:
        self.shown.append(text)

    def done(self, text: str) -> None:
        self.done_lines.append(text)


# --- a fake NUMA machine (the numa and ring collector tests) ---------------------------------

def fake_tree(root: Path, nodes: dict[int, str], has_memory: str | None, mems_allowed: str,
              online: str | None = None) -> tuple[Path, Path]:
    """A sysfs + proc tree: ``nodes`` maps node id -> cpulist text."""
    base = root / "sys/devices/system/node"
    for nid, cpulist in nodes.items():
        (base / f"node{nid}").mkdir(parents=True)
        (base / f"node{nid}/cpulist").write_text(cpulist + "\n")
    if online is not None:
        (base / "online").write_text(online + "\n")
    if has_memory is not None:
        (base / "has_memory").write_text(has_memory + "\n")
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/status").write_text(
        f"Name:\tpython\nCpus_allowed_list:\t0-7\nMems_allowed_list:\t{mems_allowed}\n")
    return root / "sys", root / "proc"


# --- the calibration study on a fake machine (the calibrate tests) ---------------------------

class Machine:
    """A shared fake machine whose speed drifts smoothly by 1.5x over ``period`` seconds."""

    def __init__(self, clock: FakeClock, noise: float = 0.01, period: float = 7.0,
                 seed: int = 1) -> None:
        self.clock, self.noise, self.period = clock, noise, period
        self.rng = random.Random(seed)

    def slowness(self) -> float:
        t = self.clock.wall_ns() / 1e9
        return 1.2 + 0.2 * math.sin(2 * math.pi * t / self.period)


class FakeSide:
    """An Injectable whose step costs 1 ms x machine slowness x (1 + injected slowdown)."""

    def __init__(self, machine: Machine, bias: float = 0.0) -> None:
        self.m, self.bias, self.fraction = machine, bias, 0.0
        self.injected: list[float] = []

    def inject_slowdown(self, fraction: float) -> None:
        self.fraction = fraction
        self.injected.append(fraction)

    def run_window(self, duration_s: float) -> RawWindow:
        per_step = 1e-3 * self.m.slowness() * (1 + self.fraction) * (1 + self.bias)
        per_step *= math.exp(self.m.rng.gauss(0, self.m.noise))
        calls = max(1, round(duration_s / per_step))
        wall = calls * per_step
        self.m.clock.advance(wall)
        return RawWindow(calls * 100, wall, wall, {}, calls)


def study(cfg: cal.StudyConfig, noise: float = 0.01, bias: float = 0.0
          ) -> tuple[list[cal.TrialRecord], FakeSide]:
    clock = FakeClock()
    m = Machine(clock, noise)
    base, head = FakeSide(m), FakeSide(m, bias)
    return cal.run_study(base, head, cfg, clock=clock), head


CFG = cal.StudyConfig(aa_trials=12, trials=6, slowdowns=(0.03, 0.10), turns=12, turn_s=0.1,
                      threshold=0.02, history_windows=3, history_window_s=0.2,
                      baseline_runs=3, warmup_window_s=0.05, warmup_max_s=0.5)


def asv_project(repo: Path, conftest: str, perf_test: str, timeout: float = 300
                ) -> subprocess.CompletedProcess[str]:
    """A scratch git repository asv can publish: asv.conf.json on its branch, the perf test
    and its conftest (the asv site tests). Returns the ``git init``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")
             or k == "PERFGATE_REQUIRE_TOOLS"}
    env = {**clean, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo)}
    init = subprocess.run(["git", "init", "-q", str(repo)], cwd=repo, capture_output=True,
                          text=True, timeout=timeout, env=env)
    branch = subprocess.run(["git", "symbolic-ref", "--short", "HEAD"], cwd=repo,
                            capture_output=True, text=True, timeout=timeout,
                            env=env).stdout.strip()
    (repo / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": "walker", "repo": ".", "branches": [branch],
        "environment_type": "existing", "pythons": ["same"], "results_dir": "results",
        "html_dir": "html"}))
    (repo / ".gitignore").write_text("results/\nhtml/\n__pycache__/\n.asv/\n")
    (repo / "conftest.py").write_text(conftest)
    (repo / "test_perf.py").write_text(perf_test)
    return init


def load_file(name: str, path: Path) -> ModuleType:
    """A script that is not a package module (tools/, tests/qemu/), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def assert_turns(out: str, turns: int) -> None:
    """A paired verdict names the turns it rests on: the ``turns`` asked for, or fewer with
    the pairs that outside load spoiled named ("N more turn pair(s) left out"), never
    silently fewer. How many a loaded machine spoils is not the test's to fix."""
    import re

    m = re.search(r"over (\d+) interleaved turns(?: \(stopped at look [^)]*\))?"
                  r"(?:, (\d+) more turn pair\(s\) left out)?", out)
    assert m is not None, out
    used, left = int(m[1]), int(m[2] or 0)
    assert (used == turns) if not left else (used + left >= turns and used >= 2), m[0]



# --- ring segments in /dev/shm (the ring tests' leak checks) ---------------------------------


def ring_segments() -> set[str]:
    """The ring segments in /dev/shm this test may have made or leaked: all but those whose
    creator (the pid in the name, ring/segment.py) is alive outside this process's tree and
    still holds the segment's creator lock, as a test running beside this one under xdist
    does. The lock decides, not the pid alone: pids wrap (pid_max is often 32768), so a
    killed creator's pid may already name another process."""
    import fcntl

    import psutil

    from pytest_perfgate.ring.segment import PREFIX

    me = psutil.Process()
    tree = {me.pid} | {c.pid for c in me.children(recursive=True)}
    found = set()
    for name in os.listdir("/dev/shm"):
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("_", 1)[0]
        if pid.isdigit() and int(pid) not in tree and psutil.pid_exists(int(pid)):
            try:
                fd = os.open(f"/dev/shm/{name}", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # gone meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its creator lives: another test's ring
            finally:
                os.close(fd)  # closing the descriptor drops the probe's own lock
        found.add(name)
    return found

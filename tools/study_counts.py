"""How far instruction counts per env-step can be trusted on this runner (docs/design.md §10).

    python tools/study_counts.py spread --runs 10
        the shipped humanoid pool benchmark (perf/test_perf_mujoco.py::test_humanoid_batch_256)
        counted in 10 separate callgrind workers: run-to-run spread of instructions per
        env-step, estimated cycles, and each worker's wall time (the cost) with where it went
        (start-up and the test's set-up up to measure(), warm-up calls, the counted call).
        The load average is printed: valgrind counts do not depend on it.
    python tools/study_counts.py spread --runs 2 --save runs.jsonl
        the same in short sittings: runs accumulate in runs.jsonl, summarised together.
    python tools/study_counts.py gate --unchanged 22 --slowed 10 --envs 16 --settle 60
        the same humanoid step (a copy with ``--envs`` envs held after ``--settle`` substeps,
        to fit the study's time: start-up and settling under valgrind dominate) counted
        in 22 unchanged runs and 10 runs of a changed step that does ~1% extra numpy work
        (np.sin over a buffer sized from the first run: not a sleep). Each unchanged run from
        the third on is judged against the newest 5 earlier unchanged runs (spread: up to 20),
        each slowed run against the newest 5 unchanged runs, by the history gate
        (core/gate.evaluate, as HistoryMode does) at threshold 0.5%.
    python tools/study_counts.py sessions --unchanged 22 --slowed 10 [--dir DIR]
        the whole thing as a user runs it: a scratch git repository holding a copy of the
        shipped humanoid benchmark (256 envs, settled state held), one new commit per run
        (a line appended to CHANGES.txt), each run a full ``pytest --perfgate
        --perfgate-counts`` session recording into the repository's history at threshold
        0.5% (ini). After the unchanged commits, one commit makes the step do ~1% more
        work (np.sin over a buffer sized from the first run's count: not a sleep) and the
        slowed runs go on committing on top of it; every slowed run is judged against the
        history, where the failed runs wait to be accepted and so never become the
        baseline. Prints each session's counts and wall-time verdicts from its JSON report.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_perfgate.core.gate import Outcome, Rule, evaluate  # noqa: E402
from pytest_perfgate.core.settings import Settings  # noqa: E402
from pytest_perfgate.modes.counts.runner import run_counts  # noqa: E402

SHIPPED = "perf/test_perf_mujoco.py::test_humanoid_batch_256"
# measured: np.sin over a float64 buffer of ones costs ~80 instructions per element (a first
# study at 37, the cost on zeros, made a +2.17% slowdown from 14395 elements)
SIN_INSTR_PER_ELEMENT = 80.3

STUDY_TEST = '''
import os
import numpy as np
from pytest_perfgate.sim.thread_sweep import settled_state

EXTRA = {extra}  # extra np.sin elements per step: the slowdown


def {test}(perfgate, mujoco_pool, humanoid_xml):
    pool = mujoco_pool(humanoid_xml, {envs}, frame_skip=5)
    pool.hold(settled_state(pool.model, pool.num_envs, {settle}, seed=0,
                            keyframe=pool.keyframe_id))
    lo, hi = pool.model.actuator_ctrlrange.T
    actions = np.random.default_rng(1).uniform(lo, hi, (pool.num_envs, pool.model.nu))
    buf = np.ones(max(EXTRA, 1))

    def step():
        pool.step(actions)
        if EXTRA:
            np.sin(buf, out=buf)
    perfgate.measure(step, transitions=pool.num_envs, name="{name}")
'''


def study_test(envs: int, settle: str, extra: str, test: str, name: str) -> str:
    """The studied workload: the shipped humanoid step, plus ``extra`` np.sin elements."""
    return (STUDY_TEST.replace("{envs}", str(envs)).replace("{settle}", settle)
            .replace("{extra}", extra).replace("{test}", test).replace("{name}", name))


def count_once(nodeid: str, cwd: Path) -> tuple[float, float, float, dict[str, float]]:
    """(instructions per env-step, est. cycles per env-step, worker wall seconds, where the
    worker's time went)."""
    t0, cpu0 = time.monotonic(), _children_cpu()
    counts = run_counts(nodeid, cwd)
    wall = time.monotonic() - t0
    (c,) = counts.values()
    phases = {**c.phases_s, "cpu": _children_cpu() - cpu0}
    return (statistics.median(c.per_step()), statistics.median(c.cycles_per_step()), wall,
            phases)


def _children_cpu() -> float:
    """CPU seconds of this process's reaped children: a worker's cost that, unlike its wall
    time, does not stretch when other processes take the CPU."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def spread(args: argparse.Namespace) -> None:
    """Count in ``--runs`` workers; with ``--save``, add them to the runs saved there (a
    study longer than one sitting) and summarise all of them."""
    rows = _load(args.save) if args.save else []
    print(f"{'run':>3}  {'instr/env-step':>16}  {'est.cycles/env-step':>20}  {'wall s':>6}  "
          "load avg (1 min)  worker s: CPU; to measure(), warm-up, counted (wall)")
    for row in rows:
        _print_row(row)
    for _ in range(args.runs):
        a, b, wall, phases = count_once(SHIPPED, ROOT)
        row = {"run": len(rows), "ipe": a, "cyc": b, "wall": wall,
               "load": os.getloadavg()[0], "phases": phases}
        rows.append(row)
        _print_row(row)
        if args.save:
            with open(args.save, "a") as f:
                f.write(json.dumps(row) + "\n")
    ipe, cyc = [r["ipe"] for r in rows], [r["cyc"] for r in rows]
    for label, xs in (("instructions", ipe), ("est. cycles", cyc)):
        rng = (max(xs) - min(xs)) / statistics.median(xs)
        sd = statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 else 0.0
        print(f"{label}: median {statistics.median(xs):,.1f} per env-step, range "
              f"{rng:.5%} of the median, stdev {sd:.5%}")


def _load(path: str) -> list[dict[str, Any]]:
    """Runs saved by earlier ``spread --save`` invocations (a garbage line is skipped)."""
    rows = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            print(f"warning: {path}: skipped a line that is not JSON: {line[:60]!r}")
    return rows


def _print_row(r: dict[str, Any]) -> None:
    ph = r.get("phases", {})
    parts = ", ".join(f"{ph[k]:.1f}" if k in ph else "-"
                      for k in ("to_measure", "warmup", "counted"))
    parts = (f"{ph['cpu']:.1f}; " if "cpu" in ph else "-; ") + parts
    print(f"{r['run']:>3}  {r['ipe']:>16,.1f}  {r['cyc']:>20,.1f}  {r['wall']:>6.1f}  "
          f"{r['load']:>16.2f}  {parts}", flush=True)


def gate(args: argparse.Namespace) -> None:
    rule = Settings(threshold=args.threshold).rule()
    with tempfile.TemporaryDirectory(prefix="perfgate-study-counts-") as tmp:
        d = Path(tmp)
        (d / "test_study.py").write_text(study_test(
            args.envs, str(args.settle), 'int(os.environ.get("PERFGATE_STUDY_EXTRA", "0"))',
            "test_humanoid", "study_humanoid"))
        nodeid = "test_study.py::test_humanoid"
        os.environ.pop("PERFGATE_STUDY_EXTRA", None)
        unchanged: list[tuple[float, ...]] = []
        alarms = judged = 0
        for i in range(args.unchanged):
            a, _, wall, _ = count_once(nodeid, d)
            unchanged.append((a,))
            verdict = _judge(unchanged[-1], unchanged[:-1], rule)
            judged += verdict is not None
            alarms += verdict is not None and verdict.outcome is Outcome.REGRESSION
            print(f"unchanged {i:>2}: {a:,.1f} instr/env-step  "
                  f"{verdict.outcome.value if verdict else 'seed (no judged baseline yet)'}"
                  f"  ({wall:.0f} s)", flush=True)
        base_ipe = statistics.median(x[0] for x in unchanged)
        per_call = base_ipe * args.envs
        extra = args.extra or int(args.slowdown * per_call / SIN_INSTR_PER_ELEMENT)
        os.environ["PERFGATE_STUDY_EXTRA"] = str(extra)
        caught, slows = 0, []
        for i in range(args.slowed):
            a, _, wall, _ = count_once(nodeid, d)
            slows.append(a / base_ipe - 1)
            verdict = _judge((a,), unchanged, rule)
            caught += verdict is not None and verdict.outcome is Outcome.REGRESSION
            print(f"slowed {i:>2}: {a:,.1f} instr/env-step (+{a / base_ipe - 1:.3%})  "
                  f"{verdict.outcome.value if verdict else '-'}  ({wall:.0f} s)", flush=True)
        print(f"false alarms: {alarms} of {judged} unchanged runs judged "
              f"(threshold {args.threshold:.1%})")
        print(f"slowdown (np.sin over {extra} extra float64 per step): measured "
              f"+{statistics.median(slows):.3%} instructions; caught {caught} of {args.slowed}")


SESSION_INI = """[pytest]
perfgate_threshold = {threshold}
perfgate_machine = counts-study
perfgate_results_dir = .perfgate/results
"""


def _git(repo: Path, *argv: str) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(repo), *argv], check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    with open(repo / "CHANGES.txt", "a") as f:
        f.write(message + "\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "--short=10", "HEAD")


def _session(repo: Path, n: int) -> dict[str, Any]:
    """One ``pytest --perfgate --perfgate-counts`` session; its two rows from the JSON report."""
    import subprocess

    out = repo / f".perfgate/session-{n:02d}.json"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--perfgate", "--perfgate-counts", f"--perfgate-json={out}", "perf"],
                       cwd=repo, capture_output=True, text=True)
    row: dict[str, Any] = {"exit": p.returncode, "s": time.monotonic() - t0,
                           "load": os.getloadavg()[0]}
    try:
        report = json.loads(out.read_text())
    except (OSError, ValueError):
        raise SystemExit(f"session {n} wrote no report (exit {p.returncode}):\n"
                         f"{p.stdout[-3000:]}\n{p.stderr[-2000:]}") from None
    for b in report["benchmarks"]:
        key = "counts" if b["benchmark"].endswith(".counts") else "wall"
        row[key] = {"verdict": b["verdict"], "ratio": b["ratio"], "p": b["p_value"],
                    "value": statistics.median(b["result"]["samples"]),
                    "steps_per_s": b["steps_per_s"], "message": b["message"]}
    if "counts" not in row:
        raise SystemExit(f"session {n} has no counts row (exit {p.returncode}):\n"
                         f"{p.stdout[-3000:]}")
    return row


def _print_session(label: str, commit: str, r: dict[str, Any]) -> None:
    c, w = r["counts"], r.get("wall", {})
    ratio = "-" if c["ratio"] is None else f"{c['ratio']:.5f}"
    wr = "-" if w.get("ratio") is None else f"{w['ratio']:.3f}"
    print(f"{label:<12} {commit}  {c['value']:>14,.1f}  {ratio:>8}  {c['verdict'] or '-':<12}"
          f"  {w.get('steps_per_s', 0):>8.0f}  {wr:>6}  {w.get('verdict') or '-':<12}"
          f"  {r['exit']:>4}  {r['s']:>5.1f}  {r['load']:>4.1f}", flush=True)


def sessions(args: argparse.Namespace) -> None:
    tmp = None
    if args.dir:
        repo = Path(args.dir)
        if repo.exists():
            raise SystemExit(f"--dir {repo} exists: give a new folder (the study makes a "
                             "fresh git repository there)")
        repo.mkdir(parents=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="perfgate-study-sessions-")
        repo = Path(tmp.name)
    (repo / "perf").mkdir()
    (repo / "perf/test_perf_mujoco.py").write_text(study_test(
        256, "300 if perfgate.runs_step else 5", "0", "test_humanoid_batch_256",
        "humanoid_batch_256"))
    (repo / "pytest.ini").write_text(SESSION_INI.format(threshold=args.threshold))
    (repo / ".gitignore").write_text(".perfgate/\n__pycache__/\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "study@example.invalid")
    _git(repo, "config", "user.name", "study")
    print(f"scratch repository: {repo}; threshold {args.threshold}")
    print(f"{'run':<12} {'commit':<10}  {'instr/env-step':>14}  {'ratio':>8}  "
          f"{'counts':<12}  {'steps/s':>8}  {'ratio':>6}  {'wall':<12}  exit      s  load")
    rows: list[tuple[str, dict[str, Any]]] = []
    for i in range(args.unchanged):
        commit = _commit(repo, f"unchanged {i}")
        r = _session(repo, len(rows))
        rows.append(("unchanged", r))
        _print_session(f"unchanged {i}", commit, r)
    base = statistics.median(r["counts"]["value"] for k, r in rows if k == "unchanged")
    extra = int(args.slowdown * base * 256 / SIN_INSTR_PER_ELEMENT)
    test = repo / "perf/test_perf_mujoco.py"
    test.write_text(test.read_text().replace("EXTRA = 0  #", f"EXTRA = {extra}  #"))
    for i in range(args.slowed):
        commit = _commit(repo, f"slowed {i}" + (f": np.sin over {extra} more elements per "
                                                 "step" if i == 0 else ""))
        r = _session(repo, len(rows))
        rows.append(("slowed", r))
        _print_session(f"slowed {i}", commit, r)
    un = [r for k, r in rows if k == "unchanged" and r["counts"]["verdict"] != "NO BASELINE"]
    sl = [r for k, r in rows if k == "slowed"]
    counts_v = [r["counts"]["verdict"] for r in un]
    wall_v = [r.get("wall", {}).get("verdict") for r in un]
    print(f"unchanged runs judged: {len(un)}; counts verdicts "
          f"{ {v: counts_v.count(v) for v in sorted(set(counts_v))} }; wall-time verdicts "
          f"{ {v: wall_v.count(v) for v in sorted(set(map(str, wall_v)))} }")
    print(f"counts false alarms: {counts_v.count('REGRESSION')} of {len(un)}")
    vals = [r["counts"]["value"] / base - 1 for r in sl]
    caught = sum(r["counts"]["verdict"] == "REGRESSION" for r in sl)
    wall_caught = sum(r.get("wall", {}).get("verdict") == "REGRESSION" for r in sl)
    if sl:
        print(f"slowdown (np.sin over {extra} extra float64 per step of 256 envs): "
              f"+{statistics.median(vals):.3%} instructions/env-step (median over the "
              f"unchanged runs); counts caught {caught} of {len(sl)}; wall time caught "
              f"{wall_caught} of {len(sl)}")
    secs = [r["s"] for _, r in rows]
    print(f"session wall time: median {statistics.median(secs):.1f} s, range "
          f"{min(secs):.1f}-{max(secs):.1f} s; load average {min(r['load'] for _, r in rows):.1f}"
          f"-{max(r['load'] for _, r in rows):.1f}")
    if tmp is not None:
        tmp.cleanup()


def _judge(current: tuple[float, ...], earlier: list[tuple[float, ...]], rule: Rule):
    """The history mode's decision: newest 5 earlier runs the level, newest 20 the spread."""
    if len(earlier) < 2:
        return None
    base, wide = earlier[-5:], earlier[-20:]
    return evaluate(list(current), [list(b) for b in base], rule,
                    spread=[list(w) for w in wide])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("spread")
    s.add_argument("--runs", type=int, default=10)
    s.add_argument("--save", help="a JSON-lines file: earlier runs saved there are shown and "
                   "summarised with this invocation's, which are appended")
    g = sub.add_parser("gate")
    g.add_argument("--unchanged", type=int, default=22)
    g.add_argument("--slowed", type=int, default=10)
    g.add_argument("--envs", type=int, default=32)
    g.add_argument("--settle", type=int, default=300, help="substeps settled before holding")
    g.add_argument("--slowdown", type=float, default=0.01)
    g.add_argument("--threshold", type=float, default=0.005)
    g.add_argument("--extra", type=int, default=0, help="extra np.sin elements per step "
                   "(default: sized for --slowdown)")
    e = sub.add_parser("sessions")
    e.add_argument("--unchanged", type=int, default=22)
    e.add_argument("--slowed", type=int, default=10)
    e.add_argument("--slowdown", type=float, default=0.01)
    e.add_argument("--threshold", default="0.5%")
    e.add_argument("--dir", help="make the scratch repository here and keep it")
    args = ap.parse_args()
    {"spread": spread, "gate": gate, "sessions": sessions}[args.cmd](args)


if __name__ == "__main__":
    main()

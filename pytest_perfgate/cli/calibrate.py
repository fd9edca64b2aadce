"""``perfgate calibrate``: how far this runner's verdicts can be trusted.

False alarms on A/A trials, detection of injected slowdowns, seconds spent, through the real
gate on one pair of side processes of the same checkout, exactly as ``--perfgate-ab`` starts
them (docs/verdict-quality.md; the mode itself: docs/design.md §3). These are the rates of
one pair's verdict: the fresh pairs that must measure an A/B REGRESSION again
(modes/ab/confirm.py) are not part of a trial.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._out import UsageError
from pytest_perfgate.cli.common_args import (
    parse_count,
    parse_cpu_set,
    parse_fractions,
    parse_int_list,
    parse_output_file,
)
from pytest_perfgate.core.progress import stream_progress
from pytest_perfgate.session.options import (
    argparse_type,
    parse_fraction,
    parse_looks,
    parse_positive_int,
    parse_seconds,
)
from pytest_perfgate.study import analysis as ana
from pytest_perfgate.study import studyfile, tables
from pytest_perfgate.study import trials as cal

DEFAULT_NODEID = "perf/test_perf_mujoco.py::test_humanoid_batch_256"


class Calibrate(Command):
    name = "calibrate"
    help = "measure false alarms and detection of this runner's verdicts"
    description = ("Run A/A trials and trials with injected slowdowns through the real gate "
                   "(interleaved A/B, plus emulated history mode) on one pair of side "
                   "processes of the same checkout, then say the smallest regression this "
                   "runner catches.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        c = super().setup_arguments(subparsers)
        c.add_argument("nodeid", nargs="?", default=DEFAULT_NODEID,
                       help="perf test with one perfgate.measure(step, ...) call (default "
                       f"{DEFAULT_NODEID})")
        c.add_argument("--trials", type=argparse_type(parse_count),
                       help="trials per slowdown (default 10)")
        c.add_argument("--aa-trials", type=argparse_type(parse_count),
                       help="A/A trials (default 50)")
        c.add_argument("--slowdowns", type=argparse_type(parse_fractions),
                       help="injected slowdowns (default 0.02,0.03,0.05,0.10)")
        c.add_argument("--turns", type=argparse_type(parse_positive_int),
                       help="turns per side at most: the sequential test's last look "
                       "(default 96)")
        c.add_argument("--looks", type=argparse_type(parse_looks),
                       help="looks of the sequential test (default 4; 1 = fixed length)")
        c.add_argument("--load", choices=cal.LOADS, default="quiet",
                       help="scenario: quiet, or a CPU hog switching on and off every 2-5 s "
                       "at random on one core or both (real processes, ended on exit)")
        c.add_argument("--turn-time", type=argparse_type(parse_seconds),
                       help="seconds per turn (default 0.1)")
        c.add_argument("--threshold", type=argparse_type(parse_fraction),
                       help="gate threshold (default 2%%)")
        c.add_argument("--alpha", type=argparse_type(parse_fraction),
                       help="significance level (default 0.01)")
        c.add_argument("--estimator", choices=cal.ESTIMATORS, default="trimmed",
                       help="paired estimator for the headline table (default trimmed: the "
                       "shipped gate; t is its untrimmed form)")
        c.add_argument("--quick", action="store_true",
                       help="a ~3 minute sanity run (too few trials to claim rates)")
        c.add_argument("--no-history", action="store_true",
                       help="skip the history-mode emulation")
        c.add_argument("--pin", type=argparse_type(parse_cpu_set), metavar="CPUS",
                       help="pin both sides (and this process) to these CPUs, e.g. 1")
        c.add_argument("--probe", action="store_true",
                       help="record /proc/stat, PSI and context-switch rates per turn "
                       "(noise guard)")
        c.add_argument("--levers", type=argparse_type(parse_int_list), metavar="TURNS",
                       help="also re-analyse offline with every estimator at these turn "
                       "counts, e.g. 10,20,40")
        c.add_argument("--seed", type=argparse_type(parse_count), default=0,
                       help="trial order seed (default 0)")
        c.add_argument("--save", type=argparse_type(parse_output_file),
                       help="write the raw trials as JSON to this file")
        c.add_argument("--analyse", type=Path, metavar="FILE", nargs="+",
                       help="re-analyse saved studies instead of measuring; several files "
                       "of the same settings (sittings) are merged")
        c.add_argument("--cwd", type=Path, default=Path.cwd(),
                       help="project checkout the sides run in (default: here)")
        return c

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        shown: dict[str, Any] = {"estimator": args.estimator, "levers": args.levers or ()}
        try:
            if args.analyse is not None:
                return analyse(args.analyse, threshold=args.threshold, alpha=args.alpha,
                               **shown)
            return run(args.nodeid, config=config_from(args), pin=args.pin, probe=args.probe,
                       save=args.save, cwd=args.cwd, command=args.command_line, **shown)
        except cal.StudyError as exc:
            raise UsageError(str(exc)) from None


def run(nodeid: str = DEFAULT_NODEID, *, config: cal.StudyConfig | None = None,
        estimator: str = "trimmed", levers: Sequence[int] = (), pin: set[int] | None = None,
        probe: bool = False, save: Path | None = None, cwd: Path | None = None,
        command: str = "perfgate calibrate") -> int:
    """``perfgate calibrate``: the exit status; a value the study refuses raises
    ``StudyError``."""
    cfg = config or cal.StudyConfig()
    try:
        trials, meta = measure(nodeid, cfg, cwd or Path.cwd(), pin, probe, save, command)
        lines = report(cfg, trials, meta, estimator, levers)
    except KeyboardInterrupt:  # every side is closed by then (measure()'s ExitStack)
        print(interrupted(save), file=sys.stderr)
        return EXIT_INTERRUPTED
    for line in lines:
        print(line)
    if save is not None:
        try:
            studyfile.save(save, cfg, trials, meta)
        except OSError as exc:  # the study is printed above: only the file is lost
            print(f"perfgate calibrate: error: could not save the study to {save}: "
                  f"{exc}", file=sys.stderr)
            return 3
    return 0


def analyse(files: Sequence[Path], *, threshold: float | None = None,
            alpha: float | None = None, estimator: str = "trimmed",
            levers: Sequence[int] = ()) -> int:
    """``perfgate calibrate --analyse``: the exit status; a file the study refuses raises
    ``StudyError``."""
    cfg, trials, meta = studyfile.merge([(p, *studyfile.load(p)) for p in files])
    if not trials:
        raise cal.StudyError(f"--analyse {' '.join(map(str, files))}: the study holds no "
                             "trials (it was stopped before the first one ended): measure "
                             "again with --save FILE")
    over: dict[str, Any] = {"threshold": threshold, "alpha": alpha}
    cfg = replace(cfg, **{k: v for k, v in over.items() if v is not None})
    for line in report(cfg, trials, meta, estimator, levers):
        print(line)
    return 0


EXIT_INTERRUPTED = 130  # Ctrl-C, as perfgate bisect


def interrupted(save: Path | None) -> str:
    """What a Ctrl-C leaves: the trials that ended are in ``--save``'s file, if given."""
    if save is None:
        return ("perfgate calibrate: interrupted; no trial was kept (give --save FILE to keep "
                "every trial as it ends)")
    return (f"perfgate calibrate: interrupted; the trials that ended are in {save}: "
            f"`perfgate calibrate --analyse {save}` reports them")


def config_from(ns: argparse.Namespace) -> cal.StudyConfig:
    """Flags over defaults (--quick changes the defaults, flags still win)."""
    kw: dict[str, Any] = {"seed": ns.seed, "history": not ns.no_history, "load": ns.load}
    for flag, name in (("trials", "trials"), ("aa_trials", "aa_trials"),
                       ("slowdowns", "slowdowns"), ("turns", "turns"), ("looks", "looks"),
                       ("turn_time", "turn_s"), ("threshold", "threshold"), ("alpha", "alpha")):
        v = getattr(ns, flag)
        if v is not None:
            kw[name] = v
    return cal.StudyConfig.quick(**kw) if ns.quick else cal.StudyConfig(**kw)


def measure(nodeid: str, cfg: cal.StudyConfig, cwd: Path, pin: set[int] | None, probe: bool,
            save: Path | None, command: str
            ) -> tuple[list[cal.TrialRecord], dict[str, Any]]:
    """Start one pair of sides of the same checkout and run the study on it."""
    import pytest_perfgate
    from pytest_perfgate.core.load import ProcStatProbe
    from pytest_perfgate.modes.ab import START_TIMEOUT_S, RemoteSource, Side, SideSpec
    from pytest_perfgate.study.hog import hog_for

    root = cwd.resolve()
    if not (root / nodeid.split("::")[0]).exists():
        raise cal.StudyError(f"{nodeid!r} is not a test file under {root}: give a perf "
                             "test's node id relative to --cwd, e.g. " + DEFAULT_NODEID)
    if pin:
        os.sched_setaffinity(0, pin)  # the sides inherit it: their pools size to it
    plugin_root = str(Path(pytest_perfgate.__file__).resolve().parent.parent)
    meta: dict[str, Any] = {"nodeid": nodeid, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                            "loadavg_before": os.getloadavg(), "pin": sorted(pin or ()),
                            "command": command, "load": cfg.load}
    hog = hog_for(cfg.load, cfg.seed)
    # Every side is closed on every way out, each on its own (an interrupt while one closes
    # must not skip the others): registered on the stack as soon as it exists.
    with contextlib.ExitStack() as stack:

        def start(role: str) -> Side:
            side = Side(SideSpec(role, root, calibration=True), nodeid, plugin_root)
            stack.callback(side.log.close)
            stack.callback(side.close)
            return side

        base_side, head_side = start("base"), start("head")
        # A/A trials get a head of their own when injected trials share the study: a process
        # that busy-waited an injected slowdown is scheduled differently after (docs/ab.md)
        aa = start("A/A head") if cfg.aa_trials and cfg.trials and cfg.slowdowns else None
        sides = [base_side, head_side] + ([aa] if aa is not None else [])
        meta["aa_head"] = "separate" if aa is not None else "head"
        names = [side.recv(START_TIMEOUT_S, f"its measure() call in {nodeid}")
                 for side in sides]
        if any(m[0] != "bench" for m in names) or len({m[1] for m in names}) != 1:
            raise cal.StudyError(f"the sides of {nodeid} did not all reach one measure() "
                                 f"call (got {', '.join(repr(m[:2]) for m in names)})")
        meta["bench"] = names[0][1]
        base, head = RemoteSource(base_side), RemoteSource(head_side)
        control = RemoteSource(aa) if aa is not None else None
        rates = cal.system_probe([s.proc.pid for s in sides]) if probe else None
        t0 = time.monotonic()
        done: list[cal.TrialRecord] = []

        live = stream_progress(sys.stderr, "perfgate calibrate")  # live status on a terminal

        def progress(t: cal.TrialRecord, total: int) -> None:
            done.append(t)
            if save is not None:  # keep what is measured if a long study is interrupted
                studyfile.save(save, cfg, done, {**meta, "partial": True})
            measured = (f"measured {math.expm1(statistics.fmean(t.diffs)):+.2%}" if t.diffs
                        else tables.NONE_KEPT)
            live.finished(f"trial {t.index + 1}/{total}",
                          f"{time.monotonic() - t0:.0f} s into the study, injected "
                          f"{t.slowdown:+.0%}, {measured}, base "
                          f"{statistics.median(t.base):.0f} s/Msteps"
                          f"{'' if t.steady else ' (warm-up not steady)'}")

        if hog is not None:
            hog.start()
            stack.callback(hog.stop)  # first out: before the sides close
        trials = cal.run_study(base, head, cfg, progress, probe=rates, progress=live,
                               load_probe=ProcStatProbe(), control=control)
        for side in sides:
            with contextlib.suppress(OSError):
                side.conn.send(("done",))
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    meta["loadavg_after"] = os.getloadavg()
    meta["wall_s"] = round(time.monotonic() - t0, 1)
    return trials, meta


def report(cfg: cal.StudyConfig, trials: Sequence[cal.TrialRecord], meta: dict[str, Any],
           estimator: str = "trimmed", levers: Sequence[int] = ()) -> list[str]:
    """The study's output: settings, the table, measured slowdowns, the conclusion."""
    rule = cfg.rule()
    seq = ana.analyse_sequential(trials, rule, cfg.turns, cfg.looks)
    fixed = ana.analyse(trials, rule, estimator)
    reps = [seq, fixed]
    if cfg.history and any(t.hist_head for t in trials):
        reps.append(ana.analyse_history(trials, rule, cfg.baseline_runs))
    noise = ana.noise_summary(trials)
    sittings = meta.get("sittings") or []
    lines = [f"$ {meta.get('command', 'perfgate calibrate')}",
             f"perfgate calibrate: {meta.get('nodeid', '?')} ({meta.get('bench', '?')})",
             f"ran {meta.get('started', '?')} .. {meta.get('finished', '?')} "
             f"({meta.get('wall_s', '?')} s wall), load average before "
             f"{_load(meta.get('loadavg_before'))}, after {_load(meta.get('loadavg_after'))}"
             + (f", pinned to CPUs {meta['pin']}" if meta.get("pin") else ""),
             *(f"  sitting {i + 1}: {m.get('command', '?')} ran {m.get('started', '?')} .. "
               f"{m.get('finished', '?')}, {m.get('trials', '?')} trials, load average before "
               f"{_load(m.get('loadavg_before'))}, after {_load(m.get('loadavg_after'))}"
               for i, m in enumerate(sittings)),
             f"{len(trials)} trials in random order (seed {cfg.seed}), load {cfg.load}; at most "
             f"{cfg.turns} turns x {cfg.turn_s:g} s per side, ABBA, {cfg.looks} look(s); "
             f"history runs of {cfg.history_windows} x {cfg.history_window_s:g} s windows vs "
             f"the previous {cfg.baseline_runs} base runs"
             + {"separate": "; A/A trials on a head process of their own, never slowed",
                "head": "; A/A trials on the same head process as the injected trials"}
             .get(meta.get("aa_head", ""), ""),
             "", *tables.render(reps), "",
             f"Cost of a sequential verdict: {seq.wall:.1f} s wall (both sides, warm-up "
             f"included), {seq.pairs:.0f} turn pairs measured on average of at most "
             f"{cfg.turns} (plus re-measured ones)"
             + (f"; {seq.left_out} trial(s) stopped sooner than this design and are left out"
                if seq.left_out else "") + ".",
             f"The second row judges the first {fixed.turns} turns of every trial at a fixed "
             "length by the estimate-above-threshold rule (every pair, load-changed ones "
             "too).", "",
             "Injected slowdown as measured by the interleaved turns (pooled over trials, "
             "load-changed pairs left out):",
             *tables.render_measured(fixed),
             f"Noise: per-turn spread of base speed {noise['base_turn_sd']:.1%}, of the paired "
             f"log ratio {noise['pair_diff_sd']:.1%}; base speed across trials varied "
             f"{noise['trial_speed_range']:.2f}x.", ""]
    if levers:
        lines += ["Offline levers (same trials, first N turns, each estimator):",
                  *tables.lever_table(trials, rule, cal.ESTIMATORS, levers), "",
                  "Sequential designs replayed on the same trials (at most N turns, K looks):",
                  *tables.sequential_levers(trials, rule, levers), ""]
    if any(ana.outside_load(t) for t in trials):
        guarded = [ana.analyse(trials, rule, e, guard=0.5) for e in ("trimmed", "t")]
        lines += ["Noise guard (turn pairs with > 0.5 outside busy cores dropped, /proc/stat):",
                  *tables.render(guarded)[2:], ""]
    corr = ana.probe_correlations(trials)
    if corr:
        lines.append("Noise guard: Spearman correlation of probe rates with the base turn's "
                     "slowness: " + ", ".join(f"{k} {v:+.2f}" for k, v in sorted(corr.items())))
        lines.append("")
    met = tables.meets_targets(seq)
    lines.append("Targets: " + ", ".join(
        f"{k} {'not measured' if v is None else 'met' if v else 'MISSED'}"
        for k, v in met.items()))
    lines.append(tables.conclusion(seq))
    return lines


def _load(v: Any) -> str:
    return "/".join(f"{x:.2f}" for x in v) if isinstance(v, (list, tuple)) else "?"

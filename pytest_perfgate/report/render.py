"""Rendering verdicts: the terminal table, a failure explanation, JSON and markdown.

Pure functions over :class:`~pytest_perfgate.core.judged.Judged`, so a CLI renders the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_perfgate.core.gate import Outcome
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.memory import as_record, memory_line, mib
from pytest_perfgate.core.metric import ENV_STEPS, figure, metric_for
from pytest_perfgate.core.results import BenchRecord, BenchResult
from pytest_perfgate.history.asv import counts_phases
from pytest_perfgate.placement.spec import placement_line

COLUMNS = ("benchmark", "steps/s", "baseline", "ratio [CI]", "p", "verdict", "top phase")


def top_phase(j: Judged) -> str:
    """The phase that grew most against the baseline, else the biggest phase (for a counts
    result: the phase with the most instructions); "-" for a memory verdict."""
    if j.memory is not None:
        return "-"
    phases = j.result.phases
    if not phases:
        counted = counts_phases(j.result.extra)
        total = sum(counted.values())
        if total <= 0:
            return "-"
        n = max(counted, key=lambda k: counted[k])  # instructions: the biggest share
        return f"{n} {counted[n] / total:.0%}"
    grown = {n: p.ms_per_call - j.baseline_phases[n] for n, p in phases.items()
             if n in j.baseline_phases}
    if grown and max(grown.values()) > 0:
        n = max(grown, key=lambda k: grown[k])
        base = j.baseline_phases[n]
        return f"{n} {base:.3g}->{phases[n].ms_per_call:.3g} ms"
    n = max(phases, key=lambda k: phases[k].share)
    return f"{n} {phases[n].share:.0%}"


def row(j: Judged, units: bool = False) -> tuple[str, ...]:
    """One benchmark's table cells; ``units``: each figure names its unit (a table whose
    rows are not all env-steps/s)."""
    v = j.verdict
    metric = metric_for(j.result.unit)
    ratio = p = "-"
    verdict = "SMOKE" if v is None else v.outcome.value
    if v is not None and v.ratio is not None:
        ratio = f"{v.ratio:.3f}"
        if v.ci is not None:
            ratio += f" [{v.ci[0]:.3f}-{v.ci[1]:.3f}]"
        p = f"{v.p_value:.2g}" if v.p_value is not None else "-"
    if j.memory is not None:  # a memory verdict: peak memory in place of steps/s
        peak = j.memory.peak
        return (j.name, "-" if peak is None else mib(peak), "-", ratio, p, verdict, "-")
    now, base = (figure(metric.shown(x)) for x in (j.result.rate, j.baseline_rate))
    if units:
        now += f" {metric.unit}"
    return (j.result.name, now, base, ratio, p, verdict, top_phase(j))


def columns(judged: Sequence[Judged]) -> tuple[tuple[str, ...], bool]:
    """The table's header, and whether its figures carry their units: the steps/s column
    names the unit when every row measures env-steps."""
    if all(j.result.unit == ENV_STEPS.unit for j in judged):
        return COLUMNS, False
    return ("benchmark", "now", *COLUMNS[2:]), True


def table(judged: Sequence[Judged]) -> list[str]:
    head, units = columns(judged)
    rows = [head, *(row(j, units) for j in judged)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def worth_a_line(j: Judged) -> bool:
    """Whether a written report (markdown) shows the verdict's message: any but a plain OK,
    whose table row says it all. An OK that fresh pairs of side processes reached against a
    first pair's called change is not plain, nor one whose baseline ran in another
    environment (it names the change)."""
    v = j.verdict
    return v is not None and (v.outcome is not Outcome.OK or bool(j.environment_changes)
                              or len(j.pairs) > 1)


def notes(judged: Sequence[Judged], every_verdict: bool = True) -> list[str]:
    """One line per verdict, its message, plus measurement caveats. The terminal shows every
    verdict's (an OK's says how close it came and what it could resolve); a written report
    (``every_verdict`` False) leaves a plain OK to its table row (:func:`worth_a_line`)."""
    out = []
    for j in judged:
        r, v = j.result, j.verdict
        if v is not None and (every_verdict or worth_a_line(j)):
            out.append(f"{j.name}: {v.outcome.value}: {v.message}")
        if j.memory is not None:  # its measurement's caveats are said with its own verdict
            continue
        workers = r.extra.get("workers")  # perfgate's own key (user extra may not use it)
        for w in workers if isinstance(workers, list) else []:
            if isinstance(w, dict):
                out.append(f"{r.name}: {placement_line(w)}")
        warns = r.extra.get("placement_warnings")
        for warn in warns if isinstance(warns, list) else []:
            out.append(f"{r.name}: placement warning: {warn}")
        by_phase = counts_phases(r.extra)
        if by_phase:
            out.append(f"{r.name}: {phase_line(by_phase)}")
        mem = memory_line(r.memory)
        if mem:
            out.append(f"{r.name}: {mem}; cores used {r.cores:.2f}")
        out.extend(f"{r.name}: {line}" for line in gpu_lines(r))
        profile = r.extra.get("profile")
        if isinstance(profile, dict):
            from pytest_perfgate.profile.text import lines as profile_lines

            out.extend(f"{r.name}: {line.strip()}" for line in profile_lines(profile))
        if r.remeasured or r.polluted_kept:
            out.append(f"{r.name}: {r.remeasured} window(s) re-measured for outside load"
                       + (f", {r.polluted_kept} polluted window(s) kept (re-measure budget "
                          "spent)" if r.polluted_kept else ""))
    return out


def gpu_lines(r: BenchResult) -> list[str]:
    """How the GPU was timed, the phases whose CPU wall and GPU time disagree a lot, and
    the windows the GPU guard spoiled; nothing for a result without CUDA."""
    if not r.gpu:
        return []
    from pytest_perfgate.gpu.cuda import phase_note, sync_note

    out = [sync_note(r.gpu.get("sync"))] if r.gpu.get("sync") else []
    clock = r.gpu.get("sm_clock_mhz")
    if isinstance(clock, list) and len(clock) == 2:
        out.append(f"SM clock {clock[0]}-{clock[1]} MHz at the windows' edges"
                   if clock[0] != clock[1] else f"SM clock {clock[0]} MHz at the windows' "
                   "edges")
    for name, ph in sorted(r.phases.items(), key=lambda kv: -kv[1].share):
        note = phase_note(name, ph.ms_per_call, ph.gpu_ms)
        if note:
            out.append(note)
    spoiled = r.gpu.get("spoiled")
    for reason, n in (spoiled.items() if isinstance(spoiled, Mapping) else ()):
        out.append(f"{n} window(s) spoiled on the GPU ({reason}): measured again like "
                   "outside CPU load")
    return out


def phase_line(by_phase: Mapping[str, float]) -> str:
    """Instructions per env-step by phase, largest first, with each one's share of the
    sum (the phases and ``(other)`` add up to the whole step, docs/design.md §10)."""
    total = sum(by_phase.values())
    parts = [f"{n} {figure(v)} ({v / total:.0%})" if total > 0 else f"{n} {figure(v)}"
             for n, v in sorted(by_phase.items(), key=lambda kv: -kv[1])]
    return "instructions/env-step by phase: " + ", ".join(parts)


def explain(j: Judged, run_id: str | None = None) -> str:
    """The one-screen failure text shown instead of a traceback. ``run_id``: the run being
    recorded, named in how to accept an intended slowdown."""
    v, r = j.verdict, j.result
    assert v is not None
    metric = metric_for(r.unit)
    lines = [f"perfgate {v.outcome.value}: {j.name}", f"  {v.message}"]
    if j.memory is not None:
        shown = ", ".join(c[:10] for c in j.baseline_commits)
        return "\n".join([*lines, f"  {memory_line(j.memory.figures) or 'no memory sampled'}",
                          *([f"  baseline: {len(j.baseline_commits)} run(s) at {shown}"]
                            if shown else [])])
    if v.ratio is not None:
        # the interval the verdict's words give, labelled as they label it
        ci = (f" [{v.ci[0]:.3f}-{v.ci[1]:.3f}] (at {1 - j.rule.alpha:.0%} confidence)"
              if v.ci else "")
        p = f", p={v.p_value:.2g} (one-sided, alpha={j.rule.alpha:g})" \
            if v.p_value is not None else ""
        lines.append(f"  throughput ratio head/baseline: {v.ratio:.3f}{ci}{p}")
        basis = ("base side's median" if r.extra.get("ab_base") is not None else
                 "geometric mean of the baseline runs' medians: the ratio's denominator")
        window = " (median window)" if metric.higher_is_better else ""
        lines.append(f"  {metric.unit}: {figure(metric.shown(r.rate))} now{window} vs "
                     f"{figure(metric.shown(j.baseline_rate))} baseline ({basis})")
    ab_base = r.extra.get("ab_base")
    if ab_base is not None:
        commit = str(r.extra.get("ab_base_commit"))[:10]
        lines.append(f"  baseline: base revision {ab_base} ({commit}), measured in alternating "
                     "turns with head")
    elif j.baseline_commits:
        shown = ", ".join(c[:10] for c in j.baseline_commits)
        lines.append(f"  baseline: {len(j.baseline_commits)} run(s) at {shown}")
    if r.phases:
        gpu = any(ph.gpu_ms is not None for ph in r.phases.values())
        lines.append("  phases (ms per call now vs baseline, share, cores"
                     + (", GPU ms per call):" if gpu else "):"))
        for name, ph in sorted(r.phases.items(), key=lambda kv: -kv[1].share):
            base = j.baseline_phases.get(name)
            was = f"{base:.3g}" if base is not None else "-"
            lines.append(f"    {name:<16} {ph.ms_per_call:9.3g} vs {was:>8}  "
                         f"{ph.share:5.0%}  {ph.cores:.2f}"
                         + (f"  {ph.gpu_ms:9.3g}" if ph.gpu_ms is not None else ""))
        grown = j.baseline_phases and top_phase(j)
        if grown and "->" in grown:  # a phase that grew against the baseline: no other
            lines.append(f"  grew most: {grown}")
        lines.extend(f"  {line}" for line in gpu_lines(r))
    by_phase = counts_phases(r.extra)
    lines.append("  " + metric.method.format(warmup_s=r.warmup_s, windows=len(r.samples),
                                             cores=r.cores)
                 + (f"; {phase_line(by_phase)}" if by_phase else ""))
    mem = memory_line(r.memory)
    if mem and not metric.unit.startswith("instructions/"):
        lines.append(f"  {mem}")
    profile = r.extra.get("profile")
    if isinstance(profile, dict):
        from pytest_perfgate.profile.text import lines as profile_lines

        lines.extend(f"  {line}" for line in profile_lines(profile))
    if v.outcome is Outcome.REGRESSION and r.extra.get("ab_base") is None:
        rid = run_id or "RUN_ID"
        how = (f"perfgate rebaseline {rid} --reason '...'" if j.environment_changes
               else f"perfgate accept {rid}")
        lines.append("  this run never serves as a baseline (re-running cannot pass it); if "
                     + ("the upgrade's slowdown is intended, start a new baseline: "
                        if j.environment_changes else "the slowdown is intended, accept it: ")
                     + (how if run_id else
                        f"record the run (--perfgate-record true), then {how}"))
    return "\n".join(lines)


def to_json(judged: Sequence[Judged], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report (report/readback.py reads it back): per benchmark its verdict, the
    rule it was judged by, what it rests on (``pairs``: each pair of side processes' ratio,
    interval and outcome, when fresh pairs measured it) and the measurement as recorded (a
    memory verdict's: its figure, as :func:`~pytest_perfgate.core.memory.as_record`)."""
    out = []
    for j in judged:
        v = j.verdict
        r = j.result if j.memory is None else as_record(j.name, j.memory, j.result.transitions)
        out.append({
            "benchmark": j.name, "test": j.test_id,
            "steps_per_s": r.rate,
            "baseline_steps_per_s": j.baseline_rate,
            "verdict": None if v is None else v.outcome.value,
            "message": None if v is None else v.message,
            "ratio": None if v is None else v.ratio,
            "ci": None if v is None or v.ci is None else list(v.ci),
            "p_value": None if v is None else v.p_value,
            "resolvable_drop": None if v is None else v.resolvable,
            "threshold": j.rule.threshold, "alpha": j.rule.alpha,
            "unstable": j.rule.unstable, "inconclusive": j.rule.inconclusive,
            "fails": bool(v and v.fails(j.rule)),
            "baseline_commits": j.baseline_commits, "top_phase": top_phase(j),
            "environment_changes": [dict(c) for c in j.environment_changes],
            "pairs": [{"ratio": p.ratio, "ci": None if p.ci is None else list(p.ci),
                       "outcome": p.outcome.value} for p in j.pairs],
            "remeasured": j.remeasured,
            "result": BenchRecord.of(r, None if v is None else v.outcome.value,
                                     None if v is None else j.rule.threshold,
                                     j.where).to_json(),
        })
    return {"perfgate_report": 1, "benchmarks": out, "metadata": meta or {}}


def write_json(path: str, judged: Sequence[Judged], meta: dict[str, Any] | None = None) -> None:
    from pathlib import Path

    from pytest_perfgate.history.store import atomic_write

    data = json.dumps(to_json(judged, meta), indent=2, default=str).encode()
    atomic_write(Path(path), data)


def jsonl(judged: Sequence[Judged], meta: Mapping[str, Any], run: Mapping[str, Any]
          ) -> str:
    """One JSON object per benchmark and line, each self-contained (``run``: run id, commit,
    time), so a file appended to by many runs stays one line per measured benchmark."""
    common = {**dict(run), "machine": meta.get("machine")}
    return "".join(json.dumps({**common, **entry}, default=str, sort_keys=True) + "\n"
                   for entry in to_json(judged)["benchmarks"])


def markdown(judged: Sequence[Judged]) -> str:
    cols, units = columns(judged)
    head = "| " + " | ".join(cols) + " |"
    sep = "|" + "|".join("---" for _ in cols) + "|"
    body = ["| " + " | ".join(c.replace("|", "\\|") for c in row(j, units)) + " |"
            for j in judged]
    extra = [f"- {n}" for n in notes(judged, every_verdict=False)]
    return "\n".join(["### perfgate", "", head, sep, *body, "", *extra, ""])

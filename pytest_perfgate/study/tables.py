"""A calibration study as text: the markdown table per setting, the measured slowdowns,
the one-sentence conclusion and the targets it meets (``perfgate calibrate``'s output).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pytest_perfgate.core.gate import Rule, percent
from pytest_perfgate.core.sequential import plan
from pytest_perfgate.study.analysis import analyse, analyse_sequential
from pytest_perfgate.study.findings import Rate, Report
from pytest_perfgate.study.trials import ESTIMATORS, TARGETS, TrialRecord


def render(reports: Iterable[Report]) -> list[str]:
    """A markdown table: one line per mode, false alarms, then detection per slowdown."""
    reports = list(reports)
    slows = sorted({r.slowdown for rep in reports for r in rep.rows if r.slowdown > 0})
    head = ["mode", "A/A false alarms"] + [f"+{percent(s)} caught" for s in slows] + \
           ["INCONCLUSIVE (all trials)", "UNSTABLE", "s per side per verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rep in reports:
        inc = Rate(sum(r.inconclusive.k for r in rep.rows), sum(r.inconclusive.n for r in rep.rows))
        cells = [f"{rep.mode} ({_setting(rep)})", str(rep.false_alarms)]
        for s in slows:
            row = rep.row(s)
            cells.append(str(row.called) if row else "-")
        unst = sum(r.unstable for r in rep.rows)
        cells += [f"{inc.value:.0%}" if inc.n else "-", str(unst), f"{rep.seconds:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _setting(rep: Report) -> str:
    thr = f"threshold {rep.rule.threshold:.1%}, alpha {rep.rule.alpha:g}"
    if rep.mode == "A/B sequential":
        out = f"at most {rep.turns} turns, {rep.estimator}, {thr}"
        return out + (f"; {rep.left_out} trials stopped sooner live, left out"
                      if rep.left_out else "")
    if rep.mode == "history":
        return f"{rep.turns} windows per run, {thr}"
    return f"{rep.turns} turns, {rep.estimator}, {thr}"


NONE_KEPT = ("not measured: no turn pair kept, the outside load changed between the two turns "
             "of every pair")


def render_measured(rep: Report) -> list[str]:
    """Verification that an injected slowdown measures as itself."""
    out = []
    for r in rep.rows:
        what = "A/A" if r.slowdown == 0 else f"injected +{percent(r.slowdown)}"
        if r.measured is None:
            if r.called.n:
                out.append(f"  {what:>14}: {NONE_KEPT} ({r.called.n} trial(s))")
            continue
        m, lo, hi = r.measured
        ci = f" [{lo:+.1%} .. {hi:+.1%}]" if not math.isnan(lo) else ""
        out.append(f"  {what:>14}: measured {m:+.2%}{ci} over {r.called.n} trials")
    return out


def conclusion(rep: Report, power: float = 0.95, max_false: float = 0.01) -> str:
    """The sentence a team wants: the smallest regression this runner catches."""
    fa = rep.false_alarms
    setting = f"({_setting(rep)}, {rep.seconds:.0f} s of measurement per side)"
    if not fa.n:
        return ("No A/A trials were run, so the false-alarm rate is unknown: run with "
                "--aa-trials >= 50.")
    if fa.value > max_false:
        return (f"This runner raised false alarms in {fa} of A/A trials {setting}, above "
                f"{max_false:.0%}: raise --threshold or --turns and run again.")
    s = rep.smallest_detected(power, max_false)
    ci = fa.ci
    if s is None:
        return (f"None of the tested slowdowns was caught >= {power:.0%} of the time "
                f"{setting}: try larger slowdowns, more --turns, or a lower --threshold.")
    row = rep.row(s)
    assert row is not None
    return (f"This runner catches a {percent(s)} slowdown {row.called.value:.0%} of the time "
            f"(95% CI {row.called.ci[0]:.0%}-{row.called.ci[1]:.0%}) with "
            f"{fa.value:.0%} false alarms (95% CI up to {ci[1]:.1%}) {setting}.")


def meets_targets(rep: Report) -> dict[str, bool | None]:
    """The targets for the best mode, judged on point estimates; None where the study did
    not measure what a target needs (a slowdown it did not inject, no A/A trials)."""
    d5, d3, d2, fa = rep.row(0.05), rep.row(0.03), rep.row(0.02), rep.false_alarms
    return {
        "false_alarms<=1%": fa.value <= TARGETS["false_alarms"] if fa.n else None,
        "5% caught>=95%": None if d5 is None else d5.called.value >= TARGETS["detect_5"],
        "3% caught>=80%": None if d3 is None else d3.called.value >= TARGETS["detect_3"],
        "2% caught>=95%": None if d2 is None else d2.called.value >= TARGETS["detect_2"],
        "<=20 s per side": rep.seconds <= TARGETS["seconds"],
    }


def lever_table(trials: Sequence[TrialRecord], rule: Rule,
                estimators: Sequence[str] = ESTIMATORS,
                turns: Sequence[int] = ()) -> list[str]:
    """Offline levers on the same data: estimator x turns -> false alarms, detection, sd."""
    full = min(len(t.base) for t in trials)
    counts = sorted({n for n in (*turns, full) if 2 <= n <= full})
    reps = [analyse(trials, rule, e, n) for n in counts for e in estimators]
    return render(reps)


def sequential_levers(trials: Sequence[TrialRecord], rule: Rule, turns: Sequence[int],
                      looks: Sequence[int] = (1, 2, 4)) -> list[str]:
    """Other sequential designs replayed on the same trials: at most N turns x K looks.
    Trials that measured fewer pairs live than a design needs are left out (and counted)."""
    designs = {(n, plan(n, k, rule.alpha).looks): k for n in sorted(set(turns)) if n >= 2
               for k in sorted(set(looks), reverse=True)}  # merged looks: one row each
    return render(analyse_sequential(trials, rule, n, k) for (n, _), k in sorted(designs.items()))

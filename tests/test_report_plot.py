"""The report's PNG names every mark it draws, the band covers only the baseline runs, failed
and accepted runs are marked, and the y axis starts at 0 unless the title says otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.report.changepoints import ChangePoint
from pytest_perfgate.report.series import series

pytest.importorskip("matplotlib")


def runs(levels: list[tuple[float, str]]) -> list[RunRecord]:
    out = []
    for i, (level, verdict) in enumerate(levels):
        samples = (level * 0.98, level, level * 1.02, level)
        out.append(RunRecord(f"20240101T0000{i:02d}-ffff{i:02d}", float(i), str(i) * 40, 0,
                             "main", False, "box", "fp", {"mode": "history"},
                             {"walk": BenchRecord("walk", samples, 1e6 / level,
                                                  verdict=verdict)}))
    return out


@pytest.fixture
def drawn(monkeypatch) -> dict[str, Any]:
    """What the last plot drew: legend texts, title, y limits, the band's x extents."""
    from matplotlib.figure import Figure

    seen: dict[str, Any] = {}

    def savefig(self: Figure, *a: Any, **k: Any) -> None:
        ax = self.axes[0]
        seen["legend"] = [t.get_text() for t in ax.get_legend().get_texts()]
        seen["title"] = ax.get_title(loc="left")
        seen["ylim"] = ax.get_ylim()
        seen["bands"] = [(round(c.get_paths()[0].vertices[:, 0].min(), 1),
                          round(c.get_paths()[0].vertices[:, 0].max(), 1))
                         for c in ax.collections if c.get_label().startswith("baseline runs")
                         or (c.get_label().startswith("_") and hasattr(c, "get_paths")
                             and c.get_alpha() == 0.13)]
        seen["marks"] = {ln.get_label(): ln for ln in ax.get_lines()}
        seen["xticks"] = [t.get_text() for t in ax.get_xticklabels()]
    monkeypatch.setattr(Figure, "savefig", savefig)
    return seen


def test_every_mark_is_named_the_band_spans_baseline_runs_and_zero_is_honest(
        tmp_path: Path, drawn: dict[str, Any]) -> None:
    from pytest_perfgate.report.plots import Band, plot

    h = runs([(1.6, "OK")] * 2 + [(1.6, "REGRESSION")] + [(1.6, "OK")] * 2
             + [(3.3, "REGRESSION"), (3.3, "REGRESSION"), (3.3, "REGRESSION")])
    s = series(h, "walk")
    band = Band(625e3, 0.05, 0, 4, (0, 1, 3, 4))  # run 2 failed: not a baseline run
    plot(s, tmp_path / "p.png", 7, band, [ChangePoint(5, 1.6, 3.3)], "walk: REGRESSION",
         accepted=frozenset({h[6].run_id}))
    assert drawn["legend"] == [
        "baseline runs ±5%", "baseline level (gate)", "fails below: level -5%",
        "its windows, min to max", "run median", "failed the gate (not a baseline)",
        "failed, accepted (perfgate accept)", "this run", "change point (commit, change)",
        "level between change points"]
    assert drawn["bands"] == [(-0.4, 1.4), (2.6, 4.4)]  # never behind runs 2, 5, 6, 7
    assert drawn["ylim"][0] == 0 and "does not start at 0" not in drawn["title"]


def test_a_flat_history_is_zoomed_and_the_title_says_so(tmp_path: Path,
                                                         drawn: dict[str, Any]) -> None:
    from pytest_perfgate.report.plots import plot

    s = series(runs([(1.6, "OK"), (1.62, "OK"), (1.59, "OK")]), "walk")
    plot(s, tmp_path / "p.png", 2, None, [], "walk: OK")
    assert drawn["ylim"][0] > 0
    assert drawn["title"] == "walk: OK  [y axis does not start at 0]"
    assert "failed the gate (not a baseline)" not in drawn["legend"]


def test_a_failed_current_run_shows_both_its_marks_and_runs_of_one_commit_differ(
        tmp_path: Path, drawn: dict[str, Any]) -> None:
    """The "this run" dot covered the "failed the gate" cross of every failed run; runs of
    one commit all carried the same x label."""
    from pytest_perfgate.report.plots import plot, tick_labels

    h = runs([(1.6, "OK"), (1.6, "OK"), (3.3, "UNSTABLE")])
    h = [RunRecord(r.run_id, r.started_at, "a" * 40, *(getattr(r, f) for f in (
        "commit_date_ms", "branch", "dirty", "machine", "fingerprint", "metadata",
        "benchmarks"))) for r in h]
    plot(series(h, "walk"), tmp_path / "p.png", 2, None, [], "walk: UNSTABLE")
    ring, cross = drawn["marks"]["this run"], drawn["marks"]["failed the gate (not a baseline)"]
    assert ring.get_markerfacecolor() == "none" and ring.get_zorder() < cross.get_zorder()
    assert drawn["xticks"] == ["aaaaaaa #1", "aaaaaaa #2", "aaaaaaa #3"]
    assert tick_labels(["a" * 40, "b" * 40, "a" * 40]) == ["aaaaaaa #1", "bbbbbbb",
                                                           "aaaaaaa #2"]

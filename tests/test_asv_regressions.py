"""asv's Regressions page lists the gated series for a 10% step still present, with the
product's default windows (8 x 1 s) and with short ones (4 x 0.3 s).

A scratch repository records nine commits with `pytest --perfgate` on a fake clock: five at
one speed, then four 10% slower (the newest commits: the step is still present). Each run's
windows scatter by its own amount (0.5-4%, as runs on a shared runner do), so the intervals
perfgate exports for asv's weights differ from run to run, which is what hid a step from the
Regressions page before (docs/history-asv-site.md). `perfgate publish` builds the site;
headless Chromium reads the page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from asv_browser import browser_page, chromium_path, serve
from fake_session import FAKE_CLOCK_CONFTEST
from helpers import asv_project

pytest.importorskip("asv")
pytestmark = pytest.mark.slow  # subprocess pytest runs, asv publish and a browser

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
BENCH = "test_perf.test_walk"
# (speed factor, window noise) per commit: the step of +10% time per env-step at commit 5
PLAN = [(1.0, 0.01), (1.0, 0.04), (1.0, 0.005), (1.0, 0.02), (1.0, 0.01),
        (1.1, 0.04), (1.1, 0.005), (1.1, 0.02), (1.1, 0.01)]
PERF_TEST = """
import math, os, random
from conftest import CLOCK

def test_walk(perfgate):
    slow, noise = float(os.environ["SLOW"]), float(os.environ["NOISE"])
    rng = random.Random(int(os.environ["PERF_SEED"]))
    state = {"calls": 0, "f": 1.0}
    def step():  # 10 env-steps per call, 100 us per env-step at SLOW=1
        if state["calls"] % 100 == 0:  # the machine's speed wanders every 0.1 s
            state["f"] = math.exp(rng.gauss(0, noise))
        state["calls"] += 1
        CLOCK.advance(float(os.environ.get("COST", "0.001")) * slow * state["f"])
    perfgate.measure(step, transitions=int(os.environ.get("TRANSITIONS", "10")))
"""


def _run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")
             or k == "PERFGATE_REQUIRE_TOOLS"}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**clean, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd), **env})


def publish_site(repo: Path, windows: list[str], scripts: Path,
                 plan: list[tuple[float, float]] = PLAN, **env: str) -> dict[str, Any]:
    repo.mkdir()
    assert asv_project(repo, FAKE_CLOCK_CONFTEST, PERF_TEST).returncode == 0
    commits = []
    for i, (slow, noise) in enumerate(plan):
        (repo / "walker.py").write_text(f"COST = {slow}  # commit {i}\n")
        _run([*GIT, "add", "-A"], repo)
        assert _run([*GIT, "commit", "-q", "-m", f"c{i}"], repo).returncode == 0
        done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--perfgate",
                     "--perfgate-machine=testbox", *windows, "test_perf.py"], repo,
                    SLOW=str(slow), NOISE=str(noise), PERF_SEED=str(i), **env)
        assert "recorded run" in done.stdout, done.stdout + done.stderr
        commits.append(_run(["git", "rev-parse", "HEAD"], repo).stdout.strip())
    done = _run([sys.executable, "-m", "pytest_perfgate.cli", "publish", "--no-pull",
                 "--scripts", str(scripts)], repo)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"html": repo / "html", "commits": commits, "results": repo / "results"}


def intervals(site: dict[str, Any]) -> list[float]:
    """Each commit's exported 99% interval width, relative to its value (asv's weights)."""
    out = []
    for commit in site["commits"]:
        (path,) = (site["results"] / "testbox").glob(f"{commit[:8]}-*.json")
        data = json.loads(path.read_text())
        cols = data["result_columns"]
        row = data["results"][f"{BENCH}.track_s_per_step"]
        value = row[0][0]
        a, b = row[cols.index("stats_ci_99_a")][0], row[cols.index("stats_ci_99_b")][0]
        out.append((b - a) / value)
    return out


@pytest.mark.parametrize("windows", [[], ["--perfgate-windows=4", "--perfgate-window-time=0.3"]],
                         ids=["default-windows", "short-windows"])
def test_regressions_page_lists_a_10_percent_step_still_present(
        windows: list[str], tmp_path: Path, node_modules: Path) -> None:
    chromium_path()  # no browser: skip before recording anything
    site = publish_site(tmp_path / "proj", windows, node_modules)
    widths = intervals(site)
    assert max(widths) > 3 * min(widths), widths  # the weights differ as on a shared runner
    with serve(site["html"]) as base, browser_page(base) as (page, log):
        page.goto(f"{base}index.html#/regressions", wait_until="networkidle")
        page.wait_for_selector("#regressions-body table tbody tr")
        rows = page.eval_on_selector_all(
            "#regressions-body table tbody tr",
            "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))")
        page.goto("about:blank")
        page.goto(f"{base}index.html#/summarylist", wait_until="networkidle")
        page.wait_for_selector("table tbody tr")
        listing = page.eval_on_selector_all(
            "table tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))")
    assert not log.errors and not log.outside, (log.errors, log.outside)
    listed = {row[0]: row for row in rows}
    gated = f"{BENCH}.track_s_per_step"
    assert gated in listed, rows
    assert listed[gated][2] == site["commits"][5][:8], rows  # where it got slower
    assert float(listed[gated][3].rstrip("x")) == pytest.approx(1.10, rel=0.04)
    # the benchmark list: the gated series' recent change is the step, "+10.x%  (+10.xμs)"
    (row,) = [r for r in listing if r[0] == gated]
    (change,) = [c for c in row if c.endswith(")") and "%" in c]
    assert float(change.split("%")[0]) == pytest.approx(10.0, abs=3.0), row


HOVER_JS = r"""() => {
  const plot = $('#main-graph').data('plot');
  const off = plot.getPlotOffset();
  const box = document.querySelector('#main-graph canvas.flot-base').getBoundingClientRect();
  const p = plot.getData()[0].data.slice(-1)[0];
  return {x: box.left + off.left + plot.getXAxes()[0].p2c(p[0]),
          y: box.top + off.top + plot.getYAxes()[0].p2c(p[1]), value: p[1],
          ylabel: plot.getYAxes()[0].options.axisLabel,
          yticks: plot.getYAxes()[0].ticks.map(t => t.label)};
}"""


@pytest.mark.timing  # asv draws the graph: its redraw race comes with load, so alone
def test_axis_and_tooltip_read_one_unit_without_exponent_ticks(
        tmp_path: Path, node_modules: Path) -> None:
    """A series of 0.6-1.2 us per env-step read 'nanoseconds' with ticks up to 1.00e+3,
    1.20e+3 while its tooltip said 1.337μs."""
    chromium_path()
    plan = [(1.0, 0.005)] * 3 + [(2.0, 0.005)] * 3  # 0.6 us, then 1.2 us per env-step
    site = publish_site(tmp_path / "proj", ["--perfgate-windows=4",
                                            "--perfgate-window-time=0.3"], node_modules,
                        plan, COST="0.0006", TRANSITIONS="1000")
    gated = f"{BENCH}.track_s_per_step"
    with serve(site["html"]) as base, browser_page(base) as (page, log):
        page.goto(f"{base}index.html#{gated}", wait_until="networkidle")
        page.wait_for_function("() => window.$ && $('#main-graph').data('plot') !== undefined")
        drawn = page.evaluate(HOVER_JS)
        page.mouse.move(drawn["x"], drawn["y"])
        page.wait_for_selector(".tooltip-inner")
        tip = page.inner_text(".tooltip-inner")
    assert not log.errors and not log.outside, (log.errors, log.outside)
    assert drawn["ylabel"] == "microseconds", drawn
    assert drawn["yticks"] and all("e" not in t for t in drawn["yticks"]), drawn
    assert 1.0 < max(float(t) for t in drawn["yticks"]) < 2.0, drawn
    assert tip.startswith(f"{drawn['value'] * 1e6:.3f}μs @ "), (tip, drawn)

"""`perfgate publish` (asv publish + local scripts) over recorded history renders in Chromium.

A scratch git repository holds a tiny perf test on a fake clock, so each commit's speed is
exact (see SLOWDOWN). `pytest --perfgate` in a subprocess records each commit (the files
users get), `perfgate publish --scripts` builds the site with asv's CDN scripts copied from
tests/node, and headless Chromium opens it over a local http server with every other host
refused. Set PERFGATE_SCREENSHOT_DIR to keep the screenshots for a person to look at.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from asv_browser import PageLog, browser_page, chromium_path, serve
from fake_session import FAKE_CLOCK_CONFTEST
from helpers import asv_project

pytest.importorskip("asv")
pytestmark = pytest.mark.slow  # subprocess pytest runs, asv publish and a browser

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
BENCH = "test_perf.test_walk"  # the perf test's name; its asv series are found in index.json
# Physics cost per commit (x 0.8 ms per call of 10 env-steps, plus 0.2 ms observing): 120,
# 120, 80, 80, 100, 100 us per env-step. The last two are a regression (1.25x the best), while
# env-steps/s ends above its low: asv, reading it as lower-is-better, would call that a
# regression too unless perfgate publish turns its detection off.
SLOWDOWN = [1.25, 1.25, 0.75, 0.75, 1.0, 1.0]
CONFTEST = FAKE_CLOCK_CONFTEST
PERF_TEST = """
import os, random
from conftest import CLOCK

def test_walk(perfgate):
    slow = float(os.environ["SLOW"])
    rng = random.Random(int(os.environ["PERF_SEED"]))
    def step():  # 10 env-steps per call: 100 us per env-step at SLOW=1
        with perfgate.phase("physics"):
            CLOCK.advance(0.0008 * slow * (1 + rng.gauss(0, 0.005)))
        with perfgate.phase("observe"):
            CLOCK.advance(0.0002)
    perfgate.measure(step, transitions=10)
"""
# asv's axis label for unit "seconds" is the name of the largest unit below the smallest value.
SENSIBLE_TIME_LABELS = ("nanoseconds", "microseconds", "milliseconds")


def seconds_per_step(slow: float) -> float:
    """What PERF_TEST's step costs per env-step at ``slow`` (exact: a fake clock)."""
    return (0.0008 * slow + 0.0002) / 10


def _run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")
             or k == "PERFGATE_REQUIRE_TOOLS"}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**clean, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd), **env})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, node_modules: Path) -> dict[str, Any]:
    """The published site of the recorded commits: html dir, results dir, commits."""
    chromium_path()  # no browser: skip before recording anything
    repo = tmp_path_factory.mktemp("proj")
    assert asv_project(repo, CONFTEST, PERF_TEST).returncode == 0
    commits = []
    for i, slow in enumerate(SLOWDOWN):
        (repo / "walker.py").write_text(f"PHYSICS_COST = {slow}  # commit {i}\n")
        _run([*GIT, "add", "-A"], repo)
        assert _run([*GIT, "commit", "-q", "-m", f"c{i}"], repo).returncode == 0
        done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--perfgate",
                     "--perfgate-machine=testbox", "--perfgate-windows=6",
                     "--perfgate-window-time=0.05", "test_perf.py"], repo,
                    SLOW=str(slow), PERF_SEED=str(i))
        assert "recorded run" in done.stdout, done.stdout + done.stderr
        commits.append(_run(["git", "rev-parse", "HEAD"], repo).stdout.strip())
    done = _run([sys.executable, "-m", "pytest_perfgate.cli", "publish", "--no-pull",
                 "--scripts", str(node_modules)], repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "integrity hashes hold for 6" in done.stdout, done.stdout
    # the last word says how to open it: a browser refuses its data files from file://
    last = done.stdout.splitlines()[-1]
    assert last.startswith("perfgate publish: open it over http (a browser refuses its data "
                           "files from file://): perfgate publish --serve (from the project "
                           "folder), or python -m http.server --directory "), last
    assert last.endswith("html and open http://localhost:8000/"), last
    assert not list(repo.glob(".perfgate-publish-*")), "the config copy was left behind"
    index = json.loads((repo / "html" / "index.json").read_text())
    ours = sorted(n for n in index["benchmarks"] if n == BENCH or n.startswith(BENCH + "."))
    # The gated series: seconds per env-step (named <bench>.track_s_per_step), or the older
    # seconds per million env-steps under the bare name.
    gated = next(n for n in (f"{BENCH}.track_s_per_step", BENCH) if n in ours)
    return {"html": repo / "html", "results": repo / "results", "commits": commits,
            "index": index, "series": ours, "gated": gated}


def _recorded(site: dict[str, Any], series: str) -> list[float]:
    """The value each commit's asv result file holds for ``series``, in commit order."""
    out = []
    for commit in site["commits"]:
        (path,) = (site["results"] / "testbox").glob(f"{commit[:8]}-*.json")
        out.append(json.loads(path.read_text())["results"][series][0][0])
    return out


def _axis_ok(site: dict[str, Any], series: str, drawn: dict[str, Any]) -> None:
    """A time series reads in a sensible unit, anything else in its own unit."""
    unit = site["index"]["benchmarks"][series]["unit"]
    if unit == "seconds":
        assert drawn["ylabel"] in SENSIBLE_TIME_LABELS, (series, drawn)
        # asv scales to the unit below the smallest value: a series spanning 600-1000 us
        # reads "1.00e+3 microseconds" at the top, never thousands of minutes
        assert all(0 <= float(t) < 1e4 for t in drawn["yticks"]), (series, drawn)
    elif unit == "bytes":  # asv scales a memory series like a time one (<bench>.rss)
        assert drawn["ylabel"] in ("bytes", "kilobytes", "megabytes", "gigabytes"), \
            (series, drawn)
    else:
        assert drawn["ylabel"] == unit, (series, drawn)


PLOT_JS = r"""() => {
  const plot = $('#main-graph').data('plot');
  const canvas = document.querySelector('#main-graph canvas.flot-base');
  const ctx = canvas.getContext('2d');
  const ratio = canvas.width / canvas.clientWidth;
  const off = plot.getPlotOffset();
  const color = plot.getData()[0].color;  // "#rrggbb" or "rgb(r,g,b)"
  const want = color.startsWith('#') ? [1, 3, 5].map(i => parseInt(color.slice(i, i + 2), 16))
                                     : color.match(/\d+/g).slice(0, 3).map(Number);
  const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;  // one readback
  const inked = (left, top) => {  // pixels of the series colour in a 9x9 css-px box
    let n = 0;
    for (let y = Math.round((top - 4) * ratio); y <= Math.round((top + 4) * ratio); y++) {
      for (let x = Math.round((left - 4) * ratio); x <= Math.round((left + 4) * ratio); x++) {
        if (x < 0 || y < 0 || x >= canvas.width || y >= canvas.height) continue;
        const i = 4 * (y * canvas.width + x);
        const d = Math.abs(px[i] - want[0]) + Math.abs(px[i + 1] - want[1])
                + Math.abs(px[i + 2] - want[2]);
        if (px[i + 3] > 0 && d < 90) n++;
      }
    }
    return n;
  };
  const series = plot.getData();
  const points = series[0].data.map(p => [p[0], p[1],
      inked(plot.getXAxes()[0].p2c(p[0]) + off.left, plot.getYAxes()[0].p2c(p[1]) + off.top)]);
  return {series: series.length, points: points, color: color,
          empty_corner: inked(off.left + 12, off.top + 12),
          ylabel: plot.getYAxes()[0].options.axisLabel,
          yticks: plot.getYAxes()[0].ticks.map(t => t.label)};
}"""


# asv 0.6.6's page can draw a plot while it has its graph display hidden between two of its
# own URL updates; flot then throws this. It depends on timing (seen under load average ~4,
# and beside another test in run.sh's parallel phase), not on the data: such a load is
# repeated, and a fourth occurrence in a row fails the test.
ASV_REDRAW_RACE = "Invalid dimensions for plot"
LOADS = 4
LATE_ERROR_MS = 1000


def _open_graph(page: Any, log: PageLog, base: str, series: str) -> dict[str, Any]:
    for attempt in range(1, LOADS + 1):
        before = len(log.errors)
        page.goto("about:blank")  # a new hash alone would keep the previous plot around
        page.goto(f"{base}index.html#{series}", wait_until="networkidle")
        page.wait_for_function("() => document.body.innerText.includes('origin of swallow') || "
                               "(window.$ && $('#main-graph').data('plot') !== undefined)")
        if "origin of swallow" in page.inner_text("body"):  # asv's page when a script is missing
            pytest.fail(f"asv's scripts did not load: {log}")
        drawn: dict[str, Any] = page.evaluate(PLOT_JS)
        # the race's error comes from a redraw after the first plot: give it time to land in
        # this load's window rather than the next series' (or after the last check)
        page.wait_for_timeout(LATE_ERROR_MS)
        raced = log.errors[before:]
        if attempt < LOADS and raced and all(ASV_REDRAW_RACE in e for e in raced):
            del log.errors[before:]
            continue
        return drawn
    raise AssertionError("unreachable")


def _keep_screenshot(page: Any, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("PERFGATE_SCREENSHOT_DIR"):  # for a person to look at afterwards
        out = Path(os.environ["PERFGATE_SCREENSHOT_DIR"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, out / name)
    return shot


def _clean(log: PageLog) -> None:
    # asv's redraw race can land later than LATE_ERROR_MS after a load that drew correctly
    # (seen once under CI's timing phase); _open_graph fails where it repeats, so here it
    # is asv's, not an error of the page perfgate wrote
    assert [e for e in log.errors if ASV_REDRAW_RACE not in e] == [], log.errors
    assert not log.outside, f"the page still reaches other hosts: {log.outside}"


@pytest.mark.timing  # asv's redraw race (ASV_REDRAW_RACE) comes with load: drawn alone
def test_gated_series_graph_is_drawn_with_a_time_axis(site: dict[str, Any],
                                                      tmp_path: Path) -> None:
    gated = site["gated"]
    with serve(site["html"]) as base, browser_page(base) as (page, log):
        drawn = _open_graph(page, log, base, gated)
        shot = _keep_screenshot(page, tmp_path, "graph-gated.png")
    _clean(log)
    assert shot.stat().st_size > 10_000
    # One line (one machine, one Python): no duplicates, one point per commit, in order.
    assert drawn["series"] == 1, drawn
    values = [p[1] for p in drawn["points"]]
    assert values == pytest.approx(_recorded(site, gated), rel=1e-9)
    # Each point is inked in the series colour; an empty corner of the plot is not.
    assert all(p[2] > 0 for p in drawn["points"]), drawn
    assert drawn["empty_corner"] == 0, drawn
    expected = [seconds_per_step(slow) for slow in SLOWDOWN]
    if values == pytest.approx([e * 1e6 for e in expected], rel=0.02):
        # The older series, seconds per million env-steps: 80-120 s reads "minutes".
        assert drawn["ylabel"] == "minutes", drawn
        pytest.xfail("the gated series is still seconds per million env-steps: asv labels "
                     "100 us per env-step 'minutes'")
    assert values == pytest.approx(expected, rel=0.02)
    assert drawn["ylabel"] == "microseconds", drawn
    _axis_ok(site, gated, drawn)


@pytest.mark.timing  # asv's redraw race (ASV_REDRAW_RACE) comes with load: drawn alone
def test_other_series_graphs_are_drawn(site: dict[str, Any], tmp_path: Path) -> None:
    others = [n for n in site["series"] if n != site["gated"]]
    assert f"{BENCH}.phase.physics" in {n.removesuffix("_ms") for n in others}, others
    with serve(site["html"]) as base, browser_page(base) as (page, log):
        for series in others:
            drawn = _open_graph(page, log, base, series)
            _keep_screenshot(page, tmp_path, f"graph-{series.rsplit('.', 1)[-1]}.png")
            assert drawn["series"] == 1, (series, drawn)
            assert [p[1] for p in drawn["points"]] == pytest.approx(
                _recorded(site, series), rel=1e-9)
            assert all(p[2] > 0 for p in drawn["points"]), (series, drawn)
            _axis_ok(site, series, drawn)
    _clean(log)


def test_benchmark_list_names_every_series_once(site: dict[str, Any], tmp_path: Path) -> None:
    with serve(site["html"]) as base, browser_page(base) as (page, log):
        page.goto(f"{base}index.html#/summarylist", wait_until="networkidle")
        page.wait_for_selector("table tbody tr")
        names = page.eval_on_selector_all(
            "table tbody tr td:first-child", "cells => cells.map(c => c.innerText.trim())")
        _keep_screenshot(page, tmp_path, "benchmark-list.png")
    _clean(log)
    assert sorted(names) == site["series"]


def test_regressions_page_lists_slowdowns_not_throughput_gains(site: dict[str, Any],
                                                                tmp_path: Path) -> None:
    with serve(site["html"]) as base, browser_page(base) as (page, log):
        page.goto(f"{base}index.html#/regressions", wait_until="networkidle")
        page.wait_for_selector("#regressions-body table tbody tr")
        rows = page.eval_on_selector_all(
            "#regressions-body table tbody tr",
            "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))")
        _keep_screenshot(page, tmp_path, "regressions.png")
    _clean(log)
    listed = {row[0]: row for row in rows}
    # The gated series and the phase that grew; never a series that is higher-is-better.
    physics = next(n for n in site["series"] if n.startswith(f"{BENCH}.phase.physics"))
    assert set(listed) == {site["gated"], physics}, rows
    assert listed[site["gated"]][2] == site["commits"][4][:8]  # where it got slower
    assert float(listed[site["gated"]][3].rstrip("x")) == pytest.approx(1.25, rel=0.03)


def test_opened_from_disk_the_page_says_how_to_serve_it(site: dict[str, Any],
                                                       tmp_path: Path) -> None:
    """asv's page from file:// ended on "Can not determine continental origin of swallow"
    (the browser refuses its scripts and data there): it now says how to open it."""
    base = site["html"].as_uri() + "/"
    with browser_page(base) as (page, _log):
        page.goto(f"{base}index.html", wait_until="load")
        page.wait_for_url("**/perfgate-serve.html")
        text = page.inner_text("body")
        _keep_screenshot(page, tmp_path, "opened-from-disk.png")
    assert "This site must be served over http" in text and "swallow" in text
    assert f"python -m http.server --directory {site['html']}" in text


def test_publish_serve_serves_the_site_until_stopped(site: dict[str, Any]) -> None:
    import signal
    import urllib.request

    repo = site["html"].parent
    proc = subprocess.Popen([sys.executable, "-m", "pytest_perfgate.cli", "publish",
                             "--no-pull", "--serve", "0"], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    try:
        line = ""
        while "serving" not in line:
            line = proc.stdout.readline()
            assert line, "publish ended before serving"
        url = line.split(" on ", 1)[1].split()[0]
        with urllib.request.urlopen(url + "index.html", timeout=30) as got:
            page = got.read().decode()
        assert 'id="perfgate-notes"' in page
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "perfgate publish: stopped serving" in out

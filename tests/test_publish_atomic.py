"""`perfgate publish` never destroys a site: bad input is refused before asv runs, the site
is built beside the old one and swapped in only when asv succeeded, SIGTERM ends asv and
leaves nothing behind, a half-written site is rebuilt (docs/history-asv-site.md)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.history.store import History

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c",
       "commit.gpgsign=false"]


def project(tmp_path: Path) -> Path:
    """A git repository with two commits, a run of each recorded, and asv's config."""
    repo = tmp_path / "proj"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": "p", "repo": ".", "branches": ["main"],
        "environment_type": "existing", "pythons": ["same"], "results_dir": "results",
        "html_dir": "html"}))
    for i in range(2):
        (repo / "f").write_text(str(i))
        subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
        subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", f"c{i}"], check=True)
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        b = BenchRecord("walk", (10.0, 10.1, 9.9, 10.0), 1e5, verdict="OK")
        History(repo / "results", "box").record(RunRecord(
            f"20240101T00000{i}-cccc0{i}", 1.7e9 + i, commit, 0, "main", False, "box", "fp",
            {"mode": "history", "python": "3.11.0"}, {"walk": b}))
    return repo


def fake_site(html: Path) -> None:
    html.mkdir()
    (html / "index.json").write_text('{"project": "earlier"}')
    (html / "graphs").mkdir()
    (html / "graphs" / "g.json").write_text("[1, 2]")


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(repo: Path) -> list[str]:
    return sorted(p.name for p in repo.iterdir() if "perfgate-publish" in p.name)


def test_a_bad_range_is_a_usage_error_naming_it_and_the_site_stays_byte_identical(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """`publish nosuchbranch..main` printed asv's traceback, exited 3 and emptied the site."""
    repo = project(tmp_path)
    fake_site(repo / "html")
    before = snapshot(repo / "html")
    monkeypatch.chdir(repo)
    for rng, bad in (("nosuchbranch..main", "nosuchbranch"), ("main..nope", "nope"),
                     ("deadbeef", "deadbeef")):
        with pytest.raises(SystemExit) as exc:
            main(["publish", "--no-pull", rng])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1] == (
            f"perfgate publish: error: commit range {rng!r}: {bad!r} is not a branch, tag or "
            f"commit of the repository {repo}: give a range git knows, e.g. HEAD~200..HEAD "
            "(git branch -a lists the branches)")
        assert "Traceback" not in err
        assert snapshot(repo / "html") == before and leftovers(repo) == []


def test_a_broken_history_is_refused_before_asv_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    repo = project(tmp_path)
    fake_site(repo / "html")
    before = snapshot(repo / "html")
    monkeypatch.chdir(repo)
    machine_json = repo / "results" / "box" / "machine.json"
    machine_json.write_text("{not json")
    assert main(["publish", "--no-pull"]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"perfgate publish: infrastructure error: {machine_json} cannot be "
                          "read (")
    assert err.rstrip().endswith("fix or delete it (the next recorded run writes it again), "
                                 "then publish")
    machine_json.write_text("[]")
    assert main(["publish", "--no-pull"]) == 3
    assert capsys.readouterr().err == (
        f"perfgate publish: infrastructure error: {machine_json} holds list, not asv's "
        "machine object: fix or delete it (the next recorded run writes it again), then "
        "publish\n")
    (repo / "results" / "benchmarks.json").unlink()
    assert main(["publish", "--no-pull"]) == 3
    assert capsys.readouterr().err == (
        f"perfgate publish: infrastructure error: no benchmarks.json in {repo / 'results'}: "
        "record runs with `pytest --perfgate` (or `asv run`) first\n")
    assert snapshot(repo / "html") == before and leftovers(repo) == []


FAKE_ASV = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["FAKE_ASV_PIDS"], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for every purpose here
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_sigterm_ends_asv_and_its_children_and_leaves_nothing_behind(
        tmp_path: Path) -> None:
    """A SIGTERM during publish left .perfgate-publish-*.json in the project folder while
    asv's child kept running."""
    repo = project(tmp_path)
    fake_site(repo / "html")
    before = snapshot(repo / "html")
    shadow = tmp_path / "shadow" / "asv"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "__main__.py").write_text(FAKE_ASV)  # `python -m asv` that hangs, with a child
    pids = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(shadow.parent), "FAKE_ASV_PIDS": str(pids)}
    proc = subprocess.Popen([sys.executable, "-m", "pytest_perfgate.cli", "publish",
                             "--no-pull"], cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (pids.exists() and len(pids.read_text().split()) == 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    assert leftovers(repo)  # the build folder exists while asv runs
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert err.splitlines()[-1] == (
        f"perfgate publish: stopped (Ctrl-C or SIGTERM): asv was ended, the site in "
        f"{repo / 'html'} is left as it was")
    asv_pid, child_pid = map(int, pids.read_text().split())
    deadline = time.monotonic() + 30
    while (alive(asv_pid) or alive(child_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(asv_pid) and not alive(child_pid)
    assert leftovers(repo) == [] and snapshot(repo / "html") == before


def test_a_killed_publishs_build_folder_is_swept_and_a_half_written_site_recognised(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_perfgate.cli._publish_site import sweep_stale
    from pytest_perfgate.cli.publish import is_asv_site

    repo = project(tmp_path)
    html = repo / "html"
    html.mkdir()
    for name in ("index.html", "asv.js", "swallow.ico"):  # what asv copies before the data
        (html / name).write_text("x")
    assert is_asv_site(html)
    (html / "notes.txt").unlink(missing_ok=True)
    stale = repo / ".html.perfgate-publish-999999999.abcd"  # no such process
    stale.mkdir()
    mine = repo / f".html.perfgate-publish-{os.getpid()}.efgh"  # a publish still running
    mine.mkdir()
    assert sweep_stale(html) == [stale] and mine.is_dir() and not stale.exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    assert not is_asv_site(other)


@pytest.mark.slow
def test_publish_swaps_in_a_new_site_and_rebuilds_a_half_written_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    pytest.importorskip("asv")
    repo = project(tmp_path)
    html = repo / "html"
    html.mkdir()
    for name in ("index.html", "asv.js", "swallow.ico"):  # a publish stopped half-way
        (html / name).write_text("x")
    monkeypatch.chdir(repo)
    assert main(["publish", "--no-pull"]) == 0, capsys.readouterr()
    index = json.loads((html / "index.json").read_text())
    assert "walk.track_s_per_step" in index["benchmarks"]
    assert leftovers(repo) == []
    before = snapshot(html)
    (repo / "results" / "benchmarks.json").write_text("{oops")
    assert main(["publish", "--no-pull"]) == 3  # asv itself stops, after it began a site
    assert "the site in" in capsys.readouterr().out
    assert snapshot(html) == before and leftovers(repo) == []


def test_the_time_axis_and_the_tooltip_are_edited_to_read_one_unit(tmp_path: Path) -> None:
    """The gated graph read 'nanoseconds' with ticks up to 1.00e+3, 1.20e+3 while its
    tooltip said 1.337μs."""
    asv = pytest.importorskip("asv")
    from pytest_perfgate.cli._publish_site import UNIT_EDITS, align_units

    shipped = Path(asv.__file__).parent / "www" / "graphdisplay.js"
    site = tmp_path / "html"
    site.mkdir()
    (site / "graphdisplay.js").write_bytes(shipped.read_bytes())
    assert align_units(site)
    text = (site / "graphdisplay.js").read_text()
    assert all(new in text and (old in new or old not in text) for old, new in UNIT_EDITS)
    assert "toPrecision(3);\n" not in text.split("perfgate_axis")[1].split("function")[0]
    assert align_units(site) and (site / "graphdisplay.js").read_text() == text  # once only
    (site / "graphdisplay.js").write_text("// another asv\n")
    assert not align_units(site)
    assert (site / "graphdisplay.js").read_text() == "// another asv\n"


def test_publish_names_what_it_swept_and_an_asv_it_cannot_edit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    from pytest_perfgate.cli import _publish_site

    repo = project(tmp_path)
    fake_site(repo / "html")
    stale = repo / ".html.perfgate-publish-999999999.abcd"  # a publish that was killed
    stale.mkdir()
    (repo / ".perfgate-publish-999999999.x.json").write_text("{}")  # its config copy

    def fake_asv(config: Path, conf: Any, html: Path, work: Path, asv_args: Any) -> int:
        html.mkdir()
        (html / "index.json").write_text('{"project": "new"}')  # no graphdisplay.js
        return 0

    monkeypatch.setattr(_publish_site, "_asv_publish", fake_asv)
    monkeypatch.chdir(repo)
    assert main(["publish", "--no-pull"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("perfgate publish: removed what an interrupted publish left: "
                      f"{stale}, {repo / '.perfgate-publish-999999999.x.json'}")
    assert out[1] == ("perfgate publish: this asv's graphdisplay.js is not the one perfgate "
                      "knows: its time axis may read nanoseconds with ticks like 1.00e+3 "
                      "while the tooltip says μs (docs/history-asv-site.md)")
    assert json.loads((repo / "html" / "index.json").read_text()) == {"project": "new"}
    assert not (repo / "html" / "graphs").exists() and leftovers(repo) == []

"""What the published site tells a newcomer: how to open it (not asv's swallow riddle), why
a graph of one commit is empty, and which benchmarks' newest run failed the gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.cli._site_notes import NOTES_ID, SERVE_PAGE, add_notes, history_notes
from pytest_perfgate.cli.publish import parse_port
from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.history.store import History
from pytest_perfgate.session.options import OptionError

PAGE = "<!doctype html>\n<html>\n  <head>\n    <title>asv</title>\n  </head>\n  <body>\n" \
       "    <nav>asv</nav>\n  </body>\n</html>\n"


def _run(results: Path, i: int, commit: str, verdict: str, name: str = "walk") -> RunRecord:
    run = RunRecord(f"20240101T00000{i}-aa000{i}", 1704067200.0 + i, commit, 0, "main", False,
                    "box", "fp", {"mode": "history"},
                    {name: BenchRecord(name, (10.0, 10.0, 10.0), 1e5, verdict=verdict)})
    History(results, "box").record(run)
    return run


def test_runs_of_one_commit_and_a_failed_newest_run_are_noted(tmp_path: Path) -> None:
    _run(tmp_path, 0, "a" * 40, "OK")
    assert history_notes(tmp_path) == [
        "Every run here measured one commit (aaaaaaaaaa): a graph draws a line from commit to "
        "commit, so each stays empty until a second commit is measured."]
    failed = _run(tmp_path, 1, "a" * 40, "UNSTABLE")
    _run(tmp_path, 2, "b" * 40, "OK", name="other")
    lone, note = history_notes(tmp_path)
    assert lone == ("These benchmarks were measured at one commit only, so their graphs stay "
                    "empty until a second commit measures them: other, walk.")
    assert note.startswith("The newest run of these benchmarks failed the gate, and the value "
                           "the list shows for them is that run's: walk (UNSTABLE, run "
                           f"{failed.run_id}).")
    assert main(["accept", failed.run_id, "--results-dir", str(tmp_path)]) == 0
    assert history_notes(tmp_path) == [lone]  # accepted: the value stands
    _run(tmp_path, 3, "c" * 40, "OK")  # walk's second commit: its graph has a line
    assert history_notes(tmp_path) == [lone.replace("other, walk", "other")]


def test_the_page_sends_file_urls_to_how_to_serve_it(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text(PAGE)
    add_notes(tmp_path, ["one <note> & more"])
    add_notes(tmp_path, ["one <note> & more"])  # again: the page is edited once
    page = (tmp_path / "index.html").read_text()
    assert page.count(f'window.location.replace("{SERVE_PAGE}")') == 1
    assert page.count(f'id="{NOTES_ID}"') == 1 and "<li>one &lt;note&gt; &amp; more</li>" in page
    serve = (tmp_path / SERVE_PAGE).read_text()
    assert "This site must be served over http" in serve
    assert f"python -m http.server --directory {tmp_path}" in serve
    assert "perfgate publish --serve" in serve


@pytest.mark.parametrize(("text", "message"), [
    ("x", "'x' is not a port number: use e.g. 8000, or 0 for any free port"),
    ("70000", "'70000' is not a port number (0-65535): use e.g. 8000"),
])
def test_a_bad_serve_port_is_named(text: str, message: str) -> None:
    with pytest.raises(OptionError) as e:
        parse_port(text)
    assert str(e.value) == message
    assert parse_port("0") == 0


def test_a_site_without_asvs_page_is_left_alone(tmp_path: Path) -> None:
    add_notes(tmp_path, ["a note"])
    assert not (tmp_path / "index.html").exists() and not (tmp_path / SERVE_PAGE).exists()

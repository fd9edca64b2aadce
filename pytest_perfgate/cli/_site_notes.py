"""What the published site tells a newcomer that asv's page does not.

asv's page opened from disk ends on its "continental origin of swallow" error (the browser
refuses its scripts and data files over file://), a graph of one commit is empty with no
word why, and the benchmark list shows the newest run's value even when that run failed the
gate. :func:`add_notes` puts the facts on the page: a redirect from file:// to a page that
says how to serve the site, and a note above the benchmarks for the other two.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from pytest_perfgate.core.atomic import atomic_write

SERVE_PAGE = "perfgate-serve.html"
NOTES_ID = "perfgate-notes"
MAX_FAILED = 10  # failed benchmarks named in the note (the rest counted)


def serve_hint(html_dir: Path) -> str:
    """The commands that serve the site, as the terminal and the page say them."""
    return (f"perfgate publish --serve (from the project folder), or python -m http.server "
            f"--directory {html_dir} and open http://localhost:8000/")


def history_notes(results_dir: Path) -> list[str]:
    """The notes the history calls for: runs of one commit only; benchmarks whose newest
    history-mode run failed the gate (the list shows that run's value)."""
    from pytest_perfgate.history.context import is_history_run
    from pytest_perfgate.history.decisions import FAILED_VERDICTS, load_decisions
    from pytest_perfgate.history.store import History, recorded_machines

    notes: list[str] = []
    commits: set[str] = set()
    bench_commits: dict[str, set[str]] = {}  # benchmark -> the commits that measured it
    failed: list[str] = []
    try:
        machines = recorded_machines(results_dir)
    except OSError:
        return notes
    for machine in machines:
        try:
            runs = [r for r in History(results_dir, machine).load_runs(asv_runs=False)
                    if is_history_run(r)]
            decisions = load_decisions(results_dir, machine)
        except (OSError, ValueError):
            continue
        commits.update(r.commit for r in runs)
        newest: dict[str, tuple[float, str | None, str]] = {}
        for r in runs:
            if r.run_id in decisions.forgotten:
                continue
            for name, b in r.benchmarks.items():
                bench_commits.setdefault(name, set()).add(r.commit)
                if name not in newest or r.started_at > newest[name][0]:
                    verdict = None if r.run_id in decisions.accepted else b.verdict
                    newest[name] = (r.started_at, verdict, r.run_id)
        where = "" if len(machines) < 2 else f", machine {machine}"
        notes += [f"New baseline on machine {machine} from run {m.run_id} (commit "
                  f"{m.commit[:10]}, {time.strftime('%Y-%m-%d', time.gmtime(m.at))}): "
                  f"{m.reason}. Runs before it judge nothing any more (perfgate rebaseline)."
                  for m in decisions.rebaselines]
        failed += [f"{name} ({verdict}, run {run_id}{where})"
                   for name, (_, verdict, run_id) in sorted(newest.items())
                   if verdict in FAILED_VERDICTS]
    if len(commits) == 1:
        (commit,) = commits
        notes.append(f"Every run here measured one commit ({commit[:10]}): a graph draws a "
                     "line from commit to commit, so each stays empty until a second commit "
                     "is measured.")
    else:
        lone = sorted(name for name, c in bench_commits.items() if len(c) == 1)
        if lone:
            shown = ", ".join(lone[:MAX_FAILED]) + (
                f" and {len(lone) - MAX_FAILED} more" if len(lone) > MAX_FAILED else "")
            notes.append(f"These benchmarks were measured at one commit only, so their "
                         f"graphs stay empty until a second commit measures them: {shown}.")
    if failed:
        shown = "; ".join(failed[:MAX_FAILED]) + (
            f"; and {len(failed) - MAX_FAILED} more" if len(failed) > MAX_FAILED else "")
        notes.append("The newest run of these benchmarks failed the gate, and the value the "
                     f"list shows for them is that run's: {shown}. `perfgate accept RUN_ID` "
                     "if the change was intended, `perfgate forget RUN_ID` if the run was "
                     "spoiled.")
    return notes


def add_notes(html_dir: Path, notes: list[str], final_dir: Path | None = None) -> None:
    """Edit asv's index.html in ``html_dir``: file:// goes to :data:`SERVE_PAGE` (written
    beside it), and ``notes`` stand above the page's content. Idempotent. ``final_dir``:
    where the site will be served from (``html_dir`` is a build folder)."""
    index = html_dir / "index.html"
    try:
        page = index.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return  # not asv's page (another asv, a failed build): nothing here to edit
    if NOTES_ID not in page:
        redirect = ('<script>if (window.location.protocol === "file:") '
                    f'window.location.replace("{SERVE_PAGE}");</script>\n')
        page = page.replace("<head>", "<head>\n    " + redirect, 1)
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        box = (f'<div id="{NOTES_ID}" class="alert alert-warning" style="margin: 60px 1em '
               f'0 1em"><b>perfgate:</b><ul>{items}</ul></div>\n' if notes else
               f'<div id="{NOTES_ID}" style="display:none"></div>\n')
        page = page.replace("<body>", "<body>\n    " + box, 1)
        atomic_write(index, page.encode("utf-8"))
        index.chmod(0o644)
    hint = html.escape(serve_hint(final_dir or html_dir))
    serve = ("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>perfgate: serve "
             "this site</title></head><body>\n<h1>This site must be served over http</h1>\n"
             "<p>It was opened from disk (file://), where the browser refuses the scripts "
             "and data files it reads: asv's own page would only say it cannot determine "
             "the continental origin of a swallow.</p>\n"
             f"<p>Serve it: <code>{hint}</code>.</p>\n</body></html>\n")
    atomic_write(html_dir / SERVE_PAGE, serve.encode("utf-8"))
    (html_dir / SERVE_PAGE).chmod(0o644)

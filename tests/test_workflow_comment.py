"""The pull request comment (pytest_perfgate/cli/_pr_comment.py, run by
.github/workflows/perfgate-comment.yml): built only from the PR job's artifact, which a fork
can forge, so a malformed one posts nothing and no benchmark name can make a link, a
mention or a broken table; one comment, updated in place."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_perfgate.cli import _pr_comment as pc
from pytest_perfgate.core.gate import Outcome, Rule, Verdict
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import BenchRecord
from pytest_perfgate.report import render

SHA = "a" * 40
SCRIPT = Path(pc.__file__)


def _judged(name: str, outcome: Outcome, ratio: float = 1.0) -> Judged:
    r = BenchRecord(name, (10.0, 10.2, 9.9), 1e5, test_file="perf/test_x.py", test_line=3)
    v = Verdict(outcome, f"{name}: {outcome.value}", ratio, (ratio - 0.01, ratio + 0.01), 1e-4)
    return Judged(r, v, Rule(threshold=0.05), f"perf/test_x.py::{name}", ["b" * 40], 1e5)


def _artifact(root: Path, machine: str = "perf-epyc", gate: int = 1,
              judged: list[Judged] | None = None, **meta: Any) -> Path:
    """What the PR job uploads: pr/report.json as pytest writes it, pr/comment.json."""
    folder = root / f"perfgate-pr-{machine}"
    (folder / "pr").mkdir(parents=True)
    render.write_json(str(folder / "pr" / "report.json"), judged if judged is not None else [
        _judged("test_walk", Outcome.REGRESSION, 0.8), _judged("test_run", Outcome.OK)],
        {"machine": machine})
    said = {"pull_request": 12, "head_sha": SHA, "machine": machine, "gate": gate, **meta}
    (folder / "pr" / "comment.json").write_text(json.dumps(said))
    return folder


class FakeApi:
    """GitHub's REST API as far as the comment uses it, recording every call."""

    def __init__(self, comments: list[dict[str, Any]] | None = None, head: str = SHA) -> None:
        self.comments, self.head, self.calls = comments or [], head, []

    def __call__(self, method: str, path: str, body: Any) -> Any:
        self.calls.append((method, path, body))
        if path == "/repos/acme/proj/pulls/12":
            return {"head": {"sha": self.head}}
        if method == "GET" and "/issues/12/comments?" in path:
            page = int(path.rsplit("page=", 1)[1])
            return self.comments[(page - 1) * 100:page * 100]
        if method in ("POST", "PATCH"):
            return {"id": 1}
        raise AssertionError(f"unexpected call {method} {path}")


def _run(tmp_path: Path, api: FakeApi, capsys: pytest.CaptureFixture[str]
         ) -> tuple[int, list[str]]:
    code = pc.run(["--artifacts", str(tmp_path), "--repository", "acme/proj", "--head-sha", SHA,
                   "--run-url", "https://github.com/acme/proj/actions/runs/9"], api)
    return code, capsys.readouterr().out.splitlines()


def test_the_comment_is_posted_once_then_updated_in_place(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _artifact(tmp_path)
    api = FakeApi()
    code, out = _run(tmp_path, api, capsys)
    assert code == 0 and out == ["perfgate comment: commented on pull request #12"]
    method, path, body = api.calls[-1]
    assert (method, path) == ("POST", "/repos/acme/proj/issues/12/comments")
    text = body["body"]
    assert text.startswith(pc.MARKER + "\n## perfgate\n")
    assert "### `perf-epyc`: REGRESSION at aaaaaaaaaa" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == ["| `test_walk` | **REGRESSION** | 0.800 [0.790-0.810] |",
                    "| `test_run` | OK | 1.000 [0.990-1.010] |"]  # failing first

    person = {"id": 5, "body": pc.MARKER + " copied by a person", "user": {"login": "bob"}}
    ours = {"id": 77, "body": text, "user": {"login": "github-actions[bot]"}}
    filler = [{"id": i, "body": "lgtm", "user": {"login": "bob"}} for i in range(100, 230)]
    api = FakeApi([person, *filler, ours])  # ours is on the second page
    code, out = _run(tmp_path, api, capsys)
    assert code == 0 and out == ["perfgate comment: updated the comment on pull request #12"]
    assert api.calls[-1][:2] == ("PATCH", "/repos/acme/proj/issues/comments/77")
    assert not [c for c in api.calls if c[0] == "POST"]


HOSTILE = ["[click](https://evil.example)", "@octocat please", "x` @team `y", "a|b|c",
           "line\nbreak [x]: https://evil.example", "<img src=x onerror=alert(1)>",
           "#1 and org/repo#2", "https://evil.example/path", "![p](https://evil.example/p.png)",
           "\u2028@admin", "`" * 5, " "]


def test_no_benchmark_name_makes_a_link_mention_or_broken_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _artifact(tmp_path, gate=0, judged=[_judged(n, Outcome.OK) for n in HOSTILE])
    api = FakeApi()
    assert _run(tmp_path, api, capsys)[0] == 0
    text = api.calls[-1][2]["body"]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(HOSTILE)  # one row each: no name broke a line
    for row in rows:
        cells = re.split(r"(?<!\\)\|", row)
        assert len(cells) == 5, row  # | name | verdict | ratio |: no name added a cell
        name = cells[1].strip()
        assert re.fullmatch(r"`[^`]+`", name), name  # one code span, nothing outside it
    outside = re.sub(r"`[^`]*`", "", text)  # what GitHub renders as text, not code
    assert "@" not in outside and "evil" not in outside and "<img" not in outside
    assert "](" not in outside.replace("](https://github.com/acme/proj/actions/runs/9)", "")
    assert pc.code("a" * 500) == "`" + "a" * 99 + "…`"


@pytest.mark.parametrize(("damage", "says"), [
    (lambda f: (f / "pr" / "comment.json").write_text("{not json"), "is not readable JSON"),
    (lambda f: (f / "pr" / "comment.json").unlink(), "comment.json is missing"),
    (lambda f: (f / "pr" / "report.json").unlink(), "report.json is missing"),
    (lambda f: _edit(f, "comment", pull_request="12"), "pull_request is '12', not a number"),
    (lambda f: _edit(f, "comment", head_sha="b" * 40), "names head bbbbbbbbbb, but the run"),
    (lambda f: _edit(f, "comment", machine="perf-xeon"), "is not the artifact's"),
    (lambda f: _edit(f, "comment", gate=True), "gate is 'True', not an exit status"),
    (lambda f: _edit(f, "report", verdict="[x](https://e)"), "not a perfgate verdict"),
    (lambda f: _edit(f, "report", ratio="0.5"), "'ratio' is '0.5', not a finite number"),
    (lambda f: _edit(f, "report", benchmark=7), "'benchmark' is 7, not a name"),
    (lambda f: (f / "pr" / "report.json").write_text('{"perfgate_report": 2}'),
     "is not a perfgate report"),
])
def test_a_malformed_artifact_posts_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any, says: str) -> None:
    damage(_artifact(tmp_path))
    api = FakeApi()
    code, out = _run(tmp_path, api, capsys)
    assert code == 3 and api.calls == []
    assert len(out) == 1 and out[0].startswith(
        "::error title=perfgate comment::nothing posted: the artifact is malformed: ")
    assert says in out[0]


def _edit(folder: Path, which: str, **fields: Any) -> None:
    path = folder / "pr" / f"{which}.json"
    data = json.loads(path.read_text())
    (data["benchmarks"][0] if which == "report" else data).update(fields)
    path.write_text(json.dumps(data))


def test_no_artifact_posts_nothing_and_a_stale_pull_request_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi()
    code, out = _run(tmp_path, api, capsys)
    assert code == 0 and api.calls == []
    assert out == ["::notice title=perfgate comment::nothing posted: no perfgate-pr-* artifact "
                   "in this run (the PR job did not run, e.g. a fork's run awaiting approval, "
                   "or it was cancelled)"]
    _artifact(tmp_path)
    api = FakeApi(head="c" * 40)  # the pull request moved on, or the number was forged
    code, out = _run(tmp_path, api, capsys)
    assert code == 3 and [c[0] for c in api.calls] == ["GET"]
    assert out == ["::error title=perfgate comment::nothing posted: pull request #12 does not "
                   "have head aaaaaaaaaa, the commit this run measured (a newer push, or a "
                   "forged artifact)"]


def test_two_machines_one_comment_and_a_job_that_stopped_early(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _artifact(tmp_path, "perf-epyc", gate=0, judged=[_judged("test_walk", Outcome.OK)])
    xeon = _artifact(tmp_path, "perf-xeon", gate=3)
    (xeon / "pr" / "report.json").unlink()  # pytest crashed before writing it
    api = FakeApi()
    assert _run(tmp_path, api, capsys)[0] == 0
    text = api.calls[-1][2]["body"]
    assert "### `perf-epyc`: passed at aaaaaaaaaa" in text
    assert "### `perf-xeon`: infrastructure error at aaaaaaaaaa\n\nNo benchmark was judged" in text
    _edit(xeon, "comment", pull_request=13)
    code, out = _run(tmp_path, FakeApi(), capsys)
    assert code == 3 and "name different pull requests: #12, #13" in out[0]


def _sparse_checkout(tmp_path: Path) -> Path:
    """The script as perfgate-comment.yml checks it out: that file alone (python puts its
    folder first on sys.path, where the package's cli/bisect.py would shadow the standard
    library's bisect)."""
    script = tmp_path / "checkout" / "pytest_perfgate" / "cli" / SCRIPT.name
    script.parent.mkdir(parents=True)
    shutil.copy(SCRIPT, script)
    return script


def test_the_script_runs_on_the_standard_library_alone(tmp_path: Path) -> None:
    """As the hosted runner runs it: the file alone, no project environment (-s -E, no
    PYTHONPATH), and -P, so nothing beside it can shadow the standard library."""
    script = _sparse_checkout(tmp_path)
    done = subprocess.run([sys.executable, "-s", "-E", "-P", "-S", str(script), "--artifacts",
                           str(tmp_path), "--repository", "acme/proj", "--head-sha", "nope",
                           "--run-url", "u"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 2
    assert "error: --head-sha 'nope' is not a 40-digit commit id" in done.stderr
    done = subprocess.run([sys.executable, "-s", "-E", "-P", "-S", str(script), "--artifacts",
                           str(tmp_path), "--repository", "acme/proj", "--head-sha", SHA,
                           "--run-url", "u"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 0 and "nothing posted: no perfgate-pr-*" in done.stdout
    _artifact(tmp_path)
    done = subprocess.run([sys.executable, "-s", "-E", "-P", "-S", str(script), "--artifacts",
                           str(tmp_path), "--repository", "acme/proj", "--head-sha", SHA,
                           "--run-url", "u"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert "GH_TOKEN is not set: give the step env GH_TOKEN: ${{ github.token }}" in done.stderr


def test_the_script_talks_to_the_rest_api(tmp_path: Path) -> None:
    """The real HTTP path, against a local stand-in for api.github.com (127.0.0.1 only)."""
    import http.server
    import threading

    seen: list[tuple[str, str, str, Any]] = []

    class Api(http.server.BaseHTTPRequestHandler):
        def _answer(self, data: Any) -> None:
            raw = json.dumps(data).encode()
            self.send_response(200 if self.command == "GET" else 201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            seen.append(("GET", self.path, self.headers["Authorization"], None))
            self._answer({"head": {"sha": SHA}} if self.path.endswith("/pulls/12") else [])

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(("POST", self.path, self.headers["Authorization"], body))
            self._answer({"id": 1})

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script = _sparse_checkout(tmp_path)
    try:
        _artifact(tmp_path / "artifacts")
        done = subprocess.run(
            [sys.executable, "-s", "-E", "-P", str(script), "--artifacts",
             str(tmp_path / "artifacts"),
             "--repository", "acme/proj", "--head-sha", SHA, "--run-url", "https://r/9"],
            capture_output=True, text=True, timeout=60,
            env={"PATH": "/usr/bin:/bin", "GH_TOKEN": "s3cret",
                 "GITHUB_API_URL": f"http://127.0.0.1:{server.server_port}"})
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "perfgate comment: commented on pull request #12\n"
    assert [(m, p) for m, p, _, _ in seen] == [
        ("GET", "/repos/acme/proj/pulls/12"),
        ("GET", "/repos/acme/proj/issues/12/comments?per_page=100&page=1"),
        ("POST", "/repos/acme/proj/issues/12/comments")]
    assert {auth for _, _, auth, _ in seen} == {"Bearer s3cret"}
    assert seen[-1][3]["body"].startswith(pc.MARKER)
    assert "s3cret" not in done.stdout + done.stderr


def test_an_api_failure_is_an_infrastructure_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import urllib.error

    def down(method: str, path: str, body: Any) -> Any:
        raise urllib.error.HTTPError(path, 403, "Resource not accessible by integration",
                                     {}, None)  # type: ignore[arg-type]

    _artifact(tmp_path)
    code, out = _run(tmp_path, down, capsys)  # type: ignore[arg-type]
    assert code == 3
    assert out == ["::error title=perfgate comment::the GitHub API failed: HTTP Error 403: "
                   "Resource not accessible by integration"]


def test_a_machine_name_is_a_code_span_never_a_link(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A machine name passes the artifact's pattern yet reads as a domain, which GitHub
    would link outside a code span."""
    _artifact(tmp_path, machine="www.example.com", gate=0)
    api = FakeApi()
    code, _ = _run(tmp_path, api, capsys)
    assert code == 0
    text = api.calls[-1][2]["body"]
    assert "### `www.example.com`: passed at aaaaaaaaaa" in text
    assert "www.example.com" not in text.replace("`www.example.com`", "")


def test_more_machines_than_a_comment_shows_post_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(pc.MAX_MACHINES + 1):
        _artifact(tmp_path, machine=f"m{i:02d}", gate=0, judged=[])
    api = FakeApi()
    code, out = _run(tmp_path, api, capsys)
    assert code == 3 and api.calls == []
    assert out == [f"::error title=perfgate comment::nothing posted: the artifact is malformed: "
                   f"the run has {pc.MAX_MACHINES + 1} perfgate-pr-* artifacts, more than the "
                   f"{pc.MAX_MACHINES} machines a comment shows"]
    for extra in tmp_path.glob("perfgate-pr-m16"):
        shutil.rmtree(extra)
    code, _ = _run(tmp_path, FakeApi(), capsys)
    assert code == 0  # the cap itself is allowed


def _profiled(function: str = "normalize_obs") -> Judged:
    j = _judged("test_walk", Outcome.REGRESSION, 0.8)
    j.result.extra["profile"] = {
        "pairs": 6, "per": "call",
        "grew": [{"function": function, "where": "perf/policy.py:6", "base_ms_per_step": 0.02,
                  "head_ms_per_step": 0.35, "self_delta_ms_per_step": 0.3, "share": 0.95,
                  "changed": True}],
        "base_ms_per_step": 1.0, "head_ms_per_step": 1.35}
    return j


def test_the_profile_s_top_functions_are_shown_under_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _artifact(tmp_path, judged=[_profiled("normalize_obs @admin [x](http://e) `y` | z")])
    api = FakeApi()
    code, _ = _run(tmp_path, api, capsys)
    body = api.calls[-1][2]["body"]
    assert code == 0
    assert ("Why `test_walk` got slower (py-spy, base and head in alternating turns; time per "
            "call; self: without the functions named on lines of their own; total: with all it "
            "calls; shares are of self; flame graphs in the run's artifact ") in body
    assert ("- `normalize_obs @admin [x](http://e) 'y' \\| z (perf/policy.py:6)` self +0.3 "
            "ms/call, 95% of the growth; total 0.02 -> 0.35 ms/call (+0.33), changed") in body
    assert "artifact `perfgate-pr-perf-epyc`, profiles/" in body


def test_a_profile_recorded_before_self_times_shows_its_share_and_total(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    j = _profiled()
    del j.result.extra["profile"]["per"], j.result.extra["profile"]["grew"][0][
        "self_delta_ms_per_step"]
    _artifact(tmp_path, judged=[j])
    api = FakeApi()
    code, _ = _run(tmp_path, api, capsys)
    body = api.calls[-1][2]["body"]
    assert code == 0 and "; time per env-step; self: " in body
    assert ("- `normalize_obs (perf/policy.py:6)` 95% of the growth; total 0.02 -> 0.35 "
            "ms/step (+0.33), changed") in body


@pytest.mark.parametrize(("profile", "says"), [
    ([1], "'profile' is not an object"),
    ({"grew": "x"}, "the profile's 'grew' is not a list"),
    ({"grew": [{"function": 3}]}, "function 0 is not a named function"),
    ({"grew": [{"function": "f", "base_ms_per_step": "1", "head_ms_per_step": 1,
                "share": 1}]}, "'base_ms_per_step' is '1', not a finite number"),
    ({"grew": [], "per": "call/s"}, "the profile's 'per' is 'call/s', not a unit of work"),
])
def test_a_malformed_profile_posts_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], profile: Any, says: str) -> None:
    j = _profiled()
    j.result.extra["profile"] = profile
    _artifact(tmp_path, judged=[j])
    api = FakeApi()
    code, out = _run(tmp_path, api, capsys)
    assert code == 3 and api.calls == []
    assert says in out[0]

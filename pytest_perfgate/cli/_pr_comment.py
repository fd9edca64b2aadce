"""The pull request comment of the perf gate, built from the PR job's artifact only.

.github/workflows/perfgate-comment.yml runs this file on a GitHub-hosted runner after the
perfgate workflow of a pull request completed (``workflow_run``): it holds a token that can
comment, so it never checks out or runs the pull request's code, and it treats the artifact
as hostile input, since a fork's copy of the workflow can upload anything (docs/ci.md).
Hence: every field is checked and a malformed artifact posts nothing; the pull request
named in the artifact must have the head commit that the event names; benchmark and machine
names go into code spans, where GitHub makes no link, mention or reference of them, and at
most MAX_MACHINES artifacts are read; one comment, found by its marker and author, is
updated in place.

Standard library only, run as a script (``python3 -s -E -P _pr_comment.py ...``): the hosted
runner has no project environment; -P keeps its folder off sys.path, where cli/bisect.py
would shadow the standard library's bisect. Not a command module (leading underscore).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "<!-- perfgate-comment -->"
BOT = "github-actions[bot]"
ARTIFACT_PREFIX = "perfgate-pr-"
MAX_FILE_BYTES = 4_000_000
MAX_BENCHMARKS = 2000
MAX_ROWS = 60          # per machine; the rest are counted (the job summary lists them all)
MAX_NAME = 100
MAX_MACHINES = 16      # artifacts read per run; a matrix this size is many perf machines
TOP_FUNCTIONS = 5      # of a profile, shown under the table
VERDICTS = frozenset({"OK", "REGRESSION", "IMPROVEMENT", "NO BASELINE", "UNSTABLE",
                      "INCONCLUSIVE"})
GATES = {0: "passed", 1: "REGRESSION", 2: "usage error", 3: "infrastructure error"}
_MACHINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SHA = re.compile(r"[0-9a-f]{40}")
_WORK = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")  # a unit of work (core/metric.py)
# what a function's two figures are (profile/text.py says the same)
PROFILE_KINDS = ("self: without the functions named on lines of their own; total: with all "
                 "it calls; shares are of self")


class Malformed(ValueError):
    """The artifact is not what the PR job writes: nothing is posted."""


@dataclass(frozen=True)
class Row:
    name: str
    verdict: str
    ratio: float | None
    ci: tuple[float, float] | None
    fails: bool
    why: tuple[str, ...] = ()  # the profile's top functions that grew, a line each
    per: str = "env-step"  # the unit of work the profile's times are per


@dataclass(frozen=True)
class Leg:
    """One machine's gate: what the PR job's comment.json and report.json say."""

    machine: str
    pull_request: int
    head_sha: str
    gate: int
    rows: tuple[Row, ...]


def _load(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise Malformed(f"{path} is larger than {MAX_FILE_BYTES} bytes")
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Malformed(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Malformed(f"{path} is not readable JSON: {e}") from None


def _number(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise Malformed(f"{where} is {v!r}, not a finite number")
    return float(v)


def _row(entry: Any, where: str) -> Row:
    if not isinstance(entry, dict):
        raise Malformed(f"{where} is not an object")
    name, verdict, fails = entry.get("benchmark"), entry.get("verdict"), entry.get("fails")
    if not isinstance(name, str) or not name:
        raise Malformed(f"{where}: 'benchmark' is {name!r}, not a name")
    if verdict is not None and verdict not in VERDICTS:
        raise Malformed(f"{where}: 'verdict' is {str(verdict)[:40]!r}, not a perfgate verdict")
    if not isinstance(fails, bool):
        raise Malformed(f"{where}: 'fails' is {fails!r}, not true or false")
    ci = entry.get("ci")
    if ci is not None:
        if not isinstance(ci, list) or len(ci) != 2:
            raise Malformed(f"{where}: 'ci' is not a pair of numbers")
        lo, hi = (_number(x, f"{where}: 'ci'") for x in ci)
        ci = None if lo is None or hi is None else (lo, hi)
    return Row(name, verdict or "SMOKE", _number(entry.get("ratio"), f"{where}: 'ratio'"),
               ci, fails, *_why(entry, where))


def _why(entry: dict[str, Any], where: str) -> tuple[tuple[str, ...], str]:
    """The profile's top functions (``result.extra.profile``) as comment lines, every
    value checked like the rest of the artifact, and the unit of work their times are per;
    () when the run took no profile."""
    result = entry.get("result")
    extra = result.get("extra") if isinstance(result, dict) else None
    profile = extra.get("profile") if isinstance(extra, dict) else None
    if profile is None:
        return (), "env-step"
    if not isinstance(profile, dict):
        raise Malformed(f"{where}: 'profile' is not an object")
    if "error" in profile:
        return (f"no profile: {code(str(profile['error']))}",), "env-step"
    grew = profile.get("grew")
    if not isinstance(grew, list):
        raise Malformed(f"{where}: the profile's 'grew' is not a list")
    per = profile.get("per", "env-step")
    if not isinstance(per, str) or not _WORK.fullmatch(per):
        raise Malformed(f"{where}: the profile's 'per' is {str(per)[:40]!r}, not a unit of "
                        "work")
    short = "step" if per == "env-step" else per
    out = []
    for i, n in enumerate(grew[:TOP_FUNCTIONS]):
        at = f"{where}: the profile's function {i}"
        if not isinstance(n, dict) or not isinstance(n.get("function"), str) \
                or not isinstance(n.get("where", ""), str):
            raise Malformed(f"{at} is not a named function")
        b, h, share, own = (_number(n.get(k), f"{at}: {k!r}") for k in
                            ("base_ms_per_step", "head_ms_per_step", "share",
                             "self_delta_ms_per_step"))
        if b is None or h is None or share is None:
            raise Malformed(f"{at} lacks its times")
        said = n.get("changed")
        changed = ", changed" if said is True else ", unchanged" if said is False else ""
        first = f"self {own:+.3g} ms/{short}, " if own is not None else ""  # older: none
        out.append(f"{code(n['function'] + ' (' + n.get('where', '') + ')')} "
                   f"{first}{share:.0%} of the growth; total {b:.3g} -> {h:.3g} ms/{short} "
                   f"({h - b:+.3g}){changed}")
    return tuple(out), per


def read_leg(folder: Path) -> Leg:
    """One downloaded artifact folder (``perfgate-pr-<machine>``); raises Malformed."""
    meta = _load(folder / "pr" / "comment.json")
    if not isinstance(meta, dict):
        raise Malformed(f"{folder}/pr/comment.json is not an object")
    machine, number = meta.get("machine"), meta.get("pull_request")
    sha, gate = meta.get("head_sha"), meta.get("gate")
    if not isinstance(machine, str) or not _MACHINE.fullmatch(machine) \
            or folder.name != ARTIFACT_PREFIX + machine:
        raise Malformed(f"{folder}: machine {str(machine)[:70]!r} is not the artifact's "
                        f"({folder.name})")
    if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
        raise Malformed(f"{folder}: pull_request is {str(number)[:40]!r}, not a number")
    if not isinstance(sha, str) or not _SHA.fullmatch(sha):
        raise Malformed(f"{folder}: head_sha is {str(sha)[:50]!r}, not a commit")
    if isinstance(gate, bool) or gate not in GATES:
        raise Malformed(f"{folder}: gate is {str(gate)[:20]!r}, not an exit status 0-3")
    path = folder / "pr" / "report.json"
    if gate in (2, 3) and not path.exists():  # stopped before measuring: no verdict to show
        return Leg(machine, number, sha, gate, ())
    report = _load(path)
    if not isinstance(report, dict) or report.get("perfgate_report") != 1 \
            or not isinstance(report.get("benchmarks"), list):
        raise Malformed(f"{folder}/pr/report.json is not a perfgate report")
    entries = report["benchmarks"]
    if len(entries) > MAX_BENCHMARKS:
        raise Malformed(f"{folder}/pr/report.json lists {len(entries)} benchmarks (at most "
                        f"{MAX_BENCHMARKS})")
    rows = tuple(_row(e, f"{folder}/pr/report.json benchmark {i}")
                 for i, e in enumerate(entries))
    return Leg(machine, number, sha, gate, rows)


def read_artifacts(root: Path, head_sha: str) -> list[Leg]:
    """Every ``perfgate-pr-*`` folder under root (none: an empty list). All must name one
    pull request and the head commit of the workflow run; raises Malformed."""
    folders = sorted(p for p in root.glob(ARTIFACT_PREFIX + "*") if p.is_dir()) \
        if root.is_dir() else []
    if len(folders) > MAX_MACHINES:
        raise Malformed(f"the run has {len(folders)} {ARTIFACT_PREFIX}* artifacts, more than "
                        f"the {MAX_MACHINES} machines a comment shows")
    legs = [read_leg(f) for f in folders]
    for leg in legs:
        if leg.head_sha != head_sha:
            raise Malformed(f"{ARTIFACT_PREFIX}{leg.machine} names head {leg.head_sha[:10]}, "
                            f"but the run measured {head_sha[:10]}")
    if len({leg.pull_request for leg in legs}) > 1:
        raise Malformed("the artifacts name different pull requests: "
                        + ", ".join(f"#{leg.pull_request}" for leg in legs))
    return legs


def code(text: str) -> str:
    """Text as a code span in a table cell: GitHub links, mentions and references nothing
    inside one. Backticks (which would end the span) become ', control characters and line
    breaks spaces, | is escaped (it would end the cell, even inside the span)."""
    text = "".join(" " if ord(c) < 32 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029"
                   else c for c in text).replace("`", "'").strip()
    if len(text) > MAX_NAME:
        text = text[:MAX_NAME - 1] + "…"
    return "`" + (text or "-").replace("|", "\\|") + "`"


def _ratio(row: Row) -> str:
    if row.ratio is None:
        return "-"
    return f"{row.ratio:.3f}" + (f" [{row.ci[0]:.3f}-{row.ci[1]:.3f}]" if row.ci else "")


def build_comment(legs: Sequence[Leg], run_url: str) -> str:
    """The comment's markdown: per machine, the gate's outcome and a verdict table, failing
    benchmarks first."""
    lines = [MARKER, "## perfgate", "",
             f"Interleaved A/B runs, pull request head against its merge base "
             f"([the run]({run_url})). Ratio: head speed over base speed.", ""]
    for leg in legs:
        lines += [f"### {code(leg.machine)}: {GATES[leg.gate]} at {leg.head_sha[:10]}", ""]
        rows = sorted(leg.rows, key=lambda r: (not r.fails, r.verdict == "OK"))
        if not rows:
            lines += ["No benchmark was judged (see the run).", ""]
            continue
        lines += ["| benchmark | verdict | ratio [CI] |", "|---|---|---|"]
        lines += [f"| {code(r.name)} | {'**' + r.verdict + '**' if r.fails else r.verdict} "
                  f"| {_ratio(r)} |" for r in rows[:MAX_ROWS]]
        if len(rows) > MAX_ROWS:
            lines.append(f"\n… and {len(rows) - MAX_ROWS} more benchmark(s): see the run.")
        lines.append("")
        for r in rows[:MAX_ROWS]:
            if r.why:
                lines += [f"Why {code(r.name)} got slower (py-spy, base and head in "
                          f"alternating turns; time per {r.per}; {PROFILE_KINDS}; flame "
                          f"graphs in the run's artifact "
                          f"{code(ARTIFACT_PREFIX + leg.machine)}, profiles/):", "",
                          *(f"- {w}" for w in r.why), ""]
    return "\n".join(lines)


Request = Callable[[str, str, Any], Any]


def api_request(api_url: str, token: str) -> Request:
    """(method, path, body) -> the decoded JSON answer, through GitHub's REST API."""
    def request(method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            api_url.rstrip("/") + path, data=data, method=method,
            headers={"Authorization": f"Bearer {token}",
                     "Accept": "application/vnd.github+json",
                     "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "perfgate-comment"})
        with urllib.request.urlopen(req, timeout=30) as answer:
            return json.loads(answer.read() or b"null")
    return request


def find_comment(comments: Sequence[Any]) -> int | None:
    """Our earlier comment: the marker, written by the workflow's bot (never a person's)."""
    for c in comments:
        if isinstance(c, dict) and isinstance(c.get("body"), str) \
                and c["body"].startswith(MARKER) \
                and isinstance(c.get("user"), dict) and c["user"].get("login") == BOT:
            return int(c["id"])
    return None


def publish(request: Request, repository: str, legs: Sequence[Leg], head_sha: str,
            body: str) -> str:
    """Check the pull request, then update our comment or create it; returns what was done.
    Raises Malformed when the pull request is not the one the run measured."""
    number = legs[0].pull_request
    pr = request("GET", f"/repos/{repository}/pulls/{number}", None)
    if not isinstance(pr, dict) or pr.get("head", {}).get("sha") != head_sha:
        raise Malformed(f"pull request #{number} does not have head {head_sha[:10]}, the "
                        "commit this run measured (a newer push, or a forged artifact)")
    comments: list[Any] = []
    for page in range(1, 51):
        got = request("GET", f"/repos/{repository}/issues/{number}/comments"
                      f"?per_page=100&page={page}", None)
        comments += got if isinstance(got, list) else []
        if not isinstance(got, list) or len(got) < 100:
            break
    found = find_comment(comments)
    if found is None:
        request("POST", f"/repos/{repository}/issues/{number}/comments", {"body": body})
        return f"commented on pull request #{number}"
    request("PATCH", f"/repos/{repository}/issues/comments/{found}", {"body": body})
    return f"updated the comment on pull request #{number}"


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def run(argv: Sequence[str], request: Request | None = None) -> int:
    """The script: 0 commented or nothing to comment, 3 nothing posted because the artifact
    or the pull request is not what the run made, or the API failed."""
    ap = argparse.ArgumentParser(prog="_pr_comment.py", description=__doc__.split("\n")[0])
    ap.add_argument("--artifacts", type=Path, required=True,
                    help="where the run's perfgate-pr-* artifacts were downloaded")
    ap.add_argument("--repository", required=True, help="owner/name")
    ap.add_argument("--head-sha", required=True, help="the workflow run's head commit")
    ap.add_argument("--run-url", required=True, help="the perfgate run, linked in the comment")
    args = ap.parse_args(list(argv))
    if not _SHA.fullmatch(args.head_sha):
        ap.error(f"--head-sha {args.head_sha!r} is not a 40-digit commit id")
    try:
        legs = read_artifacts(args.artifacts, args.head_sha)
    except Malformed as e:
        print(f"::error title=perfgate comment::nothing posted: the artifact is malformed: "
              f"{_escape(str(e))}")
        return 3
    if not legs:
        print(f"::notice title=perfgate comment::nothing posted: no {ARTIFACT_PREFIX}* "
              "artifact in this run (the PR job did not run, e.g. a fork's run awaiting "
              "approval, or it was cancelled)")
        return 0
    if request is None:
        token = os.environ.get("GH_TOKEN", "")
        if not token:
            ap.error("GH_TOKEN is not set: give the step env GH_TOKEN: ${{ github.token }}")
        request = api_request(os.environ.get("GITHUB_API_URL", "https://api.github.com"),
                              token)
    try:
        said = publish(request, args.repository, legs, args.head_sha,
                       build_comment(legs, args.run_url))
    except Malformed as e:
        print(f"::error title=perfgate comment::nothing posted: {_escape(str(e))}")
        return 3
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"::error title=perfgate comment::the GitHub API failed: {_escape(str(e))}")
        return 3
    print(f"perfgate comment: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

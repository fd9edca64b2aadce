"""``perfgate publish``: ``asv publish`` over the history, viewable without the network.

asv's page loads its scripts from public CDNs (docs/design.md §6); with ``--scripts`` the
exact versions are copied from a local npm folder into the site, so an offline runner (or an
artifact opened later behind a firewall) draws the same graphs. What would stop asv half-way
is refused here before it runs; the site is built in :mod:`._publish_site`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._out import UsageError
from pytest_perfgate.session.options import OptionError, argparse_type, parse_path

# What asv publish copies into the html dir before anything else (asv/www): a folder with
# these and no index.json is a site a stopped publish left half-written.
ASV_PAGE_FILES = ("index.html", "asv.js", "swallow.ico")



def parse_scripts_dir(text: str) -> Path:
    """A folder holding asv's scripts at the versions its page names (npm's layout)."""
    from pytest_perfgate.cli._publish_site import SiteError, check_scripts

    path = Path(parse_path(text)).expanduser().resolve()
    if not (path / "jquery").exists() and (path / "node_modules").is_dir():
        path = path / "node_modules"  # the --prefix folder of npm install was given
    try:
        check_scripts(path)
    except SiteError as exc:
        raise OptionError(str(exc)) from None
    return path


def parse_range(text: str) -> str:
    """A commit range for asv publish (``HEAD~200..HEAD``); an empty one (an unset shell
    variable) would reach asv as a revision it cannot parse."""
    s = str(text).strip()
    if not s:
        raise OptionError(f"{text!r} is an empty commit range: give one such as "
                          "HEAD~200..HEAD, or none for the whole history")
    return s


class Publish(Command):
    name = "publish"
    help = "asv publish over the history, with asv's scripts served from the site itself"
    description = ("Run `asv publish` (the html_dir of asv.conf.json, or --html-dir). With "
                   "--scripts DIR, copy the scripts asv's page loads from CDNs (jquery 3.3.1, "
                   "flot 0.8.3, flot-orderbars 1.0.0, blueimp-md5 2.19.0, bootstrap 3.1.1 "
                   "from DIR, an npm node_modules folder; stupidtable 1.0.1 ships with "
                   "perfgate) into the site, so it renders without network access. Exit 0, "
                   "2 usage error, 3 asv publish or the copying failed.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("--config", type=argparse_type(parse_path), default=None,
                        help="asv's config (default: asv.conf.json in this folder); asv "
                        "runs in its folder, as it does for you there")
        ap.add_argument("--html-dir", type=argparse_type(parse_path), default=None,
                        help="where the site goes (default: html_dir of the config)")
        ap.add_argument("--scripts", type=argparse_type(parse_scripts_dir), default=None,
                        metavar="DIR", help="node_modules of `npm install jquery@3.3.1 "
                        "flot@0.8.3 flot-orderbars@1.0.0 blueimp-md5@2.19.0 bootstrap@3.1.1`: "
                        "serve these from the site instead of CDNs")
        ap.add_argument("--no-pull", action="store_true",
                        help="passed to asv publish: do not pull the repository")
        ap.add_argument("--serve", nargs="?", const=8000, default=None, metavar="PORT",
                        type=argparse_type(parse_port),
                        help="then serve the site on http://localhost:PORT (default 8000; 0: "
                        "any free port) until Ctrl-C")
        ap.add_argument("range", nargs="?", default=None, type=argparse_type(parse_range),
                        help="passed to asv publish: the commit range to show")
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        return run(config=args.config, html_dir=args.html_dir, scripts=args.scripts,
                   no_pull=args.no_pull, port=args.serve, commit_range=args.range)


def run(*, config: str | Path | None = None, html_dir: str | Path | None = None,
        scripts: Path | None = None, no_pull: bool = False, port: int | None = None,
        commit_range: str | None = None) -> int:
    """``perfgate publish`` (``port``: ``--serve``): the exit status."""
    from pytest_perfgate.cli._publish_site import build, sweep_stale
    from pytest_perfgate.cli._site_notes import serve_hint

    path, conf = read_config(config)
    problem = branch_problem(path, conf)
    if problem is not None:
        raise UsageError(problem)
    if html_dir is not None:
        site = Path(html_dir).expanduser().resolve()
    else:  # asv runs in the config's folder, so its html_dir is relative to that
        html = conf.get("html_dir", "html")
        if not isinstance(html, str) or not html:
            raise UsageError(f"{path}: html_dir {html!r} is not a folder name")
        site = (path.parent / Path(html).expanduser()).resolve()
    problem = html_dir_problem(path, conf, site) or range_problem(path, conf, commit_range)
    if problem is not None:
        raise UsageError(problem)
    problem = history_problem(path, conf)
    if problem is not None:
        print(f"perfgate publish: infrastructure error: {problem}", file=sys.stderr)
        return 3
    swept = sweep_stale(site, path.parent)
    if swept:
        print("perfgate publish: removed what an interrupted publish left: "
              + ", ".join(str(p) for p in swept))
    asv_args = ["--no-pull"] * no_pull + ([commit_range] if commit_range is not None else [])
    try:
        done_v = build(path, conf, site, scripts, asv_args)
    except KeyboardInterrupt:
        print(f"perfgate publish: stopped (Ctrl-C or SIGTERM): asv was ended, the site in "
              f"{site} is left as it was", file=sys.stderr)
        return 130
    if isinstance(done_v, int):
        return done_v
    if done_v is None:
        print(f"perfgate publish: site in {site}; its page loads scripts from "
              "public CDNs (pass --scripts DIR to view it offline)")
    else:
        print(f"perfgate publish: site in {site}, {done_v.files} files (scripts, "
              f"styles, fonts, licenses) copied into {site / 'vendor'}; the page's "
              f"integrity hashes hold for {len(done_v.verified)} of them (the CDN's "
              "exact bytes)" + (f", and were dropped for {', '.join(done_v.unverified)} "
                                "(same version, unminified sources)"
                                if done_v.unverified else ""))
    if port is not None:
        return serve(site, port)
    print("perfgate publish: open it over http (a browser refuses its data files from "
          f"file://): {serve_hint(site)}")
    return 0


def parse_port(text: str) -> int:
    """--serve PORT: 0 (any free port) or 1-65535."""
    try:
        port = int(text)
    except ValueError:
        raise OptionError(f"{text!r} is not a port number: use e.g. 8000, or 0 for any free "
                          "port") from None
    if not 0 <= port <= 65535:
        raise OptionError(f"{text!r} is not a port number (0-65535): use e.g. 8000")
    return port


def serve(html_dir: Path, port: int) -> int:
    """Serve ``html_dir`` on localhost until Ctrl-C or SIGTERM (exit 0: that is how it
    ends); a port in use is an infrastructure error naming it."""
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(html_dir))
    try:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        print(f"perfgate publish: infrastructure error: cannot serve on port {port}: {exc}; "
              "pass another, e.g. --serve 0 for any free port", file=sys.stderr)
        return 3
    with httpd:
        print(f"perfgate publish: serving {html_dir} on http://localhost:"
              f"{httpd.server_address[1]}/ (Ctrl-C ends it)", flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            print("perfgate publish: stopped serving", flush=True)
    return 0


def read_config(given: str | Path | None) -> tuple[Path, dict[str, Any]]:
    """The asv config path (``given``, else asv's names here) and its contents; a usage
    error when it is missing or not JSON."""
    from pytest_perfgate.history.files import load_jsonc

    names = [given] if given else ["asv.conf.json", "asv.conf.jsonc"]  # asv's
    found = [p for p in (Path(n).expanduser().resolve() for n in names) if p.is_file()]
    if not found:
        raise UsageError(f"no asv config at {str(Path(names[0]).resolve())!r}: run from the "
                         "folder of asv.conf.json or pass --config PATH")
    config = found[0]
    try:
        conf = load_jsonc(config)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {config}: {exc}") from None
    if not isinstance(conf, dict):
        raise UsageError(f"{config} holds {type(conf).__name__}, not asv's JSON object")
    return config, conf


def html_dir_problem(config: Path, conf: dict[str, Any], html_dir: Path) -> str | None:
    """asv publish deletes its html dir before writing it: refuse one that holds the
    project, the history, or files that are not an earlier asv site, and one it cannot
    make (a file, below a file, not writable: asv would stop with a traceback)."""
    from pytest_perfgate.cli.common_args import folder_problem

    why = folder_problem(html_dir, f"html dir {str(html_dir)!r}", ".perfgate/html")
    if why is not None:
        return why
    results = conf.get("results_dir", "results")
    history = (config.parent / results).resolve() if isinstance(results, str) and results \
        else None
    inside = [p for p in (config.parent, history) if p is not None
              and (html_dir == p or html_dir in p.parents)]
    if history is not None and history in html_dir.parents:
        inside.append(history)
    if inside:
        return (f"html dir {str(html_dir)!r} overlaps {str(inside[0])!r}: asv publish "
                "deletes the html dir first; give a folder of its own, e.g. .perfgate/html")
    if html_dir.is_dir() and any(html_dir.iterdir()) and not is_asv_site(html_dir):
        return (f"html dir {str(html_dir)!r} holds files that are not an asv site: asv "
                "publish deletes it first; give a new or empty folder")
    return None


def is_asv_site(folder: Path) -> bool:
    """A site asv published, or began to: its index.json, or the page files asv copies
    first (a publish stopped half-way leaves those without index.json; it is rebuilt)."""
    return (folder / "index.json").is_file() or all(
        (folder / name).is_file() for name in ASV_PAGE_FILES)


def range_problem(config: Path, conf: dict[str, Any], text: str | None) -> str | None:
    """Every revision of the range must be one git knows, asked before asv runs: asv stops
    with a traceback (git rev-list ... status 128) after it has begun the site."""
    from pytest_perfgate.history.vcs import resolve_commit

    repo = conf.get("repo")
    if text is None or not isinstance(repo, str):
        return None
    path = (config.parent / repo).resolve()
    if not (path / ".git").exists():
        return None  # a URL or a bare repository: asv fetches it and says
    for token in text.split():
        for part in re.split(r"\.\.\.?", token.lstrip("^")):
            if part and resolve_commit(path, part) is None:
                return (f"commit range {text!r}: {part!r} is not a branch, tag or commit of "
                        f"the repository {path}: give a range git knows, e.g. "
                        "HEAD~200..HEAD (git branch -a lists the branches)")
    return None


def history_problem(config: Path, conf: dict[str, Any]) -> str | None:
    """What would stop asv after it began: no history, or a machine file asv cannot read."""
    from pytest_perfgate.core.atomic import load_json
    from pytest_perfgate.history.lookup import HistoryMissing, find_machine

    results = conf.get("results_dir", "results")
    if not isinstance(results, str) or not results:
        return f"{config}: results_dir {results!r} is not a folder name"
    folder = (config.parent / results).resolve()
    try:
        find_machine(folder, None)
    except HistoryMissing as e:
        return str(e)
    except ValueError:
        pass  # several machines: asv publishes them all
    if not (folder / "benchmarks.json").is_file():
        return (f"no benchmarks.json in {folder}: record runs with `pytest --perfgate` (or "
                "`asv run`) first")
    for path in sorted(folder.glob("*/machine.json")):
        try:
            data = load_json(path)
        except (OSError, ValueError) as e:
            return (f"{path} cannot be read ({e}): fix or delete it (the next recorded run "
                    "writes it again), then publish")
        if not isinstance(data, dict):
            return (f"{path} holds {type(data).__name__}, not asv's machine object: fix or "
                    "delete it (the next recorded run writes it again), then publish")
    return None


def branch_problem(config: Path, conf: dict[str, Any]) -> str | None:
    """asv stops with a traceback when a branch of ``branches`` is not in a local repo: say
    which, and what the repository's branch is."""
    from pytest_perfgate.history.vcs import git_info, resolve_commit

    repo, branches = conf.get("repo"), conf.get("branches")
    if not isinstance(repo, str) or not isinstance(branches, list):
        return None  # asv says what is wrong with them
    path = (config.parent / repo).resolve()
    if not (path / ".git").exists():
        return None  # a URL or a bare repository: asv fetches it
    missing = [b for b in branches if isinstance(b, str) and resolve_commit(path, b) is None]
    if not missing:
        return None
    here = git_info(path).branch
    fix = f'"branches": ["{here}"]' if here else "the branch your history is recorded on"
    return (f"{config}: branches {', '.join(map(repr, missing))} not found in the repository "
            f"{path}: asv publish draws only the listed branches; set {fix}")

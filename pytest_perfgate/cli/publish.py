"""``perfgate publish``: ``asv publish`` over the history, viewable without the network.

asv's page loads its scripts from public CDNs (docs/design.md §6); with ``--scripts`` the
exact versions are copied from a local npm folder into the site, so an offline runner (or an
artifact opened later behind a firewall) draws the same graphs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli.common_args import argparse_type
from pytest_perfgate.session.options import OptionError, parse_path

PUBLISH_TIMEOUT_S = 1800.0  # asv publish of a long history takes minutes, never hours


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
        ap.add_argument("range", nargs="?", default=None, type=argparse_type(parse_range),
                        help="passed to asv publish: the commit range to show")
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        from pytest_perfgate.cli._publish_site import SiteError, vendor_site

        config, conf = _read_config(args)
        problem = _branch_problem(config, conf)
        if problem is not None:
            args.parser.error(problem)
        if args.html_dir is not None:
            html_dir = Path(args.html_dir).expanduser().resolve()
        else:  # asv runs in the config's folder, so its html_dir is relative to that
            html = conf.get("html_dir", "html")
            if not isinstance(html, str) or not html:
                args.parser.error(f"{config}: html_dir {html!r} is not a folder name")
            html_dir = (config.parent / Path(html).expanduser()).resolve()
        problem = _html_dir_problem(config, conf, html_dir)
        if problem is not None:
            args.parser.error(problem)
        code = _asv_publish(args, config, conf, html_dir)
        if code != 0:
            return code
        if args.scripts is None:
            print(f"perfgate publish: site in {html_dir}; its page loads scripts from "
                  "public CDNs (pass --scripts DIR to view it offline)")
            return 0
        try:
            done_v = vendor_site(html_dir, args.scripts)
        except (SiteError, OSError) as exc:
            print(f"perfgate publish: infrastructure error: {exc}")
            return 3
        print(f"perfgate publish: site in {html_dir}, {done_v.files} files (scripts, "
              f"styles, fonts, licenses) copied into {html_dir / 'vendor'}; the page's "
              f"integrity hashes hold for {len(done_v.verified)} of them (the CDN's exact bytes)"
              + (f", and were dropped for {', '.join(done_v.unverified)} (same version, "
                 "unminified sources)" if done_v.unverified else ""))
        print("perfgate publish: view it over http (Chromium refuses asv's data files from "
              f"file://): python -m http.server --directory {html_dir}")
        return 0


def _read_config(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """The asv config path and its contents; a usage error when it is missing or not JSON."""
    from pytest_perfgate.history.files import load_jsonc

    names = [args.config] if args.config else ["asv.conf.json", "asv.conf.jsonc"]  # asv's
    found = [p for p in (Path(n).expanduser().resolve() for n in names) if p.is_file()]
    if not found:
        args.parser.error(f"no asv config at {str(Path(names[0]).resolve())!r}: run from the "
                          "folder of asv.conf.json or pass --config PATH")
    config = found[0]
    try:
        conf = load_jsonc(config)
    except (OSError, ValueError) as exc:
        args.parser.error(f"cannot read {config}: {exc}")
    if not isinstance(conf, dict):
        args.parser.error(f"{config} holds {type(conf).__name__}, not asv's JSON object")
    return config, conf


def _html_dir_problem(config: Path, conf: dict[str, Any], html_dir: Path) -> str | None:
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
    if html_dir.is_dir() and any(html_dir.iterdir()) and not (html_dir / "index.json").is_file():
        return (f"html dir {str(html_dir)!r} holds files that are not an asv site: asv "
                "publish deletes it first; give a new or empty folder")
    return None


def _branch_problem(config: Path, conf: dict[str, Any]) -> str | None:
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


def _asv_publish(args: argparse.Namespace, config: Path, conf: dict[str, Any],
                 html_dir: Path) -> int:
    """Run asv publish on a copy of the config beside it (asv runs in the config's folder)
    that keeps the higher-is-better series out of asv's regression list."""
    from pytest_perfgate.cli._publish_site import publish_config

    tmp: Path | None = None
    try:
        fd, name = tempfile.mkstemp(dir=config.parent, prefix=".perfgate-publish-",
                                    suffix=".json")
        tmp = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(publish_config(conf), fh, indent=2)
    except OSError as exc:
        print(f"perfgate publish: cannot write beside {config} ({exc.strerror}): asv's "
              "Regressions page will list env-steps/s gains as regressions")
    cmd = [sys.executable, "-m", "asv", "publish", "--config", str(tmp or config),
           "--html-dir", str(html_dir)]
    cmd += ["--no-pull"] * args.no_pull + [args.range] * (args.range is not None)
    print(f"perfgate publish: asv publish (config {config}) into {html_dir}", flush=True)
    try:
        done = subprocess.run(cmd, cwd=config.parent, timeout=PUBLISH_TIMEOUT_S,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        print(f"perfgate publish: asv publish ran past {PUBLISH_TIMEOUT_S:.0f} s and was "
              "stopped: publish a range (e.g. HEAD~200..HEAD)")
        return 3
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    if done.returncode != 0:
        print(f"perfgate publish: asv publish failed (exit {done.returncode}); its output "
              "is above")
        return 3
    return 0

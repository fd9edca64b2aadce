"""Building asv publish's site: in a folder of its own, swapped in only when complete, and
viewable without the network, with local copies of the scripts its page loads.

asv 0.6's ``index.html`` loads jquery, flot, flot-orderbars, stupidtable, blueimp-md5 and
bootstrap from public CDNs; a runner that cannot reach them shows only asv's "Can not
determine continental origin of swallow" (docs/design.md §6). :func:`vendor_site` copies
the exact versions asv names from an npm folder into ``<html_dir>/vendor/`` and points the
page at them. Other versions are refused: newer jquery/flot draw doubled axis labels.
"""

from __future__ import annotations

import base64
import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_perfgate.core import group
from pytest_perfgate.core.atomic import atomic_write, load_json

PUBLISH_TIMEOUT_S = 1800.0  # asv publish of a long history takes minutes, never hours
CONFIG_PREFIX = ".perfgate-publish-"  # asv's config copy, beside the config while asv runs

VENDOR = "vendor"  # folder under html_dir that holds the copies
BUNDLED = Path(__file__).parent / "asv_www"  # what npm does not serve (stupidtable 1.0.1)
LICENSES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENSE-MIT")


@dataclass(frozen=True)
class Asset:
    """One file asv's page loads: its CDN address, and where npm puts the same version."""

    url: str
    package: str  # folder under the scripts dir (npm's node_modules layout)
    version: str
    path: str  # the file inside that folder
    bundled: bool = False  # shipped with perfgate instead of taken from the scripts dir


_CDNJS = "https://cdnjs.cloudflare.com/ajax/libs"
ASSETS = (
    Asset("https://code.jquery.com/jquery-3.3.1.min.js", "jquery", "3.3.1",
          "dist/jquery.min.js"),
    # npm's flot 0.8.3 holds the unminified sources; the CDN serves its own minified build
    # of the same version, so these four keep the version but not the bytes.
    *(Asset(f"{_CDNJS}/flot/0.8.3/jquery.flot{part}.min.js", "flot", "0.8.3",
            f"jquery.flot{part}.js") for part in ("", ".time", ".selection", ".categories")),
    Asset("https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js",
          "flot-orderbars", "1.0.0", "js/jquery.flot.orderBars.js"),
    # Not on npm at 1.0.1: the 1.0.1 tag's own minified file ships with perfgate (MIT).
    Asset(f"{_CDNJS}/stupidtable/1.0.1/stupidtable.min.js", "stupidtable", "1.0.1",
          "stupidtable.min.js", bundled=True),
    Asset(f"{_CDNJS}/blueimp-md5/2.19.0/js/md5.min.js", "blueimp-md5", "2.19.0",
          "js/md5.min.js"),
    Asset("https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js",
          "bootstrap", "3.1.1", "dist/js/bootstrap.min.js"),
    Asset("https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css",
          "bootstrap", "3.1.1", "dist/css/bootstrap.min.css"),
)
# asv reads every series as lower-is-better, so a rise in the display-only env-steps/s series
# (history/asv.py) would be listed as a regression; asv's way to turn its detection off for a
# series is a null first commit. asv matches against "<name>@<branch>".
NO_REGRESSIONS = {r".*\.steps_per_s(@|$)": None}
NPM_PACKAGES = sorted({f"{a.package}@{a.version}" for a in ASSETS if not a.bundled})
NPM_INSTALL = "npm install --prefix DIR " + " ".join(NPM_PACKAGES)


class SiteError(ValueError):
    """The scripts folder or the published page is not what this code can vendor."""


@dataclass(frozen=True)
class Vendored:
    """What :func:`vendor_site` did: files copied, and whose integrity check was kept."""

    files: int
    verified: tuple[str, ...]  # same bytes as the CDN's: the page's integrity hash holds
    unverified: tuple[str, ...]  # same version, other bytes: integrity attribute dropped


def publish_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with regression detection off for the higher-is-better series; the user's
    own ``regressions_first_commits`` entries win."""
    first = conf.get("regressions_first_commits")
    if first is not None and not isinstance(first, dict):
        return dict(conf)  # asv itself says what is wrong with it
    return {**conf, "regressions_first_commits": {**NO_REGRESSIONS, **(first or {})}}


def source(asset: Asset, scripts: Path) -> Path:
    """The local file that stands in for ``asset``."""
    root = BUNDLED if asset.bundled else scripts
    return root / asset.package / asset.path


def check_scripts(scripts: Path) -> None:
    """Refuse a scripts folder that lacks a package, a file, or holds another version."""
    if not scripts.is_dir():
        raise SiteError(f"scripts folder {str(scripts)!r} is not a folder: make it with "
                        f"`{NPM_INSTALL}` and pass DIR/node_modules")
    problems = []
    for package, version in sorted({(a.package, a.version) for a in ASSETS if not a.bundled}):
        meta = scripts / package / "package.json"
        try:
            found = load_json(meta).get("version")
        except FileNotFoundError:
            problems.append(f"{package} is not installed there")
            continue
        except (OSError, ValueError, AttributeError) as exc:
            problems.append(f"{meta} is unreadable ({type(exc).__name__})")
            continue
        if found != version:
            problems.append(f"{package} is version {found!r}, asv's page needs "
                            f"{version} (newer jquery/flot garble the axes)")
    problems += [f"{source(a, scripts)} is missing" for a in ASSETS
                 if not problems and not source(a, scripts).is_file()]
    if problems:
        raise SiteError(f"scripts folder {str(scripts)!r}: " + "; ".join(problems)
                        + f". Fix: `{NPM_INSTALL}` and pass DIR/node_modules")


def _tag_for(page: str, url: str) -> re.Match[str] | None:
    return re.search(r"<(?:script|link)\b[^>]*?(?:src|href)=\"" + re.escape(url) + r"\"[^>]*>",
                     page)


def _integrity_holds(tag: str, data: bytes) -> bool | None:
    """None: the tag has no integrity attribute; else whether ``data`` matches it."""
    m = re.search(r'\sintegrity="(sha256|sha384|sha512)-([^"]+)"', tag)
    if m is None:
        return None
    digest = base64.b64encode(hashlib.new(m.group(1), data).digest()).decode()
    return digest == m.group(2)


def vendor_site(html_dir: Path, scripts: Path) -> Vendored:
    """Copy the scripts into ``html_dir/vendor`` and point asv's index.html at them.

    An integrity hash is kept where the local file is the CDN's exact bytes (the browser
    checks it), and removed where only the version matches (flot's minified build).
    """
    check_scripts(scripts)
    index = html_dir / "index.html"
    try:
        page = index.read_text(encoding="utf-8")
    except OSError as exc:
        raise SiteError(f"{index}: cannot read asv's page ({exc.strerror}): run asv publish "
                        "first") from None
    verified: list[str] = []
    unverified: list[str] = []
    copied: set[tuple[Path, Path]] = set()
    for asset in ASSETS:
        local = f"{VENDOR}/{asset.package}/{asset.path}"
        tag = _tag_for(page, asset.url) or _tag_for(page, local)
        if tag is None:
            raise SiteError(f"{index} does not load {asset.url}: this asv writes another page "
                            "than asv 0.6 (whose scripts perfgate knows); view it online")
        data = source(asset, scripts).read_bytes()
        new = tag.group(0).replace(asset.url, local)
        holds = _integrity_holds(new, data)
        if holds is False:
            new = re.sub(r'\sintegrity="[^"]*"', "", new)
        (verified if holds else unverified).append(f"{asset.package}/{asset.path}")
        page = page.replace(tag.group(0), new)
        copied.add((source(asset, scripts), html_dir / local))
        pkg = (BUNDLED if asset.bundled else scripts) / asset.package
        copied.update((pkg / n, html_dir / VENDOR / asset.package / n)
                      for n in LICENSES if (pkg / n).is_file())
    fonts = scripts / "bootstrap" / "dist" / "fonts"  # bootstrap.min.css refers to ../fonts
    if fonts.is_dir():
        copied.update((f, html_dir / VENDOR / "bootstrap/dist/fonts" / f.name)
                      for f in fonts.iterdir() if f.is_file())
    left = re.findall(r"<(?:script|link)\b[^>]*?(?:src|href)=\"(https?://[^\"]+)\"", page)
    if left:
        raise SiteError(f"{index} also loads {', '.join(left)}, which perfgate has no copy "
                        "of: this asv writes another page than asv 0.6")
    for src, dst in sorted(copied):
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    atomic_write(index, page.encode("utf-8"))
    return Vendored(len(copied), tuple(verified), tuple(unverified))


# asv 0.6's time axis takes its unit from the smallest value, so 600 ns - 1.2 us reads
# "nanoseconds" with ticks up to "1.20e+3", while the tooltip picks a unit per value
# ("1.337μs"). These edits of the published graphdisplay.js take the axis unit from the top
# of the axis, print ticks without exponents, and word the tooltip in the axis unit
# (docs/history-asv-site.md). Each is an exact text of asv's file: another asv version is
# left as it is, and publish says so.
UNIT_EDITS = (
    ("                    if (min < unit_list[i+1][2]) {\n"
     "                        unit_name = unit_list[i][1];\n",
     "                    if (Math.max(max * 1.3, min) < unit_list[i+1][2]) {\n"
     "                        unit_name = unit_list[i][1];\n"
     "                        $.asv.perfgate_axis = [unit, unit_list[i][0], "
     "unit_list[i][2]];\n"),
    ("                    return (v / multiplier).toPrecision(3);\n",
     "                    return String(parseFloat((v / multiplier).toPrecision(3)));\n"),
    ("                            $.asv.pretty_unit(y, unit) + \" @ \" + commit_hash);\n",
     "                            perfgate_tooltip(y, unit) + \" @ \" + commit_hash);\n"),
    ("        var previous_hover = null;\n",
     "        var previous_hover = null;\n"
     "        function perfgate_tooltip(y, unit) {  /* in the axis unit (perfgate) */\n"
     "            var ax = $.asv.perfgate_axis;\n"
     "            return (ax && ax[0] == unit) ? (y / ax[2]).toFixed(3) + ax[1]\n"
     "                                         : $.asv.pretty_unit(y, unit);\n"
     "        }\n"),
)


def align_units(html_dir: Path) -> bool:
    """Make the published graph's axis and tooltip read one unit (see UNIT_EDITS); False
    when this asv's graphdisplay.js is not the text the edits expect (left unchanged)."""
    path = html_dir / "graphdisplay.js"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    if all(new in text for _, new in UNIT_EDITS):
        return True
    if not all(text.count(old) == 1 for old, _ in UNIT_EDITS):
        return False
    for old, new in UNIT_EDITS:
        text = text.replace(old, new)
    atomic_write(path, text.encode("utf-8"))
    path.chmod(0o644)
    return True


def build(config: Path, conf: dict[str, Any], html_dir: Path, scripts: Path | None,
          asv_args: list[str]) -> Any:
    """asv publish into a build folder, the scripts copied in, then the swap: the site
    in ``html_dir`` changes only when everything succeeded. Returns the vendoring
    result (None without ``scripts``) or the failure's exit status."""
    from pytest_perfgate.cli._site_notes import add_notes, history_notes

    with building(html_dir) as work:
        code = _asv_publish(config, conf, work / "html", work, asv_args)
        if code != 0:
            print(f"perfgate publish: the site in {html_dir} is left as it was")
            return code
        if not align_units(work / "html"):
            print("perfgate publish: this asv's graphdisplay.js is not the one perfgate "
                  "knows: its time axis may read nanoseconds with ticks like 1.00e+3 "
                  "while the tooltip says μs (docs/history-asv-site.md)")
        results = conf.get("results_dir", "results")
        notes = history_notes((config.parent / str(results)).resolve())
        for note in notes:
            print(f"perfgate publish: note on the site: {note}")
        add_notes(work / "html", notes, html_dir)
        done_v = None
        if scripts is not None:
            try:
                done_v = vendor_site(work / "html", scripts)
            except (SiteError, OSError) as exc:
                print(f"perfgate publish: infrastructure error: {exc}; the site in "
                      f"{html_dir} is left as it was", file=sys.stderr)
                return 3
        swap(work, html_dir)
    return done_v


def _work_prefix(html_dir: Path) -> str:
    return f".{html_dir.name}.perfgate-publish-"


def sweep_stale(html_dir: Path, config_dir: Path | None = None) -> list[Path]:
    """Remove the build folders and config copies of publishes that were killed (their
    process is gone): names carry the publishing process's pid."""
    import psutil

    gone: list[Path] = []
    found: list[Path] = []
    if html_dir.parent.is_dir():
        found += html_dir.parent.glob(glob.escape(_work_prefix(html_dir)) + "*")
    if config_dir is not None and config_dir.is_dir():
        found += config_dir.glob(glob.escape(CONFIG_PREFIX) + "*.json")
    for p in sorted(set(found)):
        pid = p.name.rsplit("-", 1)[-1].split(".")[0]
        if pid.isdigit() and psutil.pid_exists(int(pid)):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        gone.append(p)
    return gone


@contextlib.contextmanager
def building(html_dir: Path) -> Iterator[Path]:
    """A build folder beside ``html_dir`` (one filesystem: the swap is a rename), removed
    however the publish ends; SIGTERM unwinds like Ctrl-C so that it is."""
    from pytest_perfgate.modes.ab.checkout import term_as_interrupt

    html_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=html_dir.parent,
                                 prefix=f"{_work_prefix(html_dir)}{os.getpid()}."))
    restore = term_as_interrupt()
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        restore()


def swap(work: Path, html_dir: Path) -> None:
    """Put the new site in place of the old one: two renames, the old site removed after."""
    if html_dir.exists():
        html_dir.rename(work / "old")
    (work / "html").rename(html_dir)


def _asv_publish(config: Path, conf: dict[str, Any], html_dir: Path, work: Path,
                 asv_args: list[str]) -> int:
    """Run asv publish into ``html_dir`` on a copy of the config in ``work`` (asv runs in
    the config's folder) that keeps the higher-is-better series out of asv's regression
    list. asv runs in its own process group, ended with it on Ctrl-C or SIGTERM."""
    # beside the config: asv changes into the config's folder and reads paths from there
    fd, name = tempfile.mkstemp(dir=config.parent, suffix=".json",
                                prefix=f"{CONFIG_PREFIX}{os.getpid()}.")
    copy = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(publish_config(conf), fh, indent=2)
        cmd = [sys.executable, "-m", "asv", "publish", "--config", str(copy),
               "--html-dir", str(html_dir), *asv_args]
        print(f"perfgate publish: asv publish (config {config}) into a new site", flush=True)
        proc = group.popen(cmd, cwd=config.parent,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            code = proc.wait(timeout=PUBLISH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _end(proc)
            print(f"perfgate publish: asv publish ran past {PUBLISH_TIMEOUT_S:.0f} s and was "
                  "stopped: publish a range (e.g. HEAD~200..HEAD)")
            return 3
        except BaseException:
            _end(proc)
            raise
    finally:
        copy.unlink(missing_ok=True)
    if code != 0:
        print(f"perfgate publish: asv publish failed (exit {code}); its output is above")
        return 3
    return 0


def _end(proc: subprocess.Popen[Any]) -> None:
    """End asv and every process it started (its process group), then reap it."""
    group.stop(proc, term_wait=5.0, kill_wait=5.0)

"""asv publish's site without the network: local copies of the scripts its page loads.

asv 0.6's ``index.html`` loads jquery, flot, flot-orderbars, stupidtable, blueimp-md5 and
bootstrap from public CDNs; a runner that cannot reach them shows only asv's "Can not
determine continental origin of swallow" (docs/design.md §6). :func:`vendor_site` copies
the exact versions asv names from an npm folder into ``<html_dir>/vendor/`` and points the
page at them. Other versions are refused: newer jquery/flot draw doubled axis labels.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_perfgate.core.files import atomic_write, load_json

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


__all__ = [
    "ASSETS",
    "NO_REGRESSIONS",
    "NPM_INSTALL",
    "NPM_PACKAGES",
    "UNIT_EDITS",
    "Asset",
    "SiteError",
    "Vendored",
    "align_units",
    "check_scripts",
    "publish_config",
    "source",
    "vendor_site",
]

"""Vendoring asv's CDN scripts into a published site (cli/_publish_site.py), without a browser.

Fake npm folders stand in for the real one: these tests check which files are copied, how
the page is rewritten, which integrity hashes survive, and what a wrong folder is told.
tests/test_asv_publish.py renders the result in Chromium with the real scripts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.cli._publish_site import (
    ASSETS,
    NO_REGRESSIONS,
    NPM_INSTALL,
    SiteError,
    check_scripts,
    publish_config,
    source,
    vendor_site,
)

asv = pytest.importorskip("asv")
ASV_INDEX = Path(asv.__file__).parent / "www" / "index.html"


def fake_scripts(root: Path, **versions: str) -> Path:
    """An npm folder with every package asv's page needs (``versions`` overrides some)."""
    for asset in ASSETS:
        if asset.bundled:
            continue
        pkg = root / asset.package
        (pkg / asset.path).parent.mkdir(parents=True, exist_ok=True)
        (pkg / asset.path).write_text(f"/* {asset.package} {asset.path} */\n")
        version = versions.get(asset.package.replace("-", "_"), asset.version)
        (pkg / "package.json").write_text(json.dumps({"name": asset.package,
                                                      "version": version}))
    (root / "jquery" / "LICENSE.txt").write_text("MIT\n")
    return root


def sri(data: bytes, algo: str = "sha384") -> str:
    return f"{algo}-" + base64.b64encode(hashlib.new(algo, data).digest()).decode()


def fake_page(html: Path, scripts: Path, matching: set[str]) -> Path:
    """asv's page shape: one tag per asset; the ``matching`` packages carry the integrity of
    the local file (the CDN serves the same bytes), the others some other file's."""
    tags = []
    for a in ASSETS:
        data = source(a, scripts).read_bytes() if a.package in matching else b"cdn build"
        attr = "href" if a.url.endswith(".css") else "src"
        name = "link rel=\"stylesheet\"" if attr == "href" else "script"
        end = "" if attr == "href" else "</script>"
        tags.append(f'<{name} {attr}="{a.url}" integrity="{sri(data)}" '
                    f'crossorigin="anonymous">{end}')
    html.mkdir(parents=True, exist_ok=True)
    (html / "index.html").write_text("<html><head>\n" + "\n".join(tags) + "\n"
                                     '<a href="https://example.invalid/">a link</a></head>')
    return html


def test_exact_bytes_keep_their_integrity_other_bytes_lose_it(tmp_path: Path) -> None:
    scripts = fake_scripts(tmp_path / "node_modules")
    exact = {"jquery", "bootstrap", "stupidtable"}  # the CDN serves these very bytes
    html = fake_page(tmp_path / "html", scripts, matching=exact)
    done = vendor_site(html, scripts)
    page = (html / "index.html").read_text()
    assert "https://cdn" not in page and "https://code.jquery" not in page
    assert '<a href="https://example.invalid/">' in page  # a link is not a download
    for asset in ASSETS:
        local = f"vendor/{asset.package}/{asset.path}"
        assert (html / local).read_bytes() == source(asset, scripts).read_bytes()
        tag = next(line for line in page.splitlines() if f'"{local}"' in line)
        kept = asset.package in exact
        assert ("integrity=" in tag) == kept, tag
        assert (f"{asset.package}/{asset.path}" in done.verified) == kept
    assert (html / "vendor" / "jquery" / "LICENSE.txt").is_file()
    assert (html / "vendor" / "stupidtable" / "LICENSE").read_text().startswith(
        "Copyright (c) 2012 Joseph McCullough")
    assert done.files == len(ASSETS) + 2  # the two licence files


def test_vendoring_twice_gives_the_same_page(tmp_path: Path) -> None:
    scripts = fake_scripts(tmp_path / "node_modules")
    html = fake_page(tmp_path / "html", scripts, matching=set())
    vendor_site(html, scripts)
    once = (html / "index.html").read_text()
    vendor_site(html, scripts)
    assert (html / "index.html").read_text() == once


def test_the_installed_asv_page_loads_exactly_the_known_scripts(tmp_path: Path) -> None:
    """The URL list matches this asv's own page: every asset found, nothing external left."""
    scripts = fake_scripts(tmp_path / "node_modules")
    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text(ASV_INDEX.read_text())
    done = vendor_site(html, scripts)
    # The fake files' bytes differ from the CDN's, except the stupidtable file perfgate ships
    # (the 1.0.1 tag's own stupidtable.min.js, byte for byte what asv's hash names).
    assert done.verified == ("stupidtable/stupidtable.min.js",)
    assert len(done.unverified) == len(ASSETS) - 1


def test_a_page_without_a_known_script_is_refused(tmp_path: Path) -> None:
    scripts = fake_scripts(tmp_path / "node_modules")
    html = fake_page(tmp_path / "html", scripts, matching=set())
    page = (html / "index.html").read_text().replace(ASSETS[0].url, "https://x.invalid/j.js")
    (html / "index.html").write_text(page)
    with pytest.raises(SiteError, match=f"does not load {ASSETS[0].url}: this asv writes "
                       "another page than asv 0.6"):
        vendor_site(html, scripts)
    assert not (html / "vendor").exists()  # nothing copied, page untouched
    assert (html / "index.html").read_text() == page


def test_a_page_with_an_unknown_script_is_refused(tmp_path: Path) -> None:
    scripts = fake_scripts(tmp_path / "node_modules")
    html = fake_page(tmp_path / "html", scripts, matching=set())
    page = (html / "index.html").read_text()
    (html / "index.html").write_text(page.replace(
        "</head>", '<script src="https://cdn.example/new.js"></script></head>'))
    with pytest.raises(SiteError, match="also loads https://cdn.example/new.js, which perfgate "
                       "has no copy of"):
        vendor_site(html, scripts)


def test_no_page_yet_is_refused(tmp_path: Path) -> None:
    scripts = fake_scripts(tmp_path / "node_modules")
    with pytest.raises(SiteError, match="cannot read asv's page .*: run asv publish first"):
        vendor_site(tmp_path / "html", scripts)


@pytest.mark.parametrize("versions, message", [
    ({"flot": "4.2.6"}, "flot is version '4.2.6', asv's page needs 0.8.3 (newer jquery/flot "
     "garble the axes)"),
    ({"jquery": "3.6.1", "bootstrap": "3.4.1"}, "jquery is version '3.6.1', asv's page needs "
     "3.3.1"),
])
def test_other_versions_are_refused(tmp_path: Path, versions: dict[str, str],
                                    message: str) -> None:
    scripts = fake_scripts(tmp_path / "node_modules", **versions)
    with pytest.raises(SiteError) as exc:
        check_scripts(scripts)
    assert message in str(exc.value)
    assert str(exc.value).endswith(f"Fix: `{NPM_INSTALL}` and pass DIR/node_modules")


def test_a_missing_package_or_file_is_named(tmp_path: Path) -> None:
    scripts = fake_scripts(tmp_path / "node_modules")
    (scripts / "flot" / "jquery.flot.time.js").unlink()
    with pytest.raises(SiteError, match="flot/jquery.flot.time.js is missing"):
        check_scripts(scripts)
    (scripts / "blueimp-md5" / "package.json").unlink()
    with pytest.raises(SiteError, match="blueimp-md5 is not installed there"):
        check_scripts(scripts)


def test_publish_refuses_a_bad_scripts_folder_before_running_asv(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scripts = fake_scripts(tmp_path / "node_modules", jquery="3.7.1")
    with pytest.raises(SystemExit) as exc:
        main(["publish", "--config", str(tmp_path / "asv.conf.json"), "--scripts", str(scripts)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert ("perfgate publish: error: argument --scripts: scripts folder "
            f"'{scripts}': jquery is version '3.7.1', asv's page needs 3.3.1") in err
    assert f"Fix: `{NPM_INSTALL}` and pass DIR/node_modules" in err


def test_publish_without_a_config_says_where_it_looked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["publish", "--config", str(tmp_path / "nope.json")])
    assert exc.value.code == 2
    assert (f"perfgate publish: error: no asv config at '{tmp_path / 'nope.json'}': run from "
            "the folder of asv.conf.json or pass --config PATH") in capsys.readouterr().err


def test_publish_config_turns_off_regressions_of_throughput_only() -> None:
    (pattern,) = NO_REGRESSIONS
    assert re.match(pattern, "perf.test_walk.steps_per_s@main")  # asv adds "@<branch>"
    assert re.match(pattern, "perf.test_walk.steps_per_s")
    assert not re.match(pattern, "perf.test_walk")
    assert not re.match(pattern, "perf.test_walk.steps_per_s_x@main")
    conf = {"repo": ".", "regressions_first_commits": {"slow.*": "abc", pattern: "def"}}
    out = publish_config(conf)
    assert out["regressions_first_commits"] == {"slow.*": "abc", pattern: "def"}  # theirs win
    assert conf == {"repo": ".", "regressions_first_commits": {"slow.*": "abc",
                                                                pattern: "def"}}  # untouched
    assert publish_config({"repo": "."})["regressions_first_commits"] == {pattern: None}
    assert publish_config({"regressions_first_commits": []}) == {
        "regressions_first_commits": []}  # asv names what is wrong with it


@pytest.mark.slow  # runs asv in a subprocess
def test_publish_reports_asv_failing_and_leaves_no_config_copy(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "asv.conf.json").write_text('{"version": 1, "project": "x"}')  # no "repo"
    (tmp_path / "results" / "box").mkdir(parents=True)  # a history, so that asv runs
    (tmp_path / "results" / "box" / "machine.json").write_text('{"version": 1}')
    (tmp_path / "results" / "benchmarks.json").write_text('{"version": 2}')
    assert main(["publish", "--config", str(tmp_path / "asv.conf.json")]) == 3
    out = capfd.readouterr()
    assert "No repo specified" in out.out + out.err
    assert "perfgate publish: asv publish failed (exit 1); its output is above" in out.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["asv.conf.json", "results"]


@pytest.mark.parametrize("name", ["asv.conf.json", "asv.conf.jsonc"])
def test_publish_names_a_branch_the_repository_lacks(
        tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.com",
           "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", "-b", "trunk"], check=True, timeout=60)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "c"], check=True, timeout=60)
    (tmp_path / name).write_text(  # asv reads comments; so must we
        '{"version": 1, "repo": ".", // the checkout\n "branches": ["main", "trunk"]}')
    monkeypatch.chdir(tmp_path)  # the default config: asv's names, in this folder
    with pytest.raises(SystemExit) as exc:
        main(["publish"])
    assert exc.value.code == 2
    assert (f"{tmp_path / name}: branches 'main' not found in the repository "
            f"{tmp_path}: asv publish draws only the listed branches; set "
            '"branches": ["trunk"]') in capsys.readouterr().err


def test_publish_takes_the_npm_prefix_folder_too(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    fake_scripts(tmp_path / "asv-scripts" / "node_modules", flot="0.8.2")
    with pytest.raises(SystemExit):  # the error shows which folder it looked in
        main(["publish", "--config", str(tmp_path / "nope.json"),
              "--scripts", str(tmp_path / "asv-scripts")])
    assert (f"scripts folder '{tmp_path / 'asv-scripts' / 'node_modules'}': flot is version "
            "'0.8.2'") in capsys.readouterr().err


@pytest.mark.parametrize("html, why", [
    (".", "overlaps '{tmp}'"),
    ("..", "overlaps '{tmp}'"),
    ("hist/out", "overlaps '{tmp}/hist'"),
    ("notes", "holds files that are not an asv site"),
])
def test_publish_refuses_an_html_dir_asv_would_wipe(
        tmp_path: Path, html: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "asv.conf.json").write_text('{"version": 1, "repo": ".", "branches": [null], '
                                            '"results_dir": "hist"}')
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(SystemExit) as exc:
        main(["publish", "--config", str(tmp_path / "asv.conf.json"),
              "--html-dir", str(tmp_path / html)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert why.format(tmp=tmp_path) in err, err
    assert "asv publish deletes" in err
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"

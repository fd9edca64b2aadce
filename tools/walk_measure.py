"""How far one benchmark's ``measure()`` call walks through the package, and where each fact
is computed: the figures an architecture change is judged by, before and after.

    python tools/walk_measure.py [--entry MODULE:CLASS.METHOD] [--load-pairs 40] [--no-load]

It prints four things:

1. The walk of one call of the history mode's ``measure()`` (``--entry``, default
   ``pytest_perfgate.modes.recorded:HistoryMode.measure``; after a rename, name the new
   one: a method, or a function looked up through its module when called), traced with
   :func:`sys.setprofile` in a real ``pytest --perfgate`` session run in this process, on a
   scratch git project on the fake clock (tests/fake_session.py: exact and instant), in two
   cases: *straight from history* (three recorded runs of the base commit; the head, twice
   as slow, is judged by the record alone) and *re-measured* (one recorded run, which never
   resolves the threshold, so the baseline commit is measured again beside this tree in
   A/B turns; ``--perfgate-profile=always``, so the run and the pair are profiled too).
2. The places each fact is computed: a grep of the package's code (comments and docstrings
   left out) for the patterns in :data:`FACTS`, each with its ``file:line`` list.
3. The package's modules (``.py`` files) and lines.
4. What loading the plugin costs a run that does not use it: tools/bench_load.py, quoted.

The walk, defined exactly. Only frames of ``pytest_perfgate`` modules count (the standard
library, numpy, pytest and the test's own step are passed through), less :data:`SCAFFOLD`
(the fake clock's methods, which a real run replaces with builtins). Only the calling
thread is traced. A *visit* is a stay in one module: a call from module A into module B
(B != A; directly, or through code outside the package such as the step or a callback)
opens a visit of B under the visit of A, calls within B stay in B's visit, and B's return
ends it. The visits form a tree. The measuring loop repeats itself (per window, per
step, per A/B turn, per profile sample), so under each visit all its visits into one module
are merged into one, their own visits merged likewise, in the order first made (a calling
context tree of modules): an excursion counts once per place it is made from, and the
figures move neither with the number of windows or turns nor with the order the sampled
data happens to take them in. Then, on the merged tree:

- the *path* goes down into each child and back up to its parent, in the order first made
  (printed with the package and its first level dropped: ``ab/controller``, ``vcs``);
- *stops* is the length of the path (a visit of A with one child B: A -> B -> A, 3 stops);
- *rooms* is the number of distinct modules on it;
- a *climb back* is a visit of a module that is already open further up the call stack,
  below a different module: a call that re-enters an upper module from below
  (history_mode -> remeasure -> history_mode is one). Returns are never climbs.

``raw module changes`` (calls into another module, and their returns, unmerged) is for
reference only: it grows with the windows and turns and varies with the profile's samples.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pytest_perfgate"
ENTRY = "pytest_perfgate.modes.recorded:HistoryMode.measure"
SCAFFOLD = ("FakeClock.",)  # qualname prefixes of frames not counted (test scaffolding)


@dataclass(frozen=True)
class Fact:
    """A fact whose computing places are grepped: ``pattern`` in a code line, unless the
    line also matches ``unless``; files under ``outside`` (package-relative) not searched."""

    label: str
    pattern: str
    unless: str = r"(?!)"
    outside: tuple[str, ...] = ()


FACTS = (
    Fact("baseline figure (1e6 / math.exp: the geometric mean of the run medians)",
         r"1e6\s*/\s*math\.exp\(|math\.exp\(\s*statistics\.fmean\(\s*math\.log\("),
    Fact("threshold default (default_threshold( calls)", r"\bdefault_threshold\(",
         unless=r"\bdef\s+default_threshold\("),
    Fact("Rule( constructions", r"(?<![\w.])Rule\(", unless=r"^\s*class\s+Rule\b"),
    Fact("HistoryMode( constructions outside session/", r"(?<![\w.])HistoryMode\(",
         unless=r"^\s*class\s", outside=("session/",)),
    Fact("readers of extra['ab_pairs'] (the key named, not assigned)", r"""["']ab_pairs["']""",
         unless=r"""\[\s*["']ab_pairs["']\s*\]\s*=(?!=)"""),
    Fact("made-up results (rate=0.0)", r"\brate\s*=\s*0\.0\b"),
)

RUN = ["--perfgate", "--perfgate-machine=box", "--perfgate-threshold=10%",
       "--perfgate-windows=4", "--perfgate-window-time=0.1", "--perfgate-warmup-max=5",
       "--perfgate-ab-turns=8", "--perfgate-ab-turn-time=0.05", "-p", "no:cacheprovider",
       "-p", "no:randomly"]


# --- the walk -------------------------------------------------------------------------------

@dataclass
class Visit:
    """A stay in one module, and the visits it made into other modules, in call order."""

    module: str
    children: list[Visit] = field(default_factory=list)

    def folded(self) -> Visit:
        """This visit with its visits into each module merged into one, recursively (see
        the module docstring)."""
        merged: dict[str, Visit] = {}
        for child in self.children:
            merged.setdefault(child.module, Visit(child.module)).children.extend(child.children)
        return Visit(self.module, [m.folded() for m in merged.values()])


class Tracer:
    """The profile function: a stack of package frames, each with the visit it belongs to."""

    def __init__(self) -> None:
        self.roots: list[Visit] = []
        self.raw_changes = 0
        self._stack: list[tuple[FrameType, Visit]] = []

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if not (module == PACKAGE or module.startswith(PACKAGE + ".")):
                return
            if frame.f_code.co_qualname.startswith(SCAFFOLD):
                return
            if not self._stack:
                visit = Visit(module)
                self.roots.append(visit)
            elif self._stack[-1][1].module == module:
                visit = self._stack[-1][1]
            else:
                visit = Visit(module)
                self._stack[-1][1].children.append(visit)
                self.raw_changes += 2  # in, and back out
            self._stack.append((frame, visit))
        elif event == "return" and self._stack and self._stack[-1][0] is frame:
            self._stack.pop()


@dataclass(frozen=True)
class Walk:
    path: list[str]
    climbs: list[str]  # "upper -> ... -> upper": each call that re-entered an upper module
    raw_changes: int

    @property
    def rooms(self) -> list[str]:
        return sorted(set(self.path))


def walk_of(root: Visit, raw_changes: int) -> Walk:
    path: list[str] = []
    climbs: list[str] = []

    def go(v: Visit, above: list[str]) -> None:
        path.append(v.module)
        if v.module in above[:-1]:
            up = len(above) - 1 - above[::-1].index(v.module)
            climbs.append(" -> ".join(short(m) for m in [*above[up:], v.module]))
        for c in v.children:
            go(c, [*above, v.module])
            path.append(v.module)

    go(root.folded(), [])
    return Walk(path, climbs, raw_changes)


def short(module: str) -> str:
    """``pytest_perfgate.modes.ab.controller`` -> ``ab/controller``: the package and its
    first level dropped (the package's own ``__init__`` keeps its first level)."""
    parts = module.split(".")[1:]
    return "/".join(parts[1:] or parts) or module


def traced(entry: str) -> tuple[Tracer, Callable[[], None]]:
    """Patch ``entry`` (``module:Class.method`` or ``module:function``) so each outermost
    call of it is traced; returns the tracer and the undo."""
    module_name, _, qual = entry.partition(":")
    owner: Any = importlib.import_module(module_name)
    *outer, name = qual.split(".")
    for part in outer:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    tracer = Tracer()
    depth = [0]

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        if depth[0] == 1:
            sys.setprofile(tracer)
        try:
            return original(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                sys.setprofile(None)

    setattr(owner, name, wrapper)
    return tracer, lambda: setattr(owner, name, original)


# --- the scratch project and its sessions --------------------------------------------------

def fake_session() -> Any:
    """The tests' fake-clock project maker (kept in step with the package by the tests)."""
    spec = importlib.util.spec_from_file_location("fake_session", ROOT / "tests" /
                                                  "fake_session.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PERFGATE_") and k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def scratch(where: Path, base_runs: int, head_slow: float) -> Path:
    """A base commit with ``base_runs`` recorded history runs, then the head commit whose
    step is ``head_slow`` times as slow."""
    made = fake_session()
    repo: Path = made.scratch_repo(where)
    for _ in range(base_runs):
        done = subprocess.run([sys.executable, "-m", "pytest", *RUN, "--perfgate-record=true",
                               "perf"], cwd=repo, env=clean_env(), capture_output=True,
                              text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"recording a base run failed:\n{done.stdout}\n{done.stderr}")
    (repo / "perf" / "test_s.py").write_text(made.SLOW_STEP.format(slow=head_slow))
    (repo / "n.txt").write_text("head")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "head")
    return repo


@contextlib.contextmanager
def inside(repo: Path) -> Iterator[None]:
    """cwd, environment and import state of a session run in this process, then undone."""
    import pytest  # noqa: F401  (loaded before the snapshot of sys.modules)

    cwd, env, path = os.getcwd(), dict(os.environ), list(sys.path)
    before = set(sys.modules)
    os.chdir(repo)
    os.environ.clear()
    os.environ.update(clean_env())
    try:
        yield
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:] = path
        for name in ("conftest", "test_s"):  # the project's own, imported by name
            if name in sys.modules and name not in before:
                del sys.modules[name]


def session(repo: Path, entry: str, *args: str) -> tuple[Tracer, dict[str, Any], str]:
    """Run the head's perf test in this process with ``entry`` traced: the tracer, the
    benchmark's report entry and pytest's output."""
    import pytest

    report = repo.parent / "report.json"
    tracer, undo = traced(entry)
    out = io.StringIO()
    try:
        with inside(repo), contextlib.redirect_stdout(out):
            rc = pytest.main([*RUN, f"--perfgate-json={report}", *args, "perf"])
    finally:
        undo()
    if not report.exists():
        raise SystemExit(f"the session wrote no report (exit {rc}):\n{out.getvalue()}")
    (bench,) = json.loads(report.read_text())["benchmarks"]
    return tracer, bench, out.getvalue()


def profiled(profile: object) -> str:
    if not isinstance(profile, dict):
        return "no"
    failed = profile.get("error")
    return f"yes, but {failed}" if failed else "yes"


def show_case(title: str, tracer: Tracer, bench: dict[str, Any], full: bool) -> None:
    name = (lambda m: m) if full else short
    message = " ".join(str(bench.get("message", "")).split())
    print(f"\n== {title}")
    print(f"verdict: {bench['verdict']}; re-measured: "
          f"{'yes' if message.startswith('re-measured:') else 'no'}; profiled: "
          f"{profiled(bench.get('result', {}).get('extra', {}).get('profile'))}")
    print(f"calls of the entry traced: {len(tracer.roots)}")
    for i, root in enumerate(tracer.roots):
        w = walk_of(root, tracer.raw_changes if len(tracer.roots) == 1 else -1)
        if len(tracer.roots) > 1:
            print(f"-- call {i + 1}")
        print(f"stops {len(w.path)}, rooms {len(w.rooms)}, climbs back {len(w.climbs)} "
              f"(raw module changes, unmerged: {w.raw_changes})")
        print("path: " + " -> ".join(name(m) for m in w.path))
        print("rooms: " + ", ".join(m.split(".", 1)[-1].replace(".", "/") for m in w.rooms))
        print("climbs back: " + ("; ".join(w.climbs) or "none"))


# --- the facts, the size, the load ---------------------------------------------------------

def code_lines(path: Path) -> dict[int, str]:
    """The file's lines with comments blanked and docstring lines left out."""
    text = path.read_text()
    lines = dict(enumerate(text.splitlines(), 1))
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row] = lines[row][:col]
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            for row in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                lines.pop(row, None)
    return lines


def package_files() -> list[Path]:
    return sorted((ROOT / PACKAGE).rglob("*.py"))


def places(fact: Fact, files: list[Path]) -> list[str]:
    found = []
    for path in files:
        rel = path.relative_to(ROOT / PACKAGE).as_posix()
        if rel.startswith(fact.outside):
            continue
        for row, line in code_lines(path).items():
            if re.search(fact.pattern, line) and not re.search(fact.unless, line):
                found.append(f"{PACKAGE}/{rel}:{row}")
    return found


def show_facts(facts: tuple[Fact, ...]) -> None:
    print("\n== places each fact is computed (code lines; comments and docstrings left out)")
    files = package_files()
    for fact in facts:
        where = places(fact, files)
        print(f"{len(where)}  {fact.label}  /{fact.pattern}/")
        for w in where:
            print(f"      {w}")


def show_size() -> None:
    files = package_files()
    sizes = {f: len(f.read_text().splitlines()) for f in files}
    big = max(sizes, key=lambda f: sizes[f])
    print(f"\n== {PACKAGE}: {len(files)} modules (.py files), {sum(sizes.values())} lines; "
          f"largest {big.relative_to(ROOT).as_posix()} ({sizes[big]} lines), "
          f"{sum(1 for n in sizes.values() if n > 400)} over 400 lines")


def show_load(pairs: int) -> None:
    print(f"\n== plugin load (tools/bench_load.py --pairs {pairs})", flush=True)
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_load.py"), "--pairs",
                           str(pairs)], env=clean_env(), capture_output=True, text=True)
    print(done.stdout.rstrip() or done.stderr.rstrip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--entry", default=ENTRY, help=f"module:Class.method (default {ENTRY})")
    ap.add_argument("--full-names", action="store_true", help="modules by their full name")
    ap.add_argument("--load-pairs", type=int, default=40, help="bench_load.py's pairs")
    ap.add_argument("--no-load", action="store_true", help="skip the plugin load figure")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = clean_env()["PYTHONPATH"]
    pkg = importlib.import_module(PACKAGE)
    head = git(ROOT, "rev-parse", "--short", "HEAD")
    dirty = " (uncommitted changes)" if git(ROOT, "status", "--porcelain", PACKAGE) else ""
    print(f"{PACKAGE} from {Path(pkg.__file__ or '').parent} at {head}{dirty}; "
          f"entry {args.entry}")
    cases = [("straight from history: 3 recorded runs of the base, head 2x slower",
              3, ()),
             ("re-measured: 1 recorded run (INCONCLUSIVE), head 2x slower, "
              "--perfgate-profile=always", 1, ("--perfgate-profile=always",))]
    for title, runs, extra in cases:
        with tempfile.TemporaryDirectory(prefix="perfgate-walk-") as tmp:
            repo = scratch(Path(tmp), runs, 2.0)
            tracer, bench, out = session(repo, args.entry, *extra)
        if not tracer.roots:
            raise SystemExit(f"{args.entry} was never called:\n{out}")
        show_case(title, tracer, bench, args.full_names)
    show_facts(FACTS)
    show_size()
    if not args.no_load:
        show_load(args.load_pairs)


if __name__ == "__main__":
    main()

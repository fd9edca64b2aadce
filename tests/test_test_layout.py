"""The test suite's own layout: what test modules share lives in helper modules
(tests/helpers.py, tests/ring_steps.py, ...), never in another test module or in conftest.

A test module imported by another one is imported twice (pytest imports it as ``test_x``,
``from tests.test_x import ...`` again as ``tests.test_x``), runs its module-level code
twice, and ties the two files' private helpers together. conftest.py holds pytest's hooks
and fixtures only: pytest loads it itself, and its docs advise against importing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def other_test_imports(source: str, me: str, test_modules: set[str]) -> list[str]:
    """``line: module`` for each import in ``source`` (the test module ``me``) of another
    test module of ``test_modules`` or of the tests' conftest, in any form: ``test_x``,
    ``tests.test_x``, ``from tests import test_x``, relative. Importing itself is allowed
    (spawn children pickle its functions by the module's name)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from tests/ itself
                base = "tests." + base if base else "tests"
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            parts = name.split(".")
            named = parts[:2] if parts[0] == "tests" else parts[:1]  # `tests.x` or `x`
            module = named[-1] if named != ["tests"] else ""  # the module in tests/
            conftest = named in (["tests", "conftest"], ["conftest"])
            if conftest or (module in test_modules and module != me):
                found.append((node.lineno, ".".join(named)))
    return [f"{line}: {name}" for line, name in sorted(set(found))]


def test_no_test_module_imports_another() -> None:
    modules = sorted(TESTS.glob("test_*.py"))
    stems = {p.stem for p in modules}
    assert len(stems) > 50 and "test_ring" in stems  # the scan sees the suite
    bad = {p.name: found for p in modules
           if (found := other_test_imports(p.read_text(), p.stem, stems))}
    assert not bad, ("test modules import other test modules (move what they share into a "
                     f"helper module such as tests/helpers.py): {bad}")


def test_no_module_imports_conftest() -> None:
    """Helper modules included: a name a test needs from conftest.py moves to a helper
    module, which conftest imports too."""
    modules = sorted(p for p in TESTS.rglob("*.py")
                     if p.name != "conftest.py" and "node_modules" not in p.parts)
    assert len(modules) > 50 and TESTS / "helpers.py" in modules
    bad = {p.relative_to(TESTS).as_posix(): found for p in modules
           if (found := other_test_imports(p.read_text(), p.stem, set()))}
    assert not bad, f"modules import conftest (move what they need to tests/helpers.py): {bad}"


def test_the_layout_check_sees_every_form_of_import() -> None:
    stems = {"test_a", "test_b"}
    source = ("import test_b\n"
              "from test_b import x\n"
              "from tests.test_b import y\n"
              "import tests.test_b as tb\n"
              "from tests import test_b\n"
              "from . import test_b\n"
              "from .test_b import z\n"
              "from tests.conftest import need_tool\n"
              "def f():\n"
              "    from test_b import w\n"
              "    from conftest import NODE_DIR\n"
              # allowed: itself, helper modules, the package under test
              "from test_a import SPEC\n"
              "from tests.test_a import SPEC\n"
              "from helpers import need_tool\n"
              "from ring_steps import episode\n"
              "from pytest_perfgate.ring.shm_ring import Ring\n")
    found = other_test_imports(source, "test_a", stems)
    assert [int(f.split(":")[0]) for f in found] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 11]
    assert "8: tests.conftest" in found and "11: conftest" in found

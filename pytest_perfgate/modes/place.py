"""Where a pytest run stands in its repository, and the same place in another revision's
worktree.

A run of another revision (an A/B base side, a bisection probe) must collect the test the
user's run collected: pytest resolves its arguments from the working directory and names
tests relative to the rootdir, which it finds from the ini file, so all three are carried
over, each at the same path relative to the repository's top folder. A path outside the
repository (``-c /dev/null``, a shared ini) is the same file for both. What a worktree
lacks is said by name, both paths: a missing explicit ini file is an error, a missing test
file is a test new in the head (docs/ab.md, "Where the sides run").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

Where = tuple[str, str] | None  # a test's file and the rest of its node id, if known


class PlaceError(RuntimeError):
    """The other revision cannot be run at the user's place (names both paths)."""


@dataclass(frozen=True)
class Place:
    """A pytest invocation's place: its repository's top folder, working directory,
    rootdir and ini file (all absolute and resolved), and how each was chosen.

    ``explicit_ini``: chosen with ``-c`` (a revision without it is an error; a discovered
    one it lacks is left to that revision's own discovery). ``options`` are the other
    arguments that decide what is collected and how it is imported, in the user's words;
    ``confcutdir`` is mapped like the rest.
    """

    top: Path
    cwd: Path
    rootdir: Path
    inifile: Path | None = None
    explicit_ini: bool = False
    confcutdir: Path | None = None
    options: tuple[str, ...] = ()

    @classmethod
    def of(cls, top: Path, cwd: Path, rootdir: Path, inifile: Path | None = None,
           explicit_ini: bool = False, confcutdir: Path | None = None,
           options: Sequence[str] = ()) -> Place:
        """A place from pytest's facts; relative paths are taken from ``cwd``."""
        cwd = Path(cwd).resolve()

        def absolute(p: Path | None) -> Path | None:
            return None if p is None else (cwd / Path(os.path.expandvars(p))).resolve()

        root = absolute(rootdir)
        assert root is not None
        return cls(Path(top).resolve(), cwd, root, absolute(inifile), explicit_ini,
                   absolute(confcutdir), tuple(options))

    def inside(self, path: Path) -> bool:
        return path == self.top or self.top in path.parents

    def at(self, path: Path, tree: Path | None) -> Path:
        """``path`` in ``tree`` (another worktree of the repository; None: this one).
        Paths outside the repository stay what they are."""
        if tree is None or not self.inside(path):
            return path
        return Path(tree) / path.relative_to(self.top)

    def test_file(self, nodeid: str, where: Where = None) -> tuple[Path, str]:
        """The test's file and the rest of its node id ("::test_walk[8]"): ``where`` as the
        run that collected it gave them, else read from ``nodeid`` (relative to the
        rootdir)."""
        if where is not None:
            return (self.cwd / where[0]).resolve(), where[1]
        file, sep, rest = nodeid.partition("::")
        return (self.rootdir / file).resolve(), sep + rest

    def test_arg(self, nodeid: str, tree: Path | None, where: Where = None) -> str:
        """The command-line argument that selects the test from ``self.cwd`` in ``tree``."""
        path, rest = self.test_file(nodeid, where)
        return os.path.relpath(self.at(path, tree), self.at(self.cwd, tree)) + rest

    def prepare(self, tree: Path) -> None:
        """Make the working directory and rootdir exist in ``tree`` (a temporary worktree:
        a folder new in the head is empty in the base, and pytest needs both to start),
        and refuse an explicit ini file the tree lacks."""
        for folder in (self.cwd, self.rootdir):
            self.at(folder, tree).mkdir(parents=True, exist_ok=True)
        if self.explicit_ini and self.inifile is not None:
            there = self.at(self.inifile, tree)
            if there != self.inifile and not there.exists():
                raise PlaceError(
                    f"the configuration file given with -c, {self.inifile}, is not in the "
                    f"other revision (looked for {there}): commit it there, or give a file "
                    "outside the repository")

    def args(self, tree: Path | None) -> tuple[str, ...]:
        """The arguments that make a run in ``tree`` read the same ini file (where ``tree``
        has it) and take the same rootdir as the user's run."""
        out: list[str] = []
        if self.inifile is not None:
            ini = self.at(self.inifile, tree)
            if ini.exists() or ini == self.inifile:
                out += ["-c", str(ini)]
        out += ["--rootdir", str(self.at(self.rootdir, tree))]
        if self.confcutdir is not None:
            out.append(f"--confcutdir={self.at(self.confcutdir, tree)}")
        return (*out, *self.options)

    def pythonpath(self, entries: str, tree: Path | None) -> str:
        """A PYTHONPATH value with its entries inside the repository moved into ``tree``:
        the other revision must not import this checkout's code."""
        parts = [str(self.at((self.cwd / p).resolve(), tree)) if p else p
                 for p in entries.split(os.pathsep)]
        return os.pathsep.join(parts)

    def missing(self, nodeid: str, tree: Path, where: Where = None) -> str | None:
        """Why ``tree`` cannot have the test (its file is not there), or None."""
        here, _ = self.test_file(nodeid, where)
        there = self.at(here, tree)
        if there.is_file() or not self.inside(here):
            return None
        return (f"its file {here.relative_to(self.top)} is not in that revision "
                f"(looked for {there})")

    def map_args(self, args: Sequence[str], tree: Path) -> list[str]:
        """Command-line words with absolute paths inside the repository (alone or as an
        option's ``=value``) moved into ``tree``; relative ones already resolve the same
        from the same working directory."""
        out = []
        for a in args:
            head, eq, value = a.partition("=") if a.startswith("-") else ("", "", a)
            if value.startswith("/") and self.inside(Path(value).resolve()):
                value = str(self.at(Path(value).resolve(), tree))
            out.append(head + eq + value)
        return out

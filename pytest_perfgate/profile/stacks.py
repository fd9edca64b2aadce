"""Collapsed stacks: py-spy's raw output read into frames both sides of an A/B run share.

A base side runs its code from a worktree and the head from the checkout, so the same
function has two absolute paths; a frame's file is made relative to the tree it ran from
(``ours``) or shortened to its package (``site-packages/numpy/...``), and native frames at
an address (no symbol) become ``[unknown]`` in their library, so both sides name alike.
Process and thread frames are dropped: functions are merged across the workload's tree.
One profile alone (history mode's own run) is read here too: :func:`where_time_goes`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NO_FRAME = "[no Python frame]"  # a sample of a process with nothing py-spy could name
UNKNOWN = "[unknown]"  # a native frame without a symbol
NATIVE = "[native code]"  # a library's functions together (attribute.py)
TOP = 5  # functions a profile names

_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_PROCESS = re.compile(r'process \d+:".*?"(?:;|$)')
_PACKAGE = re.compile(r".*/(?:site|dist)-packages/")
_INLINE = re.compile(r"^(?:(?P<outer>.*)\.<locals>\.)?<(?:listcomp|dictcomp|setcomp|genexpr)>$")


@dataclass(frozen=True, order=True)
class Frame:
    """One frame: a function, its file (relative where it is ours) and its first line
    (0 for native code), and whether it lies in the measured tree. Frames are equal by
    function and file: base and head number a function's lines apart when an edit above it
    added or removed lines."""

    name: str
    file: str
    line: int = field(default=0, compare=False)  # a function is itself where an edit above
    ours: bool = False                           # it moved its first line

    @property
    def native(self) -> bool:
        return self.line == 0 and self.name != NO_FRAME

    def __str__(self) -> str:
        if self.name == NO_FRAME:
            return NO_FRAME
        return f"{self.name} ({self.file}:{self.line})" if self.line else \
            f"{self.name} ({self.file})"


Stack = tuple[Frame, ...]  # outermost first


def frame(text: str, roots: Sequence[Path]) -> Frame | None:
    """A raw frame, or None for py-spy's process and thread frames."""
    if text.startswith(("process ", "thread (")):
        return None
    m = _FRAME.match(text)
    if m is None:
        return Frame(text, "")
    name, file = m["name"], m["file"]
    line = int(m["line"]) if m["line"] else 0
    if name.startswith("0x") and not line:
        name = UNKNOWN
    for root in roots:
        with_sep = str(root).rstrip("/") + "/"
        if file.startswith(with_sep):
            return Frame(name, file[len(with_sep):], line, True)
    short = _PACKAGE.sub("", file)
    if short == file and not line:
        short = Path(file).name  # a shared library: its name
    return Frame(name, short, line)


def parse(text: str, roots: Sequence[Path] = ()) -> Counter[Stack]:
    """py-spy's raw format (``frame;frame;... count`` per line) as sample counts per stack.
    A line that is not of that form is skipped: a cut-off file loses only that line."""
    out: Counter[Stack] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        while (m := _PROCESS.match(stack)) is not None:  # its command line may hold ";"
            stack = stack[m.end():]
        frames = _fold_comprehensions(
            [f for f in (frame(t, roots) for t in stack.split(";") if t) if f is not None])
        out[frames or (Frame(NO_FRAME, ""),)] += int(count)
    return out


def _fold_comprehensions(frames: list[Frame]) -> Stack:
    """A comprehension's or generator expression's frame charged to the function it is
    written in: Python 3.12 inlines comprehensions (no frame of their own), so without
    this the same code is named two ways by the Python version it ran on."""
    kept: list[Frame] = []
    for f in frames:
        m = _INLINE.match(f.name)
        caller = next((k for k in reversed(kept) if not k.native), None)
        if m is not None and caller is not None and caller.file == f.file and \
                (m["outer"] is None or m["outer"] == caller.name):
            continue
        kept.append(f)
    return tuple(kept)


def folded(stacks: Mapping[Stack, float], scale: float = 1.0) -> str:
    """The collapsed-stack format (flamegraph.pl, speedscope, inferno): counts x ``scale``
    rounded to whole numbers, stacks with none left out."""
    lines = []
    for stack, n in sorted(stacks.items()):
        v = round(n * scale)
        if v > 0:
            lines.append(f"{';'.join(map(str, stack))} {v}")
    return "\n".join(lines) + "\n"


def diff_folded(base: Mapping[Stack, float], head: Mapping[Stack, float],
                base_scale: float, head_scale: float) -> str:
    """Brendan Gregg's differential folded format (``stack before after``), which
    flamegraph.pl draws as a differential flame graph; both counts scaled to one unit."""
    lines = []
    for stack in sorted(set(base) | set(head)):
        b, h = round(base.get(stack, 0) * base_scale), round(head.get(stack, 0) * head_scale)
        if b or h:
            lines.append(f"{';'.join(map(str, stack))} {b} {h}")
    return "\n".join(lines) + "\n"


def merged(parts: Iterable[Mapping[Stack, int]]) -> Counter[Stack]:
    out: Counter[Stack] = Counter()
    for p in parts:
        out.update(p)
    return out


def where_time_goes(stacks: Counter[Stack], steps: int, rate: float, top: int = TOP
                    ) -> list[dict[str, Any]]:
    """One profile alone: each sample charged to the deepest function of the measured tree
    on its stack (else its leaf), time per unit of work, the biggest first, with the frame below
    it that holds most of its time."""
    ms = 1000.0 / rate / max(steps, 1)
    total = sum(stacks.values()) or 1
    charged: dict[Frame, float] = defaultdict(float)
    below: dict[Frame, Counter[Frame]] = defaultdict(Counter)
    for stack, n in stacks.items():
        mine = next((f for f in reversed(stack) if f.ours and not f.native), stack[-1])
        charged[mine] += n
        if stack[-1] != mine:
            below[mine][stack[-1]] += n
    out = []
    for f, count in sorted(charged.items(), key=lambda x: -x[1])[:top]:
        inside = next((g for g, _ in below[f].most_common()
                       if g.name not in (UNKNOWN, NO_FRAME)), None)
        out.append({"function": f.name, "where": str(f).split(" (", 1)[-1][:-1]
                    if f.name != NO_FRAME else "", "ms_per_step": count * ms,
                    "share": count / total, "inside": str(inside) if inside else None})
    return out

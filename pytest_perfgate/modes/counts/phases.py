"""Per-phase instruction counts: ``perfgate.phase()`` brackets inside a counted call.

While one counted call runs, the step's phase recorder is diverted: entering or leaving a
phase dumps callgrind's counters (``DUMP_STATS_AT``, which also zeroes them) with a label
naming the phase that just ended its stretch, ``<call label>#phase:<phase>``. Between two
boundaries the innermost open phase owns the instructions (a nested phase's instructions
count in it alone, not also in the enclosing one), and ``(other)`` owns those outside
any phase. The counted call's own final dump is the tail after the last boundary, also
``(other)``. So the whole call is the sum of its dumps, and the phases add up to it
exactly (docs/design.md §10).
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from pytest_perfgate.core.timing import PhaseRecorder, activate, check_phase_name
from pytest_perfgate.modes.counts import client

OTHER = "(other)"  # instructions of the counted call outside any phase (not a legal phase name)
SEP = "#phase:"  # <call label>#phase:<phase>
ENV_PHASES = "PERFGATE_COUNTS_PHASES"  # "0" in the counting worker: whole-step counts only


def enabled() -> bool:
    """Phases are counted unless ``PERFGATE_COUNTS_PHASES`` is 0/false/no/off (then the
    counted call is bracketed as without phases: the cost comparison, or a small step whose
    count should not carry the boundaries)."""
    return os.environ.get(ENV_PHASES, "1").strip().lower() not in ("0", "false", "no", "off")


def segment_label(call_label: str, phase: str) -> str:
    return f"{call_label}{SEP}{phase}"


def _dumper(label: str) -> Callable[[], int]:
    """A prepared ``DUMP_STATS_AT(label)``: its argument block is built once, so a phase
    boundary costs one ctypes call inside the counted region."""
    text = ctypes.create_string_buffer(label.encode())
    block = (ctypes.c_uint64 * 6)(client.DUMP_STATS_AT, ctypes.addressof(text), 0, 0, 0, 0)
    fn, addr = client.request_fn(), ctypes.addressof(block)

    def dump() -> int:
        return int(fn(addr, 0))

    dump.keep = (text, block)  # type: ignore[attr-defined]  # alive as long as the dumper
    return dump


class _CountedPhase:
    """One phase's boundaries: dump the stretch before it on entry, its own on exit."""

    __slots__ = ("dump_self", "name", "owner")

    def __init__(self, owner: PhaseCounter, name: str) -> None:
        self.owner = owner
        self.name = name
        self.dump_self = owner.dumper(name)

    def __enter__(self) -> None:
        stack = self.owner.stack
        self.owner.dumper(stack[-1] if stack else OTHER)()
        stack.append(self.name)

    def __exit__(self, *exc: object) -> None:
        stack = self.owner.stack
        if stack and stack[-1] == self.name:  # always so for ``with`` blocks
            self.dump_self()
            stack.pop()
            return
        # left out of order (entered/exited by hand, or across generators): the stretch
        # still belongs to the innermost open phase; this phase just stops being open
        self.owner.dumper(stack[-1] if stack else OTHER)()
        if self.name in stack:
            del stack[len(stack) - 1 - stack[::-1].index(self.name)]


class _Uncounted:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class PhaseCounter:
    """Hands out counting phases to the thread that runs the step (other threads' phases are
    not counted: callgrind's counters are per process, a second stack would misattribute).
    ``names`` (learnt in the warm-up) are prepared up front, outside the counted region."""

    def __init__(self, call_label: str, names: Iterable[str] = ()) -> None:
        self.call_label = call_label
        self.stack: list[str] = []
        self._phases: dict[str, _CountedPhase] = {}
        self._dumpers: dict[str, Callable[[], int]] = {}
        self._thread = threading.get_ident()
        self.dumper(OTHER)
        for name in names:
            self._phases[name] = _CountedPhase(self, name)

    def dumper(self, phase: str) -> Callable[[], int]:
        d = self._dumpers.get(phase)
        if d is None:
            d = self._dumpers[phase] = _dumper(segment_label(self.call_label, phase))
        return d

    def phase(self, name: str) -> _CountedPhase | _Uncounted:
        ph = self._phases.get(name) if isinstance(name, str) else None
        if ph is None:  # first seen inside the counted call: its set-up is counted too
            ph = self._phases[check_phase_name(name)] = _CountedPhase(self, name)
        if threading.get_ident() != self._thread:
            return _Uncounted()
        return ph


class _Divert:
    """Route ``perfgate.phase()`` (which goes to ``recorder`` directly) and
    ``core.timing.phase()`` (the recorder active in this thread) to ``phase_fn``."""

    def __init__(self, recorder: PhaseRecorder, phase_fn: Callable[[str], object]) -> None:
        self.recorder = recorder
        self.phase_fn = phase_fn
        self._active = activate(recorder)

    def __enter__(self) -> None:
        self.recorder.phase = self.phase_fn  # type: ignore[method-assign,assignment]
        self._active.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._active.__exit__(*exc)
        del self.recorder.phase


class PhaseCounts:
    """One benchmark's phases under counting: ``learning()`` around the uninstrumented
    warm-up calls notes the phase names (the step runs its phases untimed), ``call(label)``
    around one counted call counts them. Both are no-ops when ``on`` is false."""

    def __init__(self, recorder: PhaseRecorder, on: bool = True) -> None:
        self.recorder = recorder
        self.on = on
        self.names: list[str] = []

    def _learn(self, name: str) -> _Uncounted:
        if name not in self.names:
            self.names.append(check_phase_name(name))
        return _Uncounted()

    def learning(self) -> _Divert | _Uncounted:
        return _Divert(self.recorder, self._learn) if self.on else _Uncounted()

    def call(self, call_label: str) -> _Divert | _Uncounted:
        if not self.on:
            return _Uncounted()
        return _Divert(self.recorder, PhaseCounter(call_label, self.names).phase)


def read_dumps(paths: Iterable[Path],
               read: Callable[[Path], tuple[str | None, dict[str, int]]]
               ) -> dict[str, dict[str, int]]:
    """Events per trigger label, summed over the dumps that carry it (a phase entered five
    times per step leaves five dumps). A dump that cannot be read is skipped with a warning."""
    out: dict[str, dict[str, int]] = {}
    for path in paths:
        try:
            trigger, events = read(path)
        except (OSError, ValueError) as e:
            warnings.warn(f"skipping unreadable callgrind dump {path}: {e}", stacklevel=2)
            continue
        if trigger:
            into = out.setdefault(trigger, {})
            for k, v in events.items():
                into[k] = into.get(k, 0) + v
    return out


def split_call(dumps: Mapping[str, Mapping[str, int]], call_label: str
               ) -> tuple[dict[str, int], dict[str, int]]:
    """(the whole call's events, Ir per phase) of counted call ``call_label``: the whole is
    the call's final dump plus every phase stretch; its final dump is ``(other)``'s tail."""
    whole: dict[str, int] = {}
    per_phase: dict[str, int] = {}
    for trigger, events in dumps.items():
        if trigger == call_label:
            phase = OTHER
        elif trigger.startswith(call_label + SEP):
            phase = trigger[len(call_label) + len(SEP):]
        else:
            continue
        for k, v in events.items():
            whole[k] = whole.get(k, 0) + v
        per_phase[phase] = per_phase.get(phase, 0) + events.get("Ir", 0)
    if set(per_phase) == {OTHER}:
        per_phase = {}  # no phase was entered: nothing to break down
    return whole, per_phase


def per_step(phase_ir: Mapping[str, tuple[int, ...]], transitions: int
             ) -> dict[str, float]:
    """The median over counted calls of each phase's instructions per env-step."""
    import statistics

    return {p: statistics.median(v) / transitions for p, v in phase_ir.items() if v}

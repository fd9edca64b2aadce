"""Progress of long measurements: an observer the Meter, the A/B mode and the sweeps call.

A benchmark under ``--perfgate`` takes 10-15 s (warm-up, then K windows), a sweep or a
calibration study minutes; silence that long looks like a hang. Whatever measures calls a
:class:`Progress` with events (benchmark started, warm-up started/ended, window k of K done
with its env-steps/s, benchmark finished); :class:`Progress` itself ignores them, so code
that measures never checks whether anyone listens. :class:`LiveProgress` turns the events
into text on a :class:`StatusLine`: on a terminal one status line rewritten in place, then
one final line per benchmark; in a log (CI, a pipe) only the final line, so logs do not
scroll. The pytest plugin supplies a status line over pytest's terminal reporter
(``plugin/status_line.py``); the command line one over stderr (:class:`StreamStatus`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TextIO

from pytest_perfgate.core.metric import figure
from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from pytest_perfgate.core.gate import Verdict


class Progress:
    """The observer: every event is a no-op here (the null observer). ``side`` names one
    of several interleaved things measured at once (A/B "base"/"head", a sweep's
    configuration); "" when only one thing is measured."""

    def started(self, name: str) -> None:
        """A benchmark (or a study's trial, a sweep) begins."""

    def warmup_started(self, side: str = "") -> None:
        """Warm-up windows run until the stability rule holds."""

    def warmup_ended(self, steady: bool, seconds: float, side: str = "") -> None:
        """Warm-up is over: ``steady`` says whether the stability rule held."""

    def window_done(self, k: int, total: int, steps_per_s: float, side: str = "") -> None:
        """Measured window (or interleaved turn) ``k`` of ``total`` ran at ``steps_per_s``."""

    def window_redone(self, k: int, total: int, other_load: float) -> None:
        """Window ``k`` saw ``other_load`` busy cores outside the workload: measured again."""

    def window_spoiled(self, k: int, total: int, reason: str) -> None:
        """The GPU guard spoiled window ``k`` (``reason``: its words, e.g. "GPU 0 throttled:
        thermal"): measured again. A window slowed by the GPU looks like a hang or a
        regression on the status line unless it says why."""

    def pair_started(self, k: int, why: str) -> None:
        """A/B: fresh pair ``k`` of side processes starts, ``why`` in a few words ("to
        confirm 0.887 (REGRESSION)")."""

    def finished(self, name: str, summary: str) -> None:
        """The benchmark is done; ``summary`` is its result in a few words (steps/s, verdict)."""


NULL_PROGRESS = Progress()


class StatusLine(Protocol):
    """Where :class:`LiveProgress` writes: a transient status, and a final line.
    ``live``: a terminal, where the status can be rewritten in place."""

    @property
    def live(self) -> bool: ...

    def show(self, text: str) -> None:
        """Replace the transient status line with ``text`` (terminals only)."""

    def done(self, text: str) -> None:
        """Replace the status line with ``text`` for good (one line per benchmark)."""


def verdict_summary(steps_per_s: float, verdict: Verdict | None,
                    unit: str = "env-steps/s") -> str:
    """A benchmark's final progress words: its median-window rate (in its unit, env-steps
    read as steps/s), and its verdict if any."""
    text = f"{figure(steps_per_s)} {'steps/s' if unit == 'env-steps/s' else unit}"
    if verdict is None:
        return text
    text += f", {verdict.outcome.value}"
    return text if verdict.ratio is None else f"{text}, ratio {verdict.ratio:.3f}"


class LiveProgress(Progress):
    """Renders events as ``perfgate: <name>: <what is happening>``.

    On a live status line (a terminal) every event rewrites the status; otherwise only
    :meth:`finished` writes, one line per benchmark. Times come from ``clock``, so tests
    drive it with a fake one.
    """

    def __init__(self, out: StatusLine, clock: Clock = SYSTEM_CLOCK,
                 prefix: str = "perfgate") -> None:
        self.out = out
        self.prefix = prefix
        self._clock = clock
        self._name = ""
        self._t0 = 0
        self._rates: dict[str, float] = {}

    def _elapsed(self) -> float:
        return (self._clock.wall_ns() - self._t0) / 1e9

    def _show(self, what: str) -> None:
        if self.out.live:
            self.out.show(f"{self.prefix}: {self._name}: {what} ({self._elapsed():.1f} s)")

    def started(self, name: str) -> None:
        self._name, self._t0, self._rates = name, self._clock.wall_ns(), {}
        self._show("starting")

    def warmup_started(self, side: str = "") -> None:
        self._show(f"{side + ' ' if side else ''}warm-up")

    def warmup_ended(self, steady: bool, seconds: float, side: str = "") -> None:
        how = "steady" if steady else "NOT steady"
        self._show(f"{side + ' ' if side else ''}warm-up done in {seconds:.1f} s, {how}")

    def window_done(self, k: int, total: int, steps_per_s: float, side: str = "") -> None:
        if not side:
            self._show(f"window {k}/{total} {figure(steps_per_s)} steps/s")
            return
        self._rates[side] = steps_per_s
        ab = set(self._rates) <= {"base", "head"}
        shown = self._rates.items() if ab else [(side, steps_per_s)]
        now = " ".join(f"{s} {figure(r)}" for s, r in shown)  # A/B: both; a sweep: the latest
        self._show(f"turn {k}/{total} {now} steps/s")

    def window_redone(self, k: int, total: int, other_load: float) -> None:
        self._show(f"window {k}/{total} again: {other_load:.1f} cores of other load")

    def window_spoiled(self, k: int, total: int, reason: str) -> None:
        self._show(f"window {k}/{total} again: {reason}")

    def pair_started(self, k: int, why: str) -> None:
        self._show(f"pair {k} of side processes, {why}")

    def finished(self, name: str, summary: str) -> None:
        self.out.done(f"{self.prefix}: {name}: {summary} ({self._elapsed():.1f} s)")


class StreamStatus:
    """A :class:`StatusLine` on a text stream (the command line's stderr).

    On a terminal the status is rewritten with a carriage return and blanked to the length
    it had; the final line ends with a newline, so whatever prints next starts clean."""

    def __init__(self, stream: TextIO, tty: bool | None = None) -> None:
        self.stream = stream
        self.live = _isatty(stream) if tty is None else tty
        self._width = 0  # length of the status on screen, 0: none

    def show(self, text: str) -> None:
        import shutil

        width = shutil.get_terminal_size().columns - 1  # a wrapped status cannot be rewound
        text = (text if len(text) <= width else text[:max(width - 3, 0)] + "...")
        text = text.ljust(self._width)
        self.stream.write("\r" + text)
        self.stream.flush()
        self._width = len(text)  # what is on screen now, padding included

    def done(self, text: str) -> None:
        lead = "\r" if self._width else ""
        self.stream.write(lead + text.ljust(self._width) + "\n")
        self.stream.flush()
        self._width = 0


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False


def stream_progress(stream: TextIO, prefix: str = "perfgate",
                    clock: Clock = SYSTEM_CLOCK) -> LiveProgress:
    """Progress for a command: live on a terminal, one line per benchmark in a log."""
    return LiveProgress(StreamStatus(stream), clock, prefix)

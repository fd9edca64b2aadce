"""A perf test run by its two sides alone: the A/B controller never sets it up.

The controller does not call the step, so building a perf test's fixtures there (a
``SubprocVecEnv`` of workers, a MuJoCo pool) only costs processes and memory beside the two
sides that measure. For a test it runs this way the controller sets up none of the test's
fixtures and runs none of its body: the head side runs the test, announces each
``measure()`` call (name, transitions, the call's threshold, unit and metadata: side.py),
the base side must reach the same call, and the controller judges the pair as it does a
call of a body it runs (:meth:`ABController.measure_announced`). How the test itself ended
is the head side's: its exit status and, for a skip, pytest's reason (docs/ab.md).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.modes.ab.controller import ABController
from pytest_perfgate.modes.ab.remote import SideError
from pytest_perfgate.modes.mode import BenchCall


@dataclass(frozen=True)
class Announced:
    """A ``measure()`` call the head side's test reached."""

    name: str
    transitions: int
    threshold: float | None = None  # the threshold the call was given, None: the test's
    unit: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, msg: tuple[Any, ...]) -> Announced:
        meta = msg[3] if len(msg) > 3 and isinstance(msg[3], dict) else {}
        return cls(str(msg[1]), int(msg[2]), meta.get("threshold"), meta.get("unit"),
                   dict(meta.get("extra") or {}))


@dataclass(frozen=True)
class HeadEnd:
    """How the head side's run of the test ended: its exit status and output."""

    code: int | None
    command: str
    tail: str
    skip_reason: str | None = None  # the test skipped there: pytest's reason

    @property
    def failed(self) -> str | None:
        """Why the test failed in the head side (its own failure, never a verdict), or None
        when it passed or skipped. Exit 1: the test failed; any other status: the side's
        pytest crashed, was killed or refused its arguments."""
        if self.code == 0:
            return None
        if self.code == 1:
            return (f"the test failed in the head side ({self.command}), which runs it for "
                    f"the A/B controller. Its output ends with:\n{self.tail}")
        how = ("still running" if self.code is None else f"exit code {self.code}"
               if self.code >= 0 else f"killed by {signal.Signals(-self.code).name}")
        return (f"the head side ({self.command}) ended abnormally [{how}]. Its output ends "
                f"with:\n{self.tail}")


Measure = Callable[[Announced, Callable[[BenchCall], Judged]], Judged]


def run_test(controller: ABController, test_id: str, test_file: tuple[str, str] | None,
             measure: Measure) -> HeadEnd:
    """Run ``test_id`` in both sides: each call the head announces goes to ``measure(call,
    judge)`` (which builds its BenchCall and calls ``judge``); then the sides end and the
    head's exit says how the test ended. Nothing is left running, whatever raises."""
    pair = controller.pair_for(test_id, test_file)
    try:
        while (msg := pair.head.announced()) is not None:
            measure(Announced.of(msg), lambda call: controller.measure_announced(pair, call))
        head = pair.head
        code = head.close()
        if code is None:
            raise SideError(f"head side ({head.command}) did not end after its test: "
                            f"killed. Its output ends with:\n{head.output_tail()}")
        skipped = head.skip_reason() if code == 0 and head.skipped() else None
        return HeadEnd(code, head.command, head.output_tail(), skipped)
    finally:
        controller.end_test(test_id)

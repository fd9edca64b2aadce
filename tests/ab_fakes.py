"""A/B controller fakes: scripted pair measurements, fresh pairs that log, a live status
line that logs what it shows (no processes, no timing). Shared by the fresh-pair and the
spread-between-pairs tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pytest_perfgate.core.gate import Rule, Verdict
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.measure import Measurement
from pytest_perfgate.core.progress import LiveProgress
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import Window
from pytest_perfgate.modes.ab.controller import ABController, ABSetup
from pytest_perfgate.modes.ab.remote import SideError, SideSpec
from pytest_perfgate.modes.mode import BenchCall


class FakeLooks:
    def __init__(self, turns: int) -> None:
        self.turns = turns

    def summary(self) -> dict[str, object]:
        return {"turns": self.turns}


@dataclasses.dataclass
class FakeRun:
    base: Measurement
    head: Measurement
    looks: FakeLooks


def measurement(s_per_step: float) -> Measurement:
    w = Window(8, 8 * s_per_step, 8 * s_per_step)
    return Measurement((w, w, w), True, 0.0, 0)


class FakeSide:
    def __init__(self) -> None:
        self.proc = type("P", (), {"pid": 1})()


class FakeSource:
    """A side's source: what its process records (nothing here)."""

    def recorded(self) -> dict[str, object]:
        return {}


class FakePair:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name
        self.base, self.head = FakeSide(), FakeSide()

    def close(self) -> None:
        self.log.append(f"close {self.name}")

    def done(self) -> None:
        self.log.append(f"done {self.name}")


class Shown:
    """A live status line that logs what the progress shows."""

    live = True

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def show(self, text: str) -> None:
        self.log.append(text)

    def done(self, text: str) -> None:
        self.log.append(text)


def controller(script: list[tuple[float, Verdict] | BaseException], confirm_on: bool = True,
               fresh_fails: bool = False) -> tuple[ABController, list[str], list[Judged]]:
    spec = SideSpec("base", Path("."))
    sink: list[Judged] = []
    log: list[str] = []
    shown = Shown(log)
    meter = SimpleNamespace(progress=LiveProgress(shown, FakeClock()))
    ctl = ABController(ABSetup(spec, spec, "c" * 40, "main", "."), lambda: meter,  # type: ignore[arg-type, return-value]
                       sink.append, 96, 0.1, 4, confirm=confirm_on)
    pairs = iter(range(2, 9))

    def measure(base: Any, head: Any, call: BenchCall, metric: Any) -> Any:
        step = script.pop(0)
        if isinstance(step, BaseException):
            raise step
        ratio, verdict = step
        log.append(f"measure {verdict.outcome.value}")
        return FakeRun(measurement(0.001), measurement(0.001 / ratio), FakeLooks(24)), verdict

    def fresh(call: BenchCall, earlier: list[str], into: list[Any]) -> Any:
        if fresh_fails:
            raise SideError("base side closed its connection while we waited for its "
                            "measure() call [exit code 1]. Its output ends with:\nE  boom")
        name = f"pair{next(pairs)}"
        log.append(f"start {name}")
        into.append(FakePair(log, name))
        return FakeSource(), FakeSource()

    ctl._measure = measure  # type: ignore[method-assign]
    ctl._fresh_pair = fresh  # type: ignore[method-assign]
    return ctl, log, sink


CALL = BenchCall("test_walk", "t.py::test_walk", 8, Rule(threshold=0.05))


def judge(ctl: ABController, log: list[str]) -> Judged:
    return ctl._judge(FakePair(log, "pair1"), FakeSource(), FakeSource(),  # type: ignore[arg-type]
                      CALL)

"""pytest-perfgate: gate CI on steady-state env-steps/s, with asv history.

Importing the package loads nothing else: each name below is imported on first access
(PEP 562), so the pytest entry point (:mod:`pytest_perfgate.plugin.hooks`) stays cheap for
every pytest run that does not measure (docs/measurement.md). ``pytest_perfgate.phase`` is
the stable path for library code that attributes time to a phase (docs/fixtures.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_perfgate.core.gate import Outcome, Rule, Verdict, decide, evaluate
    from pytest_perfgate.core.judged import Judged
    from pytest_perfgate.core.loop import LoopSource
    from pytest_perfgate.core.measure import MeasureConfig, Measurement, Meter
    from pytest_perfgate.core.timing import PhaseRecorder, phase
    from pytest_perfgate.core.window import RawWindow, WindowSource
    from pytest_perfgate.session.gating import GateSession
    from pytest_perfgate.session.options import Options
    from pytest_perfgate.session.perfgate import PerfGate

_HOME = {
    "Outcome": "core.gate", "Rule": "core.gate", "Verdict": "core.gate",
    "decide": "core.gate", "evaluate": "core.gate",
    "Judged": "core.judged",
    "LoopSource": "core.loop", "MeasureConfig": "core.measure",
    "Measurement": "core.measure", "Meter": "core.measure", "RawWindow": "core.window",
    "WindowSource": "core.window",
    "PhaseRecorder": "core.timing", "phase": "core.timing",
    "Options": "session.options",
    "GateSession": "session.gating", "PerfGate": "session.perfgate",
}

__all__ = [
    "GateSession",
    "Judged",
    "LoopSource",
    "MeasureConfig",
    "Measurement",
    "Meter",
    "Options",
    "Outcome",
    "PerfGate",
    "PhaseRecorder",
    "RawWindow",
    "Rule",
    "Verdict",
    "WindowSource",
    "decide",
    "evaluate",
    "phase",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_perfgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pytest_perfgate.{home}"), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])

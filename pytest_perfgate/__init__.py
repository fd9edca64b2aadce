"""pytest-perfgate: gate CI on steady-state env-steps/s, with asv history.

The light core is importable without pytest; heavy extras (mujoco, torch, numpy) load only
in the modules and fixtures that need them.
"""

from pytest_perfgate.core.gate import Outcome, Rule, Verdict, decide, evaluate
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.measure import (
                                          LoopSource,
                                          MeasureConfig,
                                          Measurement,
                                          Meter,
                                          RawWindow,
                                          WindowSource,
)
from pytest_perfgate.core.timing import PhaseRecorder, phase
from pytest_perfgate.session.options import Options
from pytest_perfgate.session.session import GateSession, PerfGate

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

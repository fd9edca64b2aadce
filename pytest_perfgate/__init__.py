"""pytest-perfgate: gate CI on steady-state env-steps/s, with asv history.

The light core is importable without pytest; heavy extras (mujoco, torch, numpy) load only
in the modules and fixtures that need them.
"""

from .gate import Outcome, Rule, Verdict, decide, evaluate
from .measure import LoopSource, MeasureConfig, Measurement, Meter, RawWindow, WindowSource
from .options import Options
from .session import GateSession, PerfGate
from .timing import PhaseRecorder, phase

__all__ = ["Outcome", "Rule", "Verdict", "decide", "evaluate", "LoopSource", "MeasureConfig",
           "Measurement", "Meter", "RawWindow", "WindowSource", "Options", "GateSession",
           "PerfGate", "PhaseRecorder", "phase"]
__version__ = "0.1.0"

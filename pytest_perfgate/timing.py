"""The stable import path for library code: ``from pytest_perfgate.timing import phase``.

``phase("name")`` attributes a block's time to a phase of the measurement in progress and
costs nothing outside one; the implementation lives in :mod:`pytest_perfgate.core.timing`.
"""

from pytest_perfgate.core.timing import PhaseRecorder, PhaseStats, phase

__all__ = ["PhaseRecorder", "PhaseStats", "phase"]

"""Collector/learner pairs over a shared-memory transition ring (docs/design.md §9).

``from pytest_perfgate.ring import Ring, RingSpec`` is the ring's public path, whichever
module holds it; the names load on first use (numpy stays unimported until then).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_perfgate.ring.layout import RingSpec
    from pytest_perfgate.ring.shm_ring import Ring

_HOME = {"Ring": "shm_ring", "RingSpec": "layout"}
__all__ = ["Ring", "RingSpec"]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_perfgate.ring' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pytest_perfgate.ring.{home}"), name)
    globals()[name] = value
    return value

"""A perf test's :class:`PerfGate`, built in one place: the ``perfgate`` fixture,
pytest-benchmark's ``benchmark`` under ``--perfgate`` and a test the A/B controller leaves
to its sides all start one here and close it when the test ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.plugin import markers
from pytest_perfgate.plugin.locate import default_name, note_location, test_file
from pytest_perfgate.session.gating import GateSession
from pytest_perfgate.session.perfgate import PerfGate

JUDGED = pytest.StashKey[list[Judged]]()  # a test's verdicts, for its report


@contextmanager
def open_gate(item: pytest.Item, session: GateSession, name: str | None = None
              ) -> Iterator[PerfGate]:
    """The PerfGate of ``item``, closed (its A/B sides ended) when the block ends: its
    benchmarks named after the test (or ``name``), its marker's threshold, counts, memory
    threshold and unit, its location noted for CI, its verdicts stashed for its report.
    Skips the test when it wants instruction counts this machine cannot take: never a
    silent pass without them (docs/design.md §10)."""
    asked = markers.settings(item)
    gate = PerfGate(session, item.nodeid, name or default_name(item, session), asked.threshold,
                    asked.counts, memory_threshold=asked.memory_threshold, unit=asked.unit,
                    test_file=test_file(item))
    note_location(item, session)
    why = session.counts_unavailable(gate.counts)
    if why:
        pytest.skip(f"perfgate: {why}")
    item.stash[JUDGED] = gate.results
    try:
        yield gate
    finally:
        gate.close()

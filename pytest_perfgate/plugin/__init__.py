"""pytest at the edge: the entry point, the fixtures, the marker and the hooks of a run that
measures; the one package that imports pytest.

The specs of the hooks pytest-perfgate calls live here, in the package every plugin module
already loads, so registering them costs a pytest run no module of its own
(docs/measurement.md); registered by :func:`pytest_perfgate.plugin.hooks.pytest_addhooks`,
like pytest-benchmark's hookspec.
Implement them in a ``conftest.py`` (or a plugin) under the same name (docs/fixtures.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_perfgate.core.judged import Judged


class PerfgateWarning(pytest.PytestWarning):
    """A verdict that passes but needs a look (INCONCLUSIVE, NO BASELINE): shown by ``-rw``
    and in the warnings summary, attributed to the test. Filter it like any warning:
    ``-W ignore::pytest_perfgate.plugin.hooks.PerfgateWarning`` (the hooks module, where
    pytest finds the plugin, re-exports it)."""


def pytest_perfgate_machine_info(config: pytest.Config, info: dict[str, Any]) -> None:
    """Add or change machine metadata before it is fingerprinted and recorded.

    Called once per session, when the history is first opened (the first verdict of a
    ``--perfgate`` run, or the record at its end). ``info`` is the dict
    :func:`pytest_perfgate.history.machine_id.collect_metadata` returned; change it in place.
    Only the fingerprint fields (machine, cpu_model, cpu_logical, affinity,
    cgroup_cpu_quota, numa_nodes, python, and the mujoco, numpy and torch versions in
    ``info["versions"]``) decide which runs are compared; other keys are recorded only.
    """


def pytest_perfgate_verdict(config: pytest.Config, judged: Judged) -> None:
    """Called once for every benchmark the session judges, as soon as it is judged.

    ``judged.name`` is the benchmark it is about, ``judged.result`` the measurement
    recorded, ``judged.verdict`` the verdict (None in smoke mode) and ``judged.rule`` its
    threshold and policies; a memory verdict (``<name>.rss``, ``<name>.gpu_mem``) is about
    its benchmark's measurement and holds the figure it judged in ``judged.memory``. In the
    A/B mode it is called in the controlling process only. Use it to post results
    elsewhere.
    """

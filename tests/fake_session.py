"""The conftest that test projects get for plugin runs on a fake clock: deterministic
timings, and no outside-load guard (a shared test machine would trip it). Tests append
their own hooks to it."""

FAKE_CLOCK_CONFTEST = """
import os
import pytest
from pytest_perfgate.core.load import NullProbe
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.plugin.hooks import gate_session

CLOCK = FakeClock()

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    s = gate_session(config)
    s.clock = CLOCK
    s.load_probe = NullProbe()
    fake_configure(config)

def fake_configure(config):  # a test's conftest may redefine this
    pass
"""

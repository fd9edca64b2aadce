"""`perfgate calibrate` beside its CPU hogs, stopped as a user or a CI job stops it: nothing
it started outlives it (real processes: the sides, the hogs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

STEP = """
import time
def test_walk(perfgate):
    perfgate.measure(lambda: time.sleep(0.002), transitions=8)
"""
HOG_MARK = "PR_SET_PDEATHSIG"  # in the hog's own source, on its command line


def _started_by(root: Path, leader: int) -> list[psutil.Process]:
    """Every live process of this study: a side (its working folder is the scratch
    project) or a hog (its first argument is the study's pid)."""
    found = []
    for p in psutil.process_iter(["cmdline", "cwd", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == leader:
                continue
            if (p.info["cwd"] == str(root) and "pytest" in " ".join(cmd)) or (
                    any(HOG_MARK in c for c in cmd) and str(leader) in cmd):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _as_from_a_terminal() -> None:
    """Ctrl-C's SIGINT as a terminal delivers it: a runner started in the background (a
    non-interactive shell's ``&``, nohup) passes SIGINT on ignored, and Python keeps it so."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize(("how", "load"), [("SIGTERM", "both"), ("Ctrl-C", "one")])
def test_a_stopped_study_leaves_no_side_and_no_hog(tmp_path: Path, load: str, how: str
                                                    ) -> None:
    (tmp_path / "test_perf.py").write_text(STEP)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_perfgate.cli", "calibrate", "test_perf.py::test_walk",
         "--cwd", str(tmp_path), "--load", load, "--aa-trials", "20", "--trials", "0",
         "--turns", "8", "--turn-time", "0.05", "--no-history"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # a terminal's Ctrl-C reaches its whole foreground group
        preexec_fn=_as_from_a_terminal)
    try:
        deadline = time.monotonic() + 120
        hogs: list[psutil.Process] = []
        while time.monotonic() < deadline and proc.poll() is None:
            every = _started_by(tmp_path, proc.pid)
            hogs = [p for p in every if any(HOG_MARK in c for c in p.info["cmdline"])]
            if len(hogs) == (1 if load == "one" else 2) and len(every) > len(hogs):
                break
            time.sleep(0.2)
        assert proc.poll() is None and hogs, proc.communicate()
        time.sleep(1.0)  # into the study's trials
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "perfgate calibrate: interrupted; no trial was kept" in err, err
    assert "Traceback" not in err, err
    deadline = time.monotonic() + 10
    while _started_by(tmp_path, proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [(p.pid, p.info["cmdline"][:3]) for p in _started_by(tmp_path, proc.pid)]
    assert not left, left

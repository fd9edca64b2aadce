"""py-spy attached to a running process for one turn: start, wait until it samples, stop.

py-spy samples another process (and, with ``--subprocesses``, every process it starts:
spawn workers, vector-env subprocesses, the ring's collectors) from outside, Python and
native frames alike, without changing its code; so the same sampler serves an A/B side, a
worker group and a history run. Its output here is its raw (collapsed-stack) format, read
by :mod:`.stacks`. A sampler that cannot run (not installed, no ptrace permission) raises
:class:`ProfilerUnavailable` with py-spy's own words, which callers turn into one warning.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_perfgate.core import group

READY_TIMEOUT_S = 30.0  # attaching reads the target's symbols (native: every library)
STOP_TIMEOUT_S = 30.0  # after SIGINT py-spy writes its file and exits
READY = "Sampling process"  # what py-spy prints once it samples
INSTALL = "pip install py-spy (or pytest-perfgate[profile])"
ENV = "PERFGATE_PY_SPY"  # the py-spy to run; set but empty: profiling is unavailable


class ProfilerUnavailable(RuntimeError):
    """The sampler cannot run here; the message says why and what would fix it."""


@dataclass(frozen=True)
class SpyConfig:
    """How to sample: ``rate`` per second; ``native``: C/C++ frames too (slower to sample,
    but a MuJoCo step or a numpy kernel is named, not only the Python line that called it)."""

    rate: int = 100
    native: bool = True


def py_spy() -> str | None:
    """The py-spy executable: PERFGATE_PY_SPY when set (a path; empty: none), else next to
    this interpreter (a venv's bin), else on PATH."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return chosen if chosen and os.access(chosen, os.X_OK) else None
    beside = Path(sys.executable).with_name("py-spy")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


class Recording:
    """py-spy recording ``pid`` (and its subprocesses) into ``out`` until :meth:`stop`."""

    def __init__(self, pid: int, out: Path, config: SpyConfig = SpyConfig()) -> None:
        exe = py_spy()
        if exe is None:
            chosen = os.environ.get(ENV)
            raise ProfilerUnavailable(
                f"py-spy is not installed: {INSTALL}" if chosen is None else
                f"{ENV}={chosen!r} is not an executable py-spy: set it to one, or unset it")
        self.out = out
        args = [exe, "record", "--pid", str(pid), "--format", "raw", "--function",
                "--full-filenames", "--subprocesses", "--rate", str(config.rate),
                "--output", str(out)]
        if config.native:
            args.append("--native")
        out.unlink(missing_ok=True)
        self.proc = group.popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)  # ends with perfgate, even killed
        said = self._until_ready()
        if said is not None:
            self.kill()
            raise ProfilerUnavailable(_why(said))

    def _until_ready(self) -> str | None:
        """None once py-spy samples; else what it said before it exited or timed out."""
        assert self.proc.stdout is not None
        said: list[str] = []
        deadline = time.monotonic() + READY_TIMEOUT_S
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            buf = b""
            while time.monotonic() < deadline:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    break
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    self.proc.wait(5.0)
                    return "".join(said) + buf.decode(errors="replace") or \
                        f"py-spy exited with code {self.proc.returncode} and said nothing"
                buf += chunk
                *lines, rest = buf.split(b"\n")
                buf = rest
                for line in lines:
                    text = line.decode(errors="replace")
                    if READY in text:
                        return None
                    said.append(text + "\n")
        return "".join(said) + f"(py-spy did not start sampling within {READY_TIMEOUT_S:g} s)"

    def stop(self) -> str:
        """End the recording; the raw collapsed stacks it wrote ("" when none)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
        try:
            return self.out.read_text(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """End py-spy at once (bounded); nothing is read."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            self.proc.communicate(timeout=10.0)


def _why(said: str) -> str:
    """py-spy's reason, with the fix for the usual one (ptrace refused)."""
    text = " ".join(said.split())[-400:] or "py-spy could not attach"
    if "ermission" in text or "ptrace" in text.lower() or "Operation not permitted" in text:
        return (f"py-spy may not attach to the measured process ({text}): run as root, give "
                "the container SYS_PTRACE, or set kernel.yama.ptrace_scope to 0")
    return f"py-spy could not sample the measured process: {text}"

"""The sandbox the pull-request job runs the pull request's code in (pytest_perfgate/cli/
_sandbox.py, docs/ci.md): real processes, each escape tried bare (where it works) and in the
sandbox (where the kernel stops it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import need_tool
from workflow_sim import HIDDEN_BY_TMP

from pytest_perfgate.cli import _sandbox

SANDBOX = Path(_sandbox.__file__)

# A process that outlives the command that started it, twice over: a double fork (its parent
# gone, it is nobody's child) whose main thread then exits while another thread runs (a
# zombie leader: `State: Z`, which a cleanup that lists processes skips). The command itself
# returns once its escapee runs (and, for the zombie leader, is one).
WAIT = """import os, sys, time
beat, pidfile, zombie = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def started():
    try:
        with open(f"/proc/{int(open(pidfile).read())}/status") as f:
            state = next(x.split()[1] for x in f if x.startswith("State:"))
    except (OSError, ValueError):
        return False
    return os.path.getsize(beat) > 0 and (state == "Z" or not zombie)
if os.fork():
    while not started():
        time.sleep(0.01)
    os._exit(0)
"""

ZOMBIE_LEADER = WAIT + """import ctypes, threading
os.setsid()
if os.fork():
    os._exit(0)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):  # the command's pipes closed, as a daemon's are
    os.dup2(null, fd)
with open(pidfile, "w") as f:
    f.write(str(os.getpid()))
def loop():
    fd = os.open(beat, os.O_WRONLY, 0o644)
    while True:
        os.pwrite(fd, b"%020d" % time.monotonic_ns(), 0)
        time.sleep(0.01)
threading.Thread(target=loop).start()
time.sleep(0.2)
ctypes.CDLL(None).pthread_exit(None)
"""

# a plain double fork: a sleeping grandchild that beats
DOUBLE_FORK = WAIT + """
os.setsid()
if os.fork():
    os._exit(0)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):  # the command's pipes closed, as a daemon's are
    os.dup2(null, fd)
with open(pidfile, "w") as f:
    f.write(str(os.getpid()))
fd = os.open(beat, os.O_WRONLY, 0o644)
while True:
    os.pwrite(fd, b"%020d" % time.monotonic_ns(), 0)
    time.sleep(0.01)
"""


@pytest.fixture(scope="module")
def can_sandbox() -> None:
    """bwrap, and a kernel that lets this user make the namespaces."""
    try:
        _sandbox.prepare(["true"], workspace="/", home="")
    except _sandbox.SandboxError as e:
        need_tool(f"needs the sandbox: {e}")


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Path]:
    """A workspace (the sandbox's only writable folder) and a HOME beside it."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".gitconfig").write_text("[core]\n")
    yield tmp_path


def _run(place: Path, argv: list[str], sandboxed: bool,
         rw: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`argv` in the workspace, in the sandbox (the way the workflow starts it: the base
    interpreter, -I -S, the script by its path) or bare."""
    if sandboxed:
        argv = [sys.executable, "-I", "-S", str(SANDBOX), *(f"--rw={p}" for p in rw),
                *(f"--ro={p}" for p in HIDDEN_BY_TMP), "--", *argv]
    return subprocess.run(argv, cwd=place / "ws", capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HOME": str(place / "home")})


def _beating(beat: Path, within_s: float = 1.0) -> bool:
    """Whether the beat file changes within `within_s`."""
    first = beat.read_bytes() if beat.exists() else b""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if beat.exists() and beat.read_bytes() != first:
            return True
    return False


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        return next(x.split()[1] for x in f if x.startswith("State:"))


@pytest.mark.parametrize("script", ["zombie leader", "double fork"])
@pytest.mark.parametrize("sandboxed", [False, True], ids=["bare", "sandbox"])
def test_what_the_command_started_ends_with_the_sandbox(can_sandbox: None, place: Path,
                                                        script: str, sandboxed: bool) -> None:
    code = ZOMBIE_LEADER if script == "zombie leader" else DOUBLE_FORK
    (place / "ws" / "escape.py").write_text(code)
    beat, pidfile = place / "ws" / "beat", place / "ws" / "pid"
    beat.write_text("")
    zombie = "1" if script == "zombie leader" else "0"
    done = _run(place, [sys.executable, "escape.py", str(beat), str(pidfile), zombie],
                sandboxed)
    assert done.returncode == 0, done.stderr
    pid = int(pidfile.read_text())  # in the sandbox's PID namespace, when sandboxed
    if not sandboxed:  # live: it outlived the command, a zombie leader still beating
        try:
            assert _beating(beat)
            if script == "zombie leader":
                assert _state(pid) == "Z" and _beating(beat)
        finally:
            os.kill(pid, signal.SIGKILL)
    else:
        time.sleep(0.2)  # the namespace's end is the kernel's: done when bwrap returned
        assert not _beating(beat)


@pytest.mark.parametrize("sandboxed", [False, True], ids=["bare", "sandbox"])
def test_dev_shm_and_tmp_are_the_sandboxs_own(can_sandbox: None, place: Path,
                                               sandboxed: bool) -> None:
    name = f"perfgate-sandbox-test-{uuid.uuid4().hex}"
    shm, tmp = Path("/dev/shm") / name, Path("/tmp") / name
    try:
        done = _run(place, ["sh", "-c", f"mkdir {shm} && echo x > {shm}/seg && "
                            f"echo y > {tmp} && cat {shm}/seg {tmp}"], sandboxed)
        assert done.returncode == 0 and done.stdout == "x\ny\n", done.stderr
        assert shm.exists() is not sandboxed and tmp.exists() is not sandboxed
    finally:
        subprocess.run(["rm", "-rf", str(shm), str(tmp)], check=True)


@pytest.fixture
def var_tmp() -> Iterator[Path]:
    """A folder outside /tmp (which is the sandbox's own), as the runner's folder is."""
    where = Path(tempfile.mkdtemp(prefix="perfgate-sandbox-", dir="/var/tmp"))
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.mark.parametrize("sandboxed", [False, True], ids=["bare", "sandbox"])
def test_only_the_workspace_and_the_rw_paths_are_writable(can_sandbox: None, place: Path,
                                                           var_tmp: Path,
                                                           sandboxed: bool) -> None:
    (place / "out").mkdir()
    outside = var_tmp / "planted.py"
    done = _run(place, ["sh", "-c", f"echo a > mine && echo b > {place}/out/report && "
                        f"echo c > {outside}"], sandboxed, rw=(place / "out",))
    assert (place / "ws" / "mine").read_text() == "a\n"
    assert (place / "out" / "report").read_text() == "b\n"
    if sandboxed:
        assert done.returncode != 0 and "Read-only file system" in done.stderr, done.stderr
        assert not outside.exists()
    else:
        assert done.returncode == 0 and outside.read_text() == "c\n"


def test_home_is_fresh_and_empty(can_sandbox: None, place: Path) -> None:
    done = _run(place, ["sh", "-c", 'echo "$HOME" && ls -A "$HOME" && touch "$HOME/left"'],
                True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{place / 'home'}\n"  # the runner's HOME, its files not there
    assert sorted(p.name for p in (place / "home").iterdir()) == [".gitconfig"]  # nothing left


PINNED = """import ctypes, os
from multiprocessing import shared_memory
cpu = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})
assert os.sched_getaffinity(0) == {cpu}
seg = shared_memory.SharedMemory(create=True, size=1 << 20)
seg.buf[:3] = b"abc"
other = shared_memory.SharedMemory(seg.name)  # opened again by name, as another process does
assert bytes(other.buf[:3]) == b"abc"
other.close(); seg.close(); seg.unlink()
if os.path.isdir("/sys/devices/system/node/node0"):  # NUMA: bind this process to node 0
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(1)
    MPOL_BIND, SYS_set_mempolicy = 2, 238  # x86_64
    if os.uname().machine == "x86_64":
        got = libc.syscall(SYS_set_mempolicy, MPOL_BIND, ctypes.byref(mask), 64)
        assert got == 0, os.strerror(ctypes.get_errno())
print("pinned, shared, bound")
"""


def test_pinning_numa_and_shared_memory_work_inside(can_sandbox: None, place: Path) -> None:
    (place / "ws" / "pinned.py").write_text(PINNED)
    done = _run(place, [sys.executable, "pinned.py"], True)
    assert done.returncode == 0 and done.stdout == "pinned, shared, bound\n", done.stderr


def test_the_exit_status_is_the_commands(can_sandbox: None, place: Path) -> None:
    assert _run(place, ["sh", "-c", "exit 7"], True).returncode == 7


def test_a_symlinked_workspace_is_refused(can_sandbox: None, place: Path) -> None:
    (place / "kept").mkdir()
    (place / "ws").rmdir()
    (place / "ws").symlink_to(place / "kept")
    done = subprocess.run([sys.executable, "-I", "-S", str(SANDBOX), "--workspace",
                           str(place / "ws"), "--", "true"], capture_output=True, text=True,
                          env={**os.environ, "HOME": str(place / "home"),
                               "GITHUB_ACTIONS": "true"})
    assert done.returncode == 3
    says = (f"the workspace {place / 'ws'} goes through the symbolic link {place / 'ws'} (to "
            f"{place / 'kept'}), which the runner's user could have made: give the real "
            "folder, or re-image the runner if a job left it")
    assert done.stderr == f"perfgate sandbox: {says}\n"
    assert done.stdout == f"::error title=perfgate sandbox::{says}\n"


def test_without_bwrap_the_message_names_the_fix(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(_sandbox.SandboxError) as info:
        _sandbox.prepare(["true"], workspace=str(tmp_path), home="")
    assert str(info.value) == ("bwrap (bubblewrap) is not installed: install it on the "
                               "runner (apt-get install bubblewrap, dnf install bubblewrap; "
                               "docs/ci.md)")


def test_the_command_line_keeps_gpus_and_binds_what_was_asked() -> None:
    argv = _sandbox.bwrap_argv(["pytest", "perf"], workspace="/w", writable=["/o"],
                               home="/h")
    assert argv[:10] == ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid",
                         "--unshare-ipc", "--cap-drop", "ALL", "--ro-bind", "/", "/"]
    tail = argv[argv.index("--bind"):]
    assert tail == ["--bind", "/w", "/w", "--bind", "/o", "/o", "--tmpfs", "/h", "--setenv",
                    "HOME", "/h", "--chdir", "/w", "--", "pytest", "perf"]
    for node in (p for p in ("/dev/nvidia0", "/dev/dri") if os.path.exists(p)):
        assert argv[argv.index(node) - 1] == "--dev-bind"


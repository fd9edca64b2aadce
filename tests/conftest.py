# numpy/scipy cannot be re-imported in one process; pytester's in-process runs drop modules
# first imported inside them, so import these once here.
import numpy  # noqa: F401
import scipy.stats  # noqa: F401

pytest_plugins = ["pytester"]


# --- external tools the tests need (node packages, browsers) --------------------------------
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# the shared helper modules' asserts explain their failures as a test module's do
pytest.register_assert_rewrite("helpers", "gpu_fakes", "ring_steps", "ring_fakes",
                               "workflow_sim", "fake_session")

from filelock import FileLock  # noqa: E402
from helpers import NODE_DIR, need_tool  # noqa: E402


@pytest.fixture
def need_valgrind() -> None:
    """The instruction-count tests: skip without valgrind, fail where CI installed it."""
    if shutil.which("valgrind") is None:
        need_tool("needs valgrind (apt-get install valgrind)")


@pytest.fixture(scope="session")
def py_spy_attaches(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The profile tests: py-spy installed (else skip, or fail under
    PERFGATE_REQUIRE_TOOLS=1: the dev extra installs it) and allowed to attach here (else
    skip naming why: ptrace permission is the machine's policy, not a missing tool)."""
    import subprocess
    import sys

    from pytest_perfgate.profile.spy import ProfilerUnavailable, Recording, SpyConfig, py_spy

    if py_spy() is None:
        need_tool("py-spy is not installed: pip install py-spy")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        Recording(child.pid, tmp_path_factory.mktemp("spy") / "probe.raw",
                  SpyConfig(native=False)).stop()
    except ProfilerUnavailable as e:
        pytest.skip(f"py-spy cannot sample here: {e}")
    finally:
        child.kill()
        child.wait(10)


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """The node_modules folder in tests/node, at the versions its package-lock.json pins.

    Installed with `npm ci` on first use (once per checkout, under a lock); skips naming the
    Debian packages when node or npm is missing.
    """
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        need_tool("node/npm not installed: apt-get install nodejs npm")
    modules = NODE_DIR / "node_modules"
    stamp = modules / ".package-lock.json"
    lock = NODE_DIR / "package-lock.json"
    with FileLock(str(NODE_DIR / ".install.lock")):
        if not stamp.exists() or stamp.stat().st_mtime < lock.stat().st_mtime:
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(NODE_DIR)],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                need_tool(f"npm ci in {NODE_DIR} failed (exit {done.returncode}): "
                          f"{done.stderr.strip()[-500:]}")
    return modules


@pytest.fixture(scope="session", autouse=True)
def _settled_cache(tmp_path_factory: pytest.TempPathFactory):
    """Settled states the tests compute are cached in a temp folder, never in the user's
    ~/.cache (spawned pytest runs and counting workers inherit the variable)."""
    from pytest_perfgate.sim.settled import CACHE_ENV

    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("settled-cache"))
    yield
    if saved is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = saved


@pytest.fixture(autouse=True)
def _cli_outside_this_repository(request: pytest.FixtureRequest,
                                 tmp_path_factory: pytest.TempPathFactory,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests of the `perfgate` command name commits by short ids ("1111"); run from this
    repository, one resolves against its own history the day a real commit starts with it.
    They run in an empty folder instead (a test may still chdir where it needs)."""
    from pytest_perfgate.cli import main

    if getattr(request.module, "main", None) is main:
        monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(autouse=True)
def _not_an_xdist_worker_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under run.sh's parallel phase this process is an xdist worker, and the pytest runs a
    test starts (in process or as subprocesses) would inherit PYTEST_XDIST_WORKER: there
    pytest-benchmark disables its benchmarks and warns. Each test's own runs see the
    environment of a plain pytest run, as they do in the timing phase."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def regressed(tmp_path: Path) -> Path:
    """A results dir of machine 'box' whose newest run is 2x slower than the five before it
    (REGRESSION): the history the `perfgate` command tests break in various ways. (Not
    named ``slow``: that is the marker of the long tests.)"""
    from helpers import BASE, record_runs

    results = tmp_path / "results"
    record_runs(results, [*BASE, ("6", 20.0)])
    return results


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Path, Path]:
    """The workflow tests' scratch project (tests/workflow_sim.py): (origin bare repo, a
    developer clone) holding the tiny suite at v0.1 and one commit."""
    from workflow_sim import make_scratch

    return make_scratch(tmp_path)


# --- the two phases of `bash run.sh test` -----------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phase", choices=("all", "parallel", "timing"), default="all",
        help="run.sh test runs the suite in two phases: 'parallel' (every test not marked "
             "timing, under pytest-xdist) then 'timing' (the tests marked timing, one at a "
             "time, alone on the machine). Default: all, in one process.")


# Tests that make rings compare listings of /dev/shm before and after, and a ring's start-up
# sweeps it: they run in the serial phase with the timing tests (pytest-xdist's xdist_group
# did not keep them on one worker here: xdist 3.8 with pytest 9.2 spread a group's tests).
SHM_MODULES = ("test_ring", "test_trust_ring_sweep", "test_gpu_ring", "test_gpu_placement")


def _serial(item: pytest.Item) -> bool:
    return item.get_closest_marker("timing") is not None or \
        item.path.stem.startswith(SHM_MODULES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = config.getoption("--phase")
    if phase == "all":
        return
    want_timing = phase == "timing"
    keep = [i for i in items if _serial(i) == want_timing]
    dropped = [i for i in items if _serial(i) != want_timing]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep

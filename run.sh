#!/usr/bin/env bash
# The two README commands. Each sets up .venv on first use (Python 3.11+), then:
#   bash run.sh perf [pytest args]   the shipped perf suite under `pytest --perfgate`
#   bash run.sh test [pytest args]   the test suite
# and, for CI and development:
#   bash run.sh lint                 import layers, ruff, mypy, zizmor (all run; fails if any fails)
set -euo pipefail
cd "$(dirname "$0")"
what="${1:-}"; shift || true
PY="${PERFGATE_PYTHON:-python3}"
VENV="${PERFGATE_VENV:-.venv}"
stamp="$VENV/.perfgate-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
   || [ pytest_perfgate/ring/_stream.c -nt "$stamp" ]; then
  "$PY" -c 'import sys; assert sys.version_info >= (3, 11), "pytest-perfgate needs Python >= 3.11"'
  "$PY" -m venv "$VENV"
  # torch==2.13.0 first: on this machine it resolves to the CPU wheel on disk (a bare
  # `torch` would pull a multi-GB CUDA build).
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[mujoco,torch,dev]'
  touch "$stamp"
fi
case "$what" in
  perf) exec "$VENV/bin/python" -m pytest --perfgate perf "$@" ;;
  test)
    set +e
    times="$(mktemp -d)"
    # Two phases (docs/testing.md): every other test two at a time under pytest-xdist, then
    # the `timing` tests and the ring tests that list /dev/shm (tests/conftest.py) one at a
    # time, alone on the machine: a timing test beside another is a flaky test.
    "$VENV/bin/python" -m pytest tests -n "${PERFGATE_TEST_WORKERS:-2}" \
      --phase=parallel --junitxml="$times/parallel.xml" "$@"
    rc1=$?
    "$VENV/bin/python" -m pytest tests --phase=timing --junitxml="$times/timing.xml" "$@"
    rc2=$?
    budget=()  # the budgets of docs/testing.md: the whole suite, and the edit loop
    [ "$#" -eq 0 ] && budget=(--budget-s 900)
    [ "$*" = "-m not slow" ] && budget=(--budget-s 180)
    "$VENV/bin/python" tools/test_times.py "$times"/parallel.xml "$times"/timing.xml "${budget[@]}"
    rm -rf "$times"
    # pytest exit 5 = "no tests collected": a phase may hold none of the selected tests.
    [ "$rc1" -eq 5 ] && rc1=0
    [ "$rc2" -eq 5 ] && rc2=0
    [ "$rc1" -ne 0 ] && exit "$rc1"
    exit "$rc2" ;;
  lint)
    rc=0
    # lint-imports: the layer contracts in pyproject.toml (docs/design.md §8)
    "$VENV/bin/lint-imports" || rc=1
    "$VENV/bin/ruff" check pytest_perfgate tests benchmarks perf tools || rc=1
    "$VENV/bin/mypy" || rc=1  # files and strictness: [tool.mypy] in pyproject.toml
    # every workflow and the Dependabot config: nothing of medium severity or more
    "$VENV/bin/zizmor" --offline --min-severity=medium -q .github || rc=1
    exit "$rc" ;;
  *) echo "usage: bash run.sh perf|test [pytest args] | lint" >&2; exit 2 ;;
esac

"""Finding one machine's history: the one lookup ``check``, ``compare``, ``report``,
``history``, ``accept`` and ``forget`` share, with one wording per condition.

Two kinds of answer, and the command line maps each to one exit status (docs/cli.md):
:class:`HistoryMissing` (no history to read: the folder is missing or a file, no machine has
runs, the machine named has none, a file cannot be read) is an infrastructure error, never a
pass; :class:`MachineAmbiguous` (several machines and none named) is a usage error, since
only the user can choose.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.history.files import Unreadable


class HistoryMissing(Exception):
    """There is no history to read where the user pointed; the message says why and the fix."""


class MachineAmbiguous(ValueError):
    """Several machines have runs and none was named; the message lists them."""


@dataclass(frozen=True)
class MachineRuns:
    """Every readable run of one machine (both modes), and the run files skipped."""

    results_dir: Path
    machine: str
    runs: tuple[RunRecord, ...]
    unreadable: tuple[Unreadable, ...] = ()


def check_results_dir(results_dir: Path) -> None:
    """Raise HistoryMissing unless ``results_dir`` is an existing folder."""
    if results_dir.exists() and not results_dir.is_dir():
        raise HistoryMissing(f"the history folder {results_dir} is a file: pass the results "
                             "folder (with one folder per machine) to --results-dir")
    if not results_dir.is_dir():
        raise HistoryMissing(f"no history at {results_dir}: record runs with `pytest "
                             "--perfgate` first, or pass --results-dir")


def find_machine(results_dir: Path, machine: str | None) -> str:
    """The machine whose history to read: ``machine`` if it has runs, else the only machine
    with runs. HistoryMissing / MachineAmbiguous say why not, and the fix."""
    from pytest_perfgate.history.store import no_machine_problem, recorded_machines

    check_results_dir(results_dir)
    try:
        machines = recorded_machines(results_dir)
    except OSError as e:
        raise HistoryMissing(f"cannot list the machines in {results_dir}: {e}") from None
    if machine is None:
        if not machines:
            raise HistoryMissing(no_machine_problem(results_dir))
        if len(machines) > 1:
            raise MachineAmbiguous(f"{results_dir} holds runs of several machines "
                                   f"({', '.join(machines)}): name one with --machine")
        return machines[0]
    if machine not in machines:
        raise HistoryMissing(
            f"no history of machine {machine!r} in {results_dir} (machines with runs: "
            f"{', '.join(machines) or 'none'}): record runs under that name first, or pass "
            "one of them to --machine")
    return machine


def machine_runs(results_dir: Path, machine: str | None) -> MachineRuns:
    """Read the machine's runs (a bad file is skipped with a HistoryWarning naming it)."""
    from pytest_perfgate.history.store import History

    found = find_machine(results_dir, machine)
    try:
        store = History(results_dir, found)
        runs = store.load_runs()
    except (OSError, ValueError) as e:
        raise HistoryMissing(f"cannot read the history of machine {found!r} in "
                             f"{results_dir}: {e}") from None
    return MachineRuns(results_dir, found, tuple(runs), tuple(store.unreadable))

"""One machine's run store: a full RunRecord sidecar per run, plus the asv view of them.

    <results dir>/<machine>/perfgate/<run_id>.pgrun    our full RunRecord (the source of truth)

Sidecars end in ``.pgrun`` because asv parses every ``*.json`` below a machine folder. Our
rows in the asv files (:mod:`pytest_perfgate.history.asv`) are a view derived from the
sidecars; the gate reads the sidecars plus, marked as reduced records, the rows `asv run`
itself wrote (:mod:`pytest_perfgate.history.asv_runs`; docs/design.md §6).

Every file read is checked against its schema: a bad sidecar is skipped, a bad asv file
rebuilt, each with one HistoryWarning naming it, and the run still records. The asv files
are read-modify-written under a lock (one per machine folder, one for benchmarks.json), so
sessions recording into one results dir at once lose nothing.

The names other layers have always imported from here (``atomic_write``,
``default_results_dir``, ``select_baseline``, ``describe_other_fingerprints``, the asv
helpers) stay importable from this module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import (
    atomic_write,
    load_json,
    locked,
    sweep_stale_temps,
)
from pytest_perfgate.core.names import safe_name
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.history.asv import (
    asv_entries,
    asv_name,
    merge_benchmarks_json,
    write_asv_result,
    write_machine_json,
)
from pytest_perfgate.history.asv_rebuild import mark_view, needs_rebuild, rebuild_asv_view
from pytest_perfgate.history.asv_runs import asv_recorded_runs
from pytest_perfgate.history.files import (
    Unreadable,
    describe,
    dump_json,
    unreadable_sidecar,
    warn_history,
)
from pytest_perfgate.history.machine_id import refingerprint

SIDECAR_DIR = "perfgate"
SIDECAR_SUFFIX = ".pgrun"
# Lock files: not *.json, so asv skips them; the kernel drops the lock when a holder dies.
MACHINE_LOCK = ".asv.lock"  # in SIDECAR_DIR: machine.json and the asv files of one machine
BENCHMARKS_LOCK = ".benchmarks.json.lock"  # the results dir's shared benchmarks.json


def validate_path_name(value: str, what: str = "machine name", example: str = "ci-runner-4core"
                       ) -> str:
    """Return ``value`` if it is safe as one folder/file name, else raise ValueError."""
    return safe_name(value, what, example)


class History:
    """One machine's history in one results dir (the gate's input, asv's view of it)."""

    def __init__(self, results_dir: str | os.PathLike[str], machine: str) -> None:
        self.results_dir = Path(results_dir)
        self.machine = validate_path_name(machine)
        self.machine_dir = self.results_dir / self.machine
        self.sidecar_dir = self.machine_dir / SIDECAR_DIR
        self.unreadable: list[Unreadable] = []  # run files the last load_runs skipped

    def record(self, run: RunRecord, benchmark_info: Mapping[str, Mapping[str, Any]]
               | None = None) -> Path:
        """Store ``run``; return its sidecar path.

        Every run keeps its own sidecar. asv holds one result file per commit, so a later
        run at the same commit replaces that commit's asv rows benchmark by benchmark; a
        dirty-tree run never replaces a clean run's numbers. Runs outside git (commit all
        zeros) get no asv result file: asv publish needs a real commit to place them.
        ``benchmark_info`` adds asv descriptions per benchmark ("code", "pretty_name",
        "version"...).
        """
        if run.machine != self.machine:
            raise ValueError(f"run {run.run_id!r} was measured on machine {run.machine!r} but "
                             f"this history is for {self.machine!r}: open History(results_dir, "
                             f"{run.machine!r}) instead")
        validate_path_name(run.run_id, "run id", "20240101T120000-ab12cd")
        check_asv_names(run)  # refuse NUL & co. before anything is written
        entries = asv_entries(run, dict(benchmark_info or {}))
        for folder in (self.results_dir, self.machine_dir, self.sidecar_dir):
            sweep_stale_temps(folder)
        sidecar = self.sidecar_dir / f"{run.run_id}{SIDECAR_SUFFIX}"
        atomic_write(sidecar, dump_json(run.to_json(), strict=False))  # first: the gate's input
        with locked(self.sidecar_dir / MACHINE_LOCK):
            write_machine_json(self.machine_dir, self.machine, run.metadata)
            runs = list(self._iter_runs(warn=False))  # ours included
            if needs_rebuild(self.machine_dir, self.sidecar_dir):  # an older series format
                rebuild_asv_view(self.machine_dir, self.sidecar_dir, self.machine, runs,
                                 entries)
            elif any(c != "0" for c in run.commit):  # rows of every sidecar at this commit
                write_asv_result(self.machine_dir, self.machine, run, runs, entries)
            mark_view(self.sidecar_dir)
        every: dict[str, dict[str, Any]] = {}  # `asv run` keeps only its suite's entries
        for r in runs:
            every.update(asv_entries(r, {}))
        with locked(self.results_dir / BENCHMARKS_LOCK):  # never nested: no lock order
            merge_benchmarks_json(self.results_dir, entries, fill=every)
        return sidecar

    def load_runs(self, asv_runs: bool = True) -> list[RunRecord]:
        """All runs recorded for this machine, oldest first: the sidecars, plus (unless
        ``asv_runs`` is False) the reduced records of runs `asv run` wrote into the asv
        files (:mod:`pytest_perfgate.history.asv_runs`). Unreadable files are skipped with
        one HistoryWarning each, naming the file, and listed in ``self.unreadable``;
        everything else is kept."""
        self.unreadable = []
        if self.sidecar_dir.exists() and not self.sidecar_dir.is_dir():
            warn_history(self.sidecar_dir, "it is not a folder: perfgate keeps this machine's "
                         "run records in a folder of that name", "not reading",
                         "move it out of the results dir")
            self.unreadable.append(unreadable_sidecar(self.sidecar_dir))  # any run, newest
        runs = list(self._iter_runs(warn=True))
        if asv_runs and self.machine_dir.is_dir():
            runs += asv_recorded_runs(self.machine_dir, self.machine,
                                      unreadable=self.unreadable)
        return sorted(runs, key=lambda r: r.started_at)

    def _iter_runs(self, warn: bool) -> Iterator[RunRecord]:
        for path in sorted(self.sidecar_dir.glob(f"*{SIDECAR_SUFFIX}")):  # [] when missing
            try:
                data = load_json(path)
                if not isinstance(data, dict):
                    raise ValueError(f"expected a JSON object, found {describe(data)}")
                run = refingerprint(RunRecord.from_json(data))  # schema-checked
                check_asv_names(run)
                # a copied or moved file: accept/forget find a run by its file name, and a
                # run counted twice (or on another machine's fingerprint) skews the spread
                if run.run_id != path.stem:
                    raise ValueError(f"it holds run {run.run_id!r}, not the run its name says "
                                     f"({path.stem!r}): a copy? perfgate names each run file "
                                     "by its run id")
                if run.machine != self.machine:
                    raise ValueError(f"it holds a run of machine {run.machine!r}, not "
                                     f"{self.machine!r}: move it to that machine's folder")
            except (OSError, ValueError, TypeError) as exc:
                if warn:
                    warn_history(path, str(exc), "skipping",
                                 "delete or move it to silence this warning")
                    self.unreadable.append(unreadable_sidecar(path))
                continue
            yield run


def recorded_machines(results_dir: Path) -> list[str]:
    """The machine folders of ``results_dir`` with runs: perfgate's run records, or only an
    asv ``machine.json`` (a machine that ``asv run`` alone has recorded). A folder whose
    name perfgate could never have recorded under (a space, a control character...) is
    named in a HistoryWarning and left out, so it cannot make the machine ambiguous."""
    from pytest_perfgate.core.names import is_safe_name

    found = []
    for p in sorted(results_dir.iterdir()):
        if not ((p / SIDECAR_DIR).is_dir() or (p / "machine.json").is_file()):
            continue
        if is_safe_name(p.name):
            found.append(p.name)
        else:
            warn_history(p, "its name is not a machine name perfgate records under "
                         "(letters, digits, '.', '_', '+', '@', '-')", "not reading",
                         "rename it or move it out of the results dir")
    return found


def no_machine_problem(results_dir: Path) -> str:
    """Why ``results_dir`` names no machine, and the fix: a careless user passes one
    machine's folder (or its perfgate/ folder) for the results dir."""
    for folder in (results_dir, results_dir.parent):
        if (folder / SIDECAR_DIR).is_dir() or (folder / "machine.json").is_file():
            return (f"no machine in {results_dir} has recorded runs: {folder} is one "
                    f"machine's folder; pass the folder above it, {folder.parent}, to "
                    "--results-dir")
    return (f"no machine in {results_dir} has recorded runs: record runs with `pytest "
            "--perfgate` first")


def check_asv_names(run: RunRecord) -> None:
    """Raise ValueError unless every benchmark and phase name of ``run`` can be an asv
    series (:func:`asv_name`): one such run would stop its whole commit's asv file."""
    for name, bench in run.benchmarks.items():
        asv_name(name)
        for phase in bench.phases:
            try:
                asv_name(phase)
            except ValueError as exc:
                raise ValueError(f"benchmark {name!r}: phase {phase!r}: {exc}") from None

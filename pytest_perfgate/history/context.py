"""The history one session reads and writes: machine and git facts, past runs, decisions.

Gathered once, on first use (smoke mode never reads the history), whichever mode measured:
the history mode judges against it, and the session records every mode's run through it.
``perfgate check`` and ``compare`` rebuild the context a recorded run was judged in
(:meth:`HistoryContext.for_run`). The baseline rule: docs/design.md §2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_perfgate.core.results import BenchRecord, RunRecord

MODE_KEY = "mode"  # run metadata: which mode measured the run ("history" or "ab")
HISTORY = "history"


def is_history_run(run: RunRecord) -> bool:
    """Runs of the history mode's protocol (runs recorded before the tag existed count)."""
    return run.metadata.get(MODE_KEY, HISTORY) == HISTORY


class HistoryContext:
    """Machine facts, git facts and past runs, gathered once per session."""

    def __init__(self, rootdir: Path, results_dir: Path, machine_name: str | None,
                 machine_info: Callable[[dict[str, Any]], None] | None = None,
                 env_vars: Sequence[str] = ()) -> None:
        """``rootdir`` is where git is asked: the test files' checkout, not pytest's
        rootdir (which a path-valued option can move out of the repository). ``env_vars``:
        the variables recorded with the environment beside the default ones."""
        from pytest_perfgate.history import decisions, environment, machine_id, vcs
        from pytest_perfgate.history import store as history

        self.rootdir = rootdir
        self.meta = machine_id.collect_metadata(machine_name)
        self.meta[environment.ENV_KEY] = environment.collect(env_vars, self.meta.get("gpu"))
        if machine_info is not None:  # users add or change fields before the fingerprint
            machine_info(self.meta)
        self.machine = self.meta["machine"]
        self.fingerprint = machine_id.fingerprint(self.meta)
        self.git = vcs.git_info(rootdir)
        self.results_dir = results_dir
        self.store = history.History(results_dir, self.machine)
        self.runs = self.store.load_runs()
        self.decisions = decisions.load_decisions(results_dir, self.machine)
        self._ancestor_cache: dict[str, bool] = {}

    @classmethod
    def for_run(cls, results_dir: Path, run: RunRecord, repo: Path, *, before: bool = True
                ) -> HistoryContext:
        """The context ``run`` was judged in, rebuilt from the history: its own machine
        facts and commit, the runs recorded before it, git asked in ``repo`` (which must hold
        the commit for the ancestor rule; else every other commit counts, as outside git).
        Used to judge a recorded run again (``perfgate check``); ``before=False`` offers
        every other run (``perfgate compare``, which names the baseline commit itself)."""
        from pytest_perfgate.history import decisions, vcs
        from pytest_perfgate.history import store as history

        self = cls.__new__(cls)
        self.rootdir = repo
        self.meta = dict(run.metadata)
        self.machine = run.machine
        self.fingerprint = run.fingerprint
        here = vcs.git_info(repo)
        known = here.available and vcs.resolve_commit(repo, run.commit) == run.commit
        self.git = vcs.GitInfo(run.commit, run.branch, run.dirty, run.commit_date_ms, known,
                               None if known else f"commit {run.commit[:10]} is not in the "
                               f"repository at {repo}")
        self.results_dir = results_dir
        self.store = history.History(results_dir, run.machine)
        # what the plugin saw when it judged the run: the runs recorded before it
        self.runs = [r for r in self.store.load_runs()
                     if (r.started_at < run.started_at if before else r.run_id != run.run_id)]
        self.decisions = decisions.load_decisions(results_dir, run.machine)
        self._ancestor_cache = {}
        return self

    def is_ancestor(self, commits: set[str]) -> set[str]:
        from pytest_perfgate.history import vcs

        if not self.git.available:
            # outside git every run of this machine counts (docs/measurement.md)
            return set(commits)
        todo = {c for c in commits if c not in self._ancestor_cache}
        if todo:
            yes = vcs.ancestors_filter(self.rootdir, self.git.commit, todo)
            self._ancestor_cache.update({c: c in yes for c in todo})
        return {c for c in commits if self._ancestor_cache[c]}

    def record(self, run_id: str, started_at: float, benches: Mapping[str, BenchRecord],
               mode: str, extra: Mapping[str, Any] | None = None) -> tuple[RunRecord, Path]:
        """Write the run, tagged with the mode that measured it (``metadata["mode"]``);
        ``extra``: facts of this run beside the machine's (which copy its rings used)."""
        g = self.git
        run = RunRecord(run_id=run_id, started_at=started_at, commit=g.commit,
                        commit_date_ms=g.commit_date_ms, branch=g.branch, dirty=g.dirty,
                        machine=self.machine, fingerprint=self.fingerprint,
                        metadata={**self.meta, **(extra or {}), MODE_KEY: mode},
                        benchmarks=dict(benches))
        return run, self.store.record(run, {})


class HistoryOpener:
    """Opens the session's :class:`HistoryContext` on first call and keeps it.

    ``root`` is where git is asked and relative results paths start; the session moves it
    to the first perf test's checkout (:func:`pytest_perfgate.session.naming.stable_root`)
    before anything opens the history."""

    def __init__(self, root: Path, results_dir: Callable[[Path], Path],
                 machine_name: str | None,
                 machine_info: Callable[[dict[str, Any]], None] | None = None,
                 env_vars: Sequence[str] = ()) -> None:
        self.root = root
        self._results_dir = results_dir
        self._machine_name = machine_name
        self._machine_info = machine_info
        self._env_vars = tuple(env_vars)
        self.opened: HistoryContext | None = None

    def __call__(self) -> HistoryContext:
        if self.opened is None:
            self.opened = HistoryContext(self.root, self._results_dir(self.root),
                                         self._machine_name, self._machine_info,
                                         self._env_vars)
        return self.opened

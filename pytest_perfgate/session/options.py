"""Every setting: one table of specs, one frozen :class:`Options` built once.

Precedence: command-line flag > ini option > environment variable > default. Each value is
parsed where it is read, by a ``parse_*`` converter that names the bad value and the fix;
the same converter serves argparse (through :func:`argparse_type`), the ini file and the
environment. Defaults live in :class:`Options` only; the help texts are derived from it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_perfgate.core.settings import Settings

CUDA_SYNC_ENV = "PERFGATE_CUDA_SYNC"  # gpu/cuda.py SYNC_ENV: read where windows are timed
HISTORY_THRESHOLD = 0.05
AB_THRESHOLD = 0.02  # what docs/verdict-quality.md measured the A/B mode at


class OptionError(ValueError):
    """A setting has a bad value; the message says which, where it came from, and the fix."""


def parse_fraction(text: str) -> float:
    """'5%', '0.05' -> 0.05."""
    s = str(text).strip()
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise OptionError(f"{text!r} is not a fraction: use e.g. 0.05 or 5%") from None
    if not (0 < v < 1) or math.isnan(v):
        raise OptionError(f"{text!r} is out of range: use a fraction between 0 and 1 "
                          "(exclusive), e.g. 0.05 or 5%")
    return v


def parse_alpha(text: str) -> float:
    """A one-sided significance level: strictly between 0 and 0.5.

    At 0.5 a one-sided test calls every measured slowdown, however noisy, significant (a
    coin flip), and the ratio's confidence interval (1 - 2*alpha) is empty; above it the
    gate would call a speed-up a regression. Checked here, up front, not after measuring
    (the gate's Rule refuses it too, but only once a benchmark has been measured).
    """
    try:
        v = parse_fraction(text)
    except OptionError:
        v = math.nan
    if not v < 0.5:
        raise OptionError(f"{text!r} is not a one-sided significance level: use a number "
                          "between 0 and 0.5 (exclusive: at 0.5 a coin flip would count as "
                          "significant), e.g. 0.01 or 1%")
    return v


def _parse_number(text: str, kind: type, lo: float, what: str, example: str) -> Any:
    try:
        v = kind(str(text).strip())
    except ValueError:
        raise OptionError(f"{text!r} is not {what}: use e.g. {example}") from None
    if isinstance(v, float) and not math.isfinite(v):
        raise OptionError(f"{text!r} is not a finite number: use e.g. {example}")
    if not v >= lo:
        raise OptionError(f"{text!r} is too small: use {what} >= {lo}, e.g. {example}")
    return v


def parse_positive_int(text: str) -> int:
    return int(_parse_number(text, int, 1, "a whole number", "5"))


def parse_turns(text: str) -> int:
    """A/B turns per side: the paired test needs at least 2 (checked before measuring)."""
    return int(_parse_number(text, int, 2, "a whole number of turns", "96"))


def parse_looks(text: str) -> int:
    """Looks of the sequential A/B test: 1 (a fixed-length test) to MAX_LOOKS."""
    from pytest_perfgate.core.sequential import MAX_LOOKS  # not loaded by the plugin's import

    v = int(_parse_number(text, int, 1, "a whole number of looks", "4"))
    if v > MAX_LOOKS:
        raise OptionError(f"{text!r} is too many looks: use 1 to {MAX_LOOKS} (more looks "
                          "stop a run hardly any sooner), e.g. 4")
    return v


def parse_seconds(text: str) -> float:
    v = float(_parse_number(text, float, 0, "a number of seconds", "1.5"))
    if v == 0:
        raise OptionError(f"{text!r} is too small: use a number of seconds > 0, e.g. 1.5")
    return v


def parse_cores(text: str) -> float:
    return float(_parse_number(text, float, 0, "a number of cores", "0.5"))


def parse_policy(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        s = str(text).strip().lower()
        if s not in choices:
            raise OptionError(f"{text!r} is not one of {', '.join(choices)}: use "
                              f"{', '.join(choices[:-1])} or {choices[-1]}")
        return s

    parse.__name__ = f"parse_{'_or_'.join(choices)}"
    return parse


def parse_cuda_sync(text: str) -> str:
    """Where a process that uses CUDA synchronises the device (gpu/cuda.py, docs/gpu.md)."""
    s = str(text).strip().lower()
    if s not in ("edges", "phases"):
        raise OptionError(f"{text!r} is not a CUDA synchronising mode: use edges (the device "
                          "is synchronised at window edges only, phases timed by CUDA "
                          "events) or phases (also at every phase exit, for diagnosis: it "
                          "removes the CPU/GPU overlap, so the rate is lower than the "
                          "workload's)")
    return s


def parse_profile(text: str) -> str:
    """When to profile base and head (modes/ab, docs/profile.md); a bare flag is "always"."""
    s = str(text).strip().lower()
    s = {"true": "always", "1": "always", "yes": "always", "on": "always", "false": "off",
         "0": "off", "no": "off", "never": "off"}.get(s, s)
    if not s:
        raise OptionError(f"{text!r} is empty: use regression, always or off" + EMPTY)
    if s not in ("regression", "always", "off"):
        raise OptionError(f"{text!r} is not when to profile: use regression (after each "
                          "REGRESSION of the A/B mode, bisect or a re-measured baseline), "
                          "always (every benchmark's two sides) or off")
    return s


EMPTY = " (an unset CI variable expands to nothing: set it, or leave the option out)"


def parse_bool(text: str) -> bool:
    """A switch: an empty value is an error, never false (``--perfgate-ab-confirm=`` from a
    workflow variable nobody set would silently turn a safeguard off)."""
    s = str(text).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    if not s:
        raise OptionError(f"{text!r} is empty: use true or false" + EMPTY)
    raise OptionError(f"{text!r} is not a boolean: use true or false")


def parse_machine(text: str) -> str:
    """A machine name becomes a folder name: the one safe-name rule (core/names.py)."""
    from pytest_perfgate.core.names import safe_name  # not loaded by the plugin's import

    try:
        return safe_name(str(text).strip(), "machine name", "runner-gpu-03", shown=repr(text))
    except ValueError as e:
        raise OptionError(str(e)) from None


def parse_commit(text: str) -> str:
    s = str(text).strip()
    if not (4 <= len(s) <= 40 and all(c in "0123456789abcdefABCDEF" for c in s)):
        raise OptionError(f"{text!r} is not a commit hash: give 4-40 hex digits, e.g. "
                          "the output of `git rev-parse --short main`")
    return s.lower()


def parse_rev(text: str) -> str:
    """A git revision name; resolved later, against the repository."""
    s = str(text).strip()
    if not s or s.startswith("-") or any(c.isspace() or ord(c) < 32 for c in s):
        raise OptionError(f"{text!r} is not a git revision: give a branch, tag or commit, "
                          "e.g. origin/main")
    return s


def parse_path(text: str) -> str:
    """A file or folder path; a leading ``~`` is the home folder, as in a shell: the shell
    leaves ``--perfgate-json=~/out.json`` (and ini values, and YAML ``env:``) alone."""
    s = str(text).strip()
    if not s:
        raise OptionError("an empty path: give a file or folder path")
    return os.path.expanduser(s)


def parse_env_vars(text: str) -> tuple[str, ...]:
    """Environment variable names, separated by spaces or commas (an ini value may span
    lines)."""
    names = [n for n in re.split(r"[\s,]+", str(text)) if n]
    if not names:
        raise OptionError(f"{text!r} names no variable: give names such as "
                          "'OMP_NUM_THREADS MUJOCO_GL'")
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
    if bad:
        raise OptionError(f"{bad[0]!r} is not an environment variable name: give names of "
                          "letters, digits and _, e.g. 'OMP_NUM_THREADS MUJOCO_GL'")
    return tuple(dict.fromkeys(names))


def parse_env_files(text: str) -> tuple[str, ...]:
    """Globs of dependency declarations relative to the project's top folder; ``none``
    turns each side's own environment off."""
    names = [n for n in re.split(r"[\s,]+", str(text)) if n]
    if not names:
        raise OptionError(f"{text!r} names no file: give globs such as "
                          "'requirements*.txt uv.lock', or none")
    if names == ["none"]:
        return ()
    bad = [n for n in names if n.startswith("/") or ".." in Path(n).parts]
    if bad:
        raise OptionError(f"{bad[0]!r} is not a path inside the project: give globs relative "
                          "to its top folder, e.g. 'requirements*.txt'")
    return tuple(dict.fromkeys(names))


def parse_command(text: str) -> str:
    s = str(text).strip()
    if not s:
        raise OptionError("an empty command: give a shell command, e.g. 'pip install -e .'")
    return s


@dataclass(frozen=True)
class Spec:
    name: str  # Options field; flag is --perfgate-<name with ->, ini perfgate_<name>
    parse: Callable[[str], Any]
    help: str
    env: str | None = None
    switch: bool = False  # a bare flag (--perfgate-counts); the ini takes true/false
    words: tuple[str, ...] = ()  # a switch's values also taken as --flag=word

    @property
    def flag(self) -> str:
        return "--perfgate-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "perfgate_" + self.name

    @property
    def full_help(self) -> str:
        """The help text with the default that :class:`Options` holds, and the env var."""
        default = Options.__dataclass_fields__[self.name].default
        text = self.help if default is None else f"{self.help} (default {_show(default)})"
        return text + (f" [env: {self.env}]" if self.env else "")


def _raw(spec: Spec, ini: Mapping[str, Any], env: Mapping[str, str]
         ) -> tuple[Any, str | None]:
    """The unparsed ini or environment value of ``spec`` and where it came from. A key set
    to nothing is a value (``""``): the parser refuses it, never the default in disguise."""
    raw, where = ini.get(spec.name), f"ini option {spec.ini}"
    if raw is None and spec.env:
        raw, where = env.get(spec.env), f"environment variable {spec.env}"
    return (None, None) if raw is None else (raw, where)


def _refuse_empty(spec: Spec, where: str) -> OptionError:
    """``where`` is set to nothing: the fix is the parser's own, said once."""
    try:
        spec.parse("")
        fix = "give a value"
    except OptionError as e:
        fix = str(e).removesuffix(EMPTY)
        fix = fix.split(": ", 1)[1] if ": " in fix else fix
    return OptionError(f"{where} is set but empty: {fix}, or unset it (an unset CI "
                       "variable expands to nothing)")


def sources(flags: Mapping[str, Any], ini: Mapping[str, Any], env: Mapping[str, str]
            ) -> dict[str, str]:
    """Where each set option came from ("--perfgate-json", "ini option perfgate_json",
    "environment variable GITHUB_STEP_SUMMARY"), for messages; unset options are absent."""
    out = {}
    for spec in SPECS:
        where = spec.flag if flags.get(spec.name) is not None else _raw(spec, ini, env)[1]
        if where is not None:
            out[spec.name] = where
    return out


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def argparse_type(parse: Callable[[str], Any],
                  errors: tuple[type[Exception], ...] = (OptionError,)) -> Callable[[str], Any]:
    """An argparse ``type=`` that reports a converter's message (naming value and fix)."""
    import argparse

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except errors as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = parse.__name__  # argparse names the type in some messages
    return convert


SPECS: tuple[Spec, ...] = (
    Spec("threshold", parse_fraction, "throughput drop that fails a test (default "
         f"{HISTORY_THRESHOLD:.0%}; {AB_THRESHOLD:.0%} in the A/B mode)"),
    Spec("alpha", parse_alpha, "significance level of the one-sided test"),
    Spec("baseline_runs", parse_positive_int,
         "compare with the newest N runs of ancestor commits on this machine"),
    Spec("baseline", parse_commit, "compare only with runs of this commit", "PERFGATE_BASELINE"),
    Spec("results_dir", parse_path, "where asv history is kept (default: asv.conf.json's "
         "results_dir, else .perfgate/results)", "PERFGATE_RESULTS_DIR"),
    Spec("machine", parse_machine, "machine name to record and compare under (default: "
         "hostname; set it on ephemeral runners)", "PERFGATE_MACHINE"),
    Spec("env_vars", parse_env_vars, "environment variables recorded with each run and "
         "named in a verdict when they changed since its baseline, space- or "
         "comma-separated (thread counts, MUJOCO_GL and CUDA_VISIBLE_DEVICES always are)",
         "PERFGATE_ENV_VARS"),
    Spec("windows", parse_positive_int, "measured windows per benchmark"),
    Spec("window_time", parse_seconds, "seconds per measured window"),
    Spec("warmup_max", parse_seconds, "longest warm-up before UNSTABLE, seconds"),
    Spec("load_limit", parse_cores, "outside load, in busy cores, that marks a window "
         "polluted and re-measures it"),
    Spec("unstable", parse_policy("fail", "warn"), "UNSTABLE verdicts: fail or warn"),
    Spec("inconclusive", parse_policy("fail", "warn"), "INCONCLUSIVE verdicts: fail or warn"),
    Spec("json", parse_path, "write the report as JSON to this path"),
    Spec("markdown", parse_path, "append a markdown summary to this path (default: "
         "$GITHUB_STEP_SUMMARY when set)", "GITHUB_STEP_SUMMARY"),
    Spec("record", parse_bool, "record results into history"),
    Spec("ab", parse_rev, "interleaved A/B mode: measure this base revision and the working "
         "tree in alternating turns, gate on the paired ratio", "PERFGATE_AB"),
    Spec("ab_turns", parse_turns, "A/B turns per side, at most: the sequential test's last "
         "look"),
    Spec("ab_turn_time", parse_seconds, "seconds per A/B turn"),
    Spec("ab_looks", parse_looks, "looks of the sequential A/B test, evenly spaced up to "
         "--perfgate-ab-turns (at least 8 turns apart): it stops at the first look that "
         "decides, the false-alarm rate held at alpha over all of them; 1 = fixed length"),
    Spec("ab_confirm", parse_bool, "a REGRESSION or IMPROVEMENT of one pair of side "
         "processes is measured again by fresh pairs: it stands when the first fresh pair "
         "measures it too, else two more must agree, or it is INCONCLUSIVE",
         "PERFGATE_AB_CONFIRM"),
    Spec("env_files", parse_env_files, "A/B, re-measuring and bisect: the dependency "
         "declarations (globs from the project's top folder) whose change between the sides "
         "runs the base in the environment its own declarations pin, built with uv or pip "
         "(default: pyproject.toml, requirements*.txt, requirements/*.txt, constraints*.txt, "
         "constraints/*.txt, "
         "uv.lock, poetry.lock, Pipfile.lock, environment.yml; none: off)",
         "PERFGATE_ENV_FILES"),
    Spec("ab_setup", parse_command, "shell command run in the base worktree before measuring "
         "(e.g. building extensions)"),
    Spec("jsonl", parse_path, "append one JSON line per measured benchmark to this file "
         "(verdict, ratio, steps/s, phases, run id, commit, machine: for your own tooling)"),
    Spec("select", parse_policy("all", "only", "skip"), "which tests run: all, only the perf "
         "tests (also --perfgate-only) or all but them (also --perfgate-skip)"),
    Spec("counts", parse_bool, "also count instructions per env-step under valgrind "
         "(callgrind) and gate them as <benchmark>.counts beside steps/s; needs valgrind "
         "(off by default; @pytest.mark.perfgate(counts=...) decides per test)",
         switch=True, words=("true", "false")),
    Spec("remeasure", parse_bool, "history mode: when the record cannot resolve the "
         "threshold, measure the newest baseline commit again, interleaved with this tree "
         "in A/B turns, and give that verdict", "PERFGATE_REMEASURE"),
    Spec("remeasure_budget", parse_seconds, "history mode: seconds a session may spend "
         "re-measuring baselines, at most (default 900); past it verdicts stay as the "
         "record gives them"),
    Spec("profile", parse_profile, "profile base and head with py-spy in interleaved turns "
         "and name the functions that grew, always (this flag) or, from the ini option or "
         "the variable: regression (after each REGRESSION of two sides: the default), "
         "always or off", "PERFGATE_PROFILE", switch=True,
         words=("always", "regression", "off")),
    Spec("profile_dir", parse_path, "where the profiles' flame graph files go (default: "
         "profiles/ beside --perfgate-json, else .perfgate/profiles/<run id>)",
         "PERFGATE_PROFILE_DIR"),
    Spec("cuda_sync", parse_cuda_sync, "where a measured process that uses CUDA synchronises "
         "the device: edges (each window's edges; phases timed by CUDA events) or phases "
         "(also at every phase exit, for diagnosis: it removes the CPU/GPU overlap)",
         CUDA_SYNC_ENV),
)


def _export_cuda_sync(mode: str, env: MutableMapping[str, str]) -> None:
    """The chosen mode goes into the environment (``os.environ`` in the plugin), which is
    where every process that times windows reads it: this one, and the A/B sides and worker
    groups that inherit it, so all of them synchronise alike."""
    env[CUDA_SYNC_ENV] = mode


@dataclass(frozen=True)
class Options:
    enabled: bool = False
    threshold: float | None = None  # None: 5% in history mode, 2% in the A/B mode
    alpha: float = 0.01
    baseline_runs: int = 5
    baseline: str | None = None
    results_dir: str | None = None
    machine: str | None = None
    env_vars: tuple[str, ...] | None = None
    windows: int = 8
    window_time: float = 1.0
    warmup_max: float = 5.0
    load_limit: float = 0.5
    unstable: str = "fail"
    inconclusive: str = "warn"
    json: str | None = None
    markdown: str | None = None
    record: bool = True
    ab: str | None = None
    ab_turns: int = 96
    ab_turn_time: float = 0.1
    ab_looks: int = 4
    ab_confirm: bool = True
    ab_setup: str | None = None
    env_files: tuple[str, ...] | None = None
    jsonl: str | None = None
    select: str = "all"  # "only": perf tests only; "skip": every test but the perf tests
    counts: bool | None = None  # None: off (help shows no default for a bare flag)
    cuda_sync: str = "edges"
    remeasure: bool = True
    remeasure_budget: float = 900.0
    profile: str = "regression"
    profile_dir: str | None = None

    @classmethod
    def resolve(cls, enabled: bool, flags: Mapping[str, Any], ini: Mapping[str, Any],
                env: Mapping[str, str] = os.environ) -> Options:
        """Flag > ini > env > default. Flags arrive parsed (argparse ran the converter)."""
        values: dict[str, Any] = {"enabled": bool(enabled)}
        for spec in SPECS:
            if flags.get(spec.name) is not None:
                flag = flags[spec.name]  # a bare switch arrives as True: its parser says
                if spec.switch and (flag is True or isinstance(flag, str)):  # or --flag=word
                    flag = spec.parse("true" if flag is True else flag)
                values[spec.name] = flag
                continue
            raw, where = _raw(spec, ini, env)
            if raw is None:
                continue
            if not str(raw).strip():
                raise _refuse_empty(spec, str(where))
            try:
                values[spec.name] = spec.parse(raw)
            except OptionError as e:
                raise OptionError(f"{where}: {e}") from None
        if "cuda_sync" in values and isinstance(env, MutableMapping):
            _export_cuda_sync(values["cuda_sync"], env)
        return cls(**values)

    def default_threshold(self) -> float:
        """The user's threshold, else the mode's: the A/B mode resolves 2% drops (docs)."""
        if self.threshold is not None:
            return self.threshold
        return AB_THRESHOLD if self.ab else HISTORY_THRESHOLD

    def settings(self, rejudging: bool = False) -> Settings:
        """What the gate judges by, resolved once (every Rule is built from it);
        ``rejudging``: for a command judging recorded runs again, which records nothing."""
        from pytest_perfgate.core.settings import Settings

        return Settings(self.default_threshold(), self.alpha, self.unstable,
                        self.inconclusive, self.baseline_runs, self.baseline,
                        None if rejudging else self.record)

    def results_path(self, rootdir: Path) -> Path:
        from pytest_perfgate.history.files import default_results_dir

        if self.results_dir:
            p = Path(self.results_dir)
            return p if p.is_absolute() else rootdir / p
        return Path(default_results_dir(rootdir))

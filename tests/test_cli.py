"""The ``perfgate`` command line: its commands, help and usage errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_perfgate.cli import Command, commands, main


def test_every_module_is_one_command() -> None:
    assert [c.name for c in commands()] == ["accept", "bisect",
                                            "calibrate", "check", "compare", "forget",
                                            "history",
                                            "machine", "profile", "publish",
                                            "rebaseline", "report",
                                            "ring-compare", "sandbox",
                                            "sweep"]
    assert all(issubclass(c, Command) for c in commands())


def test_top_level_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: perfgate [-h] [--version] [--debug] COMMAND ...")
    words = " ".join(out.split())  # argparse wraps to the terminal's width
    assert "calibrate measure false alarms and detection of this runner's verdicts" in words
    assert "sweep MuJoCo pool sweep over threads or batch sizes (interleaved)" in words


@pytest.mark.parametrize("name", [c.name for c in commands()])
def test_every_command_renders_its_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse formats help strings with %: a bare one (a threshold written as "2%") turned
    `perfgate bisect --help` into a traceback."""
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: perfgate {name} ")


@pytest.mark.parametrize("argv, message", [
    ([], "perfgate: error: the following arguments are required: COMMAND"),
    (["nope"], "perfgate: error: argument COMMAND: invalid choice: 'nope' (choose from "),
])
def test_usage_errors_exit_2(argv: list[str], message: str,
                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_python_dash_m_is_the_console_script() -> None:
    res = subprocess.run([sys.executable, "-m", "pytest_perfgate.cli", "sweep", "--envs", "0"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert ("perfgate sweep: error: argument --envs: '0' is not a batch size, a list or a "
            "range of them: use whole numbers >= 1") in res.stderr


@pytest.mark.parametrize("argv, fragment", [
    (["sweep", "--json", "{tmp}"], "argument --json: '{tmp}' is a folder, not a file: give a "
     "file path, e.g. {tmp}/out.json"),
    (["calibrate", "--save", "{tmp}/f/x.json"], "argument --save: '{tmp}/f/x.json': {tmp}/f is "
     "a file, not a folder: give a path in a folder"),
])
def test_output_paths_are_refused_before_any_work(argv: list[str], fragment: str, tmp_path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("a file")
    with pytest.raises(SystemExit) as exc:
        main([a.format(tmp=tmp_path) for a in argv])
    assert exc.value.code == 2
    assert fragment.format(tmp=tmp_path) in capsys.readouterr().err


@pytest.mark.parametrize("content", ['{"format": 1}', '{"format": 1, "config": {}, "trials": []}',
                                     '{"format": 1, "config": {"slowdowns": ["x"]}}',
                                     '{"format": 1, "config": {"slowdowns": []}, '
                                     '"trials": [{"nope": 1}]}'])
def test_a_malformed_study_file_is_a_usage_error_not_a_traceback(
        content: str, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.json"
    study.write_text(content)
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--analyse", str(study)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"perfgate calibrate: error: {study}: not a study written by `perfgate calibrate " \
           "--save` (" in err and "Traceback" not in err


def test_machine_prints_what_the_plugin_records(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from pytest_perfgate.history import machine_id

    monkeypatch.setenv("PERFGATE_MACHINE", "runner-7")
    assert main(["machine", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    meta = machine_id.collect_metadata("runner-7")
    assert shown["fingerprint"] == machine_id.fingerprint(meta)
    assert shown["metadata"]["machine"] == "runner-7"
    assert main(["machine"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"machine      runner-7\nfingerprint  {machine_id.fingerprint(meta)}\n")
    monkeypatch.setenv("PERFGATE_MACHINE", ".hidden")
    with pytest.raises(SystemExit) as exc:
        main(["machine"])
    assert exc.value.code == 2
    assert ("perfgate machine: error: environment variable PERFGATE_MACHINE: '.hidden' is "
            "not a usable machine name") in capsys.readouterr().err


@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_every_command_stopped_exits_130_saying_so(how: str, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM (a cancelled CI job) ends any command like Ctrl-C: exit 130 and one line,
    never 143 with nothing said; the previous SIGTERM handler is back afterwards."""
    import os
    import signal

    from pytest_perfgate.cli.history import HistoryCommand as History

    def stop(cls: object, args: object) -> int:
        if how == "SIGTERM":
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(History, "run_from_args", classmethod(stop))
    assert main(["history", "walk"]) == 130
    assert capsys.readouterr().err == "perfgate history: stopped (Ctrl-C or SIGTERM)\n"
    assert signal.getsignal(signal.SIGTERM) == before

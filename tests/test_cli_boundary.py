"""The one exception boundary of `perfgate`: an error no command turned into its own message
exits 3 (infrastructure: never judged, never "a regression"), in one line, with the
traceback only under --debug; a bad value raised as OptionError is a usage error (2)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.cli.history import HistoryCommand
from pytest_perfgate.session.options import OptionError


def crash_with(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    def run_from_args(args: Any) -> int:
        raise error

    monkeypatch.setattr(HistoryCommand, "run_from_args", staticmethod(run_from_args))


def test_an_unexpected_error_is_infrastructure_in_one_line_without_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PERFGATE_DEBUG", raising=False)
    crash_with(monkeypatch, RuntimeError("the bug"))
    assert main(["history", "x"]) == 3
    err = capsys.readouterr().err
    assert err == ("perfgate history: infrastructure error: RuntimeError: the bug (an internal "
                   "error: please report it with the output of `perfgate --debug history "
                   "...`)\n")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback_and_keeps_the_status(
        how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    crash_with(monkeypatch, RuntimeError("the bug"))
    if how == "env":
        monkeypatch.setenv("PERFGATE_DEBUG", "1")
    assert main(["--debug", "history", "x"] if how == "flag" else ["history", "x"]) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: the bug" in err
    assert err.endswith("`perfgate --debug history ...`)\n")


def test_a_file_error_names_the_path(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    crash_with(monkeypatch, OSError(30, "Read-only file system", "/x/.perfgate/profiles"))
    assert main(["history", "x"]) == 3
    assert capsys.readouterr().err == (
        "perfgate history: infrastructure error: Read-only file system: /x/.perfgate/profiles "
        "(check the path and its permissions)\n")


def test_a_bad_value_raised_late_is_a_usage_error(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    crash_with(monkeypatch, OptionError("'garbage' is not on or off: use on or off"))
    with pytest.raises(SystemExit) as exit_:
        main(["history", "x"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(
        "perfgate history: error: 'garbage' is not on or off: use on or off\n")


def test_a_json_caller_gets_its_document(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    crash_with(monkeypatch, RuntimeError("the bug"))
    assert main(["history", "x", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit"] == 3 and doc["command"] == "history"
    assert doc["error"]["kind"] == "infrastructure"
    assert doc["error"]["message"].startswith("RuntimeError: the bug")


def test_ctrl_c_names_the_command_even_after_a_global_flag(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    crash_with(monkeypatch, KeyboardInterrupt())
    assert main(["--debug", "history", "x"]) == 130
    assert capsys.readouterr().err == "perfgate history: stopped (Ctrl-C or SIGTERM)\n"

"""The ``perfgate`` command line: its commands, help and usage errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_perfgate.cli import Command, commands, main


def test_every_module_is_one_command() -> None:
    assert [c.name for c in commands()] == ["accept", "calibrate", "forget", "sweep"]
    assert all(issubclass(c, Command) for c in commands())


def test_top_level_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: perfgate [-h] COMMAND ...")
    words = " ".join(out.split())  # argparse wraps to the terminal's width
    assert "calibrate measure false alarms and detection of this runner's verdicts" in words
    assert "sweep MuJoCo pool thread-scaling sweep (interleaved), sizing rule marked" in words


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
    assert ("perfgate sweep: error: argument --envs: '0' is too small: use a whole number "
            ">= 1, e.g. 5") in res.stderr

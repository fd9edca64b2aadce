"""`perfgate machine --asv-machine-file`: asv's machine entry written from perfgate's facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.history.asv import asv_params_from_meta
from pytest_perfgate.history.asv_machine import write_asv_machine_file
from pytest_perfgate.history.machine import collect_metadata


def test_the_entry_holds_the_fields_perfgate_puts_in_params(tmp_path: Path) -> None:
    path = tmp_path / ".asv-machine.json"
    path.write_text(json.dumps({"other": {"machine": "other", "cpu": "Z"}, "version": 1}))
    meta = collect_metadata("runner-7")
    assert write_asv_machine_file(meta, path) == path
    data = json.loads(path.read_text())
    assert data["other"] == {"machine": "other", "cpu": "Z"} and data["version"] == 1
    # asv run's params = this entry + python: exactly the params perfgate writes
    assert data["runner-7"] == asv_params_from_meta(meta)


def test_the_cli_writes_it_and_says_how_to_record(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.json"
    assert main(["machine", "--machine", "runner-7", "--asv-machine-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote machine 'runner-7' to {path}: record with "
                          "`asv run --machine runner-7`\n")
    assert json.loads(path.read_text())["runner-7"]["machine"] == "runner-7"


@pytest.mark.parametrize("text, what", [("{oops", "is unreadable"),
                                        ('{"version": 2}', "without asv's")])
def test_a_file_that_is_not_asvs_is_left_alone(tmp_path: Path, text: str, what: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    assert main(["machine", "--machine", "runner-7", "--asv-machine-file", str(path)]) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"perfgate machine: error: asv machine file {path} ") and what in out
    assert out.splitlines()[0].endswith("fix or move it, then run this again")
    assert path.read_text() == text

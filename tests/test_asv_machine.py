"""`perfgate machine --asv-machine-file`: asv's machine entry written from perfgate's facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.history.asv import asv_params_from_meta
from pytest_perfgate.history.machine_id import collect_metadata, write_asv_machine_file


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
    assert main(["machine", "--machine", "runner-7", "--asv-machine-file", str(path)]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before anything is printed
    err = captured.err
    assert err.startswith(f"perfgate machine: infrastructure error: asv machine file {path} ")
    assert what in err and err.splitlines()[0].endswith("fix or move it, then run this again")
    assert path.read_text() == text


def test_a_missing_folder_or_a_bad_hostname_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """`--asv-machine-file /nonexistent/dir/m.json` created /nonexistent/dir; a hostname the
    plugin refuses as a machine name was printed and written into asv's machine file."""
    import socket

    target = tmp_path / "nonexistent" / "dir" / "m.json"
    with pytest.raises(SystemExit) as exc:
        main(["machine", "--machine", "runner-7", "--asv-machine-file", str(target)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"perfgate machine: error: asv machine file {target}: its folder {target.parent} does "
        "not exist: give a path in an existing folder, e.g. ~/.asv-machine.json")
    assert not (tmp_path / "nonexistent").exists()
    monkeypatch.delenv("PERFGATE_MACHINE", raising=False)
    for host in ("../evil", "runner\u200f7"):
        monkeypatch.setattr(socket, "gethostname", lambda h=host: h)
        with pytest.raises(SystemExit) as exc:
            main(["machine", "--asv-machine-file", str(tmp_path / "m.json")])
        assert exc.value.code == 2
        err = capsys.readouterr().err.splitlines()[-1]
        assert err.startswith(f"perfgate machine: error: the hostname {host!r} is not a "
                              "usable machine name: ")
        assert err.endswith(": set --machine (or PERFGATE_MACHINE)")
    assert not (tmp_path / "m.json").exists()

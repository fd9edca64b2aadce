"""Every option: precedence, parsing, and the exact message a bad value produces."""

from __future__ import annotations

import argparse

import pytest

from pytest_perfgate.session.options import (
    SPECS,
    OptionError,
    Options,
    argparse_type,
    parse_bool,
    parse_commit,
    parse_fraction,
    parse_machine,
    parse_positive_int,
    parse_seconds,
)


def resolve(flags=None, ini=None, env=None) -> Options:
    return Options.resolve(True, flags or {}, ini or {}, env or {})


def test_defaults() -> None:
    o = resolve()
    assert (o.threshold, o.alpha, o.baseline_runs, o.windows) == (None, 0.01, 5, 8)
    assert o.default_threshold() == 0.05
    assert resolve(ini={"ab": "origin/main"}).default_threshold() == 0.02
    assert resolve(flags={"threshold": 0.1}, ini={"ab": "main"}).default_threshold() == 0.1
    assert (o.unstable, o.inconclusive, o.record) == ("fail", "warn", True)


def test_flag_beats_ini_beats_env() -> None:
    env = {"PERFGATE_MACHINE": "from-env"}
    assert resolve(env=env).machine == "from-env"
    assert resolve(ini={"machine": "from-ini"}, env=env).machine == "from-ini"
    assert resolve(flags={"machine": "from-flag"}, ini={"machine": "x"}, env=env).machine \
        == "from-flag"


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.1", 0.1), (" 2.5% ", 0.025)])
def test_parse_fraction(text: str, value: float) -> None:
    assert parse_fraction(text) == pytest.approx(value)


@pytest.mark.parametrize("parse,text,message", [
    (parse_fraction, "abc", "'abc' is not a fraction: use e.g. 0.05 or 5%"),
    (parse_fraction, "150%", "'150%' is out of range: use a fraction between 0 and 1 "
     "(exclusive), e.g. 0.05 or 5%"),
    (parse_positive_int, "0", "'0' is too small: use a whole number >= 1, e.g. 5"),
    (parse_positive_int, "2.5", "'2.5' is not a whole number: use e.g. 5"),
    (parse_seconds, "0", "'0' is too small: use a number of seconds > 0, e.g. 1.5"),
    (parse_seconds, "inf", "'inf' is not a finite number: use e.g. 1.5"),
    (parse_bool, "maybe", "'maybe' is not a boolean: use true or false"),
    (parse_bool, " ", "' ' is empty: use true or false (an unset CI variable expands to "
     "nothing: set it, or leave the option out)"),
    (parse_machine, "../etc", "'../etc' is not a usable machine name: use 1-128 letters, "
     "digits, '.', '_', '+', '@' or '-', starting with a letter, digit or '_', without '..', "
     "e.g. runner-gpu-03"),
    (parse_machine, ".hidden", "'.hidden' is not a usable machine name: use 1-128 letters, "
     "digits, '.', '_', '+', '@' or '-', starting with a letter, digit or '_', without '..', "
     "e.g. runner-gpu-03"),
    (parse_machine, "x" * 129, f"'{'x' * 129}' is not a usable machine name: use 1-128 "
     "letters, digits, '.', '_', '+', '@' or '-', starting with a letter, digit or '_', "
     "without '..', e.g. runner-gpu-03"),
    (parse_commit, "main", "'main' is not a commit hash: give 4-40 hex digits, e.g. the "
     "output of `git rev-parse --short main`"),
])
def test_bad_values_render(parse, text: str, message: str) -> None:
    with pytest.raises(OptionError) as e:
        parse(text)
    assert str(e.value) == message


def test_ini_and_env_errors_name_their_source() -> None:
    with pytest.raises(OptionError, match="^ini option perfgate_windows: 'x' is not a whole"):
        resolve(ini={"windows": "x"})
    with pytest.raises(OptionError, match="^environment variable PERFGATE_MACHINE: 'a b'"):
        resolve(env={"PERFGATE_MACHINE": "a b"})


def test_every_spec_has_flag_and_ini() -> None:
    names = {f for f in Options.__dataclass_fields__} - {"enabled"}
    assert {s.name for s in SPECS} == names
    assert all(s.flag.startswith("--perfgate-") and s.ini.startswith("perfgate_") for s in SPECS)


def test_policy_choice() -> None:
    with pytest.raises(OptionError, match="^ini option perfgate_unstable: 'never' is not one "
                                          "of fail, warn: use fail or warn$"):
        resolve(ini={"unstable": "never"})


def test_help_defaults_come_from_options() -> None:
    helps = {s.name: s.full_help for s in SPECS}
    assert helps["windows"] == "measured windows per benchmark (default 8)"
    assert helps["record"] == "record results into history (default true)"
    assert helps["threshold"] == ("throughput drop that fails a test (default 5%; 2% in the "
                                  "A/B mode)")
    assert helps["machine"].endswith("(default: hostname; set it on ephemeral runners) "
                                     "[env: PERFGATE_MACHINE]")
    for spec in SPECS:
        default = Options.__dataclass_fields__[spec.name].default
        if default is not None:
            assert f"(default {str(default).lower() if default is True else default})" \
                in spec.full_help, spec.name
        assert "(default" in spec.full_help or default is None, spec.name


def test_argparse_type_reports_the_converters_message() -> None:
    parser = argparse.ArgumentParser(prog="x", exit_on_error=False)
    parser.add_argument("--windows", type=argparse_type(parse_positive_int))
    assert parser.parse_args(["--windows", "3"]).windows == 3
    with pytest.raises(argparse.ArgumentError, match="'0' is too small: use a whole number "
                                                     ">= 1, e.g. 5"):
        parser.parse_args(["--windows", "0"])


def test_paths_expand_a_leading_tilde_and_commands_do_not(monkeypatch) -> None:
    from pytest_perfgate.session.options import parse_command, parse_path

    monkeypatch.setenv("HOME", "/home/ci")
    assert parse_path(" ~/hist ") == "/home/ci/hist"
    assert parse_path("a/~b") == "a/~b"
    assert parse_command("cd ~/x && make") == "cd ~/x && make"
    with pytest.raises(OptionError, match="^an empty command: give a shell command"):
        parse_command("  ")


def test_an_empty_switch_flag_is_a_usage_error_naming_the_flag(
        pytester: pytest.Pytester) -> None:
    """`--perfgate-ab-confirm=${{ vars.X }}` with X unset must not turn confirmation off."""
    res = pytester.runpytest_subprocess("--perfgate", "--perfgate-ab-confirm=")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*argument --perfgate-ab-confirm: '' is empty: use true or "
                              "false (an unset CI variable expands to nothing*"])


def test_a_switch_takes_the_value_forms_the_docs_show(pytester: pytest.Pytester) -> None:
    """`--perfgate-profile=off` (docs/profile.md) and `--perfgate-counts=false` work as the
    bare flags do; the bare flag still never takes the next argument (a test path)."""
    pytester.makeconftest("""
        from pytest_perfgate.plugin.hooks import gate_session
        def pytest_collection_finish(session):
            o = gate_session(session.config).options
            print(f"OPTIONS profile={o.profile} counts={o.counts}")
    """)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    for args, said in ((["--perfgate-profile=off", "--perfgate-counts=false"],
                        "OPTIONS profile=off counts=False"),
                       (["--perfgate-profile=always", "--perfgate-counts=true"],
                        "OPTIONS profile=always counts=True"),
                       (["--perfgate-profile", "--perfgate-counts", "test_x.py"],
                        "OPTIONS profile=always counts=True")):
        res = pytester.runpytest_subprocess("--co", "-s", "-p", "no:cacheprovider", *args)
        assert res.ret == 0, res.stderr.str()
        res.stdout.fnmatch_lines([said])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_an_empty_ini_or_environment_value_is_refused_naming_its_key(spec) -> None:
    """An ini key or variable set to nothing (an unset CI variable expands to that) is an
    error naming the key and the fix, never the default in disguise."""
    sources = [({"ini": {spec.name: ""}}, f"ini option {spec.ini}")]
    if spec.env:
        sources.append(({"env": {spec.env: " "}}, f"environment variable {spec.env}"))
    for given, where in sources:
        with pytest.raises(OptionError) as e:
            resolve(**given)
        text = str(e.value)
        assert text.startswith(f"{where} is set but empty: "), text
        assert text.endswith(", or unset it (an unset CI variable expands to nothing)"), text
        fix = text.removeprefix(f"{where} is set but empty: ")
        assert fix.split()[0] in ("use", "give"), text
        assert "''" not in text and "empty:" not in fix, text


def test_an_empty_switch_names_its_values() -> None:
    with pytest.raises(OptionError) as e:
        resolve(env={"PERFGATE_AB_CONFIRM": ""})
    assert str(e.value) == ("environment variable PERFGATE_AB_CONFIRM is set but empty: use "
                            "true or false, or unset it (an unset CI variable expands to "
                            "nothing)")
    with pytest.raises(OptionError) as e:
        resolve(ini={"unstable": ""})
    assert str(e.value) == ("ini option perfgate_unstable is set but empty: use fail or warn, "
                            "or unset it (an unset CI variable expands to nothing)")

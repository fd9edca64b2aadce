"""The ``perfgate`` command line, laid out like asv's ``commands/``: one module per command.

Each module here (not ``common_args``, not the ``_`` helpers) defines one :class:`Command`
and the typed ``run`` it calls; :func:`make_parser` imports them all, so a new command is one
new file. It never imports pytest: commands that need pytest start it in side processes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any, ClassVar


class Command:
    """One subcommand: its arguments, and what it does with them."""

    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str]

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        """Add this command's parser to ``subparsers`` and return it."""
        parser: argparse.ArgumentParser = subparsers.add_parser(
            cls.name, help=cls.help, description=cls.description)
        return parser

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        """The parsed arguments as one call of the module's ``run`` (Python's way in); its
        exit status. A ``UsageError`` it raises is printed as argparse's (exit 2)."""
        raise NotImplementedError


def commands() -> list[type[Command]]:
    """Every command of this package, in name order."""
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_") and mod.name != "common_args":
            importlib.import_module(f"{__name__}.{mod.name}")
    return sorted(Command.__subclasses__(), key=lambda c: c.name)


def make_parser() -> argparse.ArgumentParser:
    from pytest_perfgate.cli._out import version

    parser = argparse.ArgumentParser(
        prog="perfgate", description="pytest-perfgate's tools beside the pytest plugin: "
        "how far this runner's verdicts can be trusted, how to size a MuJoCo pool, what "
        "this machine looks like to perfgate, which failed runs a person accepted.")
    parser.add_argument("--version", action="version", version=f"perfgate {version()}")
    parser.add_argument("--debug", action="store_true",
                        help=f"show the traceback of an error that ends a command (also "
                             f"{DEBUG_ENV}=1); without it an error is one line and its exit "
                             "status (docs/cli.md)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in commands():
        p = cmd.setup_arguments(sub)
        p.set_defaults(run=cmd.run_from_args, parser=p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The console script ``perfgate``: parse, then run the chosen command."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser()
    parser.set_defaults(command_line="perfgate " + " ".join(args))
    ns = parser.parse_args(args)
    from pytest_perfgate.cli._out import UsageError
    from pytest_perfgate.modes.ab.checkout import term_as_interrupt
    from pytest_perfgate.session.options import OptionError

    restore = term_as_interrupt()  # SIGTERM (a cancelled job) unwinds like Ctrl-C
    try:
        return int(ns.run(ns))
    except (UsageError, OptionError) as e:
        sub: argparse.ArgumentParser = ns.parser
        sub.error(str(e))
    except BrokenPipeError:  # `perfgate history X | head`: the reader has all it wants
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:  # a command with more to say catches it itself
        print(f"perfgate {ns.command}: stopped (Ctrl-C or SIGTERM)", file=sys.stderr)
        return EXIT_STOPPED
    except Exception as e:  # the one boundary: never exit 1 ("a regression") for a crash
        return _infrastructure(ns, e)
    finally:
        restore()


EXIT_STOPPED = 130  # stopped by Ctrl-C or SIGTERM, every command (128 + SIGINT)
DEBUG_ENV = "PERFGATE_DEBUG"


def _infrastructure(ns: argparse.Namespace, e: Exception) -> int:
    """An error no command turned into its own message: exit 3 (never judged, never a pass),
    one line naming it, the traceback only with --debug; a --json caller still gets its
    document (the command's own :class:`Reply`)."""
    import traceback

    from pytest_perfgate.cli._out import Reply

    if isinstance(e, OSError) and e.filename is not None:
        what = f"{e.strerror or e}: {e.filename}" + (
            f" -> {e.filename2}" if e.filename2 is not None else "")
        message = f"{what} (check the path and its permissions)"
    else:
        message = (f"{type(e).__name__}: {e} (an internal error: please report it with the "
                   f"output of `perfgate --debug {ns.command} ...`)")
    if ns.debug or os.environ.get(DEBUG_ENV) == "1":
        traceback.print_exc()
    reply = Reply(f"perfgate {ns.command}", bool(getattr(ns, "json", False)))
    return reply.emit(lambda: reply.infra(message))


__all__ = ["Command", "commands", "main", "make_parser"]

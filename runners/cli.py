"""Command-line plumbing shared by the runners: bad input is one line and exit status 2.

Library code raises ``CliError`` (or a config's ``ValueError``) with a message for a person, and
``run_main`` prints it as ``<prog>: error: <message>``; an ``OSError`` (a full disk, a read-only
folder) is printed the same way, naming its file; any other exception is a bug and keeps its
traceback. ``parse`` reads a command line with tyro from a typed dataclass (its field docstrings
are the ``--help``), a parse failure one ``CliError`` line built from tyro's parse-error hook
(``tyro._errors``, private: pyproject.toml pins tyro). ``ensure_output_dir`` checks an output
folder before any work; ``writing(path)`` names the file of a failed write.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tyro
from tyro import _errors as tyro_errors  # tyro's parse-error hook: private, so tyro is pinned


class CliError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


#: A flag takes no value and has no negation: ``--dry-run``, no ``--no-dry-run``.
FLAGS = (tyro.conf.FlagCreatePairsOff, tyro.conf.DisallowNone)

def _message(event: tyro_errors.ParseErrorEvent) -> str:
    """One line for a parse failure tyro reports (its parse-error hook, ``tyro._errors``)."""

    def flag(arg: Any) -> str:
        return "/".join(arg.lowered.name_or_flags) if arg.lowered.name_or_flags else str(arg.lowered.metavar)

    if isinstance(event, tyro_errors.MissingArgs):
        names = [str(a.arg.lowered.metavar) if a.arg.is_positional() else flag(a.arg)
                 for a in event.missing_arguments]  # fmt: skip
        return f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} required"
    if isinstance(event, tyro_errors.InvalidChoice):
        choices = ", ".join(repr(c) for c in event.choices if c != "None")
        return f"{flag(event.argument)}: expected one of {choices}, got {event.value!r}"
    if isinstance(event, tyro_errors.BadValue):
        if event.reason == "too_few_values":
            return f"{flag(event.argument)} needs a value"
        return f"{flag(event.argument)} takes no value, got {event.offending_value!r}"
    if isinstance(event, tyro_errors.UnrecognizedArgs):
        return f"unknown option(s): {' '.join(event.tokens)}"
    if isinstance(event, tyro_errors.InstantiationFailure):
        text = event.message.splitlines()[0] if event.message else "bad value"
        if event.argument is None or text.startswith("--"):
            return text
        return f"{flag(event.argument)} expects {event.argument.lowered.metavar}: {text}"
    return f"bad command line ({type(event).__name__}); see {event.prog} --help"


def _raise(event: tyro_errors.ParseErrorEvent) -> None:
    raise CliError(_message(event))


def parse(
    cls: Any,
    argv: Sequence[str] | None,
    prog: str | None = None,
    *,
    description: str | None = None,
    unknown: bool = False,
    config: Sequence[Any] = FLAGS,
) -> Any:
    """``tyro.cli(cls)`` on ``argv`` (default ``sys.argv[1:]``), a parse failure one
    ``CliError`` line (from tyro's parse-error event, before it prints its box); ``--help``
    prints and exits 0. With ``unknown``: (the config, the options it does not know, a leading
    ``--`` dropped). A list option given no value is an error where its default is not empty,
    and so is each empty group of a repeatable one (``--grid`` alone)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with tyro_errors.on_parse_error(_raise):
            out = tyro.cli(cls, args=argv, prog=prog, description=description,
                           return_unknown_args=unknown, config=tuple(config) or None)
    except ValueError as err:  # a config dataclass's own validation, on the parsed values
        raise CliError(str(err)) from None
    cfg, extra = out if unknown else (out, [])
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, tuple) and ((f.default and value == ()) or () in value):
            raise CliError(f"--{f.name.replace('_', '-')} needs at least one value")
    return (cfg, extra[1:] if extra[:1] == ["--"] else extra) if unknown else cfg


def ensure_output_dir(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """Create the folder ``path`` (with its parents) and write and remove a small file in it,
    before any work is done; ``CliError`` naming ``what`` and the folder when that fails (a
    read-only or full disk, no permission, a file in the way)."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as err:
        raise CliError(f"cannot write {what} {folder}: {err.strerror or err}") from None
    return folder


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """An ``OSError`` raised inside that names no file is raised again naming ``path``."""
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror or str(err), str(path)) from err


def os_error_message(err: OSError) -> str:
    """``<file>: <reason>`` of an ``OSError`` (the reason alone when it names no file)."""
    reason = err.strerror or str(err)
    return f"{err.filename}: {reason}" if err.filename is not None else reason


def usable_cores() -> int:
    """The CPU cores this process may use (its affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def run_main(main: Callable[[Sequence[str] | None], int | None], prog: str) -> None:
    """Call ``main(sys.argv[1:])`` and turn user errors into one line and exit status 2."""
    try:
        code = main(sys.argv[1:])
    except CliError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except BrokenPipeError:  # the reader of stdout left (``--help | head``): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        raise SystemExit(0) from None
    except OSError as err:
        print(f"{prog}: error: {os_error_message(err)}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    raise SystemExit(code or 0)

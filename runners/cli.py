"""Command-line plumbing shared by the runners: one clear line and a non-zero exit on bad input.

Library code raises ``CliError`` (or ``ValueError`` from a config) with a message meant for a
person; ``run_main`` prints it as ``<prog>: error: <message>`` and exits with status 2, never with
a traceback. An ``OSError`` (a disk that fills up, a read-only or vanished folder) is not a bug
either: it is printed the same way, naming its file. A bug (any other exception) still shows its
traceback, because that is what a developer needs to fix it.

``parse`` is the one way a runner reads its command line: tyro, from a typed dataclass per command
(its field docstrings are the ``--help``), with tyro's multi-line error box reduced to one
``CliError`` line.

``ensure_output_dir`` is the one check every command makes on an output folder before it starts
working: created, and a file written in it, or one ``CliError`` naming the folder. ``writing(path)``
wraps a write whose failure must name its file (a full disk fails in ``write()``, whose ``OSError``
names no file).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tyro


class CliError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


#: A flag takes no value and has no negation: ``--dry-run``, no ``--no-dry-run``.
FLAGS = (tyro.conf.FlagCreatePairsOff, tyro.conf.DisallowNone)

_REWRITES = (
    (re.compile(r"^Error parsing (--[\w.-]+): (.*\1\b)"), r"\2"),  # the message names it
    (re.compile(r"^Error parsing (--[\w.-]+): "), r"\1: "),
    (re.compile(r"^Error parsing [\w.]+: "), ""),  # a nested config's own ValueError
    (re.compile(r"invalid literal for int\(\) with base 10: (.*)$"), r"expected an integer, got \1"),
    (re.compile(r"could not convert string to float: (.*)$"), r"expected a number, got \1"),
    (
        re.compile(r"^invalid choice (.*) for argument '(--[\w.-]+)'\. Expected one of \((.*)\)\.?$"),
        r"\2: expected one of \3, got \1",
    ),
    (re.compile(r"^Unrecognized options?: "), "unknown option(s): "),
    (re.compile(r"^Missing value for argument '(--[\w.-]+)'\..*$"), r"\1 needs a value"),
    (re.compile(r"^Missing from .*?: (\S+) .*$"), r"\1 is required"),
    (re.compile(r"no type matching (.+) could be instantiated from \[(.*)\]\.$"), r"expected \1, got \2"),
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(text: str) -> str:
    """The message of tyro's error box as one line: the lines between the box's top (a
    ``╭─ title ─╮`` line, or the title's ``-----`` rule where stdout is not UTF-8) and its first
    inner rule; a plain ``error:`` line as it is."""
    lines = [_ANSI.sub("", raw).strip() for raw in text.splitlines()]

    def rule(s: str) -> bool:
        return bool(s) and set(s) <= {"─", "-"}

    top = next((i for i, s in enumerate(lines) if s.startswith("╭") or rule(s)), None)
    body: list[str] = []
    if top is not None:
        for s in lines[top + 1 :]:
            s = s.strip("│").strip()
            if not s or rule(s) or s.startswith("╰"):
                break
            body.append(s)
    if not body:
        body = [s.split("error: ", 1)[1] for s in lines if "error: " in s][-1:]
    msg = " ".join(body) or "bad command line"
    for pattern, repl in _REWRITES:
        msg = pattern.sub(repl, msg)
    return msg


def parse(
    cls: Any,
    argv: Sequence[str] | None,
    prog: str | None = None,
    *,
    default: Any = None,
    description: str | None = None,
    unknown: bool = False,
    config: Sequence[Any] = FLAGS,
    add_help: bool = True,
) -> Any:
    """``tyro.cli(cls)`` on ``argv`` (default ``sys.argv[1:]``), its error box turned into one
    ``CliError`` line; ``--help`` prints and exits 0. With ``unknown``: (the config, the options
    it does not know, a leading ``--`` dropped). Without ``default`` (a command's own options),
    a list option given no value is an error where its default is not empty, and so is each
    empty group of a repeatable one (``--grid`` alone)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    helping = any(a in ("-h", "--help") for a in argv)
    kwargs: dict[str, Any] = {} if default is None else {"default": default}
    buf = io.StringIO()
    columns = os.environ.get("COLUMNS")
    try:
        if not helping:  # no line wrapping inside the error box
            os.environ["COLUMNS"] = "1000"
        with contextlib.redirect_stderr(buf):
            out = tyro.cli(cls, args=argv, prog=prog, description=description,
                           return_unknown_args=unknown, config=tuple(config) or None,
                           add_help=add_help, **kwargs)
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        raise CliError(_one_line(buf.getvalue())) from None
    except ValueError as err:  # a config dataclass's own validation, on the parsed values
        raise CliError(str(err)) from None
    finally:
        if not helping:
            if columns is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = columns
    cfg, extra = out if unknown else (out, [])
    for f in dataclasses.fields(cfg) if default is None else ():
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
    except OSError as err:
        print(f"{prog}: error: {os_error_message(err)}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    raise SystemExit(code or 0)

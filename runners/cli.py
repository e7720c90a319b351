"""Command-line plumbing shared by the runners: one clear line and a non-zero exit on bad input.

Library code raises ``CliError`` (or ``ValueError`` from a config) with a message meant for a
person; ``run_main`` prints it as ``<prog>: error: <message>`` and exits with status 2, never with
a traceback. An ``OSError`` (a disk that fills up, a read-only or vanished folder) is not a bug
either: it is printed the same way, naming its file. A bug (any other exception) still shows its
traceback, because that is what a developer needs to fix it.

``ensure_output_dir`` is the one check every command makes on an output folder before it starts
working: created, and a file written in it, or one ``CliError`` naming the folder. ``writing(path)``
wraps a write whose failure must name its file (a full disk fails in ``write()``, whose ``OSError``
names no file).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


class CliError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


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
